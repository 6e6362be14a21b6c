/*
 * event_json.h — the JSON form of a webhook event, shared by the CLI (`once
 * hooks ls --json`, `once hooks show --json`) and the HTTP server's pull
 * inbox (POST /v1/inbox/{source}/claim), so both speak exactly the same
 * shape. Times, UTF-8 and bodies follow the action record (action_json.h).
 */
#ifndef ONCE_JSON_EVENT_JSON_H
#define ONCE_JSON_EVENT_JSON_H

#include <jansson.h>

#include "once/once.h"

/* Builds the JSON record of *e into *out (a new reference owned by the
 * caller): source, event_id, state (pending, delivered or dead), attempt,
 * received_at, updated_at, next_at, delivered_at, expires_at (RFC 3339, or
 * null for 0), content_type, headers (the blob as JSON when it parses, else
 * as a string; null when absent), body (a string when the body is
 * well-formed UTF-8, null when absent) or else body_base64, and error. With
 * with_receipt, also receipt (null when e->receipt is empty): only a claim's
 * answer carries it, since a receipt lets its holder settle the event.
 * Returns 0, ONCE_EINVAL (NULL argument, unnamed state) or ONCE_ENOMEM;
 * *out is untouched on error. */
int event_json_from(const once_event *e, int with_receipt, json_t **out);

#endif
