/*
 * pg_rows.c — statement parameters and result rows of the PostgreSQL store:
 * text and binary parameters in, actions and events out, and pages of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "store/pg_int.h"

void p_text(params *p, const char *s)
{
    ONCE_ASSERT(p->n < PARAMS_MAX);
    p->v[p->n] = s;
    p->len[p->n] = 0;
    p->fmt[p->n] = 0;
    p->n++;
}

void p_int(params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof p->num[0], "%lld", (long long)v);
    p_text(p, p->num[p->n]);
}

void p_bool(params *p, int b)
{
    p_text(p, b ? "t" : "f");
}

void p_bytes(params *p, const void *data, size_t len)
{
    ONCE_ASSERT(p->n < PARAMS_MAX);
    p->v[p->n] = data ? (const char *)data : NULL;
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

/* complete and reconcile store a response alike: one shape for both. */
void p_response(params *p, const once_response *r)
{
    p_bool(p, r != NULL);
    if (r) {
        p_int(p, r->status);
        p_text(p, r->headers);
        p_bytes(p, r->body, r->body_len);
    } else {
        p_text(p, NULL);
        p_text(p, NULL);
        p_text(p, NULL);
    }
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

int64_t col_int(const PGresult *res, int row, int col)
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
int action_decode(const PGresult *res, int row, int c0, once_action *a)
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
    a->response.body_not_stored = col_int(res, row, c0 + 23);
    a->approved_at = col_int(res, row, c0 + 24);
    a->decided_by = col_text(res, row, c0 + 25, &ok);
    a->decision_note = col_text(res, row, c0 + 26, &ok);
    a->agent = col_text(res, row, c0 + 27, &ok);
    a->waits_for_limit = PQgetvalue(res, row, c0 + 29)[0] == 't';
    if (!ok || !a->scope || !a->key) {
        once_action_free(a);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

int event_decode(const PGresult *res, int row, once_event *e)
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
    e->claimed_by = col_text(res, row, 17, &ok);
    if (!ok || !e->source || !e->event_id) {
        once_event_free(e);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}


/* ---- arrays and pages of rows ------------------------------------------------ */

/* The decoders as pg_rows wants them: into an item of any kind. */
static int action_item(const PGresult *res, int row, void *item)
{
    return action_decode(res, row, 0, item);
}

/* As action_item. */
static int event_item(const PGresult *res, int row, void *item)
{
    return event_decode(res, row, item);
}

/* A claimed event keeps its receipt (column 9): only its claimer sees it. */
static int claimed_event_item(const PGresult *res, int row, void *item)
{
    once_event *e = item;
    int rc = event_decode(res, row, e);
    if (rc == ONCE_OK)
        snprintf(e->receipt, sizeof e->receipt, "%s", PQgetvalue(res, row, 9));
    return rc;
}

const pg_rows pg_action_rows = {action_item, sizeof(once_action), A_NCOLS, "a row"};
const pg_rows pg_event_rows = {event_item, sizeof(once_event), E_NCOLS, "an event"};
const pg_rows pg_claimed_event_rows = {claimed_event_item, sizeof(once_event), E_NCOLS, "an event"};

/* Pages and claims of actions and events decode alike; one loop for all. */
int pg_decode_rows(const PGresult *res, size_t max, const pg_rows *rows, const char *what, void **items,
                   size_t *count)
{
    unsigned char *v = calloc(max ? max : 1, rows->item_size);
    *items = v;
    if (!v)
        return once_fail(ONCE_ENOMEM, "%s: out of memory", what);
    for (int i = 0; i < PQntuples(res) && (size_t)i < max; i++) {
        int rc = rows->decode(res, i, v + (size_t)i * rows->item_size);
        if (rc < 0)
            return once_fail(rc, "%s: cannot read %s", what, rows->noun);
        *count = (size_t)i + 1;
    }
    return ONCE_OK;
}

/* Both list statements cut their pages alike (see "list" in pg_write.c):
 * one home for running one and reading its page. */
int pg_read_page(pg_store *s, const char *name, params *p, const pg_rows *rows, size_t limit, void **items,
                 size_t *count, char next[ONCE_CURSOR_MAX])
{
    p_int(p, (int64_t)limit + 1); /* one more tells whether a next page exists */
    p_int(p, (int64_t)ONCE_PAGE_BYTES);
    PGresult *res;
    int rc = read_exec(s, name, p, &res);
    if (rc < 0)
        return rc;
    rc = pg_decode_rows(res, limit, rows, "list", items, count);
    if (rc == ONCE_OK)
        page_next(res, limit, rows->ncols, next, ONCE_CURSOR_MAX);
    PQclear(res);
    return rc;
}
