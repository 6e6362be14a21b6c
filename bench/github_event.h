/*
 * github_event.h — the GitHub-style webhook that bench_prefill stores and
 * bench_load sends, in one place so that the rows a pre-fill leaves look like
 * the ones a load run adds: a push event's JSON body of a chosen size that
 * names its delivery id (so every event has its own body, hence its own
 * body digest), and its X-Hub-Signature-256 (HMAC-SHA256 of the body with
 * the source's secret, hex). Header-only: each bench program is built alone.
 */
#ifndef ONCE_BENCH_GITHUB_EVENT_H
#define ONCE_BENCH_GITHUB_EVENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

/* The smallest body gh_event_body writes (the JSON around the padding). */
#define GH_EVENT_BODY_MIN 320
#define GH_EVENT_BODY_MAX (1u << 20)

/* A push event of exactly size bytes (GH_EVENT_BODY_MIN..GH_EVENT_BODY_MAX,
 * and < cap) for delivery id, into out (NUL-terminated). The commit ids are
 * derived from seq so that bodies differ beyond the id too. Returns size, or
 * 0 when size or cap do not fit. */
static inline size_t gh_event_body(char *out, size_t cap, size_t size, const char *id, uint64_t seq) {
    if (size < GH_EVENT_BODY_MIN || size > GH_EVENT_BODY_MAX || size >= cap) return 0;
    int n = snprintf(out, cap,
                     "{\"ref\":\"refs/heads/main\",\"before\":\"%016llx%016llx00000000\","
                     "\"after\":\"%016llx%016llx00000000\",\"delivery\":\"%.100s\","
                     "\"repository\":{\"id\":4242,\"full_name\":\"bench/once\",\"private\":false},"
                     "\"pusher\":{\"name\":\"bench\"},\"commits\":[{\"message\":\"bench %llu\"}],\"pad\":\"",
                     (unsigned long long)seq, (unsigned long long)(seq * 2654435761u),
                     (unsigned long long)(seq + 1), (unsigned long long)((seq + 1) * 2654435761u), id,
                     (unsigned long long)seq);
    if (n < 0 || (size_t)n + 2 > size) return 0;
    memset(out + n, 'x', size - (size_t)n - 2);
    out[size - 2] = '"';
    out[size - 1] = '}';
    out[size] = '\0';
    return size;
}

/* "sha256=" + hex HMAC-SHA256(secret, body) into out[7 + 64 + 1]. 0 or -1. */
static inline int gh_event_sign(const char *secret, const void *body, size_t len, char out[72]) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), body, len, mac, &maclen) || maclen != 32) return -1;
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sha256=", 7);
    for (unsigned i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[mac[i] >> 4];
        out[7 + 2 * i + 1] = hex[mac[i] & 15];
    }
    out[71] = '\0';
    return 0;
}

#endif
