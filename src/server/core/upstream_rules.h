/*
 * upstream_rules.h — what the proxy sends an upstream and what an answer
 * means: the client headers that never cross (hop-by-hop, forged
 * forwarding headers, once's own token, what once injects), and the class
 * of an upstream's answer (completed, released, unknown). Pure functions of
 * the configuration, so the rules are tested without a socket
 * (tests/unit/test_upstream_rules.c).
 */
#ifndef ONCE_SERVER_UPSTREAM_RULES_H
#define ONCE_SERVER_UPSTREAM_RULES_H

#include <stddef.h>

#include "once/once.h"
#include "server/config/config.h"
#include "server/core/outbound.h"

/* How a proxied call ended, and so what the ledger records. */
typedef enum upstream_outcome {
    UPSTREAM_COMPLETED,     /* the upstream answered; recorded as completed */
    UPSTREAM_RELEASED_PASS, /* answered a release_on status */
    UPSTREAM_UNKNOWN_PASS,  /* answered an unknown_on status */
    UPSTREAM_UNREACHABLE,   /* nothing was sent */
    UPSTREAM_AMBIGUOUS,     /* sent; no complete answer */
    UPSTREAM_TOO_LARGE,     /* answered beyond max_response */
    UPSTREAM_NOT_FORWARDED  /* the gateway could not start the call */
} upstream_outcome;

/* Is the client's header name kept from the upstream? connection is the
 * request's Connection header (its names are hop-by-hop too) or NULL;
 * tokens_on: once checks bearer tokens, so Authorization is once's. */
int upstream_header_dropped(const upstream_cfg *up, int tokens_on, const char *connection, const char *name);

/* The class of a call that ended as kind with status (OUT_ANSWERED). For
 * an answer, why gets the reason recorded with a release or an unknown (""
 * for completed); for the other kinds it is left as it is (it holds the
 * transport's error, outbound's call->error). */
upstream_outcome upstream_classify(const upstream_cfg *up, out_kind kind, long status, char *why, size_t cap);

/* The state the ledger ends in for an outcome: completed, released or
 * unknown. */
once_state upstream_outcome_state(upstream_outcome o);

/* Does a new request (method, target: the canonical path and query after
 * the upstream's prefix, target_canon) match one of the upstream's approve
 * rules, so that it waits for a human? Matched without case (a false match
 * only asks a person), against the path as sent and with ";params" cut and
 * a trailing '/' dropped, as lenient routers read it. The query is not
 * part of the match. */
int upstream_needs_approval(const upstream_cfg *up, const char *method, const char *target);

/* Sets the upstream's limits and TLS settings on a call to it (timeout,
 * max_response, ca_file, the client certificate): one place, so that no
 * call to an upstream forgets one. The caller sets the rest. */
void upstream_call_init(out_call *c, const upstream_cfg *up);

/* Whether the upstream has rules about paths of its own (approve; an
 * agent's allow and limit rules are grants_has_path_rules'), so that a target
 * providers could read in more than one way is refused (target_ambiguous). */
int upstream_has_path_rules(const upstream_cfg *up);

#endif
