/*
 * resource_meta.c — the OAuth 2.0 protected-resource metadata (RFC 9728)
 * of the gateway and of each MCP server under it ([auth], docs/auth.md):
 * what a 401's WWW-Authenticate points an MCP client to, so it finds the
 * authorization server and asks it for a token for this resource. Served
 * to anyone: it holds nothing but the configured issuer and scopes.
 */
#include <stdio.h>
#include <string.h>

#include "server/config/config.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/ops/ops.h"

/* The document for the resource audience + path. */
static void meta_answer(req *r, const char *path)
{
    const auth_cfg *a = &r->srv->cfg->auth;
    json_t *scopes = json_array();
    for (size_t i = 0; scopes && i < a->nrequired_scopes; i++)
        json_array_append_new(scopes, json_string(a->required_scopes[i]));
    if (scopes)
        json_array_append_new(scopes, json_string(a->operator_scope));
    char resource[512];
    snprintf(resource, sizeof resource, "%s%s", a->audience, path);
    json_t *doc = json_pack("{s:s, s:[s], s:o, s:[s], s:s}", "resource", resource, "authorization_servers",
                            a->issuer, "scopes_supported", scopes ? scopes : json_array(),
                            "bearer_methods_supported", "header", "resource_name", "once");
    if (doc == NULL) {
        req_out_of_memory(r);
        return;
    }
    req_set_header(r, "Cache-Control", "max-age=300");
    req_json(r, 200, doc);
}

static int meta_off(req *r)
{
    if (r->srv->cfg->auth.issuer != NULL)
        return 0;
    req_problem(r, 404, "not_found", "Not found", NULL, "no [auth] is configured: tokens come from tokens_file");
    return -1;
}

static void meta_gateway(req *r)
{
    if (meta_off(r) == 0)
        meta_answer(r, "");
}

static void meta_mcp(req *r)
{
    if (meta_off(r) != 0)
        return;
    char name[ONCE_SCOPE_MAX + 1];
    size_t n = r->match.seglen[0];
    const upstream_cfg *up = NULL;
    if (n <= ONCE_SCOPE_MAX) {
        memcpy(name, r->match.seg[0], n);
        name[n] = '\0';
        up = config_upstream(r->srv->cfg, name);
    }
    if (up == NULL || !up->mcp) {
        req_problem(r, 404, "not_found", "Not found", NULL, "no MCP server of that name");
        return;
    }
    char path[ONCE_SCOPE_MAX + 16];
    snprintf(path, sizeof path, "/v1/mcp/%s", name);
    meta_answer(r, path);
}

const route resource_meta_routes[] = {
    {.pattern = "/.well-known/oauth-protected-resource", .name = "resource_metadata", .access = ACCESS_OPEN,
     .methods = {{"GET", meta_gateway}}},
    {.pattern = "/.well-known/oauth-protected-resource/v1/mcp/{}", .name = "resource_metadata",
     .access = ACCESS_OPEN, .methods = {{"GET", meta_mcp}}},
    {.pattern = NULL},
};
