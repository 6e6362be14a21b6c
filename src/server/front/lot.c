/*
 * lot.c — the parking lot and the stopping flag (see lot.h).
 */
#include "server/front/lot.h"

#include <errno.h>

#include "common/check.h"
#include "common/clock.h"

int lot_init(lot *l)
{
    l->parked = 0;
    l->stopping = 0;
    if (pthread_mutex_init(&l->mu, NULL) != 0)
        return -1;
    if (clock_cond_init(&l->cv) != 0) {
        pthread_mutex_destroy(&l->mu);
        return -1;
    }
    return 0;
}

void lot_close(lot *l)
{
    ONCE_ASSERT(l->parked == 0 || l->stopping);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}

void lot_park(lot *l)
{
    pthread_mutex_lock(&l->mu);
    l->parked++;
    pthread_mutex_unlock(&l->mu);
}

void lot_unpark(lot *l)
{
    pthread_mutex_lock(&l->mu);
    ONCE_ASSERT(l->parked > 0); /* an unpark without its park: a connection resumed twice */
    l->parked--;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

size_t lot_drain(lot *l, int64_t wait_ms)
{
    int64_t deadline = clock_mono_ms() + wait_ms;
    pthread_mutex_lock(&l->mu);
    while (l->parked > 0) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0 || clock_cond_wait_ms(&l->cv, &l->mu, left) == ETIMEDOUT)
            break;
    }
    size_t left = l->parked;
    pthread_mutex_unlock(&l->mu);
    return left;
}

void lot_stop(lot *l)
{
    __atomic_store_n(&l->stopping, 1, __ATOMIC_RELEASE);
}

int lot_stopping(lot *l)
{
    return __atomic_load_n(&l->stopping, __ATOMIC_ACQUIRE);
}
