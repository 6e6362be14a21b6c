/*
 * jwks.h — the identity provider's signing keys, kept current off the
 * request path ([auth], docs/auth.md). The JWKS (found by OpenID / RFC 8414
 * discovery from the issuer unless jwks_url is set) is fetched through the
 * outbound client (libcurl, TLS verified, plain http to loopback only) at
 * start, when the set is an hour old, and when a token names a kid the set
 * lacks — at most once a minute (the start's fetch aside). A failed fetch keeps the keys there are:
 * cached keys keep working while the issuer is down, and a new kid is
 * refused, never accepted. A request never waits for a fetch: a token with
 * an unknown kid is answered 401 at once while the refresh runs, and the
 * client's next try finds the key.
 */
#ifndef ONCE_SERVER_CORE_JWKS_H
#define ONCE_SERVER_CORE_JWKS_H

#include <stdint.h>

#include "server/config/config.h"
#include "server/core/jwt.h"
#include "server/core/outbound.h"

#define JWKS_REFRESH_MIN_MS 60000     /* never two fetches for unknown kids within a minute */
#define JWKS_MAX_AGE_MS 3600000       /* a set this old is fetched again (from a request, in the background) */
#define JWKS_FIRST_WAIT_MS 5000       /* how long the start waits for the first set */
#define JWKS_FETCH_TIMEOUT_MS 10000
#define JWKS_DOC_MAX ((size_t)1 << 20)

typedef struct jwks jwks;

/* Starts keeping cfg's keys (cfg borrowed, outlives it) through ob, and
 * waits up to JWKS_FIRST_WAIT_MS for the first set (a failure is logged;
 * the gateway serves, refusing tokens until a fetch succeeds). 0 or -1. */
int jwks_start(jwks **out, const auth_cfg *cfg, outbound *ob);
/* After outbound_stop (no fetch runs any more). */
void jwks_free(jwks *j);

/* The current set, held (jwt_keyset_drop when done), or NULL when none
 * was ever fetched. Starts a background fetch when the set is older than
 * JWKS_MAX_AGE_MS. Any thread. */
jwt_keyset *jwks_hold(jwks *j);

/* A token named a kid the set lacks: fetch again unless a fetch ran in the
 * last JWKS_REFRESH_MIN_MS. Never waits. 1 when a fetch was started. */
int jwks_unknown_kid(jwks *j);

/* Whether a fetch may start at now_ms: none running, and the last began
 * at least min_ms ago (last_ms < 0: never). The rule jwks follows, apart
 * for the unit tests. */
int jwks_may_fetch(int64_t now_ms, int64_t last_ms, int fetching, int64_t min_ms);

#endif
