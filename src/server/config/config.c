/*
 * config.c — the configuration's interface (config.h): loading a file or a
 * buffer, freeing, finding an upstream or a source, and the questions
 * asked of listen addresses (loopback? clashing?). How the file is read is
 * config_read.c; the keys are data, one table per section
 * (config_server.c, config_upstream.c, config_mcp.c, config_source.c) and
 * one for the keys [upstream.NAME] and [mcp.NAME] share
 * (config_endpoint.c); their typed setters are config_types.c (see
 * config_keys.h).
 */
#include "server/config/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/key_template.h"
#include "server/config/config_keys.h"

/* Writes "what" for path (quoted) into err and returns code. */
static int config_fail_path(const char *path, const char *what, int code, char *err, size_t errlen)
{
    char q[CONFIG_QUOTE_MAX * 2];
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", config_quote(path, q, sizeof q), what);
    return code;
}

int config_load(const char *path, once_config *cfg, char *err, size_t errlen)
{
    struct stat st;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (cfg == NULL)
        return -EINVAL;
    memset(cfg, 0, sizeof *cfg);
    if (path == NULL || path[0] == '\0') {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "no configuration file given");
        return -EINVAL;
    }
    FILE *fp = fopen(path, "re");
    if (fp == NULL) {
        int e = errno != 0 ? errno : EIO;
        char what[CONFIG_MSG_MAX / 2];
        snprintf(what, sizeof what, "cannot open: %s", strerror(e));
        return config_fail_path(path, what, -e, err, errlen);
    }
    int rc = fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)
                 ? config_fail_path(path, "is a directory", -EISDIR, err, errlen)
                 : config_load_stream(fp, path, cfg, err, errlen);
    fclose(fp);
    return rc;
}

int config_load_buffer(const char *text, size_t len, const char *path, once_config *cfg, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (cfg != NULL)
        memset(cfg, 0, sizeof *cfg);
    if (cfg == NULL || (text == NULL && len > 0) || path == NULL)
        return -EINVAL;
    /* "r": fmemopen only reads the buffer, whatever its prototype says. */
    FILE *fp = fmemopen((void *)(uintptr_t)(text != NULL ? text : ""), len, "r");
    if (fp == NULL)
        return config_fail_path(path, "out of memory", -ENOMEM, err, errlen);
    int rc = config_load_stream(fp, path, cfg, err, errlen);
    fclose(fp);
    return rc;
}

void config_free_strs(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void config_free_upstream(upstream_cfg *u)
{
    char *strs[] = {u->name,    u->url,      u->forward_key_as, u->listen,        u->listen_tls_cert, u->listen_tls_key,
                    u->ca_file, u->tls_cert, u->tls_key,        u->lookup_method, u->lookup_path,     u->lookup_found};
    for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++)
        free(strs[j]);
    config_free_strs(u->headers, u->nheaders);
    free(u->release_on);
    free(u->unknown_on);
    if (u->key != NULL)
        key_template_free(u->key);
    free(u->lookup_absent_status);
    config_free_strs(u->lookup_absent_empty, u->nlookup_absent_empty);
    config_free_strs(u->approve, u->napprove);
    config_free_strs(u->command, u->ncommand);
    config_free_strs(u->readonly, u->nreadonly);
    for (size_t j = 0; j < u->ntool_keys; j++) {
        free(u->tool_keys[j].tool);
        key_template_free(u->tool_keys[j].key);
    }
    free(u->tool_keys);
}

static void config_free_source(source_cfg *s)
{
    char *strs[] = {s->name, s->event_id, s->signature_header, s->signature_prefix, s->deliver_to, s->deliver_secret};
    for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++)
        free(strs[j]);
    config_free_strs(s->secrets, s->nsecrets);
}

void config_free(once_config *cfg)
{
    if (cfg == NULL)
        return;
    char *strs[] = {cfg->path, cfg->listen, cfg->store, cfg->metrics_token, cfg->tls_cert, cfg->tls_key};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        free(strs[i]);
    for (size_t i = 0; i < cfg->ntokens; i++)
        free(cfg->tokens[i].name);
    free(cfg->tokens);
    config_free_strs(cfg->secret_files, cfg->nsecret_files);
    config_free_strs(cfg->redact_headers, cfg->nredact_headers);
    for (size_t i = 0; i < cfg->nupstreams; i++)
        config_free_upstream(&cfg->upstreams[i]);
    free(cfg->upstreams);
    for (size_t i = 0; i < cfg->nsources; i++)
        config_free_source(&cfg->sources[i]);
    free(cfg->sources);
    for (size_t i = 0; i < cfg->nagents; i++)
        config_agent_free(&cfg->agents[i]);
    free(cfg->agents);
    config_auth_free(&cfg->auth);
    memset(cfg, 0, sizeof *cfg);
}

/* "N upstream(s)" with the plural spelled out. */
static size_t config_count_of(char *out, size_t cap, size_t n, const char *noun, const char *sep)
{
    int w = snprintf(out, cap, "%s%zu %s%s", sep, n, noun, n == 1 ? "" : "s");
    return w < 0 ? 0 : (size_t)w < cap ? (size_t)w : cap - 1;
}

void config_summary(const once_config *cfg, char *out, size_t cap)
{
    size_t nmcp = 0, at = 0;
    for (size_t i = 0; i < cfg->nupstreams; i++)
        nmcp += cfg->upstreams[i].mcp != 0;
    if (cap == 0)
        return;
    out[0] = '\0';
    at += config_count_of(out + at, cap - at, cfg->nupstreams - nmcp, "upstream", "");
    at += config_count_of(out + at, cap - at, nmcp, "MCP server", ", ");
    at += config_count_of(out + at, cap - at, cfg->nsources, "webhook source", ", ");
    config_count_of(out + at, cap - at, cfg->nagents, "agent section", ", ");
}

const upstream_cfg *config_upstream(const once_config *cfg, const char *name)
{
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->nupstreams; i++) {
        if (strcmp(cfg->upstreams[i].name, name) == 0)
            return &cfg->upstreams[i];
    }
    return NULL;
}

const agent_cfg *config_agent(const once_config *cfg, const char *name)
{
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->nagents; i++) {
        if (strcmp(cfg->agents[i].name, name) == 0)
            return &cfg->agents[i];
    }
    return NULL;
}

const source_cfg *config_source(const once_config *cfg, const char *name)
{
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->nsources; i++) {
        if (strcmp(cfg->sources[i].name, name) == 0)
            return &cfg->sources[i];
    }
    return NULL;
}

/* ---- listen addresses ------------------------------------------------------------- */

typedef struct config_addr {
    int family; /* AF_INET, AF_INET6, or 0 for localhost */
    unsigned char addr[16];
    unsigned port;
} config_addr;

/* A listen address, parsed; 0, or -1 (then all zero) when it is not one. */
static int config_addr_of(const char *listen, config_addr *a)
{
    char host[CONFIG_HOST_MAX];
    memset(a, 0, sizeof *a);
    if (config_parse_listen(listen, host, sizeof host, &a->port) != 0)
        return -1;
    if (inet_pton(AF_INET, host, a->addr) == 1)
        a->family = AF_INET;
    else if (inet_pton(AF_INET6, host, a->addr) == 1)
        a->family = AF_INET6;
    return 0;
}

static int config_addr_is_any(const config_addr *a)
{
    static const unsigned char zero[16];
    return a->family != 0 && memcmp(a->addr, zero, a->family == AF_INET ? 4 : 16) == 0;
}

/* The same port, and the same host, or either a wildcard, or either
 * "localhost" (which may be any loopback address). */
int config_listen_clash(const char *x, const char *y)
{
    config_addr a;
    config_addr b;
    config_addr_of(x, &a);
    config_addr_of(y, &b);
    if (a.port != b.port)
        return 0;
    if (a.family == 0 || b.family == 0 || config_addr_is_any(&a) || config_addr_is_any(&b))
        return 1;
    return a.family == b.family && memcmp(a.addr, b.addr, a.family == AF_INET ? 4 : 16) == 0;
}

int config_listen_is_loopback(const char *listen)
{
    static const unsigned char v6_loopback[16] = {[15] = 1};
    config_addr a;
    if (config_addr_of(listen, &a) != 0)
        return 0;
    if (a.family == AF_INET)
        return a.addr[0] == 127;
    return a.family == 0 || memcmp(a.addr, v6_loopback, 16) == 0; /* 0: localhost */
}

int config_auth_on(const once_config *cfg)
{
    return cfg->ntokens > 0 || cfg->auth.issuer != NULL;
}

int config_check_exposure(const once_config *cfg, char *err, size_t errlen)
{
    if (config_auth_on(cfg) || cfg->insecure_no_auth)
        return 0;
    const char *bad = NULL;
    if (!config_listen_is_loopback(cfg->listen))
        bad = cfg->listen;
    for (size_t i = 0; !bad && i < cfg->nupstreams; i++)
        if (cfg->upstreams[i].listen && !config_listen_is_loopback(cfg->upstreams[i].listen))
            bad = cfg->upstreams[i].listen;
    if (!bad)
        return 0;
    snprintf(err, errlen,
             "refusing to listen on %s without tokens: it is not a loopback address, and with no tokens_file "
             "or [auth] anyone who reaches it may use the upstreams' credentials (set tokens_file or [auth], listen on 127.0.0.1, "
             "or set insecure_no_auth = yes)",
             bad);
    return -1;
}
