/*
 * console.c — GET /console: the operator console, one page served from the
 * binary (docs/console.md). The page holds no data: it asks the operator's
 * API with the token typed into it (a bearer header, never a cookie), so
 * the route itself is open, and what it serves is locked down instead: a
 * Content-Security-Policy that allows nothing but this origin's own script,
 * style and API, no framing, no referrer, no sniffing.
 */
#include <string.h>

#include "server/ops/console_assets.h"
#include "server/ops/ops.h"
#include "server/core/services.h"
#include "server/front/req.h"

/* Nothing from elsewhere: no inline script or style, no CDN, no fonts, no
 * form posting, no framing; fetch() to this origin only. */
#define CONSOLE_CSP                                                                                       \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "      \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const console_asset *console_find(const char *name, size_t n)
{
    for (const console_asset *a = console_assets; a->name; a++)
        if (strlen(a->name) == n && memcmp(a->name, name, n) == 0)
            return a;
    return NULL;
}

/* Serves one embedded file with the headers that keep the page to itself. */
static void console_serve(req *r, const console_asset *a)
{
    struct MHD_Response *resp = resp_bytes(a->data, a->len, a->type);
    if (resp) {
        MHD_add_response_header(resp, "Content-Security-Policy", CONSOLE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
    }
    req_reply(r, 200, resp);
}

static void console_page(req *r)
{
    const console_asset *a = console_find("index.html", 10);
    if (!a) {
        req_problem(r, 500, "internal", "Internal error", NULL, "the console was not built into this binary");
        return;
    }
    console_serve(r, a);
}

/* /console/{file}: the page's own style and script, nothing else. */
static void console_file(req *r)
{
    const route_match *m = &r->match;
    const console_asset *a = console_find(m->seg[0], m->seglen[0]);
    if (!a || strcmp(a->name, "index.html") == 0) {
        req_problem(r, 404, "not_found", "Not found", NULL, "no such console file");
        return;
    }
    console_serve(r, a);
}

const route console_routes[] = {
    {.pattern = "/console", .name = "console", .access = ACCESS_OPEN, .methods = {{"GET", console_page}}},
    {.pattern = "/console/{}", .name = "console", .access = ACCESS_OPEN, .methods = {{"GET", console_file}}},
    {.pattern = NULL},
};
