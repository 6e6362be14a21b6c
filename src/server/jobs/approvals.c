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
 *
 * The thread is a looper_job (common/looper.h): it counts the sends between
 * send_start and their record, and its stopping rounds end only once every
 * send the stop cut is recorded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/looper.h"
#include "server/core/log.h"
#include "server/core/sender.h"
#include "server/core/verdict.h"
#include "server/jobs/approvals.h"
#include "server/jobs/jobs.h"

#define CLAIM_MAX 16 /* per upstream and round: a round stays short */

typedef struct approved_send {
    looper_item item; /* first: posted back by whichever thread the send ended on */
    looper_job *job;  /* the approvals thread's, to which the send comes back */
    once_reservation res; /* the claim: its token and the stored request */
    send_job send;
    int posts; /* times the sender said done: once (asserted where it is recorded) */
} approved_send;

static void send_free(approved_send *s)
{
    if (s->send.free_fn)
        s->send.free_fn(&s->send);
    once_reservation_free(&s->res);
    free(s);
}

/* On the approvals thread: records the verdict under the claim's token. A
 * record that fails leaves the row pending: its lease runs out and it is
 * held, never sent again. */
static void send_record(server *srv, approved_send *s)
{
    const upstream_cfg *up = s->send.up;
    const verdict *v = &s->send.v;
    int rc = verdict_record(srv->store, srv->metrics, up->name, s->res.action.key, s->res.token, v, NULL, NULL);
    if (rc < 0)
        log_event("error", "scope %s: the outcome of an approved call could not be recorded (the action is held "
                  "once its lease runs out): %s", up->name, once_errdetail());
    else
        log_event("info", "scope %s: approved %s sent: %s%s%s", up->name, s->send.what[0] ? s->send.what : "action",
                  verdict_name(v->kind), v->kind == VERDICT_COMPLETED ? "" : ": ",
                  v->kind == VERDICT_COMPLETED ? "" : s->send.log_why);
}

/* Any thread: the send ended; its verdict is recorded on the approvals
 * thread. */
static void on_send_done(send_job *send)
{
    approved_send *s = send->ctx;
    /* A second done would post the item again while it is on the loop's
     * list (or freed): the send would be recorded twice. */
    ONCE_ASSERT(s->posts == 0);
    s->posts++;
    looper_job_back(s->job, &s->item);
}

/* Hands one claimed action to the sender of its kind of scope. */
static void send_start(looper_job *job, const upstream_cfg *up, once_reservation *res)
{
    server *srv = looper_job_arg(job);
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
    s->job = job;
    s->res = *res;
    memset(res, 0, sizeof *res);
    s->send = (send_job){.srv = srv, .up = up, .res = &s->res, .done = on_send_done, .ctx = s};
    metrics_approval(srv->metrics, up->name, MA_APPROVED, 1);
    looper_job_handed(job);
    snd->start(&s->send);
}

/* Whether an upstream's actions may wait for a human (it has approve
 * rules, or an agent's limit on it waits for one when used up): only those
 * are ever approved, so only they are claimed. */
static int has_approvals(const upstream_cfg *up)
{
    return up->napprove > 0 || up->approve_destructive || up->limit_approvals;
}

/* A running round: takes up to CLAIM_MAX approved actions of each upstream
 * with rules, and looks again after loop_interval. */
static int64_t claim_approved(looper_job *job)
{
    server *srv = looper_job_arg(job);
    for (size_t i = 0; i < srv->cfg->nupstreams; i++) {
        const upstream_cfg *up = &srv->cfg->upstreams[i];
        for (int n = 0; has_approvals(up) && n < CLAIM_MAX; n++) {
            once_reservation res;
            int rc = once_approval_claim(srv->store, up->name, up->lease_ms, &res);
            if (rc < 0)
                log_event("error", "scope %s: cannot take approved actions: %s", up->name, once_errdetail());
            if (rc != 1)
                break;
            send_start(job, up, &res);
        }
    }
    return srv->cfg->loop_interval_ms;
}

/* A send came back: its verdict is recorded, while stopping too (a call the
 * stop cut is released or unknown as the proxy's are). */
static void send_settle(looper_job *job, looper_phase phase, looper_item *it)
{
    approved_send *s = (approved_send *)it;
    (void)phase;
    /* Posted once, by its own done, and started here: recorded once. */
    ONCE_ASSERT(s->job == job && s->posts == 1);
    send_record(looper_job_arg(job), s);
    send_free(s);
}

static const looper_job_ops approvals_ops = {.name = "once-approvals", .claim = claim_approved, .settle = send_settle};

int approvals_start(server *srv, looper_job **out)
{
    return jobs_start(srv, has_approvals, &approvals_ops, out);
}

void approvals_kick(looper_job *approvals)
{
    looper_job_kick(approvals);
}
