/*
 * looper.h — a thread that does one round of work, then waits a period (or
 * until kicked), until it is stopped: the shape of the gateway's background
 * loops (lease expiry and holds, lease renewal, the slow-client reaper).
 * Waits are on the monotonic clock.
 */
#ifndef ONCE_COMMON_LOOPER_H
#define ONCE_COMMON_LOOPER_H

#include <pthread.h>
#include <stdint.h>

typedef struct looper {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop;
    int kicked;
    int started;
    int64_t period_ms;
    void (*round)(void *arg);
    void *arg;
} looper;

/* Starts the thread: round(arg) now, then every period_ms or sooner when
 * kicked. round runs without the looper's lock. 0, or -1 (nothing to stop). */
int looper_start(looper *l, int64_t period_ms, void (*round)(void *arg), void *arg);

/* Runs a round soon. Any thread. */
void looper_kick(looper *l);

/* Lets the current round finish, stops and joins the thread; no round runs
 * afterwards. Harmless on a looper that never started (zeroed). */
void looper_stop(looper *l);

#endif
