/*
 * mcp.c — /v1/mcp/NAME (docs/mcp.md): the routes of the MCP gateway, the
 * pass-through of everything that is not a tools/call, and each server's
 * runtime.
 *
 * A url server sees the agent's own session: requests go to it as they
 * came (the agent's Authorization replaced by the injected headers), and
 * answers come back as they were, event streams relayed while they arrive.
 * Two things are read on the way: tools/list answers (the tools'
 * annotations decide what is recorded) and tools/list_changed
 * notifications (which make the gateway forget them). A stdio server has
 * one client, once (mcp_stdio.c): once answers an agent's initialize with
 * the server's, and relays the agent's other requests under its own ids.
 * A request that finds a stdio server (re)starting waits for it (up to the
 * server's timeout) on the bridge's list, its connection parked; /readyz
 * asks mcp_ready whether every stdio server has started.
 */
#include "server/core/grants.h"
#include "server/core/upstream_call.h"
#include "server/mcp/mcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "common/clock.h"
#include "common/hex.h"
#include "common/sse.h"
#include "server/core/log.h"
#include "server/core/refcount.h"
#include "server/mcp/mcp_stdio.h"
#include "server/front/relay.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/core/worker.h"
#include "server/front/stream.h"

/* ---- runtimes -------------------------------------------------------------- */

int mcp_start(server *srv)
{
    const once_config *cfg = srv->cfg;
    srv->mcp = calloc(cfg->nupstreams + 1, sizeof *srv->mcp);
    if (!srv->mcp)
        return -1;
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        const upstream_cfg *up = &cfg->upstreams[i];
        mcp_rt *rt = &srv->mcp[i];
        if (!up->mcp)
            continue;
        rt->srv = srv;
        rt->up = up;
        if (mcp_tools_new(&rt->tools) < 0)
            return -1;
        if (up->command && mcp_stdio_start(up, rt->tools, &rt->stdio) < 0)
            return -1;
    }
    return 0;
}

void mcp_stop(server *srv)
{
    for (size_t i = 0; srv->mcp && i < srv->cfg->nupstreams; i++)
        mcp_stdio_stop(srv->mcp[i].stdio);
}

void mcp_free(server *srv)
{
    if (!srv->mcp)
        return;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++) {
        mcp_stdio_free(srv->mcp[i].stdio);
        mcp_tools_free(srv->mcp[i].tools);
    }
    free(srv->mcp);
    srv->mcp = NULL;
}

int mcp_ready(server *srv, problem *p)
{
    for (size_t i = 0; srv->mcp && i < srv->cfg->nupstreams; i++) {
        const mcp_rt *rt = &srv->mcp[i];
        if (rt->stdio && !mcp_stdio_started(rt->stdio)) {
            problem_set(p, 503, "mcp_starting", "MCP server starting",
                        "the stdio MCP server '%s' has not answered initialize yet", rt->up->name);
            p->header = "Retry-After";
            snprintf(p->header_value, sizeof p->header_value, "1");
            return -1;
        }
    }
    return 0;
}

mcp_rt *mcp_runtime(server *srv, const upstream_cfg *up)
{
    if (!srv->mcp || !up || !up->mcp)
        return NULL;
    return &srv->mcp[up - srv->cfg->upstreams];
}

char *mcp_stored_request(const char *tool, const json_t *params)
{
    json_t *args = json_object_get(params, "arguments");
    json_t *a = args ? json_incref(args) : json_object();
    json_t *o = a ? json_pack("{s:s, s:s, s:o}", "mcp", "tools/call", "tool", tool, "arguments", a) : NULL;
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- the pass-through of a url server ----------------------------------------- */

typedef struct mpass {
    req *r;          /* not to be read once a stream answered it */
    server *srv;
    mcp_rt *rt;
    refcount holders; /* the request, and a relayed stream until it ends (core/refcount.h) */
    char *method;
    out_headers headers;
    buf body;
    out_call call;
    int learn;       /* a tools/list: the answer is read for the tools' annotations */
    int first_page;
    json_t *id;      /* of the tools/list */
    stream *stream;
    sse_parser watch; /* a relayed stream, read for tools/list_changed */
    int watching;
} mpass;

/* A holder lets go (the request's req_state_free, or the end of a relayed
 * stream): the last one frees. */
static void mpass_free(void *arg)
{
    mpass *p = arg;
    if (!p || !refcount_drop(&p->holders))
        return;
    if (p->watching)
        sse_parser_free(&p->watch);
    free(p->method);
    out_headers_clear(&p->headers);
    buf_free(&p->body);
    out_call_clear(&p->call);
    json_decref(p->id);
    free(p);
}

/* Is msg the response to a request with id? */
static int rpc_is_response_to(const json_t *msg, const json_t *id)
{
    return json_is_object(msg) && !json_object_get(msg, "method") && id && json_equal(json_object_get(msg, "id"), id);
}

static void watch_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    mpass *p = ctx;
    (void)name;
    (void)truncated;
    if (memmem(data, len, "notifications/tools/list_changed", 32))
        mcp_tools_forget(p->rt->tools);
}

static void pass_room(void *ctx)
{
    mpass *p = ctx;
    outbound_resume(p->srv->ob, &p->call);
}

/* An event stream from the server (the answer to a POST, or the standing
 * GET stream) is relayed as it arrives. */
static int pass_stream_start(out_call *c)
{
    mpass *p = c->ctx;
    struct MHD_Response *resp;
    if (!(p->stream = stream_open(p->srv, p->r->conn, pass_room, p, &resp)))
        return -1;
    relay_add_headers(resp, (const char *)c->resp_headers.data);
    if (strcmp(p->method, "GET") == 0)
        stream_no_drain(p->stream); /* it has no end of its own */
    sse_parser_init(&p->watch, watch_event, p);
    p->watching = 1;
    refcount_hold(&p->holders);
    req_reply(p->r, (unsigned)c->status, resp); /* r may be gone from here on */
    return 1;
}

static int pass_stream_data(out_call *c, const uint8_t *b, size_t n)
{
    mpass *p = c->ctx;
    /* Nothing is recorded here: once the agent has gone, so has the point. */
    if (stream_caller_gone(p->stream))
        return OUT_STREAM_FAIL;
    switch (stream_push(p->stream, b, n)) {
    case STREAM_FULL: return OUT_STREAM_PAUSE;
    case STREAM_ERROR: return OUT_STREAM_FAIL;
    case STREAM_TAKEN: break;
    }
    if (sse_parser_feed(&p->watch, b, n) < 0) {
        sse_parser_free(&p->watch);
        sse_parser_init(&p->watch, watch_event, p);
    }
    return OUT_STREAM_TAKEN;
}

static const out_stream_hooks pass_hooks = {.start = pass_stream_start, .data = pass_stream_data};

typedef struct learn_ctx {
    mpass *p;
    json_t *found;
} learn_ctx;

static void learn_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    learn_ctx *l = ctx;
    (void)name;
    if (truncated || l->found)
        return;
    json_t *msg = json_loadb(data, len, 0, NULL);
    if (rpc_is_response_to(msg, l->p->id))
        l->found = msg;
    else
        json_decref(msg);
}

/* tools/list through once lists only the tools the agent may call
 * (docs/agents.md): msg's result.tools, filtered in place. */
static void tools_filter(json_t *msg, const agent_cfg *ag, const char *mcp)
{
    json_t *tools = json_object_get(json_object_get(msg, "result"), "tools");
    for (size_t i = 0; i < json_array_size(tools);) {
        const char *name = json_string_value(json_object_get(json_array_get(tools, i), "name"));
        if (name && grants_tool(ag, mcp, name))
            i++;
        else
            json_array_remove(tools, i);
    }
}

/* A tools/list answer (JSON, or an event stream read whole): the tools'
 * annotations are learned from it. Returns the answer (the caller's to
 * free), or NULL when none was found in the body. */
static json_t *pass_learn(mpass *p)
{
    out_call *c = &p->call;
    learn_ctx l = {.p = p};
    if (c->resp_body.len && c->resp_body.data[0] == '{') {
        l.found = json_loadb((const char *)c->resp_body.data, c->resp_body.len, 0, NULL);
    } else {
        sse_parser sp;
        sse_parser_init(&sp, learn_event, &l);
        sse_parser_feed(&sp, c->resp_body.data, c->resp_body.len);
        sse_parser_free(&sp);
    }
    if (!rpc_is_response_to(l.found, p->id)) {
        json_decref(l.found);
        return NULL;
    }
    mcp_tools_learn(p->rt->tools, json_object_get(l.found, "result"), p->first_page);
    return l.found;
}

static void reply_rpc(req *r, unsigned status, char *text, const char *session);

static void on_pass_done(out_call *c)
{
    mpass *p = c->ctx;
    metrics_upstream(p->srv->metrics, p->rt->up->name, c->seconds);
    if (p->stream) {
        stream_end(p->stream, c->kind == OUT_ANSWERED, NULL);
        p->stream = NULL;
        mpass_free(p);
        return;
    }
    req *r = p->r;
    r->upstream_ms = c->seconds * 1e3;
    json_t *list = p->learn && c->kind == OUT_ANSWERED && c->status == 200 ? pass_learn(p) : NULL;
    const agent_cfg *ag = grants_agent(r->who);
    if (p->learn && ag && c->kind == OUT_ANSWERED && c->status == 200) {
        /* An agent with grants sees the granted tools only: an answer that
         * cannot be read cannot be filtered, so it is not relayed. */
        if (list)
            tools_filter(list, ag, p->rt->up->name);
        if (list)
            reply_rpc(r, 200, json_dumps(list, JSON_COMPACT), NULL);
        else
            req_problem(r, 502, "upstream_failed", "Upstream failed", NULL,
                        "the MCP server's tools/list answer could not be read, so it cannot be filtered for agent "
                        "'%s'",
                        ag->name);
        json_decref(list);
        return;
    }
    json_decref(list);
    relay_answer(r, c);
}

static void pass_url(req *r, mcp_rt *rt, json_t *msg)
{
    const upstream_cfg *up = rt->up;
    mpass *p = req_state_new(r, sizeof *p, mpass_free);
    if (!p)
        return;
    p->r = r;
    p->srv = r->srv;
    p->rt = rt;
    refcount_init(&p->holders, 1);
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *params = json_object_get(msg, "params");
    if (method && strcmp(method, "tools/list") == 0 && json_object_get(msg, "id")) {
        p->learn = 1;
        p->first_page = !json_object_get(params, "cursor");
        p->id = json_incref(json_object_get(msg, "id"));
    }
    if (!(p->method = strdup(r->method)) || relay_client_headers(r, up, &p->headers) < 0 ||
        relay_injected_headers(up, &p->headers) < 0 ||
        /* A GET or DELETE carries nothing to the server: a body there
         * could be a tools/call that no ledger saw. */
        (msg && r->body.len && buf_append(&p->body, r->body.data, r->body.len, SIZE_MAX - 1) < 0)) {
        req_out_of_memory(r);
        return;
    }
    out_call *c = &p->call;
    upstream_call_request(c, up, p->method, up->url, &p->headers, p->body.data, p->body.len);
    if (strcmp(r->method, "GET") == 0)
        c->timeout_ms = 0; /* the standing GET stream lasts as long as the agent keeps it */
    c->stream = p->learn ? NULL : &pass_hooks;
    c->done = on_pass_done;
    c->ctx = p;
    int rc = outbound_submit(r->srv->ob, c);
    if (rc < 0)
        req_not_started(r, rc == ONCE_ECLOSED ? "the gateway is stopping" : "out of memory");
}

/* ---- the pass-through of a stdio server --------------------------------------- */

/* A JSON answer with the agent's session header. */
static void reply_rpc(req *r, unsigned status, char *text, const char *session)
{
    struct MHD_Response *resp = text ? resp_bytes(text, strlen(text), "application/json") : NULL;
    free(text);
    if (resp && session)
        MHD_add_response_header(resp, "Mcp-Session-Id", session);
    req_reply(r, status, resp);
}

/* A 503 for a request that found the stdio server not running: nothing
 * was sent, and a retry in a moment may be served. */
static void stdio_unavailable(req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void stdio_unavailable(req *r, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    req_set_header(r, "Retry-After", "1");
    req_problem(r, 503, "upstream_unavailable", "Upstream unavailable", NULL, "%s; nothing was sent", why);
}

/* Why a wait for a stdio server ended without it. */
static const char *unready_why(mcp_stdio_readiness how)
{
    return how == MCP_STDIO_STOPPED ? "the gateway is stopping" : "it did not start within its timeout";
}

typedef struct spass {
    req *r;
    mcp_rt *rt;
    json_t *msg;
    json_t *id;
    int learn;
    int first_page;
    int64_t ready_deadline; /* of a wait for the server to (re)start; 0 before one */
} spass;

static void spass_free(void *arg)
{
    spass *p = arg;
    if (p) {
        json_decref(p->msg);
        json_decref(p->id);
    }
    free(p);
}

static void on_stdio_answer(void *ctx, json_t *msg, int sent, const char *why)
{
    spass *p = ctx;
    req *r = p->r;
    (void)sent;
    if (!msg) {
        req_problem(r, 504, "upstream_failed", "Upstream failed", NULL, "%s", why);
        return;
    }
    if (p->learn) {
        mcp_tools_learn(p->rt->tools, json_object_get(msg, "result"), p->first_page);
        const agent_cfg *ag = grants_agent(r->who);
        if (ag)
            tools_filter(msg, ag, p->rt->up->name);
    }
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    reply_rpc(r, 200, text, NULL);
}

static void stdio_send(void *arg);

/* The server is back (or the wait is over): sent from a worker, never
 * from the bridge. */
static void on_pass_ready(void *ctx, mcp_stdio_readiness how)
{
    spass *p = ctx;
    if (how != MCP_STDIO_READY)
        stdio_unavailable(p->r, "the stdio MCP server '%s' is not running: %s", p->rt->up->name, unready_why(how));
    else if (worker_run(p->r->srv->worker, stdio_send, p) < 0)
        req_not_started(p->r, "the worker queue refused it");
}

/* On a worker: the write may wait on the server's pipe (up to a bound). A
 * server (re)starting is waited for, up to its timeout. */
static void stdio_send(void *arg)
{
    spass *p = arg;
    const upstream_cfg *up = p->rt->up;
    char why[160];
    for (;;) {
        int rc = mcp_stdio_call(p->rt->stdio, p->msg, up->timeout_ms, on_stdio_answer, NULL, p, why, sizeof why);
        if (rc == 0)
            return;
        if (rc != MCP_STDIO_NOT_READY)
            break;
        if (!p->ready_deadline)
            p->ready_deadline = clock_mono_ms() + up->timeout_ms;
        int w = mcp_stdio_when_ready(p->rt->stdio, p->ready_deadline, on_pass_ready, p);
        if (w == 0)
            return; /* on_pass_ready answers or sends */
        if (w < 0) {
            snprintf(why, sizeof why, "the stdio MCP server '%s' did not start within its timeout", up->name);
            break;
        }
    }
    stdio_unavailable(p->r, "%s", why);
}

/* An agent's initialize of a stdio server, waiting for the server. */
typedef struct sinit {
    req *r;
    mcp_rt *rt;
    json_t *id;
    int64_t deadline;
} sinit;

static void sinit_free(void *arg)
{
    sinit *w = arg;
    if (w)
        json_decref(w->id);
    free(w);
}

/* once's answer to an initialize: the server's own answer to once's, and a
 * session id that only names the agent's session to itself. */
static void init_answer(req *r, const json_t *id, json_t *result)
{
    unsigned char raw[16];
    char session[33];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        json_decref(result);
        req_problem(r, 500, "internal", "Internal error", NULL, "no randomness for a session id");
        return;
    }
    hex_encode(raw, sizeof raw, session);
    json_t *o = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? (json_t *)id : json_null(), "result",
                          result);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    reply_rpc(r, 200, text, session);
}

static void on_init_ready(void *ctx, mcp_stdio_readiness how);

/* Answers w's initialize if the server is ready, else waits for it (the
 * connection stays parked: no thread waits). Any thread; the bridge's
 * when the wait ends. */
static void init_try(sinit *w)
{
    for (;;) {
        json_t *result = mcp_stdio_init_result(w->rt->stdio);
        if (result) {
            init_answer(w->r, w->id, result);
            return;
        }
        int rc = mcp_stdio_when_ready(w->rt->stdio, w->deadline, on_init_ready, w);
        if (rc == 0)
            return;
        if (rc < 0)
            break;
        /* ready again: its answer is there now, unless it died at once */
    }
    stdio_unavailable(w->r, "the stdio MCP server '%s' did not start within its timeout", w->rt->up->name);
}

static void on_init_ready(void *ctx, mcp_stdio_readiness how)
{
    sinit *w = ctx;
    if (how == MCP_STDIO_READY)
        init_try(w);
    else
        stdio_unavailable(w->r, "the stdio MCP server '%s' is not running: %s", w->rt->up->name, unready_why(how));
}

/* An initialize is answered by once with the server's own answer to once's
 * initialize; while the server (re)starts, it waits for it. */
static void stdio_initialize(req *r, mcp_rt *rt, json_t *msg)
{
    sinit *w = req_state_new(r, sizeof *w, sinit_free);
    if (!w)
        return;
    w->r = r;
    w->rt = rt;
    w->id = json_incref(json_object_get(msg, "id"));
    w->deadline = clock_mono_ms() + rt->up->timeout_ms;
    init_try(w);
}

static void pass_stdio(req *r, mcp_rt *rt, json_t *msg)
{
    if (strcmp(r->method, "DELETE") == 0) {
        req_reply(r, 200, resp_bytes("", 0, NULL)); /* once's session with the server stays */
        return;
    }
    if (strcmp(r->method, "GET") == 0) {
        req_set_header(r, "Allow", "POST, DELETE");
        req_problem(r, 405, "method_not_allowed", "Method not allowed", NULL,
                    "a stdio MCP server has no standing event stream here");
        return;
    }
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id");
    if (method && strcmp(method, "initialize") == 0 && id) {
        stdio_initialize(r, rt, msg);
        return;
    }
    if (!method || !id) {
        /* Notifications and the agent's answers: the server has one client,
         * once, which already said initialized and cannot route answers to
         * requests the server never sent this agent. (Cancellations never
         * get here: mcp_post drops them for every server.) */
        if (method && strcmp(method, "notifications/initialized") != 0)
            mcp_stdio_notify(rt->stdio, msg);
        req_reply(r, 202, resp_bytes("", 0, NULL));
        return;
    }
    spass *p = req_state_new(r, sizeof *p, spass_free);
    if (!p)
        return;
    p->r = r;
    p->rt = rt;
    p->id = json_incref(id);
    if (strcmp(method, "tools/list") == 0) {
        p->learn = 1;
        p->first_page = !json_object_get(json_object_get(msg, "params"), "cursor");
    }
    p->msg = json_incref(msg);
    if (worker_run(r->srv->worker, stdio_send, p) < 0)
        req_not_started(r, "the worker queue refused it");
}

void mcp_pass(req *r, mcp_rt *rt, json_t *msg)
{
    if (rt->stdio)
        pass_stdio(r, rt, msg);
    else
        pass_url(r, rt, msg);
}

/* ---- routes -------------------------------------------------------------------- */

static int mcp_admit(req *r, problem *p)
{
    const route_match *m = &r->match;
    char name[ONCE_SCOPE_MAX + 1];
    if (m->seglen[0] > ONCE_SCOPE_MAX)
        return problem_set(p, 404, "unknown_mcp_server", "Unknown MCP server", "no MCP server of that name");
    memcpy(name, m->seg[0], m->seglen[0]);
    name[m->seglen[0]] = '\0';
    const upstream_cfg *up = config_upstream(r->srv->cfg, name);
    if (!up || !up->mcp)
        return problem_set(p, 404, "unknown_mcp_server", "Unknown MCP server", "no MCP server named '%s'%s", name,
                           up ? " (it is an upstream: /v1/proxy/NAME)" : "");
    if (m->query[0])
        return problem_set(p, 400, "invalid_path", "Invalid path", "an MCP endpoint takes no query");
    r->up = up;
    snprintf(r->scope, sizeof r->scope, "%s", up->name);
    const agent_cfg *ag = grants_agent(r->who);
    if (grants_mcp_server(ag, up->name))
        return 0;
    char what[ONCE_SCOPE_MAX + 32];
    snprintf(what, sizeof what, "the MCP server '%s'", up->name);
    return grants_refuse(p, ag, what);
}

static void mcp_post(req *r)
{
    mcp_rt *rt = mcp_runtime(r->srv, r->up);
    json_error_t jerr;
    json_t *msg = json_loadb((const char *)r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        char *text = mcp_error_answer(NULL, -32700, "Parse error: the body is not one JSON value");
        struct MHD_Response *resp = text ? resp_bytes(text, strlen(text), "application/json") : NULL;
        free(text);
        req_reply(r, 400, resp);
        return;
    }
    if (json_is_array(msg)) {
        /* A batch could carry a tools/call past the ledger; MCP dropped
         * batches in its 2025-06-18 revision. */
        json_decref(msg);
        req_problem(r, 400, "batch_not_supported", "Batch not supported", NULL,
                    "send one JSON-RPC message per request (MCP 2025-06-18 removed batches)");
        return;
    }
    const char *method = json_string_value(json_object_get(msg, "method"));
    if (!json_is_object(msg) || (json_object_get(msg, "method") && !method)) {
        json_decref(msg);
        char *text = mcp_error_answer(NULL, -32600, "Invalid Request: not a JSON-RPC message");
        reply_rpc(r, 400, text, NULL);
        return;
    }
    if (method && strcmp(method, "tools/call") == 0 && !json_object_get(msg, "id")) {
        /* A tools/call sent as a notification: a server might run it, and
         * nothing would record it. */
        json_decref(msg);
        reply_rpc(r, 400, mcp_error_answer(NULL, -32600, "Invalid Request: tools/call needs an id"), NULL);
        return;
    }
    if (method && strcmp(method, "tools/call") == 0) {
        mcp_call_start(r, rt, msg);
        return;
    }
    if (method && strcmp(method, "notifications/cancelled") == 0) {
        /* A call goes on when its caller gives up (docs/mcp.md): an SDK
         * server that got this would drop the answer of a tool that ran,
         * and the call would be unknown. The server's late answer goes to
         * nobody; the retry is replayed. */
        json_decref(msg);
        req_reply(r, 202, resp_bytes("", 0, NULL));
        return;
    }
    mcp_pass(r, rt, msg);
    json_decref(msg);
}

static void mcp_get_or_delete(req *r)
{
    mcp_pass(r, mcp_runtime(r->srv, r->up), NULL);
}

const route mcp_routes[] = {
    {.pattern = "/v1/mcp/{}", .name = "mcp", .access = ACCESS_AGENT, .admit = mcp_admit, .relays = 1,
     .methods = {{"POST", mcp_post}, {"GET", mcp_get_or_delete}, {"DELETE", mcp_get_or_delete}}},
    {.pattern = NULL},
};
