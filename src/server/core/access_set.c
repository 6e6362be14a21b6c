/*
 * access_set.c — generations of tokens and agents (see access_set.h).
 */
#include "server/core/access_set.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/check.h"
#include "server/core/refcount.h"

struct access_set {
    refcount holders; /* the sets (while current) and each request that holds it */
    once_config view; /* the start's config with this generation's tokens and agents */
    once_config *owned; /* the reloaded config they came from; NULL for the start's */
};

struct access_sets {
    pthread_mutex_t mu;
    access_set *current; /* under mu */
};

/* A generation over base with the tokens and agents of from. */
static access_set *access_set_new(const once_config *base, const once_config *from, once_config *owned)
{
    access_set *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    refcount_init(&g->holders, 1);
    g->view = *base;
    g->view.tokens = from->tokens;
    g->view.ntokens = from->ntokens;
    g->view.agents = from->agents;
    g->view.nagents = from->nagents;
    g->view.agents_closed = from->agents_closed;
    g->owned = owned;
    return g;
}

int access_sets_init(access_sets **out, const once_config *cfg)
{
    access_sets *s = calloc(1, sizeof *s);
    if (s == NULL || (s->current = access_set_new(cfg, cfg, NULL)) == NULL) {
        free(s);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void access_set_drop(access_set *g)
{
    if (g == NULL || !refcount_drop(&g->holders))
        return;
    if (g->owned != NULL) {
        config_free(g->owned);
        free(g->owned);
    }
    free(g);
}

void access_sets_free(access_sets *s)
{
    if (s == NULL)
        return;
    access_set_drop(s->current);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

access_set *access_sets_hold(access_sets *s)
{
    pthread_mutex_lock(&s->mu);
    access_set *g = s->current;
    refcount_hold(&g->holders);
    pthread_mutex_unlock(&s->mu);
    return g;
}

const once_config *access_set_cfg(const access_set *g)
{
    return &g->view;
}

int access_sets_swap(access_sets *s, once_config *loaded)
{
    pthread_mutex_lock(&s->mu);
    access_set *old = s->current;
    access_set *g = access_set_new(&old->view, loaded, loaded);
    if (g != NULL)
        s->current = g;
    pthread_mutex_unlock(&s->mu);
    if (g == NULL) {
        config_free(loaded);
        free(loaded);
        return -1;
    }
    access_set_drop(old);
    return 0;
}
