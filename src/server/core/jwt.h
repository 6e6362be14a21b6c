/*
 * jwt.h — bearer JWTs from an identity provider ([auth], docs/auth.md):
 * a key set read from a JWKS document, and the one check of a token
 * against it. Signatures are cjose's (JWS, JWK on OpenSSL), never ours;
 * this file decides what cjose is asked: which algorithms (RS256, PS256,
 * ES256 only), which key (the kid's, of a matching type), and what the
 * claims must say (iss, aud, exp, nbf with 60 s of skew, the agent claim).
 * Pure: no clock, no network, so the rules are unit-tested and fuzzed.
 */
#ifndef ONCE_SERVER_CORE_JWT_H
#define ONCE_SERVER_CORE_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "once/once.h"
#include "server/config/config.h"

#define JWT_MAX_LEN 8192   /* a token longer than this is refused before it is parsed */
#define JWT_SKEW_S 60      /* exp and nbf are checked with this much slack for clocks apart */
#define JWT_KEYS_MAX 64    /* keys kept from one JWKS document */
#define JWT_KID_MAX 128

typedef struct jwt_keyset jwt_keyset;

/* Why a token was refused, or JWT_OK: each a metric's outcome label and
 * part of the 401's detail. */
typedef enum jwt_result {
    JWT_OK = 0,
    JWT_MALFORMED,   /* not a compact JWS with a JSON object for header and claims */
    JWT_TOO_LARGE,   /* longer than JWT_MAX_LEN */
    JWT_ALG,         /* an algorithm other than RS256, PS256, ES256 (none, HMAC...), or crit */
    JWT_UNKNOWN_KID, /* no key of the issuer's set has its kid (or a matching type) */
    JWT_SIGNATURE,   /* the signature does not verify */
    JWT_ISSUER,      /* iss is not the configured issuer */
    JWT_AUDIENCE,    /* aud does not hold the configured audience */
    JWT_EXPIRED,     /* exp missing or past (beyond the skew) */
    JWT_NOT_YET,     /* nbf in the future (beyond the skew) */
    JWT_AGENT,       /* the agent claim is missing or not a name (1-64 of A-Z a-z 0-9 . _ -) */
    JWT_NRESULTS
} jwt_result;

/* What a verified token says about its caller. */
typedef struct jwt_claims {
    char agent[ONCE_SCOPE_MAX + 1]; /* agent_claim's value */
    int operator;                   /* scope holds operator_scope */
    int scopes_ok;                  /* scope holds every required_scopes */
    char kid[JWT_KID_MAX + 1];      /* the header's kid ("" when none), for the log */
} jwt_claims;

/* Reads a JWKS document (RFC 7517: {"keys":[...]}) into a set holding
 * its signing keys: RSA, and EC on P-256; a key whose use is not "sig" or
 * whose alg is not one accepted is left out, as is every symmetric ("oct")
 * key, so no JWKS can make an HMAC token verify. 0 and *out (at least one
 * key), or -1 with why in err. */
int jwt_keyset_parse(const char *json, size_t len, jwt_keyset **out, char *err, size_t errlen);
/* How many keys a set holds. */
size_t jwt_keyset_count(const jwt_keyset *ks);
/* One more holder of a set (the cache and each request verifying with
 * it); the last drop frees it. Any thread. */
void jwt_keyset_hold(jwt_keyset *ks);
void jwt_keyset_drop(jwt_keyset *ks);

/* Checks token[0..len) against ks (NULL: no keys yet) and cfg at now
 * (Unix seconds). aud must hold cfg->audience, or cfg->audience followed
 * by resource_path ("/v1/mcp/NAME": the resource of that MCP server's
 * metadata, RFC 8707; "" or NULL: none). JWT_OK and *out, or why not
 * (*out then holds at least the kid, when the header could be read). */
jwt_result jwt_verify(const auth_cfg *cfg, const jwt_keyset *ks, const char *token, size_t len,
                      const char *resource_path, int64_t now, jwt_claims *out);

/* The stable name of a result ("ok", "expired", ...). */
const char *jwt_result_name(jwt_result r);

#endif
