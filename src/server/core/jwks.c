/*
 * jwks.c — fetching and caching the issuer's keys (see jwks.h). One fetch
 * at a time, as a short chain of outbound calls whose done callbacks (on
 * the outbound thread) start the next: the OpenID discovery document, else
 * the RFC 8414 one, then the JWKS. The set requests verify with is swapped
 * under the mutex; a request holds the set it began with.
 */
#include "server/core/jwks.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/clock.h"
#include "server/core/log.h"

#define JWKS_URL_MAX 2048

typedef enum jwks_step { STEP_OPENID = 1, STEP_RFC8414 = 2, STEP_KEYS = 3 } jwks_step;

struct jwks {
    const auth_cfg *cfg;
    outbound *ob;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jwt_keyset *cur;    /* under mu */
    int64_t loaded_ms;  /* when cur was fetched (monotonic) */
    int64_t last_ms;    /* when the last fetch began; -1: never */
    int fetching;       /* a fetch runs: only its chain touches what follows */
    int fetches;        /* fetches that ended, for the start's wait */

    jwks_step step;
    char url[JWKS_URL_MAX];
    char *jwks_uri; /* discovered; forgotten when fetching it fails, so the next fetch discovers again */
    const char *headers[1];
    out_call call;
};

int jwks_may_fetch(int64_t now_ms, int64_t last_ms, int fetching, int64_t min_ms)
{
    return !fetching && (last_ms < 0 || now_ms - last_ms >= min_ms);
}

static void jwks_done(out_call *call);

/* Sends the current step's GET. 0, or -1 (refused: the client stops). */
static int jwks_send(jwks *j)
{
    out_call_clear(&j->call);
    j->call = (out_call){.method = "GET",
                         .url = j->url,
                         .headers = j->headers,
                         .nheaders = 1,
                         .timeout_ms = JWKS_FETCH_TIMEOUT_MS,
                         .max_response = JWKS_DOC_MAX,
                         .ca_file = j->cfg->ca_file,
                         .done = jwks_done,
                         .ctx = j};
    return outbound_submit(j->ob, &j->call) == 0 ? 0 : -1;
}

/* The fetch ended: the new set (or NULL, keeping the old one), and the
 * one log line of a failure. Outbound thread, or the starter. */
static void jwks_end(jwks *j, jwt_keyset *fresh, const char *why)
{
    char url[JWKS_URL_MAX];
    memcpy(url, j->url, sizeof url); /* the next fetch may start as soon as this one is marked ended */
    size_t nfresh = jwt_keyset_count(fresh);
    pthread_mutex_lock(&j->mu);
    jwt_keyset *old = NULL;
    size_t cached = jwt_keyset_count(j->cur);
    if (fresh) {
        old = j->cur;
        j->cur = fresh;
        j->loaded_ms = clock_mono_ms();
    }
    j->fetching = 0;
    j->fetches++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    jwt_keyset_drop(old);
    if (fresh)
        log_event("info", "auth: %zu signing key(s) from %s", nfresh, url);
    else
        log_event("warn", "auth: cannot fetch the issuer's keys (%s): %s; %zu cached key(s) stay in use, new kids "
                  "are refused", url, why, cached);
}

/* The first step of a fetch: the JWKS when its URL is known, else
 * discovery. */
static void jwks_begin(jwks *j)
{
    const char *known = j->cfg->jwks_url ? j->cfg->jwks_url : j->jwks_uri;
    if (known) {
        j->step = STEP_KEYS;
        snprintf(j->url, sizeof j->url, "%s", known);
    } else {
        size_t n = strlen(j->cfg->issuer);
        while (n > 0 && j->cfg->issuer[n - 1] == '/')
            n--;
        j->step = STEP_OPENID;
        snprintf(j->url, sizeof j->url, "%.*s/.well-known/openid-configuration", (int)n, j->cfg->issuer);
    }
    if (jwks_send(j) < 0)
        jwks_end(j, NULL, "the outbound client is stopping");
}

/* RFC 8414 3.1: the well-known segment goes between the authority and the
 * issuer's path. */
static void jwks_rfc8414_url(jwks *j)
{
    const char *iss = j->cfg->issuer;
    const char *auth = strstr(iss, "://");
    auth = auth ? auth + 3 : iss;
    size_t alen = strcspn(auth, "/");
    const char *path = auth + alen;
    size_t plen = strlen(path);
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    snprintf(j->url, sizeof j->url, "%.*s/.well-known/oauth-authorization-server%.*s", (int)(auth - iss + alen), iss,
             (int)plen, path);
}

/* A discovery document: its issuer must be ours exactly (RFC 8414 3.3),
 * its jwks_uri one we may fetch keys from. NULL, or why not. */
static const char *jwks_discovered(jwks *j, const buf *body)
{
    json_error_t je;
    json_t *doc = json_loadb((const char *)body->data, body->len, JSON_REJECT_DUPLICATES, &je);
    const char *iss = json_string_value(json_object_get(doc, "issuer"));
    const char *uri = json_string_value(json_object_get(doc, "jwks_uri"));
    const char *why = NULL;
    if (!json_is_object(doc))
        why = "the discovery document is not a JSON object";
    else if (iss == NULL || strcmp(iss, j->cfg->issuer) != 0)
        why = "the discovery document names another issuer";
    else if (uri == NULL || strlen(uri) >= JWKS_URL_MAX)
        why = "the discovery document has no jwks_uri";
    else if (!config_url_transport_ok(uri))
        why = "jwks_uri is plain http to a host that is not loopback";
    else if ((j->jwks_uri = strdup(uri)) == NULL)
        why = "out of memory";
    json_decref(doc);
    return why;
}

static void jwks_done(out_call *call)
{
    jwks *j = call->ctx;
    int ok = call->kind == OUT_ANSWERED && call->status == 200 && call->resp_body.data != NULL;
    char why[300];
    snprintf(why, sizeof why, "%s", call->kind == OUT_ANSWERED ? "" : call->error);
    if (call->kind == OUT_ANSWERED && !ok)
        snprintf(why, sizeof why, "status %ld", call->status);
    if (j->step == STEP_OPENID && !ok && call->kind == OUT_ANSWERED) {
        j->step = STEP_RFC8414;
        jwks_rfc8414_url(j);
        if (jwks_send(j) < 0)
            jwks_end(j, NULL, "the outbound client is stopping");
        return;
    }
    if (!ok) {
        if (j->step == STEP_KEYS && !j->cfg->jwks_url) {
            free(j->jwks_uri);
            j->jwks_uri = NULL;
        }
        jwks_end(j, NULL, why[0] ? why : "no answer");
        return;
    }
    if (j->step != STEP_KEYS) {
        const char *bad = jwks_discovered(j, &call->resp_body);
        if (bad) {
            jwks_end(j, NULL, bad);
            return;
        }
        jwks_begin(j);
        return;
    }
    jwt_keyset *fresh = NULL;
    char err[160];
    if (jwt_keyset_parse((const char *)call->resp_body.data, call->resp_body.len, &fresh, err, sizeof err) < 0) {
        free(j->jwks_uri);
        j->jwks_uri = NULL;
        jwks_end(j, NULL, err);
        return;
    }
    jwks_end(j, fresh, NULL);
}

/* Starts a fetch when the rule allows (min_ms since the last counted
 * one). The start's fetch is not counted, so a kid rotated in during the
 * first minute is still looked for. 1 when it started. */
static int jwks_kick(jwks *j, int64_t min_ms, int counted)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&j->mu);
    int go = jwks_may_fetch(now, j->last_ms, j->fetching, min_ms);
    if (go) {
        j->fetching = 1;
        if (counted)
            j->last_ms = now;
    }
    pthread_mutex_unlock(&j->mu);
    if (go)
        jwks_begin(j);
    return go;
}

int jwks_start(jwks **out, const auth_cfg *cfg, outbound *ob)
{
    jwks *j = calloc(1, sizeof *j);
    if (j == NULL)
        return -1;
    j->cfg = cfg;
    j->ob = ob;
    j->last_ms = -1;
    j->headers[0] = "Accept: application/json";
    pthread_mutex_init(&j->mu, NULL);
    if (clock_cond_init(&j->cv) != 0) {
        pthread_mutex_destroy(&j->mu);
        free(j);
        return -1;
    }
    *out = j;
    jwks_kick(j, 0, 0);
    int64_t until = clock_mono_ms() + JWKS_FIRST_WAIT_MS;
    pthread_mutex_lock(&j->mu);
    while (j->fetches == 0 && clock_mono_ms() < until)
        clock_cond_wait_ms(&j->cv, &j->mu, until - clock_mono_ms());
    pthread_mutex_unlock(&j->mu);
    return 0;
}

void jwks_free(jwks *j)
{
    if (j == NULL)
        return;
    jwt_keyset_drop(j->cur);
    out_call_clear(&j->call);
    free(j->jwks_uri);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

jwt_keyset *jwks_hold(jwks *j)
{
    pthread_mutex_lock(&j->mu);
    jwt_keyset *ks = j->cur;
    if (ks)
        jwt_keyset_hold(ks);
    int old = ks && clock_mono_ms() - j->loaded_ms >= JWKS_MAX_AGE_MS;
    pthread_mutex_unlock(&j->mu);
    if (old)
        jwks_kick(j, JWKS_REFRESH_MIN_MS, 1);
    return ks;
}

int jwks_unknown_kid(jwks *j)
{
    return jwks_kick(j, JWKS_REFRESH_MIN_MS, 1);
}
