/*
 * config.h — the gateway's configuration, loaded from an INI file.
 *
 * The loader is strict: unknown sections or keys, bad values and any line
 * inih reports are errors naming file:line, because a typo in a retry policy
 * is a double charge waiting to happen.
 */
#ifndef ONCE_SERVER_CONFIG_H
#define ONCE_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum mismatch_policy { MISMATCH_REPLAY = 0, MISMATCH_REJECT = 1 } mismatch_policy;

typedef struct upstream_cfg {
    char *name;            /* the section's NAME in [upstream.NAME]; the action scope */
    char *url;             /* base URL without a trailing slash, http:// or https:// */
    char **headers;        /* injected "Name: value" lines, in file order */
    size_t nheaders;
    int64_t timeout_ms;    /* timeout = 60s */
    int64_t lease_ms;      /* lease = max(server lease, timeout + 5s) unless set */
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
    size_t max_response;   /* max_response = 16MiB */
    int line;              /* line of the section header, for messages */
} upstream_cfg;

typedef struct once_config {
    char *path;            /* the file it was loaded from */
    char *listen;          /* [server] listen = 127.0.0.1:7600 */
    char *store;           /* store = sqlite:once.db */
    size_t max_body;       /* max_body = 1MiB */
    int64_t lease_ms;      /* lease = 30s */
    int64_t retention_ms;  /* retention = 24h */
    char **tokens;         /* from tokens_file: one per line, blank lines and # comments skipped */
    size_t ntokens;
    int64_t grace_ms;      /* shutdown_grace = 30s */
    int threads;           /* threads = 2: HTTP worker threads */
    unsigned max_connections; /* max_connections = 4096 */
    int64_t loop_interval_ms; /* loop_interval = 1s: lease expiry / hold / sweep */
    upstream_cfg *upstreams;
    size_t nupstreams;
} once_config;

/* Loads path into *cfg (zeroed first). On error returns a negative code,
 * leaves *cfg empty and writes "file:line: what" (or "file: what") to err. */
int config_load(const char *path, once_config *cfg, char *err, size_t errlen);

/* Frees what cfg owns and zeroes it. */
void config_free(once_config *cfg);

/* The upstream called name, or NULL. */
const upstream_cfg *config_upstream(const once_config *cfg, const char *name);

/* "250ms", "30s", "5m", "24h", "7d" -> milliseconds. 0 or -1. */
int config_parse_duration(const char *s, int64_t *ms);
/* "512", "64KiB", "1MiB", "1GiB" -> bytes. 0 or -1. */
int config_parse_size(const char *s, size_t *bytes);
/* "host:port", "[v6]:port" -> split; 0 or -1. host without brackets. */
int config_parse_listen(const char *s, char *host, size_t hostlen, unsigned *port);

#endif
