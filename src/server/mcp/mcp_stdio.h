/*
 * mcp_stdio.h — a stdio MCP server (command = ...), spawned by `once
 * serve` and shared by every agent session: once is its one client. It
 * initializes the server itself, remaps JSON-RPC ids (and progress tokens)
 * so that many sessions' requests cannot collide, logs its stderr, and
 * restarts it with back-off when it dies. A call in flight when it dies
 * ends as "sent, no answer": for a tools/call, unknown.
 */
#ifndef ONCE_SERVER_MCP_STDIO_H
#define ONCE_SERVER_MCP_STDIO_H

#include <stdint.h>

#include <jansson.h>

#include "server/config/config.h"
#include "server/mcp/mcp_tools.h"

typedef struct mcp_stdio mcp_stdio;

/* The end of a call: msg is the server's response (owned by the callee,
 * its id put back to the caller's), or NULL, then sent says whether the
 * request may have reached the server and why what went wrong. Runs on the
 * bridge's thread; must be quick. */
typedef void (*mcp_stdio_done_fn)(void *ctx, json_t *msg, int sent, const char *why);
/* A notification about the call (notifications/progress with its token
 * put back), borrowed. Bridge thread. */
typedef void (*mcp_stdio_note_fn)(void *ctx, const json_t *note);

/* Spawns up's command and starts the bridge thread; the server's
 * tools/list_changed notifications make tools forget. 0 or -1 (why
 * logged). */
int mcp_stdio_start(const upstream_cfg *up, mcp_tools *tools, mcp_stdio **out);
/* Ends what is in flight (sent, no answer) and stops the server; later
 * calls are refused. NULL is fine. */
void mcp_stdio_stop(mcp_stdio *s);
/* Frees a stopped bridge, once nothing can call it. NULL is fine. */
void mcp_stdio_free(mcp_stdio *s);

/* What mcp_stdio_call returns when nothing was sent because the server
 * is starting or restarting (not stopping): mcp_stdio_when_ready says when
 * to send it again. */
#define MCP_STDIO_NOT_READY (-2)

/* Sends the request msg (borrowed; its id and progress token are replaced
 * on the wire only) with a timeout. done runs exactly once unless this
 * returns < 0: then nothing was sent, with why: MCP_STDIO_NOT_READY, the
 * server is (re)starting; -1, it is stopping, or out of memory. */
int mcp_stdio_call(mcp_stdio *s, const json_t *msg, int64_t timeout_ms, mcp_stdio_done_fn done,
                   mcp_stdio_note_fn note, void *ctx, char *why, size_t whylen);

/* How a wait for the server ended. */
typedef enum mcp_stdio_readiness {
    MCP_STDIO_READY,   /* it answered initialize: send now */
    MCP_STDIO_LATE,    /* the deadline passed first */
    MCP_STDIO_STOPPED, /* the gateway is stopping */
} mcp_stdio_readiness;

/* The end of a wait; runs on the bridge's thread, so it must be quick
 * (answer, or hand the request to a worker): writing to the server there
 * could hold up the reading of its answers. */
typedef void (*mcp_stdio_ready_fn)(void *ctx, mcp_stdio_readiness how);

/* Waits, without a thread, until the server is ready or deadline
 * (clock_mono_ms) passes: a request that finds it (re)starting is served
 * when it is back rather than refused. 1 it is ready now (fn is not
 * called); 0 fn will run exactly once; -1 no wait (stopping, the deadline
 * passed, or out of memory) and fn is not called. */
int mcp_stdio_when_ready(mcp_stdio *s, int64_t deadline, mcp_stdio_ready_fn fn, void *ctx);

/* Has the server answered once's initialize since the gateway started?
 * (/readyz: a restart later does not make the gateway unready, requests
 * wait for it.) */
int mcp_stdio_started(mcp_stdio *s);

/* Sends a notification from an agent (borrowed). 0 or -1. */
int mcp_stdio_notify(mcp_stdio *s, const json_t *msg);

/* A copy of the server's initialize result (what once answers an agent's
 * initialize with), or NULL while the server is not ready. */
json_t *mcp_stdio_init_result(mcp_stdio *s);

#endif
