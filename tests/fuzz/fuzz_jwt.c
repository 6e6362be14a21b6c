/*
 * fuzz_jwt.c — libFuzzer target for what [auth] reads from the network
 * (docs/auth.md): bearer JWTs (server/core/jwt.c), JWKS documents, and the
 * front's decision on an Authorization header and a query string
 * (front/access.c).
 *
 * Input layout: one byte of mode, then the rest:
 *   0  a compact token, checked against a fixed key set (RSA and EC keys
 *      made once at start)
 *   1  a JWKS document, parsed into a key set
 *   2  a claims object, signed ES256 with the set's EC key and checked, so
 *      the claim rules (iss, aud, exp, nbf, the agent claim, scopes) are
 *      reached past the signature
 *   3  "HEADER\nQUERY": access_decide on an Authorization header and a
 *      request's query, with [auth] on and no keys fetched
 * Checked whatever the input: a result is one of jwt_result's; JWT_OK comes
 * with an agent name of 1-64 name characters; without keys nothing is
 * accepted; a refusal of access_decide is a 401 or 403 with a challenge.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjose/cjose.h>
#include <jansson.h>

#include "once/once.h"
#include "server/core/jwt.h"
#include "server/front/access.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FZ_NOW 1800000000LL

static cjose_jwk_t *g_ec;
static jwt_keyset *g_keys;
static auth_cfg g_auth;
static once_config g_cfg;
static char *g_scopes[] = {"mcp"};

static json_t *fz_public(cjose_jwk_t *k, const char *kid)
{
    cjose_err err;
    char *s = cjose_jwk_to_json(k, false, &err);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    if (j)
        json_object_set_new(j, "kid", json_string(kid));
    return j;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    cjose_err err;
    static const uint8_t e[] = {1, 0, 1};
    cjose_jwk_t *rsa = cjose_jwk_create_RSA_random(2048, e, sizeof e, &err);
    g_ec = cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_256, &err);
    if (!rsa || !g_ec)
        abort();
    json_t *set = json_pack("{s:[o,o]}", "keys", fz_public(rsa, "r1"), fz_public(g_ec, "e1"));
    char *txt = json_dumps(set, 0);
    char why[160];
    if (!txt || jwt_keyset_parse(txt, strlen(txt), &g_keys, why, sizeof why) != 0)
        abort();
    free(txt);
    json_decref(set);
    cjose_jwk_release(rsa);
    g_auth = (auth_cfg){.issuer = "https://idp.example",
                        .audience = "https://once.example",
                        .agent_claim = "sub",
                        .operator_scope = "once:operator",
                        .required_scopes = g_scopes,
                        .nrequired_scopes = 1,
                        .line = 1};
    g_cfg.auth = g_auth;
    return 0;
}

static void fz_check(jwt_result r, const jwt_claims *c)
{
    if (r >= JWT_NRESULTS || strcmp(jwt_result_name(r), "unknown") == 0)
        abort();
    if (r == JWT_OK && once_scope_validate(c->agent) != ONCE_OK)
        abort();
    if (r != JWT_OK && c->agent[0] != '\0')
        abort();
}

static void fz_token(const char *s, size_t n)
{
    jwt_claims c;
    fz_check(jwt_verify(&g_auth, g_keys, s, n, "/v1/mcp/shop", FZ_NOW, &c), &c);
    if (jwt_verify(&g_auth, NULL, s, n, "", FZ_NOW, &c) == JWT_OK)
        abort(); /* nothing verifies without keys */
}

static void fz_jwks(const char *s, size_t n)
{
    jwt_keyset *ks = NULL;
    char why[160];
    if (jwt_keyset_parse(s, n, &ks, why, sizeof why) == 0) {
        if (jwt_keyset_count(ks) == 0 || jwt_keyset_count(ks) > JWT_KEYS_MAX)
            abort();
        jwt_keyset_drop(ks);
    } else if (ks != NULL || why[0] == '\0') {
        abort();
    }
}

static void fz_signed(const char *s, size_t n)
{
    cjose_err err;
    cjose_header_t *h = cjose_header_new(&err);
    if (!h)
        return;
    cjose_header_set(h, CJOSE_HDR_ALG, CJOSE_HDR_ALG_ES256, &err);
    cjose_header_set(h, CJOSE_HDR_KID, "e1", &err);
    cjose_jws_t *jws = cjose_jws_sign(g_ec, h, (const uint8_t *)s, n, &err);
    const char *tok = NULL;
    if (jws && cjose_jws_export(jws, &tok, &err) && tok) {
        jwt_claims c;
        fz_check(jwt_verify(&g_auth, g_keys, tok, strlen(tok), "", FZ_NOW, &c), &c);
    }
    cjose_jws_release(jws);
    cjose_header_release(h);
}

static void fz_access(const char *s, size_t n)
{
    const char *nl = memchr(s, '\n', n);
    char *hdr = strndup(s, nl ? (size_t)(nl - s) : n);
    char *query = nl ? strndup(nl + 1, n - (size_t)(nl - s) - 1) : NULL;
    if (!hdr || (nl && !query)) {
        free(hdr);
        free(query);
        return;
    }
    access_in in = {.cfg = &g_cfg, .authorization = hdr, .resource_path = "/v1/mcp/x", .query = query,
                    .now = FZ_NOW};
    access_ident id;
    memset(&id, 0, sizeof id);
    const auth_token *who = NULL;
    problem p;
    memset(&p, 0, sizeof p);
    for (int need = ACCESS_OPEN; need <= ACCESS_METRICS; need++) {
        int rc = access_decide(&in, (access_level)need, &id, &who, &p);
        if (need == ACCESS_AGENT || need == ACCESS_OPERATOR) {
            /* no keys and no tokens_file: nobody gets in */
            if (rc == 0 || p.status != 401 || p.header == NULL ||
                strncmp(p.header_value, "Bearer resource_metadata=\"https://once.example/.well-known/", 59) != 0)
                abort();
        }
    }
    free(hdr);
    free(query);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    char *z = strndup(s, n); /* the header and query are C strings in the gateway */
    if (!z)
        return 0;
    switch (data[0] % 4) {
    case 0: fz_token(s, n); break;
    case 1: fz_jwks(s, n); break;
    case 2: fz_signed(s, n); break;
    default: fz_access(z, strlen(z)); break;
    }
    free(z);
    return 0;
}
