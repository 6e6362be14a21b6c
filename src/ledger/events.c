/*
 * events.c — the public entry points for webhook events: argument checks,
 * the clock, and hand-off to the store (as ledger.c does for actions).
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/entry.h"
#include "ledger/store.h"
#include "ledger/validate.h"

#define DEFAULT_EVENT_RETENTION_MS (7LL * 24 * 3600 * 1000)

void once_event_free(once_event *e)
{
    if (!e)
        return;
    free(e->source);
    free(e->event_id);
    free(e->content_type);
    free(e->headers);
    free(e->body);
    free(e->error);
    free(e->claimed_by);
    memset(e, 0, sizeof *e);
}

LEDGER_LIST_FREE(once_event_list_free, once_event_list, once_event_free)

static int check_event_id(const char *id)
{
    if (!id || !*id)
        return once_fail(ONCE_EINVAL, "event_id: empty");
    return validate_text("event_id", id, ONCE_EVENT_ID_MAX, 1);
}

static int insert(once_store *store, const once_event_in *ev, int *inserted, once_cb cb, void *ctx)
{
    once_detail_clear();
    if (!store || !ev || !inserted)
        return once_fail(ONCE_EINVAL, "event_insert: store, ev and inserted are required");
    int rc = once_scope_validate(ev->source);
    if (rc < 0)
        return once_fail(rc, "source: %s", once_errdetail() + (strncmp(once_errdetail(), "scope: ", 7) ? 0 : 7));
    if ((rc = check_event_id(ev->event_id)) < 0 ||
        (rc = validate_text("content_type", ev->content_type, ONCE_TEXT_MAX, 1)) < 0 ||
        (ev->digest && (rc = validate_hex("digest", ev->digest, 64)) < 0))
        return rc;
    if (ev->body_len > ONCE_BODY_MAX || (!ev->body && ev->body_len) || ev->headers_len > ONCE_HEADERS_MAX ||
        (!ev->headers && ev->headers_len) || ev->retention_ms < 0)
        return once_fail(ONCE_EINVAL, "event: body, headers or retention out of range");
    once_event_in e = *ev;
    if (e.retention_ms == 0)
        e.retention_ms = DEFAULT_EVENT_RETENTION_MS;
    return store->vt->event_insert(store, &e, once_now_ms(), inserted, cb, ctx);
}

int once_event_insert(once_store *store, const once_event_in *ev, int *inserted)
{
    return insert(store, ev, inserted, NULL, NULL);
}

int once_event_insert_async(once_store *store, const once_event_in *ev, int *inserted, once_cb cb, void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "event_insert: callback is NULL");
    return insert(store, ev, inserted, cb, ctx);
}

int once_event_claim(once_store *store, const char *source, size_t max, int64_t lease_ms, once_event_list *out)
{
    return once_event_claim_as(store, source, NULL, max, lease_ms, out);
}

int once_event_claim_as(once_store *store, const char *source, const char *agent, size_t max, int64_t lease_ms,
                        once_event_list *out)
{
    int rc = ledger_begin_out(store && out, out, sizeof *out, "event_claim: store and out are required");
    if (rc < 0 || (rc = once_scope_validate(source)) < 0 || (rc = validate_agent(agent)) < 0)
        return rc;
    if (max < 1 || max > LEDGER_LIST_MAX)
        return once_fail(ONCE_EINVAL, "claim: max must be between 1 and %d", LEDGER_LIST_MAX);
    if (lease_ms <= 0 || lease_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "claim: lease must be between 1 ms and 7 days");
    rc = store->vt->event_claim(store, source, agent, max, lease_ms, once_now_ms(), out);
    if (rc < 0)
        once_event_list_free(out);
    return rc;
}

static int settle(once_store *store, const char *source, const char *receipt, int ack, int64_t delay_ms, int dead,
                  const char *error)
{
    once_detail_clear();
    if (!store)
        return once_fail(ONCE_EINVAL, "store is NULL");
    int rc = once_scope_validate(source);
    if (rc < 0)
        return rc;
    if (!receipt || strnlen(receipt, ONCE_RECEIPT_MAX) >= ONCE_RECEIPT_MAX)
        return once_fail(ONCE_EINVAL, "receipt: missing or too long");
    if (delay_ms < 0 || delay_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "delay: must be between 0 and 7 days");
    if ((rc = validate_text("error", error, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    return store->vt->event_settle(store, source, receipt, ack, delay_ms, dead, error, once_now_ms());
}

int once_event_ack(once_store *store, const char *source, const char *receipt)
{
    return settle(store, source, receipt, 1, 0, 0, NULL);
}

int once_event_retry(once_store *store, const char *source, const char *receipt, int64_t delay_ms, int dead,
                     const char *error)
{
    return settle(store, source, receipt, 0, delay_ms, dead, error);
}

int once_event_get(once_store *store, const char *source, const char *event_id, once_event *out)
{
    int rc = ledger_begin_out(store && out, out, sizeof *out, "event_get: store and out are required");
    if (rc < 0 || (rc = once_scope_validate(source)) < 0 || (rc = check_event_id(event_id)) < 0)
        return rc;
    rc = store->vt->event_get(store, source, event_id, out);
    if (rc < 0)
        once_event_free(out);
    return rc;
}

int once_list_events(once_store *store, const once_event_list_req *req, once_event_list *out)
{
    int rc = ledger_begin_out(store && req && out, out, sizeof *out, "event_list: store, req and out are required");
    if (rc < 0)
        return rc;
    if (req->source && (rc = once_scope_validate(req->source)) < 0)
        return rc;
    if (req->state && !once_event_state_name(req->state))
        return once_fail(ONCE_EINVAL, "event_list: unknown state %d", (int)req->state);
    once_event_list_req r = *req;
    int64_t after;
    if ((rc = ledger_check_page("event_list", req->limit, req->cursor, &r.limit, &after)) < 0)
        return rc;
    rc = store->vt->event_list(store, &r, after, out);
    if (rc < 0)
        once_event_list_free(out);
    return rc;
}

int once_event_redeliver(once_store *store, const char *source, const char *event_id)
{
    once_detail_clear();
    if (!store)
        return once_fail(ONCE_EINVAL, "store is NULL");
    int rc = once_scope_validate(source);
    if (rc < 0 || (rc = check_event_id(event_id)) < 0)
        return rc;
    return store->vt->event_redeliver(store, source, event_id, once_now_ms());
}

int once_event_sweep(once_store *store, int64_t now, size_t *count)
{
    return ledger_sweep_all(store, store ? store->vt->event_sweep : NULL, now, count, "event_sweep");
}
