/*
 * webhook_sig.c — verification of webhook senders' signatures (Stripe,
 * GitHub/Meta, Standard Webhooks/Svix, Slack, plain HMAC-SHA256) and the
 * Standard Webhooks signing of the gateway's own deliveries.
 *
 * Design:
 *  - The EVP_MAC "HMAC" is fetched once per process (pthread_once). Each
 *    secret is keyed once into an EVP_MAC_CTX at sig_verifier_new (which is
 *    also when the provider resolves SHA256); a verification duplicates the
 *    keyed context (EVP_MAC_CTX_dup), so no call takes provider locks for a
 *    fetch and the verifier is read-only afterwards (thread-safe).
 *  - Header values are parsed in place (pointer + length), never copied, so
 *    a huge or hostile header costs linear time and no allocation.
 *  - For each secret the MAC of the signed content is computed once; every
 *    candidate signature in the header is decoded to 32 bytes and compared
 *    with every MAC using CRYPTO_memcmp over equal lengths, without early
 *    exit. A candidate whose length is not 32 bytes matches nothing.
 *  - Timestamps are Unix seconds, digits only, bounded so that seconds*1000
 *    fits an int64_t; |now - t| is computed in unsigned arithmetic so no
 *    input can overflow it.
 */
#include "common/webhook_sig.h"

#include "common/errbuf.h"
#include "common/hex.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define SIG_MAC_LEN 32            /* HMAC-SHA256 output */
#define SIG_DEFAULT_TOL_MS 300000 /* 5 minutes */

struct sig_verifier {
    sig_scheme scheme;
    int64_t tol_ms;
    size_t nkeys;
    EVP_MAC_CTX **keys; /* nkeys contexts, each initialised with its secret */
    char *header;       /* hmac-sha256 */
    char *prefix;       /* hmac-sha256, NULL when none */
    size_t prefix_len;
    int base64;
};

/* One piece of the signed content: the MAC input is the concatenation of
 * these, so the body is never copied to build "{t}.{body}". */
typedef struct sig_part {
    const void *p;
    size_t n;
} sig_part;

/* ---- the process-wide EVP_MAC ---------------------------------------- */

static pthread_once_t g_mac_once = PTHREAD_ONCE_INIT;
static EVP_MAC *g_hmac; /* fetched once, kept for the life of the process */

/* Fetches HMAC once: an explicit fetch per call would take the provider
 * store's lock every time and serialise verifications across threads. */
static void sig_fetch_mac(void)
{
    g_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* The fetched HMAC, or NULL when the default provider does not offer it. */
static EVP_MAC *sig_mac(void)
{
    if (pthread_once(&g_mac_once, sig_fetch_mac) != 0)
        return NULL;
    return g_hmac;
}

/* ---- small helpers ----------------------------------------------------- */


/* Optional whitespace as HTTP defines it (space, tab): header values are
 * trimmed of it at both ends and list items around their separators. */
static int sig_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Trims OWS off both ends of [*s, *s + *n), in place. */
static void sig_trim(const char **s, size_t *n)
{
    while (*n > 0 && sig_is_ows((*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && sig_is_ows((*s)[*n - 1]))
        (*n)--;
}

/* Splits the next sep-separated item off [*p, end), trimmed; empty items
 * (repeated separators) are returned as empty so callers skip them. Returns
 * 0 when the input is exhausted. Never reads past end. */
static int sig_next_item(const char **p, const char *end, char sep, const char **item, size_t *ilen)
{
    if (*p >= end)
        return 0;
    const char *s = *p;
    const char *e = memchr(s, sep, (size_t)(end - s));
    if (e == NULL) {
        *item = s;
        *ilen = (size_t)(end - s);
        *p = end;
    } else {
        *item = s;
        *ilen = (size_t)(e - s);
        *p = e + 1;
    }
    sig_trim(item, ilen);
    return 1;
}


/* Decodes exactly n hex characters into at most cap bytes: a signature in
 * hex must be complete and well formed, or it matches nothing. 0 or -1. */
static int sig_hex_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen)
{
    if (n % 2 != 0 || n / 2 > cap)
        return -1;
    for (size_t i = 0; i < n; i += 2) {
        int hi = hex_value((char)(unsigned char)s[i]);
        int lo = hex_value((char)(unsigned char)s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    *outlen = n / 2;
    return 0;
}

/* Value of one character of the standard base64 alphabet (RFC 4648 §4),
 * or -1; '=' is handled by the caller. */
static int sig_b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 decoding of n characters into at most cap bytes, written
 * by hand rather than with EVP_DecodeBlock (which counts padding as zero
 * bytes and accepts whitespace): correct '=' padding or none, no stray
 * characters, and zero unused bits in the last character, so each byte
 * string has exactly one accepted encoding. 0 or -1. */
static int sig_b64_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen)
{
    size_t pad = 0;
    if (n >= 4 && n % 4 == 0) {
        if (s[n - 1] == '=')
            pad++;
        if (pad == 1 && s[n - 2] == '=')
            pad++;
    }
    size_t m = n - pad;
    size_t rem = m % 4;
    if (rem == 1 || (pad == 1 && rem != 3) || (pad == 2 && rem != 2))
        return -1;
    size_t len = m / 4 * 3 + (rem == 0 ? 0 : rem - 1);
    if (len > cap)
        return -1;
    uint32_t acc = 0;
    size_t o = 0;
    for (size_t i = 0; i < m; i++) {
        int v = sig_b64val((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (uint8_t)(acc >> 16);
            out[o++] = (uint8_t)(acc >> 8);
            out[o++] = (uint8_t)acc;
            acc = 0;
        }
    }
    if (rem == 2) {
        if ((acc & 0xf) != 0)
            return -1;
        out[o++] = (uint8_t)(acc >> 4);
    } else if (rem == 3) {
        if ((acc & 0x3) != 0)
            return -1;
        out[o++] = (uint8_t)(acc >> 10);
        out[o++] = (uint8_t)(acc >> 2);
    }
    *outlen = o;
    return 0;
}

/* Standard base64 with padding of n bytes into out (at least
 * 4*ceil(n/3)+1 bytes), NUL-terminated: the form Standard Webhooks sends. */
static void sig_b64_encode(const uint8_t *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
}

/* Parses a Unix timestamp in seconds: 1 to 15 ASCII digits (up to year
 * ~33 million, so seconds*1000 cannot overflow), nothing else. 0 or -1. */
static int sig_parse_ts(const char *s, size_t n, int64_t *out_ms)
{
    if (n == 0 || n > 15)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out_ms = v * 1000;
    return 0;
}

/* Checks a signed timestamp against the clock: -1 with "stale timestamp"
 * or "future timestamp" outside the tolerance, else 0. The difference is
 * taken in uint64_t, where it is exact for any two int64_t values. */
static int sig_check_ts(const sig_verifier *v, int64_t ts_ms, int64_t now_ms, char *why, size_t whylen)
{
    if (now_ms >= ts_ms) {
        uint64_t d = (uint64_t)now_ms - (uint64_t)ts_ms;
        if (d > (uint64_t)v->tol_ms) {
            errbuf_set(why, whylen, "stale timestamp");
            return -1;
        }
    } else {
        uint64_t d = (uint64_t)ts_ms - (uint64_t)now_ms;
        if (d > (uint64_t)v->tol_ms) {
            errbuf_set(why, whylen, "future timestamp");
            return -1;
        }
    }
    return 0;
}

/* HMAC of the concatenated parts with one keyed context, duplicated so the
 * keyed original is never written to (thread safety) and no fetch happens
 * here. 0 or -1. */
static int sig_mac_parts(const EVP_MAC_CTX *key, const sig_part *parts, size_t nparts, uint8_t out[SIG_MAC_LEN])
{
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(key);
    if (c == NULL)
        return -1;
    int rc = -1;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].n > 0 && EVP_MAC_update(c, parts[i].p, parts[i].n) != 1)
            goto done;
    }
    size_t outl = 0;
    if (EVP_MAC_final(c, out, &outl, SIG_MAC_LEN) != 1 || outl != SIG_MAC_LEN)
        goto done;
    rc = 0;
done:
    EVP_MAC_CTX_free(c);
    return rc;
}

/* The MAC of the signed content under every configured secret, computed
 * once per request so that each candidate signature costs a comparison,
 * not an HMAC. 0 or -1 (an OpenSSL failure). */
static int sig_mac_all(const sig_verifier *v, const sig_part *parts, size_t nparts,
                       uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN])
{
    for (size_t k = 0; k < v->nkeys; k++) {
        if (sig_mac_parts(v->keys[k], parts, nparts, macs[k]) != 0)
            return -1;
    }
    return 0;
}

/* 1 if the 32-byte candidate equals the MAC under any secret. Every MAC is
 * compared in constant time and the loop has no early exit, so the timing
 * says nothing about which secret (or how much of one) matched. */
static int sig_match_any(const sig_verifier *v, uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN],
                         const uint8_t cand[SIG_MAC_LEN])
{
    int ok = 0;
    for (size_t k = 0; k < v->nkeys; k++)
        ok |= CRYPTO_memcmp(macs[k], cand, SIG_MAC_LEN) == 0;
    return ok;
}

/* Wipes the MACs of a request off the stack before returning: a correct
 * MAC is a forgery for these exact bytes. */
static void sig_wipe(uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN])
{
    OPENSSL_cleanse(macs, (size_t)SIG_MAX_SECRETS * SIG_MAC_LEN);
}

/* Fetches a header and trims it; -1 with "missing header" when absent. */
static int sig_get(sig_header_fn header, void *ctx, const char *name, const char **val, size_t *len, char *why,
                   size_t whylen)
{
    const char *s = header(ctx, name);
    if (s == NULL) {
        errbuf_set(why, whylen, "missing header");
        return -1;
    }
    *val = s;
    *len = strlen(s);
    sig_trim(val, len);
    return 0;
}

/* ---- scheme names ------------------------------------------------------ */

/* Each scheme's config name, the event id its sender always sends (NULL:
 * none, the config names one) and whether it signs a timestamp. */
static const struct {
    const char *name;
    sig_scheme scheme;
    const char *event_id;
    int signs_time;
} g_schemes[] = {
    {"none", SIG_NONE, NULL, 0},
    {"stripe", SIG_STRIPE, "json:/id", 1},
    {"github", SIG_GITHUB, "header:X-GitHub-Delivery", 0},
    {"standard", SIG_STANDARD, "header:webhook-id", 1},
    {"slack", SIG_SLACK, "json:/event_id", 1},
    {"hmac-sha256", SIG_HMAC_SHA256, NULL, 0},
};

/* Config names to schemes; exact, lower-case names as documented. */
int sig_scheme_parse(const char *name, sig_scheme *out)
{
    if (name == NULL || out == NULL)
        return -1;
    for (size_t i = 0; i < sizeof g_schemes / sizeof g_schemes[0]; i++) {
        if (strcmp(name, g_schemes[i].name) == 0) {
            *out = g_schemes[i].scheme;
            return 0;
        }
    }
    return -1;
}

/* The g_schemes index of a scheme, or -1. */
static int sig_scheme_index(sig_scheme s)
{
    for (size_t i = 0; i < sizeof g_schemes / sizeof g_schemes[0]; i++) {
        if (g_schemes[i].scheme == s)
            return (int)i;
    }
    return -1;
}

/* The config name of a scheme, for logs and messages; never NULL. */
const char *sig_scheme_name(sig_scheme s)
{
    int i = sig_scheme_index(s);
    return i < 0 ? "unknown" : g_schemes[i].name;
}

const char *sig_scheme_default_event_id(sig_scheme s)
{
    int i = sig_scheme_index(s);
    return i < 0 ? NULL : g_schemes[i].event_id;
}

int sig_scheme_signs_time(sig_scheme s)
{
    int i = sig_scheme_index(s);
    return i >= 0 && g_schemes[i].signs_time;
}

/* The same decoder as the verifier's, so a key the config accepts is one
 * sig_verifier_new accepts; the decoded bytes are wiped. */
int sig_whsec_valid(const char *s, size_t n)
{
    static const char pfx[] = "whsec_";
    const size_t pl = sizeof pfx - 1;
    uint8_t key[SIG_MAX_SECRET_LEN];
    size_t keylen = 0;
    int ok = s != NULL && n > pl && n <= SIG_MAX_SECRET_LEN && memcmp(s, pfx, pl) == 0 &&
             sig_b64_decode(s + pl, n - pl, key, sizeof key, &keylen) == 0 && keylen > 0;
    OPENSSL_cleanse(key, sizeof key);
    return ok;
}

/* ---- construction ------------------------------------------------------ */

/* Keys one HMAC-SHA256 context with key bytes: the one place where the
 * provider resolves SHA256, at start rather than per request. NULL on
 * failure. */
static EVP_MAC_CTX *sig_key_ctx(EVP_MAC *mac, const uint8_t *key, size_t keylen)
{
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(mac);
    if (c == NULL)
        return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_init(c, key, keylen, params) != 1 || EVP_MAC_CTX_get_mac_size(c) != SIG_MAC_LEN) {
        EVP_MAC_CTX_free(c);
        return NULL;
    }
    return c;
}

/* Builds a verifier: validates the configuration, and keys one context per
 * secret (for standard, the base64 after "whsec_"; for every other scheme
 * the secret's bytes as written, which is what Stripe, GitHub and Slack
 * key with). */
int sig_verifier_new(const sig_config *cfg, sig_verifier **out, char *err, size_t errlen)
{
    if (out == NULL) {
        errbuf_set(err, errlen, "no output pointer");
        return -1;
    }
    *out = NULL;
    if (cfg == NULL) {
        errbuf_set(err, errlen, "no configuration");
        return -1;
    }
    if (cfg->scheme < SIG_NONE || cfg->scheme > SIG_HMAC_SHA256) {
        errbuf_set(err, errlen, "unknown signature scheme");
        return -1;
    }
    if (cfg->tolerance_ms < 0) {
        errbuf_set(err, errlen, "negative timestamp tolerance");
        return -1;
    }
    sig_verifier *v = calloc(1, sizeof *v);
    if (v == NULL) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    v->scheme = cfg->scheme;
    v->tol_ms = cfg->tolerance_ms == 0 ? SIG_DEFAULT_TOL_MS : cfg->tolerance_ms;
    v->base64 = cfg->base64 != 0;
    if (cfg->scheme == SIG_NONE) {
        *out = v;
        return 0;
    }

    if (cfg->scheme == SIG_HMAC_SHA256) {
        if (cfg->header == NULL || cfg->header[0] == '\0') {
            errbuf_set(err, errlen, "hmac-sha256: signature_header is required");
            goto fail;
        }
        v->header = strdup(cfg->header);
        if (v->header == NULL) {
            errbuf_set(err, errlen, "out of memory");
            goto fail;
        }
        if (cfg->prefix != NULL && cfg->prefix[0] != '\0') {
            v->prefix = strdup(cfg->prefix);
            if (v->prefix == NULL) {
                errbuf_set(err, errlen, "out of memory");
                goto fail;
            }
            v->prefix_len = strlen(v->prefix);
        }
    }
    if (cfg->secrets == NULL || cfg->nsecrets == 0) {
        errbuf_set(err, errlen, "%s: at least one secret is required", sig_scheme_name(cfg->scheme));
        goto fail;
    }
    if (cfg->nsecrets > SIG_MAX_SECRETS) {
        errbuf_set(err, errlen, "%s: at most %d secrets", sig_scheme_name(cfg->scheme), SIG_MAX_SECRETS);
        goto fail;
    }
    EVP_MAC *mac = sig_mac();
    if (mac == NULL) {
        errbuf_set(err, errlen, "OpenSSL offers no HMAC");
        goto fail;
    }
    v->keys = calloc(cfg->nsecrets, sizeof *v->keys);
    if (v->keys == NULL) {
        errbuf_set(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < cfg->nsecrets; i++) {
        const char *s = cfg->secrets[i];
        size_t n = s == NULL ? 0 : strnlen(s, SIG_MAX_SECRET_LEN + 1);
        if (n == 0) {
            errbuf_set(err, errlen, "secret %zu is empty", i + 1);
            goto fail;
        }
        if (n > SIG_MAX_SECRET_LEN) {
            errbuf_set(err, errlen, "secret %zu is longer than %d bytes", i + 1, SIG_MAX_SECRET_LEN);
            goto fail;
        }
        if (cfg->scheme == SIG_STANDARD) {
            static const char pfx[] = "whsec_";
            uint8_t key[SIG_MAX_SECRET_LEN];
            size_t keylen = 0;
            if (n <= sizeof pfx - 1 || memcmp(s, pfx, sizeof pfx - 1) != 0 ||
                sig_b64_decode(s + sizeof pfx - 1, n - (sizeof pfx - 1), key, sizeof key, &keylen) != 0 ||
                keylen == 0) {
                OPENSSL_cleanse(key, sizeof key);
                errbuf_set(err, errlen, "secret %zu is not \"whsec_\" followed by base64", i + 1);
                goto fail;
            }
            v->keys[i] = sig_key_ctx(mac, key, keylen);
            OPENSSL_cleanse(key, sizeof key);
        } else {
            v->keys[i] = sig_key_ctx(mac, (const uint8_t *)s, n);
        }
        if (v->keys[i] == NULL) {
            errbuf_set(err, errlen, "OpenSSL could not key HMAC-SHA256 with secret %zu", i + 1);
            goto fail;
        }
        v->nkeys = i + 1;
    }
    *out = v;
    return 0;
fail:
    sig_verifier_free(v);
    return -1;
}

/* Frees the keyed contexts (OpenSSL wipes their key material) and the
 * verifier. NULL is fine. */
void sig_verifier_free(sig_verifier *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->nkeys; i++)
        EVP_MAC_CTX_free(v->keys[i]);
    free(v->keys);
    free(v->header);
    free(v->prefix);
    free(v);
}

/* ---- the schemes ------------------------------------------------------- */

/* Stripe: "t=<secs>,v1=<hex>[,v1=<hex>…]" over "{t}.{body}". Exactly one t
 * (two would be ambiguous: which one was signed?); v0 and unknown keys are
 * ignored, as are items without '=' and empty items. The t is signed as the
 * text sent. */
static int sig_verify_stripe(const sig_verifier *v, sig_header_fn header, void *ctx, const uint8_t *body,
                             size_t len, int64_t now_ms, char *why, size_t whylen)
{
    const char *hv;
    size_t hn;
    if (sig_get(header, ctx, "Stripe-Signature", &hv, &hn, why, whylen) != 0)
        return -1;
    const char *end = hv + hn;
    const char *t = NULL;
    size_t tn = 0;
    int nt = 0, nv1 = 0;
    const char *p = hv, *item;
    size_t in;
    while (sig_next_item(&p, end, ',', &item, &in)) {
        const char *eq = memchr(item, '=', in);
        if (eq == NULL)
            continue;
        size_t kn = (size_t)(eq - item);
        if (kn == 1 && item[0] == 't') {
            t = eq + 1;
            tn = in - kn - 1;
            nt++;
        } else if (kn == 2 && item[0] == 'v' && item[1] == '1') {
            nv1++;
        }
    }
    int64_t ts_ms;
    if (nt != 1 || nv1 == 0 || sig_parse_ts(t, tn, &ts_ms) != 0) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    if (sig_check_ts(v, ts_ms, now_ms, why, whylen) != 0)
        return -1;
    sig_part parts[] = {{t, tn}, {".", 1}, {body, len}};
    uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN];
    if (sig_mac_all(v, parts, 3, macs) != 0) {
        sig_wipe(macs);
        errbuf_set(why, whylen, "internal error");
        return -1;
    }
    int ok = 0;
    p = hv;
    while (sig_next_item(&p, end, ',', &item, &in)) {
        uint8_t cand[SIG_MAC_LEN];
        size_t cn = 0;
        if (in > 3 && item[0] == 'v' && item[1] == '1' && item[2] == '=' &&
            sig_hex_decode(item + 3, in - 3, cand, sizeof cand, &cn) == 0 && cn == SIG_MAC_LEN)
            ok |= sig_match_any(v, macs, cand);
    }
    sig_wipe(macs);
    if (!ok) {
        errbuf_set(why, whylen, "no signature matched");
        return -1;
    }
    return 0;
}

/* One signature after a fixed prefix, over content in parts: GitHub
 * ("sha256=" hex), Slack ("v0=" hex) and hmac-sha256 (configured prefix,
 * hex or base64). A missing prefix is a malformed header. */
static int sig_verify_single(const sig_verifier *v, const char *hv, size_t hn, const char *prefix,
                             size_t prefix_len, int base64, const sig_part *parts, size_t nparts, char *why,
                             size_t whylen)
{
    if (hn < prefix_len || (prefix_len > 0 && memcmp(hv, prefix, prefix_len) != 0)) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    hv += prefix_len;
    hn -= prefix_len;
    uint8_t cand[2 * SIG_MAC_LEN]; /* room for longer input, so a wrong length is detected, not cut */
    size_t cn = 0;
    int rc = base64 ? sig_b64_decode(hv, hn, cand, sizeof cand, &cn)
                    : sig_hex_decode(hv, hn, cand, sizeof cand, &cn);
    if (rc != 0 || cn != SIG_MAC_LEN) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN];
    if (sig_mac_all(v, parts, nparts, macs) != 0) {
        sig_wipe(macs);
        errbuf_set(why, whylen, "internal error");
        return -1;
    }
    int ok = sig_match_any(v, macs, cand);
    sig_wipe(macs);
    if (!ok) {
        errbuf_set(why, whylen, "no signature matched");
        return -1;
    }
    return 0;
}

/* 1 if an id may be signed and used: non-empty visible ASCII or UTF-8
 * bytes (no controls, no spaces), as Standard Webhooks ids are. */
static int sig_id_ok(const char *id, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* Standard Webhooks: webhook-id, webhook-timestamp and a space-separated
 * list of "v1,<base64>" in webhook-signature over "{id}.{ts}.{body}".
 * Senders that are not white-labelled send the same headers as svix-*;
 * those are read when webhook-signature is absent (never mixed). Entries of
 * other versions (v1a, …) are ignored. */
static const char *sig_standard_family(sig_header_fn header, void *ctx)
{
    return header(ctx, "webhook-signature") != NULL ? "webhook" : "svix";
}

const char *sig_signed_id(const sig_verifier *v, sig_header_fn header, void *ctx)
{
    if (!v || v->scheme != SIG_STANDARD || !header)
        return NULL;
    return header(ctx, strcmp(sig_standard_family(header, ctx), "webhook") == 0 ? "webhook-id" : "svix-id");
}

static int sig_verify_standard(const sig_verifier *v, sig_header_fn header, void *ctx, const uint8_t *body,
                               size_t len, int64_t now_ms, char *why, size_t whylen)
{
    const char *fam = sig_standard_family(header, ctx);
    char name[32];
    const char *id, *ts, *sg;
    size_t idn, tsn, sgn;
    snprintf(name, sizeof name, "%s-id", fam);
    if (sig_get(header, ctx, name, &id, &idn, why, whylen) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-timestamp", fam);
    if (sig_get(header, ctx, name, &ts, &tsn, why, whylen) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-signature", fam);
    if (sig_get(header, ctx, name, &sg, &sgn, why, whylen) != 0)
        return -1;
    int64_t ts_ms;
    if (!sig_id_ok(id, idn) || sig_parse_ts(ts, tsn, &ts_ms) != 0) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    if (sig_check_ts(v, ts_ms, now_ms, why, whylen) != 0)
        return -1;
    sig_part parts[] = {{id, idn}, {".", 1}, {ts, tsn}, {".", 1}, {body, len}};
    uint8_t macs[SIG_MAX_SECRETS][SIG_MAC_LEN];
    if (sig_mac_all(v, parts, 5, macs) != 0) {
        sig_wipe(macs);
        errbuf_set(why, whylen, "internal error");
        return -1;
    }
    int ok = 0, nv1 = 0;
    const char *p = sg, *end = sg + sgn, *item;
    size_t in;
    while (sig_next_item(&p, end, ' ', &item, &in)) {
        if (in < 3 || item[0] != 'v' || item[1] != '1' || item[2] != ',')
            continue;
        nv1++;
        uint8_t cand[2 * SIG_MAC_LEN];
        size_t cn = 0;
        if (sig_b64_decode(item + 3, in - 3, cand, sizeof cand, &cn) == 0 && cn == SIG_MAC_LEN)
            ok |= sig_match_any(v, macs, cand);
    }
    sig_wipe(macs);
    if (nv1 == 0) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    if (!ok) {
        errbuf_set(why, whylen, "no signature matched");
        return -1;
    }
    return 0;
}

/* Slack: "v0=<hex>" in X-Slack-Signature over
 * "v0:{X-Slack-Request-Timestamp}:{body}". */
static int sig_verify_slack(const sig_verifier *v, sig_header_fn header, void *ctx, const uint8_t *body,
                            size_t len, int64_t now_ms, char *why, size_t whylen)
{
    const char *sg, *ts;
    size_t sgn, tsn;
    if (sig_get(header, ctx, "X-Slack-Signature", &sg, &sgn, why, whylen) != 0 ||
        sig_get(header, ctx, "X-Slack-Request-Timestamp", &ts, &tsn, why, whylen) != 0)
        return -1;
    int64_t ts_ms;
    if (sig_parse_ts(ts, tsn, &ts_ms) != 0) {
        errbuf_set(why, whylen, "malformed header");
        return -1;
    }
    if (sig_check_ts(v, ts_ms, now_ms, why, whylen) != 0)
        return -1;
    sig_part parts[] = {{"v0:", 3}, {ts, tsn}, {":", 1}, {body, len}};
    return sig_verify_single(v, sg, sgn, "v0=", 3, 0, parts, 4, why, whylen);
}

/* Verifies one request under the verifier's scheme; see the header. */
int sig_verify(const sig_verifier *v, sig_header_fn header, void *ctx, const uint8_t *body, size_t len,
               int64_t now_ms, char *why, size_t whylen)
{
    errbuf_set(why, whylen, "%s", "");
    if (v == NULL || header == NULL || (body == NULL && len > 0)) {
        errbuf_set(why, whylen, "invalid argument");
        return -1;
    }
    if (body == NULL)
        body = (const uint8_t *)"";
    sig_part raw[] = {{body, len}};
    const char *hv;
    size_t hn;
    switch (v->scheme) {
    case SIG_NONE:
        return 0;
    case SIG_STRIPE:
        return sig_verify_stripe(v, header, ctx, body, len, now_ms, why, whylen);
    case SIG_GITHUB:
        if (sig_get(header, ctx, "X-Hub-Signature-256", &hv, &hn, why, whylen) != 0)
            return -1;
        return sig_verify_single(v, hv, hn, "sha256=", 7, 0, raw, 1, why, whylen);
    case SIG_STANDARD:
        return sig_verify_standard(v, header, ctx, body, len, now_ms, why, whylen);
    case SIG_SLACK:
        return sig_verify_slack(v, header, ctx, body, len, now_ms, why, whylen);
    case SIG_HMAC_SHA256:
        if (sig_get(header, ctx, v->header, &hv, &hn, why, whylen) != 0)
            return -1;
        return sig_verify_single(v, hv, hn, v->prefix, v->prefix_len, v->base64, raw, 1, why, whylen);
    }
    errbuf_set(why, whylen, "unknown scheme");
    return -1;
}

/* Signs an outgoing delivery the Standard Webhooks way with the first
 * secret: "v1," + base64(HMAC(key, "{id}.{ts}.{body}")). The id must be
 * one that sig_verify accepts, so a signed delivery always verifies. */
int sig_sign_standard(const sig_verifier *v, const char *msg_id, int64_t timestamp_s, const uint8_t *body,
                      size_t len, char *out, size_t outlen)
{
    char b64[4 * ((SIG_MAC_LEN + 2) / 3) + 1];
    if (out == NULL || outlen == 0)
        return -1;
    out[0] = '\0';
    if (v == NULL || v->scheme != SIG_STANDARD || v->nkeys == 0 || msg_id == NULL || (body == NULL && len > 0) ||
        timestamp_s < 0 || timestamp_s > 999999999999999LL || outlen < 3 + sizeof b64)
        return -1;
    size_t idn = strlen(msg_id);
    if (!sig_id_ok(msg_id, idn))
        return -1;
    char ts[24];
    int tsn = snprintf(ts, sizeof ts, "%lld", (long long)timestamp_s);
    if (tsn <= 0 || (size_t)tsn >= sizeof ts)
        return -1;
    const void *b = body == NULL ? (const void *)"" : (const void *)body;
    sig_part parts[] = {{msg_id, idn}, {".", 1}, {ts, (size_t)tsn}, {".", 1}, {b, len}};
    uint8_t mac[SIG_MAC_LEN];
    if (sig_mac_parts(v->keys[0], parts, 5, mac) != 0) {
        OPENSSL_cleanse(mac, sizeof mac);
        return -1;
    }
    sig_b64_encode(mac, sizeof mac, b64);
    OPENSSL_cleanse(mac, sizeof mac);
    snprintf(out, outlen, "v1,%s", b64);
    return 0;
}
