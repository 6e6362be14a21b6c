/*
 * sqlite_ops.h — one ledger operation as SQLite statements, run on a given
 * connection. The store decides which connection and which transaction; the
 * operations only know SQL and the state machine.
 */
#ifndef ONCE_STORE_SQLITE_OPS_H
#define ONCE_STORE_SQLITE_OPS_H

#include <sqlite3.h>

#include "ledger/internal.h"
#include "store/batchq.h"

enum sq_stmt {
    ST_INSERT,
    ST_SELECT,
    ST_REARM,
    ST_COMPLETE,
    ST_SET_STATE,
    ST_RESOLVE,
    ST_EXPIRE,
    ST_SWEEP,
    ST_HOLD_ALL,
    ST_LIST,
    ST_PING,
    ST_COUNT
};

/* A connection and its prepared statements (prepared on first use). Used by
 * one thread at a time. */
enum sq_ev_stmt {
    EV_INSERT,
    EV_SELECT,
    EV_SELECT_ID,
    EV_DUE,
    EV_CLAIM,
    EV_SETTLE,
    EV_LIST,
    EV_REDELIVER,
    EV_SWEEP,
    EV_COUNT
};

typedef struct sq_conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    sqlite3_stmt *ev[EV_COUNT];
} sq_conn;

/* Opens path with the connection settings once relies on. */
int sq_conn_open(sq_conn *c, const char *path);
void sq_conn_close(sq_conn *c);

typedef enum sq_op_kind {
    OP_RESERVE,
    OP_COMPLETE,
    OP_SETTLE,
    OP_RESOLVE,
    OP_EXPIRE,
    OP_HOLD,
    OP_SWEEP,
    OP_HOLD_ALL,
    OP_GET,
    OP_LIST,
    OP_PING,
    OP_EV_INSERT,
    OP_EV_CLAIM,
    OP_EV_SETTLE,
    OP_EV_GET,
    OP_EV_LIST,
    OP_EV_REDELIVER,
    OP_EV_SWEEP
} sq_op_kind;

/* One queued operation: its inputs, where its outputs go, and its result.
 * The caller owns it (on its stack) and sleeps until the writer is done. */
typedef struct sq_op {
    bq_item item; /* first: the queue links items */
    sq_op_kind kind;
    int64_t now;
    const char *scope;
    const char *key;
    const char *token;
    const char *text; /* error, note or reason */
    const char *provider_id;
    const once_reserve_req *rreq;
    const once_response *resp;
    once_state to;
    once_outcome outcome;
    const once_list_req *lreq;
    int64_t after_id;
    once_reservation *res;
    once_action *action;
    once_action_list *list;
    size_t count;
    /* webhook events */
    const once_event_in *ev_in;
    int *inserted;
    const char *event_id;
    const char *receipt;
    const once_event_list_req *ev_lreq;
    once_event *event;
    once_event_list *ev_list;
    size_t max;
    int64_t lease_ms;
    int64_t delay_ms;
    int ack;  /* OP_EV_SETTLE: 1 ack, 0 retry */
    int dead; /* OP_EV_SETTLE retry: give up */
    int rc;
    char detail[ONCE_DETAIL_MAX];
    /* Asynchronous operations only: the callback, and copies of what the
     * ledger passed on its stack. */
    once_cb cb;
    void *cb_ctx;
    once_reserve_req rreq_copy;
    once_event_in ev_in_copy;
    char token_buf[ONCE_TOKEN_LEN + 1];
} sq_op;

/* Runs op on c; sets op->rc (and op->detail on error). Writes happen in
 * whatever transaction c has open. */
void sq_op_run(sq_conn *c, sq_op *op);

/* The read-only part of a reservation: answers op from the row as it is
 * (COMPLETED, IN_FLIGHT, UNKNOWN, HELD) and returns 1, or returns 0 when the
 * reservation needs the writer (no row, released, expired). On error sets
 * op->rc and returns 1. */
int sq_reserve_read(sq_conn *c, sq_op *op);

/* Fails op with code and a detail. */
void sq_op_fail(sq_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- shared by the operation files ---- */

/* The statement in *slot, prepared from sql on first use; NULL (op failed)
 * when it cannot be prepared. */
sqlite3_stmt *sq_prepare(sq_conn *c, sq_op *op, sqlite3_stmt **slot, const char *sql);
/* Resets st so that it releases its read snapshot and its bindings. */
void sq_done(sqlite3_stmt *st);
int sq_bind_text(sqlite3_stmt *st, int i, const char *s);
int sq_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n);
/* Fails op with the connection's error for a SQLite result code. */
void sq_fail_sql(sq_op *op, sq_conn *c, int rc, const char *what);
/* Steps a bound write statement and resets it; 0, or -1 with op failed. */
int sq_write_step(sq_conn *c, sq_op *op, sqlite3_stmt *st, const char *what);
/* A heap copy of column i (text or blob), NULL for SQL NULL; *ok cleared
 * when an allocation fails. */
void *sq_col_dup(sqlite3_stmt *st, int i, size_t *len, int *ok);

/* The webhook event operations (sqlite_events.c). */
void sq_event_run(sq_conn *c, sq_op *op);

#endif
