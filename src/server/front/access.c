/*
 * access.c — bearer tokens and roles, Origin and Host (see access.h).
 */
#include "server/front/access.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "common/digest.h"
#include "common/hex.h"
#include "common/pct.h"
#include "server/core/jwks.h"
#include "server/core/log.h"

/* The configured token the header carries, or NULL. The presented token's
 * SHA-256 is compared with every configured digest, each in constant time,
 * so timing tells nothing about which token came close; the file may hold
 * digests only (sha256:HEX), and the gateway keeps no token in memory. */
static const auth_token *access_token(const once_config *cfg, const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *tok = authorization + 7;
    unsigned char digest[32];
    if (EVP_Digest(tok, strlen(tok), digest, NULL, digest_sha256(), NULL) != 1)
        return NULL;
    const auth_token *found = NULL;
    for (size_t i = 0; i < cfg->ntokens; i++) {
        if (CRYPTO_memcmp(digest, cfg->tokens[i].digest, sizeof digest) == 0)
            found = &cfg->tokens[i];
    }
    return found;
}

/* The challenge of a 401: under [auth], where the protected-resource
 * metadata is (RFC 9728 5.1), and error="invalid_token" when a token was
 * sent (RFC 6750 3.1). */
static int access_unauthorized(const access_in *in, const char *error, problem *p)
{
    const auth_cfg *a = &in->cfg->auth;
    problem_set(p, 401, "unauthorized", "Unauthorized", "a valid 'Authorization: Bearer' token is required%s%s",
                error ? ": " : "", error ? error : "");
    p->header = "WWW-Authenticate";
    if (a->issuer == NULL)
        snprintf(p->header_value, sizeof p->header_value, "Bearer");
    else
        snprintf(p->header_value, sizeof p->header_value,
                 "Bearer resource_metadata=\"%s/.well-known/oauth-protected-resource%s\"%s", a->audience,
                 in->resource_path ? in->resource_path : "", error ? ", error=\"invalid_token\"" : "");
    return -1;
}

/* 403 insufficient_scope (RFC 6750 3.1): the token is good, its scope is
 * short of scope. */
static int access_scope_short(const char *scope, problem *p)
{
    problem_set(p, 403, "insufficient_scope", "Insufficient scope", "the token's scope lacks '%.100s'", scope);
    p->header = "WWW-Authenticate";
    snprintf(p->header_value, sizeof p->header_value, "Bearer error=\"insufficient_scope\", scope=\"%.300s\"",
             scope);
    return -1;
}

/* The scopes every token must hold, space-separated, for the challenge. */
static void access_required(const auth_cfg *a, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < a->nrequired_scopes && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? " " : "", a->required_scopes[i]);
}

/* Whether a query ("?a=b&c") has an access_token parameter (RFC 6750
 * 2.3): a token in a URL ends up in logs and histories, so it is refused
 * rather than ignored. */
static int access_query_token(const char *q)
{
    static const char name[] = "access_token";
    for (const char *p = q && *q == '?' ? q + 1 : q; p && *p;) {
        size_t n = strcspn(p, "&;");
        if (n >= sizeof name - 1 && strncmp(p, name, sizeof name - 1) == 0 &&
            (n == sizeof name - 1 || p[sizeof name - 1] == '='))
            return 1;
        p += n;
        p += *p ? 1 : 0;
    }
    return 0;
}

/* A bearer JWT of the [auth] issuer: 0 with id filled, or -1 with p. A
 * kid the key set lacks starts a refresh (at most once a minute) and is
 * refused now: the request never waits for the issuer. */
static int access_jwt(const access_in *in, const char *tok, access_ident *id, problem *p)
{
    const once_config *cfg = in->cfg;
    jwt_claims c;
    jwt_keyset *ks = in->keys ? jwks_hold(in->keys) : NULL;
    id->jwt = 1;
    id->result = jwt_verify(&cfg->auth, ks, tok, strlen(tok), in->resource_path, in->now, &c);
    jwt_keyset_drop(ks);
    if (id->result == JWT_UNKNOWN_KID && in->keys && jwks_unknown_kid(in->keys))
        log_event("warn", "auth: a token names kid '%.64s', which the issuer's key set lacks: fetching the keys "
                  "again; the token is refused", c.kid);
    if (id->result != JWT_OK) {
        char why[64];
        snprintf(why, sizeof why, "the token was refused (%s)", jwt_result_name(id->result));
        return access_unauthorized(in, why, p);
    }
    memset(&id->tok, 0, sizeof id->tok);
    snprintf(id->name, sizeof id->name, "%s", c.agent);
    id->tok.name = id->name;
    id->tok.role = c.operator ? ROLE_OPERATOR : ROLE_AGENT;
    id->tok.agent = c.operator ? NULL : config_agent(cfg, id->name);
    /* As in tokens_file: an agent and an operator may not share a name, or
     * the ledger and the log could not tell them apart. */
    for (size_t i = 0; i < cfg->ntokens; i++)
        if (cfg->tokens[i].role != id->tok.role && strcmp(cfg->tokens[i].name, id->name) == 0)
            return problem_set(p, 403, "forbidden", "Forbidden",
                               "the token names '%s', which tokens_file gives the other role", id->name);
    if (!c.scopes_ok) {
        char want[300];
        access_required(&cfg->auth, want, sizeof want);
        return access_scope_short(want, p);
    }
    return 0;
}

/* Who the header names: a token of the file, else (with [auth]) a JWT.
 * 0 and *t, or -1 with p (401). */
static int access_identify(const access_in *in, access_ident *id, const auth_token **t, problem *p)
{
    const char *h = in->authorization;
    *t = access_token(in->cfg, h);
    if (*t)
        return 0;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return access_unauthorized(in, NULL, p);
    if (in->cfg->auth.issuer == NULL)
        return access_unauthorized(in, NULL, p);
    if (access_jwt(in, h + 7, id, p) < 0)
        return -1;
    *t = &id->tok;
    return 0;
}

/* /metrics with its own token: that token, or an operator's. */
static int access_metrics(const access_in *in, access_ident *id, const auth_token **who, problem *p)
{
    const char *want = in->cfg->metrics_token, *h = in->authorization;
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        const char *tok = h + 7;
        size_t n = strlen(tok);
        if (n == strlen(want) && CRYPTO_memcmp(tok, want, n) == 0)
            return 0;
    }
    const auth_token *t;
    if (access_identify(in, id, &t, p) < 0)
        return -1;
    if (t->role != ROLE_OPERATOR)
        return problem_set(p, 403, "forbidden", "Forbidden", "metrics need the metrics token or an operator token");
    *who = t;
    return 0;
}

int access_decide(const access_in *in, access_level need, access_ident *id, const auth_token **who, problem *p)
{
    const once_config *cfg = in->cfg;
    *who = NULL;
    if (need == ACCESS_OPEN)
        return 0;
    if (need == ACCESS_METRICS)
        return cfg->metrics_token ? access_metrics(in, id, who, p) : 0;
    if (!config_auth_on(cfg))
        return 0; /* open, which config_check_exposure allows on loopback only */
    if (access_query_token(in->query))
        return access_unauthorized(in, "a token in the query string (access_token) is never accepted", p);
    const auth_token *t;
    if (access_identify(in, id, &t, p) < 0)
        return -1;
    /* Known from here on, refused or not: the log and the metrics name it. */
    *who = t;
    if (need == ACCESS_OPERATOR && t->role != ROLE_OPERATOR && t == &id->tok)
        return access_scope_short(cfg->auth.operator_scope, p);
    if (need == ACCESS_OPERATOR && t->role != ROLE_OPERATOR)
        return problem_set(p, 403, "forbidden", "Forbidden",
                           "this is an operator's decision; the token '%s' is an agent's", t->name);
    if (t == &id->tok && cfg->agents_closed && t->role == ROLE_AGENT && t->agent == NULL)
        return problem_set(p, 403, "forbidden", "Forbidden",
                           "agents = closed: the agent '%s' named by the token has no [agent.%s] section", t->name,
                           t->name);
    return 0;
}

int access_check(const once_config *cfg, access_level need, const char *authorization, const auth_token **who,
                 problem *p)
{
    access_in in = {.cfg = cfg, .authorization = authorization, .resource_path = ""};
    access_ident id;
    memset(&id, 0, sizeof id);
    return access_decide(&in, need, &id, who, p);
}

/* Whether s[0..n) is a port: 1 to 5 digits, at most 65535. */
static int host_port_valid(const char *s, size_t n)
{
    unsigned long v = 0;
    if (n == 0 || n > 5)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    return v <= 65535;
}

/* Whether c may stand in an RFC 3986 reg-name (unreserved, sub-delims; '%'
 * escapes are checked by the caller). */
static int host_reg_char(unsigned char c)
{
    return pct_unreserved(c) || (c != '\0' && strchr("!$&'()*+,;=", c) != NULL);
}

int access_host_valid(const char *host)
{
    size_t n = strlen(host), i = 0;
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        if (!end || end == host + 1)
            return 0;
        for (const char *c = host + 1; c < end; c++)
            if (hex_value(*c) < 0 && *c != ':' && *c != '.')
                return 0;
        i = (size_t)(end - host) + 1;
    } else {
        while (i < n && host[i] != ':') {
            if (host[i] == '%' ? hex_value(host[i + 1]) < 0 || hex_value(host[i + 2]) < 0
                               : !host_reg_char((unsigned char)host[i]))
                return 0;
            i += host[i] == '%' ? 3 : 1;
        }
        if (i == 0)
            return 0;
    }
    if (i == n)
        return 1;
    return host[i] == ':' && host_port_valid(host + i + 1, n - i - 1);
}

/* Host without its port: "[::1]:80" -> "::1", "a.b:80" -> "a.b". */
static size_t host_name(const char *host, const char **start)
{
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        *start = host + 1;
        return end ? (size_t)(end - host - 1) : 0;
    }
    *start = host;
    return strcspn(host, ":");
}

/* IP literals and localhost cannot be rebound: a page can only reach them
 * under those very names. */
static int host_is_pinned(const char *host)
{
    const char *h;
    size_t n = host_name(host, &h);
    char name[64];
    unsigned char addr[16];
    if (n == 0 || n >= sizeof name)
        return 0;
    memcpy(name, h, n);
    name[n] = '\0';
    return strcasecmp(name, "localhost") == 0 || inet_pton(AF_INET, name, addr) == 1 ||
           inet_pton(AF_INET6, name, addr) == 1;
}

/* Compares an authority with its default port left out or spelled out. */
static int authority_equal(const char *a, size_t an, const char *b, size_t bn, const char *defport)
{
    size_t dl = strlen(defport);
    if (an > dl && strncmp(a + an - dl, defport, dl) == 0)
        an -= dl;
    if (bn > dl && strncmp(b + bn - dl, defport, dl) == 0)
        bn -= dl;
    return an == bn && strncasecmp(a, b, an) == 0;
}

/* Is origin ("scheme://authority") the gateway's own, as the client
 * reached it (scheme from the listener, authority from Host)? */
static int origin_is_own(const char *origin, int tls, const char *host)
{
    const char *scheme = tls ? "https://" : "http://";
    size_t sl = strlen(scheme);
    if (!host || strncasecmp(origin, scheme, sl) != 0)
        return 0;
    const char *auth = origin + sl;
    return authority_equal(auth, strlen(auth), host, strlen(host), tls ? ":443" : ":80");
}

int access_browser(const once_config *cfg, int tls, const char *host, const char *origin, const char *fetch_site,
                   problem *p)
{
    if (!config_auth_on(cfg) && host && !host_is_pinned(host))
        return problem_set(p, 421, "misdirected_request", "Misdirected request",
                           "without tokens the gateway answers only to an IP address or localhost as Host, "
                           "not '%.64s'",
                           host);
    if (fetch_site && strcasecmp(fetch_site, "cross-site") == 0)
        return problem_set(p, 403, "cross_origin", "Cross-origin request",
                           "a request from another site's page is refused (Sec-Fetch-Site: cross-site)");
    if (origin && !origin_is_own(origin, tls, host))
        return problem_set(p, 403, "cross_origin", "Cross-origin request",
                           "a request from a page of another origin (%.80s) is refused", origin);
    return 0;
}
