/*
 * util.c — small utilities of libonce: clock, copies, tokens, fingerprints.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "common/digest.h"
#include "common/hex.h"
#include "ledger/store.h"

int64_t once_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void *once_memdup0(const void *src, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, src, n);
    p[n] = '\0';
    return p;
}

/* Each thread draws token bytes from the CSPRNG 16 tokens at a time: one
 * RAND_bytes per reservation cost a getpid() (OpenSSL's fork check) and a
 * DRBG round trip per request on the hot path. A forked child starts with
 * an empty buffer, so parent and child never hand out the same bytes. */
#define TOKEN_RAW (ONCE_TOKEN_LEN / 2)
static _Thread_local unsigned char token_pool[16 * TOKEN_RAW];
static _Thread_local size_t token_left;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void token_pool_forget(void)
{
    token_left = 0;
}

static void token_pool_init(void)
{
    pthread_atfork(NULL, NULL, token_pool_forget);
}

/* Tokens fence attempts against each other, and anyone holding one can
 * complete the action, so they come from the CSPRNG, not from rand(). */
int once_token_new(char out[ONCE_TOKEN_LEN + 1])
{
    pthread_once(&token_once, token_pool_init);
    if (token_left == 0) {
        if (RAND_bytes(token_pool, (int)sizeof token_pool) != 1)
            return once_fail(ONCE_ESTORE, "token: the random generator failed");
        token_left = sizeof token_pool;
    }
    token_left -= TOKEN_RAW;
    unsigned char *raw = token_pool + token_left;
    hex_encode(raw, TOKEN_RAW, out);
    memset(raw, 0, TOKEN_RAW); /* handed out: not kept for a later reader of this memory */
    return ONCE_OK;
}

/* Each field is prefixed with its length so that ("a", "bc") and ("ab", "c")
 * cannot collide; the digest itself only ever signals "payload differs". */
static int digest_field(EVP_MD_CTX *ctx, const void *p, size_t n)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    return EVP_DigestUpdate(ctx, len, sizeof len) == 1 && (n == 0 || EVP_DigestUpdate(ctx, p, n) == 1);
}

int once_fingerprint(const char *method, const char *path, const uint8_t *body, size_t body_len,
                     char out[65])
{
    once_detail_clear();
    if (!method || !path || !out || (!body && body_len))
        return once_fail(ONCE_EINVAL, "fingerprint: method, path and out are required");
    const EVP_MD *sha256 = digest_sha256();
    if (!sha256)
        return once_fail(ONCE_ENOMEM, "fingerprint: SHA-256 unavailable");
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return once_fail(ONCE_ENOMEM, "fingerprint: out of memory");
    unsigned char digest[32];
    unsigned int dlen = 0;
    int ok = EVP_DigestInit_ex(ctx, sha256, NULL) == 1 && digest_field(ctx, method, strlen(method)) &&
             digest_field(ctx, path, strlen(path)) && digest_field(ctx, body, body_len) &&
             EVP_DigestFinal_ex(ctx, digest, &dlen) == 1 && dlen == sizeof digest;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return once_fail(ONCE_ENOMEM, "fingerprint: digest failed");
    hex_encode(digest, sizeof digest, out);
    return ONCE_OK;
}
