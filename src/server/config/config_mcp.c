/*
 * config_mcp.c — the [mcp.NAME] section (docs/mcp.md): an MCP server that
 * agents reach at /v1/mcp/NAME, over Streamable HTTP (url) or spawned as a
 * stdio server (command). Its instances are upstream_cfg rows with mcp set,
 * in the upstreams' array, so that scopes, leases, approvals and the
 * reconciler find an MCP server as they find an upstream. The setters here
 * read what only an MCP server has: the command line, per-tool key
 * templates, tool lists. The keys it shares with [upstream.NAME] (header,
 * timeout, lease, ...) and their checks are config_endpoint.c's.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>

#include "common/key_template.h"

#define MCP_TOOL_MAX 128 /* MCP tool names: 1-128 of A-Z a-z 0-9 _ - . */
#define MCP_WAIT_MAX_MS (10 * 60 * 1000LL)

/* Whether s[0..n) is a tool name as MCP defines them; '/' is allowed too
 * (some servers namespace their tools with it). ':' never is: it ends the
 * tool in a ledger key (TOOL:KEY). */
int config_mcp_tool_ok(const char *s, size_t n)
{
    if (n == 0 || n > MCP_TOOL_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-' || ch == '.' || ch == '/'))
            return 0;
    }
    return 1;
}

static upstream_cfg *config_mcp_cur(config_ctx *c)
{
    return &c->cfg->upstreams[c->cur];
}

/* command = PROGRAM ARG...: split on blanks (no quoting: a program that
 * needs spaces in an argument gets a wrapper script). */
static int config_command(config_ctx *c, const config_key *k, void *field, const char *v)
{
    upstream_cfg *u = config_mcp_cur(c);
    (void)k;
    (void)field;
    config_free_strs(u->command, u->ncommand);
    u->command = NULL;
    u->ncommand = 0;
    for (const char *p = v; *p != '\0';) {
        p += strspn(p, " \t");
        size_t n = strcspn(p, " \t");
        if (n == 0)
            break;
        if (config_has_ctl(p, n, 0))
            return config_fail(c, "%s: control characters are not allowed", c->key);
        if (config_push_str(&u->command, &u->ncommand, p, n) != 0)
            return config_fail_oom(c);
        p += n;
    }
    if (u->ncommand == 0)
        return config_fail(c, "%s: empty (write the program and its arguments)", c->key);
    return 0;
}

/* key.TOOL = TEMPLATE: parsed now, so that a mistake is reported at its
 * line rather than on the first call. The template's {json:/...} root is
 * the call's params ({name, arguments}). */
static int config_tool_key(config_ctx *c, const config_key *k, void *field, const char *v)
{
    upstream_cfg *u = config_mcp_cur(c);
    const char *tool = c->suffix;
    char q[CONFIG_QUOTE_MAX], why[CONFIG_MSG_MAX / 2];
    (void)k;
    (void)field;
    if (!config_mcp_tool_ok(tool, strlen(tool)))
        return config_fail(c, "key.%s: '%s' is not a tool name (1-128 of A-Z a-z 0-9 _ - . /)",
                           config_quote(tool, q, sizeof q), q);
    for (size_t i = 0; i < u->ntool_keys; i++) {
        if (strcmp(u->tool_keys[i].tool, tool) == 0)
            return config_fail(c, "duplicate key 'key.%s'", tool);
    }
    if (v[0] == '\0')
        return config_fail(c, "key.%s: empty (leave it out to key calls on their arguments)", tool);
    key_template *t = NULL;
    why[0] = '\0';
    if (key_template_parse(v, &t, why, sizeof why) != 0) {
        if (t != NULL)
            key_template_free(t);
        return config_fail(c, "key.%s: %s", tool, why[0] != '\0' ? config_quote(why, q, sizeof q) : "not a valid template");
    }
    if (t && key_template_json_header_only(t, 1, why, sizeof why) < 0) {
        key_template_free(t);
        return config_fail(c, "key.%s: {%s} is not available to a tool call (use {json:/arguments/...} or "
                           "{header:NAME})", tool, config_quote(why, q, sizeof q));
    }
    mcp_tool_key *grown = t ? realloc(u->tool_keys, (u->ntool_keys + 1) * sizeof *grown) : NULL;
    char *name = grown ? strdup(tool) : NULL;
    if (grown)
        u->tool_keys = grown;
    if (!name) {
        if (t)
            key_template_free(t);
        return config_fail_oom(c);
    }
    u->tool_keys[u->ntool_keys++] = (mcp_tool_key){.tool = name, .key = t};
    return 0;
}

typedef struct config_tools {
    char ***v;
    size_t *n;
    int *destructive; /* approve: the word "destructive" is allowed */
} config_tools;

static int config_tool_item(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    config_tools *l = arg;
    char q[CONFIG_QUOTE_MAX];
    if (l->destructive && n == 11 && memcmp(s, "destructive", 11) == 0) {
        *l->destructive = 1;
        return 0;
    }
    if (!config_mcp_tool_ok(s, n))
        return config_fail(c, "%s: item %zu '%s' is not a tool name (1-128 of A-Z a-z 0-9 _ - . /)%s", c->key, nth,
                           config_quote_n(s, n, q, sizeof q), l->destructive ? " or 'destructive'" : "");
    for (size_t i = 0; i < *l->n; i++) {
        if (strlen((*l->v)[i]) == n && memcmp((*l->v)[i], s, n) == 0)
            return config_fail(c, "%s: '%s' is listed twice", c->key, config_quote_n(s, n, q, sizeof q));
    }
    return config_push_str(l->v, l->n, s, n) != 0 ? config_fail_oom(c) : 0;
}

/* readonly = TOOL, ...; approve = TOOL, ... | destructive. */
static int config_tools_list(config_ctx *c, const config_key *k, void *field, const char *v)
{
    upstream_cfg *u = config_mcp_cur(c);
    int approve = strcmp(k->name, "approve") == 0;
    config_tools l = {approve ? &u->approve : &u->readonly, approve ? &u->napprove : &u->nreadonly,
                      approve ? &u->approve_destructive : NULL};
    (void)field;
    config_free_strs(*l.v, *l.n);
    *l.v = NULL;
    *l.n = 0;
    if (approve)
        u->approve_destructive = 0;
    return config_split(c, v, strlen(v), ',', config_tool_item, &l);
}

/* [mcp.NAME]'s own rows (config_keys.h); config_endpoint_table's follow. */
static const config_key config_mcp_keys[] = {
    {.name = "url", .set = config_url, .field = UP(url), .flags = CK_NO_HASH}, /* kept as written: the server's endpoint */
    {.name = "command", .set = config_command, .field = UP(command)},
    {.name = "key.", .set = config_tool_key, .field = UP(tool_keys), .flags = CK_PREFIX | CK_REPEAT | CK_NO_HASH},
    {.name = "readonly", .set = config_tools_list, .field = UP(readonly)},
    {.name = "approve", .set = config_tools_list, .field = UP(approve)},
    {.name = "wait", .set = config_duration, .field = UP(wait_ms), .max = MCP_WAIT_MAX_MS, .default_value = "30s"},
};

/* One of url and command; header only for url; key_source = template
 * only with a key.TOOL (else it would pin nothing); what every endpoint
 * checks (config_endpoint_finish); approve_ttl only with approve. */
static int config_mcp_finish(config_ctx *c, size_t i)
{
    const once_config *cfg = c->cfg;
    upstream_cfg *u = &cfg->upstreams[i];
    u->mcp = 1;
    if ((u->url == NULL) == (u->command == NULL))
        return config_fail_at(c, u->line, "[mcp.%s] needs exactly one of url (a Streamable HTTP server) and command "
                              "(a stdio server)", u->name);
    if (u->command && u->nheaders > 0)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "header") ?: config_line(c, CONFIG_UPSTREAM, i,
                                                                                              "header_file"),
                              "[mcp.%s]: header applies to a url server (give a stdio server its secrets in its "
                              "environment)", u->name);
    if (u->key_from_template && u->ntool_keys == 0)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "key_source"),
                              "key_source: template needs key.TOOL = TEMPLATE in [mcp.%s]", u->name);
    if (config_endpoint_finish(c, i) != 0)
        return -1;
    for (size_t a = 0; a < u->napprove; a++)
        for (size_t r = 0; r < u->nreadonly; r++)
            if (strcmp(u->approve[a], u->readonly[r]) == 0)
                return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "readonly"),
                                      "[mcp.%s]: '%s' is in both readonly and approve", u->name, u->readonly[r]);
    return config_endpoint_ttl_used(c, i, u->napprove > 0 || u->approve_destructive, "TOOL, ...");
}

const config_section config_mcp_section = CONFIG_NAMED_SECTION(CONFIG_UPSTREAM, "mcp.", "an MCP server", upstream_cfg,
                                                                config_mcp_keys, &config_endpoint_table,
                                                                config_mcp_finish);
