/*
 * webhook_sig.h — verifying the signatures webhook senders put on their
 * requests (Stripe, GitHub/Meta, Standard Webhooks/Svix, Slack, plain
 * HMAC-SHA256), and signing what the gateway delivers (Standard Webhooks).
 *
 * HTTP-agnostic: headers are read through a callback. MAC contexts are
 * fetched and keyed once, at sig_verifier_new; each verification duplicates
 * a keyed context (EVP_MAC_CTX_dup) — OpenSSL 3's implicit fetches take
 * provider locks on every call and serialise under threads.
 */
#ifndef ONCE_LEDGER_WEBHOOK_SIG_H
#define ONCE_LEDGER_WEBHOOK_SIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum sig_scheme {
    SIG_NONE = 0,      /* no verification (config requires insecure = yes) */
    SIG_STRIPE,        /* Stripe-Signature: t=…,v1=…[,v1=…]; HMAC-SHA256 of "{t}.{body}" */
    SIG_GITHUB,        /* X-Hub-Signature-256: sha256=<hex> over the body (also Meta/WhatsApp) */
    SIG_STANDARD,      /* webhook-id, webhook-timestamp, webhook-signature: v1,<b64> …;
                          HMAC-SHA256 of "{id}.{ts}.{body}", key = base64 after "whsec_" */
    SIG_SLACK,         /* X-Slack-Signature: v0=<hex> over "v0:{X-Slack-Request-Timestamp}:{body}" */
    SIG_HMAC_SHA256    /* header (configurable), hex or base64, optional prefix, over the body */
} sig_scheme;

#define SIG_MAX_SECRETS 16      /* rotation needs 2 or 3; bounds the stack array of MACs */
#define SIG_MAX_SECRET_LEN 4096 /* a secret longer than this is a configuration mistake */

/* "stripe", "github", ... -> scheme; 0 or -1. */
int sig_scheme_parse(const char *name, sig_scheme *out);
const char *sig_scheme_name(sig_scheme s);
/* The event id a source of this scheme uses when its config names none:
 * "json:/POINTER" or "header:NAME" of an id the sender always sends; NULL
 * when there is none (hmac-sha256, none) and the config must give one. */
const char *sig_scheme_default_event_id(sig_scheme s);
/* Whether the scheme signs a timestamp (so a tolerance applies): 1 or 0. */
int sig_scheme_signs_time(sig_scheme s);

/* Whether s[0..n) is a Standard Webhooks key sig_verifier_new accepts:
 * "whsec_" then strict base64 of 1 to SIG_MAX_SECRET_LEN bytes. 1 or 0. */
int sig_whsec_valid(const char *s, size_t n);

typedef struct sig_config {
    sig_scheme scheme;
    const char *const *secrets; /* one or more (rotation): any may match */
    size_t nsecrets;
    int64_t tolerance_ms;       /* stripe, standard, slack: |now - timestamp| allowed; 0 = 5 min */
    const char *header;         /* hmac-sha256: the signature header's name */
    int base64;                 /* hmac-sha256: 1 base64, 0 hex */
    const char *prefix;         /* hmac-sha256: optional prefix before the signature, e.g. "sha256=" */
} sig_config;

typedef struct sig_verifier sig_verifier;

/* Reads a request header (case-insensitive name); NULL when absent. */
typedef const char *(*sig_header_fn)(void *ctx, const char *name);

/* Builds a verifier (keys every secret once). 0, or -1 with a message in
 * err (e.g. a standard secret that is not "whsec_" + base64). */
int sig_verifier_new(const sig_config *cfg, sig_verifier **out, char *err, size_t errlen);
void sig_verifier_free(sig_verifier *v);

/* Verifies a request: 0 when a configured secret signed exactly these body
 * bytes (and the timestamp is within tolerance, for schemes that sign one);
 * -1 otherwise, with the reason in why ("missing header", "stale timestamp",
 * "no signature matched", "malformed header"). Constant-time comparisons.
 * Thread-safe. now_ms: wall clock. */
int sig_verify(const sig_verifier *v, sig_header_fn header, void *ctx, const uint8_t *body, size_t len,
               int64_t now_ms, char *why, size_t whylen);

/* The event id the signature covers, for schemes that sign one (Standard
 * Webhooks: webhook-id, or svix-id when the svix-* headers were the ones
 * verified); NULL for the other schemes or when the header is absent. */
const char *sig_signed_id(const sig_verifier *v, sig_header_fn header, void *ctx);

/* Standard Webhooks signing of an outgoing delivery, with the first secret
 * of a SIG_STANDARD verifier built from deliver_secret: writes
 * "v1,<base64>" into out. 0 or -1. */
int sig_sign_standard(const sig_verifier *v, const char *msg_id, int64_t timestamp_s, const uint8_t *body,
                      size_t len, char *out, size_t outlen);

#endif
