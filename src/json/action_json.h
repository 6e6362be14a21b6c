/*
 * action_json.h — the JSON form of an action record, shared by the CLI
 * (`once ls --json`, `once show --json`) and, later, the HTTP server, so both
 * speak exactly the same shape. Also the small text helpers that shape needs:
 * RFC 3339 times and strict UTF-8 checks.
 */
#ifndef ONCE_JSON_ACTION_JSON_H
#define ONCE_JSON_ACTION_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "once/once.h"

/* Room for "YYYY-MM-DDTHH:MM:SS.mmmZ" and its NUL. */
#define JSON_TIME_LEN 25

/* Writes ms (milliseconds since the epoch) as an RFC 3339 UTC time with
 * milliseconds, e.g. "2026-11-30T07:39:48.123Z", into buf.
 * 0, or ONCE_EINVAL when buf is NULL, len < JSON_TIME_LEN or the time has
 * no four-digit year. */
int json_time_format(int64_t ms, char *buf, size_t len);

/* The length (1..4) of the well-formed UTF-8 sequence at p[0..n), or 0 when
 * p does not start one (overlong forms, surrogates and code points above
 * U+10FFFF are refused, as RFC 3629 requires). n must be > 0. */
size_t json_utf8_seq_len(const uint8_t *p, size_t n);

/* 1 if p[0..n) is entirely well-formed UTF-8 (NUL bytes included), else 0. */
int json_utf8_check(const uint8_t *p, size_t n);

/* Builds the JSON record of *a into *out (a new reference owned by the
 * caller): scope, key, state, attempt, created_at, updated_at,
 * lease_expires_at, expires_at, fingerprint, provider_id, error, note and
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
/* Sets obj[name] = value (stolen); ONCE_ENOMEM when value is NULL. */
int json_put(json_t *obj, const char *name, json_t *value);

#endif
