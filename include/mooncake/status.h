/*
 * mooncake/status.h - the one status type of libmooncake.
 *
 * Every public and internal function that can fail returns mc_status_t.
 * Non-negative values are not errors: MC_OK (done), MC_INPROGRESS (accepted,
 * a callback will report the outcome), MC_AGAIN (would block / need more
 * bytes; never a protocol error). Negative values are errors.
 *
 * Numbering:
 *   0 .. -1999      store codes: upstream Mooncake's ErrorCode names and numbers
 *                   (mooncake-store/include/types.h), kept so that operators and
 *                   tools that know upstream read ours the same way.
 *   -3000 - N       transfer-engine codes: upstream's TE error N (error.h) moved
 *                   by -3000, because upstream's TE numbers collide with the
 *                   store's (-1 is both INTERNAL_ERROR and ERR_INVALID_ARGUMENT).
 *   -4000 ..        codes of mooncake-c itself (cancellation, protocol, config).
 *
 * mc_status_str() returns the code's name ("OBJECT_NOT_FOUND"), mc_status_msg()
 * a short sentence. Both return static strings, never NULL, and are safe from
 * any thread.
 */
#ifndef MOONCAKE_STATUS_H
#define MOONCAKE_STATUS_H

#include <stdint.h>

#include "mooncake/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define MC_STATUS_TABLE(X)                                                                         \
    X(MC_OK, 0, "success")                                                                         \
    X(MC_INPROGRESS, 1, "operation in progress; its callback will report the outcome")             \
    X(MC_AGAIN, 2, "would block or needs more input")                                              \
    /* store codes: upstream ErrorCode */                                                          \
    X(MC_ERR_INTERNAL_ERROR, -1, "internal error")                                                 \
    X(MC_ERR_NOT_IMPLEMENTED, -2, "not implemented")                                               \
    X(MC_ERR_BUFFER_OVERFLOW, -10, "buffer too small")                                             \
    X(MC_ERR_SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")                           \
    X(MC_ERR_SEGMENT_NOT_FOUND, -101, "segment not found")                                         \
    X(MC_ERR_SEGMENT_ALREADY_EXISTS, -102, "segment already exists")                               \
    X(MC_ERR_CLIENT_NOT_FOUND, -103, "client not found")                                           \
    X(MC_ERR_NO_AVAILABLE_HANDLE, -200, "no space available in any segment")                       \
    X(MC_ERR_INVALID_VERSION, -300, "invalid version")                                             \
    X(MC_ERR_INVALID_KEY, -400, "invalid key")                                                     \
    X(MC_ERR_WRITE_FAIL, -500, "write failed")                                                     \
    X(MC_ERR_INVALID_PARAMS, -600, "invalid parameters")                                           \
    X(MC_ERR_ILLEGAL_CLIENT, -601, "request from a client that does not own the object")           \
    X(MC_ERR_INVALID_WRITE, -700, "invalid write")                                                 \
    X(MC_ERR_INVALID_READ, -701, "invalid read")                                                   \
    X(MC_ERR_INVALID_REPLICA, -702, "invalid replica")                                             \
    X(MC_ERR_REPLICA_IS_NOT_READY, -703, "replica is not ready")                                   \
    X(MC_ERR_OBJECT_NOT_FOUND, -704, "object not found")                                           \
    X(MC_ERR_OBJECT_ALREADY_EXISTS, -705, "object already exists")                                 \
    X(MC_ERR_OBJECT_HAS_LEASE, -706, "object has a lease")                                         \
    X(MC_ERR_LEASE_EXPIRED, -707, "lease expired before the operation finished")                   \
    X(MC_ERR_OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")                   \
    X(MC_ERR_OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")                   \
    X(MC_ERR_REPLICA_NOT_FOUND, -710, "replica not found")                                         \
    X(MC_ERR_REPLICA_ALREADY_EXISTS, -711, "replica already exists")                               \
    X(MC_ERR_REPLICA_IS_GONE, -712, "replica is gone")                                             \
    X(MC_ERR_REPLICA_NOT_IN_LOCAL_MEMORY, -713, "replica not in local memory")                     \
    X(MC_ERR_OBJECT_REPLICA_BUSY, -714, "object replica busy")                                     \
    X(MC_ERR_TRANSFER_FAIL, -800, "transfer failed")                                               \
    X(MC_ERR_CHECKSUM_MISMATCH, -801, "checksum mismatch")                                         \
    X(MC_ERR_RPC_FAIL, -900, "rpc failed")                                                         \
    X(MC_ERR_RPC_TIMEOUT, -901, "rpc timed out")                                                   \
    X(MC_ERR_ETCD_OPERATION_ERROR, -1000, "coordinator operation error")                           \
    X(MC_ERR_ETCD_KEY_NOT_EXIST, -1001, "coordinator key does not exist")                          \
    X(MC_ERR_ETCD_TRANSACTION_FAIL, -1002, "coordinator transaction failed")                       \
    X(MC_ERR_ETCD_CTX_CANCELLED, -1003, "coordinator context cancelled")                           \
    X(MC_ERR_OPLOG_ENTRY_NOT_FOUND, -1004, "oplog entry not found")                                \
    X(MC_ERR_INCOMPLETE_OPLOG_CATCH_UP, -1007, "oplog catch-up incomplete")                        \
    X(MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable in current status")                \
    X(MC_ERR_UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in current mode")                    \
    X(MC_ERR_NOT_SUPPORTED, -1012, "not supported")                                                \
    X(MC_ERR_FILE_NOT_FOUND, -1100, "file not found")                                              \
    X(MC_ERR_FILE_OPEN_FAIL, -1101, "file open failed")                                            \
    X(MC_ERR_FILE_READ_FAIL, -1102, "file read failed")                                            \
    X(MC_ERR_FILE_WRITE_FAIL, -1103, "file write failed")                                          \
    X(MC_ERR_FILE_INVALID_BUFFER, -1104, "invalid file buffer")                                    \
    X(MC_ERR_FILE_LOCK_FAIL, -1105, "file lock failed")                                            \
    X(MC_ERR_FILE_INVALID_HANDLE, -1106, "invalid file handle")                                    \
    X(MC_ERR_SERIALIZE_FAIL, -1501, "serialization failed")                                        \
    X(MC_ERR_DESERIALIZE_FAIL, -1502, "deserialization failed")                                    \
    X(MC_ERR_PERSISTENT_FAIL, -1503, "persistence failed")                                         \
    /* transfer-engine codes: upstream TE error N is -3000 + N */                                  \
    X(MC_ERR_INVALID_ARGUMENT, -3001, "invalid argument")                                          \
    X(MC_ERR_TOO_MANY_REQUESTS, -3002, "too many requests for the batch")                          \
    X(MC_ERR_ADDRESS_NOT_REGISTERED, -3003, "address not registered")                              \
    X(MC_ERR_BATCH_BUSY, -3004, "batch still has requests in flight")                              \
    X(MC_ERR_DEVICE_NOT_FOUND, -3006, "device not found")                                          \
    X(MC_ERR_ADDRESS_OVERLAPPED, -3007, "address range overlaps a registered range")               \
    X(MC_ERR_DNS, -3101, "name resolution failed")                                                 \
    X(MC_ERR_SOCKET, -3102, "socket error")                                                        \
    X(MC_ERR_MALFORMED, -3103, "malformed descriptor")                                             \
    X(MC_ERR_REJECT_HANDSHAKE, -3104, "handshake rejected")                                        \
    X(MC_ERR_METADATA, -3200, "metadata error")                                                    \
    X(MC_ERR_ENDPOINT, -3201, "endpoint error")                                                    \
    X(MC_ERR_CONTEXT, -3202, "context error")                                                      \
    X(MC_ERR_NUMA, -3300, "numa error")                                                            \
    X(MC_ERR_CLOCK, -3301, "clock error")                                                          \
    X(MC_ERR_MEMORY, -3302, "memory error")                                                        \
    X(MC_ERR_TE_NOT_IMPLEMENTED, -3303, "transport operation not implemented")                     \
    /* mooncake-c's own codes */                                                                   \
    X(MC_ERR_CANCELED, -4001, "canceled: the owner is shutting down")                              \
    X(MC_ERR_NOMEM, -4002, "out of memory")                                                        \
    X(MC_ERR_PROTOCOL, -4003, "protocol error: malformed or oversized input")                      \
    X(MC_ERR_CONN_CLOSED, -4004, "connection closed")                                              \
    X(MC_ERR_TIMEOUT, -4005, "timed out")                                                          \
    X(MC_ERR_CONFIG, -4006, "configuration error")                                                 \
    X(MC_ERR_IO, -4007, "i/o error")                                                               \
    X(MC_ERR_NO_METHOD, -4008, "no handler for rpc method")                                        \
    X(MC_ERR_STATE, -4009, "operation not allowed in the current state")                           \
    X(MC_ERR_NOT_FOUND, -4010, "not found")                                                        \
    X(MC_ERR_EXISTS, -4011, "already exists")                                                      \
    X(MC_ERR_LIMIT, -4012, "limit exceeded")                                                       \
    X(MC_ERR_NOT_LEADER, -4013, "this master is not the leader (a standby): ask the leader")

typedef enum mc_status {
#define MC_STATUS_ENUM(name, value, msg) name = (value),
    MC_STATUS_TABLE(MC_STATUS_ENUM)
#undef MC_STATUS_ENUM
} mc_status_t;

/* Name of the code, e.g. "OBJECT_NOT_FOUND"; "UNKNOWN_STATUS" for values not in
 * the table. Static storage. */
MC_API const char *mc_status_str(mc_status_t st);

/* One short sentence describing the code. Static storage. */
MC_API const char *mc_status_msg(mc_status_t st);

static inline int mc_status_is_err(mc_status_t st)
{
    return st < 0;
}

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STATUS_H */
