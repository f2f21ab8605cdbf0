/*
 * auth.h - the one wrapper around libsodium: the cluster secret and the
 * HMAC-SHA256 challenge-response every connection completes when a secret is
 * configured (rpc/README.md, "Authentication").
 *
 * The secret is a file (`[security] secret_file`), the same on every process
 * of a cluster; its bytes (at least 16, a trailing newline dropped) are
 * hashed with SHA-256 into the 32-byte key. Each side of a connection sends a
 * fresh 32-byte nonce; each proves it holds the key with HMAC-SHA256(key,
 * role || its peer's nonce || its own nonce), the role ("mc-auth-server" /
 * "mc-auth-client") keeping the two proofs apart. A proof recorded on one
 * connection is worthless on another: the peer's nonce differs.
 *
 * Threads: any; keys are plain bytes, nonces come from the system CSPRNG.
 */
#ifndef MC_UTIL_AUTH_H
#define MC_UTIL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define MC_AUTH_KEY_LEN 32
#define MC_AUTH_NONCE_LEN 32
#define MC_AUTH_PROOF_LEN 32
#define MC_AUTH_SECRET_MIN 16 /* bytes of secret at least */

typedef struct mc_auth_key {
    uint8_t k[MC_AUTH_KEY_LEN];
} mc_auth_key_t;

typedef enum mc_auth_role {
    MC_AUTH_SERVER = 0, /* the side that accepted the connection */
    MC_AUTH_CLIENT = 1,
} mc_auth_role_t;

/* Read the secret file and derive the key. MC_OK; MC_ERR_CONFIG with the
 * reason in why (cannot read, shorter than MC_AUTH_SECRET_MIN bytes, readable
 * by group or others: a secret any local user can read is none);
 * MC_ERR_INTERNAL_ERROR (libsodium failed to initialise). */
mc_status_t mc_auth_key_load(const char *path, mc_auth_key_t *key, char *why, size_t whylen);

/* The same from bytes in memory (tests). */
mc_status_t mc_auth_key_from(const void *secret, size_t len, mc_auth_key_t *key);

/* A fresh nonce. */
void mc_auth_nonce(uint8_t nonce[MC_AUTH_NONCE_LEN]);

/* The proof `role` sends: HMAC-SHA256(key, role name || peer_nonce || own_nonce). */
void mc_auth_proof(const mc_auth_key_t *key, mc_auth_role_t role,
                   const uint8_t peer_nonce[MC_AUTH_NONCE_LEN],
                   const uint8_t own_nonce[MC_AUTH_NONCE_LEN], uint8_t proof[MC_AUTH_PROOF_LEN]);

/* Whether proof (len bytes) is what `role` holding key must send; compared
 * in constant time. 1 or 0. */
int mc_auth_check(const mc_auth_key_t *key, mc_auth_role_t role,
                  const uint8_t peer_nonce[MC_AUTH_NONCE_LEN],
                  const uint8_t own_nonce[MC_AUTH_NONCE_LEN], const void *proof, size_t len);

#endif /* MC_UTIL_AUTH_H */
