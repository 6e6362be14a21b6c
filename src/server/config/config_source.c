/*
 * config_source.c — the [source.NAME] section (a webhook sender): its key
 * table, the setters only it needs (verify, the secrets, event_id,
 * signature_prefix, deliver_secret), and the checks made once the file is
 * read, since they depend on verify or deliver_to, which may come last.
 * What a scheme is (its name, its default event id, whether it signs a
 * timestamp, what a Standard Webhooks key looks like) is webhook_sig's.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>

#include "common/webhook_sig.h"

#define SRC(f) offsetof(source_cfg, f)
#define CONFIG_SRC_LIMIT 1000 /* max_attempts and concurrency: 1..this */

static int config_verify(config_ctx *c, const config_key *k, void *field, const char *v)
{
    sig_scheme s;
    (void)k;
    if (sig_scheme_parse(v, &s) != 0)
        return config_fail_value(c, " is not stripe, github, standard, slack, hmac-sha256 or none");
    *(int *)field = (int)s;
    return 0;
}

/* One secret of a list (arg: "" for the secret key, "'FILE' line N: " for
 * a secret_file line): not empty, without control characters (a CR from a
 * CRLF file, or a newline from a variable, would never match), within
 * webhook_sig's limits. Secrets are never shown, only their position. */
static int config_secret_item(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    const char *where = arg;
    source_cfg *src = &c->cfg->sources[c->cur];
    size_t k = src->nsecrets + 1;
    (void)nth;
    if (n == 0)
        return config_fail(c, "%s: %ssecret %zu is empty", c->key, where, k);
    if (n > SIG_MAX_SECRET_LEN)
        return config_fail(c, "%s: %ssecret %zu is longer than %d bytes", c->key, where, k, SIG_MAX_SECRET_LEN);
    if (config_has_ctl(s, n, 0))
        return config_fail(c, "%s: %ssecret %zu contains a control character", c->key, where, k);
    if (src->nsecrets >= SIG_MAX_SECRETS)
        return config_fail(c, "%s: %sat most %d secrets", c->key, where, SIG_MAX_SECRETS);
    return config_push_str(&src->secrets, &src->nsecrets, s, n) != 0 ? config_fail_oom(c) : 0;
}

/* secret and secret_file are two ways of saying the same thing: both at
 * once is refused rather than merged, so it is clear which secrets are on. */
static int config_one_secret_key(config_ctx *c, const char *other)
{
    if (config_line(c, CONFIG_SOURCE, c->cur, other) != 0)
        return config_fail(c, "%s: the secrets are already given by %s; use one of them", c->key, other);
    return 0;
}

static int config_secret(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    if (config_one_secret_key(c, "secret_file") != 0)
        return -1;
    return config_split(c, v, strlen(v), ',', config_secret_item, "");
}

static int config_secret_line(config_ctx *c, const char *fname, int fline, const char *s, size_t n)
{
    char where[CONFIG_QUOTE_MAX * 2 + 32];
    snprintf(where, sizeof where, "'%s' line %d: ", fname, fline);
    return config_split(c, s, n, ',', config_secret_item, where);
}

static int config_secret_file(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    if (config_one_secret_key(c, "secret") != 0)
        return -1;
    return config_read_file(c, v, config_secret_line);
}

/* json:POINTER or header:NAME. */
static int config_event_id(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    if (strncmp(v, "json:", 5) == 0 && !config_pointer_ok(v + 5, strlen(v + 5)))
        return config_fail_value(c,
                                 " is not a JSON pointer (json: then nothing or /a/b, with ~0 for '~' and ~1 for '/')");
    if (strncmp(v, "header:", 7) == 0 && !config_is_token(v + 7, strlen(v + 7)))
        return config_fail_value(c, " is not header: then a valid header name");
    if (strncmp(v, "json:", 5) != 0 && strncmp(v, "header:", 7) != 0)
        return config_fail_value(c, " is not json:/POINTER or header:NAME");
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

static int config_signature_prefix(config_ctx *c, const config_key *k, void *field, const char *v)
{
    if (v[0] == '\0')
        return config_fail(c, "%s: empty (leave the key out when there is no prefix)", k->name);
    if (config_has_ctl(v, strlen(v), 0))
        return config_fail(c, "%s: contains a control character", k->name);
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* Always a Standard Webhooks key, whatever the source's verify: it signs
 * what the gateway delivers. Not shown in messages. */
static int config_deliver_secret(config_ctx *c, const config_key *k, void *field, const char *v)
{
    size_t n = strlen(v);
    if (n > SIG_MAX_SECRET_LEN)
        return config_fail(c, "%s: longer than %d bytes", k->name, SIG_MAX_SECRET_LEN);
    if (!sig_whsec_valid(v, n))
        return config_fail(c, "%s: not \"whsec_\" followed by base64", k->name);
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* [source.NAME]: a row a key (config_keys.h). */
static const config_key config_source_keys[] = {
    {.name = "verify", .set = config_verify, .field = SRC(verify)}, /* required */
    {.name = "secret", .set = config_secret, .field = SRC(secrets), .flags = CK_SECRET},
    {.name = "secret_file", .set = config_secret_file, .field = SRC(secrets), .flags = CK_PATH | CK_SECRET},
    {.name = "insecure", .set = config_bool, .field = SRC(insecure), .default_value = "no"},
    /* event_id's default is the scheme's (config_source_finish). */
    {.name = "event_id", .set = config_event_id, .field = SRC(event_id)},
    {.name = "tolerance", .set = config_duration, .field = SRC(tolerance_ms), .min = 1, .default_value = "5m"},
    {.name = "signature_header", .set = config_header_name, .field = SRC(signature_header)},
    {.name = "signature_encoding", .set = config_word, .field = SRC(signature_base64),
     .default_value = "hex", .words = "hex|base64"},
    {.name = "signature_prefix", .set = config_signature_prefix, .field = SRC(signature_prefix)},
    {.name = "deliver_to", .set = config_url, .field = SRC(deliver_to), .flags = CK_NO_HASH},
    {.name = "deliver_secret", .set = config_deliver_secret, .field = SRC(deliver_secret), .flags = CK_SECRET},
    {.name = "max_attempts", .set = config_uint, .field = SRC(max_attempts),
     .min = 1, .max = CONFIG_SRC_LIMIT, .default_value = "12"},
    {.name = "retry_base", .set = config_duration, .field = SRC(retry_base_ms), .min = 1, .default_value = "1s"},
    {.name = "retry_cap", .set = config_duration, .field = SRC(retry_cap_ms), .min = 1, .default_value = "1h"},
    {.name = "retention", .set = config_duration, .field = SRC(retention_ms), .min = 1, .default_value = "7d"},
    {.name = "timeout", .set = config_duration, .field = SRC(timeout_ms), .min = 1, .default_value = "30s"},
    {.name = "concurrency", .set = config_uint, .field = SRC(concurrency),
     .min = 1, .max = CONFIG_SRC_LIMIT, .default_value = "8"},
};

/* ---- after the file ------------------------------------------------------------ */

/* Fails at the line of source i's key name, if it set it, saying it has no
 * meaning with the source's other settings (why). For keys that would
 * otherwise be silently ignored: someone who wrote them believes they work. */
static int config_refuse(config_ctx *c, size_t i, const char *name, const char *why)
{
    int line = config_line(c, CONFIG_SOURCE, i, name);
    return line == 0 ? 0 : config_fail_at(c, line, "%s: %s", name, why);
}

/* verify = none against insecure and the secrets: either anyone may send,
 * said aloud, or a secret checks what is sent. Standard secrets are keys. */
static int config_source_secrets(config_ctx *c, size_t i, const char *scheme)
{
    const source_cfg *s = &c->cfg->sources[i];
    int secret_line = config_line(c, CONFIG_SOURCE, i, "secret");
    if (secret_line == 0)
        secret_line = config_line(c, CONFIG_SOURCE, i, "secret_file");
    if (s->verify == SIG_NONE && !s->insecure)
        return config_fail_at(c, config_line(c, CONFIG_SOURCE, i, "verify"),
                              "verify: none accepts whatever anyone sends to this source; it needs insecure = yes");
    if (s->verify == SIG_NONE && secret_line > 0)
        return config_fail_at(c, secret_line,
                              "[source.%s]: verify = none checks no signature, so a secret would be unused", s->name);
    if (s->verify != SIG_NONE && s->insecure)
        return config_fail_at(c, config_line(c, CONFIG_SOURCE, i, "insecure"),
                              "insecure: yes only goes with verify = none (this source verifies %s signatures)",
                              scheme);
    if (s->verify != SIG_NONE && s->nsecrets == 0)
        return config_fail_at(c, s->line, "[source.%s]: verify = %s needs secret or secret_file", s->name, scheme);
    for (size_t k = 0; s->verify == SIG_STANDARD && k < s->nsecrets; k++) {
        if (!sig_whsec_valid(s->secrets[k], strlen(s->secrets[k])))
            return config_fail_at(c, secret_line,
                                  "[source.%s]: secret %zu is not \"whsec_\" followed by base64 (verify = standard)",
                                  s->name, k + 1);
    }
    return 0;
}

/* The keys that only apply to some schemes. */
static int config_source_applies(config_ctx *c, size_t i, const char *scheme)
{
    const source_cfg *s = &c->cfg->sources[i];
    char why[CONFIG_MSG_MAX / 2];
    snprintf(why, sizeof why, "only for verify = hmac-sha256 (this source has verify = %s)", scheme);
    if (s->verify == SIG_HMAC_SHA256 && s->signature_header == NULL)
        return config_fail_at(c, s->line, "[source.%s]: verify = hmac-sha256 needs signature_header", s->name);
    if (s->verify != SIG_HMAC_SHA256 &&
        (config_refuse(c, i, "signature_header", why) != 0 || config_refuse(c, i, "signature_encoding", why) != 0 ||
         config_refuse(c, i, "signature_prefix", why) != 0))
        return -1;
    snprintf(why, sizeof why, "verify = %s signs no timestamp", scheme);
    if (!sig_scheme_signs_time((sig_scheme)s->verify) && config_refuse(c, i, "tolerance", why) != 0)
        return -1;
    /* The event id of a Standard Webhooks request is the id its signature
     * covers; one taken from elsewhere could be chosen by a replayer. */
    if (s->verify == SIG_STANDARD &&
        config_refuse(c, i, "event_id",
                      "verify = standard takes the event id its signature covers (webhook-id, or svix-id)") != 0)
        return -1;
    return 0;
}

/* Each error names the line of the key it is about, or the section's when
 * the problem is a key that is missing. */
static int config_source_finish(config_ctx *c, size_t i)
{
    static const char push_only[] = "only applies with deliver_to (push delivery)";
    source_cfg *s = &c->cfg->sources[i];
    if (config_line(c, CONFIG_SOURCE, i, "verify") == 0)
        return config_fail_at(
            c, s->line, "[source.%s] has no verify (stripe, github, standard, slack, hmac-sha256 or none)", s->name);
    const char *scheme = sig_scheme_name((sig_scheme)s->verify);
    const char *def = sig_scheme_default_event_id((sig_scheme)s->verify);
    if (config_source_secrets(c, i, scheme) != 0 || config_source_applies(c, i, scheme) != 0)
        return -1;
    if (s->event_id == NULL && def == NULL)
        return config_fail_at(c, s->line,
                              "[source.%s]: event_id is required with verify = %s (json:/POINTER or header:NAME)",
                              s->name, scheme);
    if (s->event_id == NULL && config_set_str(&s->event_id, def) != 0)
        return config_fail_oom(c);
    if (s->deliver_to == NULL &&
        (config_refuse(c, i, "deliver_secret", push_only) != 0 || config_refuse(c, i, "timeout", push_only) != 0 ||
         config_refuse(c, i, "concurrency", push_only) != 0))
        return -1;
    if (s->retry_cap_ms < s->retry_base_ms) {
        int line = config_line(c, CONFIG_SOURCE, i, "retry_cap");
        return config_fail_at(c, line > 0 ? line : config_line(c, CONFIG_SOURCE, i, "retry_base"),
                              "[source.%s]: retry_cap is shorter than retry_base", s->name);
    }
    return 0;
}

const config_section config_source_section = CONFIG_NAMED_SECTION(CONFIG_SOURCE, "source.", "a source", source_cfg,
                                                                   config_source_keys, NULL, config_source_finish);
