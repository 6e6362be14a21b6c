/*
 * grants.c — what an agent may reach (see grants.h).
 */
#include "server/core/grants.h"

#include <string.h>

#include "server/core/path_rule.h"

const agent_cfg *grants_agent(const auth_token *who)
{
    return who != NULL && who->role == ROLE_AGENT ? who->agent : NULL;
}

/* Whether one of items[0..n) is "*" or, as a pattern, matches name. */
static int grants_names(char *const *items, size_t n, const char *name, int nocase)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(items[i], "*") == 0 || path_rule_glob(items[i], name, strlen(name), nocase))
            return 1;
    }
    return 0;
}

int grants_upstream(const agent_cfg *a, const char *upstream, const char *method, const char *target)
{
    if (a == NULL)
        return 1;
    for (size_t g = 0; g < a->ngrants; g++) {
        const agent_grant *gr = &a->grants[g];
        if (gr->kind != GRANT_UPSTREAM || strcmp(gr->target, upstream) != 0)
            continue;
        for (size_t i = 0; i < gr->nitems; i++) {
            if (strcmp(gr->items[i], "*") == 0)
                return 1;
        }
        if (path_rule_any(gr->items, gr->nitems, method, target, PATH_RULE_NARROW))
            return 1;
    }
    return 0;
}

/* Whether a grant of kind on target (NULL for actions and hooks) has an
 * item matching name. Tool names are matched exactly (with case): MCP
 * servers name tools with case. */
static int grants_find(const agent_cfg *a, grant_kind kind, const char *target, const char *name)
{
    for (size_t g = 0; g < a->ngrants; g++) {
        const agent_grant *gr = &a->grants[g];
        if (gr->kind == kind && (target == NULL || strcmp(gr->target, target) == 0) &&
            grants_names(gr->items, gr->nitems, name, 0))
            return 1;
    }
    return 0;
}

int grants_mcp_server(const agent_cfg *a, const char *mcp)
{
    for (size_t g = 0; a != NULL && g < a->ngrants; g++) {
        if (a->grants[g].kind == GRANT_MCP && strcmp(a->grants[g].target, mcp) == 0)
            return 1;
    }
    return a == NULL;
}

int grants_tool(const agent_cfg *a, const char *mcp, const char *tool)
{
    return a == NULL || grants_find(a, GRANT_MCP, mcp, tool);
}

int grants_actions_scope(const agent_cfg *a, const char *scope)
{
    return a == NULL || grants_find(a, GRANT_ACTIONS, NULL, scope);
}

int grants_scope(const agent_cfg *a, const char *scope)
{
    if (a == NULL || grants_find(a, GRANT_ACTIONS, NULL, scope))
        return 1;
    for (size_t g = 0; g < a->ngrants; g++) {
        const agent_grant *gr = &a->grants[g];
        if ((gr->kind == GRANT_UPSTREAM || gr->kind == GRANT_MCP) && strcmp(gr->target, scope) == 0)
            return 1;
    }
    return 0;
}

int grants_source(const agent_cfg *a, const char *source)
{
    return a == NULL || grants_find(a, GRANT_HOOKS, NULL, source);
}

int grants_has_path_rules(const once_config *cfg, const char *upstream)
{
    for (size_t i = 0; i < cfg->nagents; i++) {
        const agent_cfg *a = &cfg->agents[i];
        for (size_t g = 0; g < a->ngrants; g++) {
            const agent_grant *gr = &a->grants[g];
            for (size_t j = 0; gr->kind == GRANT_UPSTREAM && j < gr->nitems; j++) {
                if (strcmp(gr->items[j], "*") != 0 && strcmp(gr->target, upstream) == 0)
                    return 1;
            }
        }
        for (size_t l = 0; l < a->nlimits; l++) {
            const agent_limit *lim = &a->limits[l];
            if (lim->kind == GRANT_UPSTREAM && lim->rule != NULL && strcmp(lim->rule, "*") != 0 &&
                strcmp(lim->target, upstream) == 0)
                return 1;
        }
    }
    return 0;
}

int grants_refuse(problem *p, const agent_cfg *a, const char *what)
{
    return problem_set(p, 403, "not_allowed", "Not allowed",
                       "agent '%s' has no grant for %s ([agent.%s] allow = ...); nothing was stored or sent", a->name,
                       what, a->name);
}
