/*
 * test_jwt.c — the bearer JWT rules of [auth] (server/core/jwt.c) on a
 * fixed clock, with keys made and tokens signed by cjose here: what is
 * accepted (RS256, PS256, ES256; aud a string or an array, or the MCP
 * server's resource; 60 s of skew), and every refusal (alg none, HMAC with
 * the public key as secret, an oct key slipped into the JWKS, another
 * issuer, a kid not in the set, expired, not yet valid, a bad agent
 * claim, a huge token), plus the once-a-minute fetch rule of jwks.c. The
 * black-box proofs are tests/integration/test_auth_jwt.py and
 * tests/security/test_jwt_attacks.py.
 */
#include "server/core/jwt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjose/cjose.h>
#include <cmocka.h>
#include <jansson.h>

#include "server/core/jwks.h"

#define NOW 1800000000LL
#define ISS "https://idp.example"
#define AUD "https://once.example"

static cjose_jwk_t *rsa_key, *ec_key, *other_key;
static jwt_keyset *keys;
static auth_cfg cfg;
static char *req_scopes[] = {"mcp"};

/* The public JWK of k with kid, as a JSON object. */
static json_t *public_jwk(cjose_jwk_t *k, const char *kid)
{
    cjose_err err;
    char *s = cjose_jwk_to_json(k, false, &err);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    json_object_set_new(j, "kid", json_string(kid));
    return j;
}

static int setup(void **state)
{
    (void)state;
    cjose_err err;
    static const uint8_t e[] = {1, 0, 1};
    rsa_key = cjose_jwk_create_RSA_random(2048, e, sizeof e, &err);
    other_key = cjose_jwk_create_RSA_random(2048, e, sizeof e, &err);
    ec_key = cjose_jwk_create_EC_random(CJOSE_JWK_EC_P_256, &err);
    assert_non_null(rsa_key);
    assert_non_null(ec_key);
    json_t *set = json_pack("{s:[o,o]}", "keys", public_jwk(rsa_key, "r1"), public_jwk(ec_key, "e1"));
    /* An oct key in the set must never make an HMAC token verify. */
    json_array_append_new(json_object_get(set, "keys"), json_pack("{s:s,s:s,s:s}", "kty", "oct", "kid", "h1", "k",
                                                                  "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"));
    char *txt = json_dumps(set, 0);
    char why[160];
    assert_int_equal(jwt_keyset_parse(txt, strlen(txt), &keys, why, sizeof why), 0);
    assert_int_equal(jwt_keyset_count(keys), 2);
    free(txt);
    json_decref(set);
    cfg.issuer = ISS;
    cfg.audience = AUD;
    cfg.agent_claim = "sub";
    cfg.operator_scope = "once:operator";
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    jwt_keyset_drop(keys);
    cjose_jwk_release(rsa_key);
    cjose_jwk_release(ec_key);
    cjose_jwk_release(other_key);
    return 0;
}

/* A token signed by k with alg and kid (NULL: none) over claims (consumed). */
static char *sign(cjose_jwk_t *k, const char *alg, const char *kid, json_t *claims)
{
    cjose_err err;
    cjose_header_t *h = cjose_header_new(&err);
    cjose_header_set(h, CJOSE_HDR_ALG, alg, &err);
    if (kid)
        cjose_header_set(h, CJOSE_HDR_KID, kid, &err);
    char *body = json_dumps(claims, JSON_COMPACT);
    json_decref(claims);
    cjose_jws_t *jws = cjose_jws_sign(k, h, (const uint8_t *)body, strlen(body), &err);
    assert_non_null(jws);
    const char *out = NULL;
    assert_true(cjose_jws_export(jws, &out, &err));
    char *copy = strdup(out);
    cjose_jws_release(jws);
    cjose_header_release(h);
    free(body);
    return copy;
}

static json_t *claims(void)
{
    return json_pack("{s:s,s:s,s:s,s:I,s:I,s:s}", "iss", ISS, "aud", AUD, "sub", "support-bot", "exp",
                     (json_int_t)(NOW + 300), "iat", (json_int_t)NOW, "scope", "mcp tools");
}

static jwt_result verify_path(char *tok, const char *path, jwt_claims *c)
{
    jwt_result r = jwt_verify(&cfg, keys, tok, strlen(tok), path, NOW, c);
    free(tok);
    return r;
}

static jwt_result verify(char *tok)
{
    jwt_claims c;
    return verify_path(tok, "", &c);
}

static void test_good_tokens(void **state)
{
    (void)state;
    jwt_claims c;
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", claims()), "", &c), JWT_OK);
    assert_string_equal(c.agent, "support-bot");
    assert_false(c.operator);
    assert_true(c.scopes_ok);
    assert_int_equal(verify(sign(rsa_key, "PS256", "r1", claims())), JWT_OK);
    assert_int_equal(verify(sign(ec_key, "ES256", "e1", claims())), JWT_OK);
    json_t *cl = claims();
    json_object_set_new(cl, "aud", json_pack("[s,s]", "https://else", AUD));
    json_object_set_new(cl, "scope", json_string("a once:operator"));
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", cl), "", &c), JWT_OK);
    assert_true(c.operator);
    /* The MCP server's own resource, on its path only. */
    cl = claims();
    json_object_set_new(cl, "aud", json_string(AUD "/v1/mcp/shop"));
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", json_deep_copy(cl)), "/v1/mcp/shop", &c), JWT_OK);
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", json_deep_copy(cl)), "/v1/mcp/other", &c),
                     JWT_AUDIENCE);
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", cl), "", &c), JWT_AUDIENCE);
}

static void test_algorithms(void **state)
{
    (void)state;
    cjose_err err;
    /* alg none: header and claims, no signature. */
    char none[1024], *h = NULL, *b = NULL;
    size_t hl, bl;
    const char *hdr = "{\"alg\":\"none\",\"kid\":\"r1\"}";
    json_t *cl = claims();
    char *body = json_dumps(cl, JSON_COMPACT);
    json_decref(cl);
    cjose_base64url_encode((const uint8_t *)hdr, strlen(hdr), &h, &hl, &err);
    cjose_base64url_encode((const uint8_t *)body, strlen(body), &b, &bl, &err);
    snprintf(none, sizeof none, "%s.%s.", h, b);
    assert_int_equal(verify(strdup(none)), JWT_ALG);
    snprintf(none, sizeof none, "%s.%s.AAAA", h, b);
    assert_int_equal(verify(strdup(none)), JWT_ALG);
    free(h);
    free(b);
    free(body);
    /* HS256 with the RSA public key's JSON as the secret, under its kid. */
    char *pub = cjose_jwk_to_json(rsa_key, false, &err);
    cjose_jwk_t *hk = cjose_jwk_create_oct_spec((const uint8_t *)pub, strlen(pub), &err);
    assert_int_equal(verify(sign(hk, "HS256", "r1", claims())), JWT_ALG);
    /* and under the kid of the oct key that was in the JWKS: it was never kept */
    cjose_jwk_t *ok = cjose_jwk_create_oct_spec((const uint8_t *)"secret-secret-secret-secret", 27, &err);
    assert_int_equal(verify(sign(ok, "HS256", "h1", claims())), JWT_ALG);
    cjose_jwk_release(hk);
    cjose_jwk_release(ok);
    free(pub);
    /* An RSA signature under the EC key's kid, and RS384. */
    assert_int_equal(verify(sign(rsa_key, "RS256", "e1", claims())), JWT_UNKNOWN_KID);
    assert_int_equal(verify(sign(rsa_key, "RS384", "r1", claims())), JWT_ALG);
}

static void test_keys_and_issuers(void **state)
{
    (void)state;
    assert_int_equal(verify(sign(other_key, "RS256", "r1", claims())), JWT_SIGNATURE);
    assert_int_equal(verify(sign(other_key, "RS256", "r9", claims())), JWT_UNKNOWN_KID);
    /* no kid: only a set of one key may stand for it */
    assert_int_equal(verify(sign(rsa_key, "RS256", NULL, claims())), JWT_UNKNOWN_KID);
    jwt_claims c;
    char *tok = sign(rsa_key, "RS256", "r1", claims());
    assert_int_equal(jwt_verify(&cfg, NULL, tok, strlen(tok), "", NOW, &c), JWT_UNKNOWN_KID);
    free(tok);
    json_t *cl = claims();
    json_object_set_new(cl, "iss", json_string(ISS "/"));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_ISSUER);
    cl = claims();
    json_object_set_new(cl, "aud", json_pack("[s]", "https://once.example.evil"));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_AUDIENCE);
    cl = claims();
    json_object_del(cl, "aud");
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_AUDIENCE);
}

static void test_times(void **state)
{
    (void)state;
    json_t *cl = claims();
    json_object_set_new(cl, "exp", json_integer(NOW - 59)); /* within the skew */
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_OK);
    cl = claims();
    json_object_set_new(cl, "exp", json_integer(NOW - 60));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_EXPIRED);
    cl = claims();
    json_object_del(cl, "exp");
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_EXPIRED);
    cl = claims();
    json_object_set_new(cl, "exp", json_string("never"));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_EXPIRED);
    cl = claims();
    json_object_set_new(cl, "nbf", json_integer(NOW + 60));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_OK);
    cl = claims();
    json_object_set_new(cl, "nbf", json_integer(NOW + 61));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_NOT_YET);
}

static void test_agent_and_scopes(void **state)
{
    (void)state;
    json_t *cl = claims();
    json_object_set_new(cl, "sub", json_string("a/b"));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_AGENT);
    cl = claims();
    json_object_set_new(cl, "sub", json_integer(7));
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", cl)), JWT_AGENT);
    cfg.agent_claim = "client_id";
    assert_int_equal(verify(sign(rsa_key, "RS256", "r1", claims())), JWT_AGENT);
    cl = claims();
    json_object_set_new(cl, "client_id", json_string("machine-1"));
    jwt_claims c;
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", cl), "", &c), JWT_OK);
    assert_string_equal(c.agent, "machine-1");
    cfg.agent_claim = "sub";
    cfg.required_scopes = req_scopes;
    cfg.nrequired_scopes = 1;
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", claims()), "", &c), JWT_OK);
    assert_true(c.scopes_ok);
    cl = claims();
    json_object_set_new(cl, "scope", json_string("mcpx tools"));
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", cl), "", &c), JWT_OK);
    assert_false(c.scopes_ok);
    cl = claims();
    json_object_del(cl, "scope");
    json_object_set_new(cl, "scp", json_pack("[s,s]", "x", "mcp"));
    assert_int_equal(verify_path(sign(rsa_key, "RS256", "r1", cl), "", &c), JWT_OK);
    assert_true(c.scopes_ok);
    cfg.nrequired_scopes = 0;
}

static void test_shapes(void **state)
{
    (void)state;
    size_t n = JWT_MAX_LEN + 1;
    char *big = malloc(n + 1);
    memset(big, 'A', n);
    big[10] = big[20] = '.';
    big[n] = '\0';
    assert_int_equal(verify(big), JWT_TOO_LARGE);
    assert_int_equal(verify(strdup("")), JWT_MALFORMED);
    assert_int_equal(verify(strdup("a.b")), JWT_MALFORMED);
    assert_int_equal(verify(strdup("a.b.c.d")), JWT_MALFORMED);
    assert_int_equal(verify(strdup("e30.e30.e30")), JWT_MALFORMED); /* cjose wants an alg */
    assert_int_equal(verify(strdup("bm90IGpzb24.e30.AA")), JWT_MALFORMED);
    assert_int_equal(verify(strdup("eyJhbGciOiJSUzI1NiJ9 .e30.AA")), JWT_MALFORMED);
    jwt_keyset *ks;
    char why[160];
    assert_int_equal(jwt_keyset_parse("{\"keys\":[]}", 11, &ks, why, sizeof why), -1);
    assert_int_equal(jwt_keyset_parse("[]", 2, &ks, why, sizeof why), -1);
    assert_int_equal(jwt_keyset_parse("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\"}]}", 35, &ks, why, sizeof why), -1);
}

static void test_fetch_rule(void **state)
{
    (void)state;
    assert_true(jwks_may_fetch(0, -1, 0, JWKS_REFRESH_MIN_MS));
    assert_false(jwks_may_fetch(1000, -1, 1, JWKS_REFRESH_MIN_MS)); /* one at a time */
    assert_false(jwks_may_fetch(59999, 0, 0, JWKS_REFRESH_MIN_MS));
    assert_true(jwks_may_fetch(60000, 0, 0, JWKS_REFRESH_MIN_MS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_tokens),      cmocka_unit_test(test_algorithms),
        cmocka_unit_test(test_keys_and_issuers), cmocka_unit_test(test_times),
        cmocka_unit_test(test_agent_and_scopes), cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_fetch_rule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
