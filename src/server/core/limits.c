/*
 * limits.c — the charges a new request draws from its agent's limits (see
 * limits.h).
 */
#include "server/core/limits.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json_pointer.h"
#include "server/core/grants.h"
#include "server/core/path_rule.h"

/* Whether limit l is about requests like q. */
static int limits_match(const agent_limit *l, const limits_req *q)
{
    if (l->kind != q->kind || (l->target != NULL && (q->target == NULL || strcmp(l->target, q->target) != 0)))
        return 0;
    if (l->rule == NULL || strcmp(l->rule, "*") == 0)
        return 1;
    if (l->kind == GRANT_UPSTREAM) {
        char *rule = l->rule;
        return path_rule_any(&rule, 1, q->method, q->what, PATH_RULE_WIDE);
    }
    return path_rule_glob(l->rule, q->what, strlen(q->what), 1);
}

int limits_need_body(const agent_cfg *a, grant_kind kind, const char *target)
{
    for (size_t i = 0; a != NULL && i < a->nlimits; i++) {
        const agent_limit *l = &a->limits[i];
        if (l->sum != NULL && l->kind == kind && (l->target == NULL || strcmp(l->target, target) == 0))
            return 1;
    }
    return 0;
}

/* The amount limit l draws for q: 1, or the summed member. -1 (p set)
 * when the member is not a usable amount. */
static int limits_amount(const agent_limit *l, const limits_req *q, double *amount, problem *p)
{
    if (l->sum == NULL) {
        *amount = 1;
        return 0;
    }
    json_t *v = q->body != NULL ? json_pointer_get(q->body, l->sum) : NULL;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(d) || d < 0)
        return problem_set(p, 400, "invalid_request", "Invalid request",
                           "the limit '%s' sums %s, which this request does not hold as a number of 0 or more; "
                           "nothing was stored or sent",
                           l->text, l->sum);
    *amount = d;
    return 0;
}

int limits_charges(const agent_cfg *a, const limits_req *q, limits_draw *out, problem *p)
{
    out->n = 0;
    for (size_t i = 0; a != NULL && i < a->nlimits; i++) {
        const agent_limit *l = &a->limits[i];
        double amount = 0;
        if (!limits_match(l, q))
            continue;
        if (limits_amount(l, q, &amount, p) < 0)
            return -1;
        if (amount == 0)
            continue;
        /* The loader keeps an agent's limits within what one reservation carries. */
        if (out->n == ONCE_LIMIT_CHARGES_MAX)
            return problem_set(p, 500, "internal", "Internal error", "more limits apply than a reservation carries");
        out->charges[out->n] = (once_limit_charge){
            .limit = l->ledger_id, .window_ms = l->window_ms, .max = (double)l->max, .amount = amount};
        out->limits[out->n++] = l;
    }
    return 0;
}

int limits_apply(const auth_token *who, const limits_req *q, int64_t approve_ttl_ms,
                 limits_draw *draw, once_reserve_req *rreq, problem *p)
{
    const agent_cfg *a = grants_agent(who);
    rreq->agent = who != NULL ? who->name : NULL;
    if (limits_charges(a, q, draw, p) < 0)
        return -1;
    rreq->charges = draw->n > 0 ? draw->charges : NULL;
    rreq->ncharges = draw->n;
    /* Only an upstream's or MCP server's action can wait for a person: the
     * gateway sends it once approved. The actions API's caller does its own
     * sending, so its limits always refuse. */
    rreq->over_limit_approve = draw->n > 0 && a->over_limit_approve && q->kind != GRANT_ACTIONS;
    rreq->over_limit_ttl_ms = rreq->over_limit_approve ? approve_ttl_ms : 0;
    return 0;
}

int limits_refusal(const limits_draw *draw, const once_reservation *res, problem *p, char retry_after[24])
{
    const agent_limit *l = res->over_limit < draw->n ? draw->limits[res->over_limit] : NULL;
    const char *text = l != NULL ? l->text : "?";
    retry_after[0] = '\0';
    if (res->retry_after_ms < 0)
        return problem_set(p, 429, "limit_exceeded", "Limit exceeded",
                           "this request alone is more than the limit '%s'; nothing was stored or sent", text);
    long long s = (res->retry_after_ms + 999) / 1000;
    snprintf(retry_after, 24, "%lld", s > 0 ? s : 1);
    return problem_set(p, 429, "limit_exceeded", "Limit exceeded",
                       "the limit '%s' is used up; room comes back in %s s; nothing was stored or sent", text,
                       retry_after);
}
