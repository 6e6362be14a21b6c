/*
 * rcall.c — the recorded call's pipeline (see rcall.h).
 *
 * Threads, by callbacks, never by waiting:
 *   HTTP thread   rcall_start: once_reserve_async (only a completed outcome
 *                 in the replay cache answers here; every other reservation
 *                 goes to the writer, which answers a replay or a conflict
 *                 too: docs/ledger.md)
 *   store writer  on_reserved: a new reservation goes to ops->forward
 *                 (SQLite: on the syncer, once the batch is durable); an
 *                 existing row waits (Prefer: wait, on the waiter thread) or
 *                 is answered by ops->existing
 *   any           rcall_record: the verdict recorded asynchronously
 *   store writer  on_recorded: ops->recorded answers
 */
#include "server/pipeline/rcall.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fault.h"
#include "server/core/waiters.h"

void rcall_init(rcall *c, req *r, const upstream_cfg *up, const rcall_ops *ops)
{
    ONCE_ASSERT(ops && ops->describe && ops->forward && ops->existing && ops->recorded);
    c->ops = ops;
    c->r = r;
    c->srv = r->srv;
    c->up = up;
    refcount_init(&c->holders, 1);
}

void rcall_hold(rcall *c)
{
    refcount_hold(&c->holders);
}

void rcall_drop(void *arg)
{
    rcall *c = arg;
    if (!c || !refcount_drop(&c->holders))
        return;
    if (c->ops->free)
        c->ops->free(c);
    rcall_lease_done(c);
    free(c->meta);
    once_reservation_free(&c->res);
    free(c);
}

void rcall_lease_done(rcall *c)
{
    leases_drop(c->srv->leases, c->hold);
    c->hold = NULL;
}

/* rreq.request_fn: the room describes the request, the pipeline keeps the
 * text until the writer is done with it. */
static int rcall_describe(void *arg, const uint8_t **data, size_t *len)
{
    rcall *c = arg;
    free(c->meta); /* a Prefer: wait retry describes the request again */
    c->meta = NULL;
    int rc = c->ops->describe(c, &c->meta);
    if (rc < 0)
        return rc;
    *data = (const uint8_t *)c->meta;
    *len = strlen(c->meta); /* the store refuses more than ONCE_REQUEST_MAX */
    return ONCE_OK;
}

static void wait_settled(void *arg);
static void wait_timeout(void *arg);

/* An existing row: wait for it when the caller asked to and it may still
 * change (in flight; awaiting a decision on this very request), else the
 * room answers from it. */
static void rcall_existing(rcall *c)
{
    int for_decision = c->res.status == ONCE_AWAITING_APPROVAL && c->ops->waits_for_decision &&
                       c->ops->waits_for_decision(c);
    if (waiters_park(c->srv->waiters, c->up->name, c->key, c->res.status, for_decision, c, c->wait_deadline,
                     wait_settled, wait_timeout))
        return;
    c->ops->existing(c);
}

static void on_reserved(void *ctx, int rc, const char *detail)
{
    rcall *c = ctx;
    free(c->meta); /* written (or not): nothing reads it any more */
    c->meta = NULL;
    if (rc < 0) {
        req_problem(c->r, 503, "store_unavailable", "Store unavailable", NULL,
                    "the reservation could not be made durable, so nothing was sent: %s", detail);
        return;
    }
    if (c->res.status != ONCE_RESERVED) {
        rcall_existing(c);
        return;
    }
    FAULT_POINT("after_reserve");
    metrics_action(c->srv->metrics, c->up->name, MO_NEW);
    c->hold = leases_hold(c->srv->leases, c->up->name, c->key, c->res.token, c->up->lease_ms);
    c->ops->forward(c);
}

void rcall_start(rcall *c)
{
    c->rreq.key = c->key;
    c->rreq.fingerprint = c->fp;
    c->rreq.request_fn = rcall_describe;
    c->rreq.request_arg = c;
    once_reservation_free(&c->res);
    int rc = once_reserve_async(c->srv->store, &c->rreq, &c->res, on_reserved, c);
    if (rc == 1) {
        rcall_existing(c);
    } else if (rc < 0) {
        if (rc == ONCE_EINVAL)
            req_problem(c->r, 400, "invalid_request", "Invalid request", NULL, "%s", once_errdetail());
        else if (rc == ONCE_ENOMEM)
            req_problem(c->r, 500, "internal", "Internal error", NULL, "%s", once_errdetail());
        else
            req_problem(c->r, 503, "store_unavailable", "Store unavailable", NULL, "%s", once_errdetail());
    }
}

/* Prefer: wait — on the waiter thread: the other attempt has settled. One
 * more try, then the answer is whatever it is. */
static void wait_settled(void *arg)
{
    rcall *c = arg;
    c->wait_deadline = 0;
    rcall_start(c);
}

/* Prefer: wait ran out: the answer is what the row says now (still in
 * flight, or still waiting for a human). */
static void wait_timeout(void *arg)
{
    rcall *c = arg;
    c->wait_deadline = 0;
    rcall_start(c);
}

static void on_recorded(void *ctx, int rc, const char *detail)
{
    rcall *c = ctx;
    if (rc == ONCE_OK)
        FAULT_POINT("after_record");
    c->ops->recorded(c, rc, detail);
}

void rcall_record(rcall *c, const verdict *v)
{
    rcall_lease_done(c);
    if (&c->v != v)
        c->v = *v;
    /* The rooms count releases and unknowns as they answer: metrics NULL. */
    int rc = verdict_record(c->srv->store, NULL, c->up->name, c->key, c->res.token, &c->v, on_recorded, c);
    if (rc < 0)
        on_recorded(c, rc, once_errdetail());
}
