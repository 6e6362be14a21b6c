/*
 * sqlite_ops.h — one ledger operation as SQLite statements, run on a given
 * connection. The store decides which connection and which transaction; the
 * operations only know SQL and the state machine.
 */
#ifndef ONCE_STORE_SQLITE_OPS_H
#define ONCE_STORE_SQLITE_OPS_H

#include <sqlite3.h>

#include "store/op.h"

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
    ST_RC_DUE,
    ST_RC_CLAIM,
    ST_RC_SETTLE,
    ST_RC_FAILED,
    ST_LIST,
    ST_PING,
    ST_RENEW,
    ST_SELECT_ID,
    ST_LIM_SUM,     /* limits: the use of one limit from a bucket on */
    ST_LIM_ROWS,    /* ... its buckets from one on, oldest first */
    ST_LIM_PRUNE,   /* ... its buckets before one, gone */
    ST_LIM_ADD,     /* ... an amount added to one bucket */
    ST_LIM_USE,     /* ... its use and oldest bucket holding anything */
    ST_SET_CHARGES, /* the charges an attempt drew */
    ST_COUNT
};

/* A connection and its prepared statements (prepared on first use). Used by
 * one thread at a time. */
enum sq_ev_stmt {
    EV_INSERT,
    EV_SELECT,
    EV_SELECT_ID,
    EV_EXISTS,
    EV_DUE,
    EV_CLAIM,
    EV_SETTLE,
    EV_LIST,
    EV_REDELIVER,
    EV_SWEEP,
    EV_COUNT
};

/* The statements of the approval operations (sqlite_approvals.c). */
enum sq_ap_stmt {
    AP_APPROVE,
    AP_DENY,
    AP_EXPIRE,
    AP_DUE,
    AP_CLAIM,
    AP_OLDEST,
    AP_COUNT
};

typedef struct sq_conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    sqlite3_stmt *ev[EV_COUNT];
    sqlite3_stmt *ap[AP_COUNT];
    int64_t last_event_id; /* the writer's: the newest events row it inserted (0 none yet) */
} sq_conn;

/* Opens path with the connection settings once relies on. */
int sq_conn_open(sq_conn *c, const char *path);
void sq_conn_close(sq_conn *c);

/* Runs op on c; sets op->rc (and op->detail on error). Writes happen in
 * whatever transaction c has open. */
void sq_op_run(sq_conn *c, store_op *op);

/* ---- shared by the operation files ---- */

/* The statement in *slot, prepared from sql on first use; NULL (op failed)
 * when it cannot be prepared. */
sqlite3_stmt *sq_prepare(sq_conn *c, store_op *op, sqlite3_stmt **slot, const char *sql);
/* Resets st so that it releases its read snapshot and its bindings (NULL:
 * nothing to do). */
void sq_done(sqlite3_stmt *st);

/* One value for a statement's parameter: text (NULL binds SQL NULL), text
 * of a given length, an integer, or a blob (NULL binds SQL NULL). Written
 * with the SQ_* makers below, never by hand. */
typedef struct sq_val {
    enum { SQ_V_TEXT, SQ_V_TEXT_LEN, SQ_V_INT, SQ_V_BLOB } type;
    const void *p;
    size_t n;
    int64_t i;
} sq_val;

#define SQ_TEXT(s) ((sq_val){.type = SQ_V_TEXT, .p = (s)})
#define SQ_TEXT_LEN(s, len) ((sq_val){.type = SQ_V_TEXT_LEN, .p = (s), .n = (len)})
#define SQ_INT(v) ((sq_val){.type = SQ_V_INT, .i = (int64_t)(v)})
#define SQ_BLOB(b, len) ((sq_val){.type = SQ_V_BLOB, .p = (b), .n = (len)})
/* A list of values as the two arguments sq_bind takes: the array and its
 * length. */
#define SQ_VALS(...) (const sq_val[]){__VA_ARGS__}, sizeof((const sq_val[]){__VA_ARGS__}) / sizeof(sq_val)

/* Binds the n values of v to st's parameters ?from, ?from+1, ... and
 * returns st; NULL (a statement that could not be prepared: op failed
 * already) is passed on untouched, so that a prepare, its bindings and its
 * step read as one expression: sq_write_finish(c, op, sq_bind(stmt(...),
 * 1, SQ_VALS(...)), "what"). The values are bound SQLITE_STATIC: they must
 * outlive the step. */
sqlite3_stmt *sq_bind(sqlite3_stmt *st, int from, const sq_val *v, size_t n);
int sq_bind_text(sqlite3_stmt *st, int i, const char *s);
int sq_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n);
/* Fails op with the connection's error for a SQLite result code. */
void sq_fail_sql(store_op *op, sq_conn *c, int rc, const char *what);
/* Steps a bound SELECT: 1 a row is current on st, 0 there is none, -1 op
 * failed (what names the step; NULL st: op failed already). The caller
 * resets st. */
int sq_step_row(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what);
/* Steps a bound write statement and resets it; 0, or -1 with op failed
 * (NULL st: op failed already). */
int sq_write_step(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what);
/* sq_write_step for an operation's last write: op succeeds when it does. */
void sq_write_finish(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what);
/* The one read of a single row that most lookups are: st (NULL: op failed
 * already) bound to the n values of v from ?1 and stepped (sq_step_row):
 * 1 a row is current on st, 0 none, -1 op failed. The caller resets st
 * (sq_done, which takes NULL). */
int sq_find(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what, const sq_val *v, size_t n);
/* A bulk operation (expire, sweep, the event sweep): st, prepared (NULL: op
 * failed already), gets now as ?1; op counts the rows it changed. */
void sq_op_bulk(sq_conn *c, store_op *op, sqlite3_stmt *st, const char *what);
/* A heap copy of column i (text or blob), NULL for SQL NULL; *ok cleared
 * when an allocation fails. */
void *sq_col_dup(sqlite3_stmt *st, int i, size_t *len, int *ok);

/* A kind of row that the shared readers below decode: actions, events. */
typedef struct sq_rows {
    int (*decode)(sqlite3_stmt *st, void *item); /* the current row into item */
    size_t item_size;                            /* of one item */
    int id_col;                                  /* the row id: a page's cursor */
    int size_cols[3];                            /* bytes that count against ONCE_PAGE_BYTES; -1 pads */
    const char *kind;                            /* "action", "event": in details */
    const char *noun;                            /* one row, in details */
    const char *list_what;                       /* a failed page, in details */
} sq_rows;

extern const sq_rows sq_action_rows; /* sqlite_ops.c */
extern const sq_rows sq_event_rows;  /* sqlite_events.c */

/* The end of a get by name: the row found on st (found 1) decoded into item,
 * or ENOTFOUND for scope/name (found 0; -1: op failed already). Resets st
 * (NULL: it could not be prepared). */
void sq_finish_get(store_op *op, sqlite3_stmt *st, int found, const sq_rows *rows, void *item, const char *name);

/* Reads a page of a list statement: st is prepared with its filters bound
 * (?2, ?3); this binds ?1, the id the page starts after (op->after_id), and
 * ?4, one row more than limit (it tells whether a next page exists). At most
 * limit rows go into *items (a new array, the caller's even when a row
 * fails) and *count, cut where their bodies would pass ONCE_PAGE_BYTES (one
 * row at least); next gets the cursor of the rest. Sets op->rc and returns
 * it; resets st. */
int sq_read_page(sq_conn *c, store_op *op, sqlite3_stmt *st, const sq_rows *rows, size_t limit, void **items,
                 size_t *count, char next[ONCE_CURSOR_MAX]);

/* The ledger's code for an SQLite result code. */
int sq_errcode(int rc);

/* The columns of an action's row that the state machine decides on. */
typedef struct sq_row_head {
    int64_t id;
    once_state state;
    int64_t attempt;
    char token[ONCE_TOKEN_LEN + 1];
    int64_t lease_expires_at;
    int64_t expires_at;
    int64_t retention_ms;
    int64_t approved_at; /* when a human approved it; 0 when not (yet) */
} sq_row_head;

/* Finds op's action (op->scope, op->key) and reads its head into *h: 0, or
 * -1 with op failed (ENOTFOUND when there is none, ESTORE when its state
 * cannot be read). */
int sq_row_need(sq_conn *c, store_op *op, sq_row_head *h);

/* The action of row id, decoded into *out: 0, or -1 with op failed. */
int sq_action_by_id(sq_conn *c, store_op *op, int64_t id, once_action *out);

/* The approval operations (sqlite_approvals.c): OP_DECIDE,
 * OP_EXPIRE_APPROVALS, OP_APPROVAL_CLAIM, OP_APPROVAL_OLDEST. */
void sq_approval_run(sq_conn *c, store_op *op);

/* The webhook event operations (sqlite_events.c). */
void sq_event_run(sq_conn *c, store_op *op);
/* 1 when (source, event_id) or the digest is stored (*id: a row that has
 * it), 0 when not, -1 on error (op failed). */
int sq_event_exists(sq_conn *c, store_op *op, const once_event_in *ev, int64_t *id);

#endif
