/*
 * grants.h — what an agent may reach (docs/agents.md): the answers to "may
 * this agent send this request, call this tool, touch this scope, read this
 * inbox?", from its [agent.NAME] section's allow lines. An agent without a
 * section keeps full reach unless [server] agents = closed, in which case
 * the config refused its token at load. Pure functions of the config, so
 * the rules are tested without a socket (tests/unit/test_grants.c).
 */
#ifndef ONCE_SERVER_CORE_GRANTS_H
#define ONCE_SERVER_CORE_GRANTS_H

#include "server/config/config.h"
#include "server/core/problem.h"

/* The section of the agent a token speaks for (in the token's own
 * generation of the config: core/access_set.h), or NULL: an operator, no
 * token (auth off), or an agent without a section (full reach). */
const agent_cfg *grants_agent(const auth_token *who);

/* May agent a (NULL: yes) send method target (the canonical target after
 * the prefix, target_canon) to upstream up? Matched with case, on every
 * reading of the path (PATH_RULE_NARROW). */
int grants_upstream(const agent_cfg *a, const char *upstream, const char *method, const char *target);

/* May agent a reach MCP server mcp at all (some tool of it)? */
int grants_mcp_server(const agent_cfg *a, const char *mcp);

/* May agent a call tool on MCP server mcp? */
int grants_tool(const agent_cfg *a, const char *mcp, const char *tool);

/* May agent a read or settle actions in scope? The actions API's scope
 * patterns, and the scopes of the upstreams and MCP servers it is granted
 * (an upstream's scope is its name). */
int grants_scope(const agent_cfg *a, const char *scope);

/* May agent a reserve new actions in scope through the actions API? Only
 * the patterns of its actions grant: an upstream's scope is the proxy's to
 * write, under the upstream's own rules. */
int grants_actions_scope(const agent_cfg *a, const char *scope);

/* May agent a claim events of source (its inbox)? */
int grants_source(const agent_cfg *a, const char *source);

/* Whether any agent of cfg (a request's generation: access_set_cfg) has a
 * grant or a limit with a path rule on upstream name (a bare "*" is none),
 * so that targets a provider could read more than one way are refused
 * there too. */
int grants_has_path_rules(const once_config *cfg, const char *upstream);

/* The answer to a request no grant covers: 403 not_allowed, naming the
 * agent and what it asked for (what, e.g. "the upstream 'demo'"), never the
 * request's own path or arguments. Returns -1. */
int grants_refuse(problem *p, const agent_cfg *a, const char *what);

#endif
