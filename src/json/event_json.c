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

/* The receipt of a claim, or null when e has none. */
static json_t *json_new_receipt(const once_event *e)
{
    size_t n = strnlen(e->receipt, sizeof e->receipt);
    if (n == 0 || n == sizeof e->receipt)
        return json_null();
    return json_new_lossy(e->receipt, n);
}

/* As action_json_from: one json_pack up to the headers; then the body under
 * its own name (json_put_body), the error and the receipt. */
int event_json_from(const once_event *e, int with_receipt, json_t **out)
{
    if (e == NULL || out == NULL)
        return ONCE_EINVAL;
    const char *state = once_event_state_name(e->state);
    if (state == NULL)
        return ONCE_EINVAL;
    json_t *obj = json_pack("{s:o, s:o, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "source",
                            json_new_text(e->source), "event_id", json_new_text(e->event_id), "state", state,
                            "attempt", (json_int_t)e->attempt, "received_at", json_new_time(e->received_at),
                            "updated_at", json_new_time(e->updated_at), "next_at", json_new_time(e->next_at),
                            "delivered_at", json_new_time(e->delivered_at), "expires_at", json_new_time(e->expires_at),
                            "content_type", json_new_text(e->content_type), "headers",
                            json_new_blob(e->headers, e->headers_len));
    int rc = obj != NULL ? json_put_body(obj, e->body, e->body_len) : ONCE_ENOMEM;
    if (rc == ONCE_OK)
        rc = json_put(obj, "error", json_new_text(e->error));
    if (rc == ONCE_OK)
        rc = json_put(obj, "claimed_by", json_new_text(e->claimed_by));
    if (rc == ONCE_OK && with_receipt)
        rc = json_put(obj, "receipt", json_new_receipt(e));
    if (rc != ONCE_OK) {
        json_decref(obj);
        return rc;
    }
    *out = obj;
    return ONCE_OK;
}
