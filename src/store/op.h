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
    OP_EV_SWEEP,
    OP_DECIDE,           /* approve or deny (op->approve) */
    OP_EXPIRE_APPROVALS, /* deny the undecided past their deadline */
    OP_APPROVAL_CLAIM,   /* take one approved action to send */
    OP_APPROVAL_OLDEST,  /* a read: the oldest undecided action's created_at */
    OP_LIMIT_USE         /* a read: the use of one budget (once_limit_use) */
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
    /* approvals */
    const char *step;   /* OP_DECIDE, OP_EXPIRE_APPROVALS: the trail line, stamped */
    int approve;        /* OP_DECIDE: 1 approve, 0 deny (op->text: the denial's note) */
    const char *who;    /* OP_DECIDE: the decider, stored as decided_by; OP_EV_CLAIM: the claimer,
                           stored as claimed_by (may be NULL) */
    const char *decision_note; /* OP_DECIDE: the decider's note as given (may be NULL) */
    int64_t *oldest;    /* OP_APPROVAL_OLDEST: created_at, 0 when none waits */
    /* OP_LIMIT_USE: the budget (op->text), its window, and where its use and
     * the time until its oldest counted bucket leaves go */
    int64_t window_ms;
    double *used;
    int64_t *retry_out;
    int ack;  /* OP_EV_SETTLE: 1 ack, 0 retry */
    int dead; /* OP_EV_SETTLE retry: give up */
    int rc;
    char detail[ONCE_DETAIL_MAX];
    /* Asynchronous operations only: the callback, and copies of what the
     * ledger passed on its stack. */
    once_cb cb;
    void *cb_ctx;
    struct replay_cache *replay; /* OP_RESERVE: the ledger's, filled with a COMPLETED answer */
    once_reserve_req rreq_copy;
    once_event_in ev_in_copy;
    char token_buf[ONCE_TOKEN_LEN + 1];
} store_op;

/* The head of both stores: what the ledger sees, and the queue of the
 * store's writers. Each store embeds it first, so that the entry points they
 * share (store_queue_*, below) reach the queue from the once_store the
 * ledger passes them. */
typedef struct store_head {
    struct once_store base; /* first: the ledger sees a once_store */
    batchq queue;           /* operations for the writers (group commit) */
} store_head;

/* The start of a store's open: size zeroed bytes (the store's own struct,
 * its store_head first) with the vtable set and the writers' queue made.
 * NULL, with ENOMEM's detail, when out of memory. */
void *store_head_new(size_t size, const store_vtable *vt);

/* Undoes store_head_new for an open that fails before anything else of
 * the store exists: the queue, then the store itself. */
void store_head_free(store_head *h);

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

/* The answer to a reservation or an approval's claim that wrote a new
 * attempt: RESERVED under op's token, with the attempt's number and the end
 * of its lease (op->res). */
void store_op_reserved(store_op *op, int64_t attempt, int64_t lease_expires_at);

/* The end of an approval's claim that took a row, read back into
 * op->res->action: RESERVED (store_op_reserved) with the row's attempt and
 * lease, and op->rc 1 (one action claimed). */
void store_op_claimed(store_op *op);

/* Fails op with code and a detail. */
void store_op_fail(store_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fails op with code and a detail after undoing what it produced (a
 * reservation's row, a claimed list, an insert): its batch did not commit,
 * so nothing it reported is true. */
void store_op_void(store_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The end of a store's open: on failure (rc < 0) closes the half-open store
 * s and returns rc with the failure's detail; else hands s out in *out. */
int store_finish_open(once_store *s, int rc, once_store **out);

/* ---- the entry points both stores share --------------------------------- */

/* Runs op on the writers of s (a store_head): waits until its batch is
 * durable when cb is NULL, else copies it and returns 0 once queued (cb runs
 * later, see once_reserve_async). */
int store_queue_op(once_store *s, store_op *op, once_cb cb, void *ctx);

/* A reservation that the store's read could not answer: describes the
 * request (req: the store's copy behind op->rreq), makes the fresh token and
 * queues op for the writers. */
int store_queue_reserve(once_store *s, store_op *op, once_reserve_req *req, once_cb cb, void *ctx);

/* The store_vtable entries that are writes and nothing else: each builds its
 * operation and queues it for the writers (store_queue_op). The reads and the
 * two writes that a read may answer first (reserve, event_insert) are each
 * store's own (and so is approval_oldest, a read). */
int store_queue_complete(once_store *s, const char *scope, const char *key, const char *token,
                         const once_response *resp, const char *provider_id, int64_t now, once_cb cb, void *ctx);
int store_queue_settle(once_store *s, const char *scope, const char *key, const char *token, once_state to,
                       const char *error, int64_t now, once_cb cb, void *ctx);
int store_queue_renew(once_store *s, const char *scope, const char *key, const char *token, int64_t lease_ms,
                      int64_t *lease_out, int64_t now, once_cb cb, void *ctx);
int store_queue_resolve(once_store *s, const char *scope, const char *key, once_outcome outcome,
                        const char *provider_id, const char *note, int64_t now);
int store_queue_expire(once_store *s, int64_t now, size_t *count);
int store_queue_hold(once_store *s, const char *scope, const char *key, const char *reason, int64_t now);
int store_queue_sweep(once_store *s, int64_t now, size_t *count);
int store_queue_hold_unknown(once_store *s, const char *scope, const char *except, const char *reason, int64_t now,
                             size_t *count);
int store_queue_reconcile_claim(once_store *s, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                                int64_t now, once_action_list *out);
int store_queue_reconcile(once_store *s, const char *scope, const char *key, once_outcome outcome,
                          const once_response *resp, const char *provider_id, const char *step, int64_t now);
int store_queue_reconcile_failed(once_store *s, const char *scope, const char *key, int64_t delay_ms, int hold,
                                 const char *step, int64_t now);
int store_queue_ping(once_store *s);
int store_queue_decide(once_store *s, const char *scope, const char *key, int approve, const char *note,
                       const char *who, const char *decision_note, const char *step, int64_t now);
int store_queue_expire_approvals(once_store *s, const char *scope, int64_t now, const char *step, size_t *count);
/* Makes the claim's fresh token (as store_queue_reserve does) and queues it. */
int store_queue_approval_claim(once_store *s, const char *scope, int64_t lease_ms, int64_t now,
                               once_reservation *out);
int store_queue_event_claim(once_store *s, const char *source, const char *agent, size_t max, int64_t lease_ms,
                            int64_t now, once_event_list *out);
int store_queue_event_settle(once_store *s, const char *source, const char *receipt, int ack, int64_t delay_ms,
                             int dead, const char *error, int64_t now);
int store_queue_event_redeliver(once_store *s, const char *source, const char *event_id, int64_t now);
int store_queue_event_sweep(once_store *s, int64_t now, size_t *count);

/* Those entries, for a store's table: {.name = ..., STORE_QUEUE_ENTRIES,
 * then its own reads, reserve, event_insert and close}. */
#define STORE_QUEUE_ENTRIES                                                                                     \
    .complete = store_queue_complete, .settle = store_queue_settle, .renew = store_queue_renew,                 \
    .resolve = store_queue_resolve, .expire_leases = store_queue_expire, .hold = store_queue_hold,              \
    .sweep = store_queue_sweep, .hold_unknown = store_queue_hold_unknown,                                       \
    .reconcile_claim = store_queue_reconcile_claim, .reconcile = store_queue_reconcile,                         \
    .reconcile_failed = store_queue_reconcile_failed, .ping = store_queue_ping,                                 \
    .decide = store_queue_decide, .expire_approvals = store_queue_expire_approvals,                             \
    .approval_claim = store_queue_approval_claim,                                                               \
    .event_claim = store_queue_event_claim, .event_settle = store_queue_event_settle,                           \
    .event_redeliver = store_queue_event_redeliver, .event_sweep = store_queue_event_sweep

#endif
