/*
 * upstream_rules.c — the proxy's header and outcome rules (see
 * upstream_rules.h).
 */
#include "server/core/upstream_rules.h"

#include "server/core/path_rule.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Is name among the names of a Connection header (RFC 9110 7.6.1)? */
static int connection_names(const char *connection, const char *name)
{
    size_t nlen = strlen(name);
    for (const char *p = connection; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t len = strcspn(p, ", \t");
        if (len == nlen && strncasecmp(p, name, nlen) == 0)
            return 1;
        p += len;
    }
    return 0;
}

int upstream_header_dropped(const upstream_cfg *up, int tokens_on, const char *connection, const char *name)
{
    /* Hop-by-hop headers, once's own, and the forwarding headers a client
     * could forge: once sets none, so none may look as if it had. */
    static const char *const drop[] = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                                       "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length",
                                       "idempotency-key", "prefer", "expect", "forwarded", "x-real-ip",
                                       /* and those that rewrite the URL behind some frameworks' backs */
                                       "x-original-url", "x-rewrite-url", "x-original-host", "x-host"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (strcasecmp(name, drop[i]) == 0)
            return 1;
    if (strncasecmp(name, "x-forwarded-", 12) == 0)
        return 1;
    if (connection_names(connection, name))
        return 1;
    /* once's own bearer token is for once, never for the provider. */
    if (tokens_on && strcasecmp(name, "authorization") == 0)
        return 1;
    if (up->forward_key_as && strcasecmp(name, up->forward_key_as) == 0)
        return 1;
    size_t nlen = strlen(name);
    for (size_t i = 0; i < up->nheaders; i++) {
        const char *h = up->headers[i];
        const char *colon = strchr(h, ':');
        if (colon && (size_t)(colon - h) == nlen && strncasecmp(h, name, nlen) == 0)
            return 1; /* an injected header replaces the client's */
    }
    return 0;
}

static int status_listed(const int *list, size_t n, long status)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == status)
            return 1;
    return 0;
}

upstream_outcome upstream_classify(const upstream_cfg *up, out_kind kind, long status, char *why, size_t cap)
{
    switch (kind) {
    case OUT_ANSWERED:
        if (status_listed(up->release_on, up->nrelease_on, status)) {
            snprintf(why, cap, "the upstream answered %ld (release_on)", status);
            return UPSTREAM_RELEASED_PASS;
        }
        if (status_listed(up->unknown_on, up->nunknown_on, status)) {
            snprintf(why, cap, "the upstream answered %ld (unknown_on)", status);
            return UPSTREAM_UNKNOWN_PASS;
        }
        if (cap)
            why[0] = '\0';
        return UPSTREAM_COMPLETED;
    case OUT_NOT_SENT: return UPSTREAM_UNREACHABLE;
    case OUT_TOO_LARGE: return UPSTREAM_TOO_LARGE;
    case OUT_AMBIGUOUS: return UPSTREAM_AMBIGUOUS;
    }
    /* A kind outbound never reports: not knowing is unknown, never a resend. */
    return UPSTREAM_AMBIGUOUS;
}

void upstream_call_init(out_call *c, const upstream_cfg *up)
{
    c->timeout_ms = up->timeout_ms;
    c->max_response = up->max_response;
    c->ca_file = up->ca_file;
    c->tls_cert = up->tls_cert;
    c->tls_key = up->tls_key;
}

int upstream_has_path_rules(const upstream_cfg *up)
{
    return up->napprove > 0;
}

int upstream_needs_approval(const upstream_cfg *up, const char *method, const char *target)
{
    return path_rule_any(up->approve, up->napprove, method, target, PATH_RULE_WIDE);
}

once_state upstream_outcome_state(upstream_outcome o)
{
    switch (o) {
    case UPSTREAM_COMPLETED: return ONCE_STATE_COMPLETED;
    case UPSTREAM_RELEASED_PASS:
    case UPSTREAM_UNREACHABLE:
    case UPSTREAM_NOT_FORWARDED: return ONCE_STATE_RELEASED;
    case UPSTREAM_UNKNOWN_PASS:
    case UPSTREAM_AMBIGUOUS:
    case UPSTREAM_TOO_LARGE: return ONCE_STATE_UNKNOWN;
    }
    return ONCE_STATE_UNKNOWN;
}
