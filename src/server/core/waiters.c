/*
 * waiters.c — requests parked on `Prefer: wait=N` until another attempt's
 * outcome lands. One thread re-checks them every POLL_MS; a wait is bounded
 * (60 s at most), so the list drains by itself.
 *
 * Waiters of one action share one store read per round: a hundred retries
 * waiting on one slow call cost one indexed read every POLL_MS, not a
 * hundred (docs/security.md: a client must not turn its retries into load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/looper.h"
#include "server/core/services.h"
#include "server/core/waiters.h"

#define POLL_MS 25

typedef struct waiter {
    looper_item item; /* first: posted to the loop */
    char scope[ONCE_SCOPE_MAX + 1];
    char key[ONCE_KEY_MAX + 1];
    void *state;
    int64_t deadline; /* monotonic ms */
    waiter_fn on_settled;
    waiter_fn on_timeout;
} waiter;

/* Only the loop thread touches kept and all; adds arrive as posts. */
struct waiters {
    server *srv;
    looper loop;
    looper_item *kept; /* waiters still waiting after the last round */
    size_t nkept;
    waiter **all;  /* the round's sorted view */
    size_t cap;
};

static waiter *waiter_next(const waiter *it)
{
    return (waiter *)it->item.next;
}

/* Keeps it for the next round. */
static void waiter_keep(waiters *w, waiter *it)
{
    it->item.next = w->kept;
    w->kept = &it->item;
    w->nkept++;
}

static int waiter_cmp(const void *a, const void *b)
{
    const waiter *x = *(waiter *const *)a, *y = *(waiter *const *)b;
    int c = strcmp(x->scope, y->scope);
    return c ? c : strcmp(x->key, y->key);
}

/* Has the action left the live pending state (settled, gone, or its lease
 * ran out) and is it not waiting for a human (an approval: the decision,
 * then the send, are what a waiter waits for)? A read error counts as
 * settled: the waiter's own retry then meets the error and answers it. */
static int action_settled(waiters *w, const waiter *it)
{
    once_action a;
    int rc = once_get(w->srv->store, it->scope, it->key, &a);
    if (rc != ONCE_OK)
        return 1;
    int settled = a.state == ONCE_STATE_PENDING             ? a.lease_expires_at <= once_now_ms()
                  : a.state == ONCE_STATE_AWAITING_APPROVAL ? 0
                                                            : 1;
    once_action_free(&a);
    return settled;
}

/* Answers each waiter of all[0..n) whose action settled or whose deadline
 * passed; each group of one action is read once.
 * Keeps the rest in w->kept. */
static void waiters_check(waiters *w, size_t n)
{
    int64_t now = clock_mono_ms();
    waiter **all = w->all;
    if (n == 0)
        return;
    qsort(all, n, sizeof *all, waiter_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && waiter_cmp(&all[i], &all[j]) == 0)
            j++;
        int settled = -1; /* read lazily: a group that only times out costs nothing */
        for (size_t k = i; k < j; k++) {
            waiter *it = all[k];
            if (now >= it->deadline) {
                it->on_timeout(it->state);
                free(it);
                continue;
            }
            if (settled < 0)
                settled = action_settled(w, it);
            if (settled) {
                it->on_settled(it->state);
                free(it);
            } else {
                waiter_keep(w, it);
            }
        }
        i = j;
    }
}

/* Moves what was posted to the kept list. */
static void waiters_keep(waiters *w, looper_item *posted)
{
    while (posted) {
        waiter *it = (waiter *)posted;
        posted = posted->next;
        waiter_keep(w, it);
    }
}

/* One round: the newly parked join the kept, and all are checked. Rounds
 * run every POLL_MS while anything waits, and not at all otherwise; the
 * stopping round times every waiter out (each answers 409). */
static int64_t waiters_round(void *arg, looper_phase phase, looper_item *posted)
{
    waiters *w = arg;
    waiters_keep(w, posted);
    if (phase == LOOPER_STOPPING) {
        for (waiter *it = (waiter *)w->kept, *next; it; it = next) {
            next = waiter_next(it);
            it->on_timeout(it->state);
            free(it);
        }
        w->kept = NULL;
        w->nkept = 0;
        return LOOPER_DONE;
    }
    if (w->nkept > w->cap) {
        waiter **grown = realloc(w->all, w->nkept * sizeof *grown);
        if (!grown)
            return POLL_MS; /* try again next round; nothing is lost meanwhile */
        w->all = grown;
        w->cap = w->nkept;
    }
    size_t n = 0;
    for (waiter *it = (waiter *)w->kept; it; it = waiter_next(it))
        w->all[n++] = it;
    w->kept = NULL;
    w->nkept = 0;
    waiters_check(w, n);
    return w->kept ? POLL_MS : LOOPER_IDLE;
}

int waiters_start(server *srv, waiters **out)
{
    waiters *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->srv = srv;
    if (looper_start(&w->loop, "once-waiters", waiters_round, w) < 0) {
        waiters_free(w); /* nothing waits, no thread: it only frees */
        return -1;
    }
    *out = w;
    return 0;
}

void waiters_stop(waiters *w)
{
    if (w)
        looper_stop(&w->loop);
}

void waiters_free(waiters *w)
{
    if (!w)
        return;
    ONCE_ASSERT(!w->kept);
    looper_close(&w->loop);
    free(w->all);
    free(w);
}

int waiters_add(waiters *w, const char *scope, const char *key, void *state, int64_t deadline,
                waiter_fn on_settled, waiter_fn on_timeout)
{
    waiter *it = calloc(1, sizeof *it);
    if (!it)
        return -1;
    snprintf(it->scope, sizeof it->scope, "%s", scope);
    snprintf(it->key, sizeof it->key, "%s", key);
    it->state = state;
    it->deadline = deadline;
    it->on_settled = on_settled;
    it->on_timeout = on_timeout;
    /* Not urgent: a new waiter is checked at the next round, so a storm of
     * retries on one action does not become a storm of rounds. */
    if (looper_post(&w->loop, &it->item, 0) < 0) {
        free(it);
        return -1;
    }
    return 0;
}

int waiters_park(waiters *w, const char *scope, const char *key, once_reserve_status status, int for_decision,
                 void *state, int64_t deadline, waiter_fn on_settled, waiter_fn on_timeout)
{
    int may_change = status == ONCE_IN_FLIGHT || (status == ONCE_AWAITING_APPROVAL && for_decision);
    if (!may_change || deadline <= clock_mono_ms())
        return 0;
    return waiters_add(w, scope, key, state, deadline, on_settled, on_timeout) == 0;
}

int64_t waiters_prefer_wait(const char *prefer)
{
    if (!prefer)
        return 0;
    const char *w = strcasestr(prefer, "wait=");
    if (!w)
        return 0;
    long v = strtol(w + 5, NULL, 10);
    if (v <= 0)
        return 0;
    return (v > 60 ? 60 : v) * 1000;
}
