/*
 * fuzz_sig_headers.c — libFuzzer target for the webhook signature header
 * parsers (webhook_sig.c).
 *
 * Input layout: 8 bytes of clock (little-endian milliseconds; absent bytes
 * are zero), then '\n'-separated header values in this order, and the rest
 * as the body:
 *   0 Stripe-Signature      1 X-Hub-Signature-256   2 webhook-id
 *   3 webhook-timestamp     4 webhook-signature      5 X-Slack-Signature
 *   6 X-Slack-Request-Timestamp                      7 X-Signature (hmac-sha256)
 *   8 a candidate "whsec_" secret                    9… the body
 * A value that is exactly "!" stands for an absent header.
 *
 * Verifiers are built once (as the gateway does). Checked whatever the
 * input: sig_verify returns 0 or -1 and on -1 leaves a non-empty one-line
 * reason; none accepts everything; and whatever sig_sign_standard signs,
 * sig_verify accepts (sign/verify round trip, with the fixed secret and
 * with a fuzzed one when it is a valid secret).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/webhook_sig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define NFIELDS 9

enum { V_STRIPE, V_GITHUB, V_STANDARD, V_SLACK, V_HEX, V_B64, V_NONE, V_COUNT };
static sig_verifier *g_v[V_COUNT];

typedef struct fz_hdrs {
    const char *name[8];
    const char *value[8];
    size_t n;
} fz_hdrs;

/* The header callback: case-insensitive lookup, as HTTP servers do. */
static const char *fz_get(void *ctx, const char *name)
{
    const fz_hdrs *h = ctx;
    for (size_t i = 0; i < h->n; i++) {
        if (strcasecmp(h->name[i], name) == 0)
            return h->value[i];
    }
    return NULL;
}

/* Adds a header unless the value stands for "absent". */
static void fz_add(fz_hdrs *h, const char *name, const char *value)
{
    if (value == NULL || strcmp(value, "!") == 0 || h->n >= 8)
        return;
    h->name[h->n] = name;
    h->value[h->n] = value;
    h->n++;
}

/* Builds one verifier, or stops the run: a fixed configuration that does
 * not build is a bug, not an input. */
static sig_verifier *fz_new(sig_scheme scheme, const char *const *secrets, size_t n, const char *header, int b64,
                            const char *prefix)
{
    sig_config cfg = {.scheme = scheme, .secrets = secrets, .nsecrets = n, .header = header, .base64 = b64,
                      .prefix = prefix};
    sig_verifier *v = NULL;
    char err[200];
    if (sig_verifier_new(&cfg, &v, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_sig_headers: %s\n", err);
        abort();
    }
    return v;
}

/* Builds the fixed verifiers once, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static const char *const two[] = {"whsec_test", "It's a Secret to Everybody"};
    static const char *const std[] = {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                      "whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="};
    g_v[V_STRIPE] = fz_new(SIG_STRIPE, two, 2, NULL, 0, NULL);
    g_v[V_GITHUB] = fz_new(SIG_GITHUB, two, 2, NULL, 0, NULL);
    g_v[V_STANDARD] = fz_new(SIG_STANDARD, std, 2, NULL, 0, NULL);
    g_v[V_SLACK] = fz_new(SIG_SLACK, two, 2, NULL, 0, NULL);
    g_v[V_HEX] = fz_new(SIG_HMAC_SHA256, two, 2, "X-Signature", 0, "sha256=");
    g_v[V_B64] = fz_new(SIG_HMAC_SHA256, two, 2, "X-Signature", 1, NULL);
    g_v[V_NONE] = fz_new(SIG_NONE, NULL, 0, NULL, 0, NULL);
    return 0;
}

/* Verifies and checks the result's shape. */
static int fz_verify(const sig_verifier *v, fz_hdrs *h, const uint8_t *body, size_t len, int64_t now)
{
    char why[64];
    memset(why, 'x', sizeof why);
    int rc = sig_verify(v, fz_get, h, body, len, now, why, sizeof why);
    if (rc != 0 && rc != -1)
        __builtin_trap();
    if (memchr(why, '\0', sizeof why) == NULL || strchr(why, '\n') != NULL)
        __builtin_trap();
    if (rc == -1 && why[0] == '\0')
        __builtin_trap();
    return rc;
}

/* Signs with v and checks that the signature verifies: the gateway's
 * deliveries must be accepted by any Standard Webhooks receiver, this one
 * included. A refused id must be one that verification refuses too. */
static void fz_round_trip(const sig_verifier *v, const char *id, int64_t ts, const uint8_t *body, size_t len)
{
    char sig[64];
    if (sig_sign_standard(v, id, ts, body, len, sig, sizeof sig) != 0) {
        int visible = id[0] != '\0';
        for (const unsigned char *p = (const unsigned char *)id; *p; p++)
            visible &= *p > 0x20 && *p != 0x7f;
        if (visible)
            __builtin_trap();
        return;
    }
    char tss[24];
    snprintf(tss, sizeof tss, "%lld", (long long)ts);
    fz_hdrs h = {0};
    fz_add(&h, "webhook-id", id);
    fz_add(&h, "webhook-timestamp", tss);
    fz_add(&h, "webhook-signature", sig);
    if (strcmp(id, "!") == 0)
        return; /* our own "absent" marker */
    if (fz_verify(v, &h, body, len, ts * 1000) != 0)
        __builtin_trap();
    if (len > 0 && fz_verify(v, &h, body, len - 1, ts * 1000) == 0)
        __builtin_trap(); /* a different body must not verify */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t clock = 0;
    size_t off = 0;
    for (; off < 8 && off < size; off++)
        clock |= (uint64_t)data[off] << (8 * off);
    int64_t now = (int64_t)clock;

    char *field[NFIELDS] = {0};
    for (size_t i = 0; i < NFIELDS; i++) {
        const uint8_t *nl = off < size ? memchr(data + off, '\n', size - off) : NULL;
        size_t n = nl != NULL ? (size_t)(nl - (data + off)) : size - off;
        field[i] = malloc(n + 1);
        if (field[i] == NULL)
            goto out;
        if (n > 0)
            memcpy(field[i], data + off, n);
        field[i][n] = '\0';
        off += n;
        if (nl != NULL)
            off++;
    }
    const uint8_t *body = data + off;
    size_t len = size - off;

    fz_hdrs h = {0};
    fz_add(&h, "Stripe-Signature", field[0]);
    fz_add(&h, "X-Hub-Signature-256", field[1]);
    fz_add(&h, "webhook-id", field[2]);
    fz_add(&h, "webhook-timestamp", field[3]);
    fz_add(&h, "webhook-signature", field[4]);
    fz_add(&h, "X-Slack-Signature", field[5]);
    fz_add(&h, "X-Slack-Request-Timestamp", field[6]);
    fz_add(&h, "X-Signature", field[7]);

    /* at the fuzzed clock, and at a fixed one the timestamps can reach */
    for (int k = 0; k < V_COUNT; k++) {
        int rc = fz_verify(g_v[k], &h, body, len, now);
        if (k == V_NONE && rc != 0)
            __builtin_trap();
        fz_verify(g_v[k], &h, body, len, 1700000000000LL);
    }

    int64_t ts = (int64_t)(clock % 1000000000000000ULL);
    fz_round_trip(g_v[V_STANDARD], field[2], ts, body, len);

    /* a fuzzed secret: refused cleanly, or it signs what it verifies */
    const char *sec[] = {field[8]};
    sig_config cfg = {.scheme = SIG_STANDARD, .secrets = sec, .nsecrets = 1};
    sig_verifier *v = NULL;
    char err[128];
    if (sig_verifier_new(&cfg, &v, err, sizeof err) == 0) {
        fz_round_trip(v, field[2], ts, body, len);
        sig_verifier_free(v);
    } else if (v != NULL || err[0] == '\0') {
        __builtin_trap();
    }
out:
    for (size_t i = 0; i < NFIELDS; i++)
        free(field[i]);
    return 0;
}
