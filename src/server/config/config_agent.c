/*
 * config_agent.c — the [agent.NAME] section (docs/agents.md): what one
 * agent may reach (allow = TARGET: ITEM, ...) and how much it may do
 * (limit = TARGET[: RULE] [sum({json:/pointer})] N/WINDOW, over_limit).
 * Lines are read as they come; whether their targets exist is checked once
 * the whole file is in, since upstreams, MCP servers and sources may be
 * defined after the agents.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>

#include "once/once.h"

#define AG(f) offsetof(agent_cfg, f)
#define LIMIT_WINDOW_MIN_MS 1000LL
#define LIMIT_WINDOW_MAX_MS (30LL * 24 * 3600 * 1000)
#define LIMIT_MAX ((uint64_t)1 << 53) /* a sum stays exact in a double */

static agent_cfg *config_agent_cur(config_ctx *c)
{
    return &c->cfg->agents[c->cur];
}

/* TARGET[0..n) of an allow or limit line: "actions", "hooks", "mcp.NAME"
 * or an upstream's NAME (whose existence the finish checks). */
static int config_grant_target(config_ctx *c, const char *s, size_t n, grant_kind *kind, char **name)
{
    char q[CONFIG_QUOTE_MAX];
    *name = NULL;
    if (n == 7 && memcmp(s, "actions", 7) == 0) {
        *kind = GRANT_ACTIONS;
        return 0;
    }
    if (n == 5 && memcmp(s, "hooks", 5) == 0) {
        *kind = GRANT_HOOKS;
        return 0;
    }
    *kind = n > 4 && memcmp(s, "mcp.", 4) == 0 ? GRANT_MCP : GRANT_UPSTREAM;
    size_t skip = *kind == GRANT_MCP ? 4 : 0;
    if ((*name = strndup(s + skip, n - skip)) == NULL)
        return config_fail_oom(c);
    if (once_scope_validate(*name) != ONCE_OK) {
        free(*name);
        *name = NULL;
        return config_fail(c, "%s: '%s' is not an upstream, mcp.NAME, actions or hooks", c->key,
                           config_quote_n(s, n, q, sizeof q));
    }
    return 0;
}

/* One item of a grant or the rule of a limit, in the form its target
 * takes: a path rule for an upstream ("*" alone: all of it), a tool or a
 * source name or "*", a scope pattern. Into *out (allocated). */
static int config_grant_item(config_ctx *c, grant_kind kind, const char *s, size_t n, size_t nth, char **out)
{
    char q[CONFIG_QUOTE_MAX];
    config_quote_n(s, n, q, sizeof q);
    *out = NULL;
    if (n == 1 && s[0] == '*')
        return (*out = strdup("*")) != NULL ? 0 : config_fail_oom(c);
    int ok = 1;
    switch (kind) {
    case GRANT_UPSTREAM: return config_path_rule(c, s, n, nth, out);
    case GRANT_MCP: ok = config_mcp_tool_ok(s, n); break;
    case GRANT_HOOKS: ok = n <= ONCE_SCOPE_MAX && !config_has_ctl(s, n, 0) && memchr(s, '*', n) == NULL; break;
    case GRANT_ACTIONS:
        ok = n <= ONCE_SCOPE_MAX && !config_has_ctl(s, n, 0) && memchr(s, ' ', n) == NULL;
        break;
    }
    if (!ok)
        return config_fail(c, "%s: item %zu '%s' is not %s", c->key, nth, q,
                           kind == GRANT_MCP     ? "a tool name or *"
                           : kind == GRANT_HOOKS ? "a source name or *"
                                                 : "a scope pattern (support-*, billing)");
    return (*out = strndup(s, n)) != NULL ? 0 : config_fail_oom(c);
}

static int config_allow_item(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    agent_grant *g = arg;
    if (n == 0)
        return config_fail(c, "%s: item %zu is empty", c->key, nth);
    char *item = NULL;
    if (config_grant_item(c, g->kind, s, n, nth, &item) != 0)
        return -1;
    int rc = config_push_str(&g->items, &g->nitems, item, strlen(item));
    free(item);
    return rc != 0 ? config_fail_oom(c) : 0;
}

/* Makes room for one more element of an array of agent grants or limits. */
static void *config_agent_grow(config_ctx *c, void *arr, size_t n, size_t size)
{
    void *more = n < SIZE_MAX / size - 1 ? realloc(arr, (n + 1) * size) : NULL;
    if (more == NULL)
        config_fail_oom(c);
    return more;
}

/* allow = TARGET: ITEM, ITEM, ... (repeatable). */
static int config_allow(config_ctx *c, const config_key *k, void *field, const char *v)
{
    agent_cfg *a = config_agent_cur(c);
    (void)k;
    (void)field;
    const char *colon = strchr(v, ':');
    if (colon == NULL)
        return config_fail_value(c, " is not TARGET: ITEM, ... (stripe: POST /v1/refunds*, mcp.github: *)");
    size_t tn = (size_t)(colon - v);
    while (tn > 0 && (v[tn - 1] == ' ' || v[tn - 1] == '\t'))
        tn--;
    agent_grant g = {.line = c->lineno};
    if (config_grant_target(c, v, tn, &g.kind, &g.target) != 0)
        return -1;
    agent_grant *more = config_agent_grow(c, a->grants, a->ngrants, sizeof *a->grants);
    if (more == NULL) {
        free(g.target);
        return -1;
    }
    a->grants = more;
    a->grants[a->ngrants++] = g;
    return config_split(c, colon + 1, strlen(colon + 1), ',', config_allow_item, &a->grants[a->ngrants - 1]);
}

/* "N/WINDOW" at the end of a limit: N 1..2^53, WINDOW 1s..30d. */
static int config_limit_rate(config_ctx *c, const char *s, agent_limit *l)
{
    const char *slash = strchr(s, '/');
    const char *end = slash != NULL ? config_parse_digits(s, LIMIT_MAX, &l->max) : NULL;
    if (end != slash || l->max == 0 || config_parse_duration(slash + 1, &l->window_ms) != 0)
        return config_fail_value(c, ": the rate is not N/WINDOW (200/1d, 20/1h)");
    if (l->window_ms < LIMIT_WINDOW_MIN_MS || l->window_ms > LIMIT_WINDOW_MAX_MS)
        return config_fail_value(c, ": the window is not between 1s and 30d");
    return 0;
}

/* "sum({json:/pointer})" before the rate: the JSON member summed. */
static int config_limit_sum(config_ctx *c, const char *s, size_t n, agent_limit *l)
{
    static const char head[] = "sum({json:", tail[] = "})";
    size_t hn = sizeof head - 1, tl = sizeof tail - 1;
    if (n < hn + tl || memcmp(s, head, hn) != 0 || memcmp(s + n - tl, tail, tl) != 0 ||
        !config_pointer_ok(s + hn, n - hn - tl) || n - hn - tl == 0)
        return config_fail_value(c, ": sum() reads a member of the JSON body: sum({json:/amount})");
    return (l->sum = strndup(s + hn, n - hn - tl)) != NULL ? 0 : config_fail_oom(c);
}

/* The last blank-separated word of s[0..*n): its start; *n becomes the
 * length of what comes before it, trimmed. */
static const char *config_last_word(const char *s, size_t *n)
{
    size_t e = *n;
    while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t'))
        e--;
    size_t b = e;
    while (b > 0 && s[b - 1] != ' ' && s[b - 1] != '\t')
        b--;
    *n = b;
    while (*n > 0 && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
        (*n)--;
    return s + b;
}

/* The TARGET[: RULE] head of a limit. */
static int config_limit_head(config_ctx *c, const char *s, size_t n, agent_limit *l)
{
    const char *colon = memchr(s, ':', n);
    size_t tn = colon != NULL ? (size_t)(colon - s) : n;
    while (tn > 0 && (s[tn - 1] == ' ' || s[tn - 1] == '\t'))
        tn--;
    if (config_grant_target(c, s, tn, &l->kind, &l->target) != 0)
        return -1;
    if (l->kind == GRANT_HOOKS)
        return config_fail_value(c, ": hooks have no limits (an event is not an effect)");
    if (colon == NULL)
        return 0;
    const char *r = colon + 1;
    size_t rn = n - (size_t)(r - s);
    while (rn > 0 && (*r == ' ' || *r == '\t'))
        r++, rn--;
    if (rn == 0)
        return config_fail_value(c, ": nothing after 'TARGET:'");
    return config_grant_item(c, l->kind, r, rn, 1, &l->rule);
}

static void config_limit_clear(agent_limit *l)
{
    free(l->text);
    free(l->ledger_id);
    free(l->target);
    free(l->rule);
    free(l->sum);
}

/* limit = TARGET[: RULE] [sum({json:/pointer})] N/WINDOW (repeatable). */
static int config_limit(config_ctx *c, const config_key *k, void *field, const char *v)
{
    agent_cfg *a = config_agent_cur(c);
    (void)k;
    (void)field;
    agent_limit l = {.line = c->lineno};
    size_t n = strlen(v);
    const char *rate = config_last_word(v, &n);
    char *rate_s = strdup(rate);
    if ((l.text = strdup(v)) == NULL || rate_s == NULL) {
        free(rate_s);
        free(l.text);
        return config_fail_oom(c);
    }
    int rc = n == 0 ? config_fail_value(c, " is not TARGET[: RULE] [sum({json:/pointer})] N/WINDOW")
                    : config_limit_rate(c, rate_s, &l);
    free(rate_s);
    if (rc == 0) {
        size_t before = n;
        const char *word = config_last_word(v, &before);
        if (strncmp(word, "sum(", 4) == 0) {
            rc = config_limit_sum(c, word, n - (size_t)(word - v), &l);
            n = before;
        }
    }
    if (rc == 0)
        rc = n == 0 ? config_fail_value(c, ": no target") : config_limit_head(c, v, n, &l);
    if (rc == 0 && a->nlimits == ONCE_LIMIT_CHARGES_MAX)
        rc = config_fail(c, "%s: at most %d limits per agent", c->key, ONCE_LIMIT_CHARGES_MAX);
    agent_limit *more = rc == 0 ? config_agent_grow(c, a->limits, a->nlimits, sizeof *a->limits) : NULL;
    if (more == NULL) {
        config_limit_clear(&l);
        return -1;
    }
    a->limits = more;
    a->limits[a->nlimits++] = l;
    return 0;
}

static const config_key config_agent_keys[] = {
    {.name = "allow", .set = config_allow, .field = AG(grants), .flags = CK_REPEAT},
    {.name = "limit", .set = config_limit, .field = AG(limits), .flags = CK_REPEAT},
    {.name = "over_limit", .set = config_word, .field = AG(over_limit_approve), .default_value = "refuse",
     .words = "refuse|approve"},
};

/* Whether a grant's or a limit's target names what is configured: an
 * upstream for a bare name, an MCP server for mcp.NAME. */
static int config_target_exists(config_ctx *c, grant_kind kind, const char *name, int line)
{
    if (kind != GRANT_UPSTREAM && kind != GRANT_MCP)
        return 0;
    const upstream_cfg *u = config_upstream(c->cfg, name);
    if (u != NULL && (u->mcp != 0) == (kind == GRANT_MCP))
        return 0;
    if (u != NULL)
        return config_fail_at(c, line, "[agent.%s]: '%s' is %s; write %s", c->secname, name,
                              u->mcp ? "an MCP server" : "an upstream, not an MCP server",
                              u->mcp ? "mcp.NAME" : "its name without mcp.");
    return config_fail_at(c, line, "[agent.%s]: no %s named '%s'", c->secname,
                          kind == GRANT_MCP ? "[mcp.NAME] server" : "[upstream.NAME]", name);
}

/* The sources a hooks grant names exist ("*": all). */
static int config_hooks_exist(config_ctx *c, const agent_grant *g)
{
    for (size_t j = 0; j < g->nitems; j++) {
        if (strcmp(g->items[j], "*") != 0 && config_source(c->cfg, g->items[j]) == NULL)
            return config_fail_at(c, g->line, "[agent.%s]: no [source.NAME] named '%s'", c->secname, g->items[j]);
    }
    return 0;
}

/* Whether the agent has a grant on the limit's target (a limit on what an
 * agent may not reach is a mistake: it limits nothing). */
static int config_limit_granted(const agent_cfg *a, const agent_limit *l)
{
    for (size_t g = 0; g < a->ngrants; g++) {
        const agent_grant *gr = &a->grants[g];
        if (gr->kind == l->kind && (l->kind == GRANT_ACTIONS || strcmp(gr->target, l->target) == 0))
            return 1;
    }
    return 0;
}

static int config_agent_finish(config_ctx *c, size_t i)
{
    agent_cfg *a = &c->cfg->agents[i];
    c->secname = a->name;
    if (a->ngrants == 0)
        return config_fail_at(c, a->line,
                              "[agent.%s] allows nothing: add allow = TARGET: ITEM, ... (an agent with a "
                              "section may do only what its allow lines say)",
                              a->name);
    for (size_t g = 0; g < a->ngrants; g++) {
        const agent_grant *gr = &a->grants[g];
        if (config_target_exists(c, gr->kind, gr->target, gr->line) != 0 ||
            (gr->kind == GRANT_HOOKS && config_hooks_exist(c, gr) != 0))
            return -1;
    }
    for (size_t l = 0; l < a->nlimits; l++) {
        const agent_limit *lim = &a->limits[l];
        if (config_target_exists(c, lim->kind, lim->target, lim->line) != 0)
            return -1;
        if (!config_limit_granted(a, lim))
            return config_fail_at(c, lim->line, "[agent.%s]: limit '%s': no allow line grants its target",
                                  a->name, lim->text);
        for (size_t u = 0; a->over_limit_approve && lim->target != NULL && u < c->cfg->nupstreams; u++)
            c->cfg->upstreams[u].limit_approvals |= strcmp(c->cfg->upstreams[u].name, lim->target) == 0;
        if (asprintf(&a->limits[l].ledger_id, "%s\n%s", a->name, lim->text) < 0) {
            a->limits[l].ledger_id = NULL;
            return config_fail_oom(c);
        }
    }
    if (a->over_limit_approve && a->nlimits == 0)
        return config_fail_at(c, config_line(c, CONFIG_AGENT, i, "over_limit"),
                              "over_limit: does nothing without limit = ... in [agent.%s]", a->name);
    return 0;
}

const config_section config_agent_section =
    CONFIG_NAMED_SECTION(CONFIG_AGENT, "agent.", "an agent", agent_cfg, config_agent_keys, NULL, config_agent_finish);

void config_agent_free(agent_cfg *a)
{
    for (size_t g = 0; g < a->ngrants; g++) {
        free(a->grants[g].target);
        config_free_strs(a->grants[g].items, a->grants[g].nitems);
    }
    free(a->grants);
    for (size_t l = 0; l < a->nlimits; l++)
        config_limit_clear(&a->limits[l]);
    free(a->limits);
    free(a->name);
    memset(a, 0, sizeof *a);
}
