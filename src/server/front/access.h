/*
 * access.h — who may do what (docs/security.md): bearer tokens and their roles,
 * and the two checks that keep a browser from being used against the
 * gateway (a foreign Origin; a DNS-rebound Host). All decided from headers,
 * before a body byte is read.
 */
#ifndef ONCE_SERVER_ACCESS_H
#define ONCE_SERVER_ACCESS_H

#include "server/config/config.h"
#include "server/core/problem.h"

typedef enum access_level {
    ACCESS_OPEN = 0,     /* anyone: health probes, webhooks (their signature decides) */
    ACCESS_AGENT = 1,    /* an agent or operator token (anyone when no tokens are set) */
    ACCESS_OPERATOR = 2, /* an operator token: the human decisions */
    ACCESS_METRICS = 3   /* metrics_token or an operator token when metrics_token is set; else open */
} access_level;

/* Decides a request's right to a route of level need from its
 * Authorization header (may be NULL). 0 and *who (the token, NULL when none
 * was needed or none is configured), or -1 with p: 401 unauthorized (a
 * challenge header set) or 403 forbidden (*who then names the token that
 * was refused, for the log and the metrics). */
int access_check(const once_config *cfg, access_level need, const char *authorization, const auth_token **who,
                 problem *p);

/* The browser checks, made for every request: 403 cross_origin when Origin
 * is present and is not the gateway's own origin (scheme + the Host sent),
 * or Sec-Fetch-Site is cross-site; 421 misdirected_request when no tokens
 * are configured and Host is neither an IP literal nor localhost (DNS
 * rebinding). 0, or -1 with p. Any argument but cfg may be NULL. */
int access_browser(const once_config *cfg, int tls, const char *host, const char *origin, const char *fetch_site,
                   problem *p);

/* Whether a Host header's value is host[:port] as RFC 3986 spells an
 * authority without userinfo: an IP literal in brackets, or a reg-name
 * (an IPv4 address is one), and a port of 1-5 digits up to 65535. A value
 * with '@', a path or a second ':' names no one host, and the DNS-rebinding
 * and Origin checks must not be asked to guess which. */
int access_host_valid(const char *host);

#endif
