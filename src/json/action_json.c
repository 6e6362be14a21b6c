/*
 * action_json.c — turns a once_action into the JSON record that `once ls
 * --json`, `once show --json` and the HTTP API print. Stored text comes from
 * callers and providers, so nothing here trusts it to be valid UTF-8: the
 * output is always valid JSON.
 */
#include "json/action_json.h"

#include "common/timefmt.h"
#include "common/utf8.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

/* EVP_EncodeBlock takes an int length; encoding in chunks of whole 3-byte
 * groups keeps any body size safe and the output identical to one call. */
#define JSON_B64_CHUNK ((size_t)3 * 16384)

/* A JSON string of s[0..len), with each byte that is not part of well-formed
 * UTF-8 replaced by U+FFFD, so a stray byte costs one character rather than
 * the whole field. NULL only when out of memory. */
json_t *json_new_lossy(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    if (utf8_valid(p, len))
        return json_stringn_nocheck(s, len);
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *buf = malloc(len * 3 + 1); /* each bad byte grows to 3 */
    if (buf == NULL)
        return NULL;
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        size_t l = utf8_seq_len(p + i, len - i);
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

/* A JSON string of a NUL-terminated text field, or null when it is NULL. */
json_t *json_new_text(const char *s)
{
    if (s == NULL)
        return json_null();
    return json_new_lossy(s, strlen(s));
}

json_t *json_new_time(int64_t ms)
{
    if (ms == 0)
        return json_null();
    char buf[TIMEFMT_LEN];
    if (timefmt_rfc3339(ms, buf, sizeof buf) != 0) {
        /* Out of RFC 3339's range: keep the raw number rather than lie. */
        return json_integer((json_int_t)ms);
    }
    return json_string_nocheck(buf);
}

/* Base64 (RFC 4648, padded) of p[0..n) as a JSON string; NULL when out of
 * memory. */
json_t *json_new_base64(const uint8_t *p, size_t n)
{
    size_t groups = n / 3 + (n % 3 != 0);
    if (groups > (SIZE_MAX - 1) / 4)
        return NULL;
    size_t cap = groups * 4 + 1;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    size_t o = 0;
    size_t i = 0;
    while (i < n) {
        size_t chunk = n - i < JSON_B64_CHUNK ? n - i : JSON_B64_CHUNK;
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

/* A stored blob (headers, a request): the server writes JSON, so show it as
 * JSON; any other blob is still worth seeing, as a string. */
json_t *json_new_blob(const char *headers, size_t len)
{
    if (headers == NULL)
        return json_null();
    json_error_t err;
    json_t *j = json_loadb(headers, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
    if (j != NULL)
        return j;
    return json_new_lossy(headers, len);
}

/* A body that is text is shown as text; anything else (images, protobuf,
 * a stray Latin-1 byte) goes out exactly, as base64, under its own name so
 * a reader never mistakes one for the other. */
int json_put_body(json_t *obj, const uint8_t *body, size_t len)
{
    if (body == NULL)
        return json_put(obj, "body", json_null());
    if (utf8_valid(body, len))
        return json_put(obj, "body", json_stringn_nocheck((const char *)body, len));
    return json_put(obj, "body_base64", json_new_base64(body, len));
}

/* json_object_set_new steals value even when it fails, so a NULL value (an
 * allocation that failed) is the only case needing a check of its own. */
int json_put(json_t *obj, const char *name, json_t *value)
{
    if (value == NULL)
        return ONCE_ENOMEM;
    if (json_object_set_new_nocheck(obj, name, value) != 0)
        return ONCE_ENOMEM;
    return ONCE_OK;
}

/* The response of an action, or null when it has none; NULL when out of
 * memory. */
static json_t *json_new_response(const once_action *a)
{
    if (!a->has_response)
        return json_null();
    const once_response *r = &a->response;
    json_t *obj = json_pack("{s:i, s:o}", "status", r->status, "headers", json_new_blob(r->headers, r->headers_len));
    if (obj != NULL && r->body_not_stored > 0) {
        /* Delivered when it happened, never stored: its length says so. */
        if (json_object_set_new(obj, "body_not_stored", json_integer((json_int_t)r->body_not_stored)) < 0) {
            json_decref(obj);
            return NULL;
        }
        return obj;
    }
    if (obj != NULL && json_put_body(obj, r->body, r->body_len) != ONCE_OK) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* The trail is stored as lines; an array of them reads better. NULL when
 * out of memory. */
static json_t *json_new_trail(const char *trail)
{
    json_t *arr = json_array();
    for (const char *p = trail; arr && p && *p;) {
        size_t len = strcspn(p, "\n");
        json_t *line = json_new_lossy(p, len);
        if (!line || json_array_append_new(arr, line) < 0) {
            json_decref(arr);
            arr = NULL;
        }
        p += len;
        if (*p == '\n')
            p++;
    }
    return arr;
}

/* One json_pack for the whole record: it steals every value, releases them
 * all when one is NULL (out of memory), and keeps the fields in order. */
int action_json_from(const once_action *a, json_t **out)
{
    if (a == NULL || out == NULL)
        return ONCE_EINVAL;
    const char *state = once_state_name(a->state);
    if (state == NULL)
        return ONCE_EINVAL;
    /* request: what was attempted; the server stores it as JSON, credentials left out. */
    /* approved_at: when a human approved it (null: not approved);
     * decided_by, decision_note: who approved or denied it and their note
     * (null: undecided, nobody decided in time, or no note). */
    /* agent: who asked for the current attempt (null: nobody named);
     * waits_for: why a row awaits a person, "approval" (a rule) or "limit"
     * (over_limit = approve), null in the other states. */
    const char *waits = a->state != ONCE_STATE_AWAITING_APPROVAL ? NULL
                        : a->waits_for_limit                     ? "limit"
                                                                 : "approval";
    json_t *obj = json_pack("{s:o, s:o, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
                            "s:o, s:I, s:o, s:o}",
                            "scope", json_new_text(a->scope), "key", json_new_text(a->key), "state", state,
                            "attempt", (json_int_t)a->attempt, "agent", json_new_text(a->agent), "waits_for",
                            json_new_text(waits), "created_at", json_new_time(a->created_at),
                            "updated_at", json_new_time(a->updated_at), "lease_expires_at",
                            json_new_time(a->lease_expires_at), "expires_at", json_new_time(a->expires_at),
                            "approved_at", json_new_time(a->approved_at), "decided_by",
                            json_new_text(a->decided_by), "decision_note", json_new_text(a->decision_note),
                            "fingerprint",
                            json_new_text(a->fingerprint), "request",
                            json_new_blob((const char *)a->request, a->request_len), "provider_id",
                            json_new_text(a->provider_id), "error", json_new_text(a->error), "note",
                            json_new_text(a->note), "lookups", (json_int_t)a->lookups, "trail",
                            json_new_trail(a->trail), "response", json_new_response(a));
    if (obj == NULL)
        return ONCE_ENOMEM;
    *out = obj;
    return ONCE_OK;
}
