/*
 * handshake.h - the client side of the authentication handshake
 * (rpc/README.md, "Authentication"), one for both clients: the reactor one
 * (client.c) and the blocking one (bconn.c). Pure: frames are built in and
 * read from the caller's memory; no I/O, no allocation. Any thread.
 */
#ifndef MC_RPC_HANDSHAKE_H
#define MC_RPC_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "rpc/frame.h"
#include "util/auth.h"

/* Room for a frame of the handshake (a header and a 32-byte proof or nonce). */
#define MC_RPC_HS_FRAME_MAX (MC_FRAME_HDR_LEN + 64)

/* The frame of method and kind whose body is {field: bin[len]} (HELLO
 * {NONCE}, PROOF {PROOF}; len <= MC_AUTH_PROOF_LEN) into out: its length, 0
 * when it does not fit. */
size_t mc_rpc_hs_frame(uint8_t out[MC_RPC_HS_FRAME_MAX], uint16_t method, uint8_t kind,
                       uint64_t req_id, unsigned field, const uint8_t *bin, uint32_t len);

/* The server's answer f to our HELLO, which carried nonce: its proof checked
 * with key, and ours for the PROOF frame into mine. MC_OK, or
 * MC_ERR_REJECT_HANDSHAKE with the reason in why (room bytes): not the
 * answer to a HELLO, a server without a secret (NO_METHOD), a refusal (its
 * status and reason), a malformed answer, a wrong proof. */
mc_status_t mc_rpc_hs_answer(const mc_frame_t *f, const mc_auth_key_t *key,
                             const uint8_t nonce[MC_AUTH_NONCE_LEN],
                             uint8_t mine[MC_AUTH_PROOF_LEN], char *why, size_t room);

#endif /* MC_RPC_HANDSHAKE_H */
