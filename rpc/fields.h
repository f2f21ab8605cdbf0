/*
 * fields.h - field ids of msgpack bodies (the keys of the body map), shared
 * by every service: the store protocol (store/proto.h documents its bodies),
 * the embedded metadata service and the transfer engine. Part of the wire
 * protocol: never renumber, only add.
 */
#ifndef MC_RPC_FIELDS_H
#define MC_RPC_FIELDS_H

enum mc_proto_field {
    MC_F_CLIENT_ID = 1, /* [hi, lo] */
    MC_F_KEY = 2,       /* bin */
    MC_F_KEYS = 3,      /* [bin] */
    MC_F_SIZE = 4,      /* uint, bytes */
    MC_F_SIZES = 5,     /* [uint] */
    /* {1: replica_num, 2: with_soft_pin, 3: [preferred names], 4: soft_pin_ttl_us,
        5: soft pin action (0 preserve, 1 enable, 2 disable), 6: hard_pin, 7: upsert} */
    MC_F_CONFIG = 6,
    MC_F_FORCE = 7,       /* bool */
    MC_F_REGEX = 8,       /* str, PCRE2 (src/util/regex.h) */
    MC_F_SEGMENT = 9,     /* {1: id, 2: name, 3: base, 4: size, 5: te_endpoint} */
    MC_F_SEGMENTS = 10,   /* [segment] */
    MC_F_SEGMENT_ID = 11, /* [hi, lo] */
    MC_F_VALUE = 12,      /* bin */
    MC_F_PREFIX = 13,     /* bin */

    MC_F_REPLICAS = 20, /* [{1: address, 2: size, 3: segment_id, 4: status, 5: segment_name,
                            6: te_endpoint, 7: kind (absent = 0 MEMORY, 1 DISK)}] */
    MC_F_LEASE_TTL_US = 21,
    MC_F_ITEMS = 22,
    MC_F_EXISTS = 23, /* bool, or [bool] in batch responses */
    MC_F_COUNT = 24,
    MC_F_VIEW_VERSION = 25,
    MC_F_CLIENT_STATUS = 26,
    MC_F_TEXT = 27,
    MC_F_TRUNCATED = 28,
    MC_F_DRAIN_UNTIL_US = 29,
    MC_F_ERROR = 30,    /* str: why the call failed */
    MC_F_STATUSES = 31, /* [int] per item */
    MC_F_ENTRIES = 32,
    MC_F_STATUS = 33,   /* int, inside ITEMS */
    MC_F_LEADER = 34,   /* str: "host:port" of the leader, in NOT_LEADER replies (when known) */
    MC_F_PUT_ID = 35,   /* uint: PutStart / BatchPutStart: the client's id of the put, so a
                           resend is recognised (store/master.h put_id) */
    MC_F_RELEASE = 36,  /* bool: BATCH_GET_REPLICA_LIST: the reader will send LEASE_RELEASE
                           for these keys once its reads are done; GET_REPLICA_LIST /
                           OFFLOAD_LOAD with WAIT_US: for the copy a node loaded */
    MC_F_GRANT_US = 37, /* uint: the master's time of a release-able grant (the reply of
                           such a call; sent back in LEASE_RELEASE) */

    /* transfer engine */
    MC_F_ADDR = 40,      /* uint: absolute address in the target */
    MC_F_LENGTH = 41,    /* uint: bytes */
    MC_F_NAME = 42,      /* str: segment name */
    MC_F_HOST = 43,      /* str: where the segment's engine listens */
    MC_F_PORT = 44,      /* uint */
    MC_F_PROTOCOLS = 45, /* [str]: transports it accepts */
    MC_F_BUFFERS = 46,   /* [{ADDR, LENGTH, LOCATION}] */
    MC_F_LOCATION = 47,  /* str: "cpu:N", "cuda:N" */
    /* rdma transport: in the descriptor, and the handshake bodies */
    MC_F_RDMA = 48,       /* {NICS, MATRIX}: the segment's NICs and topology matrix */
    MC_F_RKEYS = 49,      /* [uint]: a buffer's rkey on each NIC of NICS, in order */
    MC_F_NICS = 50,       /* [{NAME, GID, LID, MTU}] */
    MC_F_MATRIX = 51,     /* str: {location: [[preferred NICs], [secondary NICs]]} */
    MC_F_GID = 52,        /* bin 16 */
    MC_F_LID = 53,        /* uint */
    MC_F_MTU = 54,        /* uint, bytes: min(active MTU, configured MTU) of the sender */
    MC_F_QPNS = 55,       /* [uint]: the sender's QP numbers, QP i pairs with QP i */
    MC_F_NIC = 56,        /* str: the sender's NIC */
    MC_F_PEER_NIC = 57,   /* str: the receiver's NIC */
    MC_F_LINK_LAYER = 58, /* uint: 1 InfiniBand, 2 Ethernet (verbs.h rv_link_layer) */
    MC_F_GID_TYPE = 59,   /* uint: type of the GID sent (verbs.h rv_gid_type) */
    /* rdma handshake, continued (90..99 are the rdma transport's) */
    MC_F_PSN = 90,      /* uint: the sender's first send PSN (24 bits) on every QP */
    MC_F_RD_ATOM = 91,  /* uint: RDMA READs the sender serves at once per QP */
    MC_F_INSTANCE = 92, /* uint: the sender's rdma transport instance (random at install): a
                           new one means the peer restarted and its old QPs are gone */
    MC_F_READY = 93,    /* bool, in a CONNECT: the sender sends RDMA_READY once at RTS */
    /* shm transport: in the descriptor (80..89 are the shm transport's) */
    MC_F_SHM = 80,     /* {HOST, BOOT_ID, SOCKET, REGIONS}: the segment's shared memory */
    MC_F_BOOT_ID = 81, /* str: the kernel's boot id (with HOST: which host it runs on) */
    MC_F_SOCKET = 82,  /* str: abstract unix socket name (without the leading NUL) */
    MC_F_REGIONS = 83, /* [id, addr, length, ...]: memfd regions, by the owner's addresses */
    /* store service (store/svc_proto.h; 110..119 are its) */
    MC_F_SVC_SESSION = 110, /* uint: a co-located client's session */
    MC_F_SVC_TOKEN = 111,   /* uint: the session's secret */
    MC_F_SVC_PARTS = 112,   /* [offset, length, ...]: buffers in the session's shared memory */
    MC_F_SVC_SRC = 113,     /* [offset, ...]: where each range starts in the value (GET_RANGES) */
    /* persistent tier */
    MC_F_CLUSTER_ID = 70, /* str */
    MC_F_PERSIST = 71,    /* uint: 0 off, 1 async, 2 eager */
    MC_F_RANGES = 60,     /* [addr, length, addr, length, ...] (TE_READV) */
    /* metadata listing, paged (META_LIST; 100..109 are the metadata service's) */
    MC_F_AFTER = 100, /* bin: list the keys after this one (the last key of the previous page) */
    MC_F_MORE = 101,  /* bool: more entries follow; ask again with AFTER = the last key */
    /* authentication handshake (AUTH_HELLO, AUTH_PROOF; 110..119 are its) */
    MC_F_NONCE = 110, /* bin 32: the sender's fresh nonce */
    MC_F_PROOF = 111, /* bin 32: HMAC-SHA256 proof (util/auth.h) */
    /* operators' queries (QUERY_KEY, LIST_SEGMENTS, LIST_KEYS): 120..129 */
    MC_F_COMPLETE = 120,      /* bool: the put finished */
    MC_F_LEASE_LEFT_US = 121, /* uint: read lease left (0 = none) */
    MC_F_PIN_LEFT_US = 122,   /* uint: soft pin left (0 = none) */
    MC_F_IDLE_US = 123,       /* uint: since the last access */
    MC_F_DISK = 124,          /* bool: has a DISK replica (persistent tier) */
    MC_F_NREP = 125,          /* uint: memory replicas */
    MC_F_ENDPOINT = 126,      /* str: a segment's transfer-engine endpoint */
    MC_F_USED = 127,          /* uint: bytes of live allocations */
    MC_F_ALLOCS = 128,        /* uint: live allocations */
    MC_F_STATE = 129,         /* str: "MOUNTED" or "UNMOUNTING" */
    /* node-local offload (130..139) */
    MC_F_WAIT_US = 130,   /* uint: OFFLOAD_POLL / OFFLOAD_LOAD / GET_REPLICA_LIST: the caller
                             accepts an answer held up to this long (until there is work, or the
                             load of a disk-only object is done) */
    MC_F_HELD_US = 131,   /* uint: how long the master held the answer (the lease in it starts
                             that much after the call arrived) */
    MC_F_LOADED = 132,    /* uint: OFFLOAD_PROGRESS: bytes from the start of the object loaded so
                             far; in the answer to a held GET_REPLICA_LIST / OFFLOAD_LOAD that gave
                             HAVE: the load is in flight, its range (the replica, PROCESSING) holds
                             LOADED bytes (not verified: copy them, then ask again with HAVE) */
    MC_F_HAVE = 133,      /* uint: GET_REPLICA_LIST / OFFLOAD_LOAD with WAIT_US: the reader takes
                             partial answers (LOADED) and has copied HAVE bytes of the load */
    MC_F_LOAD_ID = 134,   /* uint: a LOAD's id. In OFFLOAD_POLL: the node takes them (its LOAD
                             items have a 6th element, the id); in OFFLOAD_PROGRESS / OFFLOAD_DONE:
                             the load they are about; in a partial answer: the load in flight; in a
                             reader's call with HAVE: the load its HAVE bytes are of, and echoed in
                             the final answer only when the copy listed is that load's */
    MC_F_OWN_DISK = 135,  /* uuid: GET_REPLICA_LIST (held or not) / OFFLOAD_LOAD with WAIT_US: the
                             caller owns this segment and reads its disk itself: an object only on
                             that segment's disk is listed at once (its LOCAL_DISK replica), not
                             loaded, unless this read makes promotion on hit admit it; uint 1 in
                             such an answer (the caller reads its file) */
    MC_F_DISK_ID = 136,   /* bin 1..64: OFFLOAD_POLL: the identity of the node's offload
                             directory (made at its first use, kept in it): DELETEs kept for the
                             node when its last segment went find it under any segment name, and
                             a node back before its last segment expired takes over that
                             segment's LOCAL_DISK replicas (its files) at its report */
    MC_F_ANSWER_ID = 137, /* uint: in an OFFLOAD_POLL answer that hands out DELETEs: its number */
    MC_F_DONE_ID = 138,   /* uint: OFFLOAD_POLL: the number of the last answer whose DELETEs the
                             node did (0: none yet); the DELETEs of another answer are handed out
                             again (that answer was lost). Without it: all done */
};

#endif /* MC_RPC_FIELDS_H */
