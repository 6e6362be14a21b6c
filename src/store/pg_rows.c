/*
 * pg_rows.c — statement parameters and result rows of the PostgreSQL store:
 * text and binary parameters in, actions and events out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/pg_int.h"

void p_text(params *p, const char *s)
{
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

int64_t col_int(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* The cursor after a page of the "list" or "ev_list" statements: the last
 * row's id when the page was full (the probe row beyond limit came back)
 * or cut by ONCE_PAGE_BYTES (fewer rows came back than the page held,
 * which the column total_col says). */
void page_next(const PGresult *res, size_t limit, int total_col, char *next, size_t cap)
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
    if (!ok || !e->source || !e->event_id) {
        once_event_free(e);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

