/*
 * looper.c — background loops and the jobs built on them (see looper.h).
 */
#include "common/looper.h"

#include <stdlib.h>

#include "common/check.h"
#include "common/clock.h"

/* ---- the loop ---------------------------------------------------------- */

/* Sleeps, under l->mu, as the last round asked, unless something is
 * already waiting for a round: a kick, a post, or a phase the round has not
 * seen yet. A lazy post made while the round ran did not signal (the loop
 * was not idle then): without the head check, a round that then went idle
 * would sleep on it for ever. */
static void looper_wait(looper *l, looper_phase seen, int64_t wait_ms)
{
    l->idle = wait_ms == LOOPER_IDLE;
    if (l->kicked || l->posted.head || l->phase != seen || wait_ms == 0)
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
        looper_item *posted = fifo_take(&l->posted);
        l->kicked = 0;
        l->idle = 0;
        pthread_mutex_unlock(&l->mu);
        int64_t wait_ms = l->round(l->arg, phase, posted);
        pthread_mutex_lock(&l->mu);
        if (wait_ms == LOOPER_DONE) {
            ONCE_ASSERT(phase == LOOPER_STOPPING && !l->posted.head);
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
    pthread_mutex_lock(&l->mu);
    if (l->phase == LOOPER_STOPPING && !urgent) {
        /* An urgent post is a completion the stopping rounds wait for; a
         * lazy one is new work that nothing would read. */
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    fifo_push(&l->posted, it);
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

/* ---- jobs -------------------------------------------------------------- */

/* running and due_at belong to the job's thread. */
struct looper_job {
    looper loop;
    const looper_job_ops *ops;
    void *arg;
    size_t running; /* handed off and not yet back */
    int64_t due_at; /* monotonic ms of the earliest retry due; 0: none */
};

/* The wait after a running round: claim's, unless a retry falls due
 * sooner (then until it, and it is forgotten: this wait covers it). */
static int64_t job_wait(looper_job *j, int64_t wait_ms)
{
    if (!j->due_at)
        return wait_ms;
    int64_t left = j->due_at - clock_mono_ms();
    if (left < 0)
        left = 0;
    if (wait_ms != LOOPER_IDLE && wait_ms < left)
        return wait_ms;
    j->due_at = 0;
    return left;
}

/* One round of every job: settles the hand-offs that came back (while
 * stopping too: what the stop cut is settled, never dropped), then, while
 * running, claims. Quiesced it only settles; stopping it ends once nothing
 * is out. */
static int64_t job_round(void *arg, looper_phase phase, looper_item *posted)
{
    looper_job *j = arg;
    ONCE_ASSERT_THREAD(j->loop.thread); /* running and due_at are this thread's */
    for (looper_item *it = posted, *next; it; it = next) {
        next = it->next;
        ONCE_ASSERT(j->running > 0); /* each hand-off comes back once */
        j->running--;
        j->ops->settle(j, phase, it);
    }
    if (phase != LOOPER_RUNNING)
        return phase == LOOPER_STOPPING && j->running == 0 ? LOOPER_DONE : LOOPER_IDLE;
    return job_wait(j, j->ops->claim(j));
}

int looper_job_start(const looper_job_ops *ops, void *arg, looper_job **out)
{
    looper_job *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->ops = ops;
    j->arg = arg;
    if (looper_start(&j->loop, ops->name, job_round, j) < 0) {
        free(j);
        return -1;
    }
    *out = j;
    return 0;
}

void *looper_job_arg(const looper_job *j)
{
    return j->arg;
}

void looper_job_handed(looper_job *j)
{
    ONCE_ASSERT_THREAD(j->loop.thread);
    j->running++;
}

void looper_job_back(looper_job *j, looper_item *it)
{
    looper_post(&j->loop, it, 1); /* urgent: never refused */
}

void looper_job_due(looper_job *j, int64_t delay_ms)
{
    ONCE_ASSERT_THREAD(j->loop.thread);
    int64_t at = clock_mono_ms() + delay_ms;
    if (j->due_at == 0 || at < j->due_at)
        j->due_at = at;
}

void looper_job_kick(looper_job *j)
{
    if (j)
        looper_kick(&j->loop);
}

void looper_job_quiesce(looper_job *j)
{
    if (j)
        looper_quiesce(&j->loop);
}

void looper_job_stop(looper_job *j)
{
    if (j)
        looper_stop(&j->loop);
}

void looper_job_free(looper_job *j)
{
    if (!j)
        return;
    looper_close(&j->loop);
    free(j);
}
