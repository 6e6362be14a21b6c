/*
 * op.c — what every store does with an operation it could not carry out.
 */
#include "store/op.h"

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

int store_op_submit_wait(batchq *q, store_op *op)
{
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
