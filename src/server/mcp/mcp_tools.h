/*
 * mcp_tools.h — what the MCP gateway decides about a tools/call before
 * anything is sent (docs/mcp.md): whether the tool is recorded at all
 * (read-only tools are not), whether it waits for a human, the key of the
 * call, and the CallToolResult each outcome answers with. The tools'
 * annotations come from the upstream's own tools/list answers, learned as
 * they pass through and forgotten on notifications/tools/list_changed;
 * they are hints from the server, so a tool the gateway knows nothing
 * about is treated as one that writes (recorded; approved under approve =
 * destructive).
 */
#ifndef ONCE_SERVER_MCP_TOOLS_H
#define ONCE_SERVER_MCP_TOOLS_H

#include <stddef.h>

#include <jansson.h>

#include "common/key_template.h"
#include "server/config/config.h"

typedef struct mcp_tools mcp_tools;

/* The learned annotations of one server's tools, shared by its threads. */
int mcp_tools_new(mcp_tools **out);
void mcp_tools_free(mcp_tools *t);

/* Learns from a tools/list result ({"tools": [{name, annotations}...]}).
 * first_page (the request had no cursor) replaces what was known; later
 * pages add to it. */
void mcp_tools_learn(mcp_tools *t, const json_t *result, int first_page);
/* notifications/tools/list_changed: what was known may be wrong now. */
void mcp_tools_forget(mcp_tools *t);

/* Is a call of tool recorded? Not when readonly = lists it, or the server
 * said readOnlyHint: true and approve = does not list it. */
int mcp_tool_recorded(const upstream_cfg *up, mcp_tools *t, const char *tool);
/* Does a new call of tool wait for a human? When approve = lists it, or
 * approve = destructive and the server did not say destructiveHint: false
 * (nor readOnlyHint: true). */
int mcp_tool_needs_approval(const upstream_cfg *up, mcp_tools *t, const char *tool);

/* The key of a call (without the "TOOL:" prefix), in docs/mcp.md's order ("The key"):
 * params._meta.idempotencyKey, the Idempotency-Key header (hdr, may be
 * NULL), the tool's key.TOOL template over params (header fields from
 * hsrc), the sha256 of the canonical arguments. Under key_source =
 * template (up->key_from_template) a tool's template comes first, and the
 * agent's keys are ignored for that tool. 0; -1 a template field is
 * missing (named in err); -2 no usable key (why in err). */
int mcp_call_key(const upstream_cfg *up, const char *tool, json_t *params, const char *hdr, const key_source *hsrc,
                 char *out, size_t cap, char *err, size_t errlen);

/* The canonical JSON of a call's arguments (members sorted, no
 * whitespace; {} when absent), malloc'd; NULL out of memory. Both the key
 * hash and the fingerprint are taken over it, so the JSON-RPC id, the
 * progress token and member order never make two calls differ. */
char *mcp_canonical_args(const json_t *params);

/* What a server's final response to a tools/call means for the ledger. */
typedef enum mcp_verdict {
    MCP_COMPLETED, /* a result (also one with isError: true): recorded and replayed */
    MCP_RELEASED,  /* the tool did not run: a JSON-RPC error about the request (-32700, -32600..-32602,
                      -32042), or the SDKs' isError result for an unknown tool or invalid arguments */
    MCP_UNKNOWN    /* any other error, or no response: it may have run */
} mcp_verdict;

/* The verdict on final (the response message, or NULL when none came),
 * with the reason kept for a release or an unknown in why. */
mcp_verdict mcp_classify(const json_t *final, char *why, size_t cap);

/* Is an HTTP status from an MCP server a refusal of the request before
 * anything ran (400, 401, 403, 404, 405, 406, 413, 415, 429)? Only those
 * release a tool call; any other status, even from a proxy in front of the
 * server (503 "upstream reset", 520, 524, 408), may follow a call that ran,
 * and makes it unknown. */
int mcp_http_refused(long status);

/* What a log line may say of an ending that why describes: the server's
 * own words (an error message may echo the arguments) are left out, only
 * its error code said. */
void mcp_why_for_log(const json_t *final, const char *why, char *out, size_t cap);

/* A JSON-RPC response for id: {"jsonrpc":"2.0","id":id,"result":result}
 * with result's _meta losing any "once/..." member the server put there
 * and gaining "once/outcome" and "once/key" (omitted when key is NULL or
 * empty: a call refused before it had one), and
 * "once/argumentsDiffer": true when mismatch (the key was first used with
 * other arguments, whose result this is). result is copied, not changed.
 * Serialized, malloc'd; NULL out of memory. */
char *mcp_result_answer(const json_t *id, const json_t *result, const char *outcome, const char *key,
                        int mismatch);
/* once's own outcome as a CallToolResult: isError, one text block. */
char *mcp_own_answer(const json_t *id, const char *outcome, const char *key, const char *text);
/* A JSON-RPC error response (id may be NULL: null). */
char *mcp_error_answer(const json_t *id, int code, const char *message);

#endif
