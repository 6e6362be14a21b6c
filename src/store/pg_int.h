/*
 * pg_int.h — what the files of the PostgreSQL store share: the store's
 * state, its statements, parameters and rows, connections, and the write
 * path. Nothing outside src/store/pg_*.c includes it.
 */
#ifndef ONCE_STORE_PG_INT_H
#define ONCE_STORE_PG_INT_H

#include <pthread.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "store/op.h"
#include "store/pg_schema.h"
#include "store/stores.h"

#define WRITERS 4
#define BATCH_MAX 256
#define POOL_MAX 16
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SCHEMA_MAX 63

/* Columns of an action, in table order, starting at a result column. */
#define A_COLS                                                                                          \
    "id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at, expires_at, "    \
    "retention_ms, fingerprint, request, has_response, resp_status, resp_headers, resp_body, provider_id, " \
    "error, note, lookups, lookup_next_at, trail, resp_not_stored, approved_at, decided_by, decision_note, " \
    "agent, charges, waits_for_limit"
#define E_COLS                                                                                          \
    "id, source, event_id, state, attempt, received_at, updated_at, next_at, claim_until, receipt, "   \
    "delivered_at, expires_at, retention_ms, content_type, headers, body, error, claimed_by"

#define A_NCOLS 30 /* columns in A_COLS */
#define E_NCOLS 18 /* columns in E_COLS */

typedef struct stmt_def {
    const char *name;
    const char *sql;
} stmt_def;

/* Every statement, prepared on every connection (pg_write.c). */
extern const stmt_def pg_stmts[];
extern const size_t pg_nstmts;

typedef struct pg_store {
    store_head head;        /* first: the ledger sees a once_store, op.c the queue */
    char *url;              /* the URL for libpq (once_schema removed) */
    char *schema;           /* from ?once_schema=NAME, or NULL */
    pthread_t writers[WRITERS];
    int nwriters;

    pthread_mutex_t mu;     /* pool and reconnect state */
    pthread_cond_t pool_cv;
    PGconn *pool_free[POOL_MAX];
    size_t pool_nfree;
    size_t pool_nopen;
    int64_t retry_at;       /* no new connection before this (ms); 0 = now */
    int64_t backoff_ms;
    int probing;            /* a readiness probe is connecting through the back-off */
    int64_t probe_at;       /* when the last one began (ms) */
} pg_store;

/* The first line of libpq's message, which ends with a newline. */
const char *pg_msg(const char *m, char *buf, size_t len);

/* ---- connections (pg_conn.c) ---- */

/* How a connection may be made while the store backs off (pg_conn.c). */
#define PG_CONNECT_BACKOFF 0 /* not: fail at once */
#define PG_CONNECT_FORCE 1   /* always (opening the store) */
#define PG_CONNECT_PROBE 2   /* one at a time, at most every BACKOFF_MIN_MS (a ping) */

/* A connection (mode: PG_CONNECT_*), without statements. */
int pg_connect(pg_store *s, PGconn **out, int mode);
/* Prepares every statement on c (after the schema exists). */
int pg_prepare_all(PGconn *c);
/* A new connection with every statement prepared (mode: PG_CONNECT_*). */
int pg_open_conn(pg_store *s, PGconn **out, int mode);
/* Whether an idle connection may still be used (see pg_conn.c). */
int pg_alive(PGconn *c);

#define PARAMS_MAX 14 /* parameters of a statement, at the most */

/* Parameters of one statement: text values, and bytea in binary. own is a
 * value made for the statement (a reservation's charges as JSON), freed by
 * whoever sends it once sent (libpq copies what it sends). */
typedef struct params {
    const char *v[PARAMS_MAX];
    int len[PARAMS_MAX];
    int fmt[PARAMS_MAX];
    char num[PARAMS_MAX][24];
    int n;
    char *own;
} params;

/* ---- parameters and rows (pg_rows.c) ---- */

void p_text(params *p, const char *s);
void p_int(params *p, int64_t v);
void p_bool(params *p, int b);
void p_bytes(params *p, const void *data, size_t len);
/* A response as four parameters: whether there is one, its status, headers
 * and body (NULLs without one). */
void p_response(params *p, const once_response *r);
int64_t col_int(const PGresult *res, int row, int col);
int action_decode(const PGresult *res, int row, int c0, once_action *a);
int event_decode(const PGresult *res, int row, once_event *e);

/* A kind of row that the shared readers below decode into an array. */
typedef struct pg_rows {
    int (*decode)(const PGresult *res, int row, void *item); /* one row into item */
    size_t item_size;                                          /* of one item */
    int ncols;                                                 /* the row's columns */
    const char *noun;                                          /* one row, in details */
} pg_rows;

extern const pg_rows pg_action_rows;        /* A_COLS: once_action */
extern const pg_rows pg_event_rows;         /* E_COLS: once_event */
extern const pg_rows pg_claimed_event_rows; /* E_COLS with the claim's receipt kept */

/* Decodes the first rows of res, max at the most, into *items (a new array of
 * at least one item, the caller's even when a row fails) and *count. 0, or an
 * error with the detail "<what>: ...". */
int pg_decode_rows(const PGresult *res, size_t max, const pg_rows *rows, const char *what, void **items,
                   size_t *count);

/* Runs a read statement on a pooled connection (pg_conn.c). */
int read_exec(pg_store *s, const char *name, const params *p, PGresult **res);

/* One page of the list statement name ("list", "ev_list"): runs it with p
 * (its filters; the page's size and ONCE_PAGE_BYTES are appended here) and
 * decodes at most limit rows into *items and *count, with next the cursor of
 * the rest ("" when there is none). 0 or an error. */
int pg_read_page(pg_store *s, const char *name, params *p, const pg_rows *rows, size_t limit, void **items,
                 size_t *count, char next[ONCE_CURSOR_MAX]);

/* ---- the write path (pg_write.c) ---- */

/* A writer thread: takes batches off s->queue until it closes. */
void *pg_writer_main(void *arg);

#endif
