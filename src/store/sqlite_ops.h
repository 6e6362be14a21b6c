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
typedef struct sq_conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
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
    OP_PING
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
    int rc;
    char detail[ONCE_DETAIL_MAX];
    /* Asynchronous operations only: the callback, and copies of what the
     * ledger passed on its stack. */
    once_cb cb;
    void *cb_ctx;
    once_reserve_req rreq_copy;
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

#endif
