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
 * Once-Event-Id: the agent dedupes its own actions with it.
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
    delivery *d;
    source_rt *src;
    once_event ev;
    out_headers headers;
    out_call call;
} job;

/* running and wake_at belong to the loop thread. */
struct delivery {
    server *srv;
    looper loop;
    size_t running;  /* calls handed to the outbound client */
    int64_t wake_at; /* the earliest retry due (ms since epoch); 0 = none known */
};

/* Remembers that a retry falls due at ms, so the loop wakes for it rather
 * than at its next idle tick (a 50 ms retry_base must mean 50 ms). */
static void wake_for(delivery *d, int64_t ms)
{
    if (d->wake_at == 0 || ms < d->wake_at)
        d->wake_at = ms;
}

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
    looper_post(&j->d->loop, &j->item, 1);
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

static void settle(delivery *d, job *j)
{
    server *srv = d->srv;
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
            wake_for(d, once_now_ms() + delay);
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
    d->running--;
}

static int header_add(job *j, const char *name, const char *value)
{
    return out_headers_add(&j->headers, name, value);
}

static int job_start(delivery *d, source_rt *src, once_event *ev)
{
    const source_cfg *sc = src->cfg;
    job *j = calloc(1, sizeof *j);
    if (!j) {
        once_event_free(ev);
        return -1;
    }
    j->d = d;
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
    if (bad || outbound_submit(d->srv->ob, c) < 0) {
        /* Not sent: the claim is given back now rather than at its lease,
         * and it counts as an attempt, so a delivery that can never start
         * ends dead instead of spinning. */
        int dead = j->ev.attempt >= sc->max_attempts;
        if (once_event_retry(d->srv->store, sc->name, j->ev.receipt, dead ? 0 : backoff_ms(sc, j->ev.attempt), dead,
                             "the gateway could not start the delivery") < 0)
            log_event("error", "source %s: event %s: cannot give the claim back (it ends with its lease): %s",
                      sc->name, j->ev.event_id, once_errdetail());
        metrics_delivery(d->srv->metrics, sc->name, dead ? MD_DEAD : MD_RETRIED);
        job_free(j);
        return -1;
    }
    src->in_flight++;
    d->running++;
    FAULT_POINT("during_delivery");
    return 0;
}

static void claim_due(delivery *d)
{
    server *srv = d->srv;
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
            job_start(d, src, &l.items[k]);
        once_event_list_free(&l);
    }
}

/* One round: settles the calls that finished, then (unless quiesced)
 * claims what is due, and sleeps until the earliest known retry, at most
 * IDLE_WAIT_MS (another node's events are found by polling). Stopping ends
 * once no call is in flight. */
static int64_t delivery_round(void *arg, looper_phase phase, looper_item *posted)
{
    delivery *d = arg;
    for (looper_item *i = posted, *next; i; i = next) {
        next = i->next;
        settle(d, (job *)i);
        job_free((job *)i);
    }
    if (phase != LOOPER_RUNNING)
        return phase == LOOPER_STOPPING && d->running == 0 ? LOOPER_DONE : LOOPER_IDLE;
    claim_due(d);
    int64_t now = once_now_ms(), wait_ms = IDLE_WAIT_MS;
    if (d->wake_at) {
        wait_ms = d->wake_at <= now ? 0 : d->wake_at - now < IDLE_WAIT_MS ? d->wake_at - now : IDLE_WAIT_MS;
        if (d->wake_at <= now + IDLE_WAIT_MS)
            d->wake_at = 0; /* this wait covers it */
    }
    return wait_ms;
}

int delivery_start(server *srv)
{
    delivery *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    d->srv = srv;
    if (looper_start(&d->loop, "once-delivery", delivery_round, d) < 0) {
        free(d);
        return -1;
    }
    srv->delivery = d;
    return 0;
}

void delivery_kick(server *srv)
{
    if (srv->delivery)
        looper_kick(&srv->delivery->loop);
}

void delivery_quiesce(server *srv)
{
    if (srv->delivery)
        looper_quiesce(&srv->delivery->loop);
}

void delivery_stop(server *srv)
{
    if (srv->delivery)
        looper_stop(&srv->delivery->loop);
}

void delivery_free(server *srv)
{
    delivery *d = srv->delivery;
    if (!d)
        return;
    srv->delivery = NULL;
    looper_close(&d->loop);
    free(d);
}
