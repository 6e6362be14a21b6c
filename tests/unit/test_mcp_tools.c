/*
 * test_mcp_tools.c — what the MCP gateway decides about a tools/call before
 * anything is sent, and the answers it builds (server/mcp/mcp_tools.c), without
 * a socket: which tools are recorded and which wait for a human (from the
 * configuration and the annotations learned from tools/list), the key of a
 * call in docs/mcp.md's order ("The key"), the canonical arguments the key hash and the
 * fingerprint are taken over, what a server's final response means for the
 * ledger, and the JSON-RPC answers with once's _meta. The black-box proofs
 * are tests/integration/test_mcp.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "common/digest.h"
#include "server/mcp/mcp_tools.h"

/* ---- fixtures --------------------------------------------------------------------------------- */

static char *readonly_tools[] = {"search", "get_balance"};
static char *approve_tools[] = {"refund"};

/* A url MCP server with readonly and approve lists and no templates. */
static upstream_cfg mt_up(void)
{
    return (upstream_cfg){.name = "pay",
                          .url = "http://127.0.0.1:9/mcp",
                          .mcp = 1,
                          .readonly = readonly_tools,
                          .nreadonly = 2,
                          .approve = approve_tools,
                          .napprove = 1,
                          .wait_ms = 30000};
}

static json_t *mt_json(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        fail_msg("bad test JSON (%s): %s", jerr.text, text);
    return j;
}

/* Learns the tools/list result text (first_page or not). */
static void mt_learn(mcp_tools *t, const char *result, int first_page)
{
    json_t *r = mt_json(result);
    mcp_tools_learn(t, r, first_page);
    json_decref(r);
}

static mcp_tools *mt_tools(void)
{
    mcp_tools *t = NULL;
    assert_int_equal(mcp_tools_new(&t), 0);
    assert_non_null(t);
    return t;
}

/* ---- recorded ---------------------------------------------------------------------------------- */

static void test_recorded_readonly_list(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    mcp_tools *t = mt_tools();
    /* Nothing learned: only the configured list is unrecorded. */
    assert_false(mcp_tool_recorded(&up, t, "search"));
    assert_false(mcp_tool_recorded(&up, t, "get_balance"));
    assert_true(mcp_tool_recorded(&up, t, "charge"));
    assert_true(mcp_tool_recorded(&up, t, "Search")); /* names are exact */
    assert_true(mcp_tool_recorded(&up, t, "search2"));
    /* Without a learned table at all. */
    assert_false(mcp_tool_recorded(&up, NULL, "search"));
    assert_true(mcp_tool_recorded(&up, NULL, "charge"));
    /* The configuration wins over a server that says the tool writes. */
    mt_learn(t, "{\"tools\":[{\"name\":\"search\",\"annotations\":{\"readOnlyHint\":false,"
                "\"destructiveHint\":true}}]}",
             1);
    assert_false(mcp_tool_recorded(&up, t, "search"));
    mcp_tools_free(t);
}

static void test_recorded_learned_hint(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    up.nreadonly = 0;
    mcp_tools *t = mt_tools();
    mt_learn(t,
             "{\"tools\":["
             "{\"name\":\"lookup\",\"annotations\":{\"readOnlyHint\":true}},"
             "{\"name\":\"charge\",\"annotations\":{\"readOnlyHint\":false}},"
             "{\"name\":\"plain\",\"inputSchema\":{\"type\":\"object\"}},"
             "{\"name\":\"stringy\",\"annotations\":{\"readOnlyHint\":\"true\"}},"
             "{\"name\":\"one\",\"annotations\":{\"readOnlyHint\":1}},"
             "{\"annotations\":{\"readOnlyHint\":true}},"
             "{\"name\":7,\"annotations\":{\"readOnlyHint\":true}},"
             "\"not-a-tool\"]}",
             1);
    assert_false(mcp_tool_recorded(&up, t, "lookup"));
    assert_true(mcp_tool_recorded(&up, t, "charge"));
    assert_true(mcp_tool_recorded(&up, t, "plain"));
    /* Only JSON true is a read-only hint. */
    assert_true(mcp_tool_recorded(&up, t, "stringy"));
    assert_true(mcp_tool_recorded(&up, t, "one"));
    /* A tool the server never listed is treated as one that writes. */
    assert_true(mcp_tool_recorded(&up, t, "unlisted"));
    assert_true(mcp_tool_recorded(&up, t, "7"));
    assert_true(mcp_tool_recorded(&up, t, ""));
    mcp_tools_free(t);
}

/* ---- approval ---------------------------------------------------------------------------------- */

static void test_approval_list(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    mcp_tools *t = mt_tools();
    assert_true(mcp_tool_needs_approval(&up, t, "refund"));
    assert_true(mcp_tool_needs_approval(&up, NULL, "refund"));
    assert_false(mcp_tool_needs_approval(&up, t, "charge"));
    assert_false(mcp_tool_needs_approval(&up, t, "unknown_tool"));
    assert_false(mcp_tool_needs_approval(&up, t, "Refund"));
    /* Listed by name: the server's hints do not take it back. */
    mt_learn(t, "{\"tools\":[{\"name\":\"refund\",\"annotations\":{\"destructiveHint\":false}}]}", 1);
    assert_true(mcp_tool_needs_approval(&up, t, "refund"));
    /* Without approve = destructive, a destructive tool does not wait. */
    mt_learn(t, "{\"tools\":[{\"name\":\"drop\",\"annotations\":{\"destructiveHint\":true}}]}", 1);
    assert_false(mcp_tool_needs_approval(&up, t, "drop"));
    mcp_tools_free(t);
}

static void test_approval_destructive(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    up.napprove = 0;
    up.approve_destructive = 1;
    mcp_tools *t = mt_tools();
    /* Nothing learned yet: every tool may write, so every tool waits. */
    assert_true(mcp_tool_needs_approval(&up, t, "charge"));
    assert_true(mcp_tool_needs_approval(&up, NULL, "charge"));
    mt_learn(t,
             "{\"tools\":["
             "{\"name\":\"drop\",\"annotations\":{\"destructiveHint\":true}},"
             "{\"name\":\"add\",\"annotations\":{\"destructiveHint\":false}},"
             "{\"name\":\"silent\",\"annotations\":{}},"
             "{\"name\":\"bare\"},"
             "{\"name\":\"nullann\",\"annotations\":null},"
             "{\"name\":\"strfalse\",\"annotations\":{\"destructiveHint\":\"false\"}},"
             "{\"name\":\"ro\",\"annotations\":{\"readOnlyHint\":true}},"
             "{\"name\":\"ro_destr\",\"annotations\":{\"readOnlyHint\":true,\"destructiveHint\":true}},"
             "{\"name\":\"idem\",\"annotations\":{\"idempotentHint\":true}}]}",
             1);
    assert_true(mcp_tool_needs_approval(&up, t, "drop"));
    assert_false(mcp_tool_needs_approval(&up, t, "add"));
    /* destructiveHint absent: MCP's default is true. */
    assert_true(mcp_tool_needs_approval(&up, t, "silent"));
    assert_true(mcp_tool_needs_approval(&up, t, "bare"));
    assert_true(mcp_tool_needs_approval(&up, t, "nullann"));
    /* Only JSON false says "not destructive". */
    assert_true(mcp_tool_needs_approval(&up, t, "strfalse"));
    /* A read-only tool never waits, whatever else it says. */
    assert_false(mcp_tool_needs_approval(&up, t, "ro"));
    assert_false(mcp_tool_needs_approval(&up, t, "ro_destr"));
    /* idempotentHint is no reason to skip a human. */
    assert_true(mcp_tool_needs_approval(&up, t, "idem"));
    /* A tool the server did not list: approved like one that writes. */
    assert_true(mcp_tool_needs_approval(&up, t, "unlisted"));
    /* The list and the word together. */
    up.napprove = 1;
    assert_true(mcp_tool_needs_approval(&up, t, "refund"));
    assert_false(mcp_tool_needs_approval(&up, t, "add"));
    mcp_tools_free(t);
}

/* A tool the operator listed in approve = waits for a human even when the
 * server calls it read-only: mcp_call_start passes an unrecorded tool
 * through before it asks mcp_tool_needs_approval, so a readOnlyHint (a
 * hint from the server) must not make a listed tool unrecorded. */
static void test_approve_listed_is_recorded(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    up.nreadonly = 0;
    mcp_tools *t = mt_tools();
    mt_learn(t, "{\"tools\":[{\"name\":\"refund\",\"annotations\":{\"readOnlyHint\":true}}]}", 1);
    int recorded = mcp_tool_recorded(&up, t, "refund");
    int approval = mcp_tool_needs_approval(&up, t, "refund");
    mcp_tools_free(t);
    assert_true(approval);
    if (!recorded)
        fail_msg("approve = refund, but the server's readOnlyHint makes refund unrecorded: it would pass through "
                 "without a human");
}

/* ---- learning and forgetting ------------------------------------------------------------------- */

static void test_learn_pages(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    up.nreadonly = 0;
    mcp_tools *t = mt_tools();
    mt_learn(t, "{\"tools\":[{\"name\":\"a\",\"annotations\":{\"readOnlyHint\":true}}],\"nextCursor\":\"2\"}", 1);
    /* A later page adds to the first. */
    mt_learn(t, "{\"tools\":[{\"name\":\"b\",\"annotations\":{\"readOnlyHint\":true}}]}", 0);
    assert_false(mcp_tool_recorded(&up, t, "a"));
    assert_false(mcp_tool_recorded(&up, t, "b"));
    /* A later page that lists a known tool again updates it. */
    mt_learn(t, "{\"tools\":[{\"name\":\"a\",\"annotations\":{\"readOnlyHint\":false}}]}", 0);
    assert_true(mcp_tool_recorded(&up, t, "a"));
    assert_false(mcp_tool_recorded(&up, t, "b"));
    /* A first page again (a new listing) replaces everything. */
    mt_learn(t, "{\"tools\":[{\"name\":\"c\",\"annotations\":{\"readOnlyHint\":true}}]}", 1);
    assert_true(mcp_tool_recorded(&up, t, "b"));
    assert_false(mcp_tool_recorded(&up, t, "c"));
    /* An empty first page forgets everything too. */
    mt_learn(t, "{\"tools\":[]}", 1);
    assert_true(mcp_tool_recorded(&up, t, "c"));
    /* What is not a tools/list result teaches nothing and clears nothing. */
    mt_learn(t, "{\"tools\":[{\"name\":\"d\",\"annotations\":{\"readOnlyHint\":true}}]}", 1);
    mt_learn(t, "{\"tools\":{\"name\":\"x\"}}", 1);
    mt_learn(t, "{\"content\":[]}", 1);
    mt_learn(t, "[1,2]", 1);
    mcp_tools_learn(t, NULL, 1);
    assert_false(mcp_tool_recorded(&up, t, "d"));
    mcp_tools_learn(NULL, NULL, 1); /* harmless */
    mcp_tools_free(t);
    mcp_tools_free(NULL);
}

static void test_forget(void **state)
{
    (void)state;
    upstream_cfg up = mt_up();
    up.nreadonly = 0;
    up.napprove = 0;
    up.approve_destructive = 1;
    mcp_tools *t = mt_tools();
    mt_learn(t,
             "{\"tools\":[{\"name\":\"ro\",\"annotations\":{\"readOnlyHint\":true}},"
             "{\"name\":\"safe\",\"annotations\":{\"destructiveHint\":false}}]}",
             1);
    assert_false(mcp_tool_recorded(&up, t, "ro"));
    assert_false(mcp_tool_needs_approval(&up, t, "safe"));
    /* notifications/tools/list_changed: back to "may write". */
    mcp_tools_forget(t);
    assert_true(mcp_tool_recorded(&up, t, "ro"));
    assert_true(mcp_tool_needs_approval(&up, t, "ro"));
    assert_true(mcp_tool_needs_approval(&up, t, "safe"));
    mcp_tools_forget(t); /* twice */
    mcp_tools_forget(NULL);
    /* It learns again after forgetting, from a later page too. */
    mt_learn(t, "{\"tools\":[{\"name\":\"ro\",\"annotations\":{\"readOnlyHint\":true}}]}", 0);
    assert_false(mcp_tool_recorded(&up, t, "ro"));
    mcp_tools_free(t);
}

/* ---- the key of a call ------------------------------------------------------------------------- */

typedef struct mt_keyed {
    upstream_cfg up;
    mcp_tool_key keys[2];
} mt_keyed;

/* An upstream with key.charge = order-{json:/arguments/order_id} and
 * key.ship = {header:X-Customer}:{json:/arguments/n}. */
static void mt_keyed_init(mt_keyed *k)
{
    char err[256];
    memset(k, 0, sizeof *k);
    k->up = mt_up();
    k->keys[0].tool = "charge";
    k->keys[1].tool = "ship";
    assert_int_equal(key_template_parse("order-{json:/arguments/order_id}", &k->keys[0].key, err, sizeof err), 0);
    assert_int_equal(key_template_parse("{header:X-Customer}:{json:/arguments/n}", &k->keys[1].key, err, sizeof err),
                     0);
    k->up.tool_keys = k->keys;
    k->up.ntool_keys = 2;
}

static void mt_keyed_free(mt_keyed *k)
{
    key_template_free(k->keys[0].key);
    key_template_free(k->keys[1].key);
}

static const char *mt_header(void *ctx, const char *name)
{
    return strcasecmp(name, "X-Customer") == 0 ? (const char *)ctx : NULL;
}

/* mcp_call_key over params text; the result code, the key in out. */
static int mt_key(const upstream_cfg *up, const char *tool, const char *params, const char *hdr,
                  const key_source *hsrc, char *out, size_t cap, char *err, size_t errlen)
{
    json_t *p = params ? mt_json(params) : NULL;
    memset(out, 'x', cap);
    err[0] = '\0';
    int rc = mcp_call_key(up, tool, p, hdr, hsrc, out, cap, err, errlen);
    json_decref(p);
    return rc;
}

/* Expects key want for (tool, params, hdr). */
static void mt_expect_key(const upstream_cfg *up, const char *tool, const char *params, const char *hdr,
                          const key_source *hsrc, const char *want)
{
    char key[256], err[256];
    int rc = mt_key(up, tool, params, hdr, hsrc, key, sizeof key, err, sizeof err);
    if (rc != 0)
        fail_msg("%s %s (header %s): rc %d (%s), want key %s", tool, params, hdr ? hdr : "-", rc, err, want);
    if (strcmp(key, want) != 0)
        fail_msg("%s %s (header %s): key %s, want %s", tool, params, hdr ? hdr : "-", key, want);
}

/* Expects rc (-1 or -2) with what in the message. */
static void mt_expect_key_error(const upstream_cfg *up, const char *tool, const char *params, const char *hdr,
                                const key_source *hsrc, int want, const char *what)
{
    char key[256], err[256];
    int rc = mt_key(up, tool, params, hdr, hsrc, key, sizeof key, err, sizeof err);
    if (rc != want || strstr(err, what) == NULL)
        fail_msg("%s %s (header %s): rc %d (%s), want %d (%s)", tool, params, hdr ? hdr : "-", rc, err, want, what);
}

static void mt_sha256(const char *s, char hex[65])
{
    assert_int_equal(digest_sha256_hex(s, strlen(s), hex), 0);
}

static void test_key_order(void **state)
{
    (void)state;
    mt_keyed k;
    mt_keyed_init(&k);
    key_source hsrc = {.header = mt_header, .ctx = "cust-9"};
    const char *charge = "{\"name\":\"charge\",\"arguments\":{\"order_id\":\"o-1\",\"amount\":5},"
                         "\"_meta\":{\"idempotencyKey\":\"k-meta\",\"progressToken\":3}}";
    const char *charge_nometa = "{\"name\":\"charge\",\"arguments\":{\"order_id\":\"o-1\",\"amount\":5}}";
    /* 1. params._meta.idempotencyKey beats everything. */
    mt_expect_key(&k.up, "charge", charge, "k-hdr", &hsrc, "k-meta");
    mt_expect_key(&k.up, "charge", charge, NULL, &hsrc, "k-meta");
    /* 2. The Idempotency-Key header beats the template. */
    mt_expect_key(&k.up, "charge", charge_nometa, "k-hdr", &hsrc, "k-hdr");
    mt_expect_key(&k.up, "charge", "{\"name\":\"charge\",\"arguments\":{},\"_meta\":{\"progressToken\":1}}",
                  "k-hdr", &hsrc, "k-hdr");
    /* 3. The template of the tool, over params. */
    mt_expect_key(&k.up, "charge", charge_nometa, NULL, &hsrc, "order-o-1");
    mt_expect_key(&k.up, "charge", "{\"name\":\"charge\",\"arguments\":{\"order_id\":42}}", NULL, NULL, "order-42");
    mt_expect_key(&k.up, "ship", "{\"name\":\"ship\",\"arguments\":{\"n\":\"p-7\"}}", NULL, &hsrc, "cust-9:p-7");
    /* 4. Otherwise the sha256 of the canonical arguments. */
    char hex[65];
    mt_sha256("{\"amount\":5,\"order_id\":\"o-1\"}", hex);
    mt_expect_key(&k.up, "refund", "{\"name\":\"refund\",\"arguments\":{\"order_id\":\"o-1\",\"amount\":5}}", NULL,
                  &hsrc, hex);
    mt_expect_key(&k.up, "refund", "{\"name\":\"refund\",\"arguments\":{\"amount\":5,\"order_id\":\"o-1\"}}", NULL,
                  NULL, hex);
    /* The progress token, other _meta and the tool's name are not in it
     * (the ledger key adds the tool). */
    mt_expect_key(&k.up, "other",
                  "{\"name\":\"other\",\"arguments\":{\"order_id\":\"o-1\",\"amount\":5},"
                  "\"_meta\":{\"progressToken\":\"tok-99\",\"x\":1}}",
                  NULL, NULL, hex);
    assert_int_equal(strlen(hex), 64);
    for (const char *p = hex; *p; p++)
        assert_true((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'));
    /* Absent arguments hash as {}. */
    mt_sha256("{}", hex);
    mt_expect_key(&k.up, "ping", "{\"name\":\"ping\"}", NULL, NULL, hex);
    mt_expect_key(&k.up, "ping", "{\"name\":\"ping\",\"arguments\":{}}", NULL, NULL, hex);
    mt_expect_key(&k.up, "ping", NULL, NULL, NULL, hex);
    /* Different arguments, different keys. */
    char a[256], b[256], err[256];
    assert_int_equal(mt_key(&k.up, "x", "{\"arguments\":{\"n\":1}}", NULL, NULL, a, sizeof a, err, sizeof err), 0);
    assert_int_equal(mt_key(&k.up, "x", "{\"arguments\":{\"n\":2}}", NULL, NULL, b, sizeof b, err, sizeof err), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(mt_key(&k.up, "x", "{\"arguments\":{\"n\":\"1\"}}", NULL, NULL, b, sizeof b, err, sizeof err),
                     0);
    assert_string_not_equal(a, b);
    mt_keyed_free(&k);
}

static void test_key_errors(void **state)
{
    (void)state;
    mt_keyed k;
    mt_keyed_init(&k);
    key_source hsrc = {.header = mt_header, .ctx = "cust-9"};
    /* A non-string idempotencyKey is refused, even with a header or a template. */
    static const char *const bad[] = {"5", "null", "true", "{\"k\":\"v\"}", "[\"k\"]", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char params[160];
        snprintf(params, sizeof params,
                 "{\"name\":\"charge\",\"arguments\":{\"order_id\":\"o-1\"},\"_meta\":{\"idempotencyKey\":%s}}",
                 bad[i]);
        mt_expect_key_error(&k.up, "charge", params, "k-hdr", &hsrc, -2, "idempotencyKey must be a string");
    }
    /* Empty keys are no keys. */
    mt_expect_key_error(&k.up, "charge", "{\"arguments\":{\"order_id\":\"o-1\"},\"_meta\":{\"idempotencyKey\":\"\"}}",
                        "k-hdr", &hsrc, -2, "empty");
    mt_expect_key_error(&k.up, "charge", "{\"arguments\":{\"order_id\":\"o-1\"}}", "", &hsrc, -2,
                        "Idempotency-Key header is empty");
    mt_expect_key_error(&k.up, "refund", "{\"arguments\":{}}", "", NULL, -2, "empty");
    /* A template field missing: -1, the field named. */
    char key[256], err[256];
    int rc = mt_key(&k.up, "charge", "{\"name\":\"charge\",\"arguments\":{\"amount\":5}}", NULL, &hsrc, key,
                    sizeof key, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_string_equal(err, "json:/arguments/order_id");
    mt_expect_key_error(&k.up, "charge", "{\"name\":\"charge\"}", NULL, &hsrc, -1, "json:/arguments/order_id");
    mt_expect_key_error(&k.up, "charge", "{\"arguments\":{\"order_id\":\"\"}}", NULL, &hsrc, -1,
                        "json:/arguments/order_id");
    mt_expect_key_error(&k.up, "charge", "{\"arguments\":{\"order_id\":null}}", NULL, &hsrc, -1,
                        "json:/arguments/order_id");
    /* The header field of a template: missing without a header source. */
    mt_expect_key_error(&k.up, "ship", "{\"arguments\":{\"n\":\"p-7\"}}", NULL, NULL, -1, "header:X-Customer");
    key_source nohdr = {.header = mt_header, .ctx = NULL};
    mt_expect_key_error(&k.up, "ship", "{\"arguments\":{\"n\":\"p-7\"}}", NULL, &nohdr, -1, "header:X-Customer");
    /* A key that does not fit the buffer is refused, not cut. */
    char long_key[300];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    char params[400];
    snprintf(params, sizeof params, "{\"arguments\":{},\"_meta\":{\"idempotencyKey\":\"%s\"}}", long_key);
    mt_expect_key_error(&k.up, "charge", params, NULL, &hsrc, -2, "too long");
    mt_expect_key_error(&k.up, "charge", "{\"arguments\":{}}", long_key, &hsrc, -2, "too long");
    /* The hash needs 65 bytes. */
    char small[64];
    rc = mt_key(&k.up, "refund", "{\"arguments\":{}}", NULL, NULL, small, sizeof small, err, sizeof err);
    assert_int_equal(rc, -2);
    char fits[65];
    rc = mt_key(&k.up, "refund", "{\"arguments\":{}}", NULL, NULL, fits, sizeof fits, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_int_equal(strlen(fits), 64);
    mt_keyed_free(&k);
}

/* ---- canonical arguments ----------------------------------------------------------------------- */

static char *mt_canon(const char *params)
{
    json_t *p = mt_json(params);
    char *s = mcp_canonical_args(p);
    json_decref(p);
    assert_non_null(s);
    return s;
}

static void test_canonical_args(void **state)
{
    (void)state;
    char *a = mt_canon("{\"name\":\"t\",\"arguments\":{\"b\":{\"y\":[1, {\"d\":2,\"c\":3}],\"x\":null},"
                       "\"a\":\"s\"},\"_meta\":{\"progressToken\":1}}");
    char *b = mt_canon("{ \"arguments\" :\n {\n  \"a\" : \"s\" ,\t\"b\" : { \"x\" : null , \"y\" : [ 1 , "
                       "{ \"c\" : 3 , \"d\" : 2 } ] } } , \"name\" : \"t\" }");
    assert_string_equal(a, "{\"a\":\"s\",\"b\":{\"x\":null,\"y\":[1,{\"c\":3,\"d\":2}]}}");
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* Array order is meaning, not form. */
    a = mt_canon("{\"arguments\":{\"v\":[1,2]}}");
    b = mt_canon("{\"arguments\":{\"v\":[2,1]}}");
    assert_string_not_equal(a, b);
    free(a);
    free(b);
    /* Absent arguments are {}. */
    a = mt_canon("{\"name\":\"t\"}");
    b = mt_canon("{\"name\":\"t\",\"arguments\":{}}");
    assert_string_equal(a, "{}");
    assert_string_equal(b, "{}");
    free(a);
    free(b);
    a = mcp_canonical_args(NULL);
    assert_non_null(a);
    assert_string_equal(a, "{}");
    free(a);
    /* Strings keep their text: UTF-8 as is, escapes decoded and re-encoded
     * one way. */
    a = mt_canon("{\"arguments\":{\"s\":\"caf\\u00e9 \\/ \\\"q\\\"\",\"t\":\"caf\xc3\xa9 / \\\"q\\\"\"}}");
    assert_string_equal(a, "{\"s\":\"caf\xc3\xa9 / \\\"q\\\"\",\"t\":\"caf\xc3\xa9 / \\\"q\\\"\"}");
    free(a);
    /* The input is not changed. */
    json_t *p = mt_json("{\"arguments\":{\"b\":1,\"a\":2}}");
    char *before = json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER);
    a = mcp_canonical_args(p);
    char *after = json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_string_equal(a, "{\"a\":2,\"b\":1}");
    assert_string_equal(before, after);
    free(a);
    free(before);
    free(after);
    json_decref(p);
}

/* ---- verdicts ---------------------------------------------------------------------------------- */

static void mt_expect_verdict(const char *final, mcp_verdict want, const char *why_has)
{
    json_t *f = final ? mt_json(final) : NULL;
    char why[256] = "untouched";
    mcp_verdict v = mcp_classify(f, why, sizeof why);
    json_decref(f);
    if (v != want)
        fail_msg("%s: verdict %d, want %d (why: %s)", final ? final : "NULL", (int)v, (int)want, why);
    if (why_has && strstr(why, why_has) == NULL)
        fail_msg("%s: why '%s' lacks '%s'", final ? final : "NULL", why, why_has);
}

static void test_classify(void **state)
{
    (void)state;
    /* A result is a completed call, also a tool's own error. */
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}",
                      MCP_COMPLETED, NULL);
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"card "
                      "declined\"}],\"isError\":true}}",
                      MCP_COMPLETED, NULL);
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}", MCP_COMPLETED, NULL);
    /* Invalid params: the tool did not run; the key is released. */
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"Tool nope not found\"}}",
                      MCP_RELEASED, "-32602");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"Tool nope not found\"}}",
                      MCP_RELEASED, "Tool nope not found");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no such method\"}}",
                      MCP_RELEASED, "-32601");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}",
                      MCP_RELEASED, "-32700");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":\"Invalid Request\"}}",
                      MCP_RELEASED, "-32600");
    /* A server's own codes and anything odd: it may have run. */
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"upstream down\"}}",
                      MCP_UNKNOWN, "upstream down");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":402,\"message\":\"pay\"}}", MCP_UNKNOWN,
                      "402");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"no code\"}}", MCP_UNKNOWN, NULL);
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"-32602\",\"message\":\"str\"}}",
                      MCP_UNKNOWN, NULL);
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602.0,\"message\":\"real\"}}", MCP_UNKNOWN,
                      NULL);
    /* No response at all. */
    mt_expect_verdict(NULL, MCP_UNKNOWN, "did not answer");
    /* Neither a result nor an error. */
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_UNKNOWN, "neither");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":null}", MCP_UNKNOWN, "neither");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":[1]}", MCP_UNKNOWN, "neither");
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"oops\"}", MCP_UNKNOWN, "neither");
    mt_expect_verdict("[]", MCP_UNKNOWN, "neither");
    /* A long message is cut, not overflowed. */
    char big[2200];
    int n = snprintf(big, sizeof big, "{\"error\":{\"code\":-32000,\"message\":\"");
    memset(big + n, 'm', 2000);
    snprintf(big + n + 2000, sizeof big - (size_t)n - 2000, "\"}}");
    json_t *f = mt_json(big);
    char why[32];
    assert_int_equal(mcp_classify(f, why, sizeof why), MCP_UNKNOWN);
    assert_int_equal(strlen(why), sizeof why - 1);
    json_decref(f);
}

/* Internal error is not a protocol error: the tool's handler may have
 * acted before it threw (the MCP SDK's low-level Server answers any
 * exception from a handler with -32603), so the key is not released. */
static void test_classify_internal_error(void **state)
{
    (void)state;
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32603,\"message\":\"Internal error\"}}",
                      MCP_UNKNOWN, "-32603");
    /* URL elicitation required: the user must consent first; nothing ran. */
    mt_expect_verdict("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32042,\"message\":\"consent\"}}",
                      MCP_RELEASED, "-32042");
}

/* The SDKs' McpServer reports what it refused before running the tool as
 * an isError result with the McpError's text: released. An output-schema
 * failure (after the tool ran) and the tool's own errors are completed. */
static void test_classify_sdk_refusals(void **state)
{
    (void)state;
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Input "
                      "validation error: Invalid arguments for tool charge: amount\"}],\"isError\":true}}",
                      MCP_RELEASED, "before running it");
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Tool nope "
                      "not found\"}],\"isError\":true}}",
                      MCP_RELEASED, "not found");
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Tool x "
                      "disabled\"}],\"isError\":true}}",
                      MCP_RELEASED, "disabled");
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Output "
                      "validation error: x\"}],\"isError\":true}}",
                      MCP_COMPLETED, NULL);
    /* Not an error result, or more than the one text: the tool's own. */
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Input "
                      "validation error: x\"}]}}",
                      MCP_COMPLETED, NULL);
    mt_expect_verdict("{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"MCP error -32602: Input "
                      "validation error: x\"},{\"type\":\"text\",\"text\":\"more\"}],\"isError\":true}}",
                      MCP_COMPLETED, NULL);
}

/* ---- answers ------------------------------------------------------------------------------------ */

/* Parses an answer (and frees the text). */
static json_t *mt_answer(char *text)
{
    assert_non_null(text);
    json_t *a = mt_json(text);
    free(text);
    assert_string_equal(json_string_value(json_object_get(a, "jsonrpc")), "2.0");
    return a;
}

static void test_result_answer(void **state)
{
    (void)state;
    json_t *id = json_integer(7);
    json_t *res = mt_json("{\"content\":[{\"type\":\"text\",\"text\":\"charged\"}],\"structuredContent\":{\"id\":"
                          "\"ch_1\"},\"_meta\":{\"trace\":\"t1\"}}");
    char *before = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *a = mt_answer(mcp_result_answer(id, res, "completed", "charge:order-o-1", 0));
    /* The id as it came: a number stays a number. */
    assert_true(json_is_integer(json_object_get(a, "id")));
    assert_int_equal(json_integer_value(json_object_get(a, "id")), 7);
    assert_null(json_object_get(a, "error"));
    json_t *r = json_object_get(a, "result");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(r, "content"), 0), "text")),
                        "charged");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "structuredContent"), "id")), "ch_1");
    json_t *meta = json_object_get(r, "_meta");
    /* The server's _meta kept, once's merged in. */
    assert_string_equal(json_string_value(json_object_get(meta, "trace")), "t1");
    assert_string_equal(json_string_value(json_object_get(meta, "once/outcome")), "completed");
    assert_string_equal(json_string_value(json_object_get(meta, "once/key")), "charge:order-o-1");
    assert_null(json_object_get(meta, "once/argumentsDiffer"));
    assert_int_equal(json_object_size(meta), 3);
    json_decref(a);
    /* The input is not changed. */
    char *after = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(before, after);
    assert_null(json_object_get(json_object_get(res, "_meta"), "once/outcome"));
    free(after);

    /* A replay with other arguments says so; a string id stays a string. */
    json_t *sid = json_string("req-1");
    a = mt_answer(mcp_result_answer(sid, res, "replayed", "charge:order-o-1", 1));
    assert_string_equal(json_string_value(json_object_get(a, "id")), "req-1");
    meta = json_object_get(json_object_get(a, "result"), "_meta");
    assert_string_equal(json_string_value(json_object_get(meta, "once/outcome")), "replayed");
    assert_true(json_is_true(json_object_get(meta, "once/argumentsDiffer")));
    json_decref(a);
    after = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(before, after);
    free(after);
    free(before);

    /* A result without _meta gains one; a _meta that is not an object is replaced. */
    json_t *plain = mt_json("{\"content\":[]}");
    a = mt_answer(mcp_result_answer(id, plain, "completed", "k:1", 0));
    meta = json_object_get(json_object_get(a, "result"), "_meta");
    assert_int_equal(json_object_size(meta), 2);
    assert_string_equal(json_string_value(json_object_get(meta, "once/key")), "k:1");
    json_decref(a);
    assert_null(json_object_get(plain, "_meta"));
    json_decref(plain);
    json_t *odd = mt_json("{\"content\":[],\"_meta\":\"x\"}");
    a = mt_answer(mcp_result_answer(id, odd, "completed", "k:1", 0));
    meta = json_object_get(json_object_get(a, "result"), "_meta");
    assert_string_equal(json_string_value(json_object_get(meta, "once/outcome")), "completed");
    json_decref(a);
    assert_string_equal(json_string_value(json_object_get(odd, "_meta")), "x");
    json_decref(odd);
    /* No id: null. A big id is kept exactly. */
    a = mt_answer(mcp_result_answer(NULL, res, "completed", "k:1", 0));
    assert_true(json_is_null(json_object_get(a, "id")));
    json_decref(a);
    json_t *big = json_integer(9007199254740993LL);
    a = mt_answer(mcp_result_answer(big, res, "completed", "k:1", 0));
    assert_int_equal(json_integer_value(json_object_get(a, "id")), 9007199254740993LL);
    json_decref(a);
    json_decref(big);
    json_decref(res);
    json_decref(sid);
    json_decref(id);
}

/* A server cannot speak for once: its once/ members are dropped. And what
 * once logs of an ending never holds the server's words. */
static void test_server_cannot_speak_for_once(void **state)
{
    (void)state;
    json_t *id = json_integer(7);
    json_t *res = mt_json("{\"content\":[],\"_meta\":{\"once/outcome\":\"replayed\",\"once/argumentsDiffer\":true,"
                          "\"once/x\":1,\"theirs\":2}}");
    char *s = mcp_result_answer(id, res, "completed", "t:k", 0);
    json_t *a = mt_json(s);
    json_t *meta = json_object_get(json_object_get(a, "result"), "_meta");
    assert_string_equal(json_string_value(json_object_get(meta, "once/outcome")), "completed");
    assert_null(json_object_get(meta, "once/argumentsDiffer"));
    assert_null(json_object_get(meta, "once/x"));
    assert_int_equal(json_integer_value(json_object_get(meta, "theirs")), 2);
    json_decref(a);
    free(s);
    json_decref(res);
    json_decref(id);
    char out[128];
    json_t *f = mt_json("{\"id\":1,\"error\":{\"code\":-32000,\"message\":\"card 4242 declined\"}}");
    mcp_why_for_log(f, "the MCP server answered error -32000: card 4242 declined", out, sizeof out);
    assert_string_equal(out, "the MCP server answered error -32000");
    json_decref(f);
    mcp_why_for_log(NULL, "connection reset", out, sizeof out);
    assert_string_equal(out, "connection reset");
}

/* Only a refusal of the request itself releases a call; a status a proxy
 * may give after the server got it (503, 502, 520, 524, 408) is unknown. */
static void test_http_refusals(void **state)
{
    (void)state;
    static const long refused[] = {400, 401, 403, 404, 405, 406, 413, 415, 429};
    static const long maybe_ran[] = {200, 202, 408, 409, 422, 499, 500, 502, 503, 504, 520, 524};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_true(mcp_http_refused(refused[i]));
    for (size_t i = 0; i < sizeof maybe_ran / sizeof maybe_ran[0]; i++)
        assert_false(mcp_http_refused(maybe_ran[i]));
}

static void test_own_and_error_answers(void **state)
{
    (void)state;
    json_t *id = json_string("abc");
    json_t *a = mt_answer(mcp_own_answer(id, "in_flight", "charge:o-1", "another call with this key is running"));
    assert_string_equal(json_string_value(json_object_get(a, "id")), "abc");
    json_t *r = json_object_get(a, "result");
    assert_true(json_is_true(json_object_get(r, "isError")));
    json_t *content = json_object_get(r, "content");
    assert_int_equal(json_array_size(content), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "type")), "text");
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "text")),
                        "another call with this key is running");
    json_t *meta = json_object_get(r, "_meta");
    assert_string_equal(json_string_value(json_object_get(meta, "once/outcome")), "in_flight");
    assert_string_equal(json_string_value(json_object_get(meta, "once/key")), "charge:o-1");
    assert_null(json_object_get(meta, "once/argumentsDiffer"));
    json_decref(a);
    json_t *nid = json_integer(0);
    a = mt_answer(mcp_own_answer(nid, "held", "charge:o-1", "held"));
    assert_true(json_is_integer(json_object_get(a, "id")));
    assert_int_equal(json_integer_value(json_object_get(a, "id")), 0);
    json_decref(a);

    a = mt_answer(mcp_error_answer(nid, -32602, "no usable idempotency key"));
    assert_true(json_is_integer(json_object_get(a, "id")));
    assert_null(json_object_get(a, "result"));
    json_t *e = json_object_get(a, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), -32602);
    assert_string_equal(json_string_value(json_object_get(e, "message")), "no usable idempotency key");
    json_decref(a);
    a = mt_answer(mcp_error_answer(id, -32603, "x"));
    assert_string_equal(json_string_value(json_object_get(a, "id")), "abc");
    json_decref(a);
    a = mt_answer(mcp_error_answer(NULL, -32700, "Parse error"));
    assert_true(json_is_null(json_object_get(a, "id")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")), -32700);
    json_decref(a);
    /* An answer is one line of compact JSON. */
    char *s = mcp_error_answer(id, -32600, "Invalid Request");
    assert_non_null(s);
    assert_string_equal(s, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"error\":{\"code\":-32600,\"message\":\"Invalid "
                           "Request\"}}");
    free(s);
    json_decref(nid);
    json_decref(id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_readonly_list),
        cmocka_unit_test(test_recorded_learned_hint),
        cmocka_unit_test(test_approval_list),
        cmocka_unit_test(test_approval_destructive),
        cmocka_unit_test(test_approve_listed_is_recorded),
        cmocka_unit_test(test_learn_pages),
        cmocka_unit_test(test_forget),
        cmocka_unit_test(test_key_order),
        cmocka_unit_test(test_key_errors),
        cmocka_unit_test(test_canonical_args),
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_classify_internal_error),
        cmocka_unit_test(test_classify_sdk_refusals),
        cmocka_unit_test(test_result_answer),
        cmocka_unit_test(test_own_and_error_answers),
        cmocka_unit_test(test_http_refusals),
        cmocka_unit_test(test_server_cannot_speak_for_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
