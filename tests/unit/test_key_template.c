/*
 * test_key_template.c — idempotency-key templates (key_template.c): every
 * function, nesting, literals and escapes, every parse error with its
 * column, missing fields of each kind, and domain() on tricky inputs.
 *
 * sha256 expectations were computed independently (Python hashlib and
 * `printf %s TEXT | sha256sum`), not with the code under test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/key_template.h"

/* ---- a request ------------------------------------------------------------ */

typedef struct req {
    const char *hname[8];
    const char *hvalue[8];
    const char *qname[8];
    const char *qvalue[8];
    const char *seg[8];
} req;

static const char *req_header(void *ctx, const char *name)
{
    const req *r = ctx;
    for (size_t i = 0; i < 8 && r->hname[i] != NULL; i++) {
        if (strcasecmp(r->hname[i], name) == 0)
            return r->hvalue[i];
    }
    return NULL;
}

static const char *req_query(void *ctx, const char *name)
{
    const req *r = ctx;
    for (size_t i = 0; i < 8 && r->qname[i] != NULL; i++) {
        if (strcmp(r->qname[i], name) == 0)
            return r->qvalue[i];
    }
    return NULL;
}

static const char *req_path(void *ctx, size_t n)
{
    const req *r = ctx;
    return n < 8 ? r->seg[n] : NULL;
}

static req g_req = {
    .hname = {"X-Customer", "X-Phone", "X-Space", "X-Empty", "X-Latin", "X-Tab"},
    .hvalue = {"cust-42", "+44 (0)20 7946-0958", "  padded\t ", "", "caf\xc3\xa9", "a\tb "},
    .qname = {"order", "page", "blank"},
    .qvalue = {"A-17", "3", ""},
    .seg = {"v1", "orders", "ORD 9"},
};

static json_t *g_doc;

static const char g_doc_text[] =
    "{\"cart\":\"c-123\",\"to\":\"Sales@www.Acme.co.uk\",\"n\":42,\"neg\":-7,\"real\":1.5,"
    "\"null\":null,\"t\":true,\"obj\":{\"a b\":\"x\",\"s/l\":\"slash\",\"t~l\":\"tilde\",\"}\":\"brace\"},"
    "\"arr\":[\"zero\",\"one\"],\"empty\":\"\",\"name\":\"Jos\\u00e9\",\"nul\":\"a\\u0000b\","
    "\"idn\":\"bob@m\\u00fcnchen.de\",\"upper\":\"MiXeD Case\",\"phone\":\"+1 (555) 010-9999\","
    "\"long\":\"" "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567"
    "8901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901"
    "2345678901234567890123456789012345678901234567890123456789012345678901234567890123456789\"}";

static int setup(void **state)
{
    (void)state;
    json_error_t jerr;
    g_doc = json_loads(g_doc_text, JSON_ALLOW_NUL, &jerr);
    if (g_doc == NULL)
        fail_msg("test document: %s", jerr.text);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_doc);
    return 0;
}

static key_source src_full(void)
{
    key_source s = {.header = req_header, .query = req_query, .path = req_path, .json = g_doc, .ctx = &g_req};
    return s;
}

/* Parses tpl (which must parse) and evaluates it against src. */
static int eval_with(const char *tpl, const key_source *src, char *out, size_t cap, char *err, size_t errlen)
{
    key_template *t = NULL;
    char perr[256];
    if (key_template_parse(tpl, &t, perr, sizeof perr) != 0)
        fail_msg("parse %s: %s", tpl, perr);
    assert_non_null(t);
    int rc = key_template_eval(t, src, out, cap, err, errlen);
    key_template_free(t);
    return rc;
}

/* The template evaluates to want. */
static void expect_key(const char *tpl, const char *want)
{
    key_source src = src_full();
    char out[256], err[256] = "";
    int rc = eval_with(tpl, &src, out, sizeof out, err, sizeof err);
    if (rc != 0)
        fail_msg("%s: rc %d: %s", tpl, rc, err);
    assert_string_equal(out, want);
}

/* The template fails with rc, and err contains want. */
static void expect_fail(const char *tpl, int want_rc, const char *want)
{
    key_source src = src_full();
    char out[256], err[256] = "";
    int rc = eval_with(tpl, &src, out, sizeof out, err, sizeof err);
    if (rc != want_rc)
        fail_msg("%s: rc %d (want %d), out '%s', err '%s'", tpl, rc, want_rc, out, err);
    assert_string_equal(out, "");
    if (strstr(err, want) == NULL)
        fail_msg("%s: err '%s' lacks '%s'", tpl, err, want);
}

/* The missing field is err exactly (what a 400 key_field_missing names). */
static void expect_missing(const char *tpl, const char *field)
{
    key_source src = src_full();
    char out[256], err[256] = "";
    int rc = eval_with(tpl, &src, out, sizeof out, err, sizeof err);
    if (rc != -1)
        fail_msg("%s: rc %d (want -1), err '%s'", tpl, rc, err);
    assert_string_equal(err, field);
}

/* The template does not parse, with err exactly want. */
static void expect_parse_error(const char *tpl, const char *want)
{
    key_template *t = (key_template *)&t; /* must be reset to NULL */
    char err[512] = "";
    int rc = key_template_parse(tpl, &t, err, sizeof err);
    if (rc != -1)
        fail_msg("%s: parsed", tpl);
    assert_null(t);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("%s: err '%s', want '%s...'", tpl, err, want);
}

static void expect_domain(const char *value, const char *want)
{
    key_source src = {.header = req_header, .ctx = &g_req};
    req r = g_req;
    r.hname[6] = "X-D";
    r.hvalue[6] = value;
    src.ctx = &r;
    char out[256], err[256] = "";
    int rc = eval_with("domain({header:X-D})", &src, out, sizeof out, err, sizeof err);
    if (want == NULL) {
        if (rc != -2)
            fail_msg("domain(%s): rc %d, out '%s' (want -2)", value, rc, out);
        assert_true(strncmp(err, "domain(): ", 10) == 0);
        return;
    }
    if (rc != 0)
        fail_msg("domain(%s): rc %d: %s", value, rc, err);
    assert_string_equal(out, want);
}

/* ---- threads ---------------------------------------------------------------- */

/* Many threads evaluating at once, from the very first use (this test
 * runs first), so the one-time loads of the suffix list and of SHA-256
 * race as they would in the gateway. */
static void *thread_eval(void *arg)
{
    const key_template *t = arg;
    key_source src = src_full();
    for (int i = 0; i < 200; i++) {
        char out[256], err[256];
        if (key_template_eval(t, &src, out, sizeof out, err, sizeof err) != 0 ||
            strcmp(out, "acme.co.uk:94bb2061090451cf59e52206a0442e40a5a40fb25db708e83cef3283395ced3f") != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    key_template *t = NULL;
    char err[256];
    assert_int_equal(key_template_parse("domain({json:/to}):sha256({json:/cart})", &t, err, sizeof err), 0);
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&th[i], NULL, thread_eval, t), 0);
    for (int i = 0; i < 8; i++) {
        void *rv = (void *)1;
        assert_int_equal(pthread_join(th[i], &rv), 0);
        assert_null(rv);
    }
    key_template_free(t);
}

/* ---- the issue's examples ---------------------------------------------------- */

static void test_issue_examples(void **state)
{
    (void)state;
    expect_key("order:{json:/cart}:{header:X-Customer}", "order:c-123:cust-42");
    /* sha256("sales@www.acme.co.uk") */
    expect_key("sha256(lower({json:/to}))", "36329d51bfe3a49577594d0f271dafe7951134710f1e95749299c272d8c18301");
}

static void test_issue_domain(void **state)
{
    (void)state;
    expect_key("domain({json:/to})", "acme.co.uk");
    expect_key("lead:domain({json:/to})", "lead:acme.co.uk");
}

/* ---- fields ------------------------------------------------------------------ */

static void test_fields(void **state)
{
    (void)state;
    expect_key("{header:X-Customer}", "cust-42");
    expect_key("{header:x-customer}", "cust-42"); /* the callback is case-insensitive */
    expect_key("{query:order}/{query:page}", "A-17/3");
    expect_key("{path:0}.{path:1}.{path:2}", "v1.orders.ORD 9");
    expect_key("{json:/n}", "42");
    expect_key("{json:/neg}", "-7");
    expect_key("{json:/arr/1}", "one");
    expect_key("{json:/obj/a b}", "x");
    expect_key("{json:/obj/s~1l}", "slash");
    expect_key("{json:/obj/t~0l}", "tilde");
    expect_key("{json:/obj/\\}}", "brace"); /* an escaped '}' inside a field */
}

static void test_missing_fields(void **state)
{
    (void)state;
    expect_missing("a:{header:X-Nope}", "header:X-Nope");
    expect_missing("{header:X-Empty}", "header:X-Empty"); /* empty counts as missing */
    expect_missing("{query:nope}", "query:nope");
    expect_missing("{query:blank}", "query:blank");
    expect_missing("{path:7}", "path:7");
    expect_missing("{path:200}", "path:200");
    expect_missing("{json:/nope}", "json:/nope");
    expect_missing("{json:/empty}", "json:/empty");
    expect_missing("{json:/arr/2}", "json:/arr/2");
    /* Not a string or an integer: missing too (documented in key_template.c). */
    expect_missing("{json:/null}", "json:/null");
    expect_missing("{json:/t}", "json:/t");
    expect_missing("{json:/real}", "json:/real");
    expect_missing("{json:/obj}", "json:/obj");
    expect_missing("{json:/arr}", "json:/arr");
    /* Inside functions, and the first missing one is named. */
    expect_missing("sha256(lower({json:/nope}))", "json:/nope");
    expect_missing("{header:X-Customer}{query:nope}{json:/nope}", "query:nope");

    /* A NULL callback or document: the kind is unavailable. */
    key_template *t = NULL;
    char err[256], out[256];
    assert_int_equal(key_template_parse("{header:X-Customer}{query:order}{path:0}{json:/cart}", &t, err, sizeof err),
                     0);
    key_source src = {.ctx = &g_req};
    assert_int_equal(key_template_eval(t, &src, out, sizeof out, err, sizeof err), -1);
    assert_string_equal(err, "header:X-Customer");
    src.header = req_header;
    assert_int_equal(key_template_eval(t, &src, out, sizeof out, err, sizeof err), -1);
    assert_string_equal(err, "query:order");
    src.query = req_query;
    assert_int_equal(key_template_eval(t, &src, out, sizeof out, err, sizeof err), -1);
    assert_string_equal(err, "path:0");
    src.path = req_path;
    assert_int_equal(key_template_eval(t, &src, out, sizeof out, err, sizeof err), -1);
    assert_string_equal(err, "json:/cart");
    src.json = g_doc;
    assert_int_equal(key_template_eval(t, &src, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "cust-42A-17v1c-123");
    key_template_free(t);
}

static void test_unusable_values(void **state)
{
    (void)state;
    /* Non-ASCII outside an ASCII-making function. */
    expect_fail("{json:/name}", -2, "json:/name is not printable ASCII");
    expect_fail("{json:/name}", -2, "wrap it in sha256()");
    expect_fail("lower({json:/name})", -2, "json:/name is not printable ASCII");
    expect_fail("x{header:X-Latin}", -2, "header:X-Latin is not printable ASCII");
    expect_fail("trim({json:/idn})", -2, "json:/idn is not printable ASCII");
    /* ... which sha256(), digits() and domain() make ASCII. */
    /* sha256("José") */
    expect_key("sha256({json:/name})", "24c2ab65b7adab7e070ba05a00a3f3ae074e28b8bcdd59735b7107e7a538a551");
    /* lower() folds only A-Z: sha256("josé") */
    expect_key("sha256(lower({json:/name}))", "d994e1d001886fe5b45b1267bd1fa2b752ac50742579bd3dad7b2a2aa0ed6866");
    expect_key("domain({json:/idn})", "xn--mnchen-3ya.de");
    /* A NUL inside a JSON string. */
    expect_fail("sha256({json:/nul})", -2, "json:/nul: the string holds a NUL byte");
    /* Too long for a key (the field is 270 bytes), and for a small buffer. */
    expect_fail("{json:/long}", -2, "longer than 255; wrap it in sha256()");
    key_source src = src_full();
    char out[8], err[256];
    assert_int_equal(eval_with("{json:/cart}:x", &src, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "c-123:x");
    assert_int_equal(eval_with("{json:/cart}:xy", &src, out, sizeof out, err, sizeof err), -2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "longer than 7"));
    assert_int_equal(eval_with("{json:/cart}", &src, out, 1, err, sizeof err), -2);
    assert_int_equal(eval_with("{json:/cart}", &src, NULL, 0, err, sizeof err), -2);
    /* A long value hashed is fine. */
    expect_key("sha256({json:/long})", "9cc663b7202203603c504271829fd3929d77b7f8024a4ba27c9bc9ed7ce2a638");
}

/* ---- functions ----------------------------------------------------------------- */

static void test_lower(void **state)
{
    (void)state;
    expect_key("lower({json:/upper})", "mixed case");
    expect_key("lower(ABC-{header:X-Customer})", "abc-cust-42");
    expect_key("lower({path:2})", "ord 9");
    /* Non-ASCII is not folded (only A-Z), so it still needs sha256(). */
    expect_fail("lower({json:/name})", -2, "not printable ASCII");
}

static void test_trim(void **state)
{
    (void)state;
    expect_key("[trim({header:X-Space})]", "[padded]");
    expect_key("trim(  a b  {json:/cart})", "a b  c-123");
    /* trim() removes the tab that would not be printable... */
    expect_key("trim(   {header:X-Space}   )x", "paddedx");
    expect_fail("{header:X-Space}", -2, "header:X-Space is not printable ASCII");
    /* ...but not one in the middle; the message names the field. */
    expect_fail("k:trim(a{header:X-Customer}{header:X-Tab})", -2, "header:X-Tab is not printable ASCII");
    expect_fail("k:lower(trim({header:X-Latin}))", -2, "header:X-Latin is not printable ASCII");
    /* Whitespace only: an empty result is refused. */
    req r = g_req;
    r.hname[6] = "X-Blank";
    r.hvalue[6] = " \t\r\n\v\f ";
    key_source src = {.header = req_header, .ctx = &r};
    char out[64], err[128];
    assert_int_equal(eval_with("k:trim({header:X-Blank})", &src, out, sizeof out, err, sizeof err), -2);
    assert_string_equal(err, "trim() gave an empty value");
}

static void test_digits(void **state)
{
    (void)state;
    expect_key("tel:digits({header:X-Phone})", "tel:4402079460958");
    expect_key("digits({json:/phone})", "15550109999");
    expect_key("digits({json:/n})", "42");
    expect_key("digits({json:/neg})", "7");
    expect_key("digits({json:/name}1)", "1"); /* digits() makes non-ASCII input ASCII */
    expect_key("digits({json:/cart}x)", "123");
    expect_fail("digits({json:/upper})", -2, "digits() gave an empty value");
}

static void test_sha256(void **state)
{
    (void)state;
    /* sha256("c-123") */
    expect_key("sha256({json:/cart})", "94bb2061090451cf59e52206a0442e40a5a40fb25db708e83cef3283395ced3f");
    /* sha256("order:c-123") */
    expect_key("k:sha256(order:{json:/cart})", "k:75de0327db21f88d31613e5ec946327c4da7147c2e00efec2266b78433fbb7f5");
}

static void test_nesting(void **state)
{
    (void)state;
    expect_key("lower(trim({header:X-Space}))", "padded");
    expect_key("trim(lower(  {json:/upper}  ))", "mixed case");
    expect_key("domain(lower(trim({json:/to})))", "acme.co.uk");
    expect_key("digits(sha256({json:/cart}))", "9420610904515952206044240540257088332833953");
    /* 16 nested calls parse and evaluate; 17 do not parse. */
    char tpl[512] = "";
    for (int i = 0; i < 16; i++)
        strcat(tpl, "lower(");
    strcat(tpl, "{json:/upper}");
    for (int i = 0; i < 16; i++)
        strcat(tpl, ")");
    expect_key(tpl, "mixed case");
    char deep[512] = "";
    for (int i = 0; i < 17; i++)
        strcat(deep, "trim(");
    strcat(deep, "{json:/upper}");
    for (int i = 0; i < 17; i++)
        strcat(deep, ")");
    expect_parse_error(deep, "column 81: functions nest deeper than 16");
}

/* ---- literals and escapes ------------------------------------------------------- */

static void test_literals_and_escapes(void **state)
{
    (void)state;
    expect_key("a b c {json:/cart} !#$%&*+,-./:;<=>?@[]^_`|~\"'", "a b c c-123 !#$%&*+,-./:;<=>?@[]^_`|~\"'");
    expect_key("\\{{json:/cart}\\}", "{c-123}");
    expect_key("\\(x\\)\\\\{json:/cart}", "(x)\\c-123");
    expect_key("lower\\({json:/cart}\\)", "lower(c-123)");     /* a function name as text */
    expect_key("sha256\\(lower\\({json:/cart}", "sha256(lower(c-123");
    expect_key("lowercase:{json:/cart}", "lowercase:c-123"); /* no '(': plain text */
    expect_key("x-lower({json:/upper})", "x-mixed case");   /* '-' ends an identifier */
    /* Non-ASCII literal text is fine inside sha256() (sha256("café:c-123")). */
    expect_key("sha256(caf\xc3\xa9:{json:/cart})", "2f18a1ce27664546949378db6d4128f201935d766f99a9d6179bc4f9c3c379ba");
}

/* ---- parse errors ---------------------------------------------------------------- */

static void test_parse_errors(void **state)
{
    (void)state;
    expect_parse_error("", "column 1: the template is empty");
    expect_parse_error("order:42", "column 1: the template has no field");
    expect_parse_error("sha256(x)", "column 1: the template has no field");
    expect_parse_error("a{json:/x", "column 2: unclosed '{'");
    expect_parse_error("a{json", "column 2: unclosed '{'");
    expect_parse_error("ab{}", "column 4: '{' must start a field");
    expect_parse_error("ab{json}", "column 4: '{' must start a field");
    expect_parse_error("ab{:x}", "column 4: '{' must start a field");
    expect_parse_error("{body:/x}", "column 2: unknown field 'body' (header, json, query or path)");
    expect_parse_error("{Header:X}", "column 2: unknown field 'Header'");
    expect_parse_error("{header:}", "column 9: header: needs a name");
    expect_parse_error("{query:}", "column 8: query: needs a name");
    expect_parse_error("{json:}", "column 7: json: needs a pointer");
    expect_parse_error("{path:}", "column 7: path: needs a segment number");
    expect_parse_error("{header:X Y}", "column 10: a header name cannot hold ' '");
    expect_parse_error("{header:X\\(}", "column 10: a header name cannot hold '('");
    expect_parse_error("{json:to}", "column 7: a JSON pointer starts with '/'");
    expect_parse_error("{json:/a~2}", "column 9: in a JSON pointer '~' must be followed by 0 or 1");
    expect_parse_error("{json:/a~}", "column 9: in a JSON pointer '~' must be followed by 0 or 1");
    expect_parse_error("{path:x}", "column 7: a path segment is a number from 0");
    expect_parse_error("{path:-1}", "column 7: a path segment is a number from 0");
    expect_parse_error("{path:01}", "column 7: a path segment number has no leading zeros");
    expect_parse_error("{path:256}", "column 7: a path segment number is at most 255");
    expect_parse_error("{json:/a{b}", "column 9: '{' inside a field");
    expect_parse_error("x}{json:/a}", "column 2: '}' without '{'");
    expect_parse_error("{json:/a})", "column 10: ')' without '('");
    expect_parse_error("{json:/a}(", "column 10: '(' without a function");
    expect_parse_error("x-(y){json:/a}", "column 3: '(' without a function");
    expect_parse_error("k:sha265({json:/a})", "column 3: unknown function 'sha265'");
    expect_parse_error("LOWER({json:/a})", "column 1: unknown function 'LOWER'");
    expect_parse_error("my_lower({json:/a})", "column 1: unknown function 'my_lower'");
    expect_parse_error("ab:lower({json:/a}", "column 4: unclosed '('");
    expect_parse_error("sha256(lower({json:/a})", "column 1: unclosed '('");
    expect_parse_error("{json:/a}:trim()", "column 11: trim() is empty");
    expect_parse_error("{json:/a}\\x", "column 10: '\\' must be followed by {, }, (, ) or \\");
    expect_parse_error("{json:/a}\\", "column 10: '\\' must be followed by");
    expect_parse_error("{json:/a\\~0}", "column 9: '\\' must be followed by");
    expect_parse_error("{json:/a}\t", "column 10: control character 0x09");
    expect_parse_error("{json:/a}\x7f", "column 10: control character 0x7f");
    expect_parse_error("{json:/a}\xc3(", "column 10: invalid UTF-8");
    expect_parse_error("\xc3\xa9{json:/a}\xff", "column 11: invalid UTF-8");
    expect_parse_error("\xed\xa0\x80{json:/a}", "column 1: invalid UTF-8"); /* a surrogate */
    expect_parse_error("\xc0\xaf{json:/a}", "column 1: invalid UTF-8");     /* overlong */
    /* Columns count characters: 'é' is one. */
    expect_parse_error("caf\xc3\xa9:{json:/a}", "column 4: non-ASCII text can never be part of a key");
    expect_parse_error("sha256(x){json:/a}:lower(\xc3\xa9)", "column 26: non-ASCII text");
    expect_parse_error("sha256(\xc3\xa9\xc3\xa9{nope:x})", "column 11: unknown field 'nope'");

    /* Bounds: the length of the text and the number of parts. */
    char *big = malloc(4098);
    assert_non_null(big);
    memset(big, 'a', 4097);
    memcpy(big, "{json:/a}", 9);
    big[4097] = '\0';
    expect_parse_error(big, "column 1: the template is longer than 4096 bytes");
    big[4096] = '\0';
    key_template *t = NULL;
    char err[256];
    assert_int_equal(key_template_parse(big, &t, err, sizeof err), 0);
    key_template_free(t);
    /* 257 parts: "{json:/a}" alternating with "-". */
    big[0] = '\0';
    for (int i = 0; i < 129; i++)
        strcat(big, "{json:/a}-");
    expect_parse_error(big, "column 1281: more than 256 parts");
    free(big);

    /* NULL arguments and error buffers. */
    assert_int_equal(key_template_parse(NULL, &t, err, sizeof err), -1);
    assert_null(t);
    assert_int_equal(key_template_parse("{json:/a}", NULL, err, sizeof err), -1);
    assert_int_equal(key_template_parse("{", &t, NULL, 0), -1);
    assert_int_equal(key_template_parse("{", &t, err, 1), -1);
    assert_string_equal(err, "");
    key_template_free(NULL);
}

/* ---- key_template_json_only ------------------------------------------------------- */

static void test_json_only(void **state)
{
    (void)state;
    key_template *t = NULL;
    char err[128];
    assert_int_equal(key_template_parse("sha256({json:/a}:{json:/b})", &t, err, sizeof err), 0);
    assert_int_equal(key_template_json_only(t, err, sizeof err), 0);
    key_template_free(t);
    assert_int_equal(key_template_parse("lower({json:/a}:{header:X-Step}{query:q})", &t, err, sizeof err), 0);
    assert_int_equal(key_template_json_only(t, err, sizeof err), -1);
    assert_string_equal(err, "header:X-Step");
    key_template_free(t);
    assert_int_equal(key_template_parse("{json:/a}{path:3}", &t, err, sizeof err), 0);
    assert_int_equal(key_template_json_only(t, err, sizeof err), -1);
    assert_string_equal(err, "path:3");
    key_template_free(t);
}

/* ---- domain() ------------------------------------------------------------------------ */

static void test_domain_inputs(void **state)
{
    (void)state;
    expect_domain("Sales@www.Acme.co.uk", "acme.co.uk");
    expect_domain("bob@m\xc3\xbcnchen.de", "xn--mnchen-3ya.de");
    expect_domain("BOB@M\xc3\x9cNCHEN.DE", "xn--mnchen-3ya.de");
    expect_domain("xn--mnchen-3ya.de", "xn--mnchen-3ya.de");
    expect_domain("www.XN--MNCHEN-3YA.de", "xn--mnchen-3ya.de");
    expect_domain("fa\xc3\x9f.de", "xn--fa-hia.de"); /* nontransitional: ß stays */
    expect_domain("shop.foo.\xe5\x85\xac\xe5\x8f\xb8.cn", "foo.xn--55qx5d.cn"); /* 公司.cn is a suffix */
    expect_domain("https://shop.example.co.uk:8443/x", "example.co.uk");
    expect_domain("https://user:pw@shop.example.co.uk:8443/x?y=a@b.com#f", "example.co.uk");
    expect_domain("http://example.com", "example.com");
    expect_domain("HTTP://WWW.Example.COM/", "example.com");
    expect_domain("//cdn.example.net/a.js", "example.net");
    expect_domain("mailto:someone@mail.example.org", "example.org");
    expect_domain("example.com:8080", "example.com");
    expect_domain("example.com:", "example.com");
    expect_domain("www.example.com.", "example.com");
    expect_domain("www.example.com\xe3\x80\x82", "example.com"); /* an ideographic full stop */
    expect_domain("www.example.com..", NULL);
    expect_domain("EXAMPLE.COM", "example.com");
    expect_domain("  example.com  ", "example.com");
    expect_domain("example.com/path", "example.com");
    expect_domain("a.b.c.example.org", "example.org");
    expect_domain("user@sub.example.github.io", "example.github.io"); /* github.io: private section */
    expect_domain("Jane Doe <jane@mail.example.co.uk>", "example.co.uk");
    expect_domain("\"a@b\"@example.com", "example.com");
    expect_domain("_dmarc.example.com", "example.com");
    expect_domain("foo.unknowntld", "foo.unknowntld"); /* the default rule "*" */
    expect_domain("www.\xef\xbd\x85\xef\xbd\x98" "ample.com", "example.com"); /* full-width letters map */

    /* Errors. */
    expect_domain("co.uk", NULL);
    expect_domain("bob@co.uk", NULL);
    expect_domain("github.io", NULL);
    expect_domain("com", NULL);
    expect_domain("localhost", NULL);
    expect_domain("127.0.0.1", NULL);
    expect_domain("http://127.0.0.1:8080/", NULL);
    expect_domain("127.1", NULL);
    expect_domain("\xef\xbc\x91\xef\xbc\x92\xef\xbc\x97.0.0.1", NULL); /* full-width digits */
    expect_domain("[::1]", NULL);
    expect_domain("http://[::1]:80/", NULL);
    expect_domain("bob@[192.0.2.1]", NULL);
    expect_domain("::1", NULL);
    expect_domain("fe80::1", NULL);
    expect_domain("example.com:http", NULL);
    expect_domain("bob@", NULL);
    expect_domain("https://", NULL);
    expect_domain(".", NULL);
    expect_domain("a..example.com", NULL);
    expect_domain(".example.com", NULL);
    expect_domain("-bad.example.com", NULL);
    expect_domain("ex ample.com", NULL);
    expect_domain("ex%41mple.com", NULL);
    expect_domain("xn--zz.de", NULL); /* invalid punycode */
    char label[80];
    memset(label, 'a', 64);
    strcpy(label + 64, ".com");
    expect_domain(label, NULL); /* a label longer than 63 */

    /* Inside a bigger template, and the message names the problem. */
    expect_fail("{json:/cart}:domain({json:/cart})", -2, "domain(): 'c-123' is a public suffix");
    key_source src = src_full();
    char out[64], err[128];
    req r = g_req;
    r.hname[6] = "X-D";
    r.hvalue[6] = "127.0.0.1";
    src.ctx = &r;
    assert_int_equal(eval_with("domain({header:X-D})", &src, out, sizeof out, err, sizeof err), -2);
    assert_string_equal(err, "domain(): an IP address has no registrable domain");
    r.hvalue[6] = "co.uk";
    assert_int_equal(eval_with("domain({header:X-D})", &src, out, sizeof out, err, sizeof err), -2);
    assert_string_equal(err, "domain(): 'co.uk' is a public suffix, not a registrable domain");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_issue_examples), cmocka_unit_test(test_issue_domain),
        cmocka_unit_test(test_fields),         cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_unusable_values), cmocka_unit_test(test_lower),
        cmocka_unit_test(test_trim),           cmocka_unit_test(test_digits),
        cmocka_unit_test(test_sha256),         cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_literals_and_escapes), cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_json_only),      cmocka_unit_test(test_domain_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
