/*
 * mcp_tools.c — the MCP gateway's decisions about a tools/call and the
 * answers it builds (mcp_tools.h). Pure functions of the configuration and
 * the learned annotations, so they are tested without a socket
 * (tests/unit/test_mcp_tools.c).
 */
#include "server/mcp/mcp_tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"

#define MCP_TOOLS_MAX 4096 /* a server listing more is not remembered past this */

typedef struct tool_hint {
    char *name;
    int readonly;    /* readOnlyHint: true */
    int destructive; /* destructiveHint, true unless said false (MCP's default) */
} tool_hint;

struct mcp_tools {
    pthread_mutex_t mu;
    tool_hint *v;
    size_t n;
};

int mcp_tools_new(mcp_tools **out)
{
    mcp_tools *t = calloc(1, sizeof *t);
    if (!t || pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        *out = NULL;
        return -1;
    }
    *out = t;
    return 0;
}

static void tools_clear(mcp_tools *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].name);
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

void mcp_tools_free(mcp_tools *t)
{
    if (!t)
        return;
    tools_clear(t);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static tool_hint *tools_find(mcp_tools *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0)
            return &t->v[i];
    return NULL;
}

void mcp_tools_learn(mcp_tools *t, const json_t *result, int first_page)
{
    json_t *tools = json_object_get(result, "tools");
    if (!t || !json_is_array(tools))
        return;
    pthread_mutex_lock(&t->mu);
    if (first_page)
        tools_clear(t);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        const char *name = json_string_value(json_object_get(tool, "name"));
        json_t *ann = json_object_get(tool, "annotations");
        if (!name || t->n >= MCP_TOOLS_MAX)
            continue;
        tool_hint *h = tools_find(t, name);
        if (!h) {
            tool_hint *grown = realloc(t->v, (t->n + 1) * sizeof *grown);
            char *copy = grown ? strdup(name) : NULL;
            if (grown)
                t->v = grown;
            if (!copy)
                break; /* out of memory: the tool stays unknown, so it is recorded */
            h = &t->v[t->n++];
            h->name = copy;
        }
        h->readonly = json_is_true(json_object_get(ann, "readOnlyHint"));
        h->destructive = !json_is_false(json_object_get(ann, "destructiveHint"));
    }
    pthread_mutex_unlock(&t->mu);
}

void mcp_tools_forget(mcp_tools *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    tools_clear(t);
    pthread_mutex_unlock(&t->mu);
}

/* The server's hints about tool: 1 known (then *readonly, *destructive),
 * 0 unknown. */
static int tools_hint(mcp_tools *t, const char *tool, int *readonly, int *destructive)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mu);
    tool_hint *h = tools_find(t, tool);
    if (h) {
        *readonly = h->readonly;
        *destructive = h->destructive;
    }
    pthread_mutex_unlock(&t->mu);
    return h != NULL;
}

static int listed(char *const *v, size_t n, const char *tool)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], tool) == 0)
            return 1;
    return 0;
}

int mcp_tool_recorded(const upstream_cfg *up, mcp_tools *t, const char *tool)
{
    int ro = 0, destructive = 1;
    if (listed(up->readonly, up->nreadonly, tool))
        return 0;
    /* The operator's approve list beats the server's hint. */
    if (listed(up->approve, up->napprove, tool))
        return 1;
    return !(tools_hint(t, tool, &ro, &destructive) && ro);
}

int mcp_tool_needs_approval(const upstream_cfg *up, mcp_tools *t, const char *tool)
{
    int ro = 0, destructive = 1;
    if (listed(up->approve, up->napprove, tool))
        return 1;
    if (!up->approve_destructive)
        return 0;
    if (tools_hint(t, tool, &ro, &destructive))
        return !ro && destructive;
    return 1;
}

char *mcp_canonical_args(const json_t *params)
{
    json_t *args = json_object_get(params, "arguments");
    if (!args) {
        char *s = strdup("{}");
        return s;
    }
    return json_dumps(args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

static const key_template *tool_template(const upstream_cfg *up, const char *tool)
{
    for (size_t i = 0; i < up->ntool_keys; i++)
        if (strcmp(up->tool_keys[i].tool, tool) == 0)
            return up->tool_keys[i].key;
    return NULL;
}

static int key_copy(const char *v, char *out, size_t cap, char *err, size_t errlen, const char *what)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap) {
        snprintf(err, errlen, "%s is %s", what, n == 0 ? "empty" : "too long");
        return -2;
    }
    memcpy(out, v, n + 1);
    return 0;
}

/* The key from the tool's key.TOOL template over params. */
static int key_from_template(const key_template *t, json_t *params, const key_source *hsrc, char *out, size_t cap,
                             char *err, size_t errlen)
{
    key_source src = {.header = hsrc ? hsrc->header : NULL, .json = params, .ctx = hsrc ? hsrc->ctx : NULL};
    return key_template_eval(t, &src, out, cap, err, errlen);
}

int mcp_call_key(const upstream_cfg *up, const char *tool, json_t *params, const char *hdr, const key_source *hsrc,
                 char *out, size_t cap, char *err, size_t errlen)
{
    const key_template *t = tool_template(up, tool);
    /* key_source = template: the operator's rule, not the agent's key,
     * says what one intent is (two keys for one order would be two
     * charges). */
    if (t && up->key_from_template)
        return key_from_template(t, params, hsrc, out, cap, err, errlen);
    json_t *given = json_object_get(json_object_get(params, "_meta"), "idempotencyKey");
    if (given && !json_is_string(given)) {
        snprintf(err, errlen, "params._meta.idempotencyKey must be a string");
        return -2;
    }
    if (given)
        return key_copy(json_string_value(given), out, cap, err, errlen, "params._meta.idempotencyKey");
    if (hdr)
        return key_copy(hdr, out, cap, err, errlen, "the Idempotency-Key header");
    if (t)
        return key_from_template(t, params, hsrc, out, cap, err, errlen);
    char *canon = mcp_canonical_args(params);
    char hex[65];
    int rc = canon && digest_sha256_hex(canon, strlen(canon), hex) == 0 ? 0 : -2;
    free(canon);
    if (rc < 0) {
        snprintf(err, errlen, "cannot hash the arguments");
        return -2;
    }
    return key_copy(hex, out, cap, err, errlen, "the arguments' hash");
}

static char *answer_dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static json_t *answer_envelope(const json_t *id)
{
    return json_pack("{s:s, s:O}", "jsonrpc", "2.0", "id", id ? (json_t *)id : json_null());
}

char *mcp_result_answer(const json_t *id, const json_t *result, const char *outcome, const char *key,
                        int mismatch)
{
    json_t *res = json_is_object(result) ? json_deep_copy(result) : json_object();
    json_t *meta = json_object_get(res, "_meta");
    if (res && !json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(res, "_meta", meta);
    }
    /* once/ members are once's to say: a server's are dropped. */
    const char *name;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(meta, tmp, name, v)
    {
        if (strncmp(name, "once/", 5) == 0)
            json_object_del(meta, name);
    }
    json_t *o = answer_envelope(id);
    if (!res || !meta || !o || json_object_set_new(meta, "once/outcome", json_string(outcome)) < 0 ||
        (key && key[0] && json_object_set_new(meta, "once/key", json_string(key)) < 0) ||
        (mismatch && json_object_set_new(meta, "once/argumentsDiffer", json_true()) < 0)) {
        json_decref(res);
        json_decref(o);
        return NULL;
    }
    json_object_set_new(o, "result", res);
    return answer_dump(o);
}

char *mcp_own_answer(const json_t *id, const char *outcome, const char *key, const char *text)
{
    json_t *res = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", 1);
    char *s = res ? mcp_result_answer(id, res, outcome, key, 0) : NULL;
    json_decref(res);
    return s;
}

char *mcp_error_answer(const json_t *id, int code, const char *message)
{
    json_t *o = answer_envelope(id);
    if (o && json_object_set_new(o, "error", json_pack("{s:i, s:s}", "code", code, "message", message)) < 0) {
        json_decref(o);
        return NULL;
    }
    return answer_dump(o);
}

/* The official SDKs' McpServer answers a call it refused before running
 * the tool (unknown or disabled tool, arguments failing the input schema)
 * not as a JSON-RPC error but as an isError result whose one text is the
 * McpError's message. Those are released like the errors they stand for,
 * so that a corrected call is not answered with the refusal again. Only
 * these prefixes: an output-schema failure comes after the tool ran. */
static int result_refused_unrun(const json_t *result, char *why, size_t cap)
{
    static const char *const prefixes[] = {"MCP error -32602: Input validation error:", "MCP error -32602: Tool "};
    json_t *content = json_object_get(result, "content");
    const char *text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
    if (!json_is_true(json_object_get(result, "isError")) || json_array_size(content) != 1 || !text)
        return 0;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        int tool_state = i == 1 && (strstr(text, " not found") || strstr(text, " disabled"));
        if (strncmp(text, prefixes[i], n) == 0 && (i == 0 || tool_state)) {
            snprintf(why, cap, "the MCP server refused the call before running it: %.160s", text);
            return 1;
        }
    }
    return 0;
}

mcp_verdict mcp_classify(const json_t *final, char *why, size_t cap)
{
    json_t *err = json_object_get(final, "error");
    if (!final) {
        snprintf(why, cap, "the MCP server did not answer the call");
        return MCP_UNKNOWN;
    }
    json_t *result = json_object_get(final, "result");
    if (json_is_object(result))
        return result_refused_unrun(result, why, cap) ? MCP_RELEASED : MCP_COMPLETED;
    if (!json_is_object(err)) {
        snprintf(why, cap, "the MCP server's answer has neither a result nor an error");
        return MCP_UNKNOWN;
    }
    json_int_t code = json_integer_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    snprintf(why, cap, "the MCP server answered error %lld: %.160s", (long long)code, msg ? msg : "");
    /* Parse error, invalid request, unknown method, invalid params, and
     * MCP's "URL elicitation required" (the user must consent first): the
     * request was refused before a handler ran. -32603 (internal error) is
     * what an SDK answers when a handler throws, maybe after its effect. */
    return code == -32700 || (code >= -32602 && code <= -32600) || code == -32042 ? MCP_RELEASED : MCP_UNKNOWN;
}

void mcp_why_for_log(const json_t *final, const char *why, char *out, size_t cap)
{
    json_t *err = json_object_get(final, "error");
    json_t *result = json_object_get(final, "result");
    if (json_is_object(err))
        snprintf(out, cap, "the MCP server answered error %lld",
                 (long long)json_integer_value(json_object_get(err, "code")));
    else if (json_is_object(result))
        snprintf(out, cap, "the MCP server refused the call before running it");
    else
        snprintf(out, cap, "%s", why);
}

int mcp_http_refused(long status)
{
    static const long refused[] = {400, 401, 403, 404, 405, 406, 413, 415, 429};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (status == refused[i])
            return 1;
    return 0;
}
