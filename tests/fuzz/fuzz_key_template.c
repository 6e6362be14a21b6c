/*
 * fuzz_key_template.c — libFuzzer target for idempotency-key templates
 * (key_template.c).
 *
 * The whole input is a template. When it parses, it is evaluated against a
 * fixed JSON document and fixed header, query and path callbacks; the
 * query callback echoes the (fuzzed) parameter name as its value, so
 * domain(), trim() and the others also see arbitrary text. Checked whatever
 * the input:
 *  - parse gives 0 and a template, or -1, no template and a one-line
 *    "column C: ..." message;
 *  - evaluation gives 0 with a key of 1-255 printable ASCII bytes that fits
 *    the buffer, or -1 naming a field ("json:/to"), or -2 with a message,
 *    leaving "" in the buffer; the same template and source give the same
 *    answer again; a smaller buffer gives the same key, or -2 when it does
 *    not fit, or the same error; without any source, never a key;
 *  - key_template_json_only gives 0 or -1 with a field that is not json:.
 * Leaks are LeakSanitizer's to find.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/key_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fz_doc_text[] =
    "{\"cart\":\"c-123\",\"to\":\"Sales@www.Acme.co.uk\",\"idn\":\"bob@m\\u00fcnchen.de\","
    "\"url\":\"https://user@shop.example.co.uk:8443/x?y#z\",\"ip\":\"127.0.0.1\",\"v6\":\"[::1]\","
    "\"ps\":\"co.uk\",\"gh\":\"user@sub.example.github.io\",\"n\":42,\"neg\":-9223372036854775808,"
    "\"real\":1.5,\"null\":null,\"t\":true,\"f\":false,\"obj\":{\"a\":\"x\",\"s/l\":\"y\",\"t~l\":\"z\"},"
    "\"arr\":[\"zero\",1,\"\\u00e9\"],\"empty\":\"\",\"name\":\"Jos\\u00e9\",\"nul\":\"a\\u0000b\","
    "\"ws\":\" \\t padded \\r\\n\",\"phone\":\"+1 (555) 010-9999\",\"ctl\":\"a\\u0001b\","
    "\"long\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";

static const char *const fz_headers[][2] = {
    {"X-Customer", "cust-42"},   {"X-Phone", "+44 (0)20 7946-0958"},
    {"X-Space", "  padded\t "},  {"X-Empty", ""},
    {"X-Latin", "caf\xc3\xa9"},  {"X-Mail", "Bob <bob@MAIL.Example.CO.UK>"},
    {"X-Url", "http://[::1]:80/"}, {"X-Idn", "\xe6\x97\xa5\xe6\x9c\xac.\xe5\x85\xac\xe5\x8f\xb8.cn"},
};

static const char *const fz_segs[] = {"v1", "orders", "ORD 9", "", "a\xc3\xa9", "example.com:80"};

static json_t *fz_doc;

static const char *fz_header(void *ctx, const char *name)
{
    (void)ctx;
    for (size_t i = 0; i < sizeof fz_headers / sizeof fz_headers[0]; i++) {
        if (strcasecmp(fz_headers[i][0], name) == 0)
            return fz_headers[i][1];
    }
    return NULL;
}

/* Echoes the name, except "none", which is absent. */
static const char *fz_query(void *ctx, const char *name)
{
    (void)ctx;
    return strcmp(name, "none") == 0 ? NULL : name;
}

static const char *fz_path(void *ctx, size_t n)
{
    (void)ctx;
    return n < sizeof fz_segs / sizeof fz_segs[0] ? fz_segs[n] : NULL;
}

static int fz_is_key(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n >= cap || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7E)
            return 0;
    }
    return 1;
}

static int fz_is_field(const char *err)
{
    return strncmp(err, "header:", 7) == 0 || strncmp(err, "json:", 5) == 0 || strncmp(err, "query:", 6) == 0 ||
           strncmp(err, "path:", 5) == 0;
}

/* Evaluates t into a buffer of cap bytes and checks the contract. */
static int fz_eval(const key_template *t, const key_source *src, size_t cap, char *key)
{
    char err[512];
    memset(key, 'x', cap);
    memset(err, 'x', sizeof err);
    int rc = key_template_eval(t, src, key, cap, err, sizeof err);
    if (memchr(err, '\0', sizeof err) == NULL)
        __builtin_trap();
    switch (rc) {
    case 0:
        if (!fz_is_key(key, cap))
            __builtin_trap();
        break;
    case -1:
        if (key[0] != '\0' || !fz_is_field(err))
            __builtin_trap();
        break;
    case -2:
        if (key[0] != '\0' || err[0] == '\0')
            __builtin_trap();
        break;
    default:
        __builtin_trap();
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fz_doc == NULL) {
        json_error_t jerr;
        fz_doc = json_loads(fz_doc_text, JSON_ALLOW_NUL, &jerr);
        if (fz_doc == NULL)
            __builtin_trap();
    }
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    if (size > 0)
        memcpy(text, data, size);
    text[size] = '\0';

    key_template *t = (key_template *)&t; /* parse must reset it */
    char err[512];
    memset(err, 'x', sizeof err);
    int rc = key_template_parse(text, &t, err, sizeof err);
    if (rc == -1) {
        if (t != NULL || memchr(err, '\0', sizeof err) == NULL || strncmp(err, "column ", 7) != 0 ||
            strchr(err, '\n') != NULL)
            __builtin_trap();
        free(text);
        return 0;
    }
    if (rc != 0 || t == NULL)
        __builtin_trap();

    key_source src = {.header = fz_header, .query = fz_query, .path = fz_path, .json = fz_doc, .ctx = NULL};
    char key[256], again[256], small[17];
    int r1 = fz_eval(t, &src, sizeof key, key);
    int r2 = fz_eval(t, &src, sizeof again, again);
    if (r1 != r2 || (r1 == 0 && strcmp(key, again) != 0))
        __builtin_trap();
    int r3 = fz_eval(t, &src, sizeof small, small);
    if (r1 != 0) {
        if (r3 != r1) /* the buffer's size is checked last */
            __builtin_trap();
    } else if (strlen(key) < sizeof small) {
        if (r3 != 0 || strcmp(key, small) != 0)
            __builtin_trap();
    } else if (r3 != -2) {
        __builtin_trap();
    }
    /* Without any source no template succeeds: each has a field. */
    key_source none = {0};
    if (fz_eval(t, &none, sizeof key, key) == 0)
        __builtin_trap();

    int jo = key_template_json_only(t, err, sizeof err);
    if (jo == -1 ? !fz_is_field(err) || strncmp(err, "json:", 5) == 0 : jo != 0)
        __builtin_trap();
    key_template_free(t);
    free(text);
    return 0;
}
