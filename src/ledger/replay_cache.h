/*
 * replay_cache.h — completed outcomes kept in memory, so that a replay (the
 * same key again after its answer was recorded) is answered without reading
 * the store.
 */
#ifndef ONCE_LEDGER_REPLAY_CACHE_H
#define ONCE_LEDGER_REPLAY_CACHE_H

#include <stdint.h>

#include "once/once.h"

typedef struct replay_cache replay_cache;

/* A cache of REPLAY_CACHE_SLOTS entries of at most REPLAY_CACHE_ENTRY_MAX
 * bytes each. 0, or ONCE_ENOMEM. */
int replay_cache_new(replay_cache **out);
void replay_cache_free(replay_cache *c);

/* 1 with *out a copy (the caller frees it with once_action_free) when
 * (scope, key) is cached as COMPLETED with expires_at > now; 0 when it is
 * not; ONCE_ENOMEM when the copy could not be made. */
int replay_cache_get(replay_cache *c, const char *scope, const char *key, int64_t now, once_action *out);

/* Keeps a copy of a COMPLETED action, replacing whatever shared its slot.
 * Other states and actions over REPLAY_CACHE_ENTRY_MAX bytes are ignored,
 * as is a failed allocation (the cache only saves reads). */
void replay_cache_put(replay_cache *c, const once_action *a);

#define REPLAY_CACHE_SLOTS 2048
#define REPLAY_CACHE_ENTRY_MAX (16u * 1024)

#endif
