/* auth.c - see auth.h. libsodium's conventions (-1 on failure) end here. */
#include "util/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const role_names[] = {"mc-auth-server", "mc-auth-client"};

static mc_status_t init_once(void)
{
    /* thread-safe, and a no-op once done (returns 1) */
    return sodium_init() < 0 ? MC_ERR_INTERNAL_ERROR : MC_OK;
}

mc_status_t mc_auth_key_from(const void *secret, size_t len, mc_auth_key_t *key)
{
    if (init_once() != MC_OK)
        return MC_ERR_INTERNAL_ERROR;
    if (secret == NULL || len < MC_AUTH_SECRET_MIN)
        return MC_ERR_CONFIG;
    crypto_hash_sha256(key->k, secret, len);
    return MC_OK;
}

mc_status_t mc_auth_key_load(const char *path, mc_auth_key_t *key, char *why, size_t whylen)
{
    if (init_once() != MC_OK) {
        snprintf(why, whylen, "libsodium cannot initialise");
        return MC_ERR_INTERNAL_ERROR;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "cannot open the secret file '%s': %s", path, strerror(errno));
        return MC_ERR_CONFIG;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whylen, "the secret file '%s' is not a regular file", path);
        close(fd);
        return MC_ERR_CONFIG;
    }
    if ((sb.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        snprintf(why, whylen,
                 "the secret file '%s' is accessible by group or others (mode %03o): chmod 600 it",
                 path, (unsigned)(sb.st_mode & 0777));
        close(fd);
        return MC_ERR_CONFIG;
    }
    uint8_t buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    int err = errno;
    close(fd);
    if (n < 0) {
        snprintf(why, whylen, "cannot read the secret file '%s': %s", path, strerror(err));
        return MC_ERR_CONFIG;
    }
    size_t len = (size_t)n;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--; /* `echo secret > file` */
    mc_status_t st = mc_auth_key_from(buf, len, key);
    sodium_memzero(buf, sizeof(buf));
    if (st != MC_OK)
        snprintf(why, whylen, "the secret in '%s' is shorter than %d bytes", path,
                 MC_AUTH_SECRET_MIN);
    return st;
}

void mc_auth_nonce(uint8_t nonce[MC_AUTH_NONCE_LEN])
{
    (void)init_once();
    randombytes_buf(nonce, MC_AUTH_NONCE_LEN);
}

void mc_auth_proof(const mc_auth_key_t *key, mc_auth_role_t role,
                   const uint8_t peer_nonce[MC_AUTH_NONCE_LEN],
                   const uint8_t own_nonce[MC_AUTH_NONCE_LEN], uint8_t proof[MC_AUTH_PROOF_LEN])
{
    crypto_auth_hmacsha256_state st;
    const char *name = role_names[role == MC_AUTH_CLIENT];
    crypto_auth_hmacsha256_init(&st, key->k, MC_AUTH_KEY_LEN);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)name, strlen(name));
    crypto_auth_hmacsha256_update(&st, peer_nonce, MC_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, own_nonce, MC_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_final(&st, proof);
    sodium_memzero(&st, sizeof(st));
}

int mc_auth_check(const mc_auth_key_t *key, mc_auth_role_t role,
                  const uint8_t peer_nonce[MC_AUTH_NONCE_LEN],
                  const uint8_t own_nonce[MC_AUTH_NONCE_LEN], const void *proof, size_t len)
{
    uint8_t want[MC_AUTH_PROOF_LEN];
    if (proof == NULL || len != MC_AUTH_PROOF_LEN)
        return 0;
    mc_auth_proof(key, role, peer_nonce, own_nonce, want);
    int ok = sodium_memcmp(want, proof, MC_AUTH_PROOF_LEN) == 0;
    sodium_memzero(want, sizeof(want));
    return ok;
}
