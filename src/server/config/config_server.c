/*
 * config_server.c — the [server] section: its key table, the setters only
 * it needs (store, tokens_file, redact_headers, metrics_token), and what is
 * decided once the file is read: tls_cert goes with tls_key, every agent
 * token has a section under agents = closed, and the environment
 * (ONCE_LISTEN, ONCE_STORE) overrides the file.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/hex.h"
#include "once/once.h"

#define SRV(f) offsetof(once_config, f)
#define CONFIG_CONNS 1048576 /* max_connections and the per-client caps */
/* The stored request (a binary body in base64) must fit the ledger's
 * 16 MiB of request metadata. */
#define CONFIG_MAX_BODY_MAX ((int64_t)12 << 20)

/* Why a store URL is wrong, or NULL. The store itself decides what it can
 * open; this only catches what can never work. */
static const char *config_store_problem(const char *v)
{
    if (v[0] == '\0')
        return "empty (try sqlite:once.db)";
    if (config_has_ctl(v, strlen(v), 0))
        return "contains a control character";
    if (strncmp(v, "sqlite:", 7) == 0)
        return v[7] == '\0' ? "'sqlite:' needs a path (sqlite:PATH)" : NULL;
    if (strncmp(v, "postgres://", 11) == 0 || strncmp(v, "postgresql://", 13) == 0)
        return NULL;
    return "unknown scheme (expected sqlite:PATH or postgres://...)";
}

static int config_store(config_ctx *c, const config_key *k, void *field, const char *v)
{
    const char *why = config_store_problem(v);
    if (why != NULL)
        return config_fail(c, "%s: %s", k->name, why);
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* One word of a tokens_file line: printable ASCII without spaces. */
static size_t config_word_at(const char *s, size_t n, size_t *at, const char **word)
{
    size_t i = *at;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    *word = s + i;
    size_t start = i;
    while (i < n && s[i] != ' ' && s[i] != '\t')
        i++;
    *at = i;
    return i - start;
}

/* The digest a tokens_file line names: "sha256:HEX" (64 hex digits, the
 * token's SHA-256), or the SHA-256 of the token written out. 0 or -1. */
static int config_token_digest(const char *tok, size_t tl, unsigned char digest[32])
{
    static const char pre[] = "sha256:";
    size_t pl = sizeof pre - 1;
    if (tl > pl && memcmp(tok, pre, pl) == 0) {
        if (tl != pl + 64)
            return -1;
        for (size_t i = 0; i < 32; i++) {
            int hi = hex_value(tok[pl + 2 * i]), lo = hex_value(tok[pl + 2 * i + 1]);
            if (hi < 0 || lo < 0)
                return -1;
            digest[i] = (unsigned char)(hi << 4 | lo);
        }
        return 0;
    }
    return EVP_Digest(tok, tl, digest, NULL, digest_sha256(), NULL) == 1 ? 0 : -1;
}

/* "TOKEN [ROLE [NAME]]" per line (docs/config.md); TOKEN may be
 * "sha256:HEX". The token itself is never shown in a message, nor kept:
 * only its digest is. */
static int config_add_token(config_ctx *c, const char *fname, int fline, const char *s, size_t n)
{
    static const char form[] = "a token must be printable ASCII without spaces (or sha256: and 64 hex digits), "
                               "then optionally a role (agent or operator) and a name";
    once_config *cfg = c->cfg;
    size_t at = 0;
    const char *tok, *role, *name, *extra;
    size_t tl = config_word_at(s, n, &at, &tok);
    size_t rl = config_word_at(s, n, &at, &role);
    size_t nl = config_word_at(s, n, &at, &name);
    size_t xl = config_word_at(s, n, &at, &extra);
    int op = rl == 8 && strncmp(role, "operator", 8) == 0;
    int bad = rl != 0 && !op && !(rl == 5 && strncmp(role, "agent", 5) == 0);
    unsigned char digest[32];
    for (size_t i = 0; i < n; i++)
        bad |= (unsigned char)s[i] >= 0x7f;
    if (bad || config_has_ctl(s, n, 1) || tl == 0 || xl != 0 || config_token_digest(tok, tl, digest) != 0)
        return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, form);
    char defname[32];
    snprintf(defname, sizeof defname, "%s-%d", op ? "operator" : "agent", fline);
    char *nm = nl ? strndup(name, nl) : strdup(defname);
    if (nm == NULL)
        return config_fail_oom(c);
    if (once_scope_validate(nm) != ONCE_OK) {
        free(nm);
        return config_fail(c, "%s: '%s' line %d: a name is 1-64 characters of A-Z a-z 0-9 . _ -", c->key, fname,
                           fline);
    }
    for (size_t i = 0; i < cfg->ntokens; i++) {
        const char *why = memcmp(cfg->tokens[i].digest, digest, sizeof digest) == 0 ? "the same token is on an earlier line"
                          : strcmp(cfg->tokens[i].name, nm) == 0 && cfg->tokens[i].role != (op ? ROLE_OPERATOR : ROLE_AGENT)
                              ? "an agent and an operator may not share a name (the ledger and the log would not tell "
                                "them apart)"
                              : NULL;
        if (why != NULL) {
            free(nm);
            return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, why);
        }
    }
    auth_token *grown = realloc(cfg->tokens, (cfg->ntokens + 1) * sizeof *grown);
    if (grown == NULL) {
        free(nm);
        return config_fail_oom(c);
    }
    cfg->tokens = grown;
    auth_token *t = &cfg->tokens[cfg->ntokens++];
    memcpy(t->digest, digest, sizeof digest);
    t->name = nm;
    t->role = op ? ROLE_OPERATOR : ROLE_AGENT;
    return 0;
}

static int config_tokens_file(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    return config_read_file(c, v, config_add_token);
}

/* One name of redact_headers. */
static int config_redact_one(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    (void)nth;
    if (!config_is_token(s, n))
        return config_fail_value(c, " is not a comma-separated list of header names");
    if (config_push_str(arg, CONFIG_COUNT(arg, char **), s, n) != 0)
        return config_fail_oom(c);
    return 0;
}

/* redact_headers = A, B: header names never stored, beside the fixed list. */
static int config_redact_headers(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    return config_split(c, v, strlen(v), ',', config_redact_one, field);
}

static int config_metrics_token(config_ctx *c, const config_key *k, void *field, const char *v)
{
    if (v[0] == '\0' || config_has_ctl(v, strlen(v), 0) || strchr(v, ' ') != NULL)
        return config_fail(c, "%s: must be printable ASCII without spaces", k->name);
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* [server]: a row a key (config_keys.h). */
static const config_key config_server_keys[] = {
    {.name = "listen", .set = config_listen, .field = SRV(listen), .default_value = "127.0.0.1:7600"},
    {.name = "store", .set = config_store, .field = SRV(store), .default_value = "sqlite:once.db"},
    {.name = "max_body", .set = config_size, .field = SRV(max_body),
     .min = 1, .max = CONFIG_MAX_BODY_MAX, .default_value = "1MiB"},
    /* The ledger's own limits: refused at load, not as a 400 on every request. */
    {.name = "lease", .set = config_duration, .field = SRV(lease_ms),
     .min = 1, .max = ONCE_LEASE_MAX_MS, .default_value = "10s"},
    {.name = "retention", .set = config_duration, .field = SRV(retention_ms),
     .min = 1, .max = ONCE_RETENTION_MAX_MS, .default_value = "24h"},
    {.name = "tokens_file", .set = config_tokens_file, .field = SRV(tokens), .flags = CK_PATH | CK_SECRET},
    {.name = "shutdown_grace", .set = config_duration, .field = SRV(grace_ms), .default_value = "30s"},
    {.name = "threads", .set = config_uint, .field = SRV(threads), .min = 1, .max = 1024, .default_value = "4"},
    {.name = "max_connections", .set = config_uint, .field = SRV(max_connections),
     .min = 1, .max = CONFIG_CONNS, .default_value = "4096"},
    {.name = "loop_interval", .set = config_duration, .field = SRV(loop_interval_ms), .min = 1, .default_value = "1s"},
    {.name = "insecure_no_auth", .set = config_bool, .field = SRV(insecure_no_auth), .default_value = "no"},
    {.name = "max_connections_per_client", .set = config_uint, .field = SRV(max_conn_per_client),
     .max = CONFIG_CONNS, .default_value = "256"},
    {.name = "max_connections_per_loopback_client", .set = config_uint, .field = SRV(max_conn_per_loopback),
     .max = CONFIG_CONNS, .default_value = "0"},
    {.name = "request_timeout", .set = config_duration, .field = SRV(request_timeout_ms),
     .min = 1, .default_value = "30s"},
    {.name = "redact_headers", .set = config_redact_headers, .field = SRV(redact_headers)},
    {.name = "metrics_token", .set = config_metrics_token, .field = SRV(metrics_token), .flags = CK_SECRET},
    {.name = "tls_cert", .set = config_pem, .field = SRV(tls_cert), .flags = CK_PATH},
    {.name = "tls_key", .set = config_pem, .field = SRV(tls_key), .flags = CK_PATH | CK_SECRET},
    {.name = "wal_max", .set = config_size, .field = SRV(wal_max), .min = 1 << 20, .default_value = "64MiB"},
    {.name = "agents", .set = config_word, .field = SRV(agents_closed), .default_value = "open",
     .words = "open|closed"},
    {.name = "log_format", .set = config_word, .field = SRV(log_text), .default_value = "json", .words = "json|text"},
};

_Static_assert(offsetof(once_config, nredact_headers) == offsetof(once_config, redact_headers) + sizeof(char **),
               "CONFIG_COUNT");

/* ONCE_LISTEN and ONCE_STORE, when set and not empty, over the file. */
static int config_apply_env(config_ctx *c)
{
    once_config *cfg = c->cfg;
    char q[CONFIG_QUOTE_MAX];
    char host[CONFIG_HOST_MAX];
    unsigned port;
    const char *listen = getenv("ONCE_LISTEN");
    const char *store = getenv("ONCE_STORE");
    const char *why = store != NULL && store[0] != '\0' ? config_store_problem(store) : NULL;
    if (listen != NULL && listen[0] != '\0') {
        if (config_parse_listen(listen, host, sizeof host, &port) != 0)
            return config_fail_at(c, 0, "ONCE_LISTEN: '%s' is not HOST:PORT", config_quote(listen, q, sizeof q));
        if (config_set_str(&cfg->listen, listen) != 0)
            return config_fail_oom(c);
    }
    if (why != NULL)
        return config_fail_at(c, 0, "ONCE_STORE: %s", why);
    if (store != NULL && store[0] != '\0' && config_set_str(&cfg->store, store) != 0)
        return config_fail_oom(c);
    return 0;
}

/* Each agent token points at its section. agents = closed: every agent
 * token names an [agent.NAME] section, so no agent has reach nobody wrote
 * down. */
static int config_agents_closed(config_ctx *c)
{
    once_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->ntokens; i++) {
        auth_token *t = &cfg->tokens[i];
        t->agent = t->role == ROLE_AGENT ? config_agent(cfg, t->name) : NULL;
        if (cfg->agents_closed && t->role == ROLE_AGENT && t->agent == NULL)
            return config_fail_at(c, config_line(c, CONFIG_SERVER, 0, "agents"),
                                  "agents = closed: the token of agent '%s' (tokens_file) has no [agent.%s] section",
                                  t->name, t->name);
    }
    return 0;
}

/* A certificate without its key is half a setting. */
static int config_server_finish(config_ctx *c, size_t i)
{
    (void)i;
    if ((c->cfg->tls_cert == NULL) != (c->cfg->tls_key == NULL))
        return config_fail_at(c, c->server_line, "[server]: tls_cert and tls_key go together");
    if (config_agents_closed(c) != 0)
        return -1;
    return config_apply_env(c);
}

/* [server]'s one instance is the once_config itself: no size, no line. */
const config_section config_server_section = {
    .kind = CONFIG_SERVER,
    .prefix = "server",
    .keys = config_server_keys,
    .nkeys = CONFIG_NKEYS(config_server_keys),
    .finish = config_server_finish,
};
