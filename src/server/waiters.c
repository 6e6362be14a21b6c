/*
 * waiters.c — requests parked on `Prefer: wait=N` until another attempt's
 * outcome lands. One thread re-checks them every POLL_MS; a wait is bounded
 * (60 s at most), so the list drains by itself.
 *
 * Waiters of one action share one store read per round: a hundred retries
 * waiting on one slow call cost one indexed read every POLL_MS, not a
 * hundred (docs/security.md: a client must not turn its retries into load).
 */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "server/server.h"

#define POLL_MS 25

typedef struct waiter {
    struct waiter *next;
    char scope[ONCE_SCOPE_MAX + 1];
    char key[ONCE_KEY_MAX + 1];
    void *state;
    int64_t deadline; /* monotonic ms */
    waiter_fn on_settled;
    waiter_fn on_timeout;
} waiter;

struct waiters {
    server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    waiter *head;
    int stop;
    pthread_t thread;
};

static int waiter_cmp(const void *a, const void *b)
{
    const waiter *x = *(waiter *const *)a, *y = *(waiter *const *)b;
    int c = strcmp(x->scope, y->scope);
    return c ? c : strcmp(x->key, y->key);
}

/* Has the action left the live pending state (settled, gone, or its lease
 * ran out)? A read error counts as settled: the waiter's own retry then
 * meets the error and answers it. */
static int action_settled(waiters *w, const waiter *it)
{
    once_action a;
    int rc = once_get(w->srv->store, it->scope, it->key, &a);
    if (rc != ONCE_OK)
        return 1;
    int settled = a.state != ONCE_STATE_PENDING || a.lease_expires_at <= once_now_ms();
    once_action_free(&a);
    return settled;
}

/* One round over what was parked: each group of one action is read once.
 * Returns the waiters to keep, as a list. */
static waiter *waiters_round(waiters *w, waiter **all, size_t n, int stop)
{
    waiter *keep = NULL;
    int64_t now = clock_mono_ms();
    if (n == 0)
        return NULL;
    qsort(all, n, sizeof *all, waiter_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && waiter_cmp(&all[i], &all[j]) == 0)
            j++;
        int settled = -1; /* read lazily: a group that only times out costs nothing */
        for (size_t k = i; k < j; k++) {
            waiter *it = all[k];
            if (stop || now >= it->deadline) {
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
                it->next = keep;
                keep = it;
            }
        }
        i = j;
    }
    return keep;
}

static void *waiters_main(void *arg)
{
    waiters *w = arg;
    waiter **all = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        size_t n = 0;
        for (waiter *it = w->head; it; it = it->next)
            n++;
        if (n > cap) {
            waiter **grown = realloc(all, n * sizeof *all);
            if (!grown) {
                /* Try again next round; nothing is lost meanwhile. */
                clock_cond_wait_ms(&w->cv, &w->mu, POLL_MS);
                continue;
            }
            all = grown;
            cap = n;
        }
        n = 0;
        for (waiter *it = w->head; it; it = it->next)
            all[n++] = it;
        w->head = NULL;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        /* Read outside the lock: adds must not wait for the store. */
        waiter *keep = waiters_round(w, all, n, stop);
        pthread_mutex_lock(&w->mu);
        while (keep) {
            waiter *it = keep;
            keep = it->next;
            it->next = w->head;
            w->head = it;
        }
        if (stop && !w->head)
            break;
        if (w->head && !w->stop)
            clock_cond_wait_ms(&w->cv, &w->mu, POLL_MS);
    }
    pthread_mutex_unlock(&w->mu);
    free(all);
    return NULL;
}

int waiters_start(server *srv, waiters **out)
{
    waiters *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->srv = srv;
    pthread_mutex_init(&w->mu, NULL);
    if (clock_cond_init(&w->cv) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return -1;
    }
    if (pthread_create(&w->thread, NULL, waiters_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void waiters_stop(waiters *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
}

void waiters_free(waiters *w)
{
    if (!w)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
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
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        free(it);
        return -1;
    }
    it->next = w->head;
    w->head = it;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}
