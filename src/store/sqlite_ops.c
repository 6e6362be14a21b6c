/*
 * sqlite_ops.c — the ledger's state machine as SQLite statements.
 *
 * Every operation here runs inside a transaction the store opened (a group
 * commit batch, or a read snapshot). Each does its checks against the row it
 * reads and at most one write, so a failing operation leaves nothing behind
 * and its batch can go on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "common/check.h"
#include "store/limits.h"
#include "store/sqlite_ops.h"

#define COLS                                                                                        \
    "id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at, expires_at, " \
    "retention_ms, fingerprint, request, has_response, resp_status, resp_headers, resp_body, "      \
    "provider_id, error, note, lookups, trail, resp_not_stored, approved_at, decided_by, decision_note, " \
    "agent, waits_for_limit"

enum {
    C_ID,
    C_SCOPE,
    C_KEY,
    C_STATE,
    C_ATTEMPT,
    C_TOKEN,
    C_CREATED,
    C_UPDATED,
    C_LEASE,
    C_EXPIRES,
    C_RETENTION,
    C_FP,
    C_REQUEST,
    C_HAS_RESP,
    C_RESP_STATUS,
    C_RESP_HEADERS,
    C_RESP_BODY,
    C_PROVIDER,
    C_ERROR,
    C_NOTE,
    C_LOOKUPS,
    C_TRAIL,
    C_RESP_NOT_STORED,
    C_APPROVED,
    C_DECIDED_BY,
    C_DECISION_NOTE,
    C_AGENT,
    C_WAITS_FOR_LIMIT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at, "
                  "lease_expires_at, expires_at, retention_ms, fingerprint, request, agent, waits_for_limit) "
                  "VALUES (?1, ?2, ?9, 1, ?3, ?4, ?4, ?5, 0, ?6, ?7, ?8, ?10, ?11) "
                  "ON CONFLICT (scope, key) DO NOTHING",
    [ST_SELECT] = "SELECT " COLS " FROM actions WHERE scope = ?1 AND key = ?2",
    [ST_REARM] = "UPDATE actions SET state = ?8, attempt = attempt + 1, token = ?2, updated_at = ?3, "
                 "lease_expires_at = ?4, expires_at = 0, retention_ms = ?5, fingerprint = ?6, request = ?7, "
                 "has_response = 0, resp_status = NULL, resp_headers = NULL, resp_body = NULL, "
                 "provider_id = NULL, error = NULL, note = NULL, lookups = 0, lookup_next_at = 0, "
                 "resp_not_stored = 0, approved_at = 0, decided_by = NULL, decision_note = NULL, agent = ?9, "
                 "waits_for_limit = ?10, charges = NULL WHERE id = ?1",
    [ST_COMPLETE] = "UPDATE actions SET state = 'completed', has_response = ?2, resp_status = ?3, "
                    "resp_headers = ?4, resp_body = ?5, provider_id = ?6, note = COALESCE(note, ?7), "
                    "updated_at = ?8, expires_at = ?8 + retention_ms, resp_not_stored = ?9 WHERE id = ?1",
    /* A hold keeps the error that made the action unknown after its reason. */
    [ST_SET_STATE] = "UPDATE actions SET state = ?2, error = CASE WHEN ?3 IS NULL THEN error "
                     "WHEN error IS NULL OR ?2 <> 'held' THEN ?3 ELSE ?3 || ' (after: ' || error || ')' END, "
                     "updated_at = ?4, expires_at = ?5 WHERE id = ?1",
    [ST_RESOLVE] = "UPDATE actions SET state = ?2, provider_id = ?3, note = ?4, has_response = 0, "
                   "resp_status = NULL, resp_headers = NULL, resp_body = NULL, updated_at = ?5, "
                   "expires_at = ?5 + retention_ms WHERE id = ?1",
    [ST_EXPIRE] = "UPDATE actions SET state = 'unknown', error = '" ONCE_REASON_LEASE_EXPIRED "', updated_at = ?1 "
                  "WHERE state = 'pending' AND lease_expires_at <= ?1",
    [ST_SWEEP] = "DELETE FROM actions WHERE id IN (SELECT id FROM actions WHERE state IN "
                 "('completed','released','denied') AND expires_at > 0 AND expires_at <= ?1 "
                 "LIMIT " STORE_SWEEP_ROWS_SQL ")",
    [ST_HOLD_ALL] = "UPDATE actions SET state = 'held', error = CASE WHEN ?2 IS NULL THEN error "
                    "WHEN error IS NULL THEN ?2 ELSE ?2 || ' (after: ' || error || ')' END, updated_at = ?1 "
                    "WHERE state = 'unknown' AND (?3 IS NULL OR scope = ?3) "
                    "AND (?4 IS NULL OR instr(',' || ?4 || ',', ',' || scope || ',') = 0)",
    [ST_RC_DUE] = "SELECT id FROM actions WHERE state = 'unknown' AND scope = ?1 AND lookup_next_at <= ?2 "
                  "AND updated_at <= ?2 - ?4 ORDER BY id LIMIT ?3",
    [ST_RC_CLAIM] = "UPDATE actions SET lookup_next_at = ?2 WHERE id = ?1",
    [ST_RC_SETTLE] = "UPDATE actions SET state = ?2, has_response = ?3, resp_status = ?4, resp_headers = ?5, "
                     "resp_body = ?6, provider_id = ?7, updated_at = ?8, expires_at = ?8 + retention_ms, "
                     "lookups = lookups + 1, "
                     "note = COALESCE(note, 'reconciled by a provider lookup'), "
                     "trail = CASE WHEN ?9 IS NULL THEN trail WHEN trail IS NULL THEN ?9 ELSE trail || char(10) || ?9 END "
                     "WHERE id = ?1",
    [ST_RC_FAILED] = "UPDATE actions SET lookups = lookups + 1, lookup_next_at = ?2, updated_at = ?3, "
                     "state = CASE WHEN ?4 THEN 'held' ELSE state END, "
                     "error = CASE WHEN ?4 AND ?5 IS NOT NULL THEN ?5 ELSE error END, "
                     "trail = CASE WHEN ?5 IS NULL THEN trail WHEN trail IS NULL THEN ?5 ELSE trail || char(10) || ?5 END "
                     "WHERE id = ?1",
    [ST_LIST] = "SELECT " COLS " FROM actions WHERE id > ?1 AND (?2 IS NULL OR state = ?2) "
                "AND (?3 IS NULL OR scope = ?3) AND (?5 IS NULL OR agent = ?5) ORDER BY id LIMIT ?4",
    [ST_PING] = "SELECT 1",
    [ST_RENEW] = "UPDATE actions SET lease_expires_at = ?2 WHERE id = ?1",
    [ST_SELECT_ID] = "SELECT " COLS " FROM actions WHERE id = ?1",
    [ST_LIM_SUM] = "SELECT total(used) FROM limit_use WHERE lim = ?1 AND bucket >= ?2",
    [ST_LIM_ROWS] = "SELECT bucket, used FROM limit_use WHERE lim = ?1 AND bucket >= ?2 ORDER BY bucket",
    [ST_LIM_PRUNE] = "DELETE FROM limit_use WHERE lim = ?1 AND bucket < ?2",
    [ST_LIM_ADD] = "INSERT INTO limit_use (lim, bucket, used) VALUES (?1, ?2, ?3) "
                   "ON CONFLICT (lim, bucket) DO UPDATE SET used = used + excluded.used",
    [ST_LIM_USE] = "SELECT total(used), min(CASE WHEN used > 0 THEN bucket END) FROM limit_use "
                   "WHERE lim = ?1 AND bucket >= ?2",
    [ST_SET_CHARGES] = "UPDATE actions SET charges = ?2 WHERE id = ?1",
};

int sq_errcode(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_NOTADB: return ONCE_ENOTDB;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ONCE_EBUSY;
    case SQLITE_NOMEM: return ONCE_ENOMEM;
    default: return ONCE_ESTORE;
    }
}

void sq_fail_sql(store_op *op, sq_conn *c, int rc, const char *what)
{
    store_op_fail(op, sq_errcode(rc), "%s: %s", what, sqlite3_errmsg(c->db));
}

int sq_conn_open(sq_conn *c, const char *path)
{
    memset(c, 0, sizeof *c);
    /* The file holds request and response bodies: created for its owner
     * only, whatever the umask (SQLite gives the -wal and -shm files the
     * database file's mode). An existing file is left as it is. */
    if (strcmp(path, ":memory:") != 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0)
            close(fd);
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        int code = sq_errcode(rc);
        once_fail(code == ONCE_ENOTDB ? code : ONCE_ESTORE, "cannot open '%s': %s", path,
                  c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite3_close(c->db);
        c->db = NULL;
        return code == ONCE_ENOTDB ? code : ONCE_ESTORE;
    }
    /* Another process (the CLI beside the server) may hold the write lock
     * for a moment; wait for it rather than fail. */
    sqlite3_busy_timeout(c->db, 5000);
    sqlite3_extended_result_codes(c->db, 1);
    return ONCE_OK;
}

void sq_conn_close(sq_conn *c)
{
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(c->st[i]);
    for (int i = 0; i < EV_COUNT; i++)
        sqlite3_finalize(c->ev[i]);
    for (int i = 0; i < AP_COUNT; i++)
        sqlite3_finalize(c->ap[i]);
    sqlite3_close(c->db);
    memset(c, 0, sizeof *c);
}

sqlite3_stmt *sq_prepare(sq_conn *c, store_op *op, sqlite3_stmt **slot, const char *sql)
{
    if (!*slot) {
        int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL);
        if (rc != SQLITE_OK) {
            sq_fail_sql(op, c, rc, "prepare");
            *slot = NULL;
            return NULL;
        }
    }
    return *slot;
}

/* The ledger statement i, ready for binding. */
static sqlite3_stmt *stmt(sq_conn *c, store_op *op, enum sq_stmt i)
{
    return sq_prepare(c, op, &c->st[i], stmt_sql[i]);
}

void sq_done(sqlite3_stmt *st)
{
    if (!st)
        return;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Every operation binds its parameters through here: one place knows how
 * each kind of value, and NULL, reaches SQLite. */
sqlite3_stmt *sq_bind(sqlite3_stmt *st, int from, const sq_val *v, size_t n)
{
    for (size_t k = 0; st && k < n; k++) {
        int i = from + (int)k;
        switch (v[k].type) {
        case SQ_V_TEXT: sq_bind_text(st, i, v[k].p); break;
        case SQ_V_TEXT_LEN:
            if (v[k].p)
                sqlite3_bind_text64(st, i, v[k].p, v[k].n, SQLITE_STATIC, SQLITE_UTF8);
            else
                sqlite3_bind_null(st, i);
            break;
        case SQ_V_INT: sqlite3_bind_int64(st, i, v[k].i); break;
        case SQ_V_BLOB: sq_bind_blob(st, i, v[k].p, v[k].n); break;
        }
    }
    return st;
}

int sq_bind_text(sqlite3_stmt *st, int i, const char *s)
{
    return s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

int sq_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n)
{
    if (!p)
        return sqlite3_bind_null(st, i);
    return sqlite3_bind_blob64(st, i, n ? p : "", n, SQLITE_STATIC);
}

static int head_read(sqlite3_stmt *st, sq_row_head *h)
{
    h->id = sqlite3_column_int64(st, C_ID);
    const char *state = (const char *)sqlite3_column_text(st, C_STATE);
    if (!state || once_state_parse(state, &h->state) < 0)
        return ONCE_ESTORE;
    h->attempt = sqlite3_column_int64(st, C_ATTEMPT);
    const char *tok = (const char *)sqlite3_column_text(st, C_TOKEN);
    snprintf(h->token, sizeof h->token, "%s", tok ? tok : "");
    h->lease_expires_at = sqlite3_column_int64(st, C_LEASE);
    h->expires_at = sqlite3_column_int64(st, C_EXPIRES);
    h->retention_ms = sqlite3_column_int64(st, C_RETENTION);
    h->approved_at = sqlite3_column_int64(st, C_APPROVED);
    return ONCE_OK;
}

/* A heap copy of a text/blob column, or NULL for SQL NULL. *ok is cleared
 * when an allocation fails. */
void *sq_col_dup(sqlite3_stmt *st, int i, size_t *len, int *ok)
{
    if (len)
        *len = 0;
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    const void *p = sqlite3_column_blob(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    void *copy = once_memdup0(p ? p : "", n);
    if (!copy)
        *ok = 0;
    if (len)
        *len = n;
    return copy;
}

static int row_decode(sqlite3_stmt *st, once_action *a)
{
    sq_row_head h;
    if (head_read(st, &h) < 0)
        return ONCE_ESTORE;
    int ok = 1;
    memset(a, 0, sizeof *a);
    a->scope = sq_col_dup(st, C_SCOPE, NULL, &ok);
    a->key = sq_col_dup(st, C_KEY, NULL, &ok);
    a->state = h.state;
    a->attempt = h.attempt;
    a->created_at = sqlite3_column_int64(st, C_CREATED);
    a->updated_at = sqlite3_column_int64(st, C_UPDATED);
    a->lease_expires_at = h.lease_expires_at;
    a->expires_at = h.expires_at;
    a->retention_ms = h.retention_ms;
    a->fingerprint = sq_col_dup(st, C_FP, NULL, &ok);
    a->request = sq_col_dup(st, C_REQUEST, &a->request_len, &ok);
    a->has_response = sqlite3_column_int(st, C_HAS_RESP) != 0;
    a->response.status = sqlite3_column_int(st, C_RESP_STATUS);
    a->response.headers = sq_col_dup(st, C_RESP_HEADERS, &a->response.headers_len, &ok);
    a->response.body = sq_col_dup(st, C_RESP_BODY, &a->response.body_len, &ok);
    a->provider_id = sq_col_dup(st, C_PROVIDER, NULL, &ok);
    a->error = sq_col_dup(st, C_ERROR, NULL, &ok);
    a->note = sq_col_dup(st, C_NOTE, NULL, &ok);
    a->lookups = sqlite3_column_int64(st, C_LOOKUPS);
    a->trail = sq_col_dup(st, C_TRAIL, NULL, &ok);
    a->response.body_not_stored = sqlite3_column_int64(st, C_RESP_NOT_STORED);
    a->approved_at = sqlite3_column_int64(st, C_APPROVED);
    a->decided_by = sq_col_dup(st, C_DECIDED_BY, NULL, &ok);
    a->decision_note = sq_col_dup(st, C_DECISION_NOTE, NULL, &ok);
    a->agent = sq_col_dup(st, C_AGENT, NULL, &ok);
    a->waits_for_limit = sqlite3_column_int(st, C_WAITS_FOR_LIMIT) != 0;
    if (!ok || !a->scope || !a->key) {
        once_action_free(a);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

/* Steps the SELECT of (scope, key). 1: a row is current on st; 0: no row;
 * -1: error (op failed). The caller must sq_done(st). */
static int row_find(sq_conn *c, store_op *op, sqlite3_stmt **out)
{
    *out = stmt(c, op, ST_SELECT);
    return sq_find(c, op, *out, "select", SQ_VALS(SQ_TEXT(op->scope), SQ_TEXT(op->key)));
}

/* Every operation on a named action starts here: one place tells a row, none
 * and a row that cannot be read apart. */
int sq_row_need(sq_conn *c, store_op *op, sq_row_head *h)
{
    sqlite3_stmt *st;
    int found = row_find(c, op, &st);
    if (found == 1 && head_read(st, h) < 0) {
        store_op_fail(op, ONCE_ESTORE, "the row of %s/%s has an invalid state", op->scope, op->key);
        found = -1;
    }
    sq_done(st);
    if (found == 0)
        store_op_fail(op, ONCE_ENOTFOUND, "no action %s/%s", op->scope, op->key);
    return found == 1 ? 0 : -1;
}

/* row_need, then ONCE_ESTATE unless the row is UNKNOWN (or HELD too, when
 * held_too): the operator's and the reconciler's transitions start only
 * there. verb completes "only unknown actions are ...". */
static int row_need_unknown(sq_conn *c, store_op *op, sq_row_head *h, int held_too, const char *verb)
{
    if (sq_row_need(c, op, h) < 0)
        return -1;
    if (h->state == ONCE_STATE_UNKNOWN || (held_too && h->state == ONCE_STATE_HELD))
        return 0;
    store_op_fail(op, ONCE_ESTATE, "%s/%s is %s: only unknown%s actions are %s", op->scope, op->key,
                  once_state_name(h->state), held_too ? " or held" : "", verb);
    return -1;
}

/* Every lookup by a key steps the same way: one place tells a row, none
 * and an error apart. */
int sq_step_row(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what)
{
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    sq_fail_sql(op, c, rc, what);
    return -1;
}

int sq_write_step(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what)
{
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    sq_done(st);
    if (rc != SQLITE_DONE) {
        sq_fail_sql(op, c, rc, what);
        return -1;
    }
    return 0;
}

/* A bound lookup is a step: the binding and the step read as one call. */
int sq_find(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what, const sq_val *v, size_t n)
{
    return sq_step_row(c, op, sq_bind(st, 1, v, n), what);
}

/* Most operations end with one write whose success is theirs. */
void sq_write_finish(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what)
{
    if (sq_write_step(c, op, st, what) == 0)
        op->rc = ONCE_OK;
}

/* The bulk writes answer with the rows they changed. */
static void write_count(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what)
{
    if (sq_write_step(c, op, st, what) == 0) {
        op->count = (size_t)sqlite3_changes(c->db);
        op->rc = ONCE_OK;
    }
}

/* The sweeps of both tables are one statement bound to now. */
void sq_op_bulk(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what)
{
    write_count(c, op, sq_bind(st, 1, SQ_VALS(SQ_INT(op->now))), what);
}

/* Gets of actions and of events end alike: one home for the answer. */
void sq_finish_get(store_op *op, sqlite3_stmt *st, int found, const sq_rows *rows, void *item, const char *name)
{
    if (found == 1) {
        int rc = rows->decode(st, item);
        if (rc < 0)
            store_op_fail(op, rc, "cannot read the %s", rows->kind);
        else
            op->rc = ONCE_OK;
    } else if (found == 0) {
        store_op_fail(op, ONCE_ENOTFOUND, "no %s %s/%s", rows->kind, op->scope, name);
    }
    sq_done(st);
}

/* The bytes of the current row that count against ONCE_PAGE_BYTES. */
static size_t row_bytes(sqlite3_stmt *st, const sq_rows *rows)
{
    size_t size = 0;
    for (size_t i = 0; i < sizeof rows->size_cols / sizeof rows->size_cols[0]; i++) {
        if (rows->size_cols[i] >= 0)
            size += (size_t)sqlite3_column_bytes(st, rows->size_cols[i]);
    }
    return size;
}

/* Pages of actions and of events are cut alike: one loop for both. */
int sq_read_page(sq_conn *c, store_op *op, sqlite3_stmt *st, const sq_rows *rows, size_t limit, void **items,
                 size_t *count, char next[ONCE_CURSOR_MAX])
{
    unsigned char *v = calloc(limit, rows->item_size);
    *items = v;
    if (!v) {
        sq_done(st);
        store_op_fail(op, ONCE_ENOMEM, "list: out of memory");
        return op->rc;
    }
    sq_bind(st, 1, SQ_VALS(SQ_INT(op->after_id)));
    sq_bind(st, 4, SQ_VALS(SQ_INT(limit + 1)));
    int rc;
    int64_t last_id = 0;
    size_t bytes = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        /* A page stops at limit, or where its bodies would pass
         * ONCE_PAGE_BYTES (one row at least): the rest is the next page. */
        size_t size = row_bytes(st, rows);
        if (*count == limit || (*count > 0 && bytes + size > ONCE_PAGE_BYTES)) {
            snprintf(next, ONCE_CURSOR_MAX, "%lld", (long long)last_id);
            break;
        }
        bytes += size;
        int drc = rows->decode(st, v + *count * rows->item_size);
        if (drc < 0) {
            store_op_fail(op, drc, "list: cannot read %s", rows->noun);
            sq_done(st);
            return op->rc;
        }
        last_id = sqlite3_column_int64(st, rows->id_col);
        (*count)++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        sq_fail_sql(op, c, rc, rows->list_what);
    else
        op->rc = ONCE_OK;
    sq_done(st);
    return op->rc;
}

/* The statement i of a row's update, prepared, with the row's id as ?1;
 * NULL (op failed) when it cannot be prepared. */
static sqlite3_stmt *row_stmt(sq_conn *c, store_op *op, enum sq_stmt i, int64_t id)
{
    return sq_bind(stmt(c, op, i), 1, SQ_VALS(SQ_INT(id)));
}

/* A response as four parameters from ?i: whether there is one, its status,
 * headers and body (complete and reconcile store it alike). Returns st. */
static sqlite3_stmt *bind_response(sqlite3_stmt *st, int i, const once_response *resp)
{
    if (!resp)
        return sq_bind(st, i, SQ_VALS(SQ_INT(0)));
    return sq_bind(st, i,
                   SQ_VALS(SQ_INT(1), SQ_INT(resp->status), SQ_TEXT_LEN(resp->headers, resp->headers_len),
                           SQ_BLOB(resp->body, resp->body_len)));
}

/* Answers a reservation from an existing row when the row alone decides it
 * (ledger_decide_reservation). st is positioned on the row. Returns 1
 * answered, 0 needs a write. */
static int reserve_answer(sqlite3_stmt *st, const sq_row_head *h, store_op *op)
{
    once_reserve_status status;
    if (!ledger_decide_reservation(h->state, h->lease_expires_at, h->expires_at, op->now, op->rreq->retry_unknown,
                                   &status))
        return 0;
    int rc = row_decode(st, &op->res->action);
    if (rc < 0) {
        store_op_fail(op, rc, "reserve: cannot read the row");
        return 1;
    }
    ledger_answer_reservation(op->res, status, op->rreq->fingerprint);
    op->rc = ONCE_OK;
    return 1;
}

/* Moves the row to state to (asserted against the machine) with text as its
 * error (ST_SET_STATE says how) and expires_at; what names the write. 0, or
 * -1 with op failed. */
static int set_state(sq_conn *c, store_op *op, const sq_row_head *h, once_state to, const char *text,
                     int64_t expires_at, const char *what)
{
    ONCE_ASSERT(ledger_transition_allowed(h->state, to));
    sqlite3_stmt *st = row_stmt(c, op, ST_SET_STATE, h->id);
    return sq_write_step(
        c, op, sq_bind(st, 2, SQ_VALS(SQ_TEXT(once_state_name(to)), SQ_TEXT(text), SQ_INT(op->now), SQ_INT(expires_at))),
        what);
}

/* The state a reservation that may go ahead writes: pending, or (with an
 * approval_ttl, or past a limit with over_limit_approve: waits) awaiting a
 * human's approval. */
static once_state attempt_state(const store_op *op, int waits)
{
    return op->rreq->approval_ttl_ms > 0 || waits ? ONCE_STATE_AWAITING_APPROVAL : ONCE_STATE_PENDING;
}

/* A new attempt's columns from ?i on, in the order ST_INSERT and ST_REARM
 * share: its token (empty while it awaits approval), now, the end of its
 * lease (or the decision's deadline), the retention, the request's
 * fingerprint, the request, its state, its agent and whether it waits
 * because it was past a limit (waits). */
static sqlite3_stmt *bind_attempt(sqlite3_stmt *st, int i, const store_op *op, int waits)
{
    const once_reserve_req *r = op->rreq;
    int awaiting = attempt_state(op, waits) == ONCE_STATE_AWAITING_APPROVAL;
    int64_t until = op->now + (waits ? r->over_limit_ttl_ms : awaiting ? r->approval_ttl_ms : r->lease_ms);
    return sq_bind(st, i,
                   SQ_VALS(SQ_TEXT(awaiting ? "" : op->token), SQ_INT(op->now), SQ_INT(until),
                           SQ_INT(r->retention_ms), SQ_TEXT(r->fingerprint), SQ_BLOB(r->request, r->request_len),
                           SQ_TEXT(once_state_name(attempt_state(op, waits))), SQ_TEXT(r->agent), SQ_INT(waits)));
}

/* Answers a reservation with status from the row of (scope, key) as the
 * reservation left it: an expired lease it took for unknown, or a row it
 * left waiting for approval. */
static void answer_written(sq_conn *c, store_op *op, once_reserve_status status)
{
    sqlite3_stmt *st;
    int found = row_find(c, op, &st);
    if (found == 1 && row_decode(st, &op->res->action) == ONCE_OK) {
        ledger_answer_reservation(op->res, status, op->rreq->fingerprint);
        op->rc = ONCE_OK;
    } else if (found >= 0) {
        store_op_fail(op, ONCE_ESTORE, "reserve: cannot read back %s/%s", op->rreq->scope, op->rreq->key);
    }
    sq_done(st);
}

/* The end of a reservation that wrote a new attempt: RESERVED with its
 * token and lease, or the row when it waits for approval. */
static void reserved(sq_conn *c, store_op *op, int64_t attempt, int waits)
{
    if (attempt_state(op, waits) == ONCE_STATE_AWAITING_APPROVAL) {
        answer_written(c, op, ONCE_AWAITING_APPROVAL);
        return;
    }
    store_op_reserved(op, attempt, op->now + op->rreq->lease_ms);
    op->rc = ONCE_OK;
}

/* When enough of the counted buckets of charge ch (span sp, holding used
 * in all) have left its window for ch to fit: ms from now, oldest bucket
 * first; -1 when ch is larger than its limit. 0 on a failed read (op
 * failed). */
static int64_t limit_retry_after(sq_conn *c, store_op *op, const once_limit_charge *ch, const limit_span *sp,
                                 double used)
{
    if (!limit_fits(0, ch->amount, ch->max))
        return -1;
    sqlite3_stmt *st = sq_bind(stmt(c, op, ST_LIM_ROWS), 1, SQ_VALS(SQ_TEXT(ch->limit), SQ_INT(sp->first)));
    int64_t leaves = limit_leaves(sp, sp->now_bucket); /* the last one (a rounding residue aside) */
    int found;
    while ((found = sq_step_row(c, op, st, "limit")) == 1) {
        used -= sqlite3_column_double(st, 1);
        if (limit_fits(used, ch->amount, ch->max)) {
            leaves = limit_leaves(sp, sqlite3_column_int64(st, 0));
            break;
        }
    }
    sq_done(st);
    return found < 0 ? 0 : leaves - op->now;
}

/* The limits of a new attempt, in the order given (the writer's
 * transaction serializes them): 0 every charge fits, 1 one does not (the
 * reservation's over_limit and retry_after_ms say which and when), -1 op
 * failed. */
static int limits_check(sq_conn *c, store_op *op)
{
    const once_reserve_req *r = op->rreq;
    for (size_t i = 0; i < r->ncharges; i++) {
        const once_limit_charge *ch = &r->charges[i];
        limit_span sp = limit_span_at(ch->window_ms, op->now);
        sqlite3_stmt *st = stmt(c, op, ST_LIM_SUM);
        int found = sq_find(c, op, st, "limit", SQ_VALS(SQ_TEXT(ch->limit), SQ_INT(sp.first)));
        double used = found == 1 ? sqlite3_column_double(st, 0) : 0;
        sq_done(st);
        if (found < 0)
            return -1;
        if (limit_fits(used, ch->amount, ch->max))
            continue;
        op->res->over_limit = i;
        op->res->retry_after_ms = limit_retry_after(c, op, ch, &sp, used);
        return op->res->retry_after_ms == 0 ? -1 : 1;
    }
    return 0;
}

/* Draws every charge of the new attempt of row id from its bucket now
 * (a limit's buckets that left its window go first) and keeps what was
 * drawn on the row, to be given back if the attempt is released or denied
 * (the actions_give_back trigger). 0, or -1 with op failed. */
static int limits_draw(sq_conn *c, store_op *op, int64_t id)
{
    const once_reserve_req *r = op->rreq;
    int64_t buckets[ONCE_LIMIT_CHARGES_MAX];
    for (size_t i = 0; i < r->ncharges; i++) {
        const once_limit_charge *ch = &r->charges[i];
        limit_span sp = limit_span_at(ch->window_ms, op->now);
        buckets[i] = sp.now_bucket;
        sqlite3_stmt *st = sq_bind(stmt(c, op, ST_LIM_PRUNE), 1, SQ_VALS(SQ_TEXT(ch->limit), SQ_INT(sp.first)));
        if (sq_write_step(c, op, st, "limit") < 0)
            return -1;
        st = sq_bind(stmt(c, op, ST_LIM_ADD), 1, SQ_VALS(SQ_TEXT(ch->limit), SQ_INT(sp.now_bucket)));
        if (st)
            sqlite3_bind_double(st, 3, ch->amount);
        if (sq_write_step(c, op, st, "limit") < 0)
            return -1;
    }
    char *drawn = limits_json(r->charges, r->ncharges, buckets);
    if (!drawn) {
        store_op_fail(op, ONCE_ENOMEM, "reserve: out of memory");
        return -1;
    }
    int rc = sq_write_step(c, op, sq_bind(row_stmt(c, op, ST_SET_CHARGES, id), 2, SQ_VALS(SQ_TEXT(drawn))), "limit");
    free(drawn);
    return rc;
}

/* A new attempt of a reservation with charges (h: the row it re-arms, NULL
 * for a new row): its limits first; past one, OVER_LIMIT with nothing
 * written, or (over_limit_approve) an attempt that waits for a person
 * with nothing drawn; else the attempt, then its charges drawn. */
static void new_attempt(sq_conn *c, store_op *op, const sq_row_head *h)
{
    const once_reserve_req *r = op->rreq;
    int over = limits_check(c, op);
    if (over < 0)
        return;
    if (over && !r->over_limit_approve) {
        op->res->status = ONCE_OVER_LIMIT;
        op->rc = ONCE_OK;
        return;
    }
    sqlite3_stmt *st;
    if (h) {
        ONCE_ASSERT(ledger_transition_allowed(h->state, attempt_state(op, over)));
        st = bind_attempt(row_stmt(c, op, ST_REARM, h->id), 2, op, over);
    } else {
        st = bind_attempt(sq_bind(stmt(c, op, ST_INSERT), 1, SQ_VALS(SQ_TEXT(r->scope), SQ_TEXT(r->key))), 3, op,
                          over);
    }
    if (sq_write_step(c, op, st, "reserve") < 0)
        return;
    int64_t id = h ? h->id : sqlite3_last_insert_rowid(c->db);
    if (!over && r->ncharges && limits_draw(c, op, id) < 0)
        return;
    reserved(c, op, h ? h->attempt + 1 : 1, over);
}

/* Without charges the insert goes first and the unique constraint decides
 * (most keys are new); with charges the row is read first, since limits are
 * looked at only where a new attempt would be written, and nothing may be
 * written past one (the single writer makes the read and the write one). */
static void op_reserve(sq_conn *c, store_op *op)
{
    const once_reserve_req *r = op->rreq;
    sqlite3_stmt *st;
    if (!r->ncharges) {
        st = sq_bind(stmt(c, op, ST_INSERT), 1, SQ_VALS(SQ_TEXT(r->scope), SQ_TEXT(r->key)));
        if (sq_write_step(c, op, bind_attempt(st, 3, op, 0), "reserve") < 0)
            return;
        if (sqlite3_changes(c->db) == 1) {
            reserved(c, op, 1, 0);
            return;
        }
    }
    if (!(st = sq_bind(stmt(c, op, ST_SELECT), 1, SQ_VALS(SQ_TEXT(r->scope), SQ_TEXT(r->key)))))
        return;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE && r->ncharges) {
        sq_done(st);
        new_attempt(c, op, NULL);
        return;
    }
    sq_row_head h;
    if (rc != SQLITE_ROW || head_read(st, &h) < 0) {
        if (rc == SQLITE_ROW || rc == SQLITE_DONE)
            store_op_fail(op, ONCE_ESTORE, "reserve: the conflicting row of %s/%s cannot be read", r->scope, r->key);
        else
            sq_fail_sql(op, c, rc, "reserve");
        sq_done(st);
        return;
    }
    if (reserve_answer(st, &h, op)) {
        sq_done(st);
        return;
    }
    sq_done(st);
    if (h.state == ONCE_STATE_PENDING && !r->retry_unknown) {
        /* The lease ran out and no loop has noticed yet. The attempt may
         * have acted: never hand the key to a new attempt. */
        if (set_state(c, op, &h, ONCE_STATE_UNKNOWN, ONCE_REASON_LEASE_EXPIRED, 0, "reserve: expire lease") < 0)
            return;
        answer_written(c, op, ONCE_UNKNOWN);
        return;
    }
    /* RELEASED, COMPLETED or DENIED past its retention, or (natively
     * deduped) UNKNOWN, HELD or an expired lease: a new attempt (or one
     * that waits for approval). */
    new_attempt(c, op, &h);
}

/* Fencing: only the current attempt's token may settle the row. */
static int fence(store_op *op, const sq_row_head *h)
{
    if (strcmp(h->token, op->token) != 0) {
        store_op_fail(op, ONCE_ESTALE, "the token is not that of %s/%s's current attempt (%lld)", op->scope, op->key,
                   (long long)h->attempt);
        return -1;
    }
    return 0;
}

static void op_complete(sq_conn *c, store_op *op)
{
    sq_row_head h;
    if (sq_row_need(c, op, &h) < 0 || fence(op, &h) < 0)
        return;
    const char *late = NULL;
    switch (h.state) {
    case ONCE_STATE_PENDING: break;
    case ONCE_STATE_UNKNOWN: late = "late completion (the action was unknown)"; break;
    case ONCE_STATE_HELD: late = "late completion (the action was held)"; break;
    case ONCE_STATE_COMPLETED: op->rc = ONCE_OK; return; /* the first result stays */
    default:
        store_op_fail(op, ONCE_ESTATE, "%s/%s was released: it cannot be completed", op->scope, op->key);
        return;
    }
    ONCE_ASSERT(ledger_transition_allowed(h.state, ONCE_STATE_COMPLETED));
    sqlite3_stmt *st = bind_response(row_stmt(c, op, ST_COMPLETE, h.id), 2, op->resp);
    sq_bind(st, 6,
            SQ_VALS(SQ_TEXT(op->provider_id), SQ_TEXT(late), SQ_INT(op->now),
                    SQ_INT(op->resp ? op->resp->body_not_stored : 0)));
    sq_write_finish(c, op, st, "complete");
}

static void op_settle(sq_conn *c, store_op *op)
{
    sq_row_head h;
    if (sq_row_need(c, op, &h) < 0 || fence(op, &h) < 0)
        return;
    if (h.state == op->to) {
        op->rc = ONCE_OK; /* a repeated call changes nothing */
        return;
    }
    if (h.state != ONCE_STATE_PENDING) {
        store_op_fail(op, ONCE_ESTATE, "%s/%s is %s: only a pending action can become %s", op->scope, op->key,
                   once_state_name(h.state), once_state_name(op->to));
        return;
    }
    int64_t expires = op->to == ONCE_STATE_RELEASED ? op->now + h.retention_ms : 0;
    if (set_state(c, op, &h, op->to, op->text, expires, "update state") == 0)
        op->rc = ONCE_OK;
}

/* A live call's owner says it is still working: the lease moves on. */
static void op_renew(sq_conn *c, store_op *op)
{
    sq_row_head h;
    if (sq_row_need(c, op, &h) < 0 || fence(op, &h) < 0)
        return;
    if (h.state != ONCE_STATE_PENDING) {
        store_op_fail(op, ONCE_ESTATE, "%s/%s is %s: only a pending action's lease is renewed", op->scope, op->key,
                      once_state_name(h.state));
        return;
    }
    int64_t until = op->now + op->lease_ms;
    if (sq_write_step(c, op, sq_bind(row_stmt(c, op, ST_RENEW, h.id), 2, SQ_VALS(SQ_INT(until))), "renew") < 0)
        return;
    if (op->lease_out)
        *op->lease_out = until;
    op->rc = ONCE_OK;
}

/* How the operator's and the reconciler's updates start: row_need_unknown,
 * then statement i for the row (row_stmt). NULL when op failed. */
static sqlite3_stmt *unknown_row_stmt(sq_conn *c, store_op *op, sq_row_head *h, int held_too, const char *verb,
                                      enum sq_stmt i)
{
    if (row_need_unknown(c, op, h, held_too, verb) < 0)
        return NULL;
    return row_stmt(c, op, i, h->id);
}

static void op_resolve(sq_conn *c, store_op *op)
{
    sq_row_head h;
    sqlite3_stmt *st = unknown_row_stmt(c, op, &h, 1, "resolved", ST_RESOLVE);
    once_state to = ledger_outcome_state(op->outcome);
    ONCE_ASSERT(!st || ledger_transition_allowed(h.state, to));
    sq_bind(st, 2, SQ_VALS(SQ_TEXT(once_state_name(to)), SQ_TEXT(op->provider_id), SQ_TEXT(op->text), SQ_INT(op->now)));
    sq_write_finish(c, op, st, "resolve");
}

static void op_hold(sq_conn *c, store_op *op)
{
    sq_row_head h;
    if (row_need_unknown(c, op, &h, 0, "held") < 0)
        return;
    if (set_state(c, op, &h, ONCE_STATE_HELD, op->text, 0, "update state") == 0)
        op->rc = ONCE_OK;
}

static void op_hold_all(sq_conn *c, store_op *op)
{
    /* The except list travels in op->receipt. */
    sqlite3_stmt *st = sq_bind(stmt(c, op, ST_HOLD_ALL), 1,
                               SQ_VALS(SQ_INT(op->now), SQ_TEXT(op->text), SQ_TEXT(op->scope), SQ_TEXT(op->receipt)));
    write_count(c, op, st, "hold unknown");
}

/* Claims due lookups: each row's next lookup moves out by the lease, so no
 * other claimer (node) takes it meanwhile. */
static void op_rc_claim(sq_conn *c, store_op *op)
{
    once_action_list *l = op->list;
    l->items = calloc(op->max, sizeof *l->items);
    int64_t *ids = calloc(op->max, sizeof *ids);
    if (!l->items || !ids) {
        free(ids);
        store_op_fail(op, ONCE_ENOMEM, "reconcile: out of memory");
        return;
    }
    sqlite3_stmt *st = stmt(c, op, ST_RC_DUE);
    size_t n = 0;
    int rc = SQLITE_DONE;
    if (st) {
        /* ?4: how long an action stays unknown before its first lookup */
        sq_bind(st, 1, SQ_VALS(SQ_TEXT(op->scope), SQ_INT(op->now), SQ_INT(op->max), SQ_INT(op->delay_ms)));
        while (n < op->max && (rc = sqlite3_step(st)) == SQLITE_ROW)
            ids[n++] = sqlite3_column_int64(st, 0);
        sq_done(st);
    }
    if (!st || (rc != SQLITE_ROW && rc != SQLITE_DONE)) {
        if (st)
            sq_fail_sql(op, c, rc, "reconcile claim");
        free(ids);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        st = sq_bind(row_stmt(c, op, ST_RC_CLAIM, ids[i]), 2, SQ_VALS(SQ_INT(op->now + op->lease_ms)));
        if (sq_write_step(c, op, st, "reconcile claim") < 0)
            goto out;
    }
    /* Read them back through the row decoder, in id order. */
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *g = NULL;
        if (sq_prepare(c, op, &g, "SELECT " COLS " FROM actions WHERE id = ?1") == NULL)
            goto out;
        rc = sqlite3_step(sq_bind(g, 1, SQ_VALS(SQ_INT(ids[i]))));
        int drc = rc == SQLITE_ROW ? row_decode(g, &l->items[l->count]) : ONCE_ESTORE;
        sqlite3_finalize(g);
        if (drc < 0) {
            store_op_fail(op, drc, "reconcile claim: cannot read a row");
            goto out;
        }
        l->count++;
    }
    op->rc = ONCE_OK;
out:
    free(ids);
}

static void op_rc_settle(sq_conn *c, store_op *op)
{
    sq_row_head h;
    sqlite3_stmt *st = unknown_row_stmt(c, op, &h, 0, "reconciled", ST_RC_SETTLE);
    /* op carries a response and a provider id only for a completed outcome
     * (store_queue_reconcile). */
    sq_bind(st, 2, SQ_VALS(SQ_TEXT(once_state_name(ledger_outcome_state(op->outcome)))));
    bind_response(st, 3, op->resp);
    sq_bind(st, 7, SQ_VALS(SQ_TEXT(op->provider_id), SQ_INT(op->now), SQ_TEXT(op->text)));
    sq_write_finish(c, op, st, "reconcile");
}

static void op_rc_failed(sq_conn *c, store_op *op)
{
    sq_row_head h;
    sqlite3_stmt *st = unknown_row_stmt(c, op, &h, 0, "reconciled", ST_RC_FAILED);
    sq_bind(st, 2, SQ_VALS(SQ_INT(op->now + op->delay_ms), SQ_INT(op->now), SQ_INT(op->dead), SQ_TEXT(op->text)));
    sq_write_finish(c, op, st, "reconcile failed");
}

/* ---- reads ---- */

/* row_decode as sq_rows wants it: into an item of any kind. */
static int action_item(sqlite3_stmt *st, void *item)
{
    return row_decode(st, item);
}

const sq_rows sq_action_rows = {action_item, sizeof(once_action), C_ID, {C_REQUEST, C_RESP_BODY, C_RESP_HEADERS},
                                "action", "a row", "list"};

static void op_list(sq_conn *c, store_op *op)
{
    const once_list_req *r = op->lreq;
    void *items = NULL;
    sqlite3_stmt *st = sq_bind(stmt(c, op, ST_LIST), 2,
                               SQ_VALS(SQ_TEXT(r->state ? once_state_name(r->state) : NULL), SQ_TEXT(r->scope)));
    if (!sq_bind(st, 5, SQ_VALS(SQ_TEXT(r->agent))))
        return;
    sq_read_page(c, op, st, &sq_action_rows, r->limit, &items, &op->list->count, op->list->next);
    op->list->items = items;
}

int sq_action_by_id(sq_conn *c, store_op *op, int64_t id, once_action *out)
{
    sqlite3_stmt *st = row_stmt(c, op, ST_SELECT_ID, id);
    int found = sq_step_row(c, op, st, "select");
    int rc = found == 1 ? row_decode(st, out) : ONCE_ESTORE;
    sq_done(st);
    if (found == 1 && rc < 0)
        store_op_fail(op, rc, "cannot read the action");
    else if (found == 0)
        store_op_fail(op, ONCE_ESTORE, "the action %lld is gone", (long long)id);
    return found == 1 && rc == ONCE_OK ? 0 : -1;
}

/* An action by its name: the row, decoded (sq_finish_get). */
static void op_get(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st;
    int found = row_find(c, op, &st);
    sq_finish_get(op, st, found, &sq_action_rows, op->action, op->key);
}

/* The use of one budget now: what its counted buckets hold, and when the
 * oldest of them that holds anything leaves the window. */
static void op_limit_use(sq_conn *c, store_op *op)
{
    limit_span sp = limit_span_at(op->window_ms, op->now);
    sqlite3_stmt *st = stmt(c, op, ST_LIM_USE);
    int found = sq_find(c, op, st, "limit use", SQ_VALS(SQ_TEXT(op->text), SQ_INT(sp.first)));
    if (found == 1) {
        *op->used = sqlite3_column_double(st, 0);
        *op->retry_out = sqlite3_column_type(st, 1) == SQLITE_NULL
                             ? 0
                             : limit_leaves(&sp, sqlite3_column_int64(st, 1)) - op->now;
        op->rc = ONCE_OK;
    }
    sq_done(st);
}

static void op_ping(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st = stmt(c, op, ST_PING);
    if (!st)
        return;
    int rc = sqlite3_step(st);
    sq_done(st);
    if (rc != SQLITE_ROW)
        sq_fail_sql(op, c, rc, "ping");
    else
        op->rc = ONCE_OK;
}

void sq_op_run(sq_conn *c, store_op *op)
{
    op->rc = ONCE_ESTORE;
    op->detail[0] = '\0';
    switch (op->kind) {
    case OP_RESERVE: op_reserve(c, op); break;
    case OP_COMPLETE: op_complete(c, op); break;
    case OP_SETTLE: op_settle(c, op); break;
    case OP_RENEW: op_renew(c, op); break;
    case OP_RESOLVE: op_resolve(c, op); break;
    case OP_HOLD: op_hold(c, op); break;
    case OP_EXPIRE: sq_op_bulk(c, op, stmt(c, op, ST_EXPIRE), "expire leases"); break;
    case OP_SWEEP: sq_op_bulk(c, op, stmt(c, op, ST_SWEEP), "sweep"); break;
    case OP_HOLD_ALL: op_hold_all(c, op); break;
    case OP_RC_CLAIM: op_rc_claim(c, op); break;
    case OP_RC_SETTLE: op_rc_settle(c, op); break;
    case OP_RC_FAILED: op_rc_failed(c, op); break;
    case OP_GET: op_get(c, op); break;
    case OP_LIST: op_list(c, op); break;
    case OP_PING: op_ping(c, op); break;
    case OP_LIMIT_USE: op_limit_use(c, op); break;
    case OP_DECIDE:
    case OP_EXPIRE_APPROVALS:
    case OP_APPROVAL_CLAIM:
    case OP_APPROVAL_OLDEST: sq_approval_run(c, op); break;
    default: sq_event_run(c, op); break;
    }
    if (op->rc == ONCE_ESTORE && !op->detail[0])
        store_op_fail(op, ONCE_ESTORE, "store operation failed");
}
