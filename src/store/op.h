/*
 * op.h — one ledger operation as a store sees it: its inputs, where its
 * outputs go, and its result. Every store queues these for its writers
 * (group commit) or runs them on a read connection.
 */
#ifndef ONCE_STORE_OP_H
#define ONCE_STORE_OP_H

#include "ledger/store.h"
#include "store/batchq.h"

typedef enum store_op_kind {
    OP_RESERVE,
    OP_COMPLETE,
    OP_SETTLE,
    OP_RENEW,
    OP_RESOLVE,
    OP_EXPIRE,
    OP_HOLD,
    OP_SWEEP,
    OP_HOLD_ALL,
    OP_RC_CLAIM,
    OP_RC_SETTLE,
    OP_RC_FAILED,
    OP_GET,
    OP_LIST,
    OP_PING,
    OP_EV_INSERT,
    OP_EV_CLAIM,
    OP_EV_SETTLE,
    OP_EV_GET,
    OP_EV_LIST,
    OP_EV_REDELIVER,
    OP_EV_SWEEP
} store_op_kind;

/* One queued operation: its inputs, where its outputs go, and its result.
 * The caller owns it (on its stack) and sleeps until the writer is done. */
typedef struct store_op {
    bq_item item; /* first: the queue links items */
    store_op_kind kind;
    int64_t now;
    const char *scope;
    const char *key;
    const char *token;
    const char *text; /* error, note or reason */
    const char *provider_id;
    const once_reserve_req *rreq;
    const once_response *resp;
    once_state to;
    once_outcome outcome;
    const once_list_req *lreq;
    int64_t after_id;
    once_reservation *res;
    once_action *action;
    once_action_list *list;
    size_t count;
    /* webhook events */
    const once_event_in *ev_in;
    int *inserted;
    const char *event_id;
    const char *receipt;
    const once_event_list_req *ev_lreq;
    once_event *event;
    once_event_list *ev_list;
    size_t max;
    int64_t lease_ms;
    int64_t delay_ms;
    int64_t *lease_out; /* OP_RENEW: the new lease deadline (may be NULL) */
    int ack;  /* OP_EV_SETTLE: 1 ack, 0 retry */
    int dead; /* OP_EV_SETTLE retry: give up */
    int rc;
    char detail[ONCE_DETAIL_MAX];
    /* Asynchronous operations only: the callback, and copies of what the
     * ledger passed on its stack. */
    once_cb cb;
    void *cb_ctx;
    once_reserve_req rreq_copy;
    once_event_in ev_in_copy;
    char token_buf[ONCE_TOKEN_LEN + 1];
} store_op;

/* Queues op for the store's writers and waits until its batch is durable
 * (or failed); the op's result, with its detail set for this thread. */
int store_op_submit_wait(batchq *q, store_op *op);

/* Queues a heap copy of op (with copies of what the ledger passed on its
 * stack) whose callback runs once its batch is durable. 0 or an error. */
int store_op_submit_async(batchq *q, const store_op *op, once_cb cb, void *ctx);

/* op's result: op->rc, with op->detail made this thread's error detail. */
int store_op_result(store_op *op);

/* When r->request_fn is set: calls it and puts what it gave in r->request
 * (and clears request_fn), checking the limits once_reserve checks. 0, or the
 * producer's negative code, or ONCE_EINVAL. Stores call it after their read
 * found that the reserve must write. */
int store_reserve_request(once_reserve_req *r);

/* Fails op with code and a detail. */
void store_op_fail(store_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
