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
#include "store/pg_int.h"

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
            if (pthread_create(&s->writers[i], NULL, pg_writer_main, s) != 0) {
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

