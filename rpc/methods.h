/*
 * methods.h - RPC method ids of every mooncake-c service, and the field ids
 * of their bodies. Ids are part of the wire protocol: never renumber, only
 * add. Ranges: 1-99 core/diagnostics, 100-299 store master, 300-399 embedded
 * transfer metadata, 400-499 transfer engine (handshake, data), 500-549 the
 * store service of co-located clients (store/svc_proto.h documents them).
 */
#ifndef MC_RPC_METHODS_H
#define MC_RPC_METHODS_H

enum mc_rpc_method {
    MC_RPC_ECHO = 1,      /* body echoed back unchanged (tests, benchmarks) */
    MC_RPC_ECHO_SLOW = 2, /* echo after {1: delay_us} (tests) */
    MC_RPC_TEST_PUT = 3,  /* {1: offset} + payload stored into the server's region (tests) */
    MC_RPC_TEST_GET = 4,  /* {1: offset, 2: length} -> payload from the region (tests) */
    /* authentication (util/auth.h): the first frames of a connection to a
     * server with a secret. HELLO request {NONCE} -> {NONCE, PROOF} (the
     * server's); PROOF notify {PROOF} (the client's); anything else first is
     * answered MC_ERR_REJECT_HANDSHAKE + {ERROR} and the connection closed */
    MC_RPC_AUTH_HELLO = 10,
    MC_RPC_AUTH_PROOF = 11,

    /* store master (store/proto.h documents each body) */
    MC_RPC_SERVICE_READY = 100,
    MC_RPC_PUT_START = 101,
    MC_RPC_PUT_END = 102,
    MC_RPC_PUT_REVOKE = 103,
    MC_RPC_BATCH_PUT_START = 104,
    MC_RPC_BATCH_PUT_END = 105,
    MC_RPC_BATCH_PUT_REVOKE = 106,
    MC_RPC_GET_REPLICA_LIST = 107, /* {KEY[, WAIT_US, HAVE, RELEASE]} -> {REPLICAS, LEASE_TTL_US[,
                                      HELD_US, GRANT_US, VIEW_VERSION]}; WAIT_US: an object only
                                      on a node's disk is loaded and the answer held as
                                      OFFLOAD_LOAD's */
    MC_RPC_BATCH_GET_REPLICA_LIST = 108,
    MC_RPC_GET_REPLICA_LIST_BY_REGEX = 109,
    MC_RPC_EXIST_KEY = 110,
    MC_RPC_BATCH_EXIST_KEY = 111,
    MC_RPC_REMOVE = 112,
    MC_RPC_REMOVE_BY_REGEX = 113,
    MC_RPC_REMOVE_ALL = 114,
    MC_RPC_BATCH_REMOVE = 115,
    MC_RPC_MOUNT_SEGMENT = 116,
    MC_RPC_REMOUNT_SEGMENT = 117,
    MC_RPC_UNMOUNT_SEGMENT = 118,
    MC_RPC_PING = 119,
    MC_RPC_GET_FSDIR = 120,
    /* operators' queries: no lease, no access recorded (mooncake-cli) */
    MC_RPC_QUERY_KEY = 121,     /* {KEY} -> {SIZE, COMPLETE, DISK, REPLICAS, LEASE_LEFT_US,
                                   PIN_LEFT_US, IDLE_US} */
    MC_RPC_LIST_SEGMENTS = 122, /* {[CLIENT_ID]: only its} -> {SEGMENTS: [{SEGMENT_ID, NAME,
                                   ENDPOINT, ADDR, SIZE, USED, ALLOCS, STATE, CLIENT_ID}]} */
    MC_RPC_LIST_KEYS = 123,     /* {[REGEX], [COUNT: limit]} -> {ENTRIES: [{KEY, SIZE, NREP,
                                   DISK, COMPLETE, LEASE_LEFT_US}], TRUNCATED} */
    /* persistent tier (store/tier.h) */
    MC_RPC_TIER_ADD = 130,
    /* node-local offload (store/master_offload.c, store/client_offload.c) */
    MC_RPC_OFFLOAD_POLL = 131, /* {CLIENT_ID, SEGMENT_ID, COUNT[, WAIT_US, LOAD_ID]} -> {ITEMS:
                                  [[op, evict, KEY, size, offset(, load id)]]}: requests for the
                                  node (with WAIT_US: held until there are some, or WAIT_US
                                  passed; with LOAD_ID: the node takes load ids; COUNT 0: none,
                                  answered at once: the segment offloads, before the node's
                                  start scan) */
    MC_RPC_OFFLOAD_DONE = 132, /* {CLIENT_ID, SEGMENT_ID, KEY, SIZE, STATUS[, LOAD_ID]} -> {} */
    MC_RPC_LDISK_REPORT = 133, /* {CLIENT_ID, SEGMENT_ID, KEY, SIZE} -> {}: a file found at start */
    MC_RPC_LDISK_DROP = 134,   /* {CLIENT_ID, SEGMENT_ID, KEY} -> {}: the node lost the file */
    MC_RPC_OFFLOAD_LOAD = 135, /* {KEY} -> {}: a reader asks for a disk-only object in DRAM;
                                  {KEY, WAIT_US[, HAVE, LOAD_ID, RELEASE]} -> {REPLICAS,
                                  LEASE_TTL_US, HELD_US[, LOADED, LOAD_ID, GRANT_US,
                                  VIEW_VERSION]}: held until its node
                                  loaded it, then GetReplicaList's answer (RELEASE: the reader
                                  releases the loaded copy's lease once it copied it) */
    MC_RPC_LEASE_RELEASE = 136, /* {KEYS, GRANT_US, VIEW_VERSION} -> {COUNT}: a reader is done
                                   with the leases a BATCH_GET_REPLICA_LIST {RELEASE}, or a
                                   held load's answer {RELEASE}, granted
                                   (store/master.h mc_master_batch_lease_release) */

    /* node-local offload: a node's write batch answered in one call */
    MC_RPC_OFFLOAD_DONE_BATCH = 137, /* {CLIENT_ID, SEGMENT_ID, KEYS, SIZES} -> {STATUSES}: each
                                        file as OFFLOAD_DONE with STATUS OK would be; one
                                        answer, durable once */
    /* node-local offload: progressive loads (a reader copies what is in while the rest is read) */
    MC_RPC_OFFLOAD_PROGRESS = 138, /* {CLIENT_ID, SEGMENT_ID, KEY, SIZE, LOADED[, LOAD_ID]} -> {}:
                                      a LOAD in flight has its first LOADED bytes in the node's
                                      segment (not verified yet) */
    /* node-local offload: a node's start report in few calls (LDISK_REPORT: to an older master) */
    MC_RPC_LDISK_REPORT_BATCH = 139, /* {CLIENT_ID, SEGMENT_ID, KEYS, SIZES} -> {STATUSES}: each
                                        file as LDISK_REPORT would be (OBJECT_ALREADY_EXISTS,
                                        OBJECT_NOT_FOUND: the key exists, or was removed: the
                                        node deletes the file); one answer, durable once */

    /* transfer engine (transport/): descriptor and TCP data */
    MC_RPC_TE_DESC = 400,  /* {} -> {NAME, HOST, PORT, PROTOCOLS, BUFFERS} */
    MC_RPC_TE_WRITE = 401, /* {ADDR} + payload written at ADDR -> {} */
    MC_RPC_TE_READ = 402,  /* {ADDR, LENGTH} -> payload read from ADDR */
    MC_RPC_TE_READV = 403, /* {RANGES} -> payload: the ranges' bytes back to back */

    /* rdma transport (transport/rdma/): endpoint handshake */
    /* {NAME, HOST, PORT, NIC, PEER_NIC, GID, LID, MTU, LINK_LAYER, GID_TYPE, PSN, RD_ATOM,
     *  INSTANCE, READY, QPNS} -> {NIC, GID, LID, MTU, LINK_LAYER, GID_TYPE, PSN, RD_ATOM,
     *  INSTANCE, QPNS} (older peers send and read the first ones only);
     * MC_ERR_REJECT_HANDSHAKE + {ERROR} when refused (simultaneous open that
     * the receiver wins, unknown NIC), MC_ERR_INVALID_PARAMS + {ERROR} for a
     * malformed body */
    MC_RPC_RDMA_CONNECT = 410,
    /* {NAME, NIC, PEER_NIC, QPNS}: the sender dropped that endpoint -> {} */
    MC_RPC_RDMA_DISCONNECT = 411,
    /* {NAME, NIC, PEER_NIC, QPNS}: the active side's QPs are at RTS: the
     * passive side may post (it holds its queue until then) */
    MC_RPC_RDMA_READY = 412,

    /* store service (store/svc_proto.h): co-located clients' calls */
    MC_RPC_SVC_PING = 500,
    MC_RPC_SVC_PUT = 501,
    MC_RPC_SVC_GET = 502,
    MC_RPC_SVC_BATCH_PUT = 503,
    MC_RPC_SVC_BATCH_GET = 504,
    MC_RPC_SVC_EXIST = 505,
    MC_RPC_SVC_BATCH_EXIST = 506,
    MC_RPC_SVC_REMOVE = 507,
    MC_RPC_SVC_REMOVE_REGEX = 508,
    MC_RPC_SVC_REMOVE_ALL = 509,
    MC_RPC_SVC_BATCH_REMOVE = 510,
    MC_RPC_SVC_GET_SIZE = 511,
    MC_RPC_SVC_QUERY = 512,
    MC_RPC_SVC_GET_RANGES = 513,
    MC_RPC_SVC_LAST = MC_RPC_SVC_GET_RANGES, /* the service serves PUT..LAST */

    /* embedded transfer-metadata service */
    MC_RPC_META_GET = 300,
    MC_RPC_META_PUT = 301,
    MC_RPC_META_DEL = 302,
    MC_RPC_META_LIST = 303,
};

#endif /* MC_RPC_METHODS_H */
