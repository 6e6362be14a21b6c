/*
 * access_set.h — the tokens and [agent.NAME] sections requests are
 * admitted with, as one generation that a reload (SIGHUP) replaces. Each
 * request holds the generation it began with until it ends, so a request
 * in flight finishes under the grants it started with while the next one
 * sees the new file; a generation is freed when its last request ends.
 * Everything else in the config is the start's: a reload changes who may
 * do what, not where requests go.
 */
#ifndef ONCE_SERVER_CORE_ACCESS_SET_H
#define ONCE_SERVER_CORE_ACCESS_SET_H

#include "server/config/config.h"

typedef struct access_sets access_sets; /* the current generation, swapped by a reload */
typedef struct access_set access_set;   /* one generation */

/* Starts with the generation of cfg (borrowed: it outlives the sets). 0 or
 * -1 (out of memory). */
int access_sets_init(access_sets **out, const once_config *cfg);
/* After the last request: frees every generation. */
void access_sets_free(access_sets *s);

/* The current generation, held for one request; access_set_drop lets go. */
access_set *access_sets_hold(access_sets *s);
void access_set_drop(access_set *g);

/* The config a request decides access and grants with: the start's, with
 * the generation's tokens, agents and agents = open|closed. */
const once_config *access_set_cfg(const access_set *g);

/* Makes the tokens and agents of loaded (a config read again from the same
 * file, malloc'd; owned from here on: freed with its generation) the
 * current ones. Requests that hold the old generation keep it. 0, or -1
 * (out of memory: loaded is freed and the current generation stays). */
int access_sets_swap(access_sets *s, once_config *loaded);

#endif
