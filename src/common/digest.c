/*
 * digest.c — SHA-256 fetched once (see digest.h).
 */
#include "common/digest.h"

#include <pthread.h>

#include "common/hex.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static EVP_MD *g_sha256; /* kept for the life of the process */

static void digest_fetch(void)
{
    g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

const EVP_MD *digest_sha256(void)
{
    return pthread_once(&g_once, digest_fetch) == 0 ? g_sha256 : NULL;
}

int digest_sha256_hex(const void *data, size_t n, char out[65])
{
    const EVP_MD *md = digest_sha256();
    unsigned char d[32];
    unsigned int dlen = 0;
    if (!md || EVP_Digest(data, n, d, &dlen, md, NULL) != 1 || dlen != sizeof d)
        return -1;
    hex_encode(d, sizeof d, out);
    return 0;
}
