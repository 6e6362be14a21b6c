/*
 * events_api.c — webhook events for operators (/v1/events…): the listing
 * the console shows (dead events above all) and the redelivery a human
 * asks for. Agents reach events through their inbox or push delivery
 * (hooks.c); these routes are the operator's, like `once hooks ls` and
 * `once hooks redeliver`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/event_json.h"
#include "json/json_items.h"
#include "server/hooks/hooks.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/core/worker.h"

typedef struct evq {
    req *r;
    once_event_list_req lreq; /* its strings point into the buffers below */
    char source[ONCE_SCOPE_MAX + 2];
    char event_id[ONCE_EVENT_ID_MAX + 2];
    char after[ONCE_CURSOR_MAX];
} evq;

/* Maps a ledger error to its problem. */
static void events_fail(req *r, int rc)
{
    switch (rc) {
    case ONCE_ENOTFOUND: req_problem(r, 404, "not_found", "Not found", NULL, "%s", once_errdetail()); break;
    case ONCE_EINVAL:
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "%s", once_errdetail());
        break;
    default: req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "%s", once_errdetail()); break;
    }
}

/* The state of either route, freed with its request. */
static evq *evq_new(req *r)
{
    evq *q = req_state_new(r, sizeof *q, free);
    if (q)
        q->r = r;
    return q;
}

/* An event of a page as the inbox and `once hooks ls --json` show it
 * (never a receipt: it would let its reader settle). */
static int event_item(const void *ctx, size_t i, json_t **out)
{
    const once_event_list *l = ctx;
    return event_json_from(&l->items[i], 0, out);
}

/* On the worker: one page of events. */
static void list_job(void *arg)
{
    evq *q = arg;
    req *r = q->r;
    once_event_list l;
    int rc = once_list_events(r->srv->store, &q->lreq, &l);
    if (rc < 0) {
        events_fail(r, rc);
        return;
    }
    req_json_page(r, json_items(l.count, event_item, &l), l.next);
    once_event_list_free(&l);
}

/* GET /v1/events?source=&status=&limit=&after= */
static void events_list(req *r)
{
    evq *q = evq_new(r);
    if (!q)
        return;
    const char *query = r->match.query;
    char status[32];
    int hs, hsrc;
    if ((hsrc = req_query_param(r, query, "source", q->source, sizeof q->source)) < 0 ||
        (hs = req_query_param(r, query, "status", status, sizeof status)) < 0 ||
        req_query_page(r, query, &q->lreq.limit, q->after, sizeof q->after, &q->lreq.cursor) < 0)
        return;
    if (hs && once_event_state_parse(status, &q->lreq.state) < 0) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "'status' must be pending, delivered or dead");
        return;
    }
    if (hsrc)
        q->lreq.source = q->source;
    if (worker_run(r->srv->worker, list_job, q) < 0)
        req_not_started(r, "out of memory");
}

/* On the worker: redelivers, then answers with the event as it is now. A
 * push source's delivery thread is woken so that it goes out now. */
static void redeliver_job(void *arg)
{
    evq *q = arg;
    req *r = q->r;
    int rc = once_event_redeliver(r->srv->store, q->source, q->event_id);
    if (rc < 0) {
        events_fail(r, rc);
        return;
    }
    delivery_kick(r->srv);
    once_event ev;
    if ((rc = once_event_get(r->srv->store, q->source, q->event_id, &ev)) < 0) {
        events_fail(r, rc);
        return;
    }
    json_t *o = NULL;
    rc = event_json_from(&ev, 0, &o);
    once_event_free(&ev);
    if (rc < 0) {
        req_out_of_memory(r);
        return;
    }
    req_json(r, 200, o);
}

/* POST /v1/events/{source}/{event_id}/redeliver: each segment decoded on
 * its own (an event id may hold an encoded '/'). */
static void events_redeliver(req *r)
{
    evq *q = evq_new(r);
    if (!q || req_path_pair(r, q->source, sizeof q->source, q->event_id, sizeof q->event_id,
                            "a source or event id") < 0)
        return;
    if (worker_run(r->srv->worker, redeliver_job, q) < 0)
        req_not_started(r, "out of memory");
}

const route events_routes[] = {
    {.pattern = "/v1/events", .name = "events", .access = ACCESS_OPERATOR,
     .admit = req_admit_named_path, .methods = {{"GET", events_list}}},
    {.pattern = "/v1/events/{}/{}/redeliver", .name = "events", .access = ACCESS_OPERATOR,
     .admit = req_admit_named_path, .methods = {{"POST", events_redeliver}}},
    {.pattern = NULL},
};
