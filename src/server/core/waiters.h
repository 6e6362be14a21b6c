/*
 * waiters.h — Prefer: wait: requests parked until another attempt's outcome
 * (or their deadline), checked by one thread that shares one store read per
 * action and round among its waiters.
 */
#ifndef ONCE_SERVER_CORE_WAITERS_H
#define ONCE_SERVER_CORE_WAITERS_H

#include <stdint.h>

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

#endif
