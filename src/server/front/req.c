/*
 * req.c — the request object: making and freeing it, parking it, and the
 * one way to answer it (see req.h for the ownership rules).
 *
 * The `ready` flag, under the request's own mutex, settles the race between
 * a route answering on another thread and the HTTP thread parking the
 * connection; `orphaned` settles the one between an answer and a client
 * that left: whichever comes second frees the request.
 */
#include "server/front/req.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/pct.h"
#include "server/core/access_set.h"
#include "server/core/services.h"
#include "server/front/lot.h"

struct MHD_Response *resp_bytes(const void *data, size_t len, const char *content_type)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)(len ? data : ""),
                                                                MHD_RESPMEM_MUST_COPY);
    if (resp && content_type && MHD_add_response_header(resp, "Content-Type", content_type) != MHD_YES) {
        MHD_destroy_response(resp);
        return NULL;
    }
    return resp;
}

req *req_new(server *srv, const upstream_cfg *listen_up, const route *listen_route, int tls, const char *uri)
{
    req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->srv = srv;
    r->listen_up = listen_up;
    r->listen_route = listen_route;
    r->tls = tls;
    r->uri = strdup(uri ? uri : "/");
    r->upstream_ms = -1;
    r->t0 = clock_mono_seconds();
    if (!r->uri) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->acl = srv->access ? access_sets_hold(srv->access) : NULL;
    return r;
}

const once_config *req_access_cfg(const req *r)
{
    return r->acl ? access_set_cfg(r->acl) : r->srv->cfg;
}

static void req_free(req *r)
{
    if (r->state_free)
        r->state_free(r->state);
    if (r->resp)
        MHD_destroy_response(r->resp);
    access_set_drop(r->acl); /* r->who pointed into it */
    buf_free(&r->body);
    free(r->uri);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void req_release(req *r)
{
    pthread_mutex_lock(&r->mu);
    if (r->dispatched && !r->ready) {
        /* A route still works on it on another thread (MHD closes a
         * connection whose client left, even one it was asked to suspend):
         * the answer, when it comes, frees it. */
        r->orphaned = 1;
        if (r->parked) {
            r->parked = 0;
            lot_unpark(r->srv->lot);
        }
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    req_free(r);
}

int req_park(req *r)
{
    pthread_mutex_lock(&r->mu);
    int ready = r->ready;
    if (!ready) {
        MHD_suspend_connection(r->conn);
        r->parked = 1;
        lot_park(r->srv->lot);
    }
    pthread_mutex_unlock(&r->mu);
    return ready;
}

int req_ready(req *r)
{
    pthread_mutex_lock(&r->mu);
    int ready = r->ready;
    pthread_mutex_unlock(&r->mu);
    return ready;
}

struct MHD_Response *req_take_answer(req *r, unsigned *status)
{
    struct MHD_Response *resp = r->resp;
    *status = r->status;
    r->resp = NULL;
    return resp;
}

void req_reply(req *r, unsigned status, struct MHD_Response *resp)
{
    pthread_mutex_lock(&r->mu);
    /* Exactly one answer per request: a second is a route's bug. */
    ONCE_ASSERT(!r->ready);
    if (r->ready) {
        pthread_mutex_unlock(&r->mu);
        if (resp)
            MHD_destroy_response(resp);
        return;
    }
    r->status = status;
    r->resp = resp;
    r->ready = 1;
    if (r->orphaned) {
        /* The client is gone and MHD has let go: the answer has nowhere to
         * go, and this was the last hand holding the request. */
        pthread_mutex_unlock(&r->mu);
        req_free(r);
        return;
    }
    if (r->parked) {
        r->parked = 0;
        MHD_resume_connection(r->conn);
        lot_unpark(r->srv->lot);
    }
    pthread_mutex_unlock(&r->mu);
}

void req_json(req *r, unsigned status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    struct MHD_Response *resp = s ? resp_bytes(s, strlen(s), "application/json") : NULL;
    free(s);
    req_reply(r, status, resp);
}

static struct MHD_Response *problem_response(unsigned status, const char *code, const char *title, json_t *extra,
                                             const char *detail)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s}", "type", "about:blank", "title", title, "status", (int)status,
                          "code", code, "detail", detail);
    if (o && extra)
        json_object_update(o, extra);
    json_decref(extra);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    struct MHD_Response *resp = s ? resp_bytes(s, strlen(s), "application/problem+json") : NULL;
    free(s);
    return resp;
}

void req_problem(req *r, unsigned status, const char *code, const char *title, json_t *extra, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (r->who)
        metrics_refusal(r->srv->metrics, r->who->name, code);
    req_reply(r, status, problem_response(status, code, title, extra, detail));
}

void req_problem_from(req *r, const problem *p)
{
    json_t *extra = NULL;
    if (p->header) {
        req_set_header(r, p->header, p->header_value);
        if (strcmp(p->header, "Allow") == 0)
            extra = json_pack("{s:s}", "allow", p->header_value);
    }
    if (r->who)
        metrics_refusal(r->srv->metrics, r->who->name, p->code);
    req_reply(r, p->status, problem_response(p->status, p->code, p->title, extra, p->detail));
}

void req_not_started(req *r, const char *why)
{
    if (lot_stopping(r->srv->lot))
        req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping; nothing was done");
    else
        req_problem(r, 500, "internal", "Internal error", NULL, "%s; nothing was done", why);
}

void req_out_of_memory(req *r)
{
    req_problem(r, 500, "internal", "Internal error", NULL, "out of memory");
}

void *req_state_new(req *r, size_t size, req_state_free free_fn)
{
    ONCE_ASSERT(!r->state);
    void *state = calloc(1, size);
    if (!state) {
        req_out_of_memory(r);
        return NULL;
    }
    r->state = state;
    r->state_free = free_fn;
    return state;
}

void req_set_header(req *r, const char *name, const char *value)
{
    /* Every answer adds at most a few (Retry-After, Allow, Location, …). */
    ONCE_ASSERT(r->nextra < REQ_EXTRA_HEADERS);
    if (r->nextra >= REQ_EXTRA_HEADERS)
        return;
    snprintf(r->extra_name[r->nextra], sizeof r->extra_name[0], "%s", name);
    snprintf(r->extra_value[r->nextra], sizeof r->extra_value[0], "%s", value);
    r->nextra++;
}

const char *req_header(req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

void req_note_key(req *r, const char *scope, const char *key)
{
    snprintf(r->scope, sizeof r->scope, "%s", scope ? scope : "");
    char fp[65];
    if (key && once_fingerprint("key", scope ? scope : "", (const uint8_t *)key, strlen(key), fp) == ONCE_OK)
        snprintf(r->key_hash, sizeof r->key_hash, "%.16s", fp);
}

int req_query_param(req *r, const char *query, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = query;
    while (p && *p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
            if (pct_decode(p + nlen + 1, len - nlen - 1, out, cap) < 0) {
                req_problem(r, 400, "invalid_request", "Invalid request", NULL, "query parameter '%s' is malformed",
                            name);
                return -1;
            }
            return 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

int req_query_limit(req *r, const char *query, size_t *limit)
{
    char text[16];
    int has = req_query_param(r, query, "limit", text, sizeof text);
    if (has <= 0)
        return has;
    char *end;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || v < 1 || v > 1000) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "'limit' must be between 1 and 1000");
        return -1;
    }
    *limit = (size_t)v;
    return 1;
}

/* Every listing pages the same way (GET /v1/actions, GET /v1/events): one
 * reading of limit and after, in that order. */
int req_query_page(req *r, const char *query, size_t *limit, char *after, size_t cap, const char **cursor)
{
    int has;
    if (req_query_limit(r, query, limit) < 0 || (has = req_query_param(r, query, "after", after, cap)) < 0)
        return -1;
    if (has)
        *cursor = after;
    return 0;
}

/* Every listing answers one shape: its items and the cursor of the next
 * page. */
void req_json_page(req *r, json_t *items, const char *next)
{
    json_t *body = items ? json_pack("{s:o, s:s?}", "items", items, "next", next && next[0] ? next : NULL) : NULL;
    if (!body) {
        req_out_of_memory(r);
        return;
    }
    req_json(r, 200, body);
}

/* Every route that names a record by its path bounds the path alike
 * (/v1/actions…, /v1/events…). */
int req_admit_named_path(req *r, problem *p)
{
    if (strcspn(r->uri, "?") >= REQ_NAMED_PATH_MAX)
        return problem_set(p, 414, "bad_request", "URI too long", "the path is too long");
    return 0;
}

/* The routes that name a record by two path segments (an action's scope
 * and key, an event's source and id) decode them alike. */
int req_path_pair(req *r, char *a, size_t acap, char *b, size_t bcap, const char *what)
{
    const route_match *m = &r->match;
    if (pct_decode(m->seg[0], m->seglen[0], a, acap) < 0 || pct_decode(m->seg[1], m->seglen[1], b, bcap) < 0) {
        req_problem(r, 400, "bad_request", "Bad request", NULL, "malformed percent-encoding, or %s that is too long",
                    what);
        return -1;
    }
    return 0;
}
