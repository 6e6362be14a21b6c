/*
 * stored_request.c — a proxied request, written for the ledger and read
 * back (see stored_request.h).
 */
#include "server/core/stored_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "once/once.h"
#include "server/core/redact.h"

/* The client's headers as stored: [name, value] pairs, without secrets. */
static json_t *encode_headers(const once_config *cfg, const char *const *lines, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        const char *line = lines[i];
        const char *colon = strchr(line, ':'); /* a header name has no ':' */
        if (!colon)
            continue;
        int nlen = (int)(colon - line);
        if (redact_header(cfg, line, (size_t)nlen))
            continue;
        json_t *pair = json_pack("[s#s]", line, nlen, colon + 2);
        if (!pair)
            continue; /* not UTF-8: forwarded, but not stored */
        if (json_array_append_new(arr, pair) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* The body as JSON text when it is UTF-8, else as base64. 0 or -1. */
static int encode_body(json_t *o, const uint8_t *body, size_t len)
{
    if (!len)
        return 0;
    json_t *text = json_stringn((const char *)body, len); /* NULL: not UTF-8 */
    if (text)
        return json_object_set_new(o, "body", text);
    if (len > (size_t)INT32_MAX / 4 * 3)
        return -1;
    size_t cap = 4 * ((len + 2) / 3) + 1;
    char *b64 = malloc(cap);
    if (!b64)
        return -1;
    EVP_EncodeBlock((unsigned char *)b64, body, (int)len);
    int rc = json_object_set_new(o, "body_base64", json_string(b64));
    free(b64);
    return rc;
}

int stored_request_encode(const once_config *cfg, const char *method, const char *target,
                          const char *const *header_lines, size_t nlines, const uint8_t *body, size_t body_len,
                          char **out)
{
    *out = NULL;
    json_t *headers = encode_headers(cfg, header_lines, nlines);
    json_t *o = headers ? json_pack("{s:s, s:s, s:o}", "method", method, "target", target, "headers", headers)
                        : NULL;
    if (!o || encode_body(o, body, body_len) < 0) {
        json_decref(o);
        return ONCE_ENOMEM;
    }
    *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return *out ? ONCE_OK : ONCE_ENOMEM;
}

/* The body of a stored request into sr: "body" or "body_base64". 0, or -1
 * with why. */
static int decode_body(stored_request *sr, char *why, size_t whylen)
{
    json_t *text = json_object_get(sr->doc, "body");
    const char *b64 = json_string_value(json_object_get(sr->doc, "body_base64"));
    if (json_is_string(text)) {
        sr->body_len = json_string_length(text);
        if (!(sr->body = malloc(sr->body_len + 1)))
            goto oom;
        memcpy(sr->body, json_string_value(text), sr->body_len);
        return 0;
    }
    if (!b64)
        return 0; /* no body */
    size_t n = strlen(b64);
    if (n % 4 != 0 || n > (size_t)INT32_MAX) {
        snprintf(why, whylen, "the stored body is not base64");
        return -1;
    }
    if (!(sr->body = malloc(n / 4 * 3 + 1)))
        goto oom;
    int len = EVP_DecodeBlock(sr->body, (const unsigned char *)b64, (int)n);
    if (len < 0) {
        snprintf(why, whylen, "the stored body is not base64");
        return -1;
    }
    /* EVP_DecodeBlock counts each '=' of padding as a zero byte. */
    for (size_t i = n; i > 0 && b64[i - 1] == '=' && len > 0; i--)
        len--;
    sr->body_len = (size_t)len;
    return 0;
oom:
    snprintf(why, whylen, "out of memory");
    return -1;
}

int stored_request_decode(const uint8_t *data, size_t len, stored_request *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    out->doc = data ? json_loadb((const char *)data, len, 0, NULL) : NULL;
    out->method = json_string_value(json_object_get(out->doc, "method"));
    out->target = json_string_value(json_object_get(out->doc, "target"));
    out->headers = json_object_get(out->doc, "headers");
    if (!out->method || !out->target) {
        snprintf(why, whylen, "the stored request has no method or target (not stored by the proxy)");
        stored_request_free(out);
        return -1;
    }
    if (decode_body(out, why, whylen) < 0) {
        stored_request_free(out);
        return -1;
    }
    return 0;
}

void stored_request_free(stored_request *sr)
{
    json_decref(sr->doc);
    free(sr->body);
    memset(sr, 0, sizeof *sr);
}
