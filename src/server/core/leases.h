/*
 * leases.h — the leases of this node's calls in flight, renewed
 * (docs/guarantees.md §4, "Leases renew"). A reservation lives `lease` without news from its owner; while a
 * call runs, its owner renews it every lease/3, in one batch per round
 * (the renewals queued together share one group commit). So a dead node's
 * actions are taken over within one lease, whatever the upstream timeout,
 * and a live call is never mistaken for a dead one.
 *
 * A renewal refused because the row is no longer this attempt's pending
 * one (another node expired it) stops renewing that call; its answer, when
 * it comes, is still recorded — as a late completion. A renewal that fails
 * for any other reason (the store is down) is tried again next round.
 */
#ifndef ONCE_SERVER_LEASES_H
#define ONCE_SERVER_LEASES_H

#include <stdint.h>

#include "once/once.h"

typedef struct leases leases;
typedef struct lease_hold lease_hold;

/* Starts the renewing thread. 0 or -1. */
int leases_start(once_store *store, leases **out);
/* Stops renewing (after every call was dropped or the calls were ended) and
 * frees. NULL is fine. */
void leases_free(leases *l);

/* Renews (scope, key, token)'s lease every lease_ms/3 until dropped; the
 * strings are copied. NULL when out of memory: the call then runs
 * unrenewed (its lease may run out; its answer is then a late completion,
 * which is safe). Any thread. */
lease_hold *leases_hold(leases *l, const char *scope, const char *key, const char *token, int64_t lease_ms);
/* The call ended: no more renewals. NULL is fine. Any thread. */
void leases_drop(leases *l, lease_hold *h);

/* How many calls' leases are held now, and renewals failed so far (for
 * metrics). */
size_t leases_held(leases *l);
uint64_t leases_failures(leases *l);

#endif
