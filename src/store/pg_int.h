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
    "error, note, lookups, lookup_next_at, trail"
#define E_COLS                                                                                          \
    "id, source, event_id, state, attempt, received_at, updated_at, next_at, claim_until, receipt, "   \
    "delivered_at, expires_at, retention_ms, content_type, headers, body, error"

#define A_NCOLS 23 /* columns in A_COLS */
#define E_NCOLS 17 /* columns in E_COLS */

typedef struct stmt_def {
    const char *name;
    const char *sql;
} stmt_def;

/* Every statement, prepared on every connection. */

/* Every statement, prepared on every connection (pg_write.c). */
extern const stmt_def pg_stmts[];
extern const size_t pg_nstmts;

typedef struct pg_store {
    struct once_store base; /* first: the ledger sees a once_store */
    char *url;              /* the URL for libpq (once_schema removed) */
    char *schema;           /* from ?once_schema=NAME, or NULL */
    batchq queue;
    pthread_t writers[WRITERS];
    int nwriters;

    pthread_mutex_t mu;     /* pool and reconnect state */
    pthread_cond_t pool_cv;
    PGconn *pool_free[POOL_MAX];
    size_t pool_nfree;
    size_t pool_nopen;
    int64_t retry_at;       /* no new connection before this (ms); 0 = now */
    int64_t backoff_ms;
} pg_store;

/* The first line of libpq's message, which ends with a newline. */
const char *pg_msg(const char *m, char *buf, size_t len);

/* ---- connections (pg_conn.c) ---- */

/* A connection (force: even while backing off), without statements. */
int pg_connect(pg_store *s, PGconn **out, int force);
/* Prepares every statement on c (after the schema exists). */
int pg_prepare_all(PGconn *c);
/* A new connection with every statement prepared. */
int pg_open_conn(pg_store *s, PGconn **out);
/* Whether an idle connection may still be used (see pg_conn.c). */
int pg_alive(PGconn *c);

/* Parameters of one statement: text values, and bytea in binary. */
typedef struct params {
    const char *v[10];
    int len[10];
    int fmt[10];
    char num[10][24];
    int n;
} params;

/* ---- parameters and rows (pg_rows.c) ---- */

void p_text(params *p, const char *s);
void p_int(params *p, int64_t v);
void p_bool(params *p, int b);
void p_bytes(params *p, const void *data, size_t len);
int64_t col_int(const PGresult *res, int row, int col);
void page_next(const PGresult *res, size_t limit, int total_col, char *next, size_t cap);
int action_decode(const PGresult *res, int row, int c0, once_action *a);
int event_decode(const PGresult *res, int row, once_event *e);

/* Runs a read statement on a pooled connection (pg_conn.c). */
int read_exec(pg_store *s, const char *name, const params *p, PGresult **res);

/* ---- the write path (pg_write.c) ---- */

/* The reservation answered by a row of once_reserve (the reserve statement). */
int reserve_from_row(store_op *op, once_action *a);

/* A writer thread: takes batches off s->queue until it closes. */
void *pg_writer_main(void *arg);

#endif
