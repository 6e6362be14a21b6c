/*
 * approvals.c — sending what a human approved, exactly once.
 *
 * An approval is a decision in the store (once_approve, from the API or the
 * CLI); nothing is sent by it. Each round this thread takes approved
 * actions of the upstreams with approve rules (once_approval_claim: fenced
 * like a reservation, so of several gateways on one store exactly one takes
 * each) and hands each to the sender of its kind of scope (core/sender.h:
 * an HTTP upstream's or an MCP server's, registered by server.c), without
 * knowing which it is. The sender sends the exact request the human saw,
 * under every rule of the proxy: the claim is durable before the first
 * byte, its lease is renewed while the call runs, the outcome is classified
 * as the proxy classifies it. Its verdict comes back here, on this thread,
 * and is recorded with the claim's token (core/verdict.h). The agent's next
 * retry gets the recorded answer replayed. No send blocks this thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/looper.h"
#include "server/core/log.h"
#include "server/core/sender.h"
#include "server/core/verdict.h"
#include "server/jobs/approvals.h"

#define CLAIM_MAX 16 /* per upstream and round: a round stays short */

typedef struct approved_send {
    looper_item item; /* first: posted back by whichever thread the send ended on */
    struct approvals *ap;
    once_reservation res; /* the claim: its token and the stored request */
    send_job job;
    int posts; /* times the sender said done: once (asserted where it is recorded) */
} approved_send;

/* running belongs to the loop thread: it counts the sends between
 * send_start and their record, so it is never below zero, and the stopping
 * rounds end only at zero (every send cut by the stop is recorded). */
struct approvals {
    server *srv;
    looper loop;
    size_t running; /* sends handed to a sender and not yet recorded */
};

static void send_free(approved_send *s)
{
    if (s->job.free_fn)
        s->job.free_fn(&s->job);
    once_reservation_free(&s->res);
    free(s);
}

/* On the approvals thread: records the verdict under the claim's token. A
 * record that fails leaves the row pending: its lease runs out and it is
 * held, never sent again. */
static void send_record(approvals *ap, approved_send *s)
{
    server *srv = ap->srv;
    const upstream_cfg *up = s->job.up;
    const verdict *v = &s->job.v;
    int rc = verdict_record(srv->store, srv->metrics, up->name, s->res.action.key, s->res.token, v, NULL, NULL);
    if (rc < 0)
        log_event("error", "scope %s: the outcome of an approved call could not be recorded (the action is held "
                  "once its lease runs out): %s", up->name, once_errdetail());
    else
        log_event("info", "scope %s: approved %s sent: %s%s%s", up->name, s->job.what[0] ? s->job.what : "action",
                  verdict_name(v->kind), v->kind == VERDICT_COMPLETED ? "" : ": ",
                  v->kind == VERDICT_COMPLETED ? "" : s->job.log_why);
}

/* Any thread: the send ended; its verdict is recorded on the approvals
 * thread. */
static void on_send_done(send_job *job)
{
    approved_send *s = job->ctx;
    /* A second done would post the item again while it is on the loop's
     * list (or freed): the send would be recorded twice. */
    ONCE_ASSERT(s->posts == 0);
    s->posts++;
    looper_post(&s->ap->loop, &s->item, 1);
}

/* Hands one claimed action to the sender of its kind of scope. */
static void send_start(approvals *ap, const upstream_cfg *up, once_reservation *res)
{
    server *srv = ap->srv;
    ONCE_ASSERT_THREAD(ap->loop.thread); /* running is the loop thread's */
    const sender *snd = srv->senders[scope_kind_of(up)];
    ONCE_ASSERT(snd != NULL); /* server.c registers one per kind */
    approved_send *s = calloc(1, sizeof *s);
    if (!s || !snd) {
        /* The claim's lease runs out and the action is held: never lost,
         * never sent twice. */
        free(s);
        once_reservation_free(res);
        return;
    }
    s->ap = ap;
    s->res = *res;
    memset(res, 0, sizeof *res);
    s->job = (send_job){.srv = srv, .up = up, .res = &s->res, .done = on_send_done, .ctx = s};
    metrics_approval(srv->metrics, up->name, MA_APPROVED, 1);
    ap->running++;
    snd->start(&s->job);
}

/* Takes up to CLAIM_MAX approved actions of each upstream with rules. */
static void claim_approved(approvals *ap)
{
    server *srv = ap->srv;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++) {
        const upstream_cfg *up = &srv->cfg->upstreams[i];
        for (int n = 0; (up->napprove > 0 || up->approve_destructive) && n < CLAIM_MAX; n++) {
            once_reservation res;
            int rc = once_approval_claim(srv->store, up->name, up->lease_ms, &res);
            if (rc < 0)
                log_event("error", "scope %s: cannot take approved actions: %s", up->name, once_errdetail());
            if (rc != 1)
                break;
            send_start(ap, up, &res);
        }
    }
}

/* One round: records the sends that finished (while stopping too: a call
 * the stop cut is released or unknown as the proxy's are), then (unless
 * quiesced) takes the approved actions. */
static int64_t approvals_round(void *arg, looper_phase phase, looper_item *posted)
{
    approvals *ap = arg;
    ONCE_ASSERT_THREAD(ap->loop.thread);
    for (looper_item *i = posted, *next; i; i = next) {
        next = i->next;
        approved_send *s = (approved_send *)i;
        /* Posted once, by its own done, and started here: recorded once. */
        ONCE_ASSERT(s->ap == ap && s->posts == 1);
        ONCE_ASSERT(ap->running > 0);
        send_record(ap, s);
        ap->running--;
        send_free(s);
    }
    if (phase != LOOPER_RUNNING)
        return phase == LOOPER_STOPPING && ap->running == 0 ? LOOPER_DONE : LOOPER_IDLE;
    claim_approved(ap);
    return ap->srv->cfg->loop_interval_ms;
}

int approvals_start(server *srv, approvals **out)
{
    *out = NULL;
    int any = 0;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++)
        any |= srv->cfg->upstreams[i].napprove > 0 || srv->cfg->upstreams[i].approve_destructive;
    if (!any)
        return 0;
    approvals *ap = calloc(1, sizeof *ap);
    if (!ap)
        return -1;
    ap->srv = srv;
    if (looper_start(&ap->loop, "once-approvals", approvals_round, ap) < 0) {
        free(ap);
        return -1;
    }
    *out = ap;
    return 0;
}

void approvals_kick(approvals *ap)
{
    if (ap)
        looper_kick(&ap->loop);
}

void approvals_quiesce(approvals *ap)
{
    if (ap)
        looper_quiesce(&ap->loop);
}

void approvals_stop(approvals *ap)
{
    if (!ap)
        return;
    looper_stop(&ap->loop);
    looper_close(&ap->loop);
    free(ap);
}
