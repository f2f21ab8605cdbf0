/*
 * frame.h - the wire frame of every mooncake-c connection (docs/ARCHITECTURE.md §4).
 *
 * A frame is a fixed 32-byte header, a msgpack body of body_len bytes, then
 * payload_len raw bytes (bulk data; 0 for ordinary RPC). All header integers
 * are little-endian:
 *
 *   off size field
 *    0   2   magic        0x4D 0x43 ("MC")
 *    2   1   version      MC_FRAME_VERSION
 *    3   1   kind         mc_frame_kind_t
 *    4   2   method       method id (rpc/methods.h)
 *    6   2   flags        reserved bits must be 0
 *    8   8   req_id       set by the caller, echoed in the response
 *   16   4   status       response: mc_status_t of the call; request: 0
 *   20   4   body_len     msgpack body length
 *   24   4   payload_len  raw bytes after the body
 *   28   4   reserved     must be 0
 *
 * The body, when not empty, is one msgpack map whose keys are small unsigned
 * integers (field ids, like protobuf tags); unknown ids are skipped by readers.
 *
 * The decoder is pure and resumable: give it the bytes you have; it returns
 * MC_OK with a complete frame (header + body + payload are all in the given
 * bytes), MC_AGAIN with the number of bytes it needs in total, or
 * MC_ERR_PROTOCOL with a reason. A protocol error is final for the connection.
 */
#ifndef MC_RPC_FRAME_H
#define MC_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define MC_FRAME_MAGIC0 0x4D
#define MC_FRAME_MAGIC1 0x43
#define MC_FRAME_VERSION 1
#define MC_FRAME_HDR_LEN 32

typedef enum mc_frame_kind {
    MC_FRAME_REQUEST = 1, /* expects a RESPONSE with the same req_id */
    MC_FRAME_RESPONSE = 2,
    MC_FRAME_NOTIFY = 3, /* one-way, no response */
    MC_FRAME_DATA = 4,   /* transport data (TCP transport); body + payload */
    MC_FRAME_KIND_MAX = 4,
} mc_frame_kind_t;

typedef struct mc_frame_hdr {
    uint8_t version;
    uint8_t kind;
    uint16_t method;
    uint16_t flags;
    uint64_t req_id;
    int32_t status;
    uint32_t body_len;
    uint32_t payload_len;
} mc_frame_hdr_t;

/* Limits enforced by the decoder. Zero fields mean "default". */
typedef struct mc_frame_limits {
    uint32_t max_body;    /* msgpack body bytes; default 64 MiB */
    uint32_t max_payload; /* raw payload bytes; default 64 MiB */
    uint32_t max_str;     /* one msgpack str/bin; default 16 MiB */
    uint32_t max_elems;   /* one msgpack array/map; default 1M entries */
    uint32_t max_depth;   /* nesting of arrays/maps; default 16 */
} mc_frame_limits_t;

void mc_frame_limits_init(mc_frame_limits_t *l);

typedef struct mc_frame {
    mc_frame_hdr_t hdr;
    const uint8_t *body;    /* points into the caller's bytes */
    const uint8_t *payload; /* points into the caller's bytes; NULL if none */
    size_t frame_len;       /* header + body + payload: bytes to consume */
} mc_frame_t;

/*
 * Decode the frame at the start of buf[0..len).
 *  MC_OK          *out is filled; consume out->frame_len bytes.
 *  MC_AGAIN       incomplete; *need = total bytes required for this frame so far
 *                 known (at least MC_FRAME_HDR_LEN).
 *  MC_ERR_PROTOCOL bad magic/version/kind/flags/reserved, a length over the
 *                 limits, or a body that is not a valid msgpack map with
 *                 integer keys within the limits; *reason (static) says which.
 * The body is validated (mc_mp_validate) before MC_OK is returned, so readers
 * of the body cannot run past it or nest too deep.
 */
mc_status_t mc_frame_decode(const uint8_t *buf, size_t len, const mc_frame_limits_t *lim,
                            mc_frame_t *out, size_t *need, const char **reason);

/* Decode only the header (first MC_FRAME_HDR_LEN bytes) and check it against
 * the limits. For the data path, which reads payloads straight into their
 * destination. Same return values as mc_frame_decode. */
mc_status_t mc_frame_decode_hdr(const uint8_t *buf, size_t len, const mc_frame_limits_t *lim,
                                mc_frame_hdr_t *out, const char **reason);

/* Write a header into out[MC_FRAME_HDR_LEN]. */
void mc_frame_encode_hdr(uint8_t *out, const mc_frame_hdr_t *h);

#endif /* MC_RPC_FRAME_H */
