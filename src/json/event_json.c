/*
 * event_json.c — turns a once_event into the JSON record that `once hooks`
 * and the HTTP pull inbox print. Event bodies and headers are whatever a
 * webhook sender posted, and errors whatever a consumer reported, so nothing
 * here trusts them to be valid UTF-8: the output is always valid JSON.
 *
 * The value builders are action_json.c's, so an event's body and headers
 * look exactly like an action response's.
 */
#include "common/utf8.h"
#include "json/event_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json/action_json.h"

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

    int rc = json_put(obj, "source", json_new_text(e->source));
    if (rc == ONCE_OK)
        rc = json_put(obj, "event_id", json_new_text(e->event_id));
    if (rc == ONCE_OK)
        rc = json_put(obj, "state", json_string_nocheck(state));
    if (rc == ONCE_OK)
        rc = json_put(obj, "attempt", json_integer((json_int_t)e->attempt));
    if (rc == ONCE_OK)
        rc = json_put(obj, "received_at", json_new_time(e->received_at));
    if (rc == ONCE_OK)
        rc = json_put(obj, "updated_at", json_new_time(e->updated_at));
    if (rc == ONCE_OK)
        rc = json_put(obj, "next_at", json_new_time(e->next_at));
    if (rc == ONCE_OK)
        rc = json_put(obj, "delivered_at", json_new_time(e->delivered_at));
    if (rc == ONCE_OK)
        rc = json_put(obj, "expires_at", json_new_time(e->expires_at));
    if (rc == ONCE_OK)
        rc = json_put(obj, "content_type", json_new_text(e->content_type));
    if (rc == ONCE_OK)
        rc = json_put(obj, "headers", json_new_blob(e->headers, e->headers_len));
    if (rc == ONCE_OK)
        rc = json_put_body(obj, e->body, e->body_len);
    if (rc == ONCE_OK)
        rc = json_put(obj, "error", json_new_text(e->error));
    if (rc == ONCE_OK && with_receipt) {
        size_t n = strnlen(e->receipt, sizeof e->receipt);
        if (n == 0 || n == sizeof e->receipt)
            rc = json_put(obj, "receipt", json_null());
        else
            rc = json_put(obj, "receipt", json_new_lossy(e->receipt, n));
    }
    if (rc != ONCE_OK) {
        json_decref(obj);
        return rc;
    }
    *out = obj;
    return ONCE_OK;
}
