/*
 * replay_cache.c — completed outcomes kept in memory.
 *
 * Why it is safe: COMPLETED is terminal. No operation changes a completed
 * row (a repeated complete changes nothing, resolve and the reconciler only
 * touch UNKNOWN and HELD rows); the only thing that ends it is its retention,
 * after which sweeps delete it and the key is new again. So an entry stays
 * exactly as true as the row, as long as expires_at > now — the test every
 * store applies to a completed row it reads, with the same clock (the
 * ledger's). That holds with several gateways on one PostgreSQL database too.
 *
 * Why it exists: a replay read is a SQLite read transaction, whose WAL lock
 * takes a mutex shared by every connection of the process; with several HTTP
 * threads replaying at once that mutex was the gateway's busiest lock.
 *
 * Shape: a direct-mapped table (an entry replaces whatever shared its slot)
 * with striped mutexes; entries are bounded in number and size, so the cache
 * never holds more than REPLAY_CACHE_SLOTS x REPLAY_CACHE_ENTRY_MAX bytes.
 */
#include "ledger/replay_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define STRIPES 64

struct replay_cache {
    pthread_mutex_t mu[STRIPES];
    once_action *slot[REPLAY_CACHE_SLOTS]; /* owned; NULL when empty */
    uint64_t hash[REPLAY_CACHE_SLOTS];
};

/* FNV-1a over scope, a separator no scope contains, and key. */
static uint64_t slot_hash(const char *scope, const char *key)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = scope; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    h = (h ^ 0xffu) * 1099511628211ULL;
    for (const char *p = key; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    return h;
}

int replay_cache_new(replay_cache **out)
{
    replay_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ONCE_ENOMEM;
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&c->mu[i], NULL);
    *out = c;
    return ONCE_OK;
}

void replay_cache_free(replay_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < REPLAY_CACHE_SLOTS; i++) {
        once_action_free(c->slot[i]);
        free(c->slot[i]);
    }
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_destroy(&c->mu[i]);
    free(c);
}

/* A NUL-terminated copy of n bytes (n + 1 allocated); NULL stays NULL. */
static int dup_bytes(const void *src, size_t n, void **dst)
{
    *dst = NULL;
    if (!src)
        return 0;
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, src, n);
    p[n] = '\0';
    *dst = p;
    return 0;
}

static int dup_str(const char *src, char **dst)
{
    return dup_bytes(src, src ? strlen(src) : 0, (void **)dst);
}

/* A deep copy of *src into *dst; on failure *dst is freed and zeroed. */
static int action_copy(const once_action *src, once_action *dst)
{
    *dst = *src;
    dst->scope = dst->key = dst->fingerprint = dst->provider_id = dst->error = dst->note = dst->trail = NULL;
    dst->decided_by = dst->decision_note = dst->agent = NULL;
    dst->request = NULL;
    dst->response.headers = NULL;
    dst->response.body = NULL;
    int rc = 0;
    rc |= dup_str(src->scope, &dst->scope);
    rc |= dup_str(src->key, &dst->key);
    rc |= dup_str(src->fingerprint, &dst->fingerprint);
    rc |= dup_str(src->provider_id, &dst->provider_id);
    rc |= dup_str(src->error, &dst->error);
    rc |= dup_str(src->note, &dst->note);
    rc |= dup_str(src->trail, &dst->trail);
    rc |= dup_str(src->decided_by, &dst->decided_by);
    rc |= dup_str(src->decision_note, &dst->decision_note);
    rc |= dup_str(src->agent, &dst->agent);
    rc |= dup_bytes(src->request, src->request_len, (void **)&dst->request);
    rc |= dup_bytes(src->response.headers, src->response.headers_len, (void **)&dst->response.headers);
    rc |= dup_bytes(src->response.body, src->response.body_len, (void **)&dst->response.body);
    if (rc) {
        once_action_free(dst);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

static size_t action_size(const once_action *a)
{
    size_t n = a->request_len + a->response.headers_len + a->response.body_len;
    const char *s[] = {a->scope, a->key, a->fingerprint, a->provider_id, a->error,
                       a->note, a->trail, a->decided_by, a->decision_note, a->agent};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        n += s[i] ? strlen(s[i]) : 0;
    return n;
}

int replay_cache_get(replay_cache *c, const char *scope, const char *key, int64_t now, once_action *out)
{
    uint64_t h = slot_hash(scope, key);
    size_t i = (size_t)(h % REPLAY_CACHE_SLOTS);
    pthread_mutex_t *mu = &c->mu[i % STRIPES];
    int rc = 0;
    pthread_mutex_lock(mu);
    const once_action *a = c->slot[i];
    if (a && c->hash[i] == h && a->expires_at > now && strcmp(a->scope, scope) == 0 && strcmp(a->key, key) == 0)
        rc = action_copy(a, out) < 0 ? ONCE_ENOMEM : 1;
    pthread_mutex_unlock(mu);
    return rc;
}

void replay_cache_put(replay_cache *c, const once_action *a)
{
    if (a->state != ONCE_STATE_COMPLETED || !a->scope || !a->key || action_size(a) > REPLAY_CACHE_ENTRY_MAX)
        return;
    once_action *copy = malloc(sizeof *copy);
    if (!copy || action_copy(a, copy) < 0) {
        free(copy);
        return;
    }
    uint64_t h = slot_hash(a->scope, a->key);
    size_t i = (size_t)(h % REPLAY_CACHE_SLOTS);
    pthread_mutex_t *mu = &c->mu[i % STRIPES];
    pthread_mutex_lock(mu);
    once_action *old = c->slot[i];
    c->slot[i] = copy;
    c->hash[i] = h;
    pthread_mutex_unlock(mu);
    once_action_free(old);
    free(old);
}
