/*
 * event_json.c — turns a once_event into the JSON record that `once hooks`
 * and the HTTP pull inbox print. Event bodies and headers are whatever a
 * webhook sender posted, and errors whatever a consumer reported, so nothing
 * here trusts them to be valid UTF-8: the output is always valid JSON.
 *
 * The times and the UTF-8 checks are action_json.c's; the few value
 * builders below mirror its private ones (lossy text, base64, headers) so an
 * event's body and headers look exactly like an action response's.
 */
#include "json/event_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "json/action_json.h"

/* EVP_EncodeBlock takes an int length; whole 3-byte groups per call keep
 * any body size safe and the output identical to a single call. */
#define EVJ_B64_CHUNK ((size_t)3 * 16384)

/* A JSON string of s[0..len), each byte outside well-formed UTF-8 replaced
 * by U+FFFD: a stray byte in an error text costs one character, not the
 * field. NULL only when out of memory. */
static json_t *evj_new_lossy(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    if (json_utf8_check(p, len))
        return json_stringn_nocheck(s, len);
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *buf = malloc(len * 3 + 1); /* each bad byte grows to 3 */
    if (buf == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t l = json_utf8_seq_len(p + i, len - i);
        if (l == 0) {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += 1;
        } else {
            memcpy(buf + o, p + i, l);
            o += l;
            i += l;
        }
    }
    json_t *j = json_stringn_nocheck(buf, o);
    free(buf);
    return j;
}

static json_t *evj_new_text(const char *s)
{
    return s == NULL ? json_null() : evj_new_lossy(s, strlen(s));
}

/* 0 means "never" in the ledger; a time JSON cannot name in RFC 3339 stays
 * the raw number rather than a lie. */
static json_t *evj_new_time(int64_t ms)
{
    if (ms == 0)
        return json_null();
    char buf[JSON_TIME_LEN];
    if (json_time_format(ms, buf, sizeof buf) != ONCE_OK)
        return json_integer((json_int_t)ms);
    return json_string_nocheck(buf);
}

/* Base64 (RFC 4648, padded) of p[0..n) as a JSON string; NULL when out of
 * memory. */
static json_t *evj_new_base64(const uint8_t *p, size_t n)
{
    size_t groups = n / 3 + (n % 3 != 0);
    if (groups > (SIZE_MAX - 1) / 4)
        return NULL;
    char *buf = malloc(groups * 4 + 1);
    if (buf == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t chunk = n - i < EVJ_B64_CHUNK ? n - i : EVJ_B64_CHUNK;
        int w = EVP_EncodeBlock((unsigned char *)buf + o, p + i, (int)chunk);
        if (w < 0) {
            free(buf);
            return NULL;
        }
        o += (size_t)w;
        i += chunk;
    }
    buf[o] = '\0';
    json_t *j = json_stringn_nocheck(buf, o);
    free(buf);
    return j;
}

/* The server stores headers as JSON [[name, value], ...], so they are shown
 * as JSON; any other blob is still worth seeing, as a string. */
static json_t *evj_new_headers(const once_event *e)
{
    if (e->headers == NULL)
        return json_null();
    json_error_t err;
    json_t *j = json_loadb(e->headers, e->headers_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
    if (j != NULL)
        return j;
    return evj_new_lossy(e->headers, e->headers_len);
}

/* json_object_set_new steals value even when it fails, so a NULL value (a
 * failed allocation) is the only case needing a check of its own. */
static int evj_put(json_t *obj, const char *name, json_t *value)
{
    if (value == NULL)
        return ONCE_ENOMEM;
    if (json_object_set_new_nocheck(obj, name, value) != 0)
        return ONCE_ENOMEM;
    return ONCE_OK;
}

/* A body that is text is shown as text; anything else (images, protobuf,
 * a stray Latin-1 byte) goes out exactly, as base64, under its own name so
 * a reader never mistakes one for the other. */
static int evj_put_body(json_t *obj, const once_event *e)
{
    if (e->body == NULL)
        return evj_put(obj, "body", json_null());
    if (json_utf8_check(e->body, e->body_len))
        return evj_put(obj, "body", json_stringn_nocheck((const char *)e->body, e->body_len));
    return evj_put(obj, "body_base64", evj_new_base64(e->body, e->body_len));
}

int event_json_from(const once_event *e, int with_receipt, json_t **out)
{
    if (e == NULL || out == NULL)
        return ONCE_EINVAL;
    const char *state = once_event_state_name(e->state);
    if (state == NULL)
        return ONCE_EINVAL;
    json_t *obj = json_object();
    if (obj == NULL)
        return ONCE_ENOMEM;

    int rc = evj_put(obj, "source", evj_new_text(e->source));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "event_id", evj_new_text(e->event_id));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "state", json_string_nocheck(state));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "attempt", json_integer((json_int_t)e->attempt));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "received_at", evj_new_time(e->received_at));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "updated_at", evj_new_time(e->updated_at));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "next_at", evj_new_time(e->next_at));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "delivered_at", evj_new_time(e->delivered_at));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "expires_at", evj_new_time(e->expires_at));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "content_type", evj_new_text(e->content_type));
    if (rc == ONCE_OK)
        rc = evj_put(obj, "headers", evj_new_headers(e));
    if (rc == ONCE_OK)
        rc = evj_put_body(obj, e);
    if (rc == ONCE_OK)
        rc = evj_put(obj, "error", evj_new_text(e->error));
    if (rc == ONCE_OK && with_receipt) {
        size_t n = strnlen(e->receipt, sizeof e->receipt);
        if (n == 0 || n == sizeof e->receipt)
            rc = evj_put(obj, "receipt", json_null());
        else
            rc = evj_put(obj, "receipt", evj_new_lossy(e->receipt, n));
    }
    if (rc != ONCE_OK) {
        json_decref(obj);
        return rc;
    }
    *out = obj;
    return ONCE_OK;
}
