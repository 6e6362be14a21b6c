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
#include "store/pg_int.h"

const stmt_def pg_stmts[] = {
    {"reserve", "SELECT * FROM once_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9)"},
    {"complete", "SELECT once_complete($1, $2, $3, $4, $5, $6, $7, $8, $9)"},
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
    {"sweep", "DELETE FROM actions WHERE state IN ('completed','released') AND expires_at > 0 "
              "AND expires_at <= $1"},
    {"get", "SELECT " A_COLS " FROM actions WHERE scope = $1 AND key = $2"},
    /* A page stops where its bodies pass $5 bytes (one row at least), so
     * a page of 1000 large rows never sits whole in a libpq result: the
     * last column, the rows before the cut, tells whether it was cut. */
    {"list", "SELECT " A_COLS ", w.page_total FROM (SELECT p.*, row_number() OVER (ORDER BY p.id) AS rn, "
             "count(*) OVER () AS page_total, sum(coalesce(octet_length(p.request), 0) + "
             "coalesce(octet_length(p.resp_body), 0) + coalesce(octet_length(p.resp_headers), 0)) "
             "OVER (ORDER BY p.id) AS run FROM (SELECT * FROM actions WHERE id > $1 AND ($2::text IS NULL OR "
             "state = $2) AND ($3::text IS NULL OR scope = $3) ORDER BY id LIMIT $4) p) w "
             "WHERE w.rn = 1 OR w.run <= $5 ORDER BY w.id"},
    {"ping", "SELECT 1"},
    /* SKIP LOCKED: lookups on N nodes take disjoint actions. */
    {"rc_claim", "UPDATE actions a SET lookup_next_at = $2 + $3 FROM (SELECT id FROM actions WHERE state = "
                 "'unknown' AND scope = $1 AND lookup_next_at <= $2 AND updated_at <= $2 - $5 ORDER BY id LIMIT $4 "
                 "FOR UPDATE SKIP LOCKED) d "
                 "WHERE a.id = d.id RETURNING a.id, a.scope, a.key, a.state, a.attempt, a.token, a.created_at, "
                 "a.updated_at, a.lease_expires_at, a.expires_at, a.retention_ms, a.fingerprint, a.request, "
                 "a.has_response, a.resp_status, a.resp_headers, a.resp_body, a.provider_id, a.error, a.note, "
                 "a.lookups, a.lookup_next_at, a.trail"},
    {"rc_settle", "SELECT once_reconcile($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
    {"rc_failed", "SELECT once_reconcile_failed($1, $2, $3, $4, $5, $6)"},
    /* No conflict target: a duplicate id or a duplicate digest. */
    {"ev_insert", "INSERT INTO events (source, event_id, state, received_at, updated_at, next_at, retention_ms, "
                  "content_type, headers, body, digest) VALUES ($1, $2, 'pending', $3, $3, $3, $4, $5, $6, $7, $8) "
                  "ON CONFLICT DO NOTHING"},
    /* SKIP LOCKED: claimers on N nodes take disjoint events. */
    {"ev_claim", "UPDATE events e SET attempt = e.attempt + 1, receipt = e.id || '.' || $4, "
                 "claim_until = $2 + $3, updated_at = $2 FROM (SELECT id FROM (SELECT l.id, "
                 "row_number() OVER (ORDER BY l.next_at, l.id) AS rn, sum(coalesce(octet_length(l.body), 0) + "
                 "coalesce(octet_length(l.headers), 0)) OVER (ORDER BY l.next_at, l.id) AS run FROM (SELECT id, "
                 "next_at, body, headers FROM events WHERE source = $1 AND state = 'pending' AND next_at <= $2 "
                 "AND claim_until <= $2 ORDER BY next_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) l) w "
                 "WHERE w.rn = 1 OR w.run <= $6) d WHERE e.id = d.id RETURNING e.id, e.source, e.event_id, "
                 "e.state, e.attempt, e.received_at, e.updated_at, e.next_at, e.claim_until, e.receipt, "
                 "e.delivered_at, e.expires_at, e.retention_ms, e.content_type, e.headers, e.body, e.error"},
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
    {"ev_sweep", "DELETE FROM events WHERE state IN ('delivered','dead') AND expires_at > 0 AND expires_at <= $1"},
};
const size_t pg_nstmts = sizeof pg_stmts / sizeof pg_stmts[0];

/* ---- answers --------------------------------------------------------------- */

/* Decides a reservation from an existing row read outside the writer: the
 * same rules as once_reserve in pg_schema.c. 1 answered, 0 needs a write. */
int reserve_from_row(store_op *op, once_action *a)
{
    once_reservation *res = op->res;
    once_reserve_status st;
    if (a->state == ONCE_STATE_COMPLETED && a->expires_at > op->now)
        st = ONCE_COMPLETED;
    else if (a->state == ONCE_STATE_PENDING && a->lease_expires_at > op->now)
        st = ONCE_IN_FLIGHT;
    else if ((a->state == ONCE_STATE_UNKNOWN || a->state == ONCE_STATE_HELD) && !op->rreq->retry_unknown)
        st = a->state == ONCE_STATE_UNKNOWN ? ONCE_UNKNOWN : ONCE_HELD;
    else
        return 0;
    res->status = st;
    res->attempt = a->attempt;
    if (st == ONCE_IN_FLIGHT)
        res->lease_expires_at = a->lease_expires_at;
    if (st == ONCE_COMPLETED)
        res->fingerprint_mismatch = op->rreq->fingerprint && a->fingerprint &&
                                    strcmp(op->rreq->fingerprint, a->fingerprint) != 0;
    res->action = *a;
    memset(a, 0, sizeof *a);
    op->rc = ONCE_OK;
    return 1;
}

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

/* ---- the write path --------------------------------------------------------- */

/* Sends op's statement into the pipeline. p must live until the results
 * are read (libpq copies the values when sending, so it need not). */
static int op_send(PGconn *c, store_op *op)
{
    params p = {.n = 0};
    const char *name = NULL;
    switch (op->kind) {
    case OP_RESERVE: {
        const once_reserve_req *r = op->rreq;
        name = "reserve";
        p_text(&p, r->scope);
        p_text(&p, r->key);
        p_text(&p, op->token);
        p_int(&p, op->now);
        p_int(&p, r->lease_ms);
        p_int(&p, r->retention_ms);
        p_text(&p, r->fingerprint);
        p_bytes(&p, r->request, r->request_len);
        p_bool(&p, r->retry_unknown);
        break;
    }
    case OP_COMPLETE:
        name = "complete";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->token);
        p_int(&p, op->now);
        p_bool(&p, op->resp != NULL);
        if (op->resp) {
            p_int(&p, op->resp->status);
            p_text(&p, op->resp->headers);
            p_bytes(&p, op->resp->body, op->resp->body_len);
        } else {
            p_text(&p, NULL);
            p_text(&p, NULL);
            p_text(&p, NULL);
        }
        p_text(&p, op->provider_id);
        break;
    case OP_SETTLE:
        name = "settle";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->token);
        p_text(&p, once_state_name(op->to));
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    case OP_PING:
        name = "ping";
        break;
    case OP_RENEW:
        name = "renew";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->token);
        p_int(&p, op->now);
        p_int(&p, op->lease_ms);
        break;
    case OP_RESOLVE:
        name = "resolve";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->outcome == ONCE_OUTCOME_COMPLETED ? "completed" : "released");
        p_text(&p, op->provider_id);
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    case OP_HOLD:
        name = "hold";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    case OP_EXPIRE:
        name = "expire";
        p_int(&p, op->now);
        break;
    case OP_HOLD_ALL:
        name = "hold_all";
        p_int(&p, op->now);
        p_text(&p, op->text);
        p_text(&p, op->scope);
        p_text(&p, op->receipt); /* the except list travels in this slot */
        break;
    case OP_SWEEP:
        name = "sweep";
        p_int(&p, op->now);
        break;
    case OP_RC_CLAIM:
        name = "rc_claim";
        p_text(&p, op->scope);
        p_int(&p, op->now);
        p_int(&p, op->lease_ms);
        p_int(&p, (int64_t)op->max);
        p_int(&p, op->delay_ms); /* settle */
        break;
    case OP_RC_SETTLE: {
        const once_response *r = op->outcome == ONCE_OUTCOME_COMPLETED ? op->resp : NULL;
        name = "rc_settle";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_text(&p, op->outcome == ONCE_OUTCOME_COMPLETED ? "completed" : "released");
        p_bool(&p, r != NULL);
        if (r) {
            p_int(&p, r->status);
            p_text(&p, r->headers);
            p_bytes(&p, r->body, r->body_len);
        } else {
            p_text(&p, NULL);
            p_text(&p, NULL);
            p_text(&p, NULL);
        }
        p_text(&p, op->outcome == ONCE_OUTCOME_COMPLETED ? op->provider_id : NULL);
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    }
    case OP_RC_FAILED:
        name = "rc_failed";
        p_text(&p, op->scope);
        p_text(&p, op->key);
        p_int(&p, op->delay_ms);
        p_bool(&p, op->dead);
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    case OP_EV_INSERT: {
        const once_event_in *e = op->ev_in;
        name = "ev_insert";
        p_text(&p, e->source);
        p_text(&p, e->event_id);
        p_int(&p, op->now);
        p_int(&p, e->retention_ms);
        p_text(&p, e->content_type);
        p_text(&p, e->headers);
        p_bytes(&p, e->body, e->body_len);
        p_text(&p, e->digest);
        break;
    }
    case OP_EV_CLAIM:
        name = "ev_claim";
        p_text(&p, op->scope);
        p_int(&p, op->now);
        p_int(&p, op->lease_ms);
        p_text(&p, op->token);
        p_int(&p, (int64_t)op->max);
        p_int(&p, (int64_t)ONCE_PAGE_BYTES);
        break;
    case OP_EV_SETTLE: {
        /* "<id>.<hex>": the id finds the row; the whole string fences it. */
        const char *dot = strchr(op->receipt, '.');
        char *end = NULL;
        long long id = strtoll(op->receipt, &end, 10);
        if (!dot || end != dot || id <= 0) {
            store_op_fail(op, ONCE_EINVAL, "receipt: malformed");
            return 1; /* nothing sent */
        }
        name = "ev_settle";
        p_text(&p, op->scope);
        p_int(&p, id);
        p_text(&p, op->receipt);
        p_bool(&p, op->ack);
        p_int(&p, op->delay_ms);
        p_bool(&p, op->dead);
        p_text(&p, op->text);
        p_int(&p, op->now);
        break;
    }
    case OP_EV_REDELIVER:
        name = "ev_redeliver";
        p_text(&p, op->scope);
        p_text(&p, op->event_id);
        p_int(&p, op->now);
        break;
    case OP_EV_SWEEP:
        name = "ev_sweep";
        p_int(&p, op->now);
        break;
    default:
        store_op_fail(op, ONCE_EINVAL, "operation %d is not a write", (int)op->kind);
        return 1;
    }
    return PQsendQueryPrepared(c, name, p.n, p.v, p.len, p.fmt, 0) == 1 ? 0 : -1;
}

/* Reads op's result into its outputs (valid only if the batch commits). */
static void op_decode(store_op *op, const PGresult *res)
{
    switch (op->kind) {
    case OP_RESERVE: {
        if (PQntuples(res) != 1) {
            store_op_fail(op, ONCE_ESTORE, "reserve: no answer from the database");
            return;
        }
        const char *ans = PQgetvalue(res, 0, 0);
        once_action a;
        int rc = action_decode(res, 0, 1, &a);
        if (rc < 0) {
            store_op_fail(op, rc, "reserve: cannot read the row");
            return;
        }
        once_reservation *r = op->res;
        if (strcmp(ans, "reserved") == 0) {
            r->status = ONCE_RESERVED;
            memcpy(r->token, op->token, ONCE_TOKEN_LEN + 1);
            r->attempt = a.attempt;
            r->lease_expires_at = a.lease_expires_at;
            once_action_free(&a);
            op->rc = ONCE_OK;
            return;
        }
        /* completed / in_flight / unknown / held, decided server-side */
        r->status = strcmp(ans, "completed") == 0   ? ONCE_COMPLETED
                    : strcmp(ans, "in_flight") == 0 ? ONCE_IN_FLIGHT
                    : strcmp(ans, "held") == 0      ? ONCE_HELD
                                                    : ONCE_UNKNOWN;
        r->attempt = a.attempt;
        if (r->status == ONCE_IN_FLIGHT)
            r->lease_expires_at = a.lease_expires_at;
        if (r->status == ONCE_COMPLETED)
            r->fingerprint_mismatch = op->rreq->fingerprint && a.fingerprint &&
                                      strcmp(op->rreq->fingerprint, a.fingerprint) != 0;
        r->action = a;
        op->rc = ONCE_OK;
        return;
    }
    case OP_PING: op->rc = ONCE_OK; return;
    case OP_RENEW:
        answer_code(op, PQgetvalue(res, 0, 0), "action");
        if (op->rc == ONCE_OK && op->lease_out)
            *op->lease_out = op->now + op->lease_ms;
        return;
    case OP_COMPLETE:
    case OP_SETTLE:
    case OP_RESOLVE:
    case OP_HOLD: answer_code(op, PQgetvalue(res, 0, 0), "action"); return;
    case OP_EV_SETTLE: answer_code(op, PQgetvalue(res, 0, 0), "event"); return;
    case OP_RC_SETTLE:
    case OP_RC_FAILED: answer_code(op, PQgetvalue(res, 0, 0), "action"); return;
    case OP_RC_CLAIM: {
        once_action_list *l = op->list;
        int n = PQntuples(res);
        l->items = calloc(n ? (size_t)n : 1, sizeof *l->items);
        if (!l->items) {
            store_op_fail(op, ONCE_ENOMEM, "reconcile claim: out of memory");
            return;
        }
        for (int i = 0; i < n; i++) {
            int rc = action_decode(res, i, 0, &l->items[i]);
            if (rc < 0) {
                store_op_fail(op, rc, "reconcile claim: cannot read a row");
                return;
            }
            l->count++;
        }
        op->rc = ONCE_OK;
        return;
    }
    case OP_EXPIRE:
    case OP_HOLD_ALL:
    case OP_SWEEP:
    case OP_EV_SWEEP:
        op->count = (size_t)strtoull(PQcmdTuples((PGresult *)res), NULL, 10);
        op->rc = ONCE_OK;
        return;
    case OP_EV_INSERT:
        *op->inserted = strcmp(PQcmdTuples((PGresult *)res), "1") == 0;
        op->rc = ONCE_OK;
        return;
    case OP_EV_REDELIVER:
        if (strcmp(PQcmdTuples((PGresult *)res), "0") == 0)
            store_op_fail(op, ONCE_ENOTFOUND, "no event %s/%s", op->scope, op->event_id);
        else
            op->rc = ONCE_OK;
        return;
    case OP_EV_CLAIM: {
        once_event_list *l = op->ev_list;
        int n = PQntuples(res);
        l->items = calloc(n ? (size_t)n : 1, sizeof *l->items);
        if (!l->items) {
            store_op_fail(op, ONCE_ENOMEM, "claim: out of memory");
            return;
        }
        for (int i = 0; i < n; i++) {
            int rc = event_decode(res, i, &l->items[i]);
            if (rc < 0) {
                store_op_fail(op, rc, "claim: cannot read an event");
                return;
            }
            snprintf(l->items[i].receipt, sizeof l->items[i].receipt, "%s", PQgetvalue(res, i, 9));
            l->count++;
        }
        op->rc = ONCE_OK;
        return;
    }
    default: store_op_fail(op, ONCE_EINVAL, "operation %d is not a write", (int)op->kind); return;
    }
}

/* Undoes what op_decode produced, for a batch that did not commit. */
static void op_void(store_op *op, int code, const char *why)
{
    if (op->kind == OP_RESERVE)
        once_reservation_free(op->res);
    if (op->kind == OP_EV_CLAIM)
        once_event_list_free(op->ev_list);
    if (op->kind == OP_RC_CLAIM)
        once_action_list_free(op->list);
    if (op->kind == OP_EV_INSERT)
        *op->inserted = 0;
    store_op_fail(op, code, "%s", why);
}

typedef enum batch_result { BATCH_OK, BATCH_RETRY, BATCH_FAILED, BATCH_BROKEN } batch_result;

static void send_simple(PGconn *c, const char *sql)
{
    PQsendQueryParams(c, sql, 0, NULL, NULL, NULL, NULL, 0);
}

/* One pipeline: BEGIN, the operations, COMMIT, sync; then every result.
 * Outputs are decoded as they come and voided unless COMMIT succeeded. */
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
    /* n + 2 queries were sent at most: BEGIN, the sent ops, COMMIT. */
    for (size_t q = 0; q < n + 2; q++) {
        size_t i = q - 1;
        if (q >= 1 && q <= n && !sent[i])
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
        } else if (q >= 1 && q <= n && !failed) {
            op_decode(ops[i], res);
        } else if (q == n + 1 && st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "ROLLBACK") == 0) {
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
            int rc = pg_open_conn(s, conn);
            if (rc < 0) {
                char why[ONCE_DETAIL_MAX];
                snprintf(why, sizeof why, "%s", once_errdetail());
                for (size_t i = 0; i < n; i++)
                    op_void(ops[i], rc, why);
                return;
            }
        }
        double t0 = clock_mono_seconds();
        batch_result br = batch_pipeline(*conn, ops, n, err, sizeof err);
        if (br == BATCH_OK) {
            FAULT_POINT("after_commit");
            once_commit_hook hook = s->base.commit_hook;
            if (hook)
                hook(s->base.commit_hook_ctx, n, clock_mono_seconds() - t0);
            return;
        }
        char why[ONCE_DETAIL_MAX];
        snprintf(why, sizeof why, "store unavailable: %s", err);
        for (size_t i = 0; i < n; i++)
            op_void(ops[i], ONCE_ESTORE, why);
        if (br == BATCH_BROKEN) {
            /* The commit's fate is unknown: report failure, never success.
             * A reservation that did commit expires and is held; nothing
             * was sent for it. */
            PQfinish(*conn);
            *conn = NULL;
            pthread_mutex_lock(&s->mu);
            s->retry_at = 0; /* reconnect on the next batch, then back off */
            pthread_mutex_unlock(&s->mu);
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
    bq_item *items[BATCH_MAX];
    PGconn *conn = NULL;
    size_t n;
    while ((n = bq_take(&s->queue, items, BATCH_MAX)) > 0) {
        store_op **ops = (store_op **)items;
        /* Tokens for claims: one per batch item, made off the caller. */
        for (size_t i = 0; i < n; i++) {
            if (ops[i]->kind == OP_EV_CLAIM && once_token_new(ops[i]->token_buf) == ONCE_OK)
                ops[i]->token = ops[i]->token_buf;
        }
        batch_run(s, &conn, ops, n);
        bq_finish(&s->queue, items, n);
    }
    PQfinish(conn);
    return NULL;
}

