/*
 * pg_store.c — the PostgreSQL store: many gateways, one database.
 *
 * Writes: a few writer threads, each with its own connection, take batches
 * from one queue (group commit). A batch goes out in pipeline mode — BEGIN,
 * one statement per operation (the state machine runs server-side, see
 * pg_schema.c), COMMIT, sync — in one round trip, and one commit answers
 * every caller in it. Operations are sorted by key so that two batches lock
 * rows in the same order and cannot deadlock each other; a deadlock or
 * serialization failure anyway reruns the batch, and any other error reruns
 * its operations one by one so that the bad one fails alone.
 *
 * Reads: a small pool of connections used in the caller's thread.
 *
 * The database may go away. A broken connection is dropped; reconnects back
 * off (100 ms doubling to 5 s) and, meanwhile, operations fail at once with
 * ONCE_ESTORE ("store unavailable") instead of waiting: the gateway answers
 * 503 and sends nothing upstream. Connect and query timeouts bound every
 * call, so no thread blocks forever; the store recovers by itself.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "ledger/fault.h"
#include "store/op.h"
#include "store/pg_schema.h"
#include "store/store.h"

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
static const stmt_def stmts[] = {
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
#define NSTMTS (sizeof stmts / sizeof stmts[0])

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

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The first line of libpq's message, which ends with a newline. */
static const char *pg_msg(const char *m, char *buf, size_t len)
{
    snprintf(buf, len, "%s", m && *m ? m : "unknown error");
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

/* ---- connections --------------------------------------------------------- */

static void notice_ignore(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Opens and prepares a connection. While the database was just found
 * unreachable, refuses at once (the back-off) instead of waiting again. */
static int pg_connect(pg_store *s, PGconn **out, int force)
{
    pthread_mutex_lock(&s->mu);
    int64_t now = mono_ms();
    if (!force && s->retry_at && now < s->retry_at) {
        pthread_mutex_unlock(&s->mu);
        return once_fail(ONCE_ESTORE, "store unavailable: PostgreSQL is unreachable (retrying)");
    }
    pthread_mutex_unlock(&s->mu);

    /* Our defaults come before the URL, so that the URL's own win. */
    const char *keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count",
                          "application_name", "dbname", NULL};
    const char *vals[] = {"5", "5", "2", "3", "once", s->url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    char msg[256];
    int rc = ONCE_OK;
    /* NOTICEs ("already exists, skipping") are not errors; libpq's default
     * prints them on stderr, in the middle of the CLI's output and the
     * gateway's JSON log. */
    if (c)
        PQsetNoticeProcessor(c, notice_ignore, NULL);
    if (!c) {
        rc = once_fail(ONCE_ENOMEM, "store: out of memory");
    } else if (PQstatus(c) != CONNECTION_OK) {
        rc = once_fail(ONCE_ESTORE, "store unavailable: %s", pg_msg(PQerrorMessage(c), msg, sizeof msg));
    } else {
        char sql[256];
        /* Bounded statements: a stuck query may not hold a thread forever.
         * synchronous_commit on: a commit is on the server's disk before
         * anyone is told a reservation or an outcome is durable. */
        snprintf(sql, sizeof sql, "SET statement_timeout = '30s'; SET synchronous_commit = on%s%s%s", s->schema ? "; SET search_path TO \"" : "",
                 s->schema ? s->schema : "", s->schema ? "\"" : "");
        PGresult *res = PQexec(c, sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = once_fail(ONCE_ESTORE, "store: %s", pg_msg(PQresultErrorMessage(res), msg, sizeof msg));
        PQclear(res);
    }
    pthread_mutex_lock(&s->mu);
    if (rc < 0) {
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (s->backoff_ms > BACKOFF_MAX_MS)
            s->backoff_ms = BACKOFF_MAX_MS;
        s->retry_at = mono_ms() + s->backoff_ms;
    } else {
        s->backoff_ms = 0;
        s->retry_at = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        PQfinish(c);
        return rc;
    }
    *out = c;
    return ONCE_OK;
}

/* Prepares every statement (after the schema exists). */
static int pg_prepare_all(PGconn *c)
{
    char msg[256];
    for (size_t i = 0; i < NSTMTS; i++) {
        PGresult *res = PQprepare(c, stmts[i].name, stmts[i].sql, 0, NULL);
        int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            once_fail(ONCE_ESTORE, "store: prepare %s: %s", stmts[i].name,
                      pg_msg(PQresultErrorMessage(res), msg, sizeof msg));
        PQclear(res);
        if (!ok)
            return ONCE_ESTORE;
    }
    return ONCE_OK;
}

static int pg_open_conn(pg_store *s, PGconn **out)
{
    PGconn *c;
    int rc = pg_connect(s, &c, 0);
    if (rc < 0)
        return rc;
    if ((rc = pg_prepare_all(c)) < 0) {
        PQfinish(c);
        return rc;
    }
    *out = c;
    return ONCE_OK;
}

/* Whether a connection that sat idle may still be used. A server that
 * restarted (or killed the session) has sent its FATAL and closed; reading
 * what is there reveals it before anything is sent on the connection, so a
 * request is never the one that finds out (DESIGN.md §7). libpq's socket is
 * non-blocking: this never waits. */
static int pg_alive(PGconn *c)
{
    return PQstatus(c) == CONNECTION_OK && PQconsumeInput(c) == 1 && PQstatus(c) == CONNECTION_OK;
}

/* Closes every idle pooled connection: one was found dead, so the server
 * went away and the others are as dead. Under s->mu. */
static void pool_reset(pg_store *s)
{
    while (s->pool_nfree > 0) {
        PQfinish(s->pool_free[--s->pool_nfree]);
        s->pool_nopen--;
    }
}

static int pool_get(pg_store *s, PGconn **out)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->pool_nfree > 0) {
            PGconn *c = s->pool_free[--s->pool_nfree];
            if (pg_alive(c)) {
                *out = c;
                pthread_mutex_unlock(&s->mu);
                return ONCE_OK;
            }
            PQfinish(c);
            s->pool_nopen--;
            pool_reset(s);
            continue;
        }
        if (s->pool_nopen < POOL_MAX)
            break;
        pthread_cond_wait(&s->pool_cv, &s->mu);
    }
    s->pool_nopen++;
    pthread_mutex_unlock(&s->mu);
    int rc = pg_open_conn(s, out);
    if (rc < 0) {
        pthread_mutex_lock(&s->mu);
        s->pool_nopen--;
        pthread_cond_signal(&s->pool_cv);
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* Returns a connection, or drops it when it broke. */
static void pool_put(pg_store *s, PGconn *c)
{
    int broken = PQstatus(c) != CONNECTION_OK;
    if (broken)
        PQfinish(c);
    pthread_mutex_lock(&s->mu);
    if (broken)
        s->pool_nopen--;
    else
        s->pool_free[s->pool_nfree++] = c;
    pthread_cond_signal(&s->pool_cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- parameters and rows ---------------------------------------------------- */

/* Parameters of one statement: text values, and bytea in binary. */
typedef struct params {
    const char *v[10];
    int len[10];
    int fmt[10];
    char num[10][24];
    int n;
} params;

static void p_text(params *p, const char *s)
{
    p->v[p->n] = s;
    p->len[p->n] = 0;
    p->fmt[p->n] = 0;
    p->n++;
}

static void p_int(params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof p->num[0], "%lld", (long long)v);
    p_text(p, p->num[p->n]);
}

static void p_bool(params *p, int b)
{
    p_text(p, b ? "t" : "f");
}

static void p_bytes(params *p, const void *data, size_t len)
{
    p->v[p->n] = data ? (const char *)data : NULL;
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

static void *col_text(const PGresult *res, int row, int col, int *ok)
{
    if (PQgetisnull(res, row, col))
        return NULL;
    void *v = once_memdup0(PQgetvalue(res, row, col), (size_t)PQgetlength(res, row, col));
    if (!v)
        *ok = 0;
    return v;
}

static void *col_bytea(const PGresult *res, int row, int col, size_t *len, int *ok)
{
    *len = 0;
    if (PQgetisnull(res, row, col))
        return NULL;
    size_t n = 0;
    unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, col), &n);
    if (!raw) {
        *ok = 0;
        return NULL;
    }
    void *v = once_memdup0(raw, n);
    PQfreemem(raw);
    if (!v)
        *ok = 0;
    *len = n;
    return v;
}

static int64_t col_int(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* The cursor after a page of the "list" or "ev_list" statements: the last
 * row's id when the page was full (the probe row beyond limit came back)
 * or cut by ONCE_PAGE_BYTES (fewer rows came back than the page held,
 * which the column total_col says). */
static void page_next(const PGresult *res, size_t limit, int total_col, char *next, size_t cap)
{
    int n = PQntuples(res);
    if (n == 0)
        return;
    int last;
    if ((size_t)n > limit)
        last = (int)limit - 1;
    else if (n < col_int(res, 0, total_col))
        last = n - 1;
    else
        return;
    snprintf(next, cap, "%lld", (long long)col_int(res, last, 0));
}

/* An action from columns c0.. (A_COLS order). */
static int action_decode(const PGresult *res, int row, int c0, once_action *a)
{
    int ok = 1;
    memset(a, 0, sizeof *a);
    if (once_state_parse(PQgetvalue(res, row, c0 + 3), &a->state) < 0)
        return ONCE_ESTORE;
    a->scope = col_text(res, row, c0 + 1, &ok);
    a->key = col_text(res, row, c0 + 2, &ok);
    a->attempt = col_int(res, row, c0 + 4);
    a->created_at = col_int(res, row, c0 + 6);
    a->updated_at = col_int(res, row, c0 + 7);
    a->lease_expires_at = col_int(res, row, c0 + 8);
    a->expires_at = col_int(res, row, c0 + 9);
    a->retention_ms = col_int(res, row, c0 + 10);
    a->fingerprint = col_text(res, row, c0 + 11, &ok);
    a->request = col_bytea(res, row, c0 + 12, &a->request_len, &ok);
    a->has_response = PQgetvalue(res, row, c0 + 13)[0] == 't';
    a->response.status = (int)col_int(res, row, c0 + 14);
    a->response.headers = col_text(res, row, c0 + 15, &ok);
    a->response.headers_len = a->response.headers ? strlen(a->response.headers) : 0;
    a->response.body = col_bytea(res, row, c0 + 16, &a->response.body_len, &ok);
    a->provider_id = col_text(res, row, c0 + 17, &ok);
    a->error = col_text(res, row, c0 + 18, &ok);
    a->note = col_text(res, row, c0 + 19, &ok);
    a->lookups = col_int(res, row, c0 + 20);
    a->trail = col_text(res, row, c0 + 22, &ok);
    if (!ok || !a->scope || !a->key) {
        once_action_free(a);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

static int event_decode(const PGresult *res, int row, once_event *e)
{
    int ok = 1;
    memset(e, 0, sizeof *e);
    if (once_event_state_parse(PQgetvalue(res, row, 3), &e->state) < 0)
        return ONCE_ESTORE;
    e->source = col_text(res, row, 1, &ok);
    e->event_id = col_text(res, row, 2, &ok);
    e->attempt = col_int(res, row, 4);
    e->received_at = col_int(res, row, 5);
    e->updated_at = col_int(res, row, 6);
    e->next_at = col_int(res, row, 7);
    e->claim_until = col_int(res, row, 8);
    e->delivered_at = col_int(res, row, 10);
    e->expires_at = col_int(res, row, 11);
    e->content_type = col_text(res, row, 13, &ok);
    e->headers = col_text(res, row, 14, &ok);
    e->headers_len = e->headers ? strlen(e->headers) : 0;
    e->body = col_bytea(res, row, 15, &e->body_len, &ok);
    e->error = col_text(res, row, 16, &ok);
    if (!ok || !e->source || !e->event_id) {
        once_event_free(e);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

/* ---- answers --------------------------------------------------------------- */

/* Decides a reservation from an existing row read outside the writer: the
 * same rules as once_reserve in pg_schema.c. 1 answered, 0 needs a write. */
static int reserve_from_row(store_op *op, once_action *a)
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
        double t0 = mono_seconds();
        batch_result br = batch_pipeline(*conn, ops, n, err, sizeof err);
        if (br == BATCH_OK) {
            FAULT_POINT("after_commit");
            once_commit_hook hook = s->base.commit_hook;
            if (hook)
                hook(s->base.commit_hook_ctx, n, mono_seconds() - t0);
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

static void *writer_main(void *arg)
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

/* ---- running operations ------------------------------------------------- */

static pg_store *pg(once_store *s)
{
    return (pg_store *)s;
}

static int run_write(pg_store *s, store_op *op)
{
    return store_op_submit_wait(&s->queue, op);
}

static int run_async(pg_store *s, const store_op *op, once_cb cb, void *ctx)
{
    return store_op_submit_async(&s->queue, op, cb, ctx);
}

/* Runs a read statement on a pooled connection. *res is the result (the
 * caller clears it) or NULL with the error set. */
static int read_exec(pg_store *s, const char *name, const params *p, PGresult **res)
{
    *res = NULL;
    /* A read is safe to run again: one whose connection broke under it
     * (the server went away between the check and the query) gets one more
     * try on a fresh connection. */
    for (int attempt = 0;; attempt++) {
        PGconn *c;
        int rc = pool_get(s, &c);
        if (rc < 0)
            return rc;
        PGresult *r = PQexecPrepared(c, name, p->n, p->v, p->len, p->fmt, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            pool_put(s, c);
            *res = r;
            return ONCE_OK;
        }
        char msg[256];
        rc = once_fail(ONCE_ESTORE, "store unavailable: %s", pg_msg(PQresultErrorMessage(r), msg, sizeof msg));
        PQclear(r);
        int broken = PQstatus(c) != CONNECTION_OK;
        pool_put(s, c);
        if (!broken || attempt > 0)
            return rc;
        pthread_mutex_lock(&s->mu);
        pool_reset(s);
        pthread_mutex_unlock(&s->mu);
    }
}

static int get_action(pg_store *s, const char *scope, const char *key, once_action *out, int *found)
{
    params p = {.n = 0};
    p_text(&p, scope);
    p_text(&p, key);
    PGresult *res;
    int rc = read_exec(s, "get", &p, &res);
    if (rc < 0)
        return rc;
    *found = PQntuples(res) == 1;
    if (*found && (rc = action_decode(res, 0, 0, out)) < 0)
        rc = once_fail(rc, "cannot read the action");
    PQclear(res);
    return rc;
}

static int pgs_reserve(once_store *st, const once_reserve_req *req, int64_t now, once_reservation *out, once_cb cb,
                       void *ctx)
{
    pg_store *s = pg(st);
    once_reserve_req rq = *req; /* request_fn is resolved into it below */
    store_op op = {.kind = OP_RESERVE, .now = now, .scope = req->scope, .key = req->key, .rreq = &rq, .res = out};
    /* A replay or a conflict is one indexed read, no transaction. */
    once_action a;
    int found = 0;
    int rc = get_action(s, req->scope, req->key, &a, &found);
    if (rc < 0)
        return rc;
    if (found) {
        int answered = reserve_from_row(&op, &a);
        once_action_free(&a);
        if (answered)
            return cb ? 1 : ONCE_OK;
    }
    char token[ONCE_TOKEN_LEN + 1];
    if ((rc = store_reserve_request(&rq)) < 0 || (rc = once_token_new(token)) < 0)
        return rc;
    op.token = token;
    return cb ? run_async(s, &op, cb, ctx) : run_write(s, &op);
}

static int pgs_complete(once_store *st, const char *scope, const char *key, const char *token,
                        const once_response *resp, const char *provider_id, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_COMPLETE, .now = now, .scope = scope, .key = key, .token = token, .resp = resp,
                   .provider_id = provider_id};
    return cb ? run_async(pg(st), &op, cb, ctx) : run_write(pg(st), &op);
}

static int pgs_settle(once_store *st, const char *scope, const char *key, const char *token, once_state to,
                      const char *error, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_SETTLE, .now = now, .scope = scope, .key = key, .token = token, .to = to,
                   .text = error};
    return cb ? run_async(pg(st), &op, cb, ctx) : run_write(pg(st), &op);
}

static int pgs_renew(once_store *st, const char *scope, const char *key, const char *token, int64_t lease_ms,
                     int64_t *lease_out, int64_t now, once_cb cb, void *ctx)
{
    store_op op = {.kind = OP_RENEW, .now = now, .scope = scope, .key = key, .token = token, .lease_ms = lease_ms,
                   .lease_out = lease_out};
    return cb ? run_async(pg(st), &op, cb, ctx) : run_write(pg(st), &op);
}

static int pgs_get(once_store *st, const char *scope, const char *key, once_action *out)
{
    int found = 0;
    int rc = get_action(pg(st), scope, key, out, &found);
    if (rc == ONCE_OK && !found)
        return once_fail(ONCE_ENOTFOUND, "no action %s/%s", scope, key);
    return rc;
}

static int pgs_list(once_store *st, const once_list_req *req, int64_t after_id, once_action_list *out)
{
    params p = {.n = 0};
    p_int(&p, after_id);
    p_text(&p, req->state ? once_state_name(req->state) : NULL);
    p_text(&p, req->scope);
    p_int(&p, (int64_t)req->limit + 1); /* one more tells whether a next page exists */
    p_int(&p, (int64_t)ONCE_PAGE_BYTES);
    PGresult *res;
    int rc = read_exec(pg(st), "list", &p, &res);
    if (rc < 0)
        return rc;
    out->items = calloc(req->limit, sizeof *out->items);
    if (!out->items) {
        PQclear(res);
        return once_fail(ONCE_ENOMEM, "list: out of memory");
    }
    for (int i = 0; i < PQntuples(res) && out->count < req->limit; i++) {
        if ((rc = action_decode(res, i, 0, &out->items[out->count])) < 0) {
            PQclear(res);
            return once_fail(rc, "list: cannot read a row");
        }
        out->count++;
    }
    page_next(res, req->limit, A_NCOLS, out->next, sizeof out->next);
    PQclear(res);
    return ONCE_OK;
}

static int pgs_resolve(once_store *st, const char *scope, const char *key, once_outcome outcome,
                       const char *provider_id, const char *note, int64_t now)
{
    store_op op = {.kind = OP_RESOLVE, .now = now, .scope = scope, .key = key, .outcome = outcome,
                   .provider_id = provider_id, .text = note};
    return run_write(pg(st), &op);
}

static int pgs_bulk(once_store *st, store_op_kind kind, const char *scope, const char *text, int64_t now,
                    size_t *count)
{
    store_op op = {.kind = kind, .now = now, .scope = scope, .text = text};
    int rc = run_write(pg(st), &op);
    *count = op.count;
    return rc;
}

static int pgs_expire(once_store *st, int64_t now, size_t *count)
{
    return pgs_bulk(st, OP_EXPIRE, NULL, NULL, now, count);
}

static int pgs_hold(once_store *st, const char *scope, const char *key, const char *reason, int64_t now)
{
    store_op op = {.kind = OP_HOLD, .now = now, .scope = scope, .key = key, .text = reason};
    return run_write(pg(st), &op);
}

static int pgs_sweep(once_store *st, int64_t now, size_t *count)
{
    return pgs_bulk(st, OP_SWEEP, NULL, NULL, now, count);
}

static int pgs_hold_unknown(once_store *st, const char *scope, const char *except, const char *reason, int64_t now,
                            size_t *count)
{
    store_op op = {.kind = OP_HOLD_ALL, .now = now, .scope = scope, .receipt = except, .text = reason};
    int rc = run_write(pg(st), &op);
    *count = op.count;
    return rc;
}

static int pgs_reconcile_claim(once_store *st, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                               int64_t now, once_action_list *out)
{
    store_op op = {.kind = OP_RC_CLAIM, .now = now, .scope = scope, .max = max, .lease_ms = lease_ms,
                   .delay_ms = settle_ms, .list = out};
    return run_write(pg(st), &op);
}

static int pgs_reconcile(once_store *st, const char *scope, const char *key, once_outcome outcome,
                         const once_response *resp, const char *provider_id, const char *step, int64_t now)
{
    store_op op = {.kind = OP_RC_SETTLE, .now = now, .scope = scope, .key = key, .outcome = outcome, .resp = resp,
                   .provider_id = provider_id, .text = step};
    return run_write(pg(st), &op);
}

static int pgs_reconcile_failed(once_store *st, const char *scope, const char *key, int64_t delay_ms, int hold,
                                const char *step, int64_t now)
{
    store_op op = {.kind = OP_RC_FAILED, .now = now, .scope = scope, .key = key, .delay_ms = delay_ms, .dead = hold,
                   .text = step};
    return run_write(pg(st), &op);
}

/* Through a writer, in a transaction: ready means a write would commit. */
static int pgs_ping(once_store *st)
{
    store_op op = {.kind = OP_PING};
    return run_write(pg(st), &op);
}

static int pgs_event_insert(once_store *st, const once_event_in *ev, int64_t now, int *inserted, once_cb cb,
                            void *ctx)
{
    store_op op = {.kind = OP_EV_INSERT, .now = now, .ev_in = ev, .inserted = inserted};
    /* A redelivered event is found by one indexed read: no transaction. */
    params p = {.n = 0};
    p_text(&p, ev->source);
    p_text(&p, ev->event_id);
    p_text(&p, ev->digest);
    PGresult *res;
    int rc = read_exec(pg(st), "ev_exists", &p, &res);
    if (rc < 0)
        return rc;
    int found = PQntuples(res) > 0;
    PQclear(res);
    if (found) {
        *inserted = 0;
        return cb ? 1 : ONCE_OK;
    }
    return cb ? run_async(pg(st), &op, cb, ctx) : run_write(pg(st), &op);
}

static int pgs_event_claim(once_store *st, const char *source, size_t max, int64_t lease_ms, int64_t now,
                           once_event_list *out)
{
    store_op op = {.kind = OP_EV_CLAIM, .now = now, .scope = source, .max = max, .lease_ms = lease_ms,
                   .ev_list = out};
    return run_write(pg(st), &op);
}

static int pgs_event_settle(once_store *st, const char *source, const char *receipt, int ack, int64_t delay_ms,
                            int dead, const char *error, int64_t now)
{
    store_op op = {.kind = OP_EV_SETTLE, .now = now, .scope = source, .receipt = receipt, .ack = ack,
                   .delay_ms = delay_ms, .dead = dead, .text = error};
    return run_write(pg(st), &op);
}

static int pgs_event_get(once_store *st, const char *source, const char *event_id, once_event *out)
{
    params p = {.n = 0};
    p_text(&p, source);
    p_text(&p, event_id);
    PGresult *res;
    int rc = read_exec(pg(st), "ev_get", &p, &res);
    if (rc < 0)
        return rc;
    if (PQntuples(res) != 1)
        rc = once_fail(ONCE_ENOTFOUND, "no event %s/%s", source, event_id);
    else if ((rc = event_decode(res, 0, out)) < 0)
        rc = once_fail(rc, "cannot read the event");
    PQclear(res);
    return rc;
}

static int pgs_event_list(once_store *st, const once_event_list_req *req, int64_t after_id, once_event_list *out)
{
    params p = {.n = 0};
    p_int(&p, after_id);
    p_text(&p, req->source);
    p_text(&p, req->state ? once_event_state_name(req->state) : NULL);
    p_int(&p, (int64_t)req->limit + 1);
    p_int(&p, (int64_t)ONCE_PAGE_BYTES);
    PGresult *res;
    int rc = read_exec(pg(st), "ev_list", &p, &res);
    if (rc < 0)
        return rc;
    out->items = calloc(req->limit, sizeof *out->items);
    if (!out->items) {
        PQclear(res);
        return once_fail(ONCE_ENOMEM, "list: out of memory");
    }
    for (int i = 0; i < PQntuples(res) && out->count < req->limit; i++) {
        if ((rc = event_decode(res, i, &out->items[out->count])) < 0) {
            PQclear(res);
            return once_fail(rc, "list: cannot read an event");
        }
        out->count++;
    }
    page_next(res, req->limit, E_NCOLS, out->next, sizeof out->next);
    PQclear(res);
    return ONCE_OK;
}

static int pgs_event_redeliver(once_store *st, const char *source, const char *event_id, int64_t now)
{
    store_op op = {.kind = OP_EV_REDELIVER, .now = now, .scope = source, .event_id = event_id};
    return run_write(pg(st), &op);
}

static int pgs_event_sweep(once_store *st, int64_t now, size_t *count)
{
    return pgs_bulk(st, OP_EV_SWEEP, NULL, NULL, now, count);
}

/* ---- open and close -------------------------------------------------------- */

static void pgs_close(once_store *st)
{
    pg_store *s = pg(st);
    bq_close(&s->queue);
    for (int i = 0; i < s->nwriters; i++)
        pthread_join(s->writers[i], NULL);
    for (size_t i = 0; i < s->pool_nfree; i++)
        PQfinish(s->pool_free[i]);
    bq_destroy(&s->queue);
    pthread_cond_destroy(&s->pool_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->url);
    free(s->schema);
    free(s);
}

static const store_vtable pg_vtable = {
    .name = "postgres",
    .reserve = pgs_reserve,
    .complete = pgs_complete,
    .settle = pgs_settle,
    .renew = pgs_renew,
    .get = pgs_get,
    .list = pgs_list,
    .resolve = pgs_resolve,
    .expire_leases = pgs_expire,
    .hold = pgs_hold,
    .sweep = pgs_sweep,
    .hold_unknown = pgs_hold_unknown,
    .reconcile_claim = pgs_reconcile_claim,
    .reconcile = pgs_reconcile,
    .reconcile_failed = pgs_reconcile_failed,
    .ping = pgs_ping,
    .close = pgs_close,
    .event_insert = pgs_event_insert,
    .event_claim = pgs_event_claim,
    .event_settle = pgs_event_settle,
    .event_get = pgs_event_get,
    .event_list = pgs_event_list,
    .event_redeliver = pgs_event_redeliver,
    .event_sweep = pgs_event_sweep,
};

/* Takes once_schema=NAME out of the URL's query (libpq would refuse it).
 * *schema is NULL when absent. 0 or ONCE_EINVAL. */
static int url_split(const char *url, char **libpq_url, char **schema)
{
    *libpq_url = NULL;
    *schema = NULL;
    size_t n = strlen(url);
    char *u = malloc(n + 1);
    if (!u)
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    const char *q = strchr(url, '?');
    size_t head = q ? (size_t)(q - url) : n;
    memcpy(u, url, head);
    size_t o = head;
    int first = 1;
    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        size_t len = strcspn(p, "&");
        if (len >= 12 && strncmp(p, "once_schema=", 12) == 0) {
            size_t sl = len - 12;
            if (sl == 0 || sl > SCHEMA_MAX || *schema) {
                free(u);
                free(*schema);
                *schema = NULL;
                return once_fail(ONCE_EINVAL, "store: once_schema must be 1-%d of [a-z0-9_]", SCHEMA_MAX);
            }
            for (size_t i = 0; i < sl; i++) {
                char c = p[12 + i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
                    free(u);
                    return once_fail(ONCE_EINVAL, "store: once_schema must be 1-%d of [a-z0-9_]", SCHEMA_MAX);
                }
            }
            *schema = once_memdup0(p + 12, sl);
            if (!*schema) {
                free(u);
                return once_fail(ONCE_ENOMEM, "store: out of memory");
            }
        } else if (len > 0) {
            u[o++] = first ? '?' : '&';
            memcpy(u + o, p, len);
            o += len;
            first = 0;
        }
        p += len;
        if (*p == '&')
            p++;
    }
    u[o] = '\0';
    *libpq_url = u;
    return ONCE_OK;
}

int pg_store_open(const char *url, once_store **out)
{
    pg_store *s = calloc(1, sizeof *s);
    if (!s)
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    s->base.vt = &pg_vtable;
    int rc = url_split(url, &s->url, &s->schema);
    if (rc < 0) {
        free(s);
        return rc;
    }
    if (bq_init(&s->queue) < 0) {
        free(s->url);
        free(s->schema);
        free(s);
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    PGconn *c = NULL;
    rc = pg_connect(s, &c, 1);
    if (rc == ONCE_OK)
        rc = pg_schema_prepare(c, s->schema);
    if (rc == ONCE_OK)
        rc = pg_prepare_all(c);
    if (rc == ONCE_OK) {
        s->pool_free[s->pool_nfree++] = c;
        s->pool_nopen = 1;
        c = NULL;
        for (int i = 0; i < WRITERS; i++) {
            if (pthread_create(&s->writers[i], NULL, writer_main, s) != 0) {
                rc = once_fail(ONCE_ENOMEM, "store: cannot start a writer thread");
                break;
            }
            s->nwriters++;
        }
    }
    PQfinish(c);
    if (rc < 0) {
        char detail[ONCE_DETAIL_MAX];
        snprintf(detail, sizeof detail, "%s", once_errdetail());
        pgs_close(&s->base);
        return once_fail(rc, "%s", detail);
    }
    *out = &s->base;
    return ONCE_OK;
}
