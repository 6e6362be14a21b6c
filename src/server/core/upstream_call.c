/*
 * upstream_call.c — an out_call's request to an upstream, set in one place
 * (see upstream_call.h).
 */
#include "server/core/upstream_call.h"

#include "server/core/upstream_rules.h"

/* The caller's parts of the call, then the upstream's: what every call to
 * an upstream sets before outbound_submit. */
void upstream_call_request(out_call *c, const upstream_cfg *up, const char *method, const char *url,
                           const out_headers *h, const uint8_t *body, size_t body_len)
{
    c->method = method;
    c->url = url;
    c->headers = h ? (const char *const *)h->lines : NULL;
    c->nheaders = h ? h->count : 0;
    c->body = body;
    c->body_len = body_len;
    upstream_call_init(c, up);
}
