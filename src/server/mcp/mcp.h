/*
 * mcp.h — the MCP gateway (docs/mcp.md): agents speak
 * Streamable HTTP to /v1/mcp/NAME; once passes everything through to the
 * server of [mcp.NAME] except tools/call, which goes through the ledger.
 *
 *   mcp.c          the routes, the pass-through, each server's runtime
 *   mcp_call.c     a tools/call: reserve, call, record, answer
 *   mcp_tools.c    the decisions (recorded? approved? which key?) and answers
 *   mcp_stdio.c    a stdio server: spawned, supervised, shared by many sessions
 *   mcp_session.c  once's own session with a server, for approved calls
 *   mcp_send.c     the sender of an approved tool call (core/sender.h)
 */
#ifndef ONCE_SERVER_MCP_H
#define ONCE_SERVER_MCP_H

#include <stdint.h>

#include <jansson.h>

#include "server/config/config.h"
#include "server/mcp/mcp_tools.h"
#include "server/core/problem.h"
#include "server/core/sender.h"
#include "server/front/router.h"

typedef struct server server;
typedef struct req req;
typedef struct mcp_stdio mcp_stdio;

/* One MCP server's runtime: what the gateway learned of its tools, and
 * its process when it is a stdio server. */
typedef struct mcp_rt {
    server *srv;
    const upstream_cfg *up;
    mcp_tools *tools;
    mcp_stdio *stdio; /* NULL for a url server */
} mcp_rt;

/* Makes the runtimes of cfg's MCP servers (srv->mcp, parallel to
 * cfg->upstreams) and spawns the stdio ones. 0 or -1 (logged). */
int mcp_start(server *srv);
/* Stops the stdio servers: what is in flight with them ends as sent
 * without an answer (recorded as unknown). After the outbound client
 * stopped; requests may still arrive (refused). */
void mcp_stop(server *srv);
/* Frees the runtimes, once no HTTP thread can reach them. */
void mcp_free(server *srv);
/* Is every stdio server started (it answered once's initialize since the
 * gateway started)? /readyz asks (a ready_fn server.c registers): an agent
 * that connects the moment the gateway says ready must find its server
 * there. 0 yes; -1 no, with p: 503 mcp_starting naming the first that is
 * not, and Retry-After. */
int mcp_ready(server *srv, problem *p);

/* /v1/mcp/{name}. */
extern const route mcp_routes[];
/* Sends an approved tool call of an MCP server. */
extern const sender mcp_sender;
/* The runtime of up (an [mcp.NAME] server), or NULL. */
mcp_rt *mcp_runtime(server *srv, const upstream_cfg *up);

/* A tools/call (msg, consumed) from the agent's request r: through the
 * ledger unless the tool is read-only (mcp_call.c). */
void mcp_call_start(req *r, mcp_rt *rt, json_t *msg);

/* Forwards r (whose JSON-RPC message, if any, is msg: borrowed) to the
 * server unrecorded and answers with what it says (mcp.c). */
void mcp_pass(req *r, mcp_rt *rt, json_t *msg);

/* The stored request of an MCP action, as once_show and the approvals
 * thread read it: {"mcp": "tools/call", "tool": T, "arguments": A}. */
char *mcp_stored_request(const char *tool, const json_t *params);

/* An approved call, made by once over its own session with the server
 * (mcp_session.c), on the calling thread. *final gets the server's
 * response message (or NULL); *sent whether the call may have reached
 * it. 0, or -1 with why. */
int mcp_session_call(mcp_rt *rt, const char *tool, const json_t *arguments, json_t **final, int *sent, char *why,
                     size_t whylen);

#endif
