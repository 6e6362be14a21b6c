/*
 * mcp_call.c — one tools/call through the ledger (docs/mcp.md): the key from the intent (never the JSON-RPC id), the reservation
 * durable before the call goes to the server, the outcome recorded before
 * the agent hears it, and every repeat answered from the record.
 *
 * Threads, as for the proxy: the HTTP thread reserves; the store writer
 * hands a new reservation to the outbound thread (url server) or to a
 * worker that writes it to a stdio server (whose bridge thread reads the
 * answer); their end is recorded asynchronously and the writer answers. A
 * server that streams its answer (progress notifications, then the
 * response) has the notifications relayed as they come; the response goes
 * out last, once recorded, with once's _meta.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/fault.h"
#include "common/sse.h"
#include "server/core/grants.h"
#include "server/core/limits.h"
#include "server/core/upstream_call.h"
#include "server/core/leases.h"
#include "server/core/log.h"
#include "server/mcp/mcp.h"
#include "server/mcp/mcp_stdio.h"
#include "server/pipeline/rcall.h"
#include "server/front/relay.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/core/worker.h"
#include "server/front/stream.h"

#define MCP_WHY_MAX 300

typedef struct mcall {
    rcall c;             /* first: the pipeline's part (pipeline/rcall.h) */
    limits_draw draw;    /* what the reservation draws from the agent's limits (rreq points into it) */
    mcp_rt *rt;
    json_t *msg;         /* the agent's tools/call */
    json_t *id;          /* its id (msg's) */
    const char *tool;    /* msg's */
    /* the call to a url server */
    out_headers headers;
    buf body;
    out_call call;
    sse_parser sp;       /* its event stream, read event by event */
    int parsing;
    /* how it ended */
    json_t *final;       /* the server's response message */
    int sent;            /* the call may have reached the server */
    int relay_http;      /* an HTTP refusal, passed on as it came (released) */
    int unready;         /* released: the stdio server did not start within its timeout */
    int64_t ready_deadline; /* of the wait for a (re)starting stdio server; 0 before one */
    mcp_verdict verdict;
    char why[MCP_WHY_MAX];
    char *rec_body;      /* the result as recorded */
    /* notifications relayed to the agent while the call runs */
    stream *stream;
} mcall;

/* The MCP call's own members, when the last holder let go (rcall_drop). */
static void mcall_free(rcall *c)
{
    mcall *mc = (mcall *)c;
    ONCE_ASSERT(!mc->stream);
    if (mc->parsing)
        sse_parser_free(&mc->sp);
    json_decref(mc->msg);
    json_decref(mc->final);
    free(mc->rec_body);
    out_headers_clear(&mc->headers);
    buf_free(&mc->body);
    out_call_clear(&mc->call);
}

/* ---- answering the agent ------------------------------------------------------ */

/* One JSON-RPC message as an event of the agent's stream. */
static int sse_frame(buf *b, const char *data, size_t len)
{
    int rc = buf_append(b, "event: message\n", 15, SIZE_MAX - 1);
    while (rc == 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        rc = buf_append(b, "data: ", 6, SIZE_MAX - 1);
        if (rc == 0)
            rc = buf_append(b, data, n, SIZE_MAX - 1);
        if (rc == 0)
            rc = buf_append(b, "\n", 1, SIZE_MAX - 1);
        if (!nl)
            break;
        data += n + 1;
        len -= n + 1;
    }
    return rc == 0 ? buf_append(b, "\n", 1, SIZE_MAX - 1) : rc;
}

static void stream_room(void *ctx)
{
    mcall *mc = ctx;
    if (!mc->rt->stdio)
        outbound_resume(mc->c.srv->ob, &mc->call);
}

/* Relays one message to the agent on its event stream, opened at the
 * first. 0 taken; 1 the agent is more than a window behind and nothing
 * was taken (a notification is then dropped: progress is advisory; the
 * response is recorded anyway); -1 out of memory. */
static int relay_event(mcall *mc, const char *data, size_t len)
{
    if (!mc->stream) {
        struct MHD_Response *resp;
        if (!(mc->stream = stream_open(mc->c.srv, mc->c.r->conn, stream_room, mc, &resp)))
            return -1;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        rcall_hold(&mc->c);
        mc->c.r->outcome = "streaming";
        req_reply(mc->c.r, 200, resp); /* r may be gone from here on */
    }
    buf b = {0};
    int rc = sse_frame(&b, data, len);
    if (rc == 0) {
        stream_push_result pr = stream_push(mc->stream, b.data, b.len);
        rc = pr == STREAM_ERROR ? -1 : pr == STREAM_FULL ? 1 : 0;
    }
    buf_free(&b);
    return rc;
}

/* The answer (a JSON-RPC message, malloc'd, taken) on the stream when one
 * is open, else as the request's JSON answer. */
static void answer(mcall *mc, char *text, const char *outcome)
{
    metrics_mcp_call(mc->c.srv->metrics, mc->c.up->name, mc->tool, outcome);
    if (mc->stream) {
        /* Not taken: the stream is cut, so the agent's client fails the
         * call (and its retry is replayed) rather than wait for ever. */
        int ok = text && relay_event(mc, text, strlen(text)) == 0;
        free(text);
        stream_end(mc->stream, ok, NULL);
        mc->stream = NULL;
        rcall_drop(&mc->c);
        return;
    }
    mc->c.r->outcome = outcome;
    struct MHD_Response *resp = text ? resp_bytes(text, strlen(text), "application/json") : NULL;
    free(text);
    req_reply(mc->c.r, 200, resp);
}

static void answer_own(mcall *mc, const char *outcome, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* once's own outcome: an isError result whose text tells the model what
 * happened and whether to call again. */
static void answer_own(mcall *mc, const char *outcome, const char *fmt, ...)
{
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    answer(mc, mcp_own_answer(mc->id, outcome, mc->c.key, text), outcome);
}

/* A JSON-RPC error: the call was refused before anything happened. */
static void answer_error(mcall *mc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void answer_error(mcall *mc, int code, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    answer(mc, mcp_error_answer(mc->id, code, text), "refused");
}

static void answer_replay(mcall *mc)
{
    const once_action *a = &mc->c.res.action;
    int mismatch = mc->c.res.fingerprint_mismatch;
    metrics_action(mc->c.srv->metrics, mc->c.up->name, mismatch ? MO_MISMATCH : MO_REPLAYED);
    if (a->has_response && a->response.body_not_stored > 0) {
        answer_own(mc, "replayed",
                   "This tool call already completed, but its result (%lld bytes) was too large to keep. It was "
                   "delivered once and is not run again.",
                   (long long)a->response.body_not_stored);
        return;
    }
    json_t *result = a->has_response ? json_loadb((const char *)a->response.body, a->response.body_len, 0, NULL)
                                     : NULL;
    if (!result) {
        /* Resolved by a human: there is no result of the server's. */
        char text[600];
        snprintf(text, sizeof text, "This tool call was already made; a person recorded it as completed (%s%s). "
                 "Do not call it again.", a->provider_id ? "id " : "note: ",
                 a->provider_id ? a->provider_id : a->note ? a->note : "none");
        json_t *res = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text", text);
        answer(mc, res ? mcp_result_answer(mc->id, res, "replayed", mc->c.key, mismatch) : NULL, "replayed");
        json_decref(res);
        return;
    }
    answer(mc, mcp_result_answer(mc->id, result, "replayed", mc->c.key, mismatch), "replayed");
    json_decref(result);
}

static void answer_unknown(mcall *mc, once_reserve_status st)
{
    const char *state = st == ONCE_HELD ? "held" : "unknown";
    metrics_action(mc->c.srv->metrics, mc->c.up->name, st == ONCE_HELD ? MO_HELD : MO_UNKNOWN);
    const char *reason = mc->c.res.action.error ? mc->c.res.action.error : "no reason recorded";
    answer_own(mc, state,
               "The outcome of this tool call is unknown: an earlier attempt may have performed it (%s). It will "
               "not be called again until a person resolves it. Do not retry it; tell the user it needs checking.",
               reason);
}

/* Answers from an existing row (anything but a new reservation; the
 * pipeline has waited where the server's wait asked it to). */
static void mcall_existing(rcall *c)
{
    mcall *mc = (mcall *)c;
    metrics *m = c->srv->metrics;
    switch (c->res.status) {
    case ONCE_COMPLETED: answer_replay(mc); break;
    case ONCE_IN_FLIGHT:
        metrics_action(m, c->up->name, MO_IN_FLIGHT);
        answer_own(mc, "in_flight",
                   "The same tool call is still running (started by an earlier attempt). Call it again in a "
                   "little while to get its result; it will not run twice.");
        break;
    case ONCE_UNKNOWN:
    case ONCE_HELD: answer_unknown(mc, c->res.status); break;
    case ONCE_AWAITING_APPROVAL:
        metrics_action(m, c->up->name, MO_AWAITING);
        answer_own(mc, "awaiting_approval",
                   "This tool call needs a person's approval before it runs; it is stored and waiting%s. Call it "
                   "again later with the same arguments to get its result; it runs at most once.",
                   c->res.action.approved_at > 0 ? " (approved: it is being sent)" : "");
        break;
    case ONCE_DENIED:
        metrics_action(m, c->up->name, MO_DENIED);
        answer_own(mc, "denied", "A person did not approve this tool call (%s); it was not run and will not be.",
                   c->res.action.note ? c->res.action.note : "no note");
        break;
    case ONCE_OVER_LIMIT: {
        problem p;
        char retry[24];
        limits_refusal(&mc->draw, &c->res, &p, retry);
        answer_own(mc, "limit_exceeded", "%s. The tool call was not run.", p.detail);
        break;
    }
    default: answer_error(mc, -32603, "unexpected reservation status %d", (int)c->res.status);
    }
}

/* ---- recording ------------------------------------------------------------------ */

static void mcall_recorded(rcall *c, int rc, const char *detail)
{
    mcall *mc = (mcall *)c;
    metrics *m = c->srv->metrics;
    const char *name = c->up->name;
    if (rc < 0 && mc->verdict == MCP_RELEASED && !mc->sent && !mc->stream) {
        req_problem(mc->c.r, 503, "store_unavailable", "Store unavailable", NULL,
                    "nothing was sent to the MCP server, but the release could not be recorded: %s", detail);
        return;
    }
    if (rc < 0) {
        /* Called, and the ledger did not take the outcome: the row stays
         * pending, expires and is held. Never pretend. */
        metrics_action(m, name, MO_UNKNOWN);
        log_event("error", "mcp %s: the outcome of a tool call could not be recorded: %s", name, detail);
        answer_own(mc, "unknown",
                   "The tool was called but its outcome could not be recorded (%s). It will not be called again "
                   "until a person resolves it.", detail);
        return;
    }
    switch (mc->verdict) {
    case MCP_COMPLETED:
        answer(mc, mcp_result_answer(mc->id, json_object_get(mc->final, "result"), "completed", mc->c.key, 0),
               "completed");
        break;
    case MCP_RELEASED:
        metrics_action(m, name, MO_RELEASED);
        if (!mc->sent && !mc->stream && mc->unready) {
            req_set_header(mc->c.r, "Retry-After", "1");
            req_problem(mc->c.r, 503, "upstream_unavailable", "Upstream unavailable", NULL, "%s; nothing was done",
                        mc->why);
        } else if (!mc->sent && !mc->stream) {
            req_problem(mc->c.r, 502, "upstream_unreachable", "Upstream unreachable", NULL, "%s; nothing was done",
                        mc->why);
        } else if (mc->relay_http && !mc->stream) {
            out_call *oc = &mc->call;
            req_reply(mc->c.r, (unsigned)oc->status,
                      relay_response((const char *)oc->resp_headers.data, oc->resp_body.data, oc->resp_body.len));
        } else {
            json_object_set(mc->final, "id", mc->id);
            answer(mc, json_dumps(mc->final, JSON_COMPACT), "released");
        }
        break;
    case MCP_UNKNOWN:
        metrics_action(m, name, MO_UNKNOWN);
        char logged[MCP_WHY_MAX];
        mcp_why_for_log(mc->final, mc->why, logged, sizeof logged);
        log_event("warn", "mcp %s: a call of tool %s ended as unknown: %s", name, mc->tool, logged);
        answer_own(mc, "unknown",
                   "The tool was called but its outcome is unknown (%s). It may have happened. It will not be "
                   "called again until a person resolves it; do not retry it.", mc->why);
        break;
    }
}

/* Records the call's verdict: a completed call's result as the answer. */
static void record(mcall *mc)
{
    verdict v = {.kind = VERDICT_UNKNOWN};
    if (mc->verdict == MCP_COMPLETED) {
        mc->rec_body = json_dumps(json_object_get(mc->final, "result"), JSON_COMPACT);
        if (!mc->rec_body) {
            mc->verdict = MCP_UNKNOWN;
            snprintf(mc->why, sizeof mc->why, "out of memory while recording the result");
        } else {
            v.kind = VERDICT_COMPLETED;
            v.resp = (once_response){.status = 200, .body = (uint8_t *)mc->rec_body,
                                     .body_len = strlen(mc->rec_body)};
        }
    } else if (mc->verdict == MCP_RELEASED) {
        v.kind = VERDICT_RELEASED;
    }
    if (v.kind != VERDICT_COMPLETED)
        snprintf(v.why, sizeof v.why, "%s", mc->why);
    rcall_record(&mc->c, &v);
}

/* ---- a url server ------------------------------------------------------------------ */

/* Each event of the server's stream: the response to this call is kept
 * (it goes out once recorded); anything else is relayed now. */
static void on_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    mcall *mc = ctx;
    (void)name;
    if (truncated)
        return;
    json_t *msg = json_loadb(data, len, 0, NULL);
    if (json_is_object(msg) && !json_object_get(msg, "method") && json_equal(json_object_get(msg, "id"), mc->id)) {
        json_decref(mc->final);
        mc->final = msg;
        return;
    }
    json_decref(msg);
    if (len && relay_event(mc, data, len) < 0)
        log_event("warn", "mcp %s: a notification could not be relayed (out of memory)", mc->c.up->name);
}

static int url_stream_start(out_call *c)
{
    mcall *mc = c->ctx;
    if (c->status != 200)
        return 0;
    sse_parser_init(&mc->sp, on_event, mc);
    mc->parsing = 1;
    return 1;
}

static int url_stream_data(out_call *c, const uint8_t *p, size_t n)
{
    mcall *mc = c->ctx;
    return sse_parser_feed(&mc->sp, p, n) < 0 ? OUT_STREAM_FAIL : OUT_STREAM_TAKEN;
}

static const out_stream_hooks url_hooks = {.start = url_stream_start, .data = url_stream_data};

/* The verdict on a url server's HTTP answer. */
static void url_classify(mcall *mc)
{
    out_call *c = &mc->call;
    mc->sent = c->kind != OUT_NOT_SENT;
    if (c->kind != OUT_ANSWERED) {
        snprintf(mc->why, sizeof mc->why, "%s", c->error);
        mc->verdict = c->kind == OUT_NOT_SENT ? MCP_RELEASED : MCP_UNKNOWN;
        return;
    }
    if (mcp_http_refused(c->status)) {
        /* Refused before the tool ran (a bad or expired session, auth,
         * overload): passed on as it came, so the agent's client can act. */
        snprintf(mc->why, sizeof mc->why, "the MCP server answered HTTP %ld", c->status);
        mc->relay_http = 1;
        mc->verdict = MCP_RELEASED;
        return;
    }
    if (!c->streamed && c->status == 200 && c->resp_body.len)
        mc->final = json_loadb((const char *)c->resp_body.data, c->resp_body.len, 0, NULL);
    if (c->status != 200) {
        snprintf(mc->why, sizeof mc->why, "the MCP server answered HTTP %ld", c->status);
        mc->verdict = MCP_UNKNOWN;
        return;
    }
    if (mc->final && !json_equal(json_object_get(mc->final, "id"), mc->id)) {
        json_decref(mc->final);
        mc->final = NULL;
    }
    mc->verdict = mcp_classify(mc->final, mc->why, sizeof mc->why);
    if (!mc->final && c->streamed)
        snprintf(mc->why, sizeof mc->why, "the MCP server's event stream ended without the call's response");
}

static void on_url_done(out_call *c)
{
    mcall *mc = c->ctx;
    FAULT_POINT("after_upstream");
    metrics_upstream(mc->c.srv->metrics, mc->c.up->name, c->seconds);
    if (!mc->stream)
        mc->c.r->upstream_ms = c->seconds * 1e3;
    url_classify(mc);
    record(mc);
}

static void forward_url(mcall *mc)
{
    out_call *c = &mc->call;
    upstream_call_request(c, mc->c.up, "POST", mc->c.up->url, &mc->headers, mc->body.data, mc->body.len);
    c->stream = &url_hooks;
    c->done = on_url_done;
    c->ctx = mc;
    int rc = outbound_submit(mc->c.srv->ob, c);
    if (rc < 0) {
        snprintf(mc->why, sizeof mc->why, "%s", rc == ONCE_ECLOSED ? "the gateway is stopping" : "out of memory");
        mc->verdict = MCP_RELEASED;
        mc->sent = 0;
        record(mc);
    }
}

/* ---- a stdio server ------------------------------------------------------------------ */

static void on_stdio_note(void *ctx, const json_t *note)
{
    mcall *mc = ctx;
    char *text = json_dumps(note, JSON_COMPACT);
    if (text && relay_event(mc, text, strlen(text)) < 0)
        log_event("warn", "mcp %s: a notification could not be relayed (out of memory)", mc->c.up->name);
    free(text);
}

static void on_stdio_done(void *ctx, json_t *msg, int sent, const char *why)
{
    mcall *mc = ctx;
    mc->final = msg;
    mc->sent = sent;
    if (!msg) {
        snprintf(mc->why, sizeof mc->why, "%s", why);
        mc->verdict = sent ? MCP_UNKNOWN : MCP_RELEASED;
    } else {
        mc->verdict = mcp_classify(msg, mc->why, sizeof mc->why);
    }
    record(mc);
}

static void forward_stdio(void *arg);

/* Nothing was sent: the key is released, so the retry runs the call. */
static void stdio_not_sent(mcall *mc, int unready)
{
    mc->verdict = MCP_RELEASED;
    mc->sent = 0;
    mc->unready = unready;
    record(mc);
}

/* The wait for a (re)starting server ended (bridge thread): the call goes
 * from a worker, never from the bridge. */
static void on_stdio_ready(void *ctx, mcp_stdio_readiness how)
{
    mcall *mc = ctx;
    if (how == MCP_STDIO_READY && worker_run(mc->c.srv->worker, forward_stdio, mc) == 0)
        return;
    snprintf(mc->why, sizeof mc->why, "the stdio MCP server '%s' is not running: %s", mc->c.up->name,
             how == MCP_STDIO_LATE ? "it did not start within its timeout" : "the gateway is stopping");
    stdio_not_sent(mc, how == MCP_STDIO_LATE);
}

/* On a worker: writing to a stdio server may wait on its pipe (up to a
 * bound), which neither the store's writer nor an HTTP thread may. A
 * server (re)starting is waited for, up to its timeout, with the call
 * reserved (a duplicate waits for it as for any call in flight). */
static void forward_stdio(void *arg)
{
    mcall *mc = arg;
    for (;;) {
        int rc = mcp_stdio_call(mc->rt->stdio, mc->msg, mc->c.up->timeout_ms, on_stdio_done, on_stdio_note, mc,
                                mc->why, sizeof mc->why);
        if (rc == 0)
            return;
        if (rc != MCP_STDIO_NOT_READY) {
            stdio_not_sent(mc, 0);
            return;
        }
        if (!mc->ready_deadline)
            mc->ready_deadline = clock_mono_ms() + mc->c.up->timeout_ms;
        int w = mcp_stdio_when_ready(mc->rt->stdio, mc->ready_deadline, on_stdio_ready, mc);
        if (w == 0)
            return; /* on_stdio_ready goes on */
        if (w < 0) {
            snprintf(mc->why, sizeof mc->why, "the stdio MCP server '%s' did not start within its timeout",
                     mc->c.up->name);
            stdio_not_sent(mc, 1);
            return;
        }
    }
}

/* ---- reserving ------------------------------------------------------------------------ */

/* The stored request: the tool and its arguments, what a human approves
 * and once_show shows. */
static int mcall_describe(rcall *c, char **out)
{
    mcall *mc = (mcall *)c;
    *out = mcp_stored_request(mc->tool, json_object_get(mc->msg, "params"));
    return *out ? ONCE_OK : ONCE_ENOMEM;
}

/* A new reservation: to a url server on the outbound thread, to a stdio
 * server from a worker (store writer or syncer). */
static void mcall_forward(rcall *c)
{
    mcall *mc = (mcall *)c;
    if (!mc->rt->stdio) {
        forward_url(mc);
    } else if (worker_run(c->srv->worker, forward_stdio, mc) < 0) {
        snprintf(mc->why, sizeof mc->why, "the gateway is stopping");
        mc->verdict = MCP_RELEASED;
        mc->sent = 0;
        record(mc);
    }
}

static const rcall_ops mcall_ops = {.describe = mcall_describe,
                                    .forward = mcall_forward,
                                    .existing = mcall_existing,
                                    .recorded = mcall_recorded,
                                    .waits_for_decision = NULL,
                                    .free = mcall_free};

/* ---- entry ------------------------------------------------------------------------------ */

static const char *tpl_header(void *ctx, const char *name)
{
    mcall *mc = ctx;
    return req_header(mc->c.r, name);
}

/* The ledger key TOOL:KEY. 0; or answered (a JSON-RPC error) and -1. */
static int call_key(mcall *mc, json_t *params)
{
    char key[ONCE_KEY_MAX + 1], err[256] = "";
    key_source hsrc = {.header = tpl_header, .ctx = mc};
    int rc = mcp_call_key(mc->c.up, mc->tool, params, req_header(mc->c.r, "Idempotency-Key"), &hsrc, key, sizeof key,
                          err, sizeof err);
    if (rc == -1) {
        answer_error(mc, -32602, "the key template of tool '%s' needs %s, which this call does not have; nothing "
                     "was done", mc->tool, err);
        return -1;
    }
    if (rc < 0) {
        answer_error(mc, -32602, "no usable idempotency key for this call: %s; nothing was done", err);
        return -1;
    }
    int n = snprintf(mc->c.key, sizeof mc->c.key, "%s:%s", mc->tool, key);
    if (n < 0 || (size_t)n >= sizeof mc->c.key || once_key_validate(mc->c.key) < 0) {
        answer_error(mc, -32602, "the idempotency key of this call is not usable (at most %d printable ASCII "
                     "characters with the tool's name); nothing was done", ONCE_KEY_MAX);
        return -1;
    }
    req_note_key(mc->c.r, mc->c.up->name, mc->c.key);
    return 0;
}

void mcp_call_start(req *r, mcp_rt *rt, json_t *msg)
{
    json_t *params = json_object_get(msg, "params");
    const char *tool = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    const agent_cfg *ag = grants_agent(r->who);
    int granted = !tool || grants_tool(ag, rt->up->name, tool);
    if (granted && tool && config_mcp_tool_ok(tool, strlen(tool)) && !mcp_tool_recorded(rt->up, rt->tools, tool)) {
        metrics_mcp_call(r->srv->metrics, rt->up->name, tool, "readonly");
        mcp_pass(r, rt, msg);
        json_decref(msg);
        return;
    }
    mcall *mc = req_state_new(r, sizeof *mc, rcall_drop);
    if (!mc) {
        json_decref(msg);
        return;
    }
    rcall_init(&mc->c, r, rt->up, &mcall_ops);
    mc->rt = rt;
    mc->msg = msg;
    mc->id = json_object_get(msg, "id");
    /* The tool names a metrics series and log lines: only a name once can
     * key, whatever else is wrong with the call. */
    int tool_ok = tool && config_mcp_tool_ok(tool, strlen(tool));
    mc->tool = tool_ok ? tool : "_invalid";
    if (!json_is_object(params) || !tool || (args && !json_is_object(args))) {
        answer_error(mc, -32602, "tools/call needs params.name (a string) and params.arguments (an object)");
        return;
    }
    if (!tool_ok) {
        answer_error(mc, -32602, "once records tools named with 1-128 of A-Z a-z 0-9 _ - . / only; nothing was "
                     "done");
        return;
    }
    if (!granted) {
        answer_own(mc, "not_allowed",
                   "The agent '%s' may not call the tool '%s' of '%s' (no allow line of [agent.%s] grants it). "
                   "Nothing was done; calling again will not change that.",
                   ag->name, tool, rt->up->name, ag->name);
        return;
    }
    if (call_key(mc, params) < 0)
        return;
    char *canon = mcp_canonical_args(params);
    int rc = canon ? once_fingerprint("POST", tool, (const uint8_t *)canon, strlen(canon), mc->c.fp) : -1;
    free(canon);
    if (rc < 0) {
        req_out_of_memory(r);
        return;
    }
    if (!rt->stdio && (relay_client_headers(r, rt->up, &mc->headers) < 0 ||
                       relay_injected_headers(rt->up, &mc->headers) < 0 ||
                       buf_append(&mc->body, r->body.data, r->body.len, SIZE_MAX - 1) < 0)) {
        req_out_of_memory(r);
        return;
    }
    int approval = mcp_tool_needs_approval(rt->up, rt->tools, tool);
    limits_req lq = {.kind = GRANT_MCP, .target = rt->up->name, .what = tool, .body = params};
    problem p;
    if (limits_apply(r->who, &lq, rt->up->approve_ttl_ms, &mc->draw, &mc->c.rreq, &p) < 0) {
        answer_error(mc, -32602, "%s", p.detail);
        return;
    }
    /* Who asks and what it draws are set already (limits_apply). */
    mc->c.rreq.scope = rt->up->name;
    mc->c.rreq.lease_ms = rt->up->lease_ms;
    mc->c.rreq.retention_ms = rt->up->retention_ms;
    mc->c.rreq.approval_ttl_ms = approval ? rt->up->approve_ttl_ms : 0;
    mc->c.wait_deadline = rt->up->wait_ms ? clock_mono_ms() + rt->up->wait_ms : 0;
    rcall_start(&mc->c);
}
