/*
 * handshake.c - the client side of the authentication handshake
 * (handshake.h).
 */
#include <stdio.h>

#include "rpc/fields.h"
#include "rpc/handshake.h"
#include "rpc/methods.h"
#include "rpc/msgpack.h"

size_t mc_rpc_hs_frame(uint8_t out[MC_RPC_HS_FRAME_MAX], uint16_t method, uint8_t kind,
                       uint64_t req_id, unsigned field, const uint8_t *bin, uint32_t len)
{
    mc_buf_t b = {out, 0, MC_FRAME_HDR_LEN, MC_RPC_HS_FRAME_MAX};
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, field);
    mc_mp_write_bin(&w, bin, len);
    if (w.err != MC_OK || b.data != out)
        return 0; /* (it grew the buffer: the frame is not in out) */
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = kind,
                        .method = method,
                        .req_id = req_id,
                        .body_len = (uint32_t)(b.len - MC_FRAME_HDR_LEN)};
    mc_frame_encode_hdr(out, &h);
    return b.len;
}

mc_status_t mc_rpc_hs_answer(const mc_frame_t *f, const mc_auth_key_t *key,
                             const uint8_t nonce[MC_AUTH_NONCE_LEN],
                             uint8_t mine[MC_AUTH_PROOF_LEN], char *why, size_t room)
{
    const uint8_t *ns = NULL, *proof = NULL;
    const char *err = NULL;
    uint32_t errlen = 0;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, f->body, f->hdr.body_len);
    uint32_t n = f->hdr.body_len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(&r);
        uint32_t l = 0;
        const void *p = NULL;
        if (id == MC_F_NONCE || id == MC_F_PROOF) {
            p = mc_mp_read_bin(&r, &l);
            if (l == MC_AUTH_NONCE_LEN && id == MC_F_NONCE)
                ns = p;
            else if (l == MC_AUTH_PROOF_LEN && id == MC_F_PROOF)
                proof = p;
        } else if (id == MC_F_ERROR) {
            err = mc_mp_read_str(&r, &errlen);
        } else {
            mc_mp_skip(&r);
        }
    }
    const char *fixed = NULL;
    if (f->hdr.kind != MC_FRAME_RESPONSE || f->hdr.method != MC_RPC_AUTH_HELLO)
        fixed = "unexpected frame during the authentication handshake";
    else if (f->hdr.status == MC_ERR_NO_METHOD)
        fixed = "the server does not authenticate (no secret there?)";
    else if (f->hdr.status != MC_OK)
        snprintf(why, room, "refused: %s%s%.*s", mc_status_str((mc_status_t)f->hdr.status),
                 err ? ": " : "", err ? (int)errlen : 0, err ? err : "");
    else if (r.err != MC_OK || ns == NULL || proof == NULL)
        fixed = "malformed answer to the authentication hello";
    else if (!mc_auth_check(key, MC_AUTH_SERVER, nonce, ns, proof, MC_AUTH_PROOF_LEN))
        fixed = "the server's proof is wrong (another secret?)";
    else {
        mc_auth_proof(key, MC_AUTH_CLIENT, ns, nonce, mine);
        return MC_OK;
    }
    if (fixed != NULL)
        snprintf(why, room, "%s", fixed);
    return MC_ERR_REJECT_HANDSHAKE;
}
