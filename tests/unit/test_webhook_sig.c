/*
 * test_webhook_sig.c — webhook signature verification (webhook_sig.c) and
 * RFC 6901 JSON Pointers (json_pointer.c).
 *
 * Published vectors, each also recomputed independently:
 *  - GitHub, "Validating webhook deliveries" (docs.github.com): secret
 *    "It's a Secret to Everybody", payload "Hello, World!", X-Hub-Signature-256
 *    sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17.
 *  - Standard Webhooks specification / reference libraries' tests: secret
 *    whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id msg_p5jXN8AQM9LWM0D4loKWxJek,
 *    timestamp 1614265330, payload {"test": 2432232314}, signature
 *    v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=.
 *  - Slack, "Verifying requests from Slack" (api.slack.com): signing secret
 *    8f742231b10e8888abcd99yyyzzz85a5, timestamp 1531420618, the slash-command
 *    body below, signature v0=a2114d57…c69b503.
 *  - Stripe publishes no fixed vector; its docs (and its libraries'
 *    compute_signature) define v1 = hex(HMAC-SHA256(key = the whole endpoint
 *    secret "whsec_…" as text, "{t}.{payload}")). The fixed vector below was
 *    computed that way with Python's hmac; others with OpenSSL's one-shot
 *    HMAC() in this file, a path independent of the verifier's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/json_pointer.h"
#include "common/webhook_sig.h"

/* ---- a request's headers ------------------------------------------------ */

typedef struct hdrs {
    size_t n;
    const char *name[8];
    const char *value[8];
} hdrs;

static const char *hdr_get(void *ctx, const char *name)
{
    const hdrs *h = ctx;
    for (size_t i = 0; i < h->n; i++) {
        if (strcasecmp(h->name[i], name) == 0)
            return h->value[i];
    }
    return NULL;
}

static void hdr_set(hdrs *h, const char *name, const char *value)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcasecmp(h->name[i], name) == 0) {
            h->value[i] = value;
            return;
        }
    }
    assert_true(h->n < 8);
    h->name[h->n] = name;
    h->value[h->n] = value;
    h->n++;
}

static sig_verifier *mk(sig_scheme scheme, const char *const *secrets, size_t n)
{
    sig_config cfg = {.scheme = scheme, .secrets = secrets, .nsecrets = n};
    sig_verifier *v = NULL;
    char err[200] = "";
    if (sig_verifier_new(&cfg, &v, err, sizeof err) != 0)
        fail_msg("sig_verifier_new: %s", err);
    return v;
}

/* Verifies and checks the outcome (0, or -1 with a reason containing want). */
static void expect(const sig_verifier *v, hdrs *h, const char *body, int64_t now_ms, const char *want, int line)
{
    char why[100] = "x";
    int rc = sig_verify(v, hdr_get, h, (const uint8_t *)body, strlen(body), now_ms, why, sizeof why);
    if (want == NULL) {
        if (rc != 0)
            fail_msg("line %d: rejected (%s), want accepted", line, why);
    } else {
        if (rc != -1)
            fail_msg("line %d: accepted, want rejected with '%s'", line, want);
        if (strstr(why, want) == NULL)
            fail_msg("line %d: reason '%s', want '%s'", line, why, want);
    }
}
#define EXPECT_OK(v, h, body, now) expect((v), (h), (body), (now), NULL, __LINE__)
#define EXPECT_NO(v, h, body, now, why) expect((v), (h), (body), (now), (why), __LINE__)

/* Reference HMAC-SHA256 in lower-case hex through OpenSSL's one-shot
 * HMAC(): independent of the verifier's EVP_MAC contexts. */
static void ref_hex(const char *key, const char *msg, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    assert_non_null(HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)msg, strlen(msg), md, &mdlen));
    assert_int_equal(mdlen, 32);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void upper(char *s)
{
    for (; *s; s++) {
        if (*s >= 'a' && *s <= 'f')
            *s = (char)(*s - 'a' + 'A');
    }
}

/* ---- GitHub ---------------------------------------------------------------- */

#define GH_SECRET "It's a Secret to Everybody"
#define GH_BODY "Hello, World!"
#define GH_HEX "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

static void test_github_vector(void **state)
{
    (void)state;
    const char *sec[] = {GH_SECRET};
    sig_verifier *v = mk(SIG_GITHUB, sec, 1);
    hdrs h = {0};
    EXPECT_NO(v, &h, GH_BODY, 0, "missing header");
    hdr_set(&h, "X-Hub-Signature-256", "sha256=" GH_HEX);
    EXPECT_OK(v, &h, GH_BODY, 0);
    EXPECT_NO(v, &h, "Hello, World?", 0, "no signature matched");
    EXPECT_NO(v, &h, "Hello, World! ", 0, "no signature matched");
    EXPECT_NO(v, &h, "", 0, "no signature matched");
    /* header names are case-insensitive: the callback's job, checked here */
    hdrs lower = {0};
    hdr_set(&lower, "x-hub-signature-256", "sha256=" GH_HEX);
    EXPECT_OK(v, &lower, GH_BODY, 0);
    /* upper-case hex, surrounding whitespace */
    char up[80] = "sha256=" GH_HEX;
    upper(up + 7);
    hdr_set(&h, "X-Hub-Signature-256", up);
    EXPECT_OK(v, &h, GH_BODY, 0);
    hdr_set(&h, "X-Hub-Signature-256", " \tsha256=" GH_HEX "\t ");
    EXPECT_OK(v, &h, GH_BODY, 0);
    /* malformed */
    const char *bad[] = {"",
                         "sha256=",
                         GH_HEX,
                         "sha1=" GH_HEX,
                         "SHA256=" GH_HEX,
                         "sha256 =" GH_HEX,
                         "sha256=" GH_HEX "0",
                         "sha256=" GH_HEX "00",
                         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
                         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g",
                         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e 7",
                         "sha256=" GH_HEX ",sha256=" GH_HEX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdr_set(&h, "X-Hub-Signature-256", bad[i]);
        EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    }
    /* one wrong hex digit: well formed, no match */
    hdr_set(&h, "X-Hub-Signature-256", "sha256=857107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
    EXPECT_NO(v, &h, GH_BODY, 0, "no signature matched");
    sig_verifier_free(v);

    /* wrong secret alone; then rotated in second place */
    const char *wrong[] = {"It's a secret to everybody"};
    v = mk(SIG_GITHUB, wrong, 1);
    hdr_set(&h, "X-Hub-Signature-256", "sha256=" GH_HEX);
    EXPECT_NO(v, &h, GH_BODY, 0, "no signature matched");
    sig_verifier_free(v);
    const char *rot[] = {"new-secret", GH_SECRET};
    v = mk(SIG_GITHUB, rot, 2);
    EXPECT_OK(v, &h, GH_BODY, 0);
    sig_verifier_free(v);
}

/* ---- Standard Webhooks ------------------------------------------------------ */

#define SW_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SW_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define SW_TS 1614265330LL
#define SW_BODY "{\"test\": 2432232314}"
#define SW_SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static void sw_headers(hdrs *h, const char *id, const char *ts, const char *sig)
{
    memset(h, 0, sizeof *h);
    hdr_set(h, "webhook-id", id);
    hdr_set(h, "webhook-timestamp", ts);
    hdr_set(h, "webhook-signature", sig);
}

static void test_standard_vector(void **state)
{
    (void)state;
    const char *sec[] = {SW_SECRET};
    sig_verifier *v = mk(SIG_STANDARD, sec, 1);
    const int64_t now = SW_TS * 1000;
    hdrs h;
    sw_headers(&h, SW_ID, "1614265330", SW_SIG);
    EXPECT_OK(v, &h, SW_BODY, now);
    EXPECT_OK(v, &h, SW_BODY, now + 299999);
    EXPECT_OK(v, &h, SW_BODY, now + 300000);
    EXPECT_OK(v, &h, SW_BODY, now - 300000);
    EXPECT_NO(v, &h, SW_BODY, now + 300001, "stale timestamp");
    EXPECT_NO(v, &h, SW_BODY, now - 300001, "future timestamp");
    EXPECT_NO(v, &h, "{\"test\": 2432232315}", now, "no signature matched");
    EXPECT_NO(v, &h, "{\"test\":2432232314}", now, "no signature matched");

    /* the id and timestamp are signed */
    sw_headers(&h, "msg_p5jXN8AQM9LWM0D4loKWxJeK", "1614265330", SW_SIG);
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    sw_headers(&h, SW_ID, "1614265331", SW_SIG);
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    sw_headers(&h, SW_ID, "01614265330", SW_SIG);
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");

    /* a list: other versions and broken entries are skipped */
    sw_headers(&h, SW_ID, "1614265330", "v1a,AAAA v2,xyz v1,notbase64! v1,AAAA  " SW_SIG " v1,");
    EXPECT_OK(v, &h, SW_BODY, now);
    sw_headers(&h, SW_ID, "1614265330", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    /* no padding is accepted, padding in the wrong place is not */
    sw_headers(&h, SW_ID, "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE");
    EXPECT_OK(v, &h, SW_BODY, now);
    sw_headers(&h, SW_ID, "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1O=E");
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    /* non-zero unused bits in the last character: not canonical */
    sw_headers(&h, SW_ID, "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=");
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    /* URL-safe alphabet is not what the spec sends */
    sw_headers(&h, SW_ID, "1614265330", "v1,g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");

    /* malformed */
    const char *badsig[] = {"", " ", "v1", "v2,abc", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1;abc"};
    for (size_t i = 0; i < sizeof badsig / sizeof badsig[0]; i++) {
        sw_headers(&h, SW_ID, "1614265330", badsig[i]);
        EXPECT_NO(v, &h, SW_BODY, now, "malformed header");
    }
    const char *badts[] = {"", "-1614265330", "+1614265330", "1614265330.0", "1614265330s", "0x60372a32",
                           "1 614265330", "99999999999999999999", "9223372036854775808", "1e9"};
    for (size_t i = 0; i < sizeof badts / sizeof badts[0]; i++) {
        sw_headers(&h, SW_ID, badts[i], SW_SIG);
        EXPECT_NO(v, &h, SW_BODY, now, "malformed header");
    }
    const char *badid[] = {"", "msg 1", "msg\x01", "msg\x7f"};
    for (size_t i = 0; i < sizeof badid / sizeof badid[0]; i++) {
        sw_headers(&h, badid[i], "1614265330", SW_SIG);
        EXPECT_NO(v, &h, SW_BODY, now, "malformed header");
    }
    memset(&h, 0, sizeof h);
    hdr_set(&h, "webhook-id", SW_ID);
    hdr_set(&h, "webhook-signature", SW_SIG);
    EXPECT_NO(v, &h, SW_BODY, now, "missing header");

    /* Svix's own header names (when no webhook-signature is sent) */
    memset(&h, 0, sizeof h);
    hdr_set(&h, "svix-id", SW_ID);
    hdr_set(&h, "svix-timestamp", "1614265330");
    hdr_set(&h, "svix-signature", SW_SIG);
    EXPECT_OK(v, &h, SW_BODY, now);
    /* never mixed: webhook-signature present means webhook-id is read */
    hdr_set(&h, "webhook-signature", SW_SIG);
    EXPECT_NO(v, &h, SW_BODY, now, "missing header");
    sig_verifier_free(v);

    /* rotation: the vector's secret second */
    const char *rot[] = {"whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA==", SW_SECRET};
    v = mk(SIG_STANDARD, rot, 2);
    sw_headers(&h, SW_ID, "1614265330", SW_SIG);
    EXPECT_OK(v, &h, SW_BODY, now);
    sig_verifier_free(v);
    const char *other[] = {"whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="};
    v = mk(SIG_STANDARD, other, 1);
    EXPECT_NO(v, &h, SW_BODY, now, "no signature matched");
    sig_verifier_free(v);
}

static void test_standard_sign(void **state)
{
    (void)state;
    const char *sec[] = {SW_SECRET, "whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="};
    sig_verifier *v = mk(SIG_STANDARD, sec, 2);
    char out[64];
    /* the spec's vector, signed with the first secret */
    assert_int_equal(sig_sign_standard(v, SW_ID, SW_TS, (const uint8_t *)SW_BODY, strlen(SW_BODY), out, sizeof out), 0);
    assert_string_equal(out, SW_SIG);
    /* round trip with other content */
    const char *body = "{\"id\":\"evt_42\",\"data\":[1,2,3]}";
    assert_int_equal(
        sig_sign_standard(v, "evt_42", 1700000000, (const uint8_t *)body, strlen(body), out, sizeof out), 0);
    assert_int_equal(strncmp(out, "v1,", 3), 0);
    assert_int_equal(strlen(out), 47);
    hdrs h;
    sw_headers(&h, "evt_42", "1700000000", out);
    EXPECT_OK(v, &h, body, 1700000000LL * 1000);
    EXPECT_NO(v, &h, "{\"id\":\"evt_43\",\"data\":[1,2,3]}", 1700000000LL * 1000, "no signature matched");
    /* an empty body */
    assert_int_equal(sig_sign_standard(v, "m", 0, NULL, 0, out, sizeof out), 0);
    sw_headers(&h, "m", "0", out);
    EXPECT_OK(v, &h, "", 0);
    /* refusals: small buffer, bad id, negative time, wrong scheme */
    assert_int_equal(sig_sign_standard(v, SW_ID, SW_TS, (const uint8_t *)"x", 1, out, 47), -1);
    assert_int_equal(out[0], '\0');
    assert_int_equal(sig_sign_standard(v, SW_ID, SW_TS, (const uint8_t *)"x", 1, out, 48), 0);
    assert_int_equal(sig_sign_standard(v, "", SW_TS, (const uint8_t *)"x", 1, out, sizeof out), -1);
    assert_int_equal(sig_sign_standard(v, "a b", SW_TS, (const uint8_t *)"x", 1, out, sizeof out), -1);
    assert_int_equal(sig_sign_standard(v, NULL, SW_TS, (const uint8_t *)"x", 1, out, sizeof out), -1);
    assert_int_equal(sig_sign_standard(v, SW_ID, -1, (const uint8_t *)"x", 1, out, sizeof out), -1);
    assert_int_equal(sig_sign_standard(v, SW_ID, SW_TS, NULL, 1, out, sizeof out), -1);
    assert_int_equal(sig_sign_standard(NULL, SW_ID, SW_TS, (const uint8_t *)"x", 1, out, sizeof out), -1);
    sig_verifier_free(v);
    const char *gh[] = {GH_SECRET};
    v = mk(SIG_GITHUB, gh, 1);
    assert_int_equal(sig_sign_standard(v, SW_ID, SW_TS, (const uint8_t *)"x", 1, out, sizeof out), -1);
    sig_verifier_free(v);
}

/* ---- Stripe ----------------------------------------------------------------- */

#define ST_SECRET "whsec_test"
#define ST_BODY "{\"id\":\"evt_1\",\"object\":\"event\"}"
/* hex(HMAC-SHA256("whsec_test", "1700000000." ST_BODY)), computed with Python */
#define ST_HEX "4c15fb2a43f93ef61eaa3e0893866d57cad9cad4223242cfb96f362480cb4021"
#define ST_NOW (1700000000LL * 1000)

static void test_stripe(void **state)
{
    (void)state;
    char ref[65];
    ref_hex(ST_SECRET, "1700000000." ST_BODY, ref);
    assert_string_equal(ref, ST_HEX);

    const char *sec[] = {ST_SECRET};
    sig_verifier *v = mk(SIG_STRIPE, sec, 1);
    hdrs h = {0};
    EXPECT_NO(v, &h, ST_BODY, ST_NOW, "missing header");
    const char *good[] = {
        "t=1700000000,v1=" ST_HEX,
        "t=1700000000,v1=" ST_HEX ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
        "v1=" ST_HEX ",t=1700000000",
        "t=1700000000,v1=0000000000000000000000000000000000000000000000000000000000000000,v1=" ST_HEX,
        "t=1700000000,v1=bad,v1=" ST_HEX ",v1=",
        "t=1700000000, v1=" ST_HEX,
        " t=1700000000 ,\tv1=" ST_HEX " ",
        ",,t=1700000000,,,v1=" ST_HEX ",,",
        "t=1700000000,scheme=x,foo,=,==,v1=" ST_HEX,
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        hdr_set(&h, "Stripe-Signature", good[i]);
        EXPECT_OK(v, &h, ST_BODY, ST_NOW);
    }
    char up[100] = "t=1700000000,v1=" ST_HEX;
    upper(up + 16);
    hdr_set(&h, "Stripe-Signature", up);
    EXPECT_OK(v, &h, ST_BODY, ST_NOW);

    hdr_set(&h, "Stripe-Signature", "t=1700000000,v1=" ST_HEX);
    EXPECT_NO(v, &h, "{\"id\":\"evt_2\",\"object\":\"event\"}", ST_NOW, "no signature matched");
    EXPECT_NO(v, &h, ST_BODY "\n", ST_NOW, "no signature matched");
    EXPECT_NO(v, &h, ST_BODY, ST_NOW + 300001, "stale timestamp");
    EXPECT_NO(v, &h, ST_BODY, ST_NOW - 300001, "future timestamp");
    EXPECT_NO(v, &h, ST_BODY, 0, "future timestamp");
    EXPECT_NO(v, &h, ST_BODY, INT64_MIN, "future timestamp");
    EXPECT_NO(v, &h, ST_BODY, INT64_MAX, "stale timestamp");
    EXPECT_OK(v, &h, ST_BODY, ST_NOW + 300000);
    /* the timestamp is signed: a fresh t with an old signature fails */
    hdr_set(&h, "Stripe-Signature", "t=1700000001,v1=" ST_HEX);
    EXPECT_NO(v, &h, ST_BODY, ST_NOW, "no signature matched");
    /* only v1 counts: the right MAC labelled v0 does not */
    hdr_set(&h, "Stripe-Signature", "t=1700000000,v0=" ST_HEX ",v1=00");
    EXPECT_NO(v, &h, ST_BODY, ST_NOW, "no signature matched");

    const char *bad[] = {"",
                         ",",
                         ",,,,",
                         "=",
                         "t",
                         "t=",
                         "t=,v1=" ST_HEX,
                         "v1=" ST_HEX,
                         "t=1700000000",
                         "t=1700000000,v0=" ST_HEX,
                         "t 1700000000,v1=" ST_HEX,
                         "t=1700000000,t=1700000000,v1=" ST_HEX,
                         "t=1700000000x,v1=" ST_HEX,
                         "t=-1700000000,v1=" ST_HEX,
                         "t=17000000000000000000000,v1=" ST_HEX,
                         "t=9223372036854775807,v1=" ST_HEX,
                         "T=1700000000,v1=" ST_HEX,
                         "t=1700000000;v1=" ST_HEX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdr_set(&h, "Stripe-Signature", bad[i]);
        EXPECT_NO(v, &h, ST_BODY, ST_NOW, "malformed header");
    }
    /* a huge header of separators costs time, not memory or a crash */
    size_t big = 1 << 20;
    char *huge = malloc(big + 1);
    assert_non_null(huge);
    memset(huge, ',', big);
    huge[big] = '\0';
    hdr_set(&h, "Stripe-Signature", huge);
    EXPECT_NO(v, &h, ST_BODY, ST_NOW, "malformed header");
    memcpy(huge, "t=1700000000,", 13);
    memcpy(huge + big - 80, ",v1=" ST_HEX, 68);
    hdr_set(&h, "Stripe-Signature", huge);
    EXPECT_OK(v, &h, ST_BODY, ST_NOW);
    free(huge);
    sig_verifier_free(v);

    /* rotation: either secret */
    const char *rot[] = {"whsec_new", ST_SECRET};
    v = mk(SIG_STRIPE, rot, 2);
    hdr_set(&h, "Stripe-Signature", "t=1700000000,v1=" ST_HEX);
    EXPECT_OK(v, &h, ST_BODY, ST_NOW);
    ref_hex("whsec_new", "1700000000." ST_BODY, ref);
    char hv[120];
    snprintf(hv, sizeof hv, "t=1700000000,v1=%s", ref);
    hdr_set(&h, "Stripe-Signature", hv);
    EXPECT_OK(v, &h, ST_BODY, ST_NOW);
    sig_verifier_free(v);
    /* the whsec_ prefix is part of Stripe's key: without it, no match */
    const char *nopfx[] = {"test"};
    v = mk(SIG_STRIPE, nopfx, 1);
    hdr_set(&h, "Stripe-Signature", "t=1700000000,v1=" ST_HEX);
    EXPECT_NO(v, &h, ST_BODY, ST_NOW, "no signature matched");
    sig_verifier_free(v);

    /* a configured tolerance */
    sig_config cfg = {.scheme = SIG_STRIPE, .secrets = sec, .nsecrets = 1, .tolerance_ms = 10000};
    char err[100];
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    EXPECT_OK(v, &h, ST_BODY, ST_NOW + 10000);
    EXPECT_NO(v, &h, ST_BODY, ST_NOW + 10001, "stale timestamp");
    EXPECT_NO(v, &h, ST_BODY, ST_NOW - 10001, "future timestamp");
    sig_verifier_free(v);
}

/* ---- Slack ------------------------------------------------------------------- */

#define SL_SECRET "8f742231b10e8888abcd99yyyzzz85a5"
#define SL_BODY                                                                                                      \
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name="  \
    "foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%"     \
    "2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015."   \
    "47445629121.803a0bc887a14d10d2c447fce8b6703c"
#define SL_SIG "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

static void test_slack_vector(void **state)
{
    (void)state;
    const char *sec[] = {SL_SECRET};
    sig_verifier *v = mk(SIG_SLACK, sec, 1);
    const int64_t now = 1531420618LL * 1000;
    hdrs h = {0};
    hdr_set(&h, "X-Slack-Signature", SL_SIG);
    EXPECT_NO(v, &h, SL_BODY, now, "missing header");
    hdr_set(&h, "X-Slack-Request-Timestamp", "1531420618");
    EXPECT_OK(v, &h, SL_BODY, now);
    EXPECT_OK(v, &h, SL_BODY, now + 60000);
    EXPECT_NO(v, &h, SL_BODY, 1750000000LL * 1000, "stale timestamp");
    EXPECT_NO(v, &h, SL_BODY, now - 600000, "future timestamp");
    EXPECT_NO(v, &h, SL_BODY "&x=1", now, "no signature matched");
    hdr_set(&h, "X-Slack-Request-Timestamp", "1531420619");
    EXPECT_NO(v, &h, SL_BODY, now, "no signature matched");
    hdr_set(&h, "X-Slack-Request-Timestamp", "1531420618.5");
    EXPECT_NO(v, &h, SL_BODY, now, "malformed header");
    hdr_set(&h, "X-Slack-Request-Timestamp", "1531420618");
    const char *bad[] = {"", "v0=", "v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
                         "a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v0:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdr_set(&h, "X-Slack-Signature", bad[i]);
        EXPECT_NO(v, &h, SL_BODY, now, "malformed header");
    }
    char up[80] = SL_SIG;
    upper(up + 3);
    hdr_set(&h, "X-Slack-Signature", up);
    EXPECT_OK(v, &h, SL_BODY, now);
    sig_verifier_free(v);
}

/* ---- hmac-sha256 and none ------------------------------------------------------ */

static void test_hmac_sha256(void **state)
{
    (void)state;
    const char *sec[] = {GH_SECRET};
    char err[100];
    sig_verifier *v = NULL;
    hdrs h = {0};

    /* hex with a prefix: GitHub's vector through the generic scheme */
    sig_config cfg = {.scheme = SIG_HMAC_SHA256, .secrets = sec, .nsecrets = 1, .header = "X-Signature",
                      .prefix = "sha256="};
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    hdr_set(&h, "x-signature", "sha256=" GH_HEX);
    EXPECT_OK(v, &h, GH_BODY, 0);
    EXPECT_NO(v, &h, GH_BODY "x", 0, "no signature matched");
    hdr_set(&h, "x-signature", GH_HEX);
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    hdr_set(&h, "x-signature", "sha256=dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPhc=");
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    sig_verifier_free(v);

    /* hex without a prefix ("" is no prefix) */
    cfg.prefix = "";
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    hdr_set(&h, "x-signature", GH_HEX);
    EXPECT_OK(v, &h, GH_BODY, 0);
    hdr_set(&h, "x-signature", "sha256=" GH_HEX);
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    sig_verifier_free(v);

    /* base64 without a prefix (Shopify's form) */
    cfg.prefix = NULL;
    cfg.base64 = 1;
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    hdr_set(&h, "x-signature", "dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPhc=");
    EXPECT_OK(v, &h, GH_BODY, 0);
    EXPECT_NO(v, &h, "Hello, world!", 0, "no signature matched");
    hdr_set(&h, "x-signature", GH_HEX);
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    hdr_set(&h, "x-signature", "dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPhc=dXEH");
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    hdr_set(&h, "x-signature", "dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPh");
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    hdr_set(&h, "x-signature", "====");
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    hdr_set(&h, "x-signature", "");
    EXPECT_NO(v, &h, GH_BODY, 0, "malformed header");
    sig_verifier_free(v);

    /* base64 with a prefix, secrets rotated */
    const char *rot[] = {"other-secret", GH_SECRET};
    cfg.secrets = rot;
    cfg.nsecrets = 2;
    cfg.prefix = "sha256=";
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    hdr_set(&h, "x-signature", "sha256=dXEH6g6yUJ/CESIczphLijdXC211hsIsRvQ3nIsEPhc=");
    EXPECT_OK(v, &h, GH_BODY, 0);
    hdr_set(&h, "x-signature", "sha256=TzYVBlePJHJp8Kip0fDEhJycWp8Q3Z0q1Udt2NeBIE0=");
    EXPECT_OK(v, &h, "{\"a\":1}", 0);
    EXPECT_NO(v, &h, "{\"a\":2}", 0, "no signature matched");
    sig_verifier_free(v);

    /* none: everything passes, with no secret */
    cfg = (sig_config){.scheme = SIG_NONE};
    assert_int_equal(sig_verifier_new(&cfg, &v, err, sizeof err), 0);
    memset(&h, 0, sizeof h);
    EXPECT_OK(v, &h, "anything", 0);
    sig_verifier_free(v);
}

/* ---- configuration ------------------------------------------------------------- */

static void expect_new_fails(const sig_config *cfg, const char *want, int line)
{
    static char sentinel;
    sig_verifier *v = (sig_verifier *)(void *)&sentinel; /* must be reset to NULL */
    char err[200] = "";
    if (sig_verifier_new(cfg, &v, err, sizeof err) != -1 || v != NULL)
        fail_msg("line %d: sig_verifier_new succeeded", line);
    if (strstr(err, want) == NULL)
        fail_msg("line %d: error '%s', want '%s'", line, err, want);
}
#define NEW_FAILS(cfg, want) expect_new_fails((cfg), (want), __LINE__)

static void test_config(void **state)
{
    (void)state;
    sig_scheme s;
    const char *names[] = {"none", "stripe", "github", "standard", "slack", "hmac-sha256"};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(sig_scheme_parse(names[i], &s), 0);
        assert_string_equal(sig_scheme_name(s), names[i]);
    }
    assert_int_equal(sig_scheme_parse("GitHub", &s), -1);
    assert_int_equal(sig_scheme_parse("", &s), -1);
    assert_int_equal(sig_scheme_parse(NULL, &s), -1);
    assert_int_equal(sig_scheme_parse("hmac", &s), -1);
    assert_string_equal(sig_scheme_name((sig_scheme)99), "unknown");

    const char *one[] = {"s"};
    const char *empty[] = {""};
    const char *withnull[] = {"s", NULL};
    NEW_FAILS(&((sig_config){.scheme = SIG_GITHUB}), "secret");
    NEW_FAILS(&((sig_config){.scheme = SIG_GITHUB, .secrets = empty, .nsecrets = 1}), "empty");
    NEW_FAILS(&((sig_config){.scheme = SIG_GITHUB, .secrets = withnull, .nsecrets = 2}), "empty");
    NEW_FAILS(&((sig_config){.scheme = SIG_STRIPE, .secrets = one, .nsecrets = 1, .tolerance_ms = -1}), "tolerance");
    NEW_FAILS(&((sig_config){.scheme = SIG_HMAC_SHA256, .secrets = one, .nsecrets = 1}), "signature_header");
    NEW_FAILS(&((sig_config){.scheme = SIG_HMAC_SHA256, .secrets = one, .nsecrets = 1, .header = ""}),
              "signature_header");
    NEW_FAILS(&((sig_config){.scheme = (sig_scheme)42, .secrets = one, .nsecrets = 1}), "scheme");
    const char *many[17];
    for (int i = 0; i < 17; i++)
        many[i] = "s";
    NEW_FAILS(&((sig_config){.scheme = SIG_GITHUB, .secrets = many, .nsecrets = 17}), "at most");
    sig_verifier *v = NULL;
    char err[100];
    sig_config ok16 = {.scheme = SIG_GITHUB, .secrets = many, .nsecrets = 16};
    assert_int_equal(sig_verifier_new(&ok16, &v, err, sizeof err), 0);
    sig_verifier_free(v);

    /* standard secrets: "whsec_" + strict base64, non-empty key */
    const char *badstd[] = {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!", "whsec_MfKQ9r8G=KYq",
                            "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw=",
                            "whsec_A"};
    for (size_t i = 0; i < sizeof badstd / sizeof badstd[0]; i++)
        NEW_FAILS(&((sig_config){.scheme = SIG_STANDARD, .secrets = &badstd[i], .nsecrets = 1}), "whsec_");

    /* a too-long secret */
    char *longsec = malloc(5000);
    assert_non_null(longsec);
    memset(longsec, 'k', 4999);
    longsec[4999] = '\0';
    const char *ls[] = {longsec};
    NEW_FAILS(&((sig_config){.scheme = SIG_GITHUB, .secrets = ls, .nsecrets = 1}), "longer");
    free(longsec);

    /* NULL arguments everywhere */
    assert_int_equal(sig_verifier_new(NULL, &v, NULL, 0), -1);
    assert_null(v);
    assert_int_equal(sig_verifier_new(&ok16, NULL, err, sizeof err), -1);
    sig_verifier_free(NULL);
    hdrs h = {0};
    assert_int_equal(sig_verify(NULL, hdr_get, &h, (const uint8_t *)"", 0, 0, err, sizeof err), -1);
    v = mk(SIG_GITHUB, one, 1);
    assert_int_equal(sig_verify(v, NULL, &h, (const uint8_t *)"", 0, 0, err, sizeof err), -1);
    assert_int_equal(sig_verify(v, hdr_get, &h, NULL, 5, 0, err, sizeof err), -1);
    assert_int_equal(sig_verify(v, hdr_get, &h, NULL, 0, 0, NULL, 0), -1); /* missing header, no why buffer */
    sig_verifier_free(v);
}

/* A verifier is shared by the gateway's threads: hammer one from several
 * threads at once (ASan/TSan builds catch what a race would do). */
#include <pthread.h>
static void *hammer(void *arg)
{
    const sig_verifier *v = arg;
    hdrs h = {0};
    hdr_set(&h, "X-Hub-Signature-256", "sha256=" GH_HEX);
    for (int i = 0; i < 2000; i++) {
        if (sig_verify(v, hdr_get, &h, (const uint8_t *)GH_BODY, strlen(GH_BODY), 0, NULL, 0) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *sec[] = {"x", GH_SECRET};
    sig_verifier *v = mk(SIG_GITHUB, sec, 2);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, v), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
    sig_verifier_free(v);
}

/* ---- JSON Pointer (RFC 6901) ---------------------------------------------------- */

/* RFC 6901 section 5's example document. */
static const char *rfc_doc = "{\"foo\": [\"bar\", \"baz\"], \"\": 0, \"a/b\": 1, \"c%d\": 2, \"e^f\": 3, \"g|h\": 4,"
                             " \"i\\\\j\": 5, \"k\\\"l\": 6, \" \": 7, \"m~n\": 8}";

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (j == NULL)
        fail_msg("json: %s", e.text);
    return j;
}

static void expect_int_at(json_t *doc, const char *ptr, json_int_t want)
{
    json_t *v = json_pointer_get(doc, ptr);
    if (!json_is_integer(v) || json_integer_value(v) != want)
        fail_msg("pointer '%s': want %lld", ptr, (long long)want);
}

static void test_json_pointer_rfc(void **state)
{
    (void)state;
    json_t *doc = load(rfc_doc);
    assert_ptr_equal(json_pointer_get(doc, ""), doc);
    json_t *foo = json_pointer_get(doc, "/foo");
    assert_true(json_is_array(foo));
    assert_int_equal(json_array_size(foo), 2);
    assert_string_equal(json_string_value(json_pointer_get(doc, "/foo/0")), "bar");
    assert_string_equal(json_string_value(json_pointer_get(doc, "/foo/1")), "baz");
    expect_int_at(doc, "/", 0);
    expect_int_at(doc, "/a~1b", 1);
    expect_int_at(doc, "/c%d", 2);
    expect_int_at(doc, "/e^f", 3);
    expect_int_at(doc, "/g|h", 4);
    expect_int_at(doc, "/i\\j", 5);
    expect_int_at(doc, "/k\"l", 6);
    expect_int_at(doc, "/ ", 7);
    expect_int_at(doc, "/m~0n", 8);
    json_decref(doc);

    /* "~01" is "~1" (unescape ~1 before ~0 would give "/") */
    doc = load("{\"~1\": 1, \"/\": 2, \"a\": {\"\": {\"b\": [10, [20, 21]]}}, \"0\": 3}");
    expect_int_at(doc, "/~01", 1);
    expect_int_at(doc, "/~1", 2);
    expect_int_at(doc, "/a//b/0", 10);
    expect_int_at(doc, "/a//b/1/1", 21);
    expect_int_at(doc, "/0", 3); /* a digit token against an object is a member name */
    json_decref(doc);
}

static void test_json_pointer_errors(void **state)
{
    (void)state;
    assert_int_equal(json_pointer_check(""), 0);
    assert_int_equal(json_pointer_check("/"), 0);
    assert_int_equal(json_pointer_check("/a~0~1/b"), 0);
    const char *bad[] = {"a", "#/a", " /a", "/~", "/~2", "/a~", "/~a", "/a/~/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (json_pointer_check(bad[i]) != -1)
            fail_msg("'%s' accepted", bad[i]);
    }
    assert_int_equal(json_pointer_check(NULL), -1);

    json_t *doc = load("{\"arr\": [1, 2, 3], \"s\": \"x\", \"n\": null, \"t\": true, \"~\": 1}");
    const char *absent[] = {"arr",     "/nope",    "/arr/3",   "/arr/-",      "/arr/01",    "/arr/00",
                            "/arr/-1", "/arr/+1",  "/arr/ 1",  "/arr/1 ",     "/arr/1.0",   "/arr/0x1",
                            "/arr/",   "/arr/1/0", "/s/0",     "/n/x",        "/t/x",       "/~",
                            "/arr/99999999999999999999999999999", "/arr/18446744073709551617", "/~2"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        if (json_pointer_get(doc, absent[i]) != NULL)
            fail_msg("'%s' found something", absent[i]);
    }
    expect_int_at(doc, "/arr/2", 3);
    expect_int_at(doc, "/~0", 1);
    assert_true(json_is_null(json_pointer_get(doc, "/n")));
    assert_null(json_pointer_get(NULL, "/arr"));
    assert_null(json_pointer_get(doc, NULL));
    json_decref(doc);

    /* a scalar root: only "" names it */
    doc = load("42");
    expect_int_at(doc, "", 42);
    assert_null(json_pointer_get(doc, "/"));
    json_decref(doc);
}

static void test_json_pointer_text(void **state)
{
    (void)state;
    json_t *doc = load("{\"id\": \"evt_1NG8Du2eZvKYlo2CUI79vXWy\", \"n\": -9223372036854775807, \"z\": 0,"
                       " \"r\": 1.5, \"b\": false, \"nul\": null, \"o\": {}, \"a\": [], \"e\": \"\","
                       " \"nulbyte\": \"a\\u0000b\", \"u\": \"caf\\u00e9\"}");
    char out[64];
    assert_int_equal(json_pointer_text(doc, "/id", out, sizeof out), 0);
    assert_string_equal(out, "evt_1NG8Du2eZvKYlo2CUI79vXWy");
    assert_int_equal(json_pointer_text(doc, "/n", out, sizeof out), 0);
    assert_string_equal(out, "-9223372036854775807");
    assert_int_equal(json_pointer_text(doc, "/z", out, sizeof out), 0);
    assert_string_equal(out, "0");
    assert_int_equal(json_pointer_text(doc, "/e", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(json_pointer_text(doc, "/u", out, sizeof out), 0);
    assert_string_equal(out, "caf\xc3\xa9");
    const char *refused[] = {"/r", "/b", "/nul", "/o", "/a", "/missing", "", "/nulbyte", "id", "/~"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        strcpy(out, "junk");
        if (json_pointer_text(doc, refused[i], out, sizeof out) != -1)
            fail_msg("'%s' gave text", refused[i]);
        assert_string_equal(out, "");
    }
    /* capacity counts the NUL: exactly fitting, and one short */
    assert_int_equal(json_pointer_text(doc, "/id", out, 29), 0);
    assert_int_equal(json_pointer_text(doc, "/id", out, 28), -1);
    assert_string_equal(out, "");
    assert_int_equal(json_pointer_text(doc, "/n", out, 21), 0);
    assert_int_equal(json_pointer_text(doc, "/n", out, 20), -1);
    assert_string_equal(out, "");
    assert_int_equal(json_pointer_text(doc, "/z", out, 1), -1);
    assert_int_equal(json_pointer_text(doc, "/id", NULL, 10), -1);
    assert_int_equal(json_pointer_text(doc, "/id", out, 0), -1);
    assert_int_equal(json_pointer_text(NULL, "/id", out, sizeof out), -1);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_github_vector),   cmocka_unit_test(test_standard_vector),
        cmocka_unit_test(test_standard_sign),   cmocka_unit_test(test_stripe),
        cmocka_unit_test(test_slack_vector),    cmocka_unit_test(test_hmac_sha256),
        cmocka_unit_test(test_config),          cmocka_unit_test(test_threads),
        cmocka_unit_test(test_json_pointer_rfc), cmocka_unit_test(test_json_pointer_errors),
        cmocka_unit_test(test_json_pointer_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
