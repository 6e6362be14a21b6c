/*
 * config_endpoint.c — the keys an endpoint has, whichever section
 * configures it. [upstream.NAME] (a proxied API) and [mcp.NAME] (an MCP
 * server) are both an upstream_cfg the gateway calls for agents, and eight
 * of their keys mean the same in both: header and header_file (injected
 * into each request), timeout, lease, retention, max_response, key_source
 * and approve_ttl. Their rows, the header setters and the checks they need
 * once the file is read are here once; each section's own rows and own
 * checks stay beside it (config_upstream.c, config_mcp.c).
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "once/once.h"

/* A call longer than a day is not a call; the reconciler's claims
 * (timeout + 5s) must stay within a lease's 7 days. */
#define CONFIG_TIMEOUT_MAX_MS (24 * 3600 * 1000LL)

/* ---- headers ------------------------------------------------------------------- */

/* Headers that frame the request or concern only one hop: injecting them
 * would break the proxy rather than authenticate it. */
static int config_header_forbidden(const char *name, size_t n)
{
    static const char *const names[] = {
        "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Keep-Alive", "TE", "Trailer"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) == n && strncasecmp(names[i], name, n) == 0)
            return 1;
    }
    return 0;
}

/* Checks "Name: value" and appends it, normalised to "Name: value", to the
 * current endpoint's headers. where is "" for a header key or
 * "'FILE' line N: " for a header_file line. Values are never echoed: they
 * are usually secrets. */
static int config_add_header_where(config_ctx *c, const char *where, const char *s, size_t n)
{
    upstream_cfg *u = &c->cfg->upstreams[c->cur];
    char q[CONFIG_QUOTE_MAX];
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return config_fail(c, "%s: %sexpected 'Name: value'", c->key, where);
    size_t nl = (size_t)(colon - s), vl = n - nl - 1;
    const char *v = colon + 1;
    config_quote_n(s, nl, q, sizeof q);
    if (!config_is_token(s, nl))
        return config_fail(c, "%s: %s'%s' is not a valid header name", c->key, where, q);
    if (config_header_forbidden(s, nl))
        return config_fail(c, "%s: %sheader '%s' cannot be injected", c->key, where, q);
    for (; vl > 0 && (*v == ' ' || *v == '\t'); v++)
        vl--;
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (config_has_ctl(v, vl, 1))
        return config_fail(c, "%s: %sthe value of '%s' contains a control character", c->key, where, q);
    char *h = NULL;
    if (nl > INT32_MAX || vl > INT32_MAX || asprintf(&h, "%.*s: %.*s", (int)nl, s, (int)vl, v) < 0)
        return config_fail_oom(c);
    int rc = config_push_str(&u->headers, &u->nheaders, h, strlen(h));
    free(h);
    return rc != 0 ? config_fail_oom(c) : 0;
}

/* header = Name: value, once a line of the file. */
static int config_header(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    return config_add_header_where(c, "", v, strlen(v));
}

/* One line of a header_file, named by its file and line in messages. */
static int config_header_line(config_ctx *c, const char *fname, int fline, const char *s, size_t n)
{
    char where[CONFIG_QUOTE_MAX * 2 + 32];
    snprintf(where, sizeof where, "'%s' line %d: ", fname, fline);
    return config_add_header_where(c, where, s, n);
}

/* header_file = PATH: a header a line, so that secrets stay out of the
 * config file. */
static int config_header_file(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    return config_read_file(c, v, config_header_line);
}


/* ---- the shared rows -------------------------------------------------------------------- */

/* After each section's own rows (config_keys.h's config_section). */
static const config_key config_endpoint_keys[] = {
    {.name = "header", .set = config_header, .field = UP(headers), .flags = CK_REPEAT | CK_SECRET | CK_NO_HASH},
    {.name = "header_file", .set = config_header_file, .field = UP(headers), .flags = CK_PATH | CK_SECRET},
    {.name = "timeout", .set = config_duration, .field = UP(timeout_ms),
     .min = 1, .max = CONFIG_TIMEOUT_MAX_MS, .default_value = "60s"},
    /* lease and retention: [server]'s unless set (config_endpoint_finish). */
    {.name = "lease", .set = config_duration, .field = UP(lease_ms), .min = 1, .max = ONCE_LEASE_MAX_MS},
    {.name = "retention", .set = config_duration, .field = UP(retention_ms), .min = 1, .max = ONCE_RETENTION_MAX_MS},
    /* At most ONCE_BODY_MAX, what the ledger stores of an answer: checked
     * after the file (config_endpoint_finish), with its own message. */
    {.name = "max_response", .set = config_size, .field = UP(max_response), .min = 1, .default_value = "16MiB"},
    /* template: the section's key template (key, or key.TOOL for an MCP
     * server) wins over the agent's own key. */
    {.name = "key_source", .set = config_word, .field = UP(key_from_template),
     .default_value = "header", .words = "header|template"},
    {.name = "approve_ttl", .set = config_duration, .field = UP(approve_ttl_ms),
     .min = 1, .max = ONCE_APPROVAL_TTL_MAX_MS, .default_value = "24h"},
};

const config_table config_endpoint_table = {.keys = config_endpoint_keys, .nkeys = CONFIG_NKEYS(config_endpoint_keys)};

/* ---- after the file ------------------------------------------------------------------------ */

/* Called by each section's finish, after [server]'s (so its lease and
 * retention are final). A lease is how long a reservation lives without
 * news from its owner, who renews it every lease/3 while the call runs: it
 * does not grow with the timeout. */
int config_endpoint_finish(config_ctx *c, size_t i)
{
    const once_config *cfg = c->cfg;
    upstream_cfg *u = &cfg->upstreams[i];
    const char *prefix = c->st[CONFIG_UPSTREAM][i].sec->prefix; /* "upstream." or "mcp." */
    if (config_line(c, CONFIG_UPSTREAM, i, "lease") == 0)
        u->lease_ms = cfg->lease_ms;
    if (config_line(c, CONFIG_UPSTREAM, i, "retention") == 0)
        u->retention_ms = cfg->retention_ms;
    if (u->max_response > ONCE_BODY_MAX)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "max_response"),
                              "[%s%s]: max_response may be at most 64MiB", prefix, u->name);
    return 0;
}

/* approve_ttl is an endpoint's key, but what it bounds (how long an
 * approval may wait) exists only where the section says what needs one:
 * each section calls this where its approve rules are known. */
int config_endpoint_ttl_used(config_ctx *c, size_t i, int approves, const char *rule)
{
    int line = config_line(c, CONFIG_UPSTREAM, i, "approve_ttl");
    if (approves || line <= 0)
        return 0;
    return config_fail_at(c, line, "approve_ttl: does nothing without approve = %s in [%s%s]", rule,
                          c->st[CONFIG_UPSTREAM][i].sec->prefix, c->cfg->upstreams[i].name);
}
