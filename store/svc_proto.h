/*
 * svc_proto.h - the protocol between co-located ("dummy") clients
 * (dummy.c) and the store service of their host (service.c): what travels
 * on the service's unix socket and on its TCP control port.
 *
 * Unix socket (abstract "@mooncake_client_<PORT>.sock", SOCK_SEQPACKET,
 * as upstream names it): a client connects, sends svc_hello_t with its
 * memfd attached (SCM_RIGHTS): the shared memory its buffers live in. The
 * service checks the peer (SO_PEERCRED: same user or the configured group),
 * maps the memfd and answers svc_welcome_t: the session id and a secret
 * token. The connection stays open for the session's life: its end of file
 * on either side ends the session (the service waits for the session's
 * calls in flight, then unmaps its memory).
 *
 * More memory for a session (a co-located client's mc_store_register_buffer
 * of mc_store_shared_alloc memory): on the same connection, svc_share_t with
 * that memfd attached; it takes the session's offsets [off, off + len) (off
 * past every earlier region of the session); the answer is an svc_welcome_t
 * whose status says whether the service mapped it (refused: why in name).
 * The service keeps it mapped until the session ends. A client that shares
 * again after a service restart sends its hello, then each share again.
 *
 * Call channels (the co-located client's sync calls, without a thread hop
 * on either side): a client connects to the same unix socket again and
 * sends svc_channel_t {SVC_OP_CHANNEL, session, token} (no memfd); the
 * service checks the peer and the session and answers svc_welcome_t. Then
 * each call is one message: svc_call_t and the body (the body the control
 * port would carry, SESSION and TOKEN included), at most SVC_CHAN_MAX bytes
 * in all (a larger body goes to the control port); the answer is one
 * message: svc_answer_t and the answer's body. One call at a time per
 * channel; a client that stops waiting (its timeout) closes the channel. A
 * service worker reads the call and runs it on its own thread; the
 * client's calling thread sends and waits. Anything that is not a call
 * closes the channel (logged).
 *
 * TCP control port (PORT, msgpack RPC as everywhere; methods MC_RPC_SVC_*
 * in rpc/methods.h, fields MC_F_SVC_* in rpc/fields.h): every body carries
 * {SVC_SESSION, SVC_TOKEN}; buffers are (offset, length) pairs inside one
 * region of the session's memory, checked by the service (outside: INVALID_PARAMS, logged,
 * nothing touched). An unknown session (the service restarted) is
 * MC_ERR_CLIENT_NOT_FOUND: the client shares its memory again and retries.
 *
 *   SVC_PING          {}                                  -> {NAME: service segment}
 *   SVC_PUT           {KEY, PARTS: [off, len, ...], CONFIG} -> {}
 *   SVC_GET           {KEY, PARTS: [off, len]}           -> {SIZE}; BUFFER_OVERFLOW + {SIZE}
 *   SVC_GET_RANGES    {KEY, PARTS: [off, len, ...], SRC: [from, ...]} (one SRC per pair: len
 *                                                         bytes of the value at from)
 *                                                         -> {STATUSES: bytes or status}
 *   SVC_BATCH_PUT     {KEYS, PARTS (one pair per key), CONFIG} -> {STATUSES}
 *   SVC_BATCH_GET     {KEYS, PARTS (one pair per key)}   -> {STATUSES: bytes or status}
 *   SVC_EXIST         {KEY}                               -> {EXISTS}
 *   SVC_BATCH_EXIST   {KEYS}                              -> {STATUSES: 1, 0 or status}
 *   SVC_REMOVE        {KEY, FORCE}                        -> {}
 *   SVC_REMOVE_REGEX  {REGEX, FORCE}                      -> {COUNT}
 *   SVC_REMOVE_ALL    {FORCE}                             -> {COUNT}
 *   SVC_BATCH_REMOVE  {KEYS, FORCE}                       -> {STATUSES}
 *   SVC_GET_SIZE      {KEY}                               -> {SIZE}
 *   SVC_QUERY         {KEY}                               -> {COUNT, REPLICAS: [{NAME, ADDR,
 *                                                            SIZE, STATUS: complete, EXISTS:
 *                                                            disk}]}
 * CONFIG: {1: replica_num, 2: with_soft_pin, 3: [preferred segment names],
 *          4: upsert, 5: with_hard_pin, 6: soft_pin_action, 7: soft_pin_ttl_ms}
 * (mc_replicate_config_t; 4: the put replaces an existing object).
 */
#ifndef MC_STORE_SVC_PROTO_H
#define MC_STORE_SVC_PROTO_H

#include <stdint.h>

#define SVC_MAGIC 0x4d435356u /* "MCSV" */
#define SVC_VERSION 1u
#define SVC_DEFAULT_PORT 50052
#define SVC_MAX_PARTS 4096 /* pairs in one PARTS list */

/* The unix socket's name for a service on PORT (no leading NUL). */
#define SVC_SOCK_FMT "mooncake_client_%u.sock"

typedef struct svc_hello {
    uint32_t magic, version;
    uint64_t len; /* bytes of the memfd attached */
} svc_hello_t;

#define SVC_OP_SHARE 1u
#define SVC_MAX_REGIONS 64u /* memfds of one session: the hello's and 63 shares */

typedef struct svc_share {
    uint32_t magic, op; /* SVC_MAGIC, SVC_OP_SHARE */
    uint64_t off, len;  /* the session's offsets it takes */
} svc_share_t;

#define SVC_OP_CHANNEL 2u
#define SVC_CHAN_MAX 65536u /* bytes of one message on a call channel */

typedef struct svc_channel {
    uint32_t magic, op; /* SVC_MAGIC, SVC_OP_CHANNEL */
    uint64_t session, token;
} svc_channel_t;

typedef struct svc_call {
    uint32_t magic;  /* SVC_MAGIC */
    uint32_t method; /* MC_RPC_SVC_* */
} svc_call_t;        /* followed by the body */

typedef struct svc_answer {
    uint32_t magic; /* SVC_MAGIC */
    int32_t status; /* mc_status_t of the call */
} svc_answer_t;     /* followed by the answer's body */

typedef struct svc_welcome {
    uint32_t magic;
    int32_t status; /* mc_status_t: MC_OK or why the session was refused */
    uint64_t session, token;
    char name[256]; /* the service's segment name; why, when refused */
} svc_welcome_t;

#endif /* MC_STORE_SVC_PROTO_H */
