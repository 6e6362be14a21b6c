/*
 * relay.h — what a forwarded request and a relayed answer share, whichever
 * route forwards them (the proxy, the MCP gateway): the client's headers
 * that may cross to an upstream, and a response rebuilt from an upstream's
 * answer (its end-to-end headers; the framing is the gateway's own).
 */
#ifndef ONCE_SERVER_RELAY_H
#define ONCE_SERVER_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "server/config/config.h"
#include "server/core/outbound.h"

typedef struct req req;

/* Appends to h the request's headers that may reach up (upstream_rules.h
 * says which never do), copied while MHD's strings are sure to be alive.
 * HTTP thread. 0, or -1 out of memory. */
int relay_client_headers(req *r, const upstream_cfg *up, out_headers *h);

/* Appends up's injected header lines to h. 0, or -1 out of memory. */
int relay_injected_headers(const upstream_cfg *up, out_headers *h);

/* Adds an answer's end-to-end headers (a JSON array of [name, value]
 * pairs, outbound.h's resp_headers) to resp, without the framing ones. */
void relay_add_headers(struct MHD_Response *resp, const char *headers_json);

/* A response from such headers and a body; NULL when out of memory. */
struct MHD_Response *relay_response(const char *headers_json, const uint8_t *body, size_t len);

/* Answers r with how an unrecorded call c ended: the upstream's answer as
 * it came, or 502/504 saying what went wrong. Any thread. */
void relay_answer(req *r, const out_call *c);

#endif
