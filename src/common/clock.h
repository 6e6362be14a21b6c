/*
 * clock.h — the monotonic clock, and condition variables that wait on it.
 *
 * Deadlines inside the process (leases are wall-clock and live in the
 * ledger) are measured on CLOCK_MONOTONIC, so a wall-clock step (NTP, a
 * VM resumed) neither fires them early nor holds them for hours.
 */
#ifndef ONCE_COMMON_CLOCK_H
#define ONCE_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* Milliseconds on the monotonic clock (an arbitrary origin). */
int64_t clock_mono_ms(void);
/* Seconds on the monotonic clock, with sub-millisecond precision. */
double clock_mono_seconds(void);

/* Initialises cv to time its waits on the monotonic clock. 0 or an errno. */
int clock_cond_init(pthread_cond_t *cv);
/* Waits on cv (initialised by clock_cond_init) for at most ms milliseconds.
 * Returns pthread_cond_timedwait's result (0 or ETIMEDOUT). */
int clock_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

#endif
