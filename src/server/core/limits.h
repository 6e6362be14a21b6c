/*
 * limits.h — which of an agent's limits a new request draws from, and how
 * much (docs/agents.md): the charges handed to once_reserve, which counts
 * them in the same transaction as the reservation. A limit's rule is
 * matched the wide way (without case, either reading of the path): a false
 * match counts more, never less. Pure functions of the config and the
 * request, tested without a socket (tests/unit/test_grants.c).
 */
#ifndef ONCE_SERVER_CORE_LIMITS_H
#define ONCE_SERVER_CORE_LIMITS_H

#include <jansson.h>

#include "once/once.h"
#include "server/config/config.h"
#include "server/core/problem.h"

/* The charges of one request, with the limit each stands for. */
typedef struct limits_draw {
    once_limit_charge charges[ONCE_LIMIT_CHARGES_MAX];
    const agent_limit *limits[ONCE_LIMIT_CHARGES_MAX];
    size_t n;
} limits_draw;

/* What a request is, for matching limits: kind and target (an upstream or
 * MCP server's name; NULL for actions), and what the rule is matched
 * against: method and canonical target (upstream), the tool (MCP), the
 * scope (actions). */
typedef struct limits_req {
    grant_kind kind;
    const char *target;
    const char *method;
    const char *what;
    json_t *body; /* the JSON a sum() reads (the body; an MCP call's params); NULL when none */
} limits_req;

/* Fills *out with the charges agent a's limits draw for q (none for a NULL
 * agent). A sum() whose member is missing, not a number, negative or not
 * finite: 400 invalid_request naming the member, -1; a zero draws nothing.
 * Otherwise 0. */
int limits_charges(const agent_cfg *a, const limits_req *q, limits_draw *out, problem *p);

/* Whether any of agent a's limits reads the body (a sum()) of requests of
 * this kind and target: the body is then parsed as JSON. */
int limits_need_body(const agent_cfg *a, grant_kind kind, const char *target);

/* Sets on rreq who asks (the token's name; NULL without one) and what the
 * request draws from the agent's limits (into draw, which must live as
 * long as rreq), with over_limit = approve as a wait for a person of
 * approve_ttl_ms. 0, or -1 with p (limits_charges). */
int limits_apply(const auth_token *who, const limits_req *q, int64_t approve_ttl_ms,
                 limits_draw *draw, once_reserve_req *rreq, problem *p);

/* The answer to ONCE_OVER_LIMIT: 429 limit_exceeded naming the limit as
 * written, and in retry_after the seconds until room comes back ("" when
 * it never will: the request alone is more than the limit). Returns -1. */
int limits_refusal(const limits_draw *draw, const once_reservation *res, problem *p, char retry_after[24]);

#endif
