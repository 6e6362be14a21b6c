/*
 * access.h — who may do what (docs/security.md): bearer tokens and their roles,
 * and the two checks that keep a browser from being used against the
 * gateway (a foreign Origin; a DNS-rebound Host). All decided from headers,
 * before a body byte is read.
 */
#ifndef ONCE_SERVER_ACCESS_H
#define ONCE_SERVER_ACCESS_H

#include <stdint.h>

#include "server/config/config.h"
#include "server/core/jwt.h"
#include "server/core/problem.h"

typedef enum access_level {
    ACCESS_OPEN = 0,     /* anyone: health probes, webhooks (their signature decides) */
    ACCESS_AGENT = 1,    /* an agent or operator token (anyone when no tokens are set) */
    ACCESS_OPERATOR = 2, /* an operator token: the human decisions */
    ACCESS_METRICS = 3   /* metrics_token or an operator token when metrics_token is set; else open */
} access_level;

typedef struct jwks jwks; /* core/jwks.h */

/* What a request is decided with. */
typedef struct access_in {
    const once_config *cfg;    /* the request's generation (req_access_cfg) */
    jwks *keys;                /* the issuer's keys ([auth]); NULL without */
    const char *authorization; /* the header, or NULL */
    const char *resource_path; /* "" or "/v1/mcp/NAME": the metadata a 401 points to */
    const char *query;         /* the target's query from its '?', or NULL: a token there is refused */
    int64_t now;               /* Unix seconds, for exp and nbf */
} access_in;

/* The caller of a request that came with a JWT: the identity r->who then
 * points to, shaped as a tokens_file token so that grants, limits, the
 * trail and the log read it the one way they read a token. */
typedef struct access_ident {
    auth_token tok;
    char name[ONCE_SCOPE_MAX + 1]; /* tok.name */
    int jwt;                       /* a JWT was checked: jwt_result says how it went */
    jwt_result result;
} access_ident;

/* Decides a request's right to a route of level need: a tokens_file
 * token, or with [auth] a bearer JWT of the issuer (jwt.h), whose agent
 * is its agent_claim, an operator when its scope holds operator_scope.
 * 0 and *who (a token of the file, or &id->tok; NULL when none was needed
 * or none is configured), or -1 with p: 401 (WWW-Authenticate names the
 * protected-resource metadata under [auth], and error="invalid_token"
 * when a token was sent), 403 forbidden (*who names the caller that was
 * refused), or 403 insufficient_scope. */
int access_decide(const access_in *in, access_level need, access_ident *id, const auth_token **who, problem *p);

/* access_decide without [auth]: tokens_file tokens only. */
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
