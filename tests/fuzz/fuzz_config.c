/*
 * fuzz_config.c — libFuzzer target for the gateway's configuration loader:
 * the input is loaded as a whole config file (through fmemopen, so the
 * line reader, inih and every setter see it exactly as a file: [server],
 * [upstream.NAME], [mcp.NAME], [source.NAME] and [agent.NAME] alike), and is also
 * given raw to the duration, size and listen parsers.
 *
 * The loader is part of the server's object library, which the target
 * links; config_load_buffer feeds it memory. *_file keys may name real
 * files; the loader only opens regular files of at most 1 MiB, so that is
 * harmless.
 */
#include "server/config/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/webhook_sig.h"
#include "once/once.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The control characters no secret may hold. */
#define FUZZ_CTL "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10" \
                 "\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"

/* What the grants and limits rely on without checking again: every agent
 * grants something, on targets that exist as the kind named; every limit
 * has a window of 1 s to 30 d, a max, a ledger identity and a granted
 * target; a token points at its own section, and under agents = closed
 * every agent token has one. */
static void fuzz_check_agents(const once_config *cfg)
{
    for (size_t i = 0; i < cfg->nagents; i++) {
        const agent_cfg *a = &cfg->agents[i];
        if (a->ngrants == 0 || a->nlimits > ONCE_LIMIT_CHARGES_MAX || config_agent(cfg, a->name) != a)
            __builtin_trap();
        for (size_t g = 0; g < a->ngrants; g++) {
            const agent_grant *gr = &a->grants[g];
            const upstream_cfg *u = gr->target != NULL ? config_upstream(cfg, gr->target) : NULL;
            if ((gr->kind == GRANT_UPSTREAM || gr->kind == GRANT_MCP) &&
                (u == NULL || (u->mcp != 0) != (gr->kind == GRANT_MCP)))
                __builtin_trap();
            if (gr->nitems == 0)
                __builtin_trap();
        }
        for (size_t l = 0; l < a->nlimits; l++) {
            const agent_limit *lim = &a->limits[l];
            if (lim->window_ms < 1000 || lim->window_ms > 30LL * 24 * 3600 * 1000 || lim->max == 0 ||
                lim->ledger_id == NULL || lim->kind == GRANT_HOOKS)
                __builtin_trap();
        }
    }
    for (size_t t = 0; t < cfg->ntokens; t++) {
        const auth_token *tok = &cfg->tokens[t];
        if (once_scope_validate(tok->name) != ONCE_OK ||
            (tok->agent != NULL && (tok->role != ROLE_AGENT || strcmp(tok->agent->name, tok->name) != 0)) ||
            (cfg->agents_closed && tok->role == ROLE_AGENT && tok->agent == NULL))
            __builtin_trap();
    }
}

/* Checks what the loader promises whatever the input: on success a
 * complete config, on failure an empty one and a one-line message. */
static void fuzz_check_config(int rc, const once_config *cfg, const char *err)
{
    if (rc != 0) {
        if (cfg->path != NULL || cfg->upstreams != NULL || cfg->nupstreams != 0 ||
            cfg->sources != NULL || cfg->nsources != 0 || cfg->agents != NULL || cfg->nagents != 0 || err[0] == '\0' ||
            strchr(err, '\n') != NULL)
            __builtin_trap();
        return;
    }
    if (cfg->listen == NULL || cfg->store == NULL || cfg->lease_ms <= 0 || cfg->max_body == 0)
        __builtin_trap();
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        const upstream_cfg *u = &cfg->upstreams[i];
        size_t len = u->url != NULL ? strlen(u->url) : 0;
        /* An upstream's url is a base, without a trailing '/'; an MCP
         * server has exactly one of a url (kept as written) and a command. */
        if (u->mcp ? ((u->url == NULL) == (u->command == NULL) || (u->url != NULL && len == 0))
                   : (len == 0 || u->url[len - 1] == '/'))
            __builtin_trap();
        /* The lease is the server's (renewed while a call runs), not grown
         * with the timeout. */
        if (u->lease_ms <= 0 || u->lease_ms > ONCE_LEASE_MAX_MS || u->retention_ms <= 0 ||
            u->max_response == 0 || u->max_response > ONCE_BODY_MAX || config_upstream(cfg, u->name) != u)
            __builtin_trap();
        for (size_t j = 0; j < u->nheaders; j++) {
            if (strchr(u->headers[j], '\n') != NULL || strchr(u->headers[j], '\r') != NULL)
                __builtin_trap();
        }
        /* An MCP server's key_source = template pins its key.TOOL templates;
         * the rest is the proxy's. */
        if (u->mcp && u->key_from_template && u->ntool_keys == 0)
            __builtin_trap();
        if (u->mcp)
            continue;
        /* What the proxy and the reconciler rely on without checking again. */
        if ((u->key_from_template && u->key == NULL) || u->lookup_backoff_ms <= 0 ||
            u->lookup_attempts < 1 || u->lookup_attempts > CONFIG_LOOKUP_ATTEMPTS_MAX ||
            (u->lookup_method == NULL) != (u->lookup_path == NULL) ||
            (u->lookup_method == NULL &&
             (u->lookup_found != NULL || u->nlookup_absent_status != 0 ||
              u->nlookup_absent_empty != 0)) ||
            (u->lookup_method != NULL &&
             (u->lookup_path[0] != '/' || u->lookup_found == NULL ||
              strncmp(u->lookup_found, "json:", 5) != 0 ||
              u->nlookup_absent_status + u->nlookup_absent_empty == 0)))
            __builtin_trap();
        for (size_t j = 0; j < u->nlookup_absent_status; j++) {
            if (u->lookup_absent_status[j] < 100 || u->lookup_absent_status[j] > 599)
                __builtin_trap();
        }
        for (size_t j = 0; j < u->nlookup_absent_empty; j++) {
            if (u->lookup_absent_empty[j][0] != '\0' && u->lookup_absent_empty[j][0] != '/')
                __builtin_trap();
        }
    }
    for (size_t i = 0; i < cfg->nsources; i++) {
        const source_cfg *s = &cfg->sources[i];
        /* What hooks.c and delivery.c rely on without checking again. */
        if (config_source(cfg, s->name) != s || s->event_id == NULL ||
            (strncmp(s->event_id, "json:", 5) != 0 && strncmp(s->event_id, "header:", 7) != 0) ||
            s->verify < SIG_NONE || s->verify > SIG_HMAC_SHA256 ||
            (s->verify == SIG_NONE) != (s->nsecrets == 0) ||
            (s->verify == SIG_NONE && !s->insecure) || s->nsecrets > SIG_MAX_SECRETS ||
            (s->verify == SIG_HMAC_SHA256 && s->signature_header == NULL) ||
            s->tolerance_ms <= 0 || s->max_attempts < 1 || s->retry_base_ms <= 0 ||
            s->retry_cap_ms < s->retry_base_ms || s->retention_ms <= 0 || s->timeout_ms <= 0 ||
            s->concurrency < 1 || (s->deliver_to == NULL && s->deliver_secret != NULL))
            __builtin_trap();
        for (size_t j = 0; j < s->nsecrets; j++) {
            if (s->secrets[j][0] == '\0' || strpbrk(s->secrets[j], FUZZ_CTL) != NULL ||
                (s->verify == SIG_STANDARD && !sig_whsec_valid(s->secrets[j], strlen(s->secrets[j]))))
                __builtin_trap();
        }
    }
    fuzz_check_agents(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The raw input, NUL-terminated, for the string parsers. */
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';

    int64_t ms;
    size_t bytes;
    char host[64];
    unsigned port;
    if (config_parse_duration(s, &ms) == 0 && ms < 0)
        __builtin_trap();
    (void)config_parse_size(s, &bytes);
    if (config_parse_listen(s, host, sizeof host, &port) == 0 && (port == 0 || port > 65535))
        __builtin_trap();
    (void)config_parse_listen(s, host, 8, &port);

    /* The input as a file. */
    once_config cfg;
    char err[256];
    int rc = config_load_buffer(s, size, "fuzz.ini", &cfg, err, sizeof err);
    fuzz_check_config(rc, &cfg, err);
    config_free(&cfg);
    free(s);
    return 0;
}
