/*
 * waiters.h — Prefer: wait: requests parked until another attempt's outcome
 * (or their deadline), checked by one thread that shares one store read per
 * action and round among its waiters.
 */
#ifndef ONCE_SERVER_CORE_WAITERS_H
#define ONCE_SERVER_CORE_WAITERS_H

#include <stdint.h>

#include "once/once.h"
#include "server/core/services.h"

int waiters_start(server *srv, waiters **out);
/* Answers everything still waiting (on_timeout) and stops; later adds fail. */
void waiters_stop(waiters *w);
/* Frees stopped waiters once no HTTP thread can reach them. */
void waiters_free(waiters *w);
/* Parks state until the action (scope, key) is no longer pending under a
 * live lease — then on_settled(state) — or until deadline (monotonic ms,
 * clock.h) passes — then on_timeout(state). Both run on the waiter thread;
 * waiters of one action share one store read per round. 0, or -1 (out of
 * memory, or stopping). */
typedef void (*waiter_fn)(void *state);
int waiters_add(waiters *w, const char *scope, const char *key, void *state, int64_t deadline,
                waiter_fn on_settled, waiter_fn on_timeout);

/* Prefer: wait, for a reservation that found the row of (scope, key) in
 * the given status: parks state (waiters_add) when there is wait left
 * (deadline, monotonic ms, in the future) and the row may still change —
 * in flight, or awaiting approval when for_decision says this caller may
 * wait for the decision (the stored request is its own). 1 parked, 0 not
 * (the caller answers from the row now). */
int waiters_park(waiters *w, const char *scope, const char *key, once_reserve_status status, int for_decision,
                 void *state, int64_t deadline, waiter_fn on_settled, waiter_fn on_timeout);

/* Prefer: wait=N in seconds (at most 60) as milliseconds, 0 for none (and
 * for anything malformed: the header is a preference, never an error). */
int64_t waiters_prefer_wait(const char *prefer);

#endif
