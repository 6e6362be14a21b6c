/*
 * relay.c — the headers that cross to an upstream and the responses rebuilt
 * from its answers, for every route that forwards (relay.h).
 */
#include "server/front/relay.h"

#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "server/front/req.h"
#include "server/core/services.h"
#include "server/core/upstream_rules.h"

typedef struct collect {
    req *r;
    const upstream_cfg *up;
    out_headers *h;
    const char *connection;
    int failed;
} collect;

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
    (void)kind;
    collect *c = cls;
    if (!name || upstream_header_dropped(c->up, config_auth_on(c->r->srv->cfg), c->connection, name))
        return MHD_YES;
    if (out_headers_add(c->h, name, value ? value : "") < 0) {
        c->failed = 1;
        return MHD_NO;
    }
    return MHD_YES;
}

int relay_client_headers(req *r, const upstream_cfg *up, out_headers *h)
{
    collect c = {.r = r, .up = up, .h = h, .connection = req_header(r, "Connection")};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_header, &c);
    return c.failed ? -1 : 0;
}

int relay_injected_headers(const upstream_cfg *up, out_headers *h)
{
    for (size_t i = 0; i < up->nheaders; i++)
        if (out_headers_add(h, up->headers[i], NULL) < 0)
            return -1;
    return 0;
}

void relay_add_headers(struct MHD_Response *resp, const char *headers_json)
{
    if (!headers_json)
        return;
    json_t *arr = json_loads(headers_json, 0, NULL);
    size_t i;
    json_t *pair;
    json_array_foreach(arr, i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        if (n && v && strcasecmp(n, "content-length") != 0 && strcasecmp(n, "transfer-encoding") != 0 &&
            strcasecmp(n, "connection") != 0)
            MHD_add_response_header(resp, n, v);
    }
    json_decref(arr);
}

struct MHD_Response *relay_response(const char *headers_json, const uint8_t *body, size_t len)
{
    struct MHD_Response *resp = resp_bytes(body, len, NULL);
    if (resp)
        relay_add_headers(resp, headers_json);
    return resp;
}

void relay_answer(req *r, const out_call *c)
{
    switch (c->kind) {
    case OUT_ANSWERED:
        req_reply(r, (unsigned)c->status,
                  relay_response((const char *)c->resp_headers.data, c->resp_body.data, c->resp_body.len));
        break;
    case OUT_NOT_SENT:
        req_problem(r, 502, "upstream_unreachable", "Upstream unreachable", NULL, "%s", c->error);
        break;
    case OUT_TOO_LARGE:
        req_problem(r, 502, "response_too_large", "Response too large", NULL, "%s", c->error);
        break;
    default: req_problem(r, 504, "upstream_failed", "Upstream failed", NULL, "%s", c->error); break;
    }
}
