/*
 * upstream_call.h — the request of a call to an upstream (method, URL,
 * headers, body) set on an out_call together with the upstream's limits and
 * TLS settings (upstream_call_init). Every call to an upstream (the proxy,
 * the approved send, the MCP tool call, pass-through and session, the
 * reconciler's lookup) is set up this one way, so that none forgets a field.
 */
#ifndef ONCE_SERVER_CORE_UPSTREAM_CALL_H
#define ONCE_SERVER_CORE_UPSTREAM_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "server/config/config.h"
#include "server/core/outbound.h"

/* Sets c's request: method, url, the lines of h (NULL: none) and body
 * (body_len bytes; NULL when there is none), all borrowed until the call is
 * done; then up's limits and TLS settings. The caller sets stream, done and
 * ctx, and may change a limit afterwards. */
void upstream_call_request(out_call *c, const upstream_cfg *up, const char *method, const char *url,
                           const out_headers *h, const uint8_t *body, size_t body_len);

#endif
