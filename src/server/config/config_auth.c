/*
 * config_auth.c — the [auth] section (docs/auth.md): the identity provider
 * whose bearer JWTs are accepted beside tokens_file. Its key table, the
 * setter of required_scopes, and what is decided once the file is in: an
 * issuer is required, the audience defaults to the gateway's base URL, and
 * key material never travels over plain HTTP except to a loopback host.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>

#define AUTH(f) offsetof(auth_cfg, f)
#define AUTH_CLAIM_MAX 64
#define AUTH_AUDIENCE_MAX 256 /* it goes into WWW-Authenticate with the metadata path */

/* One scope of required_scopes (space- or comma-separated, as a scope
 * claim lists them): printable ASCII without '"' or '\' (RFC 6749 3.3). */
static int config_scope_one(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    (void)nth;
    auth_cfg *a = arg;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
            return config_fail_value(c, ": a scope is printable ASCII without spaces, '\"' or '\\'");
    }
    if (n == 0)
        return 0;
    if (config_push_str(&a->required_scopes, &a->nrequired_scopes, s, n) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_required_scopes(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    auth_cfg *a = &c->cfg->auth;
    config_free_strs(a->required_scopes, a->nrequired_scopes);
    a->required_scopes = NULL;
    a->nrequired_scopes = 0;
    char *copy = strdup(v);
    if (copy == NULL)
        return config_fail_oom(c);
    for (char *p = copy; *p; p++)
        if (*p == ',')
            *p = ' ';
    int rc = config_split(c, copy, strlen(copy), ' ', config_scope_one, a);
    free(copy);
    return rc;
}

/* A claim name or a scope: 1-64 printable ASCII characters, no spaces. */
static int config_auth_word(config_ctx *c, const config_key *k, void *field, const char *v)
{
    size_t n = strlen(v);
    int bad = n == 0 || n > AUTH_CLAIM_MAX;
    for (size_t i = 0; i < n; i++)
        bad |= (unsigned char)v[i] <= 0x20 || (unsigned char)v[i] >= 0x7f || v[i] == '"' || v[i] == '\\';
    if (bad)
        return config_fail(c, "%s: 1-%d printable ASCII characters without spaces, '\"' or '\\'", k->name,
                           AUTH_CLAIM_MAX);
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

static const config_key config_auth_keys[] = {
    {.name = "issuer", .set = config_url, .field = AUTH(issuer), .flags = CK_NO_HASH},
    {.name = "audience", .set = config_url, .field = AUTH(audience), .flags = CK_NO_HASH | CK_BASE},
    {.name = "agent_claim", .set = config_auth_word, .field = AUTH(agent_claim), .default_value = "sub"},
    {.name = "operator_scope", .set = config_auth_word, .field = AUTH(operator_scope),
     .default_value = "once:operator"},
    {.name = "jwks_url", .set = config_url, .field = AUTH(jwks_url), .flags = CK_NO_HASH},
    {.name = "required_scopes", .set = config_required_scopes, .field = AUTH(required_scopes)},
    {.name = "ca_file", .set = config_pem, .field = AUTH(ca_file), .flags = CK_PATH},
};

/* The gateway's base URL as its listener says it, when the listener names
 * one host: scheme://listen. NULL for a wildcard address (0.0.0.0, [::]),
 * which names no host a client could use. */
static char *config_auth_base(const once_config *cfg)
{
    const char *l = cfg->listen;
    if (l == NULL || strncmp(l, "0.0.0.0:", 8) == 0 || strncmp(l, "[::]:", 5) == 0)
        return NULL;
    size_t n = strlen(l) + 16;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s://%s", cfg->tls_cert ? "https" : "http", l);
    return out;
}

static int config_auth_finish(config_ctx *c, size_t i)
{
    (void)i;
    auth_cfg *a = &c->cfg->auth;
    if (a->line == 0)
        return 0;
    if (a->issuer == NULL)
        return config_fail_at(c, a->line, "[auth]: issuer is required (the identity provider's issuer URL)");
    if (!config_url_transport_ok(a->issuer))
        return config_fail_at(c, config_line(c, CONFIG_AUTH, 0, "issuer"),
                              "issuer: plain http is allowed for a loopback host only (127.0.0.1, [::1], "
                              "localhost); the keys that sign tokens must not travel unprotected");
    if (a->jwks_url != NULL && !config_url_transport_ok(a->jwks_url))
        return config_fail_at(c, config_line(c, CONFIG_AUTH, 0, "jwks_url"),
                              "jwks_url: plain http is allowed for a loopback host only (127.0.0.1, [::1], "
                              "localhost)");
    if (a->audience == NULL && (a->audience = config_auth_base(c->cfg)) == NULL)
        return c->cfg->listen == NULL ? config_fail_oom(c)
                                      : config_fail_at(c, a->line,
                                                       "[auth]: set audience to the gateway's base URL as clients "
                                                       "reach it (listen %s names no host)",
                                                       c->cfg->listen);
    if (strlen(a->audience) > AUTH_AUDIENCE_MAX)
        return config_fail_at(c, a->line, "[auth]: audience is longer than %d characters", AUTH_AUDIENCE_MAX);
    return 0;
}

void config_auth_free(auth_cfg *a)
{
    free(a->issuer);
    free(a->audience);
    free(a->agent_claim);
    free(a->operator_scope);
    free(a->jwks_url);
    free(a->ca_file);
    config_free_strs(a->required_scopes, a->nrequired_scopes);
    memset(a, 0, sizeof *a);
}

/* [auth]'s one instance is the once_config's auth. */
const config_section config_auth_section = {
    .kind = CONFIG_AUTH,
    .prefix = "auth",
    .keys = config_auth_keys,
    .nkeys = CONFIG_NKEYS(config_auth_keys),
    .size = sizeof(auth_cfg),
    .line_field = offsetof(auth_cfg, line),
    .finish = config_auth_finish,
};
