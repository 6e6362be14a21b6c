/*
 * proxy_send.c — the sender of an approved action of an HTTP upstream
 * (core/sender.h): the stored request rebuilt (stored_request.h) with the
 * upstream's injected headers added now, as the proxy adds them, sent on
 * the outbound client under a renewed lease, and its outcome classified as
 * the proxy classifies it. Never blocks the thread that starts it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "server/core/leases.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/core/target.h"
#include "server/core/upstream_call.h"
#include "server/core/upstream_rules.h"
#include "server/proxy/proxy.h"
#include "server/core/stored_request.h"

typedef struct http_send {
    stored_request sr;
    char *url;
    out_headers headers;
    lease_hold *hold;
    out_call call;
} http_send;

static void http_send_free(send_job *job)
{
    http_send *h = job->priv;
    if (!h)
        return;
    leases_drop(job->srv->leases, h->hold);
    stored_request_free(&h->sr);
    free(h->url);
    out_headers_clear(&h->headers);
    out_call_clear(&h->call);
    free(h);
    job->priv = NULL;
}

/* The request ready to send: the URL built on the upstream's base with the
 * URL API (target.h: nothing stored can change where it goes), the client's
 * stored headers, then the upstream's injected ones and the key when the
 * upstream forwards it. 0, or -1 with why. */
static int http_send_build(send_job *job, http_send *h, char *why, size_t whylen)
{
    const upstream_cfg *up = job->up;
    const once_action *a = &job->res->action;
    if (stored_request_decode(a->request, a->request_len, &h->sr, why, whylen) < 0 ||
        target_url(up->url, h->sr.target, &h->url, why, whylen) < 0)
        return -1;
    snprintf(job->what, sizeof job->what, "%s %.80s", h->sr.method, h->sr.target);
    size_t i;
    json_t *pair;
    json_array_foreach(h->sr.headers, i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        /* The proxy's own filter again, not the stored set trusted: a
         * header the upstream injects now (the config may have changed
         * since) or one never forwarded is dropped, so nothing stored can
         * stand in for the operator's credentials. */
        if (!n || !v || upstream_header_dropped(up, config_auth_on(job->srv->cfg), NULL, n))
            continue;
        if (out_headers_add(&h->headers, n, v) < 0)
            goto oom;
    }
    for (i = 0; i < up->nheaders; i++)
        if (out_headers_add(&h->headers, up->headers[i], NULL) < 0)
            goto oom;
    if (up->forward_key_as && out_headers_add(&h->headers, up->forward_key_as, a->key) < 0)
        goto oom;
    return 0;
oom:
    snprintf(why, whylen, "out of memory");
    return -1;
}

/* On the outbound thread: the call ended. Its class is the proxy's. */
static void http_send_done(out_call *c)
{
    send_job *job = c->ctx;
    http_send *h = job->priv;
    leases_drop(job->srv->leases, h->hold);
    h->hold = NULL;
    metrics_upstream(job->srv->metrics, job->up->name, c->seconds);
    upstream_outcome o = upstream_classify(job->up, c->kind, c->status, c->error, sizeof c->error);
    switch (upstream_outcome_state(o)) {
    case ONCE_STATE_COMPLETED:
        job->v.kind = VERDICT_COMPLETED;
        job->v.resp = (once_response){.status = (int)c->status,
                                      .headers = (char *)c->resp_headers.data,
                                      .headers_len = c->resp_headers.len,
                                      .body = c->resp_body.data,
                                      .body_len = c->resp_body.len};
        break;
    case ONCE_STATE_RELEASED: job->v.kind = VERDICT_RELEASED; break;
    default: job->v.kind = VERDICT_UNKNOWN; break;
    }
    if (job->v.kind != VERDICT_COMPLETED) {
        snprintf(job->v.why, sizeof job->v.why, "%s", c->error);
        snprintf(job->log_why, sizeof job->log_why, "%s", c->error);
    }
    job->done(job);
}

/* A job that could not start: released, nothing was sent. */
static void http_send_refused(send_job *job, const char *why)
{
    job->v.kind = VERDICT_RELEASED;
    snprintf(job->v.why, sizeof job->v.why, "%s", why);
    snprintf(job->log_why, sizeof job->log_why, "%s", job->v.why);
    job->done(job);
}

static void http_send_start(send_job *job)
{
    ONCE_ASSERT(scope_kind_of(job->up) == SCOPE_HTTP);
    char why[300] = "";
    http_send *h = calloc(1, sizeof *h);
    job->priv = h;
    job->free_fn = http_send_free;
    if (!h) {
        http_send_refused(job, "out of memory: nothing was sent");
        return;
    }
    if (http_send_build(job, h, why, sizeof why) < 0) {
        char reason[sizeof job->v.why];
        snprintf(reason, sizeof reason, "the approved request could not be rebuilt, nothing was sent: %.200s", why);
        http_send_refused(job, reason);
        return;
    }
    const upstream_cfg *up = job->up;
    h->hold = leases_hold(job->srv->leases, up->name, job->res->action.key, job->res->token, up->lease_ms);
    out_call *c = &h->call;
    upstream_call_request(c, up, h->sr.method, h->url, &h->headers, h->sr.body, h->sr.body_len);
    c->done = http_send_done;
    c->ctx = job;
    if (outbound_submit(job->srv->ob, c) < 0)
        http_send_refused(job, "the gateway is stopping, or out of memory: nothing was sent");
}

const sender proxy_sender = {.start = http_send_start};
