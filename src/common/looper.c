/*
 * looper.c — background loops (see looper.h).
 */
#include "common/looper.h"

#include "common/clock.h"

static void *looper_main(void *arg)
{
    looper *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        l->kicked = 0;
        pthread_mutex_unlock(&l->mu);
        l->round(l->arg);
        pthread_mutex_lock(&l->mu);
        if (!l->stop && !l->kicked)
            clock_cond_wait_ms(&l->cv, &l->mu, l->period_ms);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int looper_start(looper *l, int64_t period_ms, void (*round)(void *arg), void *arg)
{
    *l = (looper){.period_ms = period_ms, .round = round, .arg = arg};
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

void looper_stop(looper *l)
{
    if (!l->started)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    l->started = 0;
}
