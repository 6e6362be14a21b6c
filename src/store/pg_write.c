/*
 * pg_write.c — the write path of the PostgreSQL store: every statement,
 * each operation sent into a pipeline and its answer decoded, batches
 * (BEGIN, the operations, COMMIT, sync in one round trip) and the writer
 * threads that run them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/fault.h"
#include "store/limits.h"
#include "store/pg_int.h"

const stmt_def pg_stmts[] = {
    {"reserve", "SELECT * FROM once_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::json, $13, $14)"},
    {"complete", "SELECT once_complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
    {"settle", "SELECT once_settle($1, $2, $3, $4, $5, $6)"},
    {"resolve", "SELECT once_resolve($1, $2, $3, $4, $5, $6)"},
    {"renew", "SELECT once_renew($1, $2, $3, $4, $5)"},
    {"hold", "SELECT once_hold($1, $2, $3, $4)"},
    {"expire", "UPDATE actions SET state = 'unknown', error = '" ONCE_REASON_LEASE_EXPIRED "', updated_at = $1 "
               "WHERE state = 'pending' AND lease_expires_at <= $1"},
    {"hold_all", "UPDATE actions SET state = 'held', updated_at = $1, error = CASE WHEN $2::text IS NULL "
                 "THEN error WHEN error IS NULL THEN $2 ELSE $2 || ' (after: ' || error || ')' END "
                 "WHERE state = 'unknown' AND ($3::text IS NULL OR scope = $3) "
                 "AND ($4::text IS NULL OR position(',' || scope || ',' in ',' || $4 || ',') = 0)"},
    {"sweep", "DELETE FROM actions WHERE id IN (SELECT id FROM actions WHERE state IN "
              "('completed','released','denied') AND expires_at > 0 AND expires_at <= $1 "
              "LIMIT " STORE_SWEEP_ROWS_SQL ")"},
    {"get", "SELECT " A_COLS " FROM actions WHERE scope = $1 AND key = $2"},
    /* A page stops where its bodies pass $5 bytes (one row at least), so
     * a page of 1000 large rows never sits whole in a libpq result: the
     * last column, the rows before the cut, tells whether it was cut. */
    {"list", "SELECT " A_COLS ", w.page_total FROM (SELECT p.*, row_number() OVER (ORDER BY p.id) AS rn, "
             "count(*) OVER () AS page_total, sum(coalesce(octet_length(p.request), 0) + "
             "coalesce(octet_length(p.resp_body), 0) + coalesce(octet_length(p.resp_headers), 0)) "
             "OVER (ORDER BY p.id) AS run FROM (SELECT * FROM actions WHERE id > $1 AND ($2::text IS NULL OR "
             "state = $2) AND ($3::text IS NULL OR scope = $3) AND ($4::text IS NULL OR agent = $4) "
             "ORDER BY id LIMIT $5) p) w WHERE w.rn = 1 OR w.run <= $6 ORDER BY w.id"},
    {"ping", "SELECT 1"},
    /* SKIP LOCKED: lookups on N nodes take disjoint actions. */
    {"rc_claim", "UPDATE actions a SET lookup_next_at = $2 + $3 FROM (SELECT id FROM actions WHERE state = "
                 "'unknown' AND scope = $1 AND lookup_next_at <= $2 AND updated_at <= $2 - $5 ORDER BY id LIMIT $4 "
                 "FOR UPDATE SKIP LOCKED) d "
                 "WHERE a.id = d.id RETURNING a.id, a.scope, a.key, a.state, a.attempt, a.token, a.created_at, "
                 "a.updated_at, a.lease_expires_at, a.expires_at, a.retention_ms, a.fingerprint, a.request, "
                 "a.has_response, a.resp_status, a.resp_headers, a.resp_body, a.provider_id, a.error, a.note, "
                 "a.lookups, a.lookup_next_at, a.trail, a.resp_not_stored, a.approved_at, a.decided_by, "
                 "a.decision_note, a.agent, a.charges, a.waits_for_limit"},
    {"rc_settle", "SELECT once_reconcile($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
    {"rc_failed", "SELECT once_reconcile_failed($1, $2, $3, $4, $5, $6)"},
    /* No conflict target: a duplicate id or a duplicate digest. */
    {"ev_insert", "INSERT INTO events (source, event_id, state, received_at, updated_at, next_at, retention_ms, "
                  "content_type, headers, body, digest) VALUES ($1, $2, 'pending', $3, $3, $3, $4, $5, $6, $7, $8) "
                  "ON CONFLICT DO NOTHING"},
    /* SKIP LOCKED: claimers on N nodes take disjoint events. */
    {"ev_claim", "UPDATE events e SET attempt = e.attempt + 1, receipt = e.id || '.' || $4, "
                 "claim_until = $2 + $3, updated_at = $2, claimed_by = $7 FROM (SELECT id FROM (SELECT l.id, "
                 "row_number() OVER (ORDER BY l.next_at, l.id) AS rn, sum(coalesce(octet_length(l.body), 0) + "
                 "coalesce(octet_length(l.headers), 0)) OVER (ORDER BY l.next_at, l.id) AS run FROM (SELECT id, "
                 "next_at, body, headers FROM events WHERE source = $1 AND state = 'pending' AND next_at <= $2 "
                 "AND claim_until <= $2 ORDER BY next_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) l) w "
                 "WHERE w.rn = 1 OR w.run <= $6) d WHERE e.id = d.id RETURNING e.id, e.source, e.event_id, "
                 "e.state, e.attempt, e.received_at, e.updated_at, e.next_at, e.claim_until, e.receipt, "
                 "e.delivered_at, e.expires_at, e.retention_ms, e.content_type, e.headers, e.body, e.error, "
                 "e.claimed_by"},
    {"ev_settle", "SELECT once_event_settle($1, $2, $3, $4, $5, $6, $7, $8)"},
    {"ev_exists", "SELECT 1 FROM events WHERE source = $1 AND (event_id = $2 OR digest = $3)"},
    {"ev_get", "SELECT " E_COLS " FROM events WHERE source = $1 AND event_id = $2"},
    {"ev_list", "SELECT " E_COLS ", w.page_total FROM (SELECT p.*, row_number() OVER (ORDER BY p.id) AS rn, "
                "count(*) OVER () AS page_total, sum(coalesce(octet_length(p.body), 0) + "
                "coalesce(octet_length(p.headers), 0)) OVER (ORDER BY p.id) AS run FROM (SELECT * FROM events "
                "WHERE id > $1 AND ($2::text IS NULL OR source = $2) AND ($3::text IS NULL OR state = $3) "
                "ORDER BY id LIMIT $4) p) w WHERE w.rn = 1 OR w.run <= $5 ORDER BY w.id"},
    {"ev_redeliver", "UPDATE events SET state = 'pending', next_at = $3, claim_until = 0, receipt = NULL, "
                     "expires_at = 0, updated_at = $3 WHERE source = $1 AND event_id = $2"},
    /* approvals */
    {"decide", "SELECT once_decide($1, $2, $3, $4, $5, $6, $7, $8)"},
    /* Approved rows wait for their sender: never expired. */
    {"expire_approvals", "UPDATE actions SET state = 'denied', note = '" LEDGER_APPROVAL_EXPIRED "', "
                         "updated_at = $1, expires_at = $1 + retention_ms, trail = CASE WHEN trail IS NULL "
                         "THEN $2::text ELSE trail || E'\\n' || $2::text END WHERE state = 'awaiting_approval' "
                         "AND approved_at = 0 AND lease_expires_at <= $1 AND ($3::text IS NULL OR scope = $3)"},
    /* SKIP LOCKED: claimers on N nodes never take the same row; the first
     * approved is the first sent. */
    {"approval_claim", "UPDATE actions a SET state = 'pending', token = $3, attempt = a.attempt + 1, "
                       "lease_expires_at = $2::bigint + $4::bigint, updated_at = $2 FROM (SELECT id FROM actions "
                       "WHERE state = 'awaiting_approval' AND scope = $1 AND approved_at > 0 "
                       "ORDER BY approved_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) d WHERE a.id = d.id "
                       "RETURNING a.id, a.scope, a.key, a.state, a.attempt, a.token, a.created_at, a.updated_at, "
                       "a.lease_expires_at, a.expires_at, a.retention_ms, a.fingerprint, a.request, a.has_response, "
                       "a.resp_status, a.resp_headers, a.resp_body, a.provider_id, a.error, a.note, a.lookups, "
                       "a.lookup_next_at, a.trail, a.resp_not_stored, a.approved_at, a.decided_by, a.decision_note, "
                       "a.agent, a.charges, a.waits_for_limit"},
    {"approval_oldest", "SELECT coalesce(min(created_at), 0) FROM actions WHERE state = 'awaiting_approval' "
                        "AND approved_at = 0"},
    {"ev_sweep", "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE state IN ('delivered','dead') "
                 "AND expires_at > 0 AND expires_at <= $1 LIMIT " STORE_SWEEP_ROWS_SQL ")"},
    /* limits: the use of one budget from its first counted bucket on */
    {"limit_use", "SELECT coalesce(sum(used), 0), min(bucket) FILTER (WHERE used > 0) FROM limit_use "
                  "WHERE lim = $1 AND bucket >= $2"},
};
const size_t pg_nstmts = sizeof pg_stmts / sizeof pg_stmts[0];

/* ---- answers --------------------------------------------------------------- */

/* Maps a function's text answer ('ok', 'notfound', 'stale:N', 'state:S'). */
static void answer_code(store_op *op, const char *ans, const char *what)
{
    const char *name = op->event_id ? op->event_id : op->key ? op->key : "";
    if (strcmp(ans, "ok") == 0)
        op->rc = ONCE_OK;
    else if (strcmp(ans, "notfound") == 0)
        store_op_fail(op, ONCE_ENOTFOUND, "no %s %s/%s", what, op->scope, name);
    else if (strncmp(ans, "stale", 5) == 0)
        store_op_fail(op, ONCE_ESTALE, "the %s is not the current one%s%s%s", op->receipt ? "receipt" : "token",
                      ans[5] ? " (attempt " : "", ans[5] ? ans + 6 : "", ans[5] ? ")" : "");
    else
        store_op_fail(op, ONCE_ESTATE, "%s %s/%s is %s: the transition is not allowed", what, op->scope, name,
                      strncmp(ans, "state:", 6) == 0 ? ans + 6 : ans);
}

/* The status a once_reserve answer names: the answers are the statuses'
 * names ('reserved', 'completed', ..., 'awaiting_approval', 'denied';
 * 'over_limit' carries no row, decode_reserve reads it itself).
 * An answer this build does not know is taken for UNKNOWN: never resent. */
static once_reserve_status reserve_status(const char *ans)
{
    for (int s = ONCE_RESERVED; s <= ONCE_DENIED; s++) {
        const char *name = once_reserve_status_name((once_reserve_status)s);
        if (name && strcmp(ans, name) == 0)
            return (once_reserve_status)s;
    }
    return ONCE_UNKNOWN;
}

/* The limit an answer names after its status ('over_limit:INDEX:RETRY',
 * 'awaiting_approval:INDEX:RETRY', once_limits_check's), into the
 * reservation; the answer's length up to it into *len. */
static void reserve_limit(once_reservation *r, const char *ans, size_t *len)
{
    const char *colon = strchr(ans, ':');
    *len = colon ? (size_t)(colon - ans) : strlen(ans);
    if (!colon)
        return;
    char *end = NULL;
    r->over_limit = (size_t)strtoull(colon + 1, &end, 10);
    r->retry_after_ms = end && *end == ':' ? strtoll(end + 1, NULL, 10) : -1;
}

/* once_reserve's row: 'reserved' (a new attempt) or the answer the row gave
 * ('completed', 'in_flight', 'unknown', 'held', 'awaiting_approval',
 * 'denied'), then the row itself; or 'over_limit:INDEX:RETRY' and no row
 * (nothing was written). */
static void decode_reserve(store_op *op, const PGresult *res)
{
    if (PQntuples(res) != 1) {
        store_op_fail(op, ONCE_ESTORE, "reserve: no answer from the database");
        return;
    }
    char ans[64];
    size_t len;
    snprintf(ans, sizeof ans, "%s", PQgetvalue(res, 0, 0));
    reserve_limit(op->res, ans, &len);
    ans[len] = '\0';
    if (strcmp(ans, "over_limit") == 0) {
        op->res->status = ONCE_OVER_LIMIT;
        op->rc = ONCE_OK;
        return;
    }
    once_action a;
    int rc = action_decode(res, 0, 1, &a);
    if (rc < 0) {
        store_op_fail(op, rc, "reserve: cannot read the row");
        return;
    }
    once_reservation *r = op->res;
    if (strcmp(ans, "reserved") == 0) {
        store_op_reserved(op, a.attempt, a.lease_expires_at);
        once_action_free(&a);
        op->rc = ONCE_OK;
        return;
    }
    /* completed / in_flight / unknown / held / awaiting_approval / denied,
     * decided server-side */
    r->action = a;
    ledger_answer_reservation(r, reserve_status(ans), op->rreq->fingerprint);
    op->rc = ONCE_OK;
}

/* A ping answers nothing: its transaction committing is the point. */
static void decode_ping(store_op *op, const PGresult *res)
{
    (void)res;
    op->rc = ONCE_OK;
}

/* The functions of the action state machine answer in text (answer_code). */
static void decode_action_answer(store_op *op, const PGresult *res)
{
    answer_code(op, PQgetvalue(res, 0, 0), "action");
}

/* once_event_settle answers in the same words, of an event. */
static void decode_event_answer(store_op *op, const PGresult *res)
{
    answer_code(op, PQgetvalue(res, 0, 0), "event");
}

/* once_decide's answer: as answer_code's, with the details the SQLite store
 * gives too. */
static void decode_decide(store_op *op, const PGresult *res)
{
    const char *ans = PQgetvalue(res, 0, 0);
    const char *verb = op->approve ? "approved" : "denied";
    if (strcmp(ans, "approved") == 0)
        store_op_fail(op, ONCE_ESTATE, "%s/%s was approved and is being sent: it can no longer be denied", op->scope,
                      op->key);
    else if (strncmp(ans, "state:", 6) == 0)
        store_op_fail(op, ONCE_ESTATE, "%s/%s is %s: only an action awaiting approval can be %s", op->scope, op->key,
                      ans + 6, verb);
    else
        answer_code(op, ans, "action");
}

/* An approval claim returns the row it took (pending under the claim's
 * token), or none: op->rc 1 with op->res filled as a reservation, or 0. */
static void decode_approval_claim(store_op *op, const PGresult *res)
{
    if (PQntuples(res) == 0) {
        op->rc = 0;
        return;
    }
    int rc = action_decode(res, 0, 0, &op->res->action);
    if (rc < 0) {
        store_op_fail(op, rc, "approval claim: cannot read the row");
        return;
    }
    store_op_claimed(op);
}

/* A renewal that went through moves the caller's lease deadline too. */
static void decode_renew(store_op *op, const PGresult *res)
{
    decode_action_answer(op, res);
    if (op->rc == ONCE_OK && op->lease_out)
        *op->lease_out = op->now + op->lease_ms;
}

/* The bulk statements answer with the rows they changed. */
static void decode_count(store_op *op, const PGresult *res)
{
    op->count = (size_t)strtoull(PQcmdTuples((PGresult *)res), NULL, 10);
    op->rc = ONCE_OK;
}

/* An insert answers whether it inserted. */
static void decode_inserted(store_op *op, const PGresult *res)
{
    /* The unique constraints decide: a duplicate inserts nothing. */
    *op->inserted = strcmp(PQcmdTuples((PGresult *)res), "1") == 0;
    op->rc = ONCE_OK;
}

/* A redelivery that changed no row found no event. */
static void decode_redeliver(store_op *op, const PGresult *res)
{
    if (strcmp(PQcmdTuples((PGresult *)res), "0") == 0)
        store_op_fail(op, ONCE_ENOTFOUND, "no event %s/%s", op->scope, op->event_id);
    else
        op->rc = ONCE_OK;
}

/* The claims return the rows they claimed: decoded into a new array
 * (pg_decode_rows), counted in *count, and handed back for the op's list
 * (even when op failed on a row: the list owns what was decoded). */
static void *claim_rows(store_op *op, const PGresult *res, const pg_rows *rows, const char *what, size_t *count)
{
    void *items = NULL;
    int rc = pg_decode_rows(res, (size_t)PQntuples(res), rows, what, &items, count);
    if (rc < 0)
        store_op_fail(op, rc, "%s", once_errdetail());
    else
        op->rc = ONCE_OK;
    return items;
}

/* The reconciler's claim: actions. */
static void decode_rc_claim(store_op *op, const PGresult *res)
{
    op->list->items = claim_rows(op, res, &pg_action_rows, "reconcile claim", &op->list->count);
}

/* A consumer's claim: events, with their receipts. */
static void decode_ev_claim(store_op *op, const PGresult *res)
{
    op->ev_list->items = claim_rows(op, res, &pg_claimed_event_rows, "claim", &op->ev_list->count);
}

/* ---- operations as statements ------------------------------------------------ */

/* Where a parameter of a write statement comes from in its operation. */
typedef enum pg_arg {
    ARG_END,           /* ends an operation's list */
    ARG_SCOPE,         /* the scope, or an event's source */
    ARG_KEY,
    ARG_TOKEN,
    ARG_NOW,
    ARG_TEXT,          /* the error, note, reason or step */
    ARG_PROVIDER,      /* the provider's id */
    ARG_TO,            /* the state a settle goes to */
    ARG_OUTCOME,       /* the state an outcome settles in */
    ARG_RESPONSE,      /* four parameters (p_response) */
    ARG_NOT_STORED,    /* the response's body_not_stored */
    ARG_LEASE,
    ARG_DELAY,
    ARG_MAX,
    ARG_DEAD,
    ARG_ACK,
    ARG_EXCEPT,        /* the scopes hold_all leaves alone (in the receipt's slot) */
    ARG_EVENT_ID,
    ARG_RECEIPT,
    ARG_RECEIPT_ID,    /* the row id a receipt starts with */
    ARG_PAGE_BYTES,    /* ONCE_PAGE_BYTES: where a claim stops */
    ARG_REQ_LEASE,     /* the reservation's request ... */
    ARG_REQ_RETENTION,
    ARG_REQ_FINGERPRINT,
    ARG_REQ_BODY,
    ARG_REQ_RETRY_UNKNOWN,
    ARG_REQ_APPROVAL_TTL,
    ARG_REQ_AGENT,
    ARG_REQ_CHARGES,   /* as JSON (limits_json), or NULL without any */
    ARG_REQ_OVER_APPROVE,
    ARG_REQ_OVER_TTL,
    ARG_APPROVE,       /* a decision: approve (true) or deny */
    ARG_STEP,          /* a trail line */
    ARG_WHO,           /* a decision's decider (decided_by) */
    ARG_DECISION_NOTE, /* a decision's note as given (decision_note) */
    ARG_EV_SOURCE,     /* the event to insert ... */
    ARG_EV_ID,
    ARG_EV_RETENTION,
    ARG_EV_CONTENT_TYPE,
    ARG_EV_HEADERS,
    ARG_EV_BODY,
    ARG_EV_DIGEST
} pg_arg;

/* A write operation as a prepared statement: its parameters, in order, and
 * how its answer is read into the operation's outputs. */
typedef struct pg_op_def {
    const char *stmt; /* in pg_stmts; NULL: not a write */
    pg_arg args[PARAMS_MAX];
    void (*decode)(store_op *op, const PGresult *res);
} pg_op_def;

static const pg_op_def pg_ops[] = {
    [OP_RESERVE] = {"reserve",
                    {ARG_SCOPE, ARG_KEY, ARG_TOKEN, ARG_NOW, ARG_REQ_LEASE, ARG_REQ_RETENTION, ARG_REQ_FINGERPRINT,
                     ARG_REQ_BODY, ARG_REQ_RETRY_UNKNOWN, ARG_REQ_APPROVAL_TTL, ARG_REQ_AGENT, ARG_REQ_CHARGES,
                     ARG_REQ_OVER_APPROVE, ARG_REQ_OVER_TTL},
                    decode_reserve},
    [OP_COMPLETE] = {"complete", {ARG_SCOPE, ARG_KEY, ARG_TOKEN, ARG_NOW, ARG_RESPONSE, ARG_PROVIDER, ARG_NOT_STORED},
                     decode_action_answer},
    [OP_SETTLE] = {"settle", {ARG_SCOPE, ARG_KEY, ARG_TOKEN, ARG_TO, ARG_TEXT, ARG_NOW}, decode_action_answer},
    [OP_RENEW] = {"renew", {ARG_SCOPE, ARG_KEY, ARG_TOKEN, ARG_NOW, ARG_LEASE}, decode_renew},
    [OP_RESOLVE] = {"resolve", {ARG_SCOPE, ARG_KEY, ARG_OUTCOME, ARG_PROVIDER, ARG_TEXT, ARG_NOW},
                    decode_action_answer},
    [OP_EXPIRE] = {"expire", {ARG_NOW}, decode_count},
    [OP_HOLD] = {"hold", {ARG_SCOPE, ARG_KEY, ARG_TEXT, ARG_NOW}, decode_action_answer},
    [OP_SWEEP] = {"sweep", {ARG_NOW}, decode_count},
    [OP_HOLD_ALL] = {"hold_all", {ARG_NOW, ARG_TEXT, ARG_SCOPE, ARG_EXCEPT}, decode_count},
    [OP_RC_CLAIM] = {"rc_claim", {ARG_SCOPE, ARG_NOW, ARG_LEASE, ARG_MAX, ARG_DELAY /* settle */}, decode_rc_claim},
    [OP_RC_SETTLE] = {"rc_settle", {ARG_SCOPE, ARG_KEY, ARG_OUTCOME, ARG_RESPONSE, ARG_PROVIDER, ARG_TEXT, ARG_NOW},
                      decode_action_answer},
    [OP_RC_FAILED] = {"rc_failed", {ARG_SCOPE, ARG_KEY, ARG_DELAY, ARG_DEAD, ARG_TEXT, ARG_NOW},
                      decode_action_answer},
    [OP_PING] = {"ping", {ARG_END}, decode_ping},
    [OP_EV_INSERT] = {"ev_insert",
                      {ARG_EV_SOURCE, ARG_EV_ID, ARG_NOW, ARG_EV_RETENTION, ARG_EV_CONTENT_TYPE, ARG_EV_HEADERS,
                       ARG_EV_BODY, ARG_EV_DIGEST},
                      decode_inserted},
    [OP_EV_CLAIM] = {"ev_claim", {ARG_SCOPE, ARG_NOW, ARG_LEASE, ARG_TOKEN, ARG_MAX, ARG_PAGE_BYTES, ARG_WHO},
                     decode_ev_claim},
    [OP_EV_SETTLE] = {"ev_settle",
                      {ARG_SCOPE, ARG_RECEIPT_ID, ARG_RECEIPT, ARG_ACK, ARG_DELAY, ARG_DEAD, ARG_TEXT, ARG_NOW},
                      decode_event_answer},
    [OP_EV_REDELIVER] = {"ev_redeliver", {ARG_SCOPE, ARG_EVENT_ID, ARG_NOW}, decode_redeliver},
    [OP_EV_SWEEP] = {"ev_sweep", {ARG_NOW}, decode_count},
    [OP_DECIDE] = {"decide",
                   {ARG_SCOPE, ARG_KEY, ARG_APPROVE, ARG_TEXT, ARG_STEP, ARG_NOW, ARG_WHO, ARG_DECISION_NOTE},
                   decode_decide},
    [OP_EXPIRE_APPROVALS] = {"expire_approvals", {ARG_NOW, ARG_STEP, ARG_SCOPE}, decode_count},
    [OP_APPROVAL_CLAIM] = {"approval_claim", {ARG_SCOPE, ARG_NOW, ARG_TOKEN, ARG_LEASE}, decode_approval_claim},
};

/* The statement of op's kind, or NULL with op failed when it is no write. */
static const pg_op_def *op_def(store_op *op)
{
    size_t k = (size_t)op->kind;
    if (k < sizeof pg_ops / sizeof pg_ops[0] && pg_ops[k].stmt)
        return &pg_ops[k];
    store_op_fail(op, ONCE_EINVAL, "operation %d is not a write", (int)op->kind);
    return NULL;
}

/* "<id>.<hex>": the id finds the row; the whole string fences it. */
static int p_receipt_id(params *p, store_op *op)
{
    const char *dot = strchr(op->receipt, '.');
    char *end = NULL;
    long long id = strtoll(op->receipt, &end, 10);
    if (!dot || end != dot || id <= 0) {
        store_op_fail(op, ONCE_EINVAL, "receipt: malformed");
        return -1;
    }
    p_int(p, id);
    return 0;
}

/* A reservation's charges as once_reserve takes them (JSON), made here on
 * the writer and freed once sent (p->own); NULL without any. */
static int p_charges(params *p, store_op *op)
{
    const once_reserve_req *r = op->rreq;
    if (!r->ncharges) {
        p_text(p, NULL);
        return 0;
    }
    p->own = limits_json(r->charges, r->ncharges, NULL);
    if (!p->own) {
        store_op_fail(op, ONCE_ENOMEM, "reserve: out of memory");
        return -1;
    }
    p_text(p, p->own);
    return 0;
}

/* Appends op's parameter a to p. -1 (op failed) when op cannot give it. */
static int p_arg(params *p, store_op *op, pg_arg a)
{
    const once_reserve_req *r = op->rreq;
    const once_event_in *e = op->ev_in;
    switch (a) {
    case ARG_END: break;
    case ARG_SCOPE: p_text(p, op->scope); break;
    case ARG_KEY: p_text(p, op->key); break;
    case ARG_TOKEN: p_text(p, op->token); break;
    case ARG_NOW: p_int(p, op->now); break;
    case ARG_TEXT: p_text(p, op->text); break;
    case ARG_PROVIDER: p_text(p, op->provider_id); break;
    case ARG_TO: p_text(p, once_state_name(op->to)); break;
    case ARG_OUTCOME: p_text(p, once_state_name(ledger_outcome_state(op->outcome))); break;
    case ARG_RESPONSE: p_response(p, op->resp); break;
    case ARG_NOT_STORED: p_int(p, op->resp ? op->resp->body_not_stored : 0); break;
    case ARG_LEASE: p_int(p, op->lease_ms); break;
    case ARG_DELAY: p_int(p, op->delay_ms); break;
    case ARG_MAX: p_int(p, (int64_t)op->max); break;
    case ARG_DEAD: p_bool(p, op->dead); break;
    case ARG_ACK: p_bool(p, op->ack); break;
    case ARG_EXCEPT:
    case ARG_RECEIPT: p_text(p, op->receipt); break;
    case ARG_EVENT_ID: p_text(p, op->event_id); break;
    case ARG_RECEIPT_ID: return p_receipt_id(p, op);
    case ARG_PAGE_BYTES: p_int(p, (int64_t)ONCE_PAGE_BYTES); break;
    case ARG_REQ_LEASE: p_int(p, r->lease_ms); break;
    case ARG_REQ_RETENTION: p_int(p, r->retention_ms); break;
    case ARG_REQ_FINGERPRINT: p_text(p, r->fingerprint); break;
    case ARG_REQ_BODY: p_bytes(p, r->request, r->request_len); break;
    case ARG_REQ_RETRY_UNKNOWN: p_bool(p, r->retry_unknown); break;
    case ARG_REQ_APPROVAL_TTL: p_int(p, r->approval_ttl_ms); break;
    case ARG_REQ_AGENT: p_text(p, r->agent); break;
    case ARG_REQ_CHARGES: return p_charges(p, op);
    case ARG_REQ_OVER_APPROVE: p_bool(p, r->over_limit_approve); break;
    case ARG_REQ_OVER_TTL: p_int(p, r->over_limit_ttl_ms); break;
    case ARG_APPROVE: p_bool(p, op->approve); break;
    case ARG_STEP: p_text(p, op->step); break;
    case ARG_WHO: p_text(p, op->who); break;
    case ARG_DECISION_NOTE: p_text(p, op->decision_note); break;
    case ARG_EV_SOURCE: p_text(p, e->source); break;
    case ARG_EV_ID: p_text(p, e->event_id); break;
    case ARG_EV_RETENTION: p_int(p, e->retention_ms); break;
    case ARG_EV_CONTENT_TYPE: p_text(p, e->content_type); break;
    case ARG_EV_HEADERS: p_text(p, e->headers); break;
    case ARG_EV_BODY: p_bytes(p, e->body, e->body_len); break;
    case ARG_EV_DIGEST: p_text(p, e->digest); break;
    }
    return 0;
}

/* ---- the write path --------------------------------------------------------- */

/* Sends op's statement into the pipeline: 0 sent, 1 not sent (op failed),
 * -1 connection trouble. libpq copies the parameters when sending. */
static int op_send(PGconn *c, store_op *op)
{
    const pg_op_def *def = op_def(op);
    if (!def)
        return 1;
    params p = {.n = 0};
    for (size_t i = 0; i < PARAMS_MAX && def->args[i] != ARG_END; i++) {
        if (p_arg(&p, op, def->args[i]) < 0) {
            free(p.own);
            return 1;
        }
    }
    int sent = PQsendQueryPrepared(c, def->stmt, p.n, p.v, p.len, p.fmt, 0) == 1;
    free(p.own);
    return sent ? 0 : -1;
}

/* Reads op's result into its outputs (valid only if the batch commits). */
static void op_decode(store_op *op, const PGresult *res)
{
    const pg_op_def *def = op_def(op);
    if (def)
        def->decode(op, res);
}

typedef enum batch_result { BATCH_OK, BATCH_RETRY, BATCH_FAILED, BATCH_BROKEN } batch_result;

static void send_simple(PGconn *c, const char *sql)
{
    PQsendQueryParams(c, sql, 0, NULL, NULL, NULL, NULL, 0);
}

/* Sends the lock of every limit the batch's reservations charge
 * (once_limits_lock), right after BEGIN: a reservation takes its limits'
 * locks before it reads their use, and two batches that took them op by op
 * in their own (key) order could each hold a lock the other waits for. All
 * at once, in one order, they cannot. 1 sent, 0 none to send (or out of
 * memory: each reservation then takes its own, as once_reserve does). */
static int send_limit_locks(PGconn *c, store_op *const *ops, size_t n)
{
    size_t len = 0, k = 0;
    char *parts[BATCH_MAX];
    for (size_t i = 0; i < n && k < BATCH_MAX; i++) {
        const once_reserve_req *r = ops[i]->kind == OP_RESERVE ? ops[i]->rreq : NULL;
        if (r && r->ncharges && (parts[k] = limits_json(r->charges, r->ncharges, NULL)) != NULL)
            len += strlen(parts[k++]) + 1;
    }
    char *all = k ? malloc(len + 2) : NULL;
    if (all) {
        /* [[...],[...]] and [[...]] joined: [[...],[...],[...]] */
        char *p = all;
        for (size_t i = 0; i < k; i++) {
            size_t m = strlen(parts[i]);
            memcpy(p, i ? parts[i] + 1 : parts[i], i ? m - 1 : m);
            p += i ? m - 1 : m;
            if (i + 1 < k)
                p[-1] = ',';
        }
        *p = '\0';
        const char *v[1] = {all};
        PQsendQueryParams(c, "SELECT once_limits_lock($1::json)", 1, NULL, v, NULL, NULL, 0);
    }
    for (size_t i = 0; i < k; i++)
        free(parts[i]);
    free(all);
    return all != NULL;
}

/* One pipeline: BEGIN, the limits' locks (when the batch charges any), the
 * operations, COMMIT, sync; then every result. Outputs are decoded as they
 * come and voided unless COMMIT succeeded. */
static batch_result batch_pipeline(PGconn *c, store_op **ops, size_t n, char *err, size_t errlen)
{
    if (PQenterPipelineMode(c) != 1) {
        snprintf(err, errlen, "cannot enter pipeline mode");
        return PQstatus(c) == CONNECTION_OK ? BATCH_FAILED : BATCH_BROKEN;
    }
    int *sent = calloc(n, sizeof *sent);
    if (!sent) {
        PQexitPipelineMode(c);
        snprintf(err, errlen, "out of memory");
        return BATCH_FAILED;
    }
    send_simple(c, "BEGIN");
    size_t pre = 1 + (size_t)send_limit_locks(c, ops, n); /* the queries before the first op */
    for (size_t i = 0; i < n; i++) {
        int rc = op_send(c, ops[i]);
        sent[i] = rc == 0;
        if (rc < 0)
            break; /* connection trouble: found when reading */
    }
    FAULT_POINT("before_commit");
    send_simple(c, "COMMIT");
    PQpipelineSync(c);

    int failed = 0, retry = 0, broken = 0;
    err[0] = '\0';
    /* n + pre + 1 queries were sent at most: BEGIN, the locks, the sent
     * ops, COMMIT. */
    for (size_t q = 0; q < n + pre + 1; q++) {
        size_t i = q - pre;
        int is_op = q >= pre && q < pre + n;
        if (is_op && !sent[i])
            continue;
        PGresult *res = PQgetResult(c);
        if (!res) {
            broken = 1;
            break;
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_FATAL_ERROR) {
            failed = 1;
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            if (state && (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0))
                retry = 1;
            if (!err[0])
                pg_msg(PQresultErrorMessage(res), err, errlen);
        } else if (st == PGRES_PIPELINE_ABORTED) {
            failed = 1;
        } else if (is_op && !failed) {
            op_decode(ops[i], res);
        } else if (q == n + pre && st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "ROLLBACK") == 0) {
            failed = 1; /* COMMIT of a failed transaction answers ROLLBACK */
        }
        PQclear(res);
        while ((res = PQgetResult(c)) != NULL) /* the NULL that ends each query */
            PQclear(res);
    }
    if (!broken) {
        PGresult *res = PQgetResult(c);
        if (!res || PQresultStatus(res) != PGRES_PIPELINE_SYNC)
            broken = PQstatus(c) != CONNECTION_OK;
        PQclear(res);
    }
    free(sent);
    if (PQstatus(c) != CONNECTION_OK)
        broken = 1;
    if (!broken)
        PQexitPipelineMode(c);
    if (broken) {
        if (!err[0])
            pg_msg(PQerrorMessage(c), err, errlen);
        return BATCH_BROKEN;
    }
    if (failed) {
        PQclear(PQexec(c, "ROLLBACK")); /* the block may still be open and aborted */
        return retry ? BATCH_RETRY : BATCH_FAILED;
    }
    return BATCH_OK;
}

/* Sorts a batch by key so that concurrent batches lock rows in one order
 * (no deadlock between them); the same key keeps its submission order. */
typedef struct keyed {
    store_op *op;
    size_t pos;
} keyed;

static const char *op_key(const store_op *op)
{
    if (op->kind == OP_RESERVE)
        return op->rreq->key;
    if (op->kind == OP_EV_INSERT)
        return op->ev_in->event_id;
    return op->key ? op->key : op->event_id ? op->event_id : "";
}

static int keyed_cmp(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(op_key(x->op), op_key(y->op));
    if (c)
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Whether the batch holds a ping: a /readyz waits on it, so its
 * connection may probe through the back-off (pg_connect). */
static int has_ping(store_op *const *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->kind == OP_PING)
            return 1;
    }
    return 0;
}

/* Moves the batch's pings to its front (the writer finishes the same items,
 * in any order; only after the batch failed, when its order no longer
 * matters) and counts them: the operations safe to run again after a
 * connection broke under them. */
static size_t pings_first(store_op **ops, size_t n)
{
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->kind == OP_PING) {
            store_op *t = ops[np];
            ops[np++] = ops[i];
            ops[i] = t;
        }
    }
    return np;
}

static void batch_run(pg_store *s, PGconn **conn, store_op **ops, size_t n)
{
    keyed *k = malloc(n * sizeof *k);
    if (k) {
        for (size_t i = 0; i < n; i++)
            k[i] = (keyed){ops[i], i};
        qsort(k, n, sizeof *k, keyed_cmp);
        for (size_t i = 0; i < n; i++)
            ops[i] = k[i].op;
        free(k);
    }
    char err[256];
    for (int attempt = 0; attempt < 3; attempt++) {
        for (size_t i = 0; i < n; i++) {
            ops[i]->rc = ONCE_ESTORE;
            ops[i]->detail[0] = '\0';
        }
        /* A writer's connection that died while idle is replaced before
         * anything is sent on it: nothing of the batch is lost to it. */
        if (*conn && !pg_alive(*conn)) {
            PQfinish(*conn);
            *conn = NULL;
        }
        if (!*conn) {
            /* A batch with a ping (/readyz) may probe through the back-off. */
            int rc = pg_open_conn(s, conn, has_ping(ops, n) ? PG_CONNECT_PROBE : PG_CONNECT_BACKOFF);
            if (rc < 0) {
                char why[ONCE_DETAIL_MAX];
                snprintf(why, sizeof why, "%s", once_errdetail());
                for (size_t i = 0; i < n; i++)
                    store_op_void(ops[i], rc, "%s", why);
                return;
            }
        }
        double t0 = clock_mono_seconds();
        batch_result br = batch_pipeline(*conn, ops, n, err, sizeof err);
        if (br == BATCH_OK) {
            FAULT_POINT("after_commit");
            once_commit_hook hook = s->head.base.commit_hook;
            if (hook)
                hook(s->head.base.commit_hook_ctx, n, clock_mono_seconds() - t0);
            return;
        }
        char why[ONCE_DETAIL_MAX];
        snprintf(why, sizeof why, "store unavailable: %s", err);
        for (size_t i = 0; i < n; i++)
            store_op_void(ops[i], ONCE_ESTORE, "%s", why);
        if (br == BATCH_BROKEN) {
            /* The commit's fate is unknown: report failure, never success.
             * A reservation that did commit expires and is held; nothing
             * was sent for it. */
            PQfinish(*conn);
            *conn = NULL;
            pthread_mutex_lock(&s->mu);
            s->retry_at = 0; /* reconnect on the next batch, then back off */
            pthread_mutex_unlock(&s->mu);
            /* Pings wrote nothing, so they may run again: on a new
             * connection, now, so that /readyz answers from the database
             * as it is rather than from the connection that had died. */
            size_t np = pings_first(ops, n);
            if (np == n)
                continue;
            if (np > 0)
                batch_run(s, conn, ops, np);
            return;
        }
        if (br == BATCH_FAILED) {
            /* One operation broke the batch: run each alone, so it fails
             * by itself. */
            if (n == 1)
                return;
            for (size_t i = 0; i < n; i++) {
                batch_run(s, conn, &ops[i], 1);
            }
            return;
        }
        /* BATCH_RETRY: a deadlock or serialization failure; again. */
    }
}

void *pg_writer_main(void *arg)
{
    pg_store *s = arg;
    pthread_setname_np(pthread_self(), "once-pg-writer");
    bq_item *items[BATCH_MAX];
    PGconn *conn = NULL;
    size_t n;
    while ((n = bq_take(&s->head.queue, items, BATCH_MAX)) > 0) {
        store_op **ops = (store_op **)items;
        /* Tokens for claims: one per batch item, made off the caller. */
        for (size_t i = 0; i < n; i++) {
            if (ops[i]->kind == OP_EV_CLAIM && once_token_new(ops[i]->token_buf) == ONCE_OK)
                ops[i]->token = ops[i]->token_buf;
        }
        batch_run(s, &conn, ops, n);
        bq_finish(&s->head.queue, items, n);
    }
    PQfinish(conn);
    return NULL;
}

