/*
 * delivery.c — pushing webhook events to the agent (deliver_to).
 *
 * One thread owns the event state on this node: it claims due events (a
 * claim is a receipt and a lease in the store, so N nodes never deliver the
 * same event at once, and a node killed mid-delivery only delays it until
 * the lease ends), hands each POST to the outbound client, and settles the
 * results the outbound thread queues back: 2xx is delivered; anything else
 * is retried after base * 2^(attempt-1) with full jitter, capped, until
 * max_attempts, then dead. Delivery is at-least-once with a stable
 * Once-Event-Id: the agent dedupes its own actions with it. The thread is a
 * looper_job (common/looper.h): its stop waits for every call in flight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "common/clock.h"
#include "common/fault.h"
#include "common/looper.h"
#include "server/hooks/hooks.h"
#include "server/core/log.h"

#define IDLE_WAIT_MS 500
#define CLAIM_GRACE_MS 5000 /* a claim outlives the call's timeout by this */

typedef struct job {
    looper_item item; /* first: posted back by the outbound thread */
    looper_job *loop; /* the delivery thread's, to which the call comes back */
    source_rt *src;
    once_event ev;
    out_headers headers;
    out_call call;
} job;

static void job_free(job *j)
{
    out_headers_clear(&j->headers);
    once_event_free(&j->ev);
    out_call_clear(&j->call);
    free(j);
}

/* Runs on the outbound thread: the result goes to the delivery thread. A
 * completion is always taken, even while stopping (the stop waits for it). */
static void on_delivered(out_call *c)
{
    job *j = c->ctx;
    looper_job_back(j->loop, &j->item);
}

/* Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]. */
static int64_t backoff_ms(const source_cfg *sc, int64_t attempt)
{
    int64_t delay = sc->retry_base_ms;
    for (int64_t i = 1; i < attempt && delay < sc->retry_cap_ms; i++)
        delay *= 2;
    if (delay > sc->retry_cap_ms)
        delay = sc->retry_cap_ms;
    uint64_t rnd = 0;
    if (RAND_bytes((unsigned char *)&rnd, sizeof rnd) != 1)
        rnd = (uint64_t)time(NULL) * 2654435761u;
    return delay > 0 ? (int64_t)(rnd % (uint64_t)(delay + 1)) : 0;
}

/* On the delivery thread: records how one delivery went, and when it is
 * retried. */
static void settle(looper_job *loop, job *j)
{
    server *srv = looper_job_arg(loop);
    const source_cfg *sc = j->src->cfg;
    out_call *c = &j->call;
    int ok = c->kind == OUT_ANSWERED && c->status >= 200 && c->status < 300;
    int rc;
    if (ok) {
        rc = once_event_ack(srv->store, sc->name, j->ev.receipt);
        metrics_delivery(srv->metrics, sc->name, MD_DELIVERED);
    } else {
        char why[320];
        if (c->kind == OUT_ANSWERED)
            snprintf(why, sizeof why, "the agent answered %ld", c->status);
        else
            snprintf(why, sizeof why, "%s", c->error[0] ? c->error : "delivery failed");
        int dead = j->ev.attempt >= sc->max_attempts;
        int64_t delay = dead ? 0 : backoff_ms(sc, j->ev.attempt);
        rc = once_event_retry(srv->store, sc->name, j->ev.receipt, delay, dead, why);
        if (!dead)
            looper_job_due(loop, delay); /* a 50 ms retry_base must mean 50 ms, not the next idle tick */
        metrics_delivery(srv->metrics, sc->name, dead ? MD_DEAD : MD_RETRIED);
        if (dead)
            log_event("warn", "source %s: event %s is dead after %lld attempts: %s", sc->name, j->ev.event_id,
                      (long long)j->ev.attempt, why);
    }
    /* A stale receipt means the claim ran out and another claim owns the
     * event now: it is delivered again, which at-least-once allows. */
    if (rc < 0 && rc != ONCE_ESTALE)
        log_event("error", "source %s: event %s: cannot record the delivery: %s", sc->name, j->ev.event_id,
                  once_errdetail());
    j->src->in_flight--;
}

static int header_add(job *j, const char *name, const char *value)
{
    return out_headers_add(&j->headers, name, value);
}

/* Hands one claimed event's POST to the outbound client; one that cannot
 * start is given back as a failed attempt. */
static int job_start(looper_job *loop, source_rt *src, once_event *ev)
{
    server *srv = looper_job_arg(loop);
    const source_cfg *sc = src->cfg;
    job *j = calloc(1, sizeof *j);
    if (!j) {
        once_event_free(ev);
        return -1;
    }
    j->loop = loop;
    j->src = src;
    j->ev = *ev; /* takes ownership */
    memset(ev, 0, sizeof *ev);
    char attempt[24], ts[24];
    snprintf(attempt, sizeof attempt, "%lld", (long long)j->ev.attempt);
    int64_t now_s = once_now_ms() / 1000;
    snprintf(ts, sizeof ts, "%lld", (long long)now_s);
    int bad = header_add(j, "Content-Type", j->ev.content_type ? j->ev.content_type : "application/octet-stream") < 0 ||
              header_add(j, "Once-Event-Id", j->ev.event_id) < 0 || header_add(j, "Once-Source", sc->name) < 0 ||
              header_add(j, "Once-Attempt", attempt) < 0;
    if (!bad && src->signer) {
        /* Standard Webhooks: the agent can check the event came from us. */
        char sig[128];
        bad = sig_sign_standard(src->signer, j->ev.event_id, now_s, j->ev.body, j->ev.body_len, sig, sizeof sig) < 0 ||
              header_add(j, "webhook-id", j->ev.event_id) < 0 || header_add(j, "webhook-timestamp", ts) < 0 ||
              header_add(j, "webhook-signature", sig) < 0;
    }
    out_call *c = &j->call;
    c->method = "POST";
    c->url = sc->deliver_to;
    c->headers = (const char *const *)j->headers.lines;
    c->nheaders = j->headers.count;
    c->body = j->ev.body;
    c->body_len = j->ev.body_len;
    c->timeout_ms = sc->timeout_ms;
    c->max_response = 64 * 1024;
    c->done = on_delivered;
    c->ctx = j;
    FAULT_POINT("before_delivery");
    if (bad || outbound_submit(srv->ob, c) < 0) {
        /* Not sent: the claim is given back now rather than at its lease,
         * and it counts as an attempt, so a delivery that can never start
         * ends dead instead of spinning. */
        int dead = j->ev.attempt >= sc->max_attempts;
        if (once_event_retry(srv->store, sc->name, j->ev.receipt, dead ? 0 : backoff_ms(sc, j->ev.attempt), dead,
                             "the gateway could not start the delivery") < 0)
            log_event("error", "source %s: event %s: cannot give the claim back (it ends with its lease): %s",
                      sc->name, j->ev.event_id, once_errdetail());
        metrics_delivery(srv->metrics, sc->name, dead ? MD_DEAD : MD_RETRIED);
        job_free(j);
        return -1;
    }
    src->in_flight++;
    looper_job_handed(loop);
    FAULT_POINT("during_delivery");
    return 0;
}

/* A running round: claims what is due of every source with room, and
 * looks again after IDLE_WAIT_MS (another node's events are found by
 * polling), sooner when a retry falls due (looper_job_due). */
static int64_t claim_due(looper_job *loop)
{
    server *srv = looper_job_arg(loop);
    for (size_t i = 0; i < srv->cfg->nsources; i++) {
        source_rt *src = &srv->sources[i];
        const source_cfg *sc = src->cfg;
        if (!sc->deliver_to || src->in_flight >= (size_t)sc->concurrency)
            continue;
        once_event_list l;
        size_t room = (size_t)sc->concurrency - src->in_flight;
        int rc = once_event_claim(srv->store, sc->name, room, sc->timeout_ms + CLAIM_GRACE_MS, &l);
        if (rc < 0) {
            log_event("error", "source %s: cannot claim events: %s", sc->name, once_errdetail());
            continue;
        }
        for (size_t k = 0; k < l.count; k++)
            job_start(loop, src, &l.items[k]);
        once_event_list_free(&l);
    }
    return IDLE_WAIT_MS;
}

/* A call came back: settled, while stopping too (an aborted call is a
 * failed attempt, retried later). */
static void job_settle(looper_job *loop, looper_phase phase, looper_item *it)
{
    (void)phase;
    settle(loop, (job *)it);
    job_free((job *)it);
}

static const looper_job_ops delivery_ops = {.name = "once-delivery", .claim = claim_due, .settle = job_settle};

int delivery_start(server *srv)
{
    return looper_job_start(&delivery_ops, srv, &srv->delivery);
}

void delivery_kick(server *srv)
{
    looper_job_kick(srv->delivery);
}
