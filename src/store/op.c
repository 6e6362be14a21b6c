/*
 * op.c — what both stores do with an operation: queue it for the writer (waiting
 * or with a callback), fail it, and describe a reserve's request when it must be written.
 */
#include "store/op.h"

#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>

void store_op_fail(store_op *op, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    once_vformat(op->detail, sizeof op->detail, fmt, ap);
    va_end(ap);
    op->rc = code;
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
