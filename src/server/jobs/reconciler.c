/*
 * reconciler.c — settling unknown actions by asking the provider, never by
 * sending again.
 *
 * For each upstream with a `lookup`, one thread claims unknown actions whose
 * next lookup is due (a claim keeps other nodes off them), asks the provider
 * with the lookup request built from the stored original request, and
 * records what it learnt: found -> completed with the lookup's answer and
 * provider id (retries replay it); absent -> released (the next attempt may
 * send); anything else -> tried again after lookup_backoff, doubling, and
 * held for a human after lookup_attempts. Each step lands in the action's
 * trail (`once show`). The thread is a looper_job (common/looper.h): its
 * stop waits for every lookup in flight to come back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/json_pointer.h"
#include "common/looper.h"
#include "server/core/stored_request.h"
#include "server/core/upstream_rules.h"
#include "server/core/log.h"
#include "common/pct.h"
#include "server/jobs/jobs.h"
#include "server/jobs/reconciler.h"
#include "server/core/target.h"

#define CLAIM_MAX 16
#define IDLE_WAIT_MS 500
#define URL_MAX 8192

typedef struct lookup {
    looper_item item; /* first: posted back by the outbound thread */
    looper_job *job;  /* the reconciler's, to which the call comes back */
    const upstream_cfg *up;
    once_action action;
    char *url;
    out_call call;
} lookup;

static void lookup_free(lookup *l)
{
    once_action_free(&l->action);
    free(l->url);
    out_call_clear(&l->call);
    free(l);
}

/* ---- the lookup request ---------------------------------------------------- */

/* The value of a stored request header (headers: [[n, v], …], or NULL). */
static const char *meta_header(json_t *headers, const char *name, size_t nlen)
{
    size_t i;
    json_t *pair;
    json_array_foreach(headers, i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        if (n && strlen(n) == nlen && strncasecmp(n, name, nlen) == 0)
            return json_string_value(json_array_get(pair, 1));
    }
    return NULL;
}

/* Fills {key}, {scope}, {json:/ptr} and {header:Name} of the lookup path
 * from the stored original request (each value percent-encoded), then
 * builds the URL on the upstream's base with the URL API (target.h): a
 * stored value can never change where the lookup goes. *out is malloc'd.
 * -1 with why when a field is missing or the URL cannot be built. */
static int lookup_url(const upstream_cfg *up, const once_action *a, char **out, char *why, size_t whylen)
{
    stored_request sr;
    json_t *body = NULL, *headers = NULL;
    char ignored[128];
    int proxied = a->request && stored_request_decode(a->request, a->request_len, &sr, ignored, sizeof ignored) == 0;
    if (proxied) {
        /* The proxy's stored request (stored_request.h): fields come from
         * the body it forwarded, text or base64. */
        if (sr.body)
            body = json_loadb((const char *)sr.body, sr.body_len, JSON_DECODE_ANY, NULL);
        headers = sr.headers;
    } else if (a->request) {
        /* The actions API stores the agent's "request" as it is. */
        body = json_loadb((const char *)a->request, a->request_len, JSON_DECODE_ANY, NULL);
    }
    buf path = {0};
    int rc = 0;
    for (const char *p = up->lookup_path; rc == 0 && *p;) {
        if (*p != '{') {
            size_t n = strcspn(p, "{");
            rc = buf_append(&path, p, n, URL_MAX);
            p += n;
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end) {
            rc = -1;
            break;
        }
        const char *f = p + 1;
        size_t flen = (size_t)(end - f);
        char text[512];
        const char *v = NULL;
        if (flen == 3 && strncmp(f, "key", 3) == 0) {
            v = a->key;
        } else if (flen == 5 && strncmp(f, "scope", 5) == 0) {
            v = a->scope;
        } else if (flen > 7 && strncmp(f, "header:", 7) == 0) {
            v = meta_header(headers, f + 7, flen - 7);
        } else if (flen >= 5 && strncmp(f, "json:", 5) == 0) {
            char ptr[256];
            snprintf(ptr, sizeof ptr, "%.*s", (int)(flen - 5), f + 5);
            if (body && json_pointer_text(body, ptr, text, sizeof text) == 0)
                v = text;
        }
        if (!v) {
            snprintf(why, whylen, "the stored request has no %.*s for the lookup", (int)flen, f);
            rc = -1;
            break;
        }
        rc = pct_encode(&path, v, strlen(v), URL_MAX);
        p = end + 1;
    }
    json_decref(body);
    if (proxied)
        stored_request_free(&sr);
    if (rc == 0 && target_url(up->url, path.data ? (const char *)path.data : "", out, why, whylen) < 0)
        rc = -1;
    buf_free(&path);
    if (rc < 0 && !why[0])
        snprintf(why, whylen, "the lookup URL could not be built");
    return rc;
}

/* ---- what the provider said ------------------------------------------------ */

typedef enum lookup_finding { V_FOUND, V_ABSENT, V_ERROR } lookup_finding;

static int json_is_emptyish(json_t *v)
{
    return !v || json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0) || (json_is_string(v) && json_string_length(v) == 0);
}

static lookup_finding lookup_verdict(const upstream_cfg *up, const out_call *c, char *provider_id, size_t pidlen, char *why,
                              size_t whylen)
{
    if (c->kind != OUT_ANSWERED) {
        snprintf(why, whylen, "%s", c->error[0] ? c->error : "no answer");
        return V_ERROR;
    }
    for (size_t i = 0; i < up->nlookup_absent_status; i++) {
        if (c->status == up->lookup_absent_status[i]) {
            snprintf(why, whylen, "absent (status %ld)", c->status);
            return V_ABSENT;
        }
    }
    if (c->status < 200 || c->status > 299) {
        snprintf(why, whylen, "status %ld", c->status);
        return V_ERROR;
    }
    json_t *doc = c->resp_body.len ? json_loadb((const char *)c->resp_body.data, c->resp_body.len, 0, NULL) : NULL;
    lookup_finding v = V_ERROR;
    const char *found_ptr = up->lookup_found && strncmp(up->lookup_found, "json:", 5) == 0 ? up->lookup_found + 5 : NULL;
    if (doc && found_ptr && json_pointer_text(doc, found_ptr, provider_id, pidlen) == 0 && provider_id[0]) {
        snprintf(why, whylen, "found %s", provider_id);
        v = V_FOUND;
    } else {
        for (size_t i = 0; doc && i < up->nlookup_absent_empty; i++) {
            const char *ptr = up->lookup_absent_empty[i];
            if (json_is_emptyish(json_pointer_get(doc, ptr))) {
                snprintf(why, whylen, "absent (%s empty)", ptr);
                v = V_ABSENT;
                break;
            }
        }
        if (v == V_ERROR)
            snprintf(why, whylen, "status %ld, but neither found nor absent in the answer", c->status);
    }
    json_decref(doc);
    return v;
}

/* On the reconciler thread: records what one lookup found. */
static void lookup_record(server *srv, lookup *l)
{
    const upstream_cfg *up = l->up;
    once_action *a = &l->action;
    char pid[ONCE_PROVIDER_ID_MAX + 1] = "", why[300] = "", step[400];
    lookup_finding v = lookup_verdict(up, &l->call, pid, sizeof pid, why, sizeof why);
    int64_t n = a->lookups + 1;
    snprintf(step, sizeof step, "lookup %lld: %s", (long long)n, why);
    int rc;
    if (v == V_FOUND) {
        once_response resp = {.status = (int)l->call.status,
                              .headers = (char *)l->call.resp_headers.data,
                              .headers_len = l->call.resp_headers.len,
                              .body = l->call.resp_body.data,
                              .body_len = l->call.resp_body.len};
        rc = once_reconcile(srv->store, a->scope, a->key, ONCE_OUTCOME_COMPLETED, &resp, pid, step);
        metrics_reconcile(srv->metrics, up->name, MR_FOUND);
    } else if (v == V_ABSENT) {
        rc = once_reconcile(srv->store, a->scope, a->key, ONCE_OUTCOME_RELEASED, NULL, NULL, step);
        metrics_reconcile(srv->metrics, up->name, MR_ABSENT);
    } else {
        int hold = n >= up->lookup_attempts;
        int64_t delay = up->lookup_backoff_ms;
        for (int64_t i = 1; i < n && delay < ONCE_LEASE_MAX_MS / 2; i++)
            delay *= 2;
        if (hold)
            snprintf(step + strlen(step), sizeof step - strlen(step), "; held after %lld lookups", (long long)n);
        rc = once_reconcile_failed(srv->store, a->scope, a->key, hold ? 0 : delay, hold, step);
        metrics_reconcile(srv->metrics, up->name, hold ? MR_HELD : MR_ERROR);
    }
    if (rc < 0 && rc != ONCE_ESTATE) /* ESTATE: a late completion or a human came first */
        log_event("error", "scope %s: cannot record a lookup: %s", up->name, once_errdetail());
    else if (rc == ONCE_OK)
        log_event("info", "scope %s: %s", up->name, step);
}

/* Runs on the outbound thread: the answer goes to the reconciler thread. */
static void on_lookup_done(out_call *c)
{
    lookup *l = c->ctx;
    looper_job_back(l->job, &l->item);
}

/* Hands one claimed action's lookup to the outbound client; one that cannot
 * be built is held at once. */
static void lookup_start(looper_job *job, const upstream_cfg *up, once_action *a)
{
    server *srv = looper_job_arg(job);
    lookup *l = calloc(1, sizeof *l);
    if (!l) {
        once_action_free(a);
        return;
    }
    l->job = job;
    l->up = up;
    l->action = *a;
    memset(a, 0, sizeof *a);
    char *url = NULL;
    char why[300] = "";
    if (lookup_url(up, &l->action, &url, why, sizeof why) < 0) {
        /* A lookup that cannot even be asked is held at once. */
        char step[400];
        snprintf(step, sizeof step, "lookup impossible: %s", why);
        if (once_reconcile_failed(srv->store, up->name, l->action.key, 0, 1, step) < 0)
            log_event("error", "upstream %s: %s: cannot hold the action (it is claimed again later): %s", up->name,
                      l->action.key, once_errdetail());
        metrics_reconcile(srv->metrics, up->name, MR_HELD);
        lookup_free(l);
        return;
    }
    l->url = url;
    out_call *c = &l->call;
    c->method = up->lookup_method;
    c->url = l->url;
    c->headers = (const char *const *)up->headers; /* credentials only, nothing of the client's */
    c->nheaders = up->nheaders;
    upstream_call_init(c, up);
    c->done = on_lookup_done;
    c->ctx = l;
    if (outbound_submit(srv->ob, c) < 0) {
        lookup_free(l); /* the claim runs out; another round asks again */
        return;
    }
    looper_job_handed(job);
}

/* Whether an upstream has a provider lookup: only its unknown actions are
 * this job's (the background loop holds the others for a human). */
static int has_lookup(const upstream_cfg *up)
{
    return up->lookup_method != NULL;
}

/* A running round: claims the unknown actions whose lookup is due, and
 * looks again after IDLE_WAIT_MS. */
static int64_t claim_due(looper_job *job)
{
    server *srv = looper_job_arg(job);
    for (size_t i = 0; i < srv->cfg->nupstreams; i++) {
        const upstream_cfg *up = &srv->cfg->upstreams[i];
        if (!has_lookup(up))
            continue;
        once_action_list l;
        /* The claim outlives the lookup call, so no other node asks too. */
        /* The first lookup waits lookup_backoff after the action became
         * unknown: a provider still processing the request, or whose search
         * lags, would otherwise say "absent" and the key would be freed for
         * a second send. */
        int rc = once_reconcile_claim(srv->store, up->name, CLAIM_MAX, up->timeout_ms + 5000, up->lookup_backoff_ms, &l);
        if (rc < 0) {
            log_event("error", "scope %s: cannot claim unknown actions: %s", up->name, once_errdetail());
            continue;
        }
        for (size_t k = 0; k < l.count; k++) {
            once_action *a = &l.items[k];
            /* A lease that ran out may belong to a node cut off from the
             * store whose call still runs: asked before that call's timeout
             * has surely passed, the provider could say "absent" and the key
             * would be freed for a second send. The claim holds it until the
             * next round. */
            if (a->error && strcmp(a->error, ONCE_REASON_LEASE_EXPIRED) == 0 &&
                once_now_ms() - a->updated_at < up->timeout_ms + up->lookup_backoff_ms)
                continue;
            lookup_start(job, up, a);
        }
        once_action_list_free(&l);
    }
    return IDLE_WAIT_MS;
}

/* A lookup came back. Stopping records only lookups that were answered (an
 * aborted one is asked again by the next gateway). */
static void lookup_settle(looper_job *job, looper_phase phase, looper_item *it)
{
    lookup *l = (lookup *)it;
    if (phase != LOOPER_STOPPING || l->call.kind == OUT_ANSWERED)
        lookup_record(looper_job_arg(job), l);
    lookup_free(l);
}

static const looper_job_ops reconciler_ops = {.name = "once-reconciler", .claim = claim_due, .settle = lookup_settle};

int reconciler_start(server *srv, looper_job **out)
{
    return jobs_start(srv, has_lookup, &reconciler_ops, out);
}
