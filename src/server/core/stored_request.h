/*
 * stored_request.h — the one codec of a proxied request as the ledger keeps
 * it with its reservation: {"method", "target", "headers": [[name, value],
 * ...], "body" (UTF-8 text) or "body_base64" (any other bytes)}. The proxy
 * writes it (what a provider lookup or a human needs to know what was
 * attempted); the sender of an approved action reads it back to send
 * exactly what the human saw. One file, so the two never drift apart.
 */
#ifndef ONCE_SERVER_CORE_STORED_REQUEST_H
#define ONCE_SERVER_CORE_STORED_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "server/config/config.h"

/* A stored request read back. method, target and headers are borrowed from
 * doc; body is owned. Freed by stored_request_free. */
typedef struct stored_request {
    json_t *doc;
    const char *method;
    const char *target;
    json_t *headers; /* [[name, value], ...], possibly empty */
    uint8_t *body;   /* NULL when there is none */
    size_t body_len;
} stored_request;

/* Encodes a request: header_lines are "Name: value" lines, of which those
 * cfg redacts (redact.h) are left out, and lines that are not UTF-8 too
 * (forwarded, but not stored). *out is malloc'd (free it). ONCE_OK, or
 * ONCE_ENOMEM. */
int stored_request_encode(const once_config *cfg, const char *method, const char *target,
                          const char *const *header_lines, size_t nlines, const uint8_t *body, size_t body_len,
                          char **out);

/* Decodes what stored_request_encode wrote. 0, or -1 with why (not stored
 * by the proxy, a body that is not base64, out of memory); out is then
 * empty. */
int stored_request_decode(const uint8_t *data, size_t len, stored_request *out, char *why, size_t whylen);

void stored_request_free(stored_request *sr);

#endif
