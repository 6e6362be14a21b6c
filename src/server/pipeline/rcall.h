/*
 * rcall.h — one pipeline for a recorded call: reserve → wait or replay →
 * forward → record → answer, shared by the proxy (proxy/proxy.c) and MCP
 * tool calls (mcp/mcp_call.c). The pipeline owns the order of the steps
 * and every thread hand-off between them (docs/architecture.md); a room
 * says only what is its own, through rcall_ops: how to describe the
 * request for the ledger, how to send it, and how to word each answer.
 *
 * A room's call state embeds an rcall as its FIRST member and is made with
 * req_state_new(r, size, rcall_drop); the request holds it, and so does a
 * streamed answer (rcall_hold) until it ends. The last rcall_drop frees it.
 */
#ifndef ONCE_SERVER_PIPELINE_RCALL_H
#define ONCE_SERVER_PIPELINE_RCALL_H

#include <stdint.h>

#include "once/once.h"
#include "server/config/config.h"
#include "server/core/leases.h"
#include "server/core/refcount.h"
#include "server/core/services.h"
#include "server/core/verdict.h"
#include "server/front/req.h"

typedef struct rcall rcall;

typedef struct rcall_ops {
    /* The stored request, malloc'd into *out (the ledger keeps it with a
     * new row): built only when the reservation goes to the writer. A
     * negative ONCE_E* when it cannot be. Any thread; reads only the room's
     * state (the client may have left). */
    int (*describe)(rcall *c, char **out);
    /* A new reservation, durable, its lease held: send it, and end with
     * rcall_record. Store writer (or SQLite's syncer). */
    void (*forward)(rcall *c);
    /* The row was there and is not this attempt's (completed, in flight
     * with no wait left, unknown, held, awaiting approval, denied): the
     * room's answer. */
    void (*existing)(rcall *c);
    /* The outcome is recorded (rc 0), or could not be (rc < 0 and detail):
     * the room's answer. */
    void (*recorded)(rcall *c, int rc, const char *detail);
    /* Whether Prefer: wait may wait for a human's decision and then the
     * outcome (the stored request must be this one). NULL: never. */
    int (*waits_for_decision)(const rcall *c);
    /* Frees the room's own members (not the rcall, not the struct). */
    void (*free)(rcall *c);
} rcall_ops;

struct rcall {
    const rcall_ops *ops;
    req *r;              /* not to be read once a stream answered it */
    server *srv;
    const upstream_cfg *up;
    refcount holders;    /* the request, and a streamed answer until it ends */
    char key[ONCE_KEY_MAX + 1];
    char fp[65];         /* the request's fingerprint */
    once_reserve_req rreq;  /* scope, key, fingerprint and the room's limits; request_fn is the pipeline's */
    once_reservation res;
    lease_hold *hold;    /* this attempt's lease, renewed while the call runs */
    int64_t wait_deadline; /* Prefer: wait (monotonic ms), 0 when none is left */
    char *meta;          /* the stored request, while the writer may read it */
    verdict v;           /* what rcall_record recorded: v.resp borrows the room's buffers */
};

/* Makes c (zeroed, the first member of a room's state from req_state_new)
 * a call of up for r: one holder (the request). */
void rcall_init(rcall *c, req *r, const upstream_cfg *up, const rcall_ops *ops);

/* Reserves (c->rreq filled by the room: scope, key, fingerprint, lease,
 * retention, approval) and goes on by callbacks. HTTP thread, or the
 * waiter thread for a Prefer: wait retry. */
void rcall_start(rcall *c);

/* Records the verdict (v.resp borrowed: the room keeps it alive until the
 * last rcall_drop), asynchronously; then ops->recorded. Drops the lease. */
void rcall_record(rcall *c, const verdict *v);

/* The call is over (or never started): its lease needs no more renewing. */
void rcall_lease_done(rcall *c);

/* One more holder (a streamed answer), and its end. The last drop frees c:
 * it is the req_state_free of the room's state. */
void rcall_hold(rcall *c);
void rcall_drop(void *c);

#endif
