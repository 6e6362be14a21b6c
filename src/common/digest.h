/*
 * digest.h — SHA-256, fetched once per process: OpenSSL 3's implicit
 * fetches (EVP_sha256(), one-shot digests) take the provider store's lock
 * on every call and serialise threads.
 */
#ifndef ONCE_COMMON_DIGEST_H
#define ONCE_COMMON_DIGEST_H

#include <stddef.h>

#include <openssl/evp.h>

/* The SHA-256 implementation, or NULL when the library has none. */
const EVP_MD *digest_sha256(void);

/* SHA-256 of n bytes at data as 64 lower-case hex digits and a NUL. 0, or
 * -1 when the digest is unavailable or failed. */
int digest_sha256_hex(const void *data, size_t n, char out[65]);

#endif
