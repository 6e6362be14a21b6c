/*
 * op.c — what both stores do with an operation: queue it for the writer (waiting
 * or with a callback), fail it, void it when its batch did not commit, and
 * describe a reserve's request when it must be written; and the store_vtable
 * entries that are the same in both stores (store_queue_*).
 */
#include "store/op.h"

#include "common/check.h"
#include "ledger/replay_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void store_op_fail(store_op *op, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    once_vformat(op->detail, sizeof op->detail, fmt, ap);
    va_end(ap);
    op->rc = code;
}

/* Both stores undo a batch that did not commit (a rollback, a failed or
 * unknown commit), and SQLite a read whose snapshot could not be made
 * durable: the outputs the operations wrote are freed here, so that no
 * store can forget one. */
void store_op_void(store_op *op, int code, const char *fmt, ...)
{
    switch (op->kind) {
    case OP_RESERVE:
    case OP_APPROVAL_CLAIM: once_reservation_free(op->res); break;
    case OP_EV_CLAIM:
    case OP_EV_LIST: once_event_list_free(op->ev_list); break;
    case OP_RC_CLAIM:
    case OP_LIST: once_action_list_free(op->list); break;
    case OP_GET: once_action_free(op->action); break;
    case OP_EV_GET: once_event_free(op->event); break;
    case OP_EV_INSERT: *op->inserted = 0; break;
    default: break;
    }
    va_list ap;
    va_start(ap, fmt);
    once_vformat(op->detail, sizeof op->detail, fmt, ap);
    va_end(ap);
    op->rc = code;
}

/* Both stores begin alike: one allocation, their table, their queue. */
void *store_head_new(size_t size, const store_vtable *vt)
{
    store_head *h = calloc(1, size);
    if (h && bq_init(&h->queue) < 0) {
        free(h);
        h = NULL;
    }
    if (!h) {
        once_fail(ONCE_ENOMEM, "store: out of memory");
        return NULL;
    }
    h->base.vt = vt;
    return h;
}

/* The queue is all store_head_new made besides the allocation. */
void store_head_free(store_head *h)
{
    bq_destroy(&h->queue);
    free(h);
}

/* Both stores answer a new attempt alike (a reservation that went ahead, an
 * approved action claimed): one place says what the caller gets. */
void store_op_reserved(store_op *op, int64_t attempt, int64_t lease_expires_at)
{
    once_reservation *r = op->res;
    r->status = ONCE_RESERVED;
    memcpy(r->token, op->token, ONCE_TOKEN_LEN + 1);
    r->attempt = attempt;
    r->lease_expires_at = lease_expires_at;
}

/* Both stores read the claimed row back; its attempt and lease are the
 * claim's. */
void store_op_claimed(store_op *op)
{
    store_op_reserved(op, op->res->action.attempt, op->res->action.lease_expires_at);
    op->rc = 1;
}

int store_op_result(store_op *op)
{
    if (op->rc < 0)
        return once_fail(op->rc, "%s", op->detail);
    return op->rc;
}

int store_reserve_request(once_reserve_req *r)
{
    if (!r->request_fn)
        return ONCE_OK;
    const uint8_t *data = NULL;
    size_t len = 0;
    int rc = r->request_fn(r->request_arg, &data, &len);
    r->request_fn = NULL;
    if (rc < 0)
        return once_fail(rc, "reserve: the request could not be described");
    if (len > ONCE_REQUEST_MAX || (!data && len))
        return once_fail(ONCE_EINVAL, "request: larger than %u bytes or NULL with a length", ONCE_REQUEST_MAX);
    r->request = data;
    r->request_len = len;
    return ONCE_OK;
}

/* The fields each operation reads, written down: a store must never be
 * handed an operation without them (the ledger checked the values). */
static void store_op_check(const store_op *op)
{
    switch (op->kind) {
    case OP_RESERVE: ONCE_ASSERT(op->rreq && op->rreq->scope && op->rreq->key && op->res); break;
    case OP_COMPLETE:
    case OP_SETTLE:
    case OP_RENEW: ONCE_ASSERT(op->scope && op->key && op->token); break;
    case OP_DECIDE: ONCE_ASSERT(op->scope && op->key && op->step); break;
    case OP_EXPIRE_APPROVALS: ONCE_ASSERT(op->step); break;
    case OP_APPROVAL_CLAIM: ONCE_ASSERT(op->scope && op->res && op->token && op->lease_ms > 0); break;
    case OP_APPROVAL_OLDEST: ONCE_ASSERT(op->oldest); break;
    case OP_LIMIT_USE: ONCE_ASSERT(op->text && op->used && op->retry_out && op->window_ms > 0); break;
    case OP_RESOLVE:
    case OP_HOLD:
    case OP_RC_SETTLE:
    case OP_RC_FAILED: ONCE_ASSERT(op->scope && op->key); break;
    case OP_RC_CLAIM: ONCE_ASSERT(op->scope && op->list && op->max > 0); break;
    case OP_EV_INSERT: ONCE_ASSERT(op->ev_in && op->ev_in->source && op->ev_in->event_id && op->inserted); break;
    case OP_EV_CLAIM: ONCE_ASSERT(op->scope && op->ev_list && op->max > 0); break;
    case OP_EV_SETTLE: ONCE_ASSERT(op->scope && op->receipt); break;
    case OP_EV_REDELIVER: ONCE_ASSERT(op->scope && op->event_id); break;
    default: break;
    }
}

int store_op_submit_wait(batchq *q, store_op *op)
{
    store_op_check(op);
    int rc = bq_submit_wait(q, &op->item);
    if (rc < 0)
        return once_fail(rc, "the store is closing");
    return store_op_result(op);
}

static void op_async_done(bq_item *item)
{
    store_op *op = (store_op *)item;
    /* The writer answered a replay: its batch has committed (and, on SQLite,
     * been synced) before this runs, so the outcome is durable, and a
     * COMPLETED one never changes. The next replay of the key is answered
     * from memory, before any store is asked (ledger.c). A waiting caller's
     * answer the ledger caches itself. */
    if (op->kind == OP_RESERVE && op->rc >= 0 && op->replay && op->res->status == ONCE_COMPLETED)
        replay_cache_put(op->replay, &op->res->action);
    op->cb(op->cb_ctx, op->rc, op->rc < 0 ? op->detail : "");
    free(op);
}

int store_op_submit_async(batchq *q, const store_op *op, once_cb cb, void *ctx)
{
    store_op_check(op);
    store_op *h = malloc(sizeof *h);
    if (!h)
        return once_fail(ONCE_ENOMEM, "out of memory");
    *h = *op;
    h->item.on_done = op_async_done;
    h->cb = cb;
    h->cb_ctx = ctx;
    /* The ledger's copies live on its stack: the op keeps its own. */
    if (op->rreq) {
        h->rreq_copy = *op->rreq;
        h->rreq = &h->rreq_copy;
    }
    if (op->token) {
        snprintf(h->token_buf, sizeof h->token_buf, "%s", op->token);
        h->token = h->token_buf;
    }
    if (op->ev_in) {
        h->ev_in_copy = *op->ev_in;
        h->ev_in = &h->ev_in_copy;
    }
    int rc = bq_submit(q, &h->item);
    if (rc < 0) {
        free(h);
        return once_fail(rc, "the store is closing");
    }
    return ONCE_OK;
}

/* Both stores end their open alike. Closing may write details of its own:
 * the failure's is kept aside first. */
int store_finish_open(once_store *s, int rc, once_store **out)
{
    if (rc < 0) {
        char detail[ONCE_DETAIL_MAX];
        snprintf(detail, sizeof detail, "%s", once_errdetail());
        s->vt->close(s);
        return once_fail(rc, "%s", detail);
    }
    *out = s;
    return ONCE_OK;
}

/* ---- the entry points both stores share --------------------------------- */

/* The queue of a store: every store begins with a store_head. */
static batchq *queue_of(once_store *s)
{
    return &((store_head *)s)->queue;
}

/* One place decides between waiting and a callback, for every write. */
int store_queue_op(once_store *s, store_op *op, once_cb cb, void *ctx)
{
    return cb ? store_op_submit_async(queue_of(s), op, cb, ctx) : store_op_submit_wait(queue_of(s), op);
}

/* The end both stores' reserve share once their read could not answer:
 * the fresh token costs random bytes only when a write follows. */
int store_queue_reserve(once_store *s, store_op *op, once_reserve_req *req, once_cb cb, void *ctx)
{
    char token[ONCE_TOKEN_LEN + 1] = ""; /* an asynchronous op copies it */
    int rc = store_reserve_request(req);
    if (rc < 0)
        return rc;
    /* A row that waits for approval has no token: its sender gets one when
     * it claims it (store_queue_approval_claim). */
    if (req->approval_ttl_ms <= 0 && (rc = once_token_new(token)) < 0)
        return rc;
    op->token = token;
    op->replay = s->replay;
    return store_queue_op(s, op, cb, ctx);
}

/* The writes that answer with a number of rows: op waits, then *count. */
static int queue_counted(once_store *s, store_op *op, size_t *count)
{
    int rc = store_queue_op(s, op, NULL, NULL);
    *count = op->count;
    return rc;
}

/* The attempt that holds the key records its outcome. */
int store_queue_complete(once_store *s, const char *scope, const char *key, const char *token,
                         const once_response *resp, const char *provider_id, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_COMPLETE, .now = now, .scope = scope, .key = key, .token = token, .resp = resp,
                   .provider_id = provider_id};
    return store_queue_op(s, &op, cb, ctx);
}

/* The attempt releases its key, or marks its action unknown. */
int store_queue_settle(once_store *s, const char *scope, const char *key, const char *token, once_state to,
                       const char *error, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_SETTLE, .now = now, .scope = scope, .key = key, .token = token, .to = to,
                   .text = error};
    return store_queue_op(s, &op, cb, ctx);
}

/* The attempt still works: its lease moves on. */
int store_queue_renew(once_store *s, const char *scope, const char *key, const char *token, int64_t lease_ms,
                      int64_t *lease_out, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_RENEW, .now = now, .scope = scope, .key = key, .token = token, .lease_ms = lease_ms,
                   .lease_out = lease_out};
    return store_queue_op(s, &op, cb, ctx);
}

/* A human settles an unknown or held action. */
int store_queue_resolve(once_store *s, const char *scope, const char *key, once_outcome outcome,
                        const char *provider_id, const char *note, int64_t now)
{
    store_op op = {.kind = OP_RESOLVE, .now = now, .scope = scope, .key = key, .outcome = outcome,
                   .provider_id = provider_id, .text = note};
    return store_queue_op(s, &op, NULL, NULL);
}

/* Pending actions whose lease ran out become unknown. */
int store_queue_expire(once_store *s, int64_t now, size_t *count)
{
    store_op op = {.kind = OP_EXPIRE, .now = now};
    return queue_counted(s, &op, count);
}

/* An unknown action waits for a human. */
int store_queue_hold(once_store *s, const char *scope, const char *key, const char *reason, int64_t now)
{
    store_op op = {.kind = OP_HOLD, .now = now, .scope = scope, .key = key, .text = reason};
    return store_queue_op(s, &op, NULL, NULL);
}

/* Settled actions past their retention go. */
int store_queue_sweep(once_store *s, int64_t now, size_t *count)
{
    store_op op = {.kind = OP_SWEEP, .now = now};
    return queue_counted(s, &op, count);
}

/* Every unknown action of a scope (or of all but some) waits for a human. */
int store_queue_hold_unknown(once_store *s, const char *scope, const char *except, const char *reason, int64_t now,
                             size_t *count)
{
    /* The except list travels in the receipt's slot. */
    store_op op = {.kind = OP_HOLD_ALL, .now = now, .scope = scope, .receipt = except, .text = reason};
    return queue_counted(s, &op, count);
}

/* The reconciler claims unknown actions due for a provider lookup. */
int store_queue_reconcile_claim(once_store *s, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                                int64_t now, once_action_list *out)
{
    store_op op = {.kind = OP_RC_CLAIM, .now = now, .scope = scope, .max = max, .lease_ms = lease_ms,
                   .delay_ms = settle_ms, .list = out};
    return store_queue_op(s, &op, NULL, NULL);
}

/* A provider lookup settled an unknown action. */
int store_queue_reconcile(once_store *s, const char *scope, const char *key, once_outcome outcome,
                          const once_response *resp, const char *provider_id, const char *step, int64_t now)
{
    /* A response and a provider id stand only for a completed outcome: said
     * here, for both stores. */
    int completed = outcome == ONCE_OUTCOME_COMPLETED;
    store_op op = {.kind = OP_RC_SETTLE, .now = now, .scope = scope, .key = key, .outcome = outcome,
                   .resp = completed ? resp : NULL, .provider_id = completed ? provider_id : NULL, .text = step};
    return store_queue_op(s, &op, NULL, NULL);
}

/* A provider lookup found nothing certain: later again, or hold. */
int store_queue_reconcile_failed(once_store *s, const char *scope, const char *key, int64_t delay_ms, int hold,
                                 const char *step, int64_t now)
{
    store_op op = {.kind = OP_RC_FAILED, .now = now, .scope = scope, .key = key, .delay_ms = delay_ms, .dead = hold,
                   .text = step};
    return store_queue_op(s, &op, NULL, NULL);
}

/* Through the writers, in a transaction: ready means a write would commit
 * (a locked or read-only SQLite file, or an unreachable database, fails
 * here rather than on a request). */
int store_queue_ping(once_store *s)
{
    store_op op = {.kind = OP_PING};
    return store_queue_op(s, &op, NULL, NULL);
}

/* A consumer claims due webhook events, each with a receipt. */
int store_queue_event_claim(once_store *s, const char *source, const char *agent, size_t max, int64_t lease_ms,
                            int64_t now, once_event_list *out)
{
    store_op op = {.kind = OP_EV_CLAIM, .now = now, .scope = source, .who = agent, .max = max,
                   .lease_ms = lease_ms, .ev_list = out};
    return store_queue_op(s, &op, NULL, NULL);
}

/* A claim's receipt acks its event, or retries it (later, or dead). */
int store_queue_event_settle(once_store *s, const char *source, const char *receipt, int ack, int64_t delay_ms,
                             int dead, const char *error, int64_t now)
{
    store_op op = {.kind = OP_EV_SETTLE, .now = now, .scope = source, .receipt = receipt, .ack = ack,
                   .delay_ms = delay_ms, .dead = dead, .text = error};
    return store_queue_op(s, &op, NULL, NULL);
}

/* An operator sends an event through again. */
int store_queue_event_redeliver(once_store *s, const char *source, const char *event_id, int64_t now)
{
    store_op op = {.kind = OP_EV_REDELIVER, .now = now, .scope = source, .event_id = event_id};
    return store_queue_op(s, &op, NULL, NULL);
}

/* Delivered and dead events past their retention go. */
int store_queue_event_sweep(once_store *s, int64_t now, size_t *count)
{
    store_op op = {.kind = OP_EV_SWEEP, .now = now};
    return queue_counted(s, &op, count);
}

/* A human approves or denies an action awaiting approval. */
int store_queue_decide(once_store *s, const char *scope, const char *key, int approve, const char *note,
                       const char *who, const char *decision_note, const char *step, int64_t now)
{
    store_op op = {.kind = OP_DECIDE, .now = now, .scope = scope, .key = key, .approve = approve, .text = note,
                   .who = who, .decision_note = decision_note, .step = step};
    return store_queue_op(s, &op, NULL, NULL);
}

/* Undecided actions past their deadline are denied. */
int store_queue_expire_approvals(once_store *s, const char *scope, int64_t now, const char *step, size_t *count)
{
    store_op op = {.kind = OP_EXPIRE_APPROVALS, .now = now, .scope = scope, .step = step};
    return queue_counted(s, &op, count);
}

/* A sender claims an approved action: like a reservation, it gets a fresh
 * token, made here off the writer. */
int store_queue_approval_claim(once_store *s, const char *scope, int64_t lease_ms, int64_t now,
                               once_reservation *out)
{
    char token[ONCE_TOKEN_LEN + 1];
    int rc = once_token_new(token);
    if (rc < 0)
        return rc;
    store_op op = {.kind = OP_APPROVAL_CLAIM, .now = now, .scope = scope, .lease_ms = lease_ms, .token = token,
                   .res = out};
    return store_queue_op(s, &op, NULL, NULL);
}
