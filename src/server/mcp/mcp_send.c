/*
 * mcp_send.c — the sender of an approved tool call of an MCP server
 * (core/sender.h): the stored call ({"tool", "arguments"}, written by
 * mcp_stored_request) made over once's own session with the server
 * (mcp_session.c), under a renewed lease, and classified as mcp_call.c
 * classifies an agent's call. The session call blocks, so it runs on a
 * worker thread, never on the thread that starts it (the approvals thread
 * goes on taking other approved actions meanwhile).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "server/core/leases.h"
#include "server/core/log.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/core/worker.h"
#include "server/mcp/mcp.h"

typedef struct mcp_send {
    json_t *stored; /* {"mcp": "tools/call", "tool", "arguments"} */
    const char *tool;
    json_t *final;  /* the server's response message, or NULL */
    char *result;   /* COMPLETED: the result as stored */
} mcp_send;

static void mcp_send_free(send_job *job)
{
    mcp_send *m = job->priv;
    if (!m)
        return;
    json_decref(m->stored);
    json_decref(m->final);
    free(m->result);
    free(m);
    job->priv = NULL;
}

/* On a worker thread: the call, its class, and done. */
static void mcp_send_run(void *arg)
{
    send_job *job = arg;
    mcp_send *m = job->priv;
    server *srv = job->srv;
    const upstream_cfg *up = job->up;
    int sent = 0;
    char why[sizeof job->v.why] = "";
    lease_hold *hold = leases_hold(srv->leases, up->name, job->res->action.key, job->res->token, up->lease_ms);
    int rc = mcp_session_call(mcp_runtime(srv, up), m->tool, json_object_get(m->stored, "arguments"), &m->final,
                              &sent, why, sizeof why);
    leases_drop(srv->leases, hold);
    mcp_verdict v = rc == 0 ? mcp_classify(m->final, why, sizeof why) : sent ? MCP_UNKNOWN : MCP_RELEASED;
    if (v == MCP_COMPLETED) {
        m->result = json_dumps(json_object_get(m->final, "result"), JSON_COMPACT);
        if (!m->result) {
            v = MCP_UNKNOWN;
            snprintf(why, sizeof why, "out of memory while recording the result");
        }
    }
    job->v.kind = v == MCP_COMPLETED ? VERDICT_COMPLETED : v == MCP_RELEASED ? VERDICT_RELEASED : VERDICT_UNKNOWN;
    if (v == MCP_COMPLETED) {
        job->v.resp = (once_response){.status = 200, .body = (uint8_t *)m->result, .body_len = strlen(m->result)};
    } else {
        snprintf(job->v.why, sizeof job->v.why, "%s", why);
        mcp_why_for_log(m->final, why, job->log_why, sizeof job->log_why);
    }
    job->done(job);
}

static void mcp_send_start(send_job *job)
{
    ONCE_ASSERT(scope_kind_of(job->up) == SCOPE_MCP);
    const once_action *a = &job->res->action;
    mcp_send *m = calloc(1, sizeof *m);
    job->priv = m;
    job->free_fn = mcp_send_free;
    job->v.kind = VERDICT_RELEASED;
    if (!m) {
        snprintf(job->v.why, sizeof job->v.why, "out of memory: nothing was sent");
        snprintf(job->log_why, sizeof job->log_why, "%s", job->v.why);
        job->done(job);
        return;
    }
    m->stored = a->request ? json_loadb((const char *)a->request, a->request_len, 0, NULL) : NULL;
    m->tool = json_string_value(json_object_get(m->stored, "tool"));
    if (!m->tool) {
        snprintf(job->v.why, sizeof job->v.why, "the stored request names no tool: nothing was sent");
        snprintf(job->log_why, sizeof job->log_why, "%s", job->v.why);
        job->done(job);
        return;
    }
    snprintf(job->what, sizeof job->what, "tool %.80s", m->tool);
    if (worker_run(job->srv->worker, mcp_send_run, job) < 0) {
        snprintf(job->v.why, sizeof job->v.why, "the gateway is stopping, or out of memory: nothing was sent");
        snprintf(job->log_why, sizeof job->log_why, "%s", job->v.why);
        job->done(job);
    }
}

const sender mcp_sender = {.start = mcp_send_start};
