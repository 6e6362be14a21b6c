/*
 * action_json.h — the JSON form of an action record, shared by the CLI
 * (`once ls --json`, `once show --json`) and, later, the HTTP server, so both
 * speak exactly the same shape.
 */
#ifndef ONCE_JSON_ACTION_JSON_H
#define ONCE_JSON_ACTION_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "once/once.h"

/* Builds the JSON record of *a into *out (a new reference owned by the
 * caller): scope, key, state, attempt, created_at, updated_at,
 * lease_expires_at, expires_at, approved_at, decided_by, decision_note,
 * fingerprint, request, provider_id, error, note, lookups, trail and
 * response. Returns 0, ONCE_EINVAL (NULL argument, unnamed state) or
 * ONCE_ENOMEM; *out is untouched on error. */
int action_json_from(const once_action *a, json_t **out);

/* Value builders shared with event_json.c, so an event's body and headers
 * look exactly like an action response's. Each returns a new reference, or
 * NULL when out of memory. */

/* s[0..len) as a JSON string, bytes outside well-formed UTF-8 replaced by
 * U+FFFD. */
json_t *json_new_lossy(const char *s, size_t len);
/* A NUL-terminated text, or null for NULL. */
json_t *json_new_text(const char *s);
/* An RFC 3339 time, null for 0, the raw number when out of range. */
json_t *json_new_time(int64_t ms);
/* Base64 (RFC 4648, padded) of p[0..n). */
json_t *json_new_base64(const uint8_t *p, size_t n);
/* A stored blob the server writes as JSON (headers, a request): parsed when
 * it is JSON, else a lossy string; null for NULL. */
json_t *json_new_blob(const char *headers, size_t len);
/* obj.body (text) or obj.body_base64 (anything else), or obj.body = null. */
int json_put_body(json_t *obj, const uint8_t *body, size_t len);
/* Sets obj[name] = value (stolen); ONCE_ENOMEM when value is NULL. */
int json_put(json_t *obj, const char *name, json_t *value);

#endif
