/*
 * leases.c — renewing the leases of calls in flight (see leases.h).
 *
 * A hold is owned by the registry; a renewal in flight keeps it alive until
 * its callback (on the store writer) has run, so a call that ends while its
 * renewal is queued never frees memory the store still writes into.
 */
#include "server/core/leases.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/looper.h"
#include "server/core/log.h"

#define LEASES_TICK_MS 100

struct lease_hold {
    lease_hold *prev, *next;
    leases *owner;
    char scope[ONCE_SCOPE_MAX + 1];
    char key[ONCE_KEY_MAX + 1];
    char token[ONCE_TOKEN_LEN + 1];
    int64_t lease_ms;
    int64_t next_at;      /* monotonic ms of the next renewal */
    int64_t expires_at;   /* written by the store before the callback */
    int renewing;         /* a renewal is queued */
    int dropped;          /* the call ended while it was */
    int lost;             /* another attempt (or the expiry) took the row */
};

/* The list (head) holds the holds not yet dropped, under mu: any thread adds
 * and drops; the renewer thread walks it, and marks the ones it queues
 * renewing. A hold leaves the list once (leases_drop) and is freed once: by
 * the drop, or, when a renewal was in flight then, by that renewal's
 * callback. */
struct leases {
    once_store *store;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* a renewal came back (leases_free waits for the last) */
    lease_hold *head;
    _Atomic size_t held;  /* written under mu; read without it by /metrics */
    size_t inflight;      /* renewals queued in the store */
    _Atomic uint64_t failures;
    looper renewer;
};

static void hold_unlink(leases *l, lease_hold *h)
{
    ONCE_ASSERT(h->owner == l && !h->dropped);
    ONCE_ASSERT(h->prev ? h->prev->next == h : l->head == h); /* on the list */
    ONCE_ASSERT(l->held > 0);
    if (h->prev)
        h->prev->next = h->next;
    else
        l->head = h->next;
    if (h->next)
        h->next->prev = h->prev;
    l->held--;
}

/* On the store writer: how the renewal went. */
static void on_renewed(void *ctx, int rc, const char *detail)
{
    lease_hold *h = ctx;
    leases *l = h->owner;
    pthread_mutex_lock(&l->mu);
    /* Each renewal queued comes back once. */
    ONCE_ASSERT(h->renewing && l->inflight > 0);
    h->renewing = 0;
    l->inflight--;
    pthread_cond_broadcast(&l->cv);
    if (rc < 0 && !h->dropped) {
        l->failures++;
        if (rc == ONCE_ESTATE || rc == ONCE_ESTALE || rc == ONCE_ENOTFOUND) {
            h->lost = 1;
            log_event("warn", "scope %s: the lease of a call in flight was taken over (%s); its answer will be "
                      "recorded as a late completion", h->scope, detail);
        } else {
            /* Tried again soon: the lease has two thirds left. */
            h->next_at = clock_mono_ms() + LEASES_TICK_MS * 5;
            log_event("warn", "scope %s: cannot renew a lease, retrying: %s", h->scope, detail);
        }
    }
    if (h->dropped) {
        pthread_mutex_unlock(&l->mu);
        free(h);
        return;
    }
    pthread_mutex_unlock(&l->mu);
}

/* One round: every hold whose renewal is due gets one, all queued at once
 * so that they share a commit (the store calls run outside the lock). */
static int64_t leases_round(void *arg, looper_phase phase, looper_item *posted)
{
    leases *l = arg;
    (void)posted;
    ONCE_ASSERT_THREAD(l->renewer.thread);
    ONCE_ASSERT(!posted); /* nothing is posted to the renewer */
    if (phase == LOOPER_STOPPING)
        return LOOPER_DONE;
    pthread_mutex_lock(&l->mu);
    int64_t now = clock_mono_ms();
    lease_hold *due[256];
    size_t n = 0;
    for (lease_hold *h = l->head; h && n < sizeof due / sizeof due[0]; h = h->next) {
        ONCE_ASSERT(h->owner == l && !h->dropped); /* a dropped hold is off the list */
        if (h->renewing || h->lost || h->next_at > now)
            continue;
        h->renewing = 1;
        h->next_at = now + h->lease_ms / 3;
        l->inflight++;
        due[n++] = h;
    }
    pthread_mutex_unlock(&l->mu);
    /* Until its renewal is queued, a due hold is the renewer's: renewing
     * keeps a drop meanwhile from freeing it. */
    for (size_t i = 0; i < n; i++) {
        lease_hold *h = due[i];
        int rc = once_renew_async(l->store, h->scope, h->key, h->token, h->lease_ms, &h->expires_at, on_renewed, h);
        if (rc < 0)
            on_renewed(h, rc, once_errdetail());
    }
    return LEASES_TICK_MS;
}

int leases_start(once_store *store, leases **out)
{
    leases *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    l->store = store;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (looper_start(&l->renewer, "once-leases", leases_round, l) < 0) {
        leases_free(l); /* nothing held, no renewer: it only destroys and frees */
        return -1;
    }
    *out = l;
    return 0;
}

void leases_free(leases *l)
{
    if (!l)
        return;
    looper_stop(&l->renewer);
    looper_close(&l->renewer);
    /* Renewals still queued write into their holds: wait for them. */
    pthread_mutex_lock(&l->mu);
    while (l->inflight > 0)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    /* No renewal is left to free a hold: those still listed are freed here. */
    while (l->head) {
        lease_hold *h = l->head;
        hold_unlink(l, h);
        free(h);
    }
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

lease_hold *leases_hold(leases *l, const char *scope, const char *key, const char *token, int64_t lease_ms)
{
    lease_hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->owner = l;
    snprintf(h->scope, sizeof h->scope, "%s", scope);
    snprintf(h->key, sizeof h->key, "%s", key);
    snprintf(h->token, sizeof h->token, "%s", token);
    h->lease_ms = lease_ms;
    h->next_at = clock_mono_ms() + lease_ms / 3;
    pthread_mutex_lock(&l->mu);
    h->next = l->head;
    if (l->head)
        l->head->prev = h;
    l->head = h;
    l->held++;
    pthread_mutex_unlock(&l->mu);
    return h;
}

void leases_drop(leases *l, lease_hold *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&l->mu);
    hold_unlink(l, h); /* asserts h was not dropped before */
    int renewing = h->renewing;
    h->dropped = 1;
    pthread_mutex_unlock(&l->mu);
    if (!renewing)
        free(h); /* else on_renewed frees it */
}

size_t leases_held(leases *l)
{
    return atomic_load_explicit(&l->held, memory_order_relaxed);
}

uint64_t leases_failures(leases *l)
{
    return atomic_load_explicit(&l->failures, memory_order_relaxed);
}
