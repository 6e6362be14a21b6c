/*
 * actions.c — the actions API (/v1/actions…), for agents that call their
 * providers with their own SDKs: they reserve, act, and report the outcome
 * with the attempt's token. Same ledger, same rules as the proxy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/action_json.h"
#include "json/json_items.h"
#include "common/clock.h"
#include "common/key_template.h"
#include "server/actions/actions.h"
#include "server/jobs/approvals.h"
#include "server/core/grants.h"
#include "server/core/limits.h"
#include "server/core/services.h"
#include "server/core/waiters.h"
#include "server/front/req.h"
#include "server/core/worker.h"

/* over_limit = approve on the actions API: how long a person has to decide
 * (an upstream's or MCP server's approve_ttl otherwise). */
#define ACTIONS_OVER_LIMIT_TTL_MS (24LL * 3600 * 1000)

#define RESULT_HEADERS "[[\"Content-Type\",\"application/json\"]]"

typedef struct act {
    req *r;
    json_t *body;
    char scope[ONCE_SCOPE_MAX + 1];
    char key[ONCE_KEY_MAX + 1];
    char token[ONCE_TOKEN_LEN + 1];
    once_reserve_req rreq;
    once_reservation res;
    limits_draw draw;   /* what rreq draws from the agent's limits (rreq points into it) */
    char *request_text;
    char *result_text;
    once_response resp;
    const char *provider_id;
    const char *text;
    once_outcome outcome;
    once_state settled; /* the state a complete/release/unknown leads to */
    int approve;        /* approve (1) or deny (0) */
    int64_t lease_until; /* renew: the new deadline */
    int64_t wait_deadline; /* reserve's Prefer: wait (monotonic ms), 0 when none is left */
    once_list_req lreq; /* GET /v1/actions; its strings point into the two below */
    char lscope[ONCE_SCOPE_MAX + 2];
    char lagent[ONCE_AGENT_MAX + 2];
    char after[ONCE_CURSOR_MAX];
} act;

static void act_free(void *arg)
{
    act *a = arg;
    if (!a)
        return;
    json_decref(a->body);
    once_reservation_free(&a->res);
    free(a->request_text);
    free(a->result_text);
    free(a);
}

/* Maps a ledger error to its problem. */
static void act_fail(req *r, int rc, const char *detail)
{
    switch (rc) {
    case ONCE_ENOTFOUND: req_problem(r, 404, "not_found", "Not found", NULL, "%s", detail); break;
    case ONCE_ESTALE: req_problem(r, 409, "stale_token", "Stale token", NULL, "%s", detail); break;
    case ONCE_ESTATE: req_problem(r, 409, "invalid_transition", "Invalid transition", NULL, "%s", detail); break;
    case ONCE_EINVAL:
        if (strncmp(detail, "key:", 4) == 0)
            req_problem(r, 400, "invalid_key", "Invalid key", NULL, "%s", detail);
        else if (strncmp(detail, "scope:", 6) == 0)
            req_problem(r, 400, "invalid_scope", "Invalid scope", NULL, "%s", detail);
        else
            req_problem(r, 400, "invalid_request", "Invalid request", NULL, "%s", detail);
        break;
    default: req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "%s", detail); break;
    }
}


/* ---- JSON bodies ---------------------------------------------------------- */

static act *act_new(req *r)
{
    act *a = req_state_new(r, sizeof *a, act_free);
    if (a)
        a->r = r;
    return a;
}

/* The {scope} and {key} segments of the path, each percent-decoded on its
 * own (so %2F stays inside a key) and validated. 0, or answered and -1. */
static int path_name(req *r, char *scope, size_t scap, char *key, size_t kcap)
{
    if (req_path_pair(r, scope, scap, key, kcap, "a scope or key") < 0)
        return -1;
    int rc = once_scope_validate(scope);
    if (rc == ONCE_OK)
        rc = once_key_validate(key);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return -1;
    }
    return 0;
}

/* An agent with an [agent.NAME] section acts only in scopes its grants
 * name (docs/agents.md): reserve, only where an actions line allows it;
 * read and settle, there and in the scopes of the upstreams and MCP
 * servers it may use. 0, or answered (403 not_allowed) and -1. */
static int scope_granted(req *r, const char *scope, int reserve)
{
    const agent_cfg *ag = grants_agent(r->who);
    if (reserve ? grants_actions_scope(ag, scope) : grants_scope(ag, scope))
        return 0;
    problem p;
    char what[ONCE_SCOPE_MAX + 16];
    snprintf(what, sizeof what, "the scope '%s'", scope);
    grants_refuse(&p, ag, what);
    req_problem_from(r, &p);
    return -1;
}

/* The state of a route under /v1/actions/{scope}/{key}: the action the
 * path names, validated and noted for the log line. NULL when answered. */
static act *act_at(req *r)
{
    char scope[ONCE_SCOPE_MAX + 2], key[ONCE_KEY_MAX + 2];
    if (path_name(r, scope, sizeof scope, key, sizeof key) < 0)
        return NULL;
    act *a = act_new(r);
    if (!a)
        return NULL;
    /* Both were validated, so they fit. */
    memcpy(a->scope, scope, strlen(scope) + 1);
    memcpy(a->key, key, strlen(key) + 1);
    req_note_key(r, a->scope, a->key);
    if (scope_granted(r, a->scope, 0) < 0)
        return NULL;
    return a;
}

/* Parses the body as a JSON object into a->body; answers 400 if it is not. */
static int body_parse(act *a)
{
    req *r = a->r;
    json_error_t err;
    a->body = json_loadb((const char *)(r->body.data ? r->body.data : (const uint8_t *)""), r->body.len,
                         JSON_REJECT_DUPLICATES, &err);
    if (!a->body || !json_is_object(a->body)) {
        req_problem(r, 400, "invalid_json", "Invalid JSON", NULL, "the body must be a JSON object%s%s",
                    a->body ? "" : ": ", a->body ? "" : err.text);
        return -1;
    }
    return 0;
}

/* A string member: required or optional. Answers 400 when missing or not a
 * string; copies into out (cap bytes) when out is given. */
static int member_str(act *a, const char *name, int required, const char **value)
{
    json_t *v = json_object_get(a->body, name);
    *value = NULL;
    if (!v || json_is_null(v)) {
        if (required) {
            req_problem(a->r, 400, "invalid_request", "Invalid request", NULL, "'%s' is required", name);
            return -1;
        }
        return 0;
    }
    if (!json_is_string(v)) {
        req_problem(a->r, 400, "invalid_request", "Invalid request", NULL, "'%s' must be a string", name);
        return -1;
    }
    *value = json_string_value(v);
    return 0;
}

/* lease_ms, or the configured lease when it is absent or null. Answers 400
 * when it is not an integer (the ledger checks its range). */
static int member_lease(act *a, int64_t *lease)
{
    json_t *v = json_object_get(a->body, "lease_ms");
    *lease = a->r->srv->cfg->lease_ms;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        req_problem(a->r, 400, "invalid_request", "Invalid request", NULL, "'lease_ms' must be an integer");
        return -1;
    }
    *lease = json_integer_value(v);
    return 0;
}

/* scope, key (and token when fenced) into a, validated. */
static int member_name(act *a, int fenced)
{
    const char *scope, *key, *token = NULL;
    if (member_str(a, "scope", 1, &scope) < 0 || member_str(a, "key", 1, &key) < 0 ||
        (fenced && member_str(a, "token", 1, &token) < 0))
        return -1;
    int rc = once_scope_validate(scope);
    if (rc == ONCE_OK)
        rc = once_key_validate(key);
    if (rc < 0) {
        act_fail(a->r, rc, once_errdetail());
        return -1;
    }
    snprintf(a->scope, sizeof a->scope, "%s", scope);
    snprintf(a->key, sizeof a->key, "%s", key);
    if (token) {
        if (strlen(token) != ONCE_TOKEN_LEN) {
            req_problem(a->r, 400, "invalid_request", "Invalid request", NULL, "'token' is malformed");
            return -1;
        }
        snprintf(a->token, sizeof a->token, "%s", token);
    }
    req_note_key(a->r, a->scope, a->key);
    return 0;
}

/* The scopes of upstreams belong to the gateway (docs/security.md): an agent
 * that reserved or settled there could forge an outcome that proxied
 * retries replay, or squat a key the proxy derives. An upstream opts in
 * with actions_api = yes. 0, or answered (403) and -1. */
static int scope_open(act *a)
{
    const upstream_cfg *up = config_upstream(a->r->srv->cfg, a->scope);
    if (!up || up->actions_api)
        return 0;
    req_problem(a->r, 403, "scope_reserved", "Scope reserved", json_pack("{s:s}", "scope", a->scope),
                "scope '%s' belongs to the upstream of that name; the actions API may act there only when the "
                "upstream says actions_api = yes",
                a->scope);
    return -1;
}

/* ---- POST /v1/actions ------------------------------------------------------ */

static void reserve_answer(act *a)
{
    req *r = a->r;
    metrics *m = r->srv->metrics;
    once_reservation *res = &a->res;
    switch (res->status) {
    case ONCE_RESERVED:
        metrics_action(m, a->scope, MO_NEW);
        /* The key goes back too: with a key_template the agent did not
         * write it, and complete/release need it. */
        req_json(r, 201, json_pack("{s:s, s:s, s:s, s:I, s:o}", "status", "reserved", "key", a->key, "token",
                                   res->token, "attempt", (json_int_t)res->attempt, "lease_expires_at",
                                   json_new_time(res->lease_expires_at)));
        return;
    case ONCE_COMPLETED: {
        metrics_action(m, a->scope, res->fingerprint_mismatch ? MO_MISMATCH : MO_REPLAYED);
        once_action *row = &res->action;
        json_t *result = json_null();
        if (row->has_response && row->response.body) {
            json_t *parsed = json_loadb((const char *)row->response.body, row->response.body_len, JSON_DECODE_ANY,
                                        NULL);
            result = parsed ? parsed : json_stringn((const char *)row->response.body, row->response.body_len);
        }
        req_json(r, 200, json_pack("{s:s, s:o, s:s?, s:b, s:b}", "status", "completed", "result",
                                   result ? result : json_null(), "provider_id", row->provider_id, "replayed", 1,
                                   "fingerprint_mismatch", res->fingerprint_mismatch));
        return;
    }
    case ONCE_IN_FLIGHT:
        metrics_action(m, a->scope, MO_IN_FLIGHT);
        req_set_header(r, "Retry-After", "1");
        req_problem(r, 409, "key_in_flight", "Key in flight",
                    json_pack("{s:s, s:o}", "state", "pending", "lease_expires_at", json_new_time(res->lease_expires_at)),
                    "another attempt holds this key");
        return;
    case ONCE_AWAITING_APPROVAL:
        /* The row decides, not this request: an upstream's approval rule
         * stored it, and nothing may pass it by. */
        metrics_action(m, a->scope, MO_AWAITING);
        req_json(r, 202, json_pack("{s:s, s:s, s:s, s:b}", "state", "awaiting_approval", "scope", a->scope, "key",
                                   a->key, "approved", res->action.approved_at > 0));
        return;
    case ONCE_OVER_LIMIT: {
        problem p;
        char retry[24];
        limits_refusal(&a->draw, res, &p, retry);
        if (retry[0])
            req_set_header(r, "Retry-After", retry);
        req_problem_from(r, &p);
        return;
    }
    case ONCE_DENIED:
        metrics_action(m, a->scope, MO_DENIED);
        req_problem(r, 403, "denied", "Denied",
                    json_pack("{s:s, s:s}", "state", "denied", "note", res->action.note ? res->action.note : ""),
                    "this action was not approved; it is not sent");
        return;
    default: {
        int held = res->status == ONCE_HELD;
        metrics_action(m, a->scope, held ? MO_HELD : MO_UNKNOWN);
        req_problem(r, 409, "outcome_unknown", "Outcome unknown",
                    json_pack("{s:s, s:s}", "state", held ? "held" : "unknown", "reason",
                              res->action.error ? res->action.error : ""),
                    "an earlier attempt may have performed this action; resolve it before trying again");
    }
    }
}

static void reserve_start(act *a);

/* Prefer: wait — on the waiter thread: the other attempt settled, or the
 * wait ran out. One more reservation, answered as it comes (a new one for
 * this caller when the key was released; still in flight: the 409). */
static void reserve_again(void *arg)
{
    act *a = arg;
    a->wait_deadline = 0;
    reserve_start(a);
}

/* The row the reservation found: parked when the caller asked to wait and
 * it may still change, else answered from. A decision is waited for, as on
 * the proxy, only by a caller whose fingerprint is not another request's. */
static void reserve_found(act *a)
{
    const char *mine = a->rreq.fingerprint, *stored = a->res.action.fingerprint;
    int for_decision = !mine || !stored || strcmp(mine, stored) == 0;
    if (waiters_park(a->r->srv->waiters, a->scope, a->key, a->res.status, for_decision, a, a->wait_deadline,
                     reserve_again, reserve_again))
        return;
    reserve_answer(a);
}

static void on_reserved(void *ctx, int rc, const char *detail)
{
    act *a = ctx;
    if (rc < 0)
        act_fail(a->r, rc, detail);
    else
        reserve_found(a);
}

/* HTTP thread, or the waiter thread for a Prefer: wait retry. */
static void reserve_start(act *a)
{
    once_reservation_free(&a->res);
    int rc = once_reserve_async(a->r->srv->store, &a->rreq, &a->res, on_reserved, a);
    if (rc == 1)
        reserve_found(a);
    else if (rc < 0)
        act_fail(a->r, rc, once_errdetail());
}

/* {"key_template": T, "request": {...}} instead of "key": the same rules as
 * an upstream's key template, over the request object (json: fields only,
 * as there are no headers, query or path here). 0, or answered and -1. */
static int key_from_template(act *a)
{
    req *r = a->r;
    const char *scope, *text;
    if (member_str(a, "scope", 1, &scope) < 0 || member_str(a, "key_template", 1, &text) < 0)
        return -1;
    int rc = once_scope_validate(scope);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return -1;
    }
    snprintf(a->scope, sizeof a->scope, "%s", scope);
    key_template *t = NULL;
    char err[256] = "";
    if (key_template_parse(text, &t, err, sizeof err) < 0) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "key_template: %s", err);
        return -1;
    }
    if (key_template_json_only(t, err, sizeof err) < 0) {
        key_template_free(t);
        req_problem(r, 400, "invalid_request", "Invalid request", NULL,
                    "key_template: only {json:...} fields exist in the actions API, not %s", err);
        return -1;
    }
    key_source src = {.json = json_object_get(a->body, "request")};
    rc = key_template_eval(t, &src, a->key, sizeof a->key, err, sizeof err);
    key_template_free(t);
    if (rc == -1) {
        req_problem(r, 400, "key_field_missing", "Key field missing", json_pack("{s:s}", "field", err),
                    "the key template needs %s, which 'request' does not have", err);
        return -1;
    }
    if (rc < 0 || once_key_validate(a->key) < 0) {
        req_problem(r, 400, "invalid_key", "Invalid key", NULL, "the key template gave no usable key: %s",
                    err[0] ? err : once_errdetail());
        return -1;
    }
    req_note_key(r, a->scope, a->key);
    return 0;
}

static void actions_reserve(req *r)
{
    act *a = act_new(r);
    if (!a || body_parse(a) < 0)
        return;
    int templated = json_object_get(a->body, "key_template") && !json_object_get(a->body, "key");
    if ((templated ? key_from_template(a) < 0 : member_name(a, 0) < 0) || scope_granted(r, a->scope, 1) < 0 ||
        scope_open(a) < 0)
        return;
    const char *fp;
    if (member_str(a, "fingerprint", 0, &fp) < 0)
        return;
    int64_t lease;
    if (member_lease(a, &lease) < 0)
        return;
    json_t *request = json_object_get(a->body, "request");
    if (request && !json_is_null(request)) {
        a->request_text = json_dumps(request, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!a->request_text) {
            req_out_of_memory(r);
            return;
        }
    }
    a->rreq = (once_reserve_req){.scope = a->scope,
                                 .key = a->key,
                                 .fingerprint = fp,
                                 .lease_ms = lease,
                                 .retention_ms = r->srv->cfg->retention_ms,
                                 .request = (const uint8_t *)a->request_text,
                                 .request_len = a->request_text ? strlen(a->request_text) : 0};
    limits_req lq = {.kind = GRANT_ACTIONS, .what = a->scope, .body = a->body};
    problem p;
    if (limits_apply(r->who, &lq, ACTIONS_OVER_LIMIT_TTL_MS, &a->draw, &a->rreq, &p) < 0) {
        req_problem_from(r, &p);
        return;
    }
    int64_t wait = waiters_prefer_wait(req_header(r, "Prefer"));
    a->wait_deadline = wait ? clock_mono_ms() + wait : 0;
    reserve_start(a);
}

/* ---- complete / release / unknown ------------------------------------------ */

/* On the worker: the action as it is now. After a settle (so the agent
 * needs no second round trip; the store writer that ran on_settled must not
 * read), for GET /v1/actions/{scope}/{key}, and after a human's decision
 * (resolve, approve, deny). */
static void record_job(void *arg)
{
    act *a = arg;
    req *r = a->r;
    once_action rec;
    int rc = once_get(r->srv->store, a->scope, a->key, &rec);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return;
    }
    json_t *o = NULL;
    rc = action_json_from(&rec, &o);
    once_action_free(&rec);
    if (rc < 0) {
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot render the action");
        return;
    }
    req_json(r, 200, o);
}

static void on_settled(void *ctx, int rc, const char *detail)
{
    act *a = ctx;
    if (rc < 0) {
        act_fail(a->r, rc, detail);
        return;
    }
    if (worker_run(a->r->srv->worker, record_job, a) < 0)
        req_json(a->r, 200, json_pack("{s:s, s:s, s:s}", "scope", a->scope, "key", a->key, "state",
                                      once_state_name(a->settled)));
}

static void actions_settle(req *r, const char *verb)
{
    act *a = act_new(r);
    if (!a || body_parse(a) < 0 || member_name(a, 1) < 0 || scope_granted(r, a->scope, 0) < 0 || scope_open(a) < 0)
        return;
    once_store *st = r->srv->store;
    int rc;
    if (strcmp(verb, "complete") == 0) {
        if (member_str(a, "provider_id", 0, &a->provider_id) < 0)
            return;
        json_t *result = json_object_get(a->body, "result");
        a->result_text = json_dumps(result ? result : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!a->result_text) {
            req_out_of_memory(r);
            return;
        }
        a->resp = (once_response){.status = 200,
                                  .headers = RESULT_HEADERS,
                                  .headers_len = sizeof RESULT_HEADERS - 1,
                                  .body = (uint8_t *)a->result_text,
                                  .body_len = strlen(a->result_text)};
        a->settled = ONCE_STATE_COMPLETED;
        rc = once_complete_async(st, a->scope, a->key, a->token, &a->resp, a->provider_id, on_settled, a);
    } else {
        if (member_str(a, "error", 0, &a->text) < 0)
            return;
        int release = strcmp(verb, "release") == 0;
        a->settled = release ? ONCE_STATE_RELEASED : ONCE_STATE_UNKNOWN;
        rc = release ? once_release_async(st, a->scope, a->key, a->token, a->text, on_settled, a)
                     : once_mark_unknown_async(st, a->scope, a->key, a->token, a->text, on_settled, a);
    }
    if (rc < 0)
        act_fail(r, rc, once_errdetail());
}

/* ---- POST /v1/actions/renew -------------------------------------------------- */

static void on_renewed(void *ctx, int rc, const char *detail)
{
    act *a = ctx;
    if (rc < 0)
        act_fail(a->r, rc, detail);
    else
        req_json(a->r, 200, json_pack("{s:s, s:s, s:o}", "scope", a->scope, "key", a->key, "lease_expires_at",
                                      json_new_time(a->lease_until)));
}

/* An agent's call is still running: its lease moves on (docs/guarantees.md §4). */
static void actions_renew(req *r)
{
    act *a = act_new(r);
    if (!a || body_parse(a) < 0 || member_name(a, 1) < 0 || scope_granted(r, a->scope, 0) < 0 || scope_open(a) < 0)
        return;
    int64_t lease;
    if (member_lease(a, &lease) < 0)
        return;
    int rc = once_renew_async(r->srv->store, a->scope, a->key, a->token, lease, &a->lease_until, on_renewed, a);
    if (rc < 0)
        act_fail(r, rc, once_errdetail());
}

/* ---- reads ------------------------------------------------------------------ */

/* GET /v1/actions/{scope}/{key}: read and rendered on the worker. */
static void actions_get(req *r)
{
    act *a = act_at(r);
    if (!a)
        return;
    if (worker_run(r->srv->worker, record_job, a) < 0)
        req_not_started(r, "out of memory");
}

/* An action of a page, as GET /v1/actions/{scope}/{key} shows it. */
static int action_item(const void *ctx, size_t i, json_t **out)
{
    const once_action_list *l = ctx;
    return action_json_from(&l->items[i], out);
}

/* On the worker: one page, bounded in rows and bytes (ONCE_PAGE_BYTES). */
static void list_job(void *arg)
{
    act *a = arg;
    req *r = a->r;
    once_action_list l;
    int rc = once_list(r->srv->store, &a->lreq, &l);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return;
    }
    req_json_page(r, json_items(l.count, action_item, &l), l.next);
    once_action_list_free(&l);
}

/* GET /v1/actions?status=&scope=&agent=&limit=&after= */
static void actions_list(req *r)
{
    act *a = act_new(r);
    if (!a)
        return;
    const char *query = r->match.query;
    char status[32];
    once_list_req lr = {0};
    int hs, hsc, hag;
    if ((hs = req_query_param(r, query, "status", status, sizeof status)) < 0 ||
        (hsc = req_query_param(r, query, "scope", a->lscope, sizeof a->lscope)) < 0 ||
        (hag = req_query_param(r, query, "agent", a->lagent, sizeof a->lagent)) < 0 ||
        req_query_page(r, query, &lr.limit, a->after, sizeof a->after, &lr.cursor) < 0)
        return;
    if (hs && once_state_parse(status, &lr.state) < 0) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "%s", once_errdetail());
        return;
    }
    const agent_cfg *ag = grants_agent(r->who);
    if (!hsc && ag) {
        problem p;
        grants_refuse(&p, ag, "every scope at once (list one: ?scope=NAME)");
        req_problem_from(r, &p);
        return;
    }
    if (hsc && scope_granted(r, a->lscope, 0) < 0)
        return;
    if (hsc)
        lr.scope = a->lscope;
    if (hag && once_scope_validate(a->lagent) < 0) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL,
                    "agent: a name is 1-64 characters of A-Z a-z 0-9 . _ -");
        return;
    }
    if (hag)
        lr.agent = a->lagent;
    a->lreq = lr;
    if (worker_run(r->srv->worker, list_job, a) < 0)
        req_not_started(r, "out of memory");
}

/* ---- resolve (on the worker: it commits synchronously) ---------------------- */

static void resolve_job(void *arg)
{
    act *a = arg;
    req *r = a->r;
    int rc = once_resolve(r->srv->store, a->scope, a->key, a->outcome, a->provider_id, a->text);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return;
    }
    record_job(a);
}

/* POST /v1/actions/{scope}/{key}/resolve {"outcome", "provider_id"?,
 * "note"?}: a human settles an unknown or held action. */
static void actions_resolve(req *r)
{
    act *a = act_at(r);
    if (!a || body_parse(a) < 0)
        return;
    const char *outcome;
    if (member_str(a, "outcome", 1, &outcome) < 0 || member_str(a, "provider_id", 0, &a->provider_id) < 0 ||
        member_str(a, "note", 0, &a->text) < 0)
        return;
    if (strcmp(outcome, "completed") == 0) {
        a->outcome = ONCE_OUTCOME_COMPLETED;
    } else if (strcmp(outcome, "released") == 0) {
        a->outcome = ONCE_OUTCOME_RELEASED;
    } else {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "'outcome' must be completed or released");
        return;
    }
    if (worker_run(r->srv->worker, resolve_job, a) < 0)
        req_not_started(r, "out of memory");
}

/* ---- approve / deny (on the worker: they commit synchronously) --------------- */

/* Whose decision it is, for the trail: the operator token's name, or
 * "operator" when no tokens are configured (loopback only). */
static const char *decider(const req *r)
{
    return r->who && r->who->name ? r->who->name : "operator";
}

static void decide_job(void *arg)
{
    act *a = arg;
    req *r = a->r;
    server *srv = r->srv;
    int approve = a->approve;
    int rc = approve ? once_approve(srv->store, a->scope, a->key, decider(r), a->text)
                     : once_deny(srv->store, a->scope, a->key, decider(r), a->text);
    if (rc < 0) {
        act_fail(r, rc, once_errdetail());
        return;
    }
    if (approve)
        approvals_kick(srv->approvals); /* sent within this round, not the next */
    else
        metrics_approval(srv->metrics, a->scope, MA_DENIED, 1);
    record_job(a);
}

/* POST /v1/actions/{scope}/{key}/approve|deny {"note"?}: an empty body is
 * no note. */
static void actions_decide(req *r, int approve)
{
    act *a = act_at(r);
    if (!a)
        return;
    if (r->body.len > 0 && (body_parse(a) < 0 || member_str(a, "note", 0, &a->text) < 0))
        return;
    a->approve = approve;
    if (worker_run(r->srv->worker, decide_job, a) < 0)
        req_not_started(r, "out of memory");
}

static void actions_approve_route(req *r)
{
    actions_decide(r, 1);
}

static void actions_deny_route(req *r)
{
    actions_decide(r, 0);
}

/* ---- routes ------------------------------------------------------------------ */

static void actions_complete(req *r)
{
    actions_settle(r, "complete");
}

static void actions_release(req *r)
{
    actions_settle(r, "release");
}

static void actions_unknown(req *r)
{
    actions_settle(r, "unknown");
}

const route actions_routes[] = {
    {.pattern = "/v1/actions", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"GET", actions_list}, {"POST", actions_reserve}}},
    {.pattern = "/v1/actions/complete", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"POST", actions_complete}}},
    {.pattern = "/v1/actions/release", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"POST", actions_release}}},
    {.pattern = "/v1/actions/unknown", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"POST", actions_unknown}}},
    {.pattern = "/v1/actions/renew", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"POST", actions_renew}}},
    {.pattern = "/v1/actions/{}/{}", .name = "actions", .access = ACCESS_AGENT,
     .admit = req_admit_named_path, .methods = {{"GET", actions_get}}},
    {.pattern = "/v1/actions/{}/{}/resolve", .name = "actions", .access = ACCESS_OPERATOR,
     .admit = req_admit_named_path, .methods = {{"POST", actions_resolve}}},
    {.pattern = "/v1/actions/{}/{}/approve", .name = "actions", .access = ACCESS_OPERATOR,
     .admit = req_admit_named_path, .methods = {{"POST", actions_approve_route}}},
    {.pattern = "/v1/actions/{}/{}/deny", .name = "actions", .access = ACCESS_OPERATOR,
     .admit = req_admit_named_path, .methods = {{"POST", actions_deny_route}}},
    {.pattern = NULL},
};
