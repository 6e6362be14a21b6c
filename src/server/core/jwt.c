/*
 * jwt.c — key sets and token checks on cjose (see jwt.h).
 */
#include "server/core/jwt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjose/cjose.h>
#include <jansson.h>

#include "server/core/refcount.h"

typedef enum jwt_alg { ALG_RS256 = 1, ALG_PS256 = 2, ALG_ES256 = 3 } jwt_alg;

typedef struct jwt_key {
    char kid[JWT_KID_MAX + 1]; /* "" when the JWK has none */
    int rsa;                   /* 1: RSA (RS256, PS256); 0: EC P-256 (ES256) */
    jwt_alg alg;               /* the JWK's alg, which then is the only one it verifies; 0: any of its type */
    cjose_jwk_t *jwk;
} jwt_key;

struct jwt_keyset {
    refcount rc;
    jwt_key keys[JWT_KEYS_MAX];
    size_t n;
};

static const char *const jwt_names[JWT_NRESULTS] = {
    [JWT_OK] = "ok",           [JWT_MALFORMED] = "malformed",     [JWT_TOO_LARGE] = "too_large",
    [JWT_ALG] = "algorithm",   [JWT_UNKNOWN_KID] = "unknown_kid", [JWT_SIGNATURE] = "signature",
    [JWT_ISSUER] = "issuer",   [JWT_AUDIENCE] = "audience",       [JWT_EXPIRED] = "expired",
    [JWT_NOT_YET] = "not_yet_valid", [JWT_AGENT] = "agent_claim",
};

const char *jwt_result_name(jwt_result r)
{
    return r < JWT_NRESULTS ? jwt_names[r] : "unknown";
}

/* The accepted algorithm alg names, or 0: none, HMAC and everything else
 * are refused by omission. */
static jwt_alg jwt_alg_of(const char *alg)
{
    if (alg == NULL)
        return 0;
    if (strcmp(alg, "RS256") == 0)
        return ALG_RS256;
    if (strcmp(alg, "PS256") == 0)
        return ALG_PS256;
    if (strcmp(alg, "ES256") == 0)
        return ALG_ES256;
    return 0;
}

static void jwt_keyset_free(jwt_keyset *ks)
{
    for (size_t i = 0; i < ks->n; i++)
        cjose_jwk_release(ks->keys[i].jwk);
    free(ks);
}

size_t jwt_keyset_count(const jwt_keyset *ks)
{
    return ks ? ks->n : 0;
}

void jwt_keyset_hold(jwt_keyset *ks)
{
    refcount_hold(&ks->rc);
}

void jwt_keyset_drop(jwt_keyset *ks)
{
    if (ks && refcount_drop(&ks->rc))
        jwt_keyset_free(ks);
}

/* One JWK of the set into ks, when it is a signing key we accept. */
static void jwt_keyset_add(jwt_keyset *ks, json_t *k)
{
    const char *kty = json_string_value(json_object_get(k, "kty"));
    const char *use = json_string_value(json_object_get(k, "use"));
    json_t *alg_j = json_object_get(k, "alg");
    json_t *kid_j = json_object_get(k, "kid");
    const char *kid = json_string_value(kid_j);
    int rsa = kty && strcmp(kty, "RSA") == 0, ec = kty && strcmp(kty, "EC") == 0;
    if ((!rsa && !ec) || (use && strcmp(use, "sig") != 0) || (kid_j && (!kid || strlen(kid) > JWT_KID_MAX)))
        return;
    jwt_alg a = 0;
    if (alg_j) {
        a = jwt_alg_of(json_string_value(alg_j));
        if (a == 0 || (a == ALG_ES256) != ec)
            return;
    }
    cjose_err err;
    cjose_jwk_t *jwk = cjose_jwk_import_json((cjose_header_t *)k, &err);
    if (jwk == NULL)
        return;
    if (cjose_jwk_get_kty(jwk, &err) != (rsa ? CJOSE_JWK_KTY_RSA : CJOSE_JWK_KTY_EC) ||
        (ec && cjose_jwk_EC_get_curve(jwk, &err) != CJOSE_JWK_EC_P_256)) {
        cjose_jwk_release(jwk);
        return;
    }
    jwt_key *slot = &ks->keys[ks->n++];
    snprintf(slot->kid, sizeof slot->kid, "%s", kid ? kid : "");
    slot->rsa = rsa;
    slot->alg = a;
    slot->jwk = jwk;
}

int jwt_keyset_parse(const char *json, size_t len, jwt_keyset **out, char *err, size_t errlen)
{
    *out = NULL;
    json_error_t je;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    json_t *keys = json_object_get(doc, "keys");
    if (!json_is_array(keys)) {
        snprintf(err, errlen, "not a JWKS document (a JSON object with a \"keys\" array)");
        json_decref(doc);
        return -1;
    }
    jwt_keyset *ks = calloc(1, sizeof *ks);
    if (ks == NULL) {
        snprintf(err, errlen, "out of memory");
        json_decref(doc);
        return -1;
    }
    refcount_init(&ks->rc, 1);
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        if (ks->n == JWT_KEYS_MAX)
            break;
        if (json_is_object(k))
            jwt_keyset_add(ks, k);
    }
    json_decref(doc);
    if (ks->n == 0) {
        snprintf(err, errlen, "the JWKS holds no RSA or EC P-256 signing key");
        jwt_keyset_free(ks);
        return -1;
    }
    *out = ks;
    return 0;
}

/* The key of ks for kid and alg: the one with that kid, or, for a token
 * without a kid, the set's only key. Its type must fit the algorithm. */
static const jwt_key *jwt_key_for(const jwt_keyset *ks, const char *kid, jwt_alg alg)
{
    const jwt_key *found = NULL;
    if (ks == NULL)
        return NULL;
    if (kid == NULL)
        found = ks->n == 1 ? &ks->keys[0] : NULL;
    for (size_t i = 0; kid && !found && i < ks->n; i++)
        if (strcmp(ks->keys[i].kid, kid) == 0)
            found = &ks->keys[i];
    if (found && (found->rsa != (alg != ALG_ES256) || (found->alg != 0 && found->alg != alg)))
        return NULL;
    return found;
}

/* Whether s[0..n) is three base64url parts joined by two dots: what a
 * compact JWS is, and nothing cjose need guess about. */
static int jwt_compact_ok(const char *s, size_t n)
{
    size_t dots = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.')
            dots++;
        else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                   c == '_'))
            return 0;
    }
    return dots == 2 && n > 4;
}

/* Whether a scope claim holds want: "scope" a space-separated string
 * (RFC 9068), or "scp" an array of strings (as some providers write it). */
static int jwt_has_scope(json_t *claims, const char *want)
{
    const char *scope = json_string_value(json_object_get(claims, "scope"));
    size_t wl = strlen(want);
    for (const char *p = scope; p && *p;) {
        size_t n = strcspn(p, " ");
        if (n == wl && strncmp(p, want, n) == 0)
            return 1;
        p += n;
        p += strspn(p, " ");
    }
    json_t *scp = json_object_get(claims, "scp");
    size_t i;
    json_t *v;
    json_array_foreach(scp, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
            return 1;
    }
    return 0;
}

/* Whether one aud value is the audience, or the audience followed by
 * the resource path. */
static int jwt_aud_is(const char *v, const char *audience, const char *path)
{
    size_t al = strlen(audience);
    if (strcmp(v, audience) == 0)
        return 1;
    return path && path[0] && strncmp(v, audience, al) == 0 && strcmp(v + al, path) == 0;
}

/* aud is the audience, or an array holding it (RFC 7519 4.1.3). */
static int jwt_aud_ok(json_t *aud, const char *audience, const char *path)
{
    if (json_is_string(aud))
        return jwt_aud_is(json_string_value(aud), audience, path);
    size_t i;
    json_t *v;
    json_array_foreach(aud, i, v)
    {
        if (json_is_string(v) && jwt_aud_is(json_string_value(v), audience, path))
            return 1;
    }
    return 0;
}

/* The claims' checks, once the signature holds. */
static jwt_result jwt_claims_check(const auth_cfg *cfg, json_t *c, const char *path, int64_t now,
                                   jwt_claims *out)
{
    const char *iss = json_string_value(json_object_get(c, "iss"));
    if (iss == NULL || strcmp(iss, cfg->issuer) != 0)
        return JWT_ISSUER;
    if (!jwt_aud_ok(json_object_get(c, "aud"), cfg->audience, path))
        return JWT_AUDIENCE;
    json_t *exp = json_object_get(c, "exp"), *nbf = json_object_get(c, "nbf");
    if (!json_is_number(exp) || json_number_value(exp) + JWT_SKEW_S <= (double)now)
        return JWT_EXPIRED;
    if (nbf && (!json_is_number(nbf) || json_number_value(nbf) - JWT_SKEW_S > (double)now))
        return JWT_NOT_YET;
    const char *agent = json_string_value(json_object_get(c, cfg->agent_claim));
    if (agent == NULL || once_scope_validate(agent) != ONCE_OK)
        return JWT_AGENT;
    snprintf(out->agent, sizeof out->agent, "%s", agent);
    out->operator = jwt_has_scope(c, cfg->operator_scope);
    out->scopes_ok = 1;
    for (size_t i = 0; i < cfg->nrequired_scopes; i++)
        out->scopes_ok &= jwt_has_scope(c, cfg->required_scopes[i]);
    return JWT_OK;
}

jwt_result jwt_verify(const auth_cfg *cfg, const jwt_keyset *ks, const char *token, size_t len,
                      const char *resource_path, int64_t now, jwt_claims *out)
{
    memset(out, 0, sizeof *out);
    if (len > JWT_MAX_LEN)
        return JWT_TOO_LARGE;
    if (!jwt_compact_ok(token, len))
        return JWT_MALFORMED;
    cjose_err err;
    cjose_jws_t *jws = cjose_jws_import(token, len, &err);
    if (jws == NULL)
        return JWT_MALFORMED;
    jwt_result r = JWT_OK;
    json_t *hdr = (json_t *)cjose_jws_get_protected(jws);
    json_t *kid_j = json_object_get(hdr, "kid");
    const char *kid = json_string_value(kid_j);
    jwt_alg alg = jwt_alg_of(json_string_value(json_object_get(hdr, "alg")));
    const jwt_key *key = NULL;
    if (kid_j && (!kid || strlen(kid) > JWT_KID_MAX))
        r = JWT_MALFORMED;
    else if (alg == 0 || json_object_get(hdr, "crit") != NULL)
        r = JWT_ALG; /* crit: an extension we would not honour */
    else if ((key = jwt_key_for(ks, kid, alg)) == NULL)
        r = JWT_UNKNOWN_KID;
    else if (!cjose_jws_verify(jws, key->jwk, &err))
        r = JWT_SIGNATURE;
    if (kid) { /* for the log; a longer kid was refused above and is shown cut */
        size_t kl = strnlen(kid, JWT_KID_MAX);
        memcpy(out->kid, kid, kl);
        out->kid[kl] = '\0';
    }
    uint8_t *plain = NULL;
    size_t plen = 0;
    json_t *claims = NULL;
    if (r == JWT_OK && !cjose_jws_get_plaintext(jws, &plain, &plen, &err))
        r = JWT_MALFORMED;
    if (r == JWT_OK) {
        json_error_t je;
        claims = json_loadb((const char *)plain, plen, JSON_REJECT_DUPLICATES, &je);
        r = json_is_object(claims) ? jwt_claims_check(cfg, claims, resource_path, now, out) : JWT_MALFORMED;
    }
    json_decref(claims);
    cjose_jws_release(jws);
    if (r != JWT_OK) {
        char kept[JWT_KID_MAX + 1];
        memcpy(kept, out->kid, sizeof kept);
        memset(out, 0, sizeof *out);
        memcpy(out->kid, kept, sizeof kept);
    }
    return r;
}
