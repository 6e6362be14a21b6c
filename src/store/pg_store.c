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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/limits.h"
#include "store/pg_int.h"

/* ---- running operations ------------------------------------------------- */

static pg_store *pg(once_store *s)
{
    return (pg_store *)s;
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

/* Decides a reservation from the row read outside the writers (the rule once
 * applies everywhere, ledger_decide_reservation); the action moves from *a
 * into the answer. 1 answered, 0 the reservation must be written. */
static int reserve_from_row(store_op *op, once_action *a)
{
    once_reserve_status status;
    if (!ledger_decide_reservation(a->state, a->lease_expires_at, a->expires_at, op->now, op->rreq->retry_unknown,
                                   &status))
        return 0;
    op->res->action = *a;
    memset(a, 0, sizeof *a);
    ledger_answer_reservation(op->res, status, op->rreq->fingerprint);
    op->rc = ONCE_OK;
    return 1;
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
    return store_queue_reserve(st, &op, &rq, cb, ctx);
}

static int pgs_get(once_store *st, const char *scope, const char *key, once_action *out)
{
    int found = 0;
    int rc = get_action(pg(st), scope, key, out, &found);
    if (rc == ONCE_OK && !found)
        return once_fail(ONCE_ENOTFOUND, "no action %s/%s", scope, key);
    return rc;
}

/* The oldest undecided action's created_at: one read. */
static int pgs_approval_oldest(once_store *st, int64_t *created_at)
{
    params p = {.n = 0};
    PGresult *res;
    int rc = read_exec(pg(st), "approval_oldest", &p, &res);
    if (rc < 0)
        return rc;
    *created_at = PQntuples(res) == 1 ? col_int(res, 0, 0) : 0;
    PQclear(res);
    return ONCE_OK;
}

/* The use of one budget: one read of its counted buckets, counted as
 * src/store/limits.c says (and once_limits_check in SQL). */
static int pgs_limit_use(once_store *st, const char *limit, int64_t window_ms, int64_t now, double *used,
                         int64_t *retry_after_ms)
{
    limit_span sp = limit_span_at(window_ms, now);
    params p = {.n = 0};
    p_text(&p, limit);
    p_int(&p, sp.first);
    PGresult *res;
    int rc = read_exec(pg(st), "limit_use", &p, &res);
    if (rc < 0)
        return rc;
    if (PQntuples(res) == 1) {
        *used = strtod(PQgetvalue(res, 0, 0), NULL);
        *retry_after_ms = PQgetisnull(res, 0, 1) ? 0 : limit_leaves(&sp, col_int(res, 0, 1)) - now;
    }
    PQclear(res);
    return ONCE_OK;
}

static int pgs_list(once_store *st, const once_list_req *req, int64_t after_id, once_action_list *out)
{
    params p = {.n = 0};
    p_int(&p, after_id);
    p_text(&p, req->state ? once_state_name(req->state) : NULL);
    p_text(&p, req->scope);
    p_text(&p, req->agent);
    void *items = NULL;
    int rc = pg_read_page(pg(st), "list", &p, &pg_action_rows, req->limit, &items, &out->count, out->next);
    out->items = items;
    return rc;
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
    return store_queue_op(st, &op, cb, ctx);
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
    void *items = NULL;
    int rc = pg_read_page(pg(st), "ev_list", &p, &pg_event_rows, req->limit, &items, &out->count, out->next);
    out->items = items;
    return rc;
}

/* ---- open and close -------------------------------------------------------- */

static void pgs_close(once_store *st)
{
    pg_store *s = pg(st);
    bq_close(&s->head.queue);
    for (int i = 0; i < s->nwriters; i++)
        pthread_join(s->writers[i], NULL);
    for (size_t i = 0; i < s->pool_nfree; i++)
        PQfinish(s->pool_free[i]);
    bq_destroy(&s->head.queue);
    pthread_cond_destroy(&s->pool_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->url);
    free(s->schema);
    free(s);
}

static const store_vtable pg_vtable = {
    .name = "postgres",
    STORE_QUEUE_ENTRIES,
    /* the writes a read may answer first; the reads */
    .reserve = pgs_reserve, .event_insert = pgs_event_insert,
    .get = pgs_get, .list = pgs_list, .event_get = pgs_event_get, .event_list = pgs_event_list,
    .approval_oldest = pgs_approval_oldest, .limit_use = pgs_limit_use,
    .close = pgs_close,
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
    pg_store *s = store_head_new(sizeof *s, &pg_vtable);
    if (!s)
        return ONCE_ENOMEM;
    int rc = url_split(url, &s->url, &s->schema);
    if (rc < 0) {
        store_head_free(&s->head);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    PGconn *c = NULL;
    rc = pg_connect(s, &c, PG_CONNECT_FORCE);
    if (rc == ONCE_OK)
        rc = pg_schema_prepare(c, s->schema);
    if (rc == ONCE_OK)
        rc = pg_prepare_all(c);
    if (rc == ONCE_OK) {
        s->pool_free[s->pool_nfree++] = c;
        s->pool_nopen = 1;
        c = NULL;
        for (int i = 0; i < WRITERS; i++) {
            if (pthread_create(&s->writers[i], NULL, pg_writer_main, s) != 0) {
                rc = once_fail(ONCE_ENOMEM, "store: cannot start a writer thread");
                break;
            }
            s->nwriters++;
        }
    }
    PQfinish(c);
    return store_finish_open(&s->head.base, rc, out);
}

