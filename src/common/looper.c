/*
 * looper.c — background loops (see looper.h).
 */
#include "common/looper.h"

#include "common/check.h"
#include "common/clock.h"

/* Sleeps, under l->mu, as the last round asked, unless something is
 * already waiting for a round: a kick, a post, or a phase the round has not
 * seen yet. A lazy post made while the round ran did not signal (the loop
 * was not idle then): without the head check, a round that then went idle
 * would sleep on it for ever. */
static void looper_wait(looper *l, looper_phase seen, int64_t wait_ms)
{
    l->idle = wait_ms == LOOPER_IDLE;
    if (l->kicked || l->head || l->phase != seen || wait_ms == 0)
        return;
    if (l->idle)
        pthread_cond_wait(&l->cv, &l->mu);
    else
        clock_cond_wait_ms(&l->cv, &l->mu, wait_ms);
}

static void *looper_main(void *arg)
{
    looper *l = arg;
    pthread_setname_np(pthread_self(), l->name);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        looper_phase phase = l->phase;
        looper_item *posted = l->head;
        l->head = l->tail = NULL;
        l->kicked = 0;
        l->idle = 0;
        pthread_mutex_unlock(&l->mu);
        int64_t wait_ms = l->round(l->arg, phase, posted);
        pthread_mutex_lock(&l->mu);
        if (wait_ms == LOOPER_DONE) {
            ONCE_ASSERT(phase == LOOPER_STOPPING && !l->head);
            break;
        }
        looper_wait(l, phase, wait_ms);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int looper_start(looper *l, const char *name, looper_round_fn round, void *arg)
{
    *l = (looper){.round = round, .arg = arg, .name = name, .phase = LOOPER_RUNNING};
    pthread_mutex_init(&l->mu, NULL);
    if (clock_cond_init(&l->cv) != 0) {
        pthread_mutex_destroy(&l->mu);
        return -1;
    }
    if (pthread_create(&l->thread, NULL, looper_main, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        return -1;
    }
    l->started = 1;
    return 0;
}

void looper_kick(looper *l)
{
    pthread_mutex_lock(&l->mu);
    l->kicked = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int looper_post(looper *l, looper_item *it, int urgent)
{
    it->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->phase == LOOPER_STOPPING && !urgent) {
        /* An urgent post is a completion the stopping rounds wait for; a
         * lazy one is new work that nothing would read. */
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    if (urgent || l->idle) {
        l->kicked = 1;
        pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Moves the loop to a later phase (never back) and wakes it. */
static void looper_advance(looper *l, looper_phase phase)
{
    pthread_mutex_lock(&l->mu);
    if (l->phase < phase)
        l->phase = phase;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void looper_quiesce(looper *l)
{
    if (l->started && !l->joined)
        looper_advance(l, LOOPER_QUIESCED);
}

void looper_stop(looper *l)
{
    if (!l->started || l->joined)
        return;
    looper_advance(l, LOOPER_STOPPING);
    pthread_join(l->thread, NULL);
    l->joined = 1;
}

void looper_close(looper *l)
{
    if (!l->started)
        return;
    ONCE_ASSERT(l->joined);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    l->started = 0;
}
