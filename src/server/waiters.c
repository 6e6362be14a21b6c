/*
 * waiters.c — requests parked on `Prefer: wait=N` until another attempt's
 * outcome lands. One thread re-checks them every POLL_MS; a wait is bounded
 * (60 s at most), so the list drains by itself.
 */
#include <stdlib.h>
#include <time.h>

#include "server/server.h"

#define POLL_MS 25

typedef struct waiter {
    struct waiter *next;
    void *state;
    int64_t deadline;
    waiter_poll poll;
    waiter_timeout on_timeout;
} waiter;

struct waiters {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    waiter *head;
    int stop;
    pthread_t thread;
};

static void *waiters_main(void *arg)
{
    waiters *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        waiter *list = w->head;
        w->head = NULL;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        /* Poll outside the lock: a poll reads the store. */
        waiter *keep = NULL;
        int64_t now = once_now_ms();
        while (list) {
            waiter *it = list;
            list = it->next;
            if (stop || now >= it->deadline) {
                it->on_timeout(it->state);
                free(it);
            } else if (it->poll(it->state)) {
                free(it);
            } else {
                it->next = keep;
                keep = it;
            }
        }
        pthread_mutex_lock(&w->mu);
        while (keep) {
            waiter *it = keep;
            keep = it->next;
            it->next = w->head;
            w->head = it;
        }
        if (stop && !w->head)
            break;
        if (w->head && !w->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int waiters_start(server *srv, waiters **out)
{
    (void)srv;
    waiters *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
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

int waiters_add(waiters *w, void *state, int64_t deadline, waiter_poll poll, waiter_timeout on_timeout)
{
    waiter *it = malloc(sizeof *it);
    if (!it)
        return -1;
    *it = (waiter){.state = state, .deadline = deadline, .poll = poll, .on_timeout = on_timeout};
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
