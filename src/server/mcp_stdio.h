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

#include "server/config.h"
#include "server/mcp_tools.h"

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

/* Sends the request msg (borrowed; its id and progress token are replaced
 * on the wire only) with a timeout. done runs exactly once unless this
 * returns -1 (then nothing was sent: the server is not running, or out of
 * memory, with why). */
int mcp_stdio_call(mcp_stdio *s, const json_t *msg, int64_t timeout_ms, mcp_stdio_done_fn done,
                   mcp_stdio_note_fn note, void *ctx, char *why, size_t whylen);

/* Sends a notification from an agent (borrowed). 0 or -1. */
int mcp_stdio_notify(mcp_stdio *s, const json_t *msg);

/* A copy of the server's initialize result (what once answers an agent's
 * initialize with), or NULL while the server is not ready. */
json_t *mcp_stdio_init_result(mcp_stdio *s);

#endif
