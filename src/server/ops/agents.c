/*
 * agents.c — GET /v1/agents (operator; docs/agents.md): every agent and
 * operator the tokens name and every [agent.NAME] section, with its grants
 * and, for each limit, its use now and when room comes back. The use is a
 * store read per limit, so the answer is built on a worker.
 */
#include <stdio.h>
#include <string.h>

#include "server/core/grants.h"
#include "server/core/services.h"
#include "server/core/worker.h"
#include "server/front/req.h"
#include "server/ops/ops.h"

/* "TARGET: ITEM, ITEM" as the allow line said it (items canonical). */
static json_t *agents_grant(const agent_grant *g)
{
    static const char *const kinds[] = {[GRANT_ACTIONS] = "actions", [GRANT_HOOKS] = "hooks"};
    json_t *items = json_array();
    for (size_t i = 0; items != NULL && i < g->nitems; i++)
        json_array_append_new(items, json_string(g->items[i]));
    char target[ONCE_SCOPE_MAX + 8];
    snprintf(target, sizeof target, "%s%s", g->kind == GRANT_MCP ? "mcp." : "",
             g->target != NULL ? g->target : kinds[g->kind]);
    return json_pack("{s:s, s:o*}", "target", target, "items", items);
}

/* One limit with its use now; use_rc < 0 when the store could not say. */
static json_t *agents_limit(once_store *st, const agent_limit *l)
{
    double used = 0;
    int64_t retry = 0;
    int rc = once_limit_use(st, l->ledger_id, l->window_ms, &used, &retry);
    json_t *use = rc == ONCE_OK ? json_real(used) : json_null();
    json_t *after = rc == ONCE_OK ? json_integer((json_int_t)((retry + 999) / 1000)) : json_null();
    return json_pack("{s:s, s:o*, s:I, s:I, s:o*, s:b}", "limit", l->text, "used", use, "max", (json_int_t)l->max,
                     "window_s", (json_int_t)(l->window_ms / 1000), "retry_after_s", after, "sum", l->sum != NULL);
}

/* An agent's section: its grants and limits, and over_limit. */
static int agents_section(once_store *st, const agent_cfg *a, json_t *o)
{
    json_t *grants = json_array(), *limits = json_array();
    for (size_t g = 0; grants != NULL && g < a->ngrants; g++)
        json_array_append_new(grants, agents_grant(&a->grants[g]));
    for (size_t l = 0; limits != NULL && l < a->nlimits; l++)
        json_array_append_new(limits, agents_limit(st, &a->limits[l]));
    return json_object_set_new(o, "grants", grants) | json_object_set_new(o, "limits", limits) |
           json_object_set_new(o, "over_limit", json_string(a->over_limit_approve ? "approve" : "refuse"));
}

/* Whether an earlier token already named this agent. */
static int agents_seen(const once_config *cfg, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (strcmp(cfg->tokens[j].name, cfg->tokens[i].name) == 0)
            return 1;
    }
    return 0;
}

/* One entry: name, role, and what it may do. */
static json_t *agents_entry(once_store *st, const once_config *cfg, const char *name, token_role role)
{
    const agent_cfg *a = role == ROLE_AGENT ? config_agent(cfg, name) : NULL;
    const char *reach = role == ROLE_OPERATOR ? "operator" : a != NULL ? "granted" : "full";
    json_t *o = json_pack("{s:s, s:s, s:s}", "name", name, "role", role == ROLE_OPERATOR ? "operator" : "agent",
                          "reach", reach);
    if (o != NULL && a != NULL && agents_section(st, a, o) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void agents_job(void *arg)
{
    req *r = arg;
    const once_config *cfg = req_access_cfg(r);
    json_t *arr = json_array();
    int bad = arr == NULL;
    for (size_t i = 0; !bad && i < cfg->ntokens; i++) {
        if (!agents_seen(cfg, i))
            bad = json_array_append_new(arr, agents_entry(r->srv->store, cfg, cfg->tokens[i].name,
                                                          cfg->tokens[i].role)) != 0;
    }
    /* Sections no token names yet (a token to be added, or a JWT's agent). */
    for (size_t i = 0; !bad && i < cfg->nagents; i++) {
        int named = 0;
        for (size_t t = 0; t < cfg->ntokens; t++)
            named |= cfg->tokens[t].role == ROLE_AGENT && strcmp(cfg->tokens[t].name, cfg->agents[i].name) == 0;
        if (!named)
            bad = json_array_append_new(arr, agents_entry(r->srv->store, cfg, cfg->agents[i].name, ROLE_AGENT)) != 0;
    }
    if (bad) {
        json_decref(arr);
        req_out_of_memory(r);
        return;
    }
    req_json(r, 200, json_pack("{s:o, s:s}", "agents", arr, "mode", cfg->agents_closed ? "closed" : "open"));
}

static void agents_list(req *r)
{
    if (worker_run(r->srv->worker, agents_job, r) < 0)
        req_not_started(r, "the worker queue refused it");
}

const route agents_routes[] = {
    {.pattern = "/v1/agents", .name = "agents", .access = ACCESS_OPERATOR, .methods = {{"GET", agents_list}}},
    {.pattern = NULL},
};
