/*
 * fuzz_mcp.c — libFuzzer target for what the MCP gateway takes from
 * untrusted agents and servers and decides on (server/mcp/mcp_tools.c): the
 * input is one JSON message (json_loadb with the gateway's flags) and is
 * used as
 *  - a tools/list result, learned as a first page and as later pages: a
 *    tool is unrecorded (and never waits under approve = destructive)
 *    exactly when its last listing says readOnlyHint: true, and after
 *    notifications/tools/list_changed every tool is recorded again;
 *  - tools/call params, keyed by mcp_call_key over an upstream with
 *    key.TOOL templates and readonly/approve lists (params.name picks the
 *    tool, "hdr" stands for the Idempotency-Key header): 0 with a key of
 *    1..cap-1 bytes, -1 naming a template field, -2 with a reason; the same
 *    call twice gives the same answer; _meta.idempotencyKey, when a string
 *    that fits, is the key; without key, header or template the key is the
 *    sha256 of the canonical arguments; under key_source = template a
 *    templated tool's key is the template's, whatever idempotencyKey or
 *    header the agent sends;
 *  - arguments for mcp_canonical_args: JSON that parses back to equal
 *    arguments and canonicalizes to itself;
 *  - a final response for mcp_classify: a result object is completed;
 *  - a result for mcp_result_answer, mcp_own_answer and mcp_error_answer:
 *    JSON that keeps the id and the result's members, adds once's _meta,
 *    and leaves the input unchanged.
 * Everything is freed; leaks are LeakSanitizer's to find.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/digest.h"
#include "common/key_template.h"
#include "server/mcp/mcp_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *fz_readonly[] = {"search"};
static char *fz_approve[] = {"refund"};
static mcp_tool_key fz_keys[3];
static upstream_cfg fz_up;   /* lists, templates, approve = destructive */
static upstream_cfg fz_pinned; /* fz_up with key_source = template */
static upstream_cfg fz_bare; /* no lists, no templates, approve = destructive */

static void fz_init(void)
{
    static const char *const tpl[][2] = {
        {"charge", "order-{json:/arguments/order_id}"},
        {"ship", "{header:X-Customer}:{json:/arguments/n}"},
        {"mail", "sha256(lower({json:/arguments/to}))"},
    };
    char err[256];
    for (size_t i = 0; i < 3; i++) {
        fz_keys[i].tool = (char *)tpl[i][0];
        if (key_template_parse(tpl[i][1], &fz_keys[i].key, err, sizeof err) != 0)
            __builtin_trap();
    }
    fz_up = (upstream_cfg){.name = "mcp",
                           .mcp = 1,
                           .url = "http://127.0.0.1:9/mcp",
                           .readonly = fz_readonly,
                           .nreadonly = 1,
                           .approve = fz_approve,
                           .napprove = 1,
                           .approve_destructive = 1,
                           .tool_keys = fz_keys,
                           .ntool_keys = 3};
    fz_pinned = fz_up;
    fz_pinned.key_from_template = 1;
    fz_bare = (upstream_cfg){.name = "bare", .mcp = 1, .url = "http://127.0.0.1:9/mcp", .approve_destructive = 1};
}

static const char *fz_header(void *ctx, const char *name)
{
    (void)ctx;
    return strcasecmp(name, "X-Customer") == 0 ? "cust-1" : NULL;
}

/* ---- tools/list ---------------------------------------------------------------------------- */

/* Whether the last listing of tool i's name in tools says readOnlyHint: true. */
static int fz_last_readonly(json_t *tools, size_t i, const char *name)
{
    size_t n = json_array_size(tools);
    for (size_t j = n; j-- > i;) {
        json_t *tool = json_array_get(tools, j);
        const char *nm = json_string_value(json_object_get(tool, "name"));
        if (nm && strcmp(nm, name) == 0)
            return json_is_true(json_object_get(json_object_get(tool, "annotations"), "readOnlyHint"));
    }
    __builtin_trap();
}

static void fz_tools(json_t *result)
{
    mcp_tools *t = NULL;
    if (mcp_tools_new(&t) != 0)
        return;
    json_t *tools = json_object_get(result, "tools");
    mcp_tools_learn(t, result, 1);
    if (json_is_array(tools)) {
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool)
        {
            const char *name = json_string_value(json_object_get(tool, "name"));
            if (!name || i > 256)
                continue;
            int ro = fz_last_readonly(tools, i, name);
            if (mcp_tool_recorded(&fz_bare, t, name) != !ro)
                __builtin_trap();
            if (ro && mcp_tool_needs_approval(&fz_bare, t, name))
                __builtin_trap();
            /* The operator's lists beat the server's hints. */
            if (strcmp(name, "search") == 0 && mcp_tool_recorded(&fz_up, t, name))
                __builtin_trap();
            if (strcmp(name, "refund") == 0 && !mcp_tool_needs_approval(&fz_up, t, name))
                __builtin_trap();
        }
    }
    /* Later pages merge; a repeated page changes nothing. */
    mcp_tools_learn(t, result, 0);
    mcp_tools_learn(t, result, 0);
    (void)mcp_tool_recorded(&fz_up, t, "charge");
    (void)mcp_tool_needs_approval(&fz_up, t, "charge");
    mcp_tools_forget(t);
    if (json_is_array(tools)) {
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool)
        {
            const char *name = json_string_value(json_object_get(tool, "name"));
            if (name && i <= 256 &&
                (!mcp_tool_recorded(&fz_bare, t, name) || !mcp_tool_needs_approval(&fz_bare, t, name)))
                __builtin_trap();
        }
    }
    mcp_tools_free(t);
}

/* ---- the key of a call --------------------------------------------------------------------- */

static int fz_field(const char *err)
{
    return strncmp(err, "json:", 5) == 0 || strncmp(err, "header:", 7) == 0;
}

static int fz_key(const upstream_cfg *up, const char *tool, json_t *params, const char *hdr, const key_source *hsrc,
                  char *key, size_t cap)
{
    char err[256];
    memset(key, 'x', cap);
    memset(err, 'x', sizeof err);
    int rc = mcp_call_key(up, tool, params, hdr, hsrc, key, cap, err, sizeof err);
    if (rc != 0 && memchr(err, '\0', sizeof err) == NULL) /* err is only written on failure */
        __builtin_trap();
    switch (rc) {
    case 0:
        if (memchr(key, '\0', cap) == NULL || key[0] == '\0')
            __builtin_trap();
        break;
    case -1:
        if (!fz_field(err))
            __builtin_trap();
        break;
    case -2:
        if (err[0] == '\0')
            __builtin_trap();
        break;
    default:
        __builtin_trap();
    }
    return rc;
}

static void fz_call_key(json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    const char *tool = name && config_mcp_tool_ok(name, strlen(name)) ? name : "charge";
    const char *hdr = json_string_value(json_object_get(params, "hdr"));
    key_source hsrc = {.header = fz_header};
    char k1[256], k2[256], small[17];
    int r1 = fz_key(&fz_up, tool, params, hdr, &hsrc, k1, sizeof k1);
    int r2 = fz_key(&fz_up, tool, params, hdr, &hsrc, k2, sizeof k2);
    if (r1 != r2 || (r1 == 0 && strcmp(k1, k2) != 0))
        __builtin_trap();
    int r3 = fz_key(&fz_up, tool, params, hdr, &hsrc, small, sizeof small);
    if (r1 == 0 && strlen(k1) < sizeof small && (r3 != 0 || strcmp(k1, small) != 0))
        __builtin_trap();
    /* A string idempotencyKey that fits is the key, whatever else. */
    json_t *given = json_object_get(json_object_get(params, "_meta"), "idempotencyKey");
    if (given && !json_is_string(given) && r1 != -2)
        __builtin_trap();
    if (json_is_string(given) && json_string_length(given) > 0 && json_string_length(given) < sizeof k1 &&
        strlen(json_string_value(given)) == json_string_length(given) &&
        (r1 != 0 || strcmp(k1, json_string_value(given)) != 0))
        __builtin_trap();
    /* key_source = template: a templated tool's key is the template's; no
     * key of the agent's changes it. */
    int templated = 0;
    for (size_t i = 0; i < fz_pinned.ntool_keys; i++)
        templated |= strcmp(fz_pinned.tool_keys[i].tool, tool) == 0;
    if (templated) {
        char kp[256], kq[256];
        int rp = fz_key(&fz_pinned, tool, params, hdr, &hsrc, kp, sizeof kp);
        int rq = fz_key(&fz_pinned, tool, params, "another-agent-key", &hsrc, kq, sizeof kq);
        if (rp != rq || (rp == 0 && strcmp(kp, kq) != 0))
            __builtin_trap();
        if (!given && !hdr && (rp != r1 || (rp == 0 && strcmp(kp, k1) != 0)))
            __builtin_trap();
    }
    /* Without a key, a header or a template: the hash of the canonical
     * arguments. */
    int rb = fz_key(&fz_bare, tool, params, NULL, NULL, k2, sizeof k2);
    if (!given) {
        char *canon = mcp_canonical_args(params);
        char hex[65];
        if (canon && digest_sha256_hex(canon, strlen(canon), hex) == 0 && (rb != 0 || strcmp(k2, hex) != 0))
            __builtin_trap();
        free(canon);
    }
}

/* ---- canonical arguments ------------------------------------------------------------------- */

static void fz_canonical(json_t *params)
{
    char *c1 = mcp_canonical_args(params);
    if (!c1)
        return;
    json_t *back = json_loads(c1, JSON_DECODE_ANY, NULL);
    if (!back)
        __builtin_trap();
    json_t *args = json_object_get(params, "arguments");
    if (args ? !json_equal(back, args) : !(json_is_object(back) && json_object_size(back) == 0))
        __builtin_trap();
    json_t *wrap = json_pack("{s:O}", "arguments", back);
    char *c2 = wrap ? mcp_canonical_args(wrap) : NULL;
    if (c2 && strcmp(c1, c2) != 0)
        __builtin_trap();
    free(c2);
    json_decref(wrap);
    json_decref(back);
    free(c1);
}

/* ---- verdicts ------------------------------------------------------------------------------ */

static void fz_classify(json_t *final)
{
    char why[64];
    memset(why, 'x', sizeof why);
    mcp_verdict v = mcp_classify(final, why, sizeof why);
    if (v != MCP_COMPLETED && v != MCP_RELEASED && v != MCP_UNKNOWN)
        __builtin_trap();
    if (json_is_object(json_object_get(final, "result")) != (v == MCP_COMPLETED))
        __builtin_trap();
    if (v != MCP_COMPLETED && (memchr(why, '\0', sizeof why) == NULL || why[0] == '\0'))
        __builtin_trap();
    if (mcp_classify(NULL, why, sizeof why) != MCP_UNKNOWN)
        __builtin_trap();
}

/* ---- answers ------------------------------------------------------------------------------- */

static json_t *fz_parse_answer(char *text, const json_t *id)
{
    if (!text)
        __builtin_trap(); /* only out of memory */
    json_t *a = json_loads(text, 0, NULL);
    free(text);
    if (!a || !json_is_object(a))
        __builtin_trap();
    const char *v = json_string_value(json_object_get(a, "jsonrpc"));
    json_t *aid = json_object_get(a, "id");
    if (!v || strcmp(v, "2.0") != 0 || !aid || (id ? !json_equal(aid, id) : !json_is_null(aid)))
        __builtin_trap();
    return a;
}

static void fz_answers(json_t *msg)
{
    json_t *id = json_object_get(msg, "id");
    json_t *result = json_object_get(msg, "result");
    if (!result)
        result = msg;
    json_t *before = json_deep_copy(msg);
    if (!before)
        return;
    for (int mismatch = 0; mismatch <= 1; mismatch++) {
        json_t *a = fz_parse_answer(mcp_result_answer(id, result, "replayed", "charge:k", mismatch), id);
        json_t *r = json_object_get(a, "result");
        json_t *meta = json_object_get(r, "_meta");
        const char *o = json_string_value(json_object_get(meta, "once/outcome"));
        const char *k = json_string_value(json_object_get(meta, "once/key"));
        json_t *diff = json_object_get(meta, "once/argumentsDiffer");
        if (!o || strcmp(o, "replayed") != 0 || !k || strcmp(k, "charge:k") != 0 ||
            (mismatch ? !json_is_true(diff) : diff != NULL))
            __builtin_trap();
        /* The result's members (and its own _meta's) are kept. */
        if (json_is_object(result)) {
            const char *name;
            json_t *val;
            json_object_foreach(result, name, val)
            {
                if (strcmp(name, "_meta") != 0 && !json_equal(json_object_get(r, name), val))
                    __builtin_trap();
            }
            json_t *m0 = json_object_get(result, "_meta");
            if (json_is_object(m0)) {
                json_object_foreach(m0, name, val)
                {
                    if (strncmp(name, "once/", 5) != 0 && !json_equal(json_object_get(meta, name), val))
                        __builtin_trap();
                }
            }
        }
        json_decref(a);
    }
    /* A text from the input in once's own answer, and an error answer. */
    const char *text = json_string_value(json_object_get(msg, "message"));
    json_t *a = fz_parse_answer(mcp_own_answer(id, "held", "charge:k", text ? text : "held"), id);
    json_t *r = json_object_get(a, "result");
    if (!json_is_true(json_object_get(r, "isError")))
        __builtin_trap();
    json_decref(a);
    json_int_t code = json_integer_value(json_object_get(msg, "code"));
    a = fz_parse_answer(mcp_error_answer(id, (int)code, text ? text : "error"), id);
    if (json_object_get(a, "result") || !json_is_object(json_object_get(a, "error")))
        __builtin_trap();
    json_decref(a);
    /* Nothing above changed the input. */
    if (!json_equal(before, msg))
        __builtin_trap();
    json_decref(before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        fz_init();
        ready = 1;
    }
    json_t *msg = json_loadb((const char *)data, size, 0, NULL);
    if (!msg)
        return 0;
    /* A tools/list result: the message itself, or its result. */
    fz_tools(msg);
    fz_tools(json_object_get(msg, "result"));
    /* tools/call params: the message itself, or its params. */
    fz_call_key(msg);
    fz_call_key(json_object_get(msg, "params"));
    fz_canonical(msg);
    fz_canonical(json_object_get(msg, "params"));
    fz_classify(msg);
    fz_answers(msg);
    json_decref(msg);
    return 0;
}
