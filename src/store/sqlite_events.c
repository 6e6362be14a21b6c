/*
 * sqlite_events.c — webhook events as SQLite statements: insert under the
 * unique (source, event_id), claims with receipts, ack / retry / dead,
 * redelivery and the retention sweep.
 *
 * A receipt is "<row id>.<32 hex>": the id finds the row without an index on
 * receipts, the random part proves the claim is the current one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_ops.h"

#define EV_COLS                                                                                         \
    "id, source, event_id, state, attempt, received_at, updated_at, next_at, claim_until, receipt, "     \
    "delivered_at, expires_at, content_type, headers, body, error, claimed_by"

enum {
    E_ID,
    E_SOURCE,
    E_EVENT_ID,
    E_STATE,
    E_ATTEMPT,
    E_RECEIVED,
    E_UPDATED,
    E_NEXT,
    E_CLAIM,
    E_RECEIPT,
    E_DELIVERED,
    E_EXPIRES,
    E_CTYPE,
    E_HEADERS,
    E_BODY,
    E_ERROR,
    E_CLAIMED_BY
};

static const char *const ev_sql[EV_COUNT] = {
    /* No conflict target: a duplicate id or a duplicate digest. */
    [EV_INSERT] = "INSERT INTO events (source, event_id, state, received_at, updated_at, next_at, retention_ms, "
                  "content_type, headers, body, digest) VALUES (?1, ?2, 'pending', ?3, ?3, ?3, ?4, ?5, ?6, ?7, ?8) "
                  "ON CONFLICT DO NOTHING",
    [EV_SELECT] = "SELECT " EV_COLS " FROM events WHERE source = ?1 AND event_id = ?2",
    [EV_EXISTS] = "SELECT id FROM events WHERE source = ?1 AND (event_id = ?2 OR digest = ?3)",
    [EV_SELECT_ID] = "SELECT " EV_COLS " FROM events WHERE id = ?1",
    [EV_DUE] = "SELECT id, coalesce(length(body), 0) + coalesce(length(CAST(headers AS BLOB)), 0) FROM events "
               "WHERE source = ?1 "
               "AND state = 'pending' AND next_at <= ?2 "
               "AND claim_until <= ?2 ORDER BY next_at, id LIMIT ?3",
    [EV_CLAIM] = "UPDATE events SET attempt = attempt + 1, receipt = ?2, claim_until = ?3, updated_at = ?4, "
                 "claimed_by = ?5 WHERE id = ?1",
    /* A retry ends the claim: its receipt can settle nothing any more. */
    [EV_SETTLE] = "UPDATE events SET state = ?2, claim_until = 0, next_at = ?3, updated_at = ?4, "
                  "receipt = CASE WHEN ?2 = 'pending' THEN NULL ELSE receipt END, "
                  "delivered_at = CASE WHEN ?2 = 'delivered' THEN ?4 ELSE delivered_at END, "
                  "expires_at = CASE WHEN ?2 = 'pending' THEN 0 ELSE ?4 + retention_ms END, "
                  "error = COALESCE(?5, error) WHERE id = ?1",
    [EV_LIST] = "SELECT " EV_COLS " FROM events WHERE id > ?1 AND (?2 IS NULL OR source = ?2) "
                "AND (?3 IS NULL OR state = ?3) ORDER BY id LIMIT ?4",
    [EV_REDELIVER] = "UPDATE events SET state = 'pending', next_at = ?2, claim_until = 0, receipt = NULL, "
                     "expires_at = 0, updated_at = ?2 WHERE id = ?1",
    [EV_SWEEP] = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE state IN ('delivered','dead') "
                 "AND expires_at > 0 AND expires_at <= ?1 LIMIT " STORE_SWEEP_ROWS_SQL ")",
};

static sqlite3_stmt *ev_stmt(sq_conn *c, store_op *op, enum sq_ev_stmt i)
{
    return sq_prepare(c, op, &c->ev[i], ev_sql[i]);
}

static int ev_decode(sqlite3_stmt *st, once_event *e)
{
    int ok = 1;
    memset(e, 0, sizeof *e);
    const char *state = (const char *)sqlite3_column_text(st, E_STATE);
    if (!state || once_event_state_parse(state, &e->state) < 0)
        return ONCE_ESTORE;
    e->source = sq_col_dup(st, E_SOURCE, NULL, &ok);
    e->event_id = sq_col_dup(st, E_EVENT_ID, NULL, &ok);
    e->attempt = sqlite3_column_int64(st, E_ATTEMPT);
    e->received_at = sqlite3_column_int64(st, E_RECEIVED);
    e->updated_at = sqlite3_column_int64(st, E_UPDATED);
    e->next_at = sqlite3_column_int64(st, E_NEXT);
    e->claim_until = sqlite3_column_int64(st, E_CLAIM);
    e->delivered_at = sqlite3_column_int64(st, E_DELIVERED);
    e->expires_at = sqlite3_column_int64(st, E_EXPIRES);
    e->content_type = sq_col_dup(st, E_CTYPE, NULL, &ok);
    e->headers = sq_col_dup(st, E_HEADERS, &e->headers_len, &ok);
    e->body = sq_col_dup(st, E_BODY, &e->body_len, &ok);
    e->error = sq_col_dup(st, E_ERROR, NULL, &ok);
    e->claimed_by = sq_col_dup(st, E_CLAIMED_BY, NULL, &ok);
    if (!ok || !e->source || !e->event_id) {
        once_event_free(e);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

/* ev_decode as sq_rows wants it: into an item of any kind. */
static int event_item(sqlite3_stmt *st, void *item)
{
    return ev_decode(st, item);
}

const sq_rows sq_event_rows = {event_item, sizeof(once_event), E_ID, {E_BODY, E_HEADERS, -1}, "event", "an event",
                               "list events"};

/* Is (source, event_id) stored? 1 yes, 0 no, -1 error (op failed). */
int sq_event_exists(sq_conn *c, store_op *op, const once_event_in *ev, int64_t *id)
{
    sqlite3_stmt *st = ev_stmt(c, op, EV_EXISTS);
    int found = sq_find(c, op, st, "event lookup",
                        SQ_VALS(SQ_TEXT(ev->source), SQ_TEXT(ev->event_id), SQ_TEXT(ev->digest)));
    *id = found == 1 ? sqlite3_column_int64(st, 0) : 0;
    sq_done(st);
    return found;
}

/* Steps the SELECT of op's event by name (source, event_id): 1 its row is
 * current on *out, 0 there is none, -1 op failed (what names the step). The
 * caller resets *out. */
static int ev_find(sq_conn *c, store_op *op, const char *what, sqlite3_stmt **out)
{
    *out = ev_stmt(c, op, EV_SELECT);
    return sq_find(c, op, *out, what, SQ_VALS(SQ_TEXT(op->scope), SQ_TEXT(op->event_id)));
}

/* Steps the SELECT of the event whose row id is id: 1 its row is current on
 * *out (the caller resets it), 0 there is none, -1 op failed (what names the
 * step). */
static int ev_find_id(sq_conn *c, store_op *op, int64_t id, const char *what, sqlite3_stmt **out)
{
    *out = ev_stmt(c, op, EV_SELECT_ID);
    int found = sq_find(c, op, *out, what, SQ_VALS(SQ_INT(id)));
    if (found != 1)
        sq_done(*out);
    return found;
}

static void op_insert(sq_conn *c, store_op *op)
{
    const once_event_in *ev = op->ev_in;
    sqlite3_stmt *st = sq_bind(ev_stmt(c, op, EV_INSERT), 1,
                               SQ_VALS(SQ_TEXT(ev->source), SQ_TEXT(ev->event_id), SQ_INT(op->now),
                                       SQ_INT(ev->retention_ms), SQ_TEXT(ev->content_type),
                                       SQ_TEXT_LEN(ev->headers, ev->headers_len), SQ_BLOB(ev->body, ev->body_len),
                                       SQ_TEXT(ev->digest)));
    if (sq_write_step(c, op, st, "insert event") < 0)
        return;
    /* The unique constraint decides: a duplicate changes nothing. */
    *op->inserted = sqlite3_changes(c->db) == 1;
    if (*op->inserted)
        c->last_event_id = sqlite3_last_insert_rowid(c->db);
    op->rc = ONCE_OK;
}

/* Fills the list with the rows of ids, receipts attached (claim). */
static int list_push(sq_conn *c, store_op *op, int64_t id, const char *receipt)
{
    sqlite3_stmt *st;
    int found = ev_find_id(c, op, id, "claim", &st);
    if (found == 0)
        store_op_fail(op, ONCE_ESTORE, "claimed event %lld vanished", (long long)id);
    if (found != 1)
        return -1;
    once_event *e = &op->ev_list->items[op->ev_list->count];
    int drc = ev_decode(st, e);
    sq_done(st);
    if (drc < 0) {
        store_op_fail(op, drc, "claim: cannot read an event");
        return -1;
    }
    snprintf(e->receipt, sizeof e->receipt, "%s", receipt);
    op->ev_list->count++;
    return 0;
}

static void op_claim(sq_conn *c, store_op *op)
{
    once_event_list *l = op->ev_list;
    l->items = calloc(op->max, sizeof *l->items);
    int64_t *ids = calloc(op->max, sizeof *ids);
    sqlite3_stmt *st = NULL;
    if (!l->items || !ids) {
        store_op_fail(op, ONCE_ENOMEM, "claim: out of memory");
        goto out;
    }
    if (!(st = sq_bind(ev_stmt(c, op, EV_DUE), 1, SQ_VALS(SQ_TEXT(op->scope), SQ_INT(op->now), SQ_INT(op->max)))))
        goto out;
    size_t n = 0, bytes = 0;
    int rc;
    while (n < op->max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        /* A claim stops where its bodies would pass ONCE_PAGE_BYTES. */
        size_t size = (size_t)sqlite3_column_int64(st, 1);
        if (n > 0 && bytes + size > ONCE_PAGE_BYTES) {
            rc = SQLITE_DONE;
            break;
        }
        bytes += size;
        ids[n++] = sqlite3_column_int64(st, 0);
    }
    sq_done(st);
    if (n < op->max && rc != SQLITE_DONE) {
        sq_fail_sql(op, c, rc, "claim");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char token[ONCE_TOKEN_LEN + 1], receipt[ONCE_RECEIPT_MAX];
        if ((rc = once_token_new(token)) < 0) {
            store_op_fail(op, rc, "claim: %s", once_errdetail());
            goto out;
        }
        snprintf(receipt, sizeof receipt, "%lld.%s", (long long)ids[i], token);
        st = sq_bind(ev_stmt(c, op, EV_CLAIM), 1,
                     SQ_VALS(SQ_INT(ids[i]), SQ_TEXT(receipt), SQ_INT(op->now + op->lease_ms), SQ_INT(op->now),
                             SQ_TEXT(op->who)));
        if (sq_write_step(c, op, st, "claim") < 0 || list_push(c, op, ids[i], receipt) < 0)
            goto out;
    }
    op->rc = ONCE_OK;
out:
    free(ids);
}

/* "<id>.<32 hex>" -> id; -1 when malformed. */
static int64_t receipt_id(const char *receipt)
{
    const char *dot = strchr(receipt, '.');
    if (!dot || dot == receipt || dot - receipt > 18 || strlen(dot + 1) != ONCE_TOKEN_LEN)
        return -1;
    int64_t id = 0;
    for (const char *p = receipt; p < dot; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        id = id * 10 + (*p - '0');
    }
    return id;
}

static void op_settle(sq_conn *c, store_op *op)
{
    int64_t id = receipt_id(op->receipt);
    if (id < 0) {
        store_op_fail(op, ONCE_EINVAL, "receipt: malformed");
        return;
    }
    sqlite3_stmt *st;
    int found = ev_find_id(c, op, id, "settle", &st);
    if (found == 0)
        store_op_fail(op, ONCE_ENOTFOUND, "no event for this receipt in %s", op->scope);
    if (found != 1)
        return;
    const char *source = (const char *)sqlite3_column_text(st, E_SOURCE);
    const char *current = (const char *)sqlite3_column_text(st, E_RECEIPT);
    const char *state = (const char *)sqlite3_column_text(st, E_STATE);
    int same_source = source && strcmp(source, op->scope) == 0;
    int current_receipt = current && strcmp(current, op->receipt) == 0;
    int pending = state && strcmp(state, "pending") == 0;
    int delivered = state && strcmp(state, "delivered") == 0;
    sq_done(st);
    if (!same_source) {
        store_op_fail(op, ONCE_ENOTFOUND, "no event for this receipt in %s", op->scope);
        return;
    }
    if (!current_receipt) {
        store_op_fail(op, ONCE_ESTALE, "the receipt is not the event's current claim (it was retried or claimed again)");
        return;
    }
    if (!pending) {
        if (op->ack && delivered)
            op->rc = ONCE_OK; /* a repeated ack */
        else
            store_op_fail(op, ONCE_ESTATE, "the event is %s", state ? state : "?");
        return;
    }
    const char *to = op->ack ? "delivered" : op->dead ? "dead" : "pending";
    int64_t next_at = op->ack || op->dead ? op->now : op->now + op->delay_ms;
    st = sq_bind(ev_stmt(c, op, EV_SETTLE), 1,
                 SQ_VALS(SQ_INT(id), SQ_TEXT(to), SQ_INT(next_at), SQ_INT(op->now), SQ_TEXT(op->text)));
    sq_write_finish(c, op, st, "settle event");
}

static void op_get(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st;
    int found = ev_find(c, op, "get event", &st);
    sq_finish_get(op, st, found, &sq_event_rows, op->event, op->event_id);
}

static void op_list(sq_conn *c, store_op *op)
{
    const once_event_list_req *r = op->ev_lreq;
    void *items = NULL;
    sqlite3_stmt *st = sq_bind(ev_stmt(c, op, EV_LIST), 2,
                               SQ_VALS(SQ_TEXT(r->source), SQ_TEXT(r->state ? once_event_state_name(r->state) : NULL)));
    if (!st)
        return;
    sq_read_page(c, op, st, &sq_event_rows, r->limit, &items, &op->ev_list->count, op->ev_list->next);
    op->ev_list->items = items;
}

static void op_redeliver(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st;
    int found = ev_find(c, op, "redeliver", &st);
    int64_t id = found == 1 ? sqlite3_column_int64(st, E_ID) : 0;
    sq_done(st);
    if (found == 0)
        store_op_fail(op, ONCE_ENOTFOUND, "no event %s/%s", op->scope, op->event_id);
    if (found == 1)
        sq_write_finish(c, op, sq_bind(ev_stmt(c, op, EV_REDELIVER), 1, SQ_VALS(SQ_INT(id), SQ_INT(op->now))),
                        "redeliver");
}

void sq_event_run(sq_conn *c, store_op *op)
{
    switch (op->kind) {
    case OP_EV_INSERT: op_insert(c, op); break;
    case OP_EV_CLAIM: op_claim(c, op); break;
    case OP_EV_SETTLE: op_settle(c, op); break;
    case OP_EV_GET: op_get(c, op); break;
    case OP_EV_LIST: op_list(c, op); break;
    case OP_EV_REDELIVER: op_redeliver(c, op); break;
    case OP_EV_SWEEP: sq_op_bulk(c, op, ev_stmt(c, op, EV_SWEEP), "sweep events"); break;
    default: store_op_fail(op, ONCE_EINVAL, "unknown operation %d", (int)op->kind); break;
    }
}
