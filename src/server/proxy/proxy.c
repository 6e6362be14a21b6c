/*
 * proxy.c — ANY /v1/proxy/{upstream}/{path…}: reserve first, forward,
 * record before reply, replay to every retry (docs/api.md).
 *
 * A keyed request goes through the recorded call's pipeline
 * (pipeline/rcall.h: reserve, wait or replay, forward, record, answer, and
 * the threads between them); this file says what is the proxy's own:
 *   HTTP thread   validate the target and headers, derive the key,
 *                 fingerprint, then rcall_start
 *   outbound      forward: the call; on_upstream_done classifies it
 *                 (upstream_rules.h) and records it (rcall_record)
 *   store writer  proxy_recorded: attach the answer, resume the connection
 * A streamed answer is relayed while it arrives (front/stream.c) and ended
 * once its outcome is recorded. A request without a key passes through.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


#include "common/check.h"
#include "common/clock.h"
#include "common/fault.h"
#include "common/sse.h"
#include "common/key_template.h"
#include "json/action_json.h"
#include "server/core/grants.h"
#include "server/core/leases.h"
#include "server/core/limits.h"
#include "server/core/log.h"
#include "common/pct.h"
#include "server/front/relay.h"
#include "server/proxy/proxy.h"
#include "server/core/stored_request.h"
#include "server/pipeline/rcall.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/front/stream.h"
#include "server/core/target.h"
#include "server/core/upstream_call.h"
#include "server/core/upstream_rules.h"
#include "server/core/waiters.h"


typedef struct proxy {
    rcall c;             /* first: the pipeline's part (pipeline/rcall.h) */
    limits_draw draw;    /* what the reservation draws from the agent's limits (rreq points into it) */
    char *url;
    out_headers headers; /* to forward: the client's first */
    size_t nclient;      /* how many of headers are the client's */
    out_call call;
    upstream_outcome kind;
    const char *target;  /* path and query after the upstream's prefix */
    char *method;        /* a copy: MHD's string may go when the client does */
    char field[3][1024]; /* decoded query / path values lent to a key template */
    int nfield;
    /* a streamed answer (text/event-stream), relayed while it arrives */
    stream *stream;
    sse_watch watch;     /* did the stream end with its final event? */
    int watch_failed;
    buf body;            /* the request body, taken from the request when it answered early */
} proxy;

/* The proxy's own members, when the last holder let go (rcall_drop). */
static void proxy_free(rcall *c)
{
    proxy *px = (proxy *)c;
    ONCE_ASSERT(!px->stream);
    sse_watch_free(&px->watch);
    buf_free(&px->body);
    out_headers_clear(&px->headers);
    free(px->url);
    free(px->method);
    out_call_clear(&px->call);
}

static int method_is_safe(const char *m)
{
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0 || strcmp(m, "OPTIONS") == 0;
}

/* ---- building requests and responses ----------------------------------- */

/* The request as stored with the reservation (stored_request.h): what a
 * provider lookup or a human needs to know what was attempted. It reads
 * only what the proxy owns, as it may run after the client left. Injected
 * headers are never stored (they come after the client's in px->headers). */
static int proxy_describe(rcall *c, char **out)
{
    proxy *px = (proxy *)c;
    req *r = c->r;
    return stored_request_encode(c->srv->cfg, px->method, px->target, (const char *const *)px->headers.lines,
                                 px->nclient, r->body.data, r->body.len, out);
}

/* The tokens an LLM answer reports (usage.total_tokens of a JSON answer,
 * or what an event stream's usage events add up to), or -1. */
static int64_t answer_tokens(const once_response *a)
{
    if (!a->body)
        return -1;
    if (memmem(a->body, a->body_len, "data:", 5) && memmem(a->body, a->body_len, "usage", 5)) {
        sse_watch w;
        sse_watch_init(&w);
        int64_t tokens = sse_watch_feed(&w, a->body, a->body_len) == 0 ? sse_watch_tokens(&w) : -1;
        sse_watch_free(&w);
        if (tokens >= 0)
            return tokens;
    }
    if (!memmem(a->body, a->body_len, "total_tokens", 12))
        return -1;
    json_t *doc = json_loadb((const char *)a->body, a->body_len, 0, NULL);
    json_t *t = json_object_get(json_object_get(doc, "usage"), "total_tokens");
    int64_t tokens = json_is_integer(t) ? (int64_t)json_integer_value(t) : -1;
    json_decref(doc);
    return tokens;
}

/* ---- answers ----------------------------------------------------------- */

static void reply_unknown(proxy *px, once_reserve_status st)
{
    req *r = px->c.r;
    const char *state = st == ONCE_HELD ? "held" : "unknown";
    r->outcome = state;
    metrics_action(r->srv->metrics, px->c.up->name, st == ONCE_HELD ? MO_HELD : MO_UNKNOWN);
    const char *reason = px->c.res.action.error ? px->c.res.action.error : "";
    req_problem(r, 409, "outcome_unknown", "Outcome unknown", json_pack("{s:s, s:s}", "state", state, "reason", reason),
                "an earlier attempt may have performed this action (%s); it is not sent again until it is "
                "resolved",
                state);
}

static void reply_in_flight(proxy *px)
{
    req *r = px->c.r;
    r->outcome = "in_flight";
    metrics_action(r->srv->metrics, px->c.up->name, MO_IN_FLIGHT);
    req_set_header(r, "Retry-After", "1");
    req_problem(r, 409, "key_in_flight", "Key in flight", json_pack("{s:s}", "state", "pending"),
                "another attempt holds this key; retry later or send 'Prefer: wait=N'");
}

static void reply_replay(proxy *px)
{
    req *r = px->c.r;
    const upstream_cfg *up = px->c.up;
    once_action *a = &px->c.res.action;
    int mismatch = px->c.res.fingerprint_mismatch;
    r->outcome = "replayed";
    if (mismatch) {
        metrics_action(r->srv->metrics, up->name, MO_MISMATCH);
        if (up->on_mismatch == MISMATCH_REJECT) {
            req_problem(r, 422, "payload_mismatch", "Payload mismatch", NULL,
                        "this key was first used with a different request; its outcome stands");
            return;
        }
    }
    if (a->has_response && a->response.body_not_stored > 0) {
        r->outcome = "not_stored";
        metrics_action(r->srv->metrics, up->name, MO_REPLAYED);
        req_problem(r, 409, "response_not_stored", "Response not stored",
                    json_pack("{s:s, s:I}", "state", "completed", "bytes", (json_int_t)a->response.body_not_stored),
                    "this action completed, and its answer (%lld bytes) was delivered then, but it was longer "
                    "than max_response and was not stored; it is not run again",
                    (long long)a->response.body_not_stored);
        return;
    }
    metrics_action(r->srv->metrics, up->name, MO_REPLAYED);
    /* A replayed LLM answer is a generation not paid for twice. */
    int64_t tokens = a->has_response ? answer_tokens(&a->response) : -1;
    if (tokens > 0)
        metrics_tokens_saved(r->srv->metrics, up->name, (long long)tokens);
    struct MHD_Response *resp;
    unsigned status;
    if (a->has_response) {
        resp = relay_response(a->response.headers, a->response.body, a->response.body_len);
        status = (unsigned)a->response.status;
    } else {
        /* Resolved by a human: there is no upstream answer to replay. */
        json_t *o = json_pack("{s:s, s:s?, s:s?}", "state", "completed", "provider_id", a->provider_id, "note",
                              a->note);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        resp = s ? resp_bytes(s, strlen(s), "application/json") : NULL;
        free(s);
        status = 200;
    }
    if (resp) {
        MHD_add_response_header(resp, "Idempotent-Replayed", "true");
        if (mismatch)
            MHD_add_response_header(resp, "Idempotency-Payload-Mismatch", "true");
    }
    req_reply(r, status ? status : 200, resp);
}

/* Does the new request differ from the one stored under its key? Then an
 * approval or a denial of the stored one does not cover it. */
static int stored_request_differs(const proxy *px)
{
    const char *fp = px->c.res.action.fingerprint;
    return fp && strcmp(fp, px->c.fp) != 0;
}

/* The start of an answer from a row a human decides (awaiting approval,
 * denied): a payload that differs from the stored request is refused
 * (on_mismatch = reject), else answered as the stored request is, flagged;
 * the answer's outcome is noted and counted. 1 when refused (answered). */
static int reply_decision_refused(proxy *px, const char *outcome, metric_outcome mo)
{
    if (stored_request_differs(px)) {
        metrics_action(px->c.srv->metrics, px->c.up->name, MO_MISMATCH);
        if (px->c.up->on_mismatch == MISMATCH_REJECT) {
            req_problem(px->c.r, 422, "payload_mismatch", "Payload mismatch", NULL,
                        "this key was first used with a different request; only that request can be approved");
            return 1;
        }
    }
    px->c.r->outcome = outcome;
    metrics_action(px->c.srv->metrics, px->c.up->name, mo);
    return 0;
}

/* 202: stored, waiting for a human (docs/approvals.md). The body and the
 * Location name the action, which GET /v1/actions/{scope}/{key} shows. */
static void reply_awaiting(proxy *px)
{
    req *r = px->c.r;
    if (reply_decision_refused(px, "awaiting_approval", MO_AWAITING))
        return;
    const once_action *a = &px->c.res.action;
    json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:o}", "state", "awaiting_approval", "scope", px->c.up->name, "key",
                          px->c.key, "approved", a->approved_at > 0, "decide_by",
                          json_new_time(a->lease_expires_at));
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    buf loc = {0};
    int rc = text ? buf_append(&loc, "/v1/actions/", 12, 4096) : -1;
    if (rc == 0)
        rc = pct_encode(&loc, px->c.up->name, strlen(px->c.up->name), 4096);
    if (rc == 0)
        rc = buf_append(&loc, "/", 1, 4096);
    if (rc == 0)
        rc = pct_encode(&loc, px->c.key, strlen(px->c.key), 4096);
    if (rc == 0)
        rc = buf_append(&loc, "", 1, 4096);
    struct MHD_Response *resp = rc == 0 ? resp_bytes(text, strlen(text), "application/json") : NULL;
    if (resp) {
        MHD_add_response_header(resp, "Location", (const char *)loc.data);
        if (stored_request_differs(px))
            MHD_add_response_header(resp, "Idempotency-Payload-Mismatch", "true");
    }
    free(text);
    buf_free(&loc);
    req_reply(r, 202, resp);
}

/* 403: a human said no, or nobody decided in time; final until the row's
 * retention ends. */
static void reply_denied(proxy *px)
{
    req *r = px->c.r;
    if (reply_decision_refused(px, "denied", MO_DENIED))
        return;
    const char *note = px->c.res.action.note ? px->c.res.action.note : "";
    req_problem(r, 403, "denied", "Denied", json_pack("{s:s, s:s}", "state", "denied", "note", note),
                "this request was not approved (%s); it is not sent", note[0] ? note : "no note");
}

/* 429 limit_exceeded: nothing was stored or sent (core/limits.h). */
static void reply_over_limit(proxy *px)
{
    problem p;
    char retry[24];
    limits_refusal(&px->draw, &px->c.res, &p, retry);
    if (retry[0])
        req_set_header(px->c.r, "Retry-After", retry);
    px->c.r->outcome = "limit_exceeded";
    req_problem_from(px->c.r, &p);
}

/* Answers from an existing row (anything but RESERVED; the pipeline has
 * waited where Prefer: wait asked it to). */
static void proxy_existing(rcall *c)
{
    proxy *px = (proxy *)c;
    switch (c->res.status) {
    case ONCE_COMPLETED: reply_replay(px); break;
    case ONCE_IN_FLIGHT: reply_in_flight(px); break;
    case ONCE_UNKNOWN:
    case ONCE_HELD: reply_unknown(px, c->res.status); break;
    case ONCE_AWAITING_APPROVAL: reply_awaiting(px); break;
    case ONCE_DENIED: reply_denied(px); break;
    case ONCE_OVER_LIMIT: reply_over_limit(px); break;
    default:
        req_problem(c->r, 500, "internal", "Internal error", NULL, "unexpected reservation status %d",
                    (int)c->res.status);
    }
}

/* Prefer: wait waits for the decision and then the outcome only of the
 * request that is stored: a different one is answered at once. */
static int proxy_waits_for_decision(const rcall *c)
{
    return !stored_request_differs((const proxy *)c);
}

/* ---- streamed answers (docs/api.md, "Streamed answers") ------------------- */

/* On a caller's connection thread: a full stream has room again. */
static void stream_room(void *ctx)
{
    proxy *px = ctx;
    outbound_resume(px->c.srv->ob, &px->call);
}

/* On the outbound thread, at the first byte of an event stream. Only an
 * answer that will be recorded as completed is relayed live (a release_on
 * or unknown_on status is answered as it is today); the request is
 * answered now, and from here on the call, not the request, holds px. */
static int stream_start(out_call *c)
{
    proxy *px = c->ctx;
    char why[128];
    if (px->c.key[0] && upstream_classify(px->c.up, OUT_ANSWERED, c->status, why, sizeof why) != UPSTREAM_COMPLETED)
        return 0;
    req *r = px->c.r;
    struct MHD_Response *resp;
    if (!(px->stream = stream_open(px->c.srv, r->conn, stream_room, px, &resp)))
        return -1;
    relay_add_headers(resp, (const char *)c->resp_headers.data);
    sse_watch_init(&px->watch);
    rcall_hold(&px->c);
    /* curl may still hold the request body: it goes with px, not r. */
    px->body = r->body;
    memset(&r->body, 0, sizeof r->body);
    if (px->c.key[0])
        r->outcome = "streaming";
    req_reply(r, (unsigned)c->status, resp); /* r may be gone from here on */
    return 1;
}

static int stream_data(out_call *c, const uint8_t *p, size_t n)
{
    proxy *px = c->ctx;
    switch (stream_push(px->stream, p, n)) {
    case STREAM_FULL: return OUT_STREAM_PAUSE;
    case STREAM_ERROR: return OUT_STREAM_FAIL;
    case STREAM_TAKEN: break;
    }
    /* Without the watcher the end cannot be judged: judged cut. */
    if (!px->watch_failed && sse_watch_feed(&px->watch, p, n) < 0)
        px->watch_failed = 1;
    return OUT_STREAM_TAKEN;
}

static const out_stream_hooks stream_hooks = {.start = stream_start, .data = stream_data};

/* Ends the relay (clean: the last chunk, with outcome as a trailer; else
 * cut) and lets go of the call's hold. */
static void stream_finish(proxy *px, int clean, const char *outcome)
{
    stream_end(px->stream, clean, outcome);
    px->stream = NULL;
    rcall_drop(&px->c);
}

/* The class of a streamed call: answered is completed only when the
 * stream ended as its shape ends (OpenAI's [DONE], Anthropic's
 * message_stop, …); a stream cut before that may have been billed. */
static upstream_outcome stream_classify(proxy *px)
{
    out_call *c = &px->call;
    upstream_outcome o = upstream_classify(px->c.up, c->kind, c->status, c->error, sizeof c->error);
    if (o == UPSTREAM_COMPLETED && (px->watch_failed || !sse_watch_complete(&px->watch))) {
        snprintf(c->error, sizeof c->error, "the %s stream ended after %llu bytes without its final event",
                 sse_shape_name(px->watch.shape), (unsigned long long)c->stream_bytes);
        o = UPSTREAM_AMBIGUOUS;
    } else if (o == UPSTREAM_AMBIGUOUS) {
        size_t n = strlen(c->error);
        snprintf(c->error + n, sizeof c->error - n, " (the stream was cut after %llu bytes)",
                 (unsigned long long)c->stream_bytes);
    }
    return o;
}

/* The stream's outcome is recorded (or could not be): the caller gets the
 * end only now, so that a caller who saw a clean end finds it recorded. */
static void stream_recorded(proxy *px, int rc, const char *detail)
{
    metrics *m = px->c.srv->metrics;
    if (rc < 0) {
        /* The row stays pending, expires and is held: never pretend. */
        metrics_action(m, px->c.up->name, MO_UNKNOWN);
        log_event("error", "scope %s: the outcome of a streamed call could not be recorded: %s", px->c.up->name,
                  detail);
        stream_finish(px, 0, NULL);
        return;
    }
    if (px->kind == UPSTREAM_COMPLETED) {
        stream_finish(px, 1, "completed");
        return;
    }
    metrics_action(m, px->c.up->name, MO_UNKNOWN);
    log_event("warn", "scope %s: a streamed call ended as unknown: %s", px->c.up->name, px->call.error);
    /* The caller's stream ends as the upstream's did: cut when it was cut;
     * when only its final event was missing, cleanly, the trailer saying
     * unknown. */
    stream_finish(px, px->call.kind == OUT_ANSWERED, "unknown");
}

/* ---- recording the outcome ---------------------------------------------- */

static void proxy_recorded(rcall *rc_, int rc, const char *detail)
{
    proxy *px = (proxy *)rc_;
    if (px->stream) {
        stream_recorded(px, rc, detail);
        return;
    }
    req *r = px->c.r;
    metrics *m = r->srv->metrics;
    const char *name = px->c.up->name;
    out_call *c = &px->call;
    if (rc < 0) {
        if (px->kind == UPSTREAM_UNREACHABLE || px->kind == UPSTREAM_NOT_FORWARDED) {
            req_problem(r, 503, "store_unavailable", "Store unavailable", NULL,
                        "nothing was sent upstream, but the release could not be recorded: %s", detail);
            return;
        }
        /* The upstream was called and the ledger did not take the outcome:
         * the row stays pending, expires, and is held. Never pretend. */
        r->outcome = "unknown";
        metrics_action(m, name, MO_UNKNOWN);
        log_event("error", "scope %s: the outcome of an upstream call could not be recorded: %s", name, detail);
        req_problem(r, 504, "outcome_unknown", "Outcome unknown", json_pack("{s:s}", "state", "unknown"),
                    "the upstream was called but its outcome could not be recorded (%s)", detail);
        return;
    }
    switch (px->kind) {
    case UPSTREAM_COMPLETED:
    case UPSTREAM_RELEASED_PASS:
    case UPSTREAM_UNKNOWN_PASS:
        r->outcome = once_state_name(upstream_outcome_state(px->kind));
        if (px->kind != UPSTREAM_COMPLETED)
            metrics_action(m, name, px->kind == UPSTREAM_RELEASED_PASS ? MO_RELEASED : MO_UNKNOWN);
        req_reply(r, (unsigned)c->status, relay_response((const char *)c->resp_headers.data, c->resp_body.data,
                                                    c->resp_body.len));
        break;
    case UPSTREAM_UNREACHABLE:
        r->outcome = "released";
        metrics_action(m, name, MO_RELEASED);
        req_problem(r, 502, "upstream_unreachable", "Upstream unreachable", NULL,
                    "nothing was sent to the upstream (%s); the key is released", c->error);
        break;
    case UPSTREAM_NOT_FORWARDED:
        req_not_started(r, px->call.error);
        break;
    case UPSTREAM_AMBIGUOUS:
        r->outcome = "unknown";
        metrics_action(m, name, MO_UNKNOWN);
        req_problem(r, 504, "outcome_unknown", "Outcome unknown", json_pack("{s:s}", "state", "unknown"),
                    "the request reached the upstream but no answer came back (%s); it will not be resent",
                    c->error);
        break;
    case UPSTREAM_TOO_LARGE:
        r->outcome = "unknown";
        metrics_action(m, name, MO_UNKNOWN);
        req_problem(r, 502, "response_too_large", "Response too large", json_pack("{s:s}", "state", "unknown"),
                    "%s; the action was performed and is recorded as unknown", c->error);
        break;
    }
}

/* Records what the call did, as its class says (upstream_rules.h). */
static void record(proxy *px, upstream_outcome kind, const char *why)
{
    px->kind = kind;
    verdict v = {.kind = VERDICT_UNKNOWN};
    switch (upstream_outcome_state(kind)) {
    case ONCE_STATE_COMPLETED:
        v.kind = VERDICT_COMPLETED;
        v.resp = (once_response){.status = (int)px->call.status,
                                 .headers = (char *)px->call.resp_headers.data,
                                 .headers_len = px->call.resp_headers.len,
                                 .body = px->call.resp_body.data,
                                 .body_len = px->call.resp_body.len,
                                 .body_not_stored = px->call.not_recorded ? (int64_t)px->call.stream_bytes : 0};
        break;
    case ONCE_STATE_RELEASED: v.kind = VERDICT_RELEASED; break;
    default: break;
    }
    if (why)
        snprintf(v.why, sizeof v.why, "%s", why);
    rcall_record(&px->c, &v);
}

static void on_upstream_done(out_call *c)
{
    proxy *px = c->ctx;
    FAULT_POINT("after_upstream");
    rcall_lease_done(&px->c);
    if (!px->stream)
        px->c.r->upstream_ms = c->seconds * 1e3;
    metrics_upstream(px->c.srv->metrics, px->c.up->name, c->seconds);
    upstream_outcome o = px->stream ? stream_classify(px)
                                    : upstream_classify(px->c.up, c->kind, c->status, c->error, sizeof c->error);
    record(px, o, o == UPSTREAM_COMPLETED ? NULL : c->error);
}

static void forward(proxy *px, out_done_fn done)
{
    req *r = px->c.r;
    out_call *c = &px->call;
    upstream_call_request(c, px->c.up, px->method, px->url, &px->headers, r->body.data, r->body.len);
    c->stream = &stream_hooks;
    c->done = done;
    c->ctx = px;
    int rc = outbound_submit(r->srv->ob, c);
    if (rc < 0) {
        /* Only a stopping gateway refuses calls; else memory ran out. The
         * reason is kept with the released action: it must be the true one. */
        snprintf(c->error, sizeof c->error, "%s",
                 rc == ONCE_ECLOSED ? "the gateway is stopping" : "out of memory");
        if (done == on_upstream_done)
            record(px, UPSTREAM_NOT_FORWARDED, c->error);
        else
            req_not_started(r, c->error);
    }
}

/* A new reservation: forwarded (store writer or syncer). */
static void proxy_forward(rcall *c)
{
    forward((proxy *)c, on_upstream_done);
}

static const rcall_ops proxy_ops = {.describe = proxy_describe,
                                    .forward = proxy_forward,
                                    .existing = proxy_existing,
                                    .recorded = proxy_recorded,
                                    .waits_for_decision = proxy_waits_for_decision,
                                    .free = proxy_free};

/* ---- pass-through (no key) ----------------------------------------------- */

static void on_pass_done(out_call *c)
{
    proxy *px = c->ctx;
    metrics_upstream(px->c.srv->metrics, px->c.up->name, c->seconds);
    if (px->stream) {
        /* Nothing to record: the end of the transfer is the stream's end. */
        stream_finish(px, c->kind == OUT_ANSWERED, NULL);
        return;
    }
    req *r = px->c.r;
    r->upstream_ms = c->seconds * 1e3;
    relay_answer(r, c);
}

/* ---- entry ---------------------------------------------------------------- */

/* ---- intent-derived keys ----------------------------------------------------- */

static const char *tpl_header(void *ctx, const char *name)
{
    proxy *px = ctx;
    return req_header(px->c.r, name);
}

/* A decoded copy of a query value or path segment, kept in the proxy so the
 * template can borrow it. */
static const char *tpl_keep(proxy *px, const char *raw, size_t n)
{
    if (px->nfield >= 3)
        px->nfield = 0; /* a template uses a value before it asks for the next */
    char *slot = px->field[px->nfield++];
    if (pct_decode(raw, n, slot, sizeof px->field[0]) < 0)
        return NULL;
    return slot;
}

static const char *tpl_query(void *ctx, const char *name)
{
    proxy *px = ctx;
    const char *q = strchr(px->target, '?');
    size_t nlen = strlen(name);
    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        size_t len = strcspn(p, "&");
        if (len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=')
            return tpl_keep(px, p + nlen + 1, len - nlen - 1);
        p += len;
        if (*p == '&')
            p++;
    }
    return NULL;
}

static const char *tpl_path(void *ctx, size_t n)
{
    proxy *px = ctx;
    const char *p = px->target;
    size_t plen = strcspn(p, "?");
    size_t i = 0;
    while (plen && *p == '/') {
        p++;
        plen--;
        size_t len = strcspn(p, "/?");
        if (len > plen)
            len = plen;
        if (i++ == n)
            return len ? tpl_keep(px, p, len) : NULL;
        p += len;
        plen -= len;
    }
    return NULL;
}


/* The agent's limits this request draws (core/limits.h), onto the
 * reservation: a request they count needs a key, since what is not
 * recorded cannot be counted (nor given back). 0, or answered and -1. */
static int proxy_limits(proxy *px, const char *key)
{
    req *r = px->c.r;
    const upstream_cfg *up = px->c.up;
    const agent_cfg *ag = grants_agent(r->who);
    limits_req q = {.kind = GRANT_UPSTREAM, .target = up->name, .method = r->method, .what = px->target};
    if (limits_need_body(ag, GRANT_UPSTREAM, up->name))
        q.body = json_loadb((const char *)r->body.data, r->body.len, 0, NULL);
    problem p;
    int rc = limits_apply(r->who, &q, up->approve_ttl_ms, &px->draw, &px->c.rreq, &p);
    json_decref(q.body);
    if (rc < 0) {
        req_problem_from(r, &p);
        return -1;
    }
    if (px->draw.n > 0 && !key) {
        req_problem(r, 400, "key_required", "Idempotency-Key required", NULL,
                    "%s on '%s' counts against a limit of agent '%s', which needs an Idempotency-Key", r->method,
                    up->name, ag->name);
        return -1;
    }
    return 0;
}

/* The key from the upstream's template. 0; or answered (400) and -1. */
static int key_from_template(proxy *px)
{
    req *r = px->c.r;
    /* Duplicate members are refused, as for webhook event ids: the key must
     * not come from one copy of a field while the upstream reads the other. */
    json_t *body = r->body.len ? json_loadb((const char *)r->body.data, r->body.len, JSON_REJECT_DUPLICATES, NULL)
                               : NULL;
    key_source src = {.header = tpl_header, .query = tpl_query, .path = tpl_path, .json = body, .ctx = px};
    char err[256] = "";
    int rc = key_template_eval(px->c.up->key, &src, px->c.key, sizeof px->c.key, err, sizeof err);
    json_decref(body);
    if (rc == -1) {
        req_problem(r, 400, "key_field_missing", "Key field missing", json_pack("{s:s}", "field", err),
                    "the key template of '%s' needs %s, which this request does not have; nothing was sent",
                    px->c.up->name, err);
        return -1;
    }
    if (rc < 0 || once_key_validate(px->c.key) < 0) {
        req_problem(r, 400, "invalid_key", "Invalid key", NULL, "the key template of '%s' gave no usable key: %s",
                    px->c.up->name, err[0] ? err : once_errdetail());
        return -1;
    }
    return 0;
}

static void proxy_handle(req *r)
{
    const upstream_cfg *up = r->up;
    const char *target = r->target;
    proxy *px = req_state_new(r, sizeof *px, rcall_drop);
    if (!px)
        return;
    rcall_init(&px->c, r, up, &proxy_ops);
    if (!(px->method = strdup(r->method))) {
        req_out_of_memory(r);
        return;
    }
    snprintf(r->scope, sizeof r->scope, "%s", up->name);

    px->target = target;
    const char *key = req_header(r, "Idempotency-Key");
    int safe = method_is_safe(r->method);
    if (up->key && (!safe || up->key_safe_methods) && (!key || up->key_from_template)) {
        /* The intent decides the key, not the attempt (docs/keys.md). */
        if (key_from_template(px) < 0)
            return;
        key = px->c.key;
        req_note_key(r, up->name, key);
    } else if (key) {
        if (once_key_validate(key) < 0) {
            req_problem(r, 400, "invalid_key", "Invalid Idempotency-Key", NULL, "%s", once_errdetail());
            return;
        }
        snprintf(px->c.key, sizeof px->c.key, "%s", key);
        req_note_key(r, up->name, key);
    } else if (up->key_required && (!safe || up->key_safe_methods)) {
        req_problem(r, 400, "key_required", "Idempotency-Key required", NULL,
                    "%s requests to '%s' need an Idempotency-Key derived from the intent", r->method, up->name);
        return;
    }
    /* An approval is of one stored request, under its key: without a key
     * nothing could be approved, so nothing is sent. */
    int approval = upstream_needs_approval(up, r->method, target);
    if (approval && !key) {
        req_problem(r, 400, "key_required", "Idempotency-Key required", NULL,
                    "%s %s on '%s' waits for a human's approval, which needs an Idempotency-Key", r->method,
                    target[0] ? target : "/", up->name);
        return;
    }

    char why[160];
    if (target_url(up->url, target, &px->url, why, sizeof why) < 0) {
        req_problem(r, 400, "invalid_path", "Invalid path", NULL, "%s; nothing was sent", why);
        return;
    }
    int failed = relay_client_headers(r, up, &px->headers) < 0;
    px->nclient = px->headers.count;
    failed = failed || relay_injected_headers(up, &px->headers) < 0;
    if (!failed && key && up->forward_key_as)
        failed = out_headers_add(&px->headers, up->forward_key_as, key) < 0;
    if (failed) {
        req_out_of_memory(r);
        return;
    }

    if (proxy_limits(px, key) < 0)
        return;
    if (!key) {
        forward(px, on_pass_done);
        return;
    }
    if (once_fingerprint(r->method, target, r->body.data, r->body.len, px->c.fp) < 0) {
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot fingerprint the request");
        return;
    }
    /* Who asks and what it draws are set already (proxy_limits). */
    px->c.rreq.scope = up->name;
    px->c.rreq.lease_ms = up->lease_ms;
    px->c.rreq.retention_ms = up->retention_ms;
    px->c.rreq.retry_unknown = up->forward_key_as != NULL;
    px->c.rreq.approval_ttl_ms = approval ? up->approve_ttl_ms : 0;
    int64_t wait = waiters_prefer_wait(req_header(r, "Prefer"));
    px->c.wait_deadline = wait ? clock_mono_ms() + wait : 0;
    rcall_start(&px->c);
}

/* ---- routes --------------------------------------------------------------- */

/* The target that starts at r->uri + at, checked (target.h) and made
 * canonical in place, so that every rule matches, and the upstream is sent,
 * one spelling of it: 400 bad_request for a broken escape, 400
 * ambiguous_path for a path an upstream with path rules could read two
 * ways, 400 invalid_path for anything that is not a path under the
 * upstream. */
static int admit_target(req *r, size_t at, problem *p)
{
    ONCE_ASSERT(at <= strlen(r->uri)); /* the target is r->uri's to rewrite */
    char *target = r->uri + at;
    char why[200];
    int rules = upstream_has_path_rules(r->up) || grants_has_path_rules(req_access_cfg(r), r->up->name);
    target_verdict v = rules ? target_ambiguous(target, why, sizeof why) : TARGET_OK;
    if (v == TARGET_OK)
        v = target_check(target, why, sizeof why);
    switch (v) {
    case TARGET_OK: break;
    case TARGET_MALFORMED: return problem_set(p, 400, "bad_request", "Bad request", "%s", why);
    case TARGET_AMBIGUOUS:
        return problem_set(p, 400, "ambiguous_path", "Ambiguous path", "%s; nothing was stored or sent", why);
    default: return problem_set(p, 400, "invalid_path", "Invalid path", "%s; nothing was sent", why);
    }
    target_canon(target);
    r->target = target;
    const agent_cfg *ag = grants_agent(r->who);
    if (!grants_upstream(ag, r->up->name, r->method, target)) {
        char what[ONCE_SCOPE_MAX + 64];
        snprintf(what, sizeof what, "%.16s on this path of the upstream '%s'", r->method, r->up->name);
        return grants_refuse(p, ag, what);
    }
    return 0;
}

/* /v1/proxy/{upstream}{target}: the upstream must exist. */
static int proxy_admit(req *r, problem *p)
{
    const char *rest = r->match.rest;
    if (!pct_valid(rest))
        return problem_set(p, 400, "bad_request", "Bad request", "malformed percent-encoding in the path");
    size_t nlen = strcspn(rest, "/?");
    char name[ONCE_SCOPE_MAX + 1];
    if (nlen == 0 || nlen > ONCE_SCOPE_MAX)
        return problem_set(p, 404, "unknown_upstream", "Unknown upstream", "no upstream in the path");
    memcpy(name, rest, nlen);
    name[nlen] = '\0';
    r->up = config_upstream(r->srv->cfg, name);
    if (r->up && r->up->mcp) {
        r->up = NULL;
        return problem_set(p, 404, "unknown_upstream", "Unknown upstream",
                           "'%s' is an MCP server: agents reach it at /v1/mcp/%s", name, name);
    }
    if (!r->up) {
        /* The caller is authenticated by now: naming what exists helps. */
        const once_config *cfg = r->srv->cfg;
        char known[160] = "";
        size_t at = 0;
        for (size_t i = 0, n = 0; i < cfg->nupstreams && at < sizeof known; i++)
            if (!cfg->upstreams[i].mcp)
                at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", n++ ? ", " : "",
                                       cfg->upstreams[i].name);
        return problem_set(p, 404, "unknown_upstream", "Unknown upstream", "no upstream named '%s' (%s%s)", name,
                           known[0] ? "upstreams: " : "none is configured", known);
    }
    return admit_target(r, (size_t)(rest - r->uri) + nlen, p);
}

/* An upstream's own listener: the whole target is the path. */
static int proxy_admit_listen(req *r, problem *p)
{
    return admit_target(r, 0, p);
}

const route proxy_routes[] = {
    {.pattern = "/v1/proxy/{**}", .name = "proxy", .access = ACCESS_AGENT, .admit = proxy_admit,
     .any = proxy_handle, .relays = 1},
    {.pattern = NULL},
};

const route proxy_listen_route = {
    .pattern = "{**}", .name = "proxy", .access = ACCESS_AGENT, .admit = proxy_admit_listen, .any = proxy_handle,
    .relays = 1};
