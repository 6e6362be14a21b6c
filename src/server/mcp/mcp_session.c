/*
 * mcp_session.c — once's own session with an MCP server, for the calls a
 * human approved (docs/approvals.md, docs/mcp.md). The agent that asked is
 * not there when the approval comes, and its session with the server may
 * be long gone, so once opens one of its own: initialize, initialized, the
 * tools/call, and a DELETE to end it. A stdio server needs no session: the
 * call goes over the bridge that every agent shares.
 *
 * Runs on a worker thread (mcp_send.c), which waits for each step (an
 * approved call is rare; the outbound thread still does the transfers);
 * the approvals thread never waits for it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/sse.h"
#include "once/once.h"
#include "server/core/upstream_call.h"
#include "server/mcp/mcp.h"
#include "server/mcp/mcp_stdio.h"
#include "server/front/relay.h"
#include "server/core/services.h"
#include "server/front/req.h"

#define SESSION_PROTOCOL "2025-06-18"
#define SESSION_ID_MAX 256

/* ---- waiting for one transfer ------------------------------------------------------ */

typedef struct waited {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    json_t *msg;  /* stdio: the answer */
    int sent;
    char why[256];
} waited;

static void waited_init(waited *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void waited_wait(waited *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

static void waited_signal(waited *w)
{
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void on_http_done(out_call *c)
{
    waited_signal(c->ctx);
}

/* ---- a url server ---------------------------------------------------------------------- */

typedef struct session {
    mcp_rt *rt;
    char id[SESSION_ID_MAX + 1]; /* Mcp-Session-Id, "" before initialize's answer (or for a stateless server) */
    int initialized;             /* every request after initialize names the protocol version */
} session;

/* One request of the session (body NULL: a DELETE), waited for. c is the
 * caller's to clear. 0 when it ran (any answer), -1 when it could not be
 * started. */
static int session_send(session *s, const char *body, out_call *c)
{
    const upstream_cfg *up = s->rt->up;
    out_headers h = {0};
    char sid[SESSION_ID_MAX + 32];
    snprintf(sid, sizeof sid, "Mcp-Session-Id: %s", s->id);
    int bad = out_headers_add(&h, "Content-Type: application/json", NULL) < 0 ||
              out_headers_add(&h, "Accept: application/json, text/event-stream", NULL) < 0 ||
              (s->id[0] && out_headers_add(&h, sid, NULL) < 0) ||
              (s->initialized && out_headers_add(&h, "MCP-Protocol-Version: " SESSION_PROTOCOL, NULL) < 0) ||
              relay_injected_headers(up, &h) < 0;
    waited w;
    waited_init(&w);
    upstream_call_request(c, up, body ? "POST" : "DELETE", up->url, &h, (const uint8_t *)body,
                          body ? strlen(body) : 0);
    c->done = on_http_done;
    c->ctx = &w;
    int rc = bad ? -1 : outbound_submit(s->rt->srv->ob, c);
    if (rc == 0)
        waited_wait(&w);
    else
        snprintf(c->error, sizeof c->error, "%s", bad ? "out of memory" : "the gateway is stopping");
    out_headers_clear(&h);
    return rc < 0 ? -1 : 0;
}

typedef struct find_ctx {
    json_int_t id;
    json_t *found;
} find_ctx;

static void find_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    find_ctx *f = ctx;
    (void)name;
    json_t *msg = truncated || f->found ? NULL : json_loadb(data, len, 0, NULL);
    if (json_is_object(msg) && !json_object_get(msg, "method") &&
        json_integer_value(json_object_get(msg, "id")) == f->id)
        f->found = json_incref(msg);
    json_decref(msg);
}

/* The response with id in an answer (JSON, or an event stream), or NULL. */
static json_t *answer_message(const out_call *c, json_int_t id)
{
    find_ctx f = {.id = id};
    if (c->resp_body.len && c->resp_body.data[0] == '{') {
        json_t *msg = json_loadb((const char *)c->resp_body.data, c->resp_body.len, 0, NULL);
        if (json_is_object(msg) && json_integer_value(json_object_get(msg, "id")) == id)
            f.found = msg;
        else
            json_decref(msg);
        return f.found;
    }
    sse_parser p;
    sse_parser_init(&p, find_event, &f);
    sse_parser_feed(&p, c->resp_body.data, c->resp_body.len);
    sse_parser_free(&p);
    return f.found;
}

/* The Mcp-Session-Id of an answer into s. */
static void session_take_id(session *s, const out_call *c)
{
    json_t *arr = c->resp_headers.len ? json_loadb((const char *)c->resp_headers.data, c->resp_headers.len, 0, NULL)
                                      : NULL;
    size_t i;
    json_t *pair;
    json_array_foreach(arr, i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        if (n && v && strcasecmp(n, "mcp-session-id") == 0 && strlen(v) <= SESSION_ID_MAX)
            snprintf(s->id, sizeof s->id, "%s", v);
    }
    json_decref(arr);
}

static int url_call(mcp_rt *rt, const char *call_body, json_t **final, int *sent, char *why, size_t whylen)
{
    session s = {.rt = rt};
    out_call c = {0};
    static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                               "\"protocolVersion\":\"" SESSION_PROTOCOL "\",\"capabilities\":{},"
                               "\"clientInfo\":{\"name\":\"once\",\"version\":\"" ONCE_VERSION "\"}}}";
    *sent = 0;
    int rc = session_send(&s, init, &c);
    json_t *ok = rc == 0 && c.kind == OUT_ANSWERED && c.status == 200 ? answer_message(&c, 1) : NULL;
    if (!json_is_object(json_object_get(ok, "result"))) {
        snprintf(why, whylen, "the MCP server did not accept once's initialize (%s%ld): nothing was sent",
                 c.kind == OUT_ANSWERED ? "HTTP " : c.error, c.kind == OUT_ANSWERED ? c.status : 0L);
        json_decref(ok);
        out_call_clear(&c);
        return -1;
    }
    json_decref(ok);
    session_take_id(&s, &c);
    s.initialized = 1;
    out_call_clear(&c);
    memset(&c, 0, sizeof c);
    session_send(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &c);
    out_call_clear(&c);
    memset(&c, 0, sizeof c);
    rc = session_send(&s, call_body, &c);
    *sent = rc == 0 && c.kind != OUT_NOT_SENT;
    if (rc == 0 && c.kind == OUT_ANSWERED && mcp_http_refused(c.status))
        *sent = 0; /* refused as a request: the tool did not run */
    *final = rc == 0 && c.kind == OUT_ANSWERED && c.status == 200 ? answer_message(&c, 2) : NULL;
    if (!*final)
        snprintf(why, whylen, "%s%ld%s", c.kind == OUT_ANSWERED ? "the MCP server answered HTTP " : c.error,
                 c.kind == OUT_ANSWERED ? c.status : 0L, c.kind == OUT_ANSWERED ? " without the call's response" : "");
    out_call_clear(&c);
    if (s.id[0]) {
        memset(&c, 0, sizeof c);
        session_send(&s, NULL, &c); /* ends once's session; its answer does not matter */
        out_call_clear(&c);
    }
    return *final ? 0 : -1;
}

/* ---- a stdio server ----------------------------------------------------------------------- */

static void on_stdio_done(void *ctx, json_t *msg, int sent, const char *why)
{
    waited *w = ctx;
    w->msg = msg;
    w->sent = sent;
    snprintf(w->why, sizeof w->why, "%s", why ? why : "");
    waited_signal(w);
}

static void on_stdio_ready(void *ctx, mcp_stdio_readiness how)
{
    waited *w = ctx;
    w->sent = how == MCP_STDIO_READY;
    waited_signal(w);
}

/* Waits (this thread may) until a (re)starting server is ready, or
 * deadline. 1 ready, 0 not (why says so). */
static int stdio_wait_ready(mcp_rt *rt, int64_t deadline, char *why, size_t whylen)
{
    waited w;
    waited_init(&w);
    int rc = mcp_stdio_when_ready(rt->stdio, deadline, on_stdio_ready, &w);
    if (rc == 0) {
        waited_wait(&w);
        rc = w.sent;
    } else {
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        rc = rc > 0;
    }
    if (!rc)
        snprintf(why, whylen, "the stdio MCP server '%s' did not start within its timeout, or the gateway is "
                 "stopping", rt->up->name);
    return rc;
}

static int stdio_call(mcp_rt *rt, json_t *call, json_t **final, int *sent, char *why, size_t whylen)
{
    waited w;
    *sent = 0;
    int64_t deadline = clock_mono_ms() + rt->up->timeout_ms;
    for (;;) {
        waited_init(&w);
        int rc = mcp_stdio_call(rt->stdio, call, rt->up->timeout_ms, on_stdio_done, NULL, &w, why, whylen);
        if (rc == 0)
            break;
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        /* A server (re)starting is waited for, as an agent's call is. */
        if (rc != MCP_STDIO_NOT_READY || !stdio_wait_ready(rt, deadline, why, whylen))
            return -1;
    }
    waited_wait(&w);
    *final = w.msg;
    *sent = w.sent;
    if (!w.msg)
        snprintf(why, whylen, "%s", w.why);
    return w.msg ? 0 : -1;
}

int mcp_session_call(mcp_rt *rt, const char *tool, const json_t *arguments, json_t **final, int *sent, char *why,
                     size_t whylen)
{
    *final = NULL;
    *sent = 0;
    json_t *args = arguments ? json_incref((json_t *)arguments) : json_object();
    json_t *call = args ? json_pack("{s:s, s:i, s:s, s:{s:s, s:o}}", "jsonrpc", "2.0", "id", 2, "method",
                                    "tools/call", "params", "name", tool, "arguments", args)
                        : NULL;
    char *body = call ? json_dumps(call, JSON_COMPACT) : NULL;
    int rc;
    if (!body) {
        snprintf(why, whylen, "out of memory: nothing was sent");
        rc = -1;
    } else if (rt->stdio) {
        rc = stdio_call(rt, call, final, sent, why, whylen);
    } else {
        rc = url_call(rt, body, final, sent, why, whylen);
    }
    free(body);
    json_decref(call);
    return rc;
}
