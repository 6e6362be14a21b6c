/*
 * lot.h — the parking lot of the HTTP front: how many connections are
 * suspended (waiting for an answer from another thread, or streaming) and
 * must be resumed before the daemons stop, and whether the gateway is
 * stopping. server.c owns one and hands it to the front; the request and
 * the stream park and unpark in it, and the drain at shutdown waits on it.
 * It knows nothing of the routes, so the front needs nothing above it.
 */
#ifndef ONCE_SERVER_FRONT_LOT_H
#define ONCE_SERVER_FRONT_LOT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t parked; /* under mu */
    int stopping;  /* atomic: set once, never cleared */
} lot;

/* 0, or -1 when the mutex or the condition cannot be made. */
int lot_init(lot *l);
/* After the last park and unpark. */
void lot_close(lot *l);

/* Counts a connection that may be suspended; any thread. */
void lot_park(lot *l);
/* Its end; wakes the drain. */
void lot_unpark(lot *l);
/* Waits until nothing is parked or wait_ms pass: what is left. */
size_t lot_drain(lot *l, int64_t wait_ms);

/* From now on nothing new starts (every thread sees it at once). */
void lot_stop(lot *l);
/* Whether lot_stop was called. */
int lot_stopping(lot *l);

#endif
