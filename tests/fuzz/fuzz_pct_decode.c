/*
 * fuzz_pct_decode.c — libFuzzer target for the gateway's percent-decoder of
 * request paths and query values (src/common/pct.c), which sees raw client
 * bytes.
 *
 * pct.c is part of the gateway's objects, which the target links. Each input is decoded into a buffer of exactly
 * cap bytes (heap, so ASan sees a write past it), for a cap taken from the
 * input and for a cap large enough for any result, and the result is
 * compared with an independent reference decoder. pct_valid is checked
 * against the same reference.
 */
#include "common/pct.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ref_hex(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (unsigned char)(c | 0x20);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The reference: decodes in[0..n) into out (at least n+1 bytes); returns the
 * decoded length, or -1 for a truncated or non-hex escape or an encoded
 * NUL. A raw byte (even a raw NUL, which pct_decode's contract does not
 * mention) is copied as it is. */
static long ref_decode(const uint8_t *in, size_t n, uint8_t *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        if (n - i < 3)
            return -1;
        int hi = ref_hex(in[i + 1]), lo = ref_hex(in[i + 2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -1;
        out[o++] = (uint8_t)(hi * 16 + lo);
        i += 2;
    }
    out[o] = 0;
    return (long)o;
}

/* The reference of pct_valid on a NUL-terminated string. */
static int ref_valid(const uint8_t *s)
{
    for (size_t i = 0; s[i]; i++) {
        if (s[i] == '%') {
            if (ref_hex(s[i + 1]) < 0 || ref_hex(s[i + 2]) < 0)
                return 0;
            i += 2;
        } else if (s[i] <= 0x20 || s[i] >= 0x7f) {
            return 0;
        }
    }
    return 1;
}

/* Decodes into exactly cap heap bytes and checks against the reference. */
static void check_cap(const char *in, size_t n, size_t cap, const uint8_t *ref, long reflen)
{
    char *out = malloc(cap ? cap : 1);
    if (!out)
        return;
    /* A zero cap gets a one-byte buffer: a write of it still shows (it
     * must not happen), checked through the canary. */
    if (!cap)
        out[0] = 'Z';
    int rc = pct_decode(in, n, out, cap);
    if (rc != 0 && rc != -1)
        __builtin_trap();
    int want_ok = reflen >= 0 && (size_t)reflen + 1 <= cap;
    if ((rc == 0) != want_ok)
        __builtin_trap();
    if (rc == 0 && memcmp(out, ref, (size_t)reflen + 1) != 0)
        __builtin_trap();
    if (!cap && out[0] != 'Z')
        __builtin_trap();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    /* The first byte picks a small cap (0..255); the rest is the input. */
    size_t small_cap = size ? data[0] : 0;
    const uint8_t *in = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;

    uint8_t *ref = malloc(n + 1);
    if (!ref)
        return 0;
    long reflen = ref_decode(in, n, ref);

    /* in is passed at its exact length, not NUL-terminated: pct_decode must
     * never read in[n]. Copy it to a heap buffer of exactly n bytes. */
    char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(ref);
        return 0;
    }
    if (n)
        memcpy(exact, in, n);
    check_cap(exact, n, small_cap, ref, reflen);
    check_cap(exact, n, n + 1, ref, reflen);
    check_cap(exact, n, n + 1 + 64, ref, reflen);
    if (reflen >= 0) {
        check_cap(exact, n, (size_t)reflen, ref, reflen);     /* one short: -1 */
        check_cap(exact, n, (size_t)reflen + 1, ref, reflen); /* exact fit: 0 */
    }

    /* pct_valid on the input as a C string (up to its first NUL). */
    char *s = malloc(n + 1);
    if (s) {
        if (n)
            memcpy(s, in, n);
        s[n] = '\0';
        int v = pct_valid(s);
        if (v != 0 && v != 1)
            __builtin_trap();
        if (v != ref_valid((const uint8_t *)s))
            __builtin_trap();
        /* Valid and free of encoded NULs: it decodes, and the result is no
         * longer than the input. */
        if (v) {
            size_t sl = strlen(s);
            uint8_t *r2 = malloc(sl + 1);
            if (r2) {
                long l2 = ref_decode((const uint8_t *)s, sl, r2);
                char *o2 = malloc(sl + 1);
                if (o2) {
                    int rc = pct_decode(s, sl, o2, sl + 1);
                    if (l2 >= 0 && (rc != 0 || strlen(o2) > sl))
                        __builtin_trap();
                    free(o2);
                }
                free(r2);
            }
        }
        free(s);
    }
    free(exact);
    free(ref);
    return 0;
}
