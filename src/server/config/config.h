/*
 * config.h — the gateway's configuration, loaded from an INI file.
 *
 * The loader is strict: unknown sections or keys, bad values and any line
 * inih reports are errors naming file:line, because a typo in a retry policy
 * is a double charge waiting to happen. Each section's keys are a table
 * (name, type, field, bounds, default, flags): config_server.c,
 * config_upstream.c, config_mcp.c, config_source.c, and config_endpoint.c
 * for the keys an upstream and an MCP server share; the rest is
 * config_keys.h.
 */
#ifndef ONCE_SERVER_CONFIG_H
#define ONCE_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_LOOKUP_ATTEMPTS_MAX 100

typedef enum mismatch_policy { MISMATCH_REPLAY = 0, MISMATCH_REJECT = 1 } mismatch_policy;

typedef struct upstream_cfg {
    char *name;            /* the section's NAME in [upstream.NAME]; the action scope */
    char *url;             /* base URL without a trailing slash, http:// or https:// */
    char **headers;        /* injected "Name: value" lines, in file order */
    size_t nheaders;
    int64_t timeout_ms;    /* timeout = 60s */
    int64_t lease_ms;      /* lease = the server's: renewed every lease/3 while a call runs */
    int64_t retention_ms;  /* retention = the server's */
    int key_required;      /* key_required = yes: unsafe methods need a key */
    int key_safe_methods;  /* key_safe_methods = no: GET/HEAD/OPTIONS with a key are still recorded;
                              yes: they also need a key when key_required */
    mismatch_policy on_mismatch;  /* on_mismatch = replay | reject */
    int *release_on;       /* release_on = 429,503 */
    size_t nrelease_on;
    int *unknown_on;       /* unknown_on = 500,502,504 */
    size_t nunknown_on;
    char *forward_key_as;  /* optional header name */
    char *listen;          /* optional own listen address */
    char *listen_tls_cert; /* listen_tls_cert / listen_tls_key: that listener serves HTTPS */
    char *listen_tls_key;
    char *ca_file;         /* ca_file: the CA (PEM) trusted for this upstream instead of the system's */
    char *tls_cert;        /* tls_cert / tls_key: a client certificate for mutual TLS */
    char *tls_key;
    int actions_api;       /* actions_api = no: may the actions API reserve and settle in this scope */
    size_t max_response;   /* max_response = 16MiB */
    int line;              /* line of the section header, for messages */

    /* Intent-derived keys (docs/keys.md). */
    struct key_template *key;   /* key = TEMPLATE; NULL when unset */
    int key_from_template;      /* key_source = template: the template even when a key is sent;
                                   key_source = header (default): the client's key when it sends one */

    /* Reconciliation: ask the provider whether an unknown action happened. */
    char *lookup_method;        /* lookup = METHOD PATH: GET, HEAD or POST; NULL = no lookup */
    char *lookup_path;          /* the PATH part: {key} {scope} {json:/ptr} {header:Name} filled in */
    char *lookup_found;         /* lookup_found = json:/pointer: present (string or integer) -> found,
                                   its value is the provider id */
    int *lookup_absent_status;  /* lookup_absent = 404 | json-empty:/data ('|'-separated) */
    size_t nlookup_absent_status;
    char **lookup_absent_empty; /* json-empty:/ptr: an empty array/object/string/null or absent -> absent */
    size_t nlookup_absent_empty;
    int64_t lookup_backoff_ms;  /* lookup_backoff = 10s, doubling per failed lookup */
    int lookup_attempts;        /* lookup_attempts = 5 (1..CONFIG_LOOKUP_ATTEMPTS_MAX): then held */

    /* Approvals (docs/approvals.md): matching new requests wait for a human. */
    char **approve;             /* approve = RULE, ...: "METHOD PATTERN" each ("*" any method; '*' in
                                   PATTERN any characters); "all" is stored as "* *" */
    size_t napprove;
    int64_t approve_ttl_ms;     /* approve_ttl = 24h: undecided after this, denied */
    int limit_approvals;        /* an agent with over_limit = approve has a limit on it (set by the loader):
                                   its actions may wait for a person, so the approvals job claims them */

    /* [mcp.NAME] (docs/mcp.md): an MCP server in the same namespace; its
     * approve holds tool names, and url is NULL for a stdio server. */
    int mcp;                    /* 1 for an [mcp.NAME] section */
    char **command;             /* command = PROGRAM ARG...: argv of a stdio server */
    size_t ncommand;
    struct mcp_tool_key *tool_keys; /* key.TOOL = TEMPLATE */
    size_t ntool_keys;
    char **readonly;            /* readonly = TOOL, ...: never recorded */
    size_t nreadonly;
    int approve_destructive;    /* approve = destructive: tools not marked safe by the upstream */
    int64_t wait_ms;            /* wait = 30s: a duplicate in flight waits this long for the result */
} upstream_cfg;

/* key.TOOL = TEMPLATE of an [mcp.NAME] section. */
typedef struct mcp_tool_key {
    char *tool;
    struct key_template *key;
} mcp_tool_key;

/* [source.NAME]: a webhook sender (see docs/config.md). */
typedef struct source_cfg {
    char *name;            /* the section's NAME: the event source, 1-64 of [A-Za-z0-9._-] */
    int verify;            /* verify = stripe|github|standard|slack|hmac-sha256|none (a sig_scheme) */
    char **secrets;        /* secret / secret_file: comma-separated, several for rotation */
    size_t nsecrets;
    int insecure;          /* insecure = yes: required with verify = none */
    char *event_id;        /* event_id = json:/pointer | header:Name; default per scheme */
    int64_t tolerance_ms;  /* tolerance = 5m */
    char *signature_header;   /* hmac-sha256 */
    int signature_base64;     /* signature_encoding = hex (0) | base64 (1) */
    char *signature_prefix;   /* optional */
    char *deliver_to;      /* push URL; NULL = pull (inbox) */
    char *deliver_secret;  /* optional whsec_<base64>: sign what we deliver */
    int max_attempts;      /* max_attempts = 12 */
    int64_t retry_base_ms; /* retry_base = 1s */
    int64_t retry_cap_ms;  /* retry_cap = 1h */
    int64_t retention_ms;  /* retention = 7d: the dedupe window */
    int64_t timeout_ms;    /* timeout = 30s: of one push delivery */
    int concurrency;       /* concurrency = 8: push deliveries in flight */
    int line;
} source_cfg;

/* Who a bearer token speaks for (docs/config.md, tokens_file): agents act; operators also
 * decide (resolve, approve, deny, redeliver, the console). */
typedef enum token_role { ROLE_AGENT = 1, ROLE_OPERATOR = 2 } token_role;

typedef struct auth_token {
    unsigned char digest[32]; /* SHA-256 of the bearer token: the file may hold the token or
                                 "sha256:HEX"; only the digest is kept, never the token */
    token_role role;
    char *name;            /* the agent (or operator) it speaks for: the third word, else
                              "<role>-<line>"; 1-64 of A-Z a-z 0-9 . _ - (it is stored in the ledger) */
    const struct agent_cfg *agent; /* an agent's [agent.NAME] section in the same config, or NULL */
} auth_token;

/* What an [agent.NAME] allow or limit line is about (docs/agents.md). */
typedef enum grant_kind { GRANT_UPSTREAM = 1, GRANT_MCP = 2, GRANT_ACTIONS = 3, GRANT_HOOKS = 4 } grant_kind;

/* allow = TARGET: ITEM, ITEM, ... */
typedef struct agent_grant {
    grant_kind kind;
    char *target;  /* the upstream's or MCP server's name; NULL for actions and hooks */
    char **items;  /* upstream: "METHOD PATTERN" in canonical form; MCP: tools; actions: scope
                      patterns; hooks: sources; "*": all */
    size_t nitems;
    int line;
} agent_grant;

/* limit = TARGET[: RULE] [sum({json:/pointer})] N/WINDOW */
typedef struct agent_limit {
    char *text;        /* as written: names the limit in answers, logs and metrics */
    char *ledger_id;   /* "AGENT\nTEXT": the budget's identity in the ledger (once_limit_charge.limit) */
    grant_kind kind;   /* an upstream, an MCP server or actions (hooks have none) */
    char *target;      /* as in agent_grant */
    char *rule;        /* "METHOD PATTERN", a tool or a scope pattern; NULL: all of the target */
    char *sum;         /* the JSON pointer summed; NULL: a count */
    uint64_t max;
    int64_t window_ms; /* 1s .. 30d */
    int line;
} agent_limit;

/* [agent.NAME]: what one agent may reach and how much it may do. */
typedef struct agent_cfg {
    char *name; /* first: the loader's named sections start with their name */
    agent_grant *grants;
    size_t ngrants;
    agent_limit *limits;
    size_t nlimits;
    int over_limit_approve; /* over_limit = refuse (0) | approve (1) */
    int line;
} agent_cfg;

/* [auth] (docs/auth.md): bearer JWTs from an identity provider, beside tokens_file. */
typedef struct auth_cfg {
    char *issuer;          /* issuer = URL: the tokens' iss, exactly; NULL: no [auth] */
    char *audience;        /* audience = URL: an aud the tokens must hold; default the gateway's base URL
                              (http(s)://listen), which the protected-resource metadata names */
    char *agent_claim;     /* agent_claim = sub: the claim whose value is the agent */
    char *operator_scope;  /* operator_scope = once:operator: a scope that makes the caller an operator */
    char *jwks_url;        /* jwks_url = URL; NULL: found by discovery from the issuer */
    char **required_scopes; /* required_scopes = A B: scopes every token must hold */
    size_t nrequired_scopes;
    char *ca_file;         /* ca_file: the CA (PEM) trusted for the issuer instead of the system's */
    int line;              /* where [auth] stood; 0: none */
} auth_cfg;

typedef struct once_config {
    char *path;            /* the file it was loaded from */
    char *listen;          /* [server] listen = 127.0.0.1:7600 */
    char *store;           /* store = sqlite:once.db */
    size_t max_body;       /* max_body = 1MiB */
    int64_t lease_ms;      /* lease = 10s: a reservation lives this long without news from its owner */
    int64_t retention_ms;  /* retention = 24h */
    auth_token *tokens;    /* from tokens_file: "TOKEN [ROLE [NAME]]" per line, # comments skipped */
    size_t ntokens;
    char **secret_files;   /* every *_file and TLS key read, resolved: warned about when readable */
    size_t nsecret_files;
    int inline_secrets;    /* the file itself holds secrets (metrics_token, secret, header): warned likewise */
    int insecure_no_auth;  /* insecure_no_auth = no: without tokens, only loopback listen addresses */
    unsigned max_conn_per_client;   /* max_connections_per_client = 256 (non-loopback; 0: no cap) */
    unsigned max_conn_per_loopback; /* max_connections_per_loopback_client = 0 (no cap) */
    int64_t request_timeout_ms;     /* request_timeout = 30s: headers and body must arrive within it */
    char **redact_headers; /* redact_headers = A, B: never stored, beside the fixed list */
    size_t nredact_headers;
    char *metrics_token;   /* metrics_token: /metrics then needs it (or an operator token) */
    char *tls_cert;        /* tls_cert / tls_key: the main listener serves HTTPS */
    char *tls_key;
    size_t wal_max;        /* wal_max = 64MiB: a SQLite WAL past this is truncated by a checkpoint */
    int64_t grace_ms;      /* shutdown_grace = 30s */
    int threads;           /* threads = 4: HTTP worker threads */
    unsigned max_connections; /* max_connections = 4096 */
    int64_t loop_interval_ms; /* loop_interval = 1s: lease expiry / hold / sweep */
    upstream_cfg *upstreams;
    size_t nupstreams;
    source_cfg *sources;
    size_t nsources;
    agent_cfg *agents;     /* [agent.NAME] sections */
    size_t nagents;
    int agents_closed;     /* agents = open (0) | closed (1): every agent token needs a section */
    auth_cfg auth;         /* [auth]: the start's (a reload does not change it) */
    int log_text;          /* log_format = json (0) | text (1): how a log line is written (core/log.c) */
} once_config;

/* Loads path into *cfg (zeroed first). On error returns a negative code,
 * leaves *cfg empty and writes "file:line: what" (or "file: what") to err. */
int config_load(const char *path, once_config *cfg, char *err, size_t errlen);
/* The same from text[0..len), as if it were the file path (which names it
 * in messages and is the base of relative *_file paths): for tests and the
 * fuzzer. */
int config_load_buffer(const char *text, size_t len, const char *path, once_config *cfg, char *err,
                       size_t errlen);

/* What a config holds, in the one wording check-config and serve's log
 * use: "1 upstream, 0 MCP servers, 2 webhook sources, 1 agent section". */
void config_summary(const once_config *cfg, char *out, size_t cap);

/* Frees what cfg owns and zeroes it. */
void config_free(once_config *cfg);

/* The upstream or MCP server called name (they share one namespace), or
 * NULL; up->mcp tells which. */
const upstream_cfg *config_upstream(const once_config *cfg, const char *name);
/* Whether s[0..n) may name an MCP tool here: 1-128 of A-Z a-z 0-9 _ - . /
 * (no ':', which ends the tool in a ledger key TOOL:KEY). */
int config_mcp_tool_ok(const char *s, size_t n);
/* The [agent.NAME] section called name, or NULL. */
const agent_cfg *config_agent(const once_config *cfg, const char *name);
/* The webhook source called name, or NULL. */
const source_cfg *config_source(const once_config *cfg, const char *name);

/* Whether callers must authenticate: a tokens_file with tokens, or an
 * [auth] issuer. */
int config_auth_on(const once_config *cfg);

/* Whether url may carry key material: https, or plain http to a loopback
 * host (127.0.0.0/8, [::1], localhost) for local development and tests.
 * 1 or 0. */
int config_url_transport_ok(const char *url);

/* 0 when every listen address (the server's and each upstream's own) is
 * loopback, or tokens are configured, or insecure_no_auth is set; else -1
 * with "ADDRESS: why" in err. Run after command-line overrides. */
int config_check_exposure(const once_config *cfg, char *err, size_t errlen);

/* Whether a listen address ("host:port") is on loopback: 127.0.0.0/8, ::1
 * or localhost. */
int config_listen_is_loopback(const char *listen);

/* "250ms", "30s", "5m", "24h", "7d" -> milliseconds. 0 or -1. */
int config_parse_duration(const char *s, int64_t *ms);
/* "512", "64KiB", "1MiB", "1GiB" -> bytes. 0 or -1. */
int config_parse_size(const char *s, size_t *bytes);
/* "host:port", "[v6]:port" -> split; 0 or -1. host without brackets. */
int config_parse_listen(const char *s, char *host, size_t hostlen, unsigned *port);

#endif
