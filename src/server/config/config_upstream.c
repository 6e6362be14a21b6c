/*
 * config_upstream.c — the [upstream.NAME] section (a proxied HTTP API):
 * its own key table, the setters only it needs (status lists, the key
 * template, the reconciliation lookup, approval rules), and the checks of
 * several keys made once the file is read: the lookup_* keys without a
 * lookup, release_on against unknown_on, TLS settings that would be
 * ignored, approve_ttl without approve, and listen addresses that clash.
 * The keys it shares with [mcp.NAME] (header, timeout, lease, ...) and
 * their checks are config_endpoint.c's.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/key_template.h"

/* ---- statuses --------------------------------------------------------------------- */

typedef struct config_ints {
    int *v;
    size_t n;
} config_ints;

/* Appends st to l, each status once: 0, or -1 after saying why not. */
static int config_add_status(config_ctx *c, config_ints *l, uint64_t st)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i] == (int)st)
            return config_fail(c, "%s: %d is listed twice", c->key, (int)st);
    }
    int *grown = realloc(l->v, (l->n + 1) * sizeof *grown);
    if (grown == NULL)
        return config_fail_oom(c);
    l->v = grown;
    l->v[l->n++] = (int)st;
    return 0;
}

/* One status of release_on or unknown_on. release_on refuses 2xx: a
 * success certainly did something, and releasing it would let the action
 * run twice. */
static int config_status_item(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    uint64_t st = 0;
    (void)nth;
    if (n == 0 || config_parse_digits(s, 999, &st) != s + n || st < 100 || st > 599)
        return config_fail_value(c, " is not a comma-separated list of HTTP statuses (100-599) or none");
    if (strcmp(c->key, "release_on") == 0 && st >= 200 && st <= 299)
        return config_fail(c, "%s: %d is a success; it cannot mean the upstream did nothing", c->key, (int)st);
    return config_add_status(c, arg, st);
}

/* "429, 503" -> distinct statuses in 100..599; "none" -> empty. */
static int config_statuses(config_ctx *c, const config_key *k, void *field, const char *v)
{
    config_ints l = {NULL, 0};
    (void)k;
    if (strcmp(v, "none") != 0 && config_split(c, v, strlen(v), ',', config_status_item, &l) != 0) {
        free(l.v);
        return -1;
    }
    free(*(int **)field);
    *(int **)field = l.v;
    *CONFIG_COUNT(field, int *) = l.n;
    return 0;
}

/* ---- intent keys and reconciliation -------------------------------------------------- */

/* key = TEMPLATE: parsed now, so a mistake is reported at its line (and the
 * parser's column) rather than on the first request. */
static int config_key_template(config_ctx *c, const config_key *k, void *field, const char *v)
{
    char why[CONFIG_MSG_MAX / 2];
    char q[CONFIG_MSG_MAX / 2];
    key_template *t = NULL;
    if (v[0] == '\0')
        return config_fail(c, "%s: empty (leave the key out to use only the client's key)", k->name);
    why[0] = '\0';
    if (key_template_parse(v, &t, why, sizeof why) != 0) {
        if (t != NULL)
            key_template_free(t);
        return config_fail(c, "%s: %s", k->name,
                           why[0] != '\0' ? config_quote(why, q, sizeof q) : "not a valid template");
    }
    if (t == NULL)
        return config_fail_oom(c);
    if (*(key_template **)field != NULL)
        key_template_free(*(key_template **)field);
    *(key_template **)field = t;
    return 0;
}

/* Checks the {...} placeholder of a lookup path: name[0..n) is what is
 * between the braces, col the column of its '{'. */
static int config_lookup_placeholder(config_ctx *c, const char *name, size_t n, size_t col)
{
    char q[CONFIG_QUOTE_MAX];
    if ((n == 3 && memcmp(name, "key", 3) == 0) || (n == 5 && memcmp(name, "scope", 5) == 0))
        return 0;
    if (n >= 5 && memcmp(name, "json:", 5) == 0 && config_pointer_ok(name + 5, n - 5))
        return 0;
    if (n >= 5 && memcmp(name, "json:", 5) == 0)
        return config_fail(c,
                           "%s: column %zu: not a JSON pointer after json: (nothing, or /a/b with ~0 for '~' "
                           "and ~1 for '/')",
                           c->key, col);
    if (n >= 7 && memcmp(name, "header:", 7) == 0 && config_is_token(name + 7, n - 7))
        return 0;
    if (n >= 7 && memcmp(name, "header:", 7) == 0)
        return config_fail(c, "%s: column %zu: not a valid header name after header:", c->key, col);
    return config_fail(c,
                       "%s: column %zu: unknown placeholder '{%s}' (expected {key}, {scope}, "
                       "{json:/POINTER} or {header:NAME})",
                       c->key, col, config_quote_n(name, n, q, sizeof q));
}

/* lookup = METHOD PATH: GET, HEAD or POST, then a path (and query) that is
 * appended to the upstream's url, with {key}, {scope}, {json:/POINTER} and
 * {header:NAME} filled in from the original request. Columns count from the
 * first character of the value. */
static int config_lookup(config_ctx *c, const config_key *k, void *field, const char *v)
{
    static const char *const methods[] = {"GET", "HEAD", "POST"};
    upstream_cfg *u = &c->cfg->upstreams[c->cur];
    char q[CONFIG_QUOTE_MAX];
    size_t ml = strcspn(v, " \t"), m = 0;
    const char *p = v + ml + strspn(v + ml, " \t");
    (void)field;
    if (ml == 0 || *p == '\0')
        return config_fail_value(c, " is not METHOD PATH (GET /v1/things?ref={key})");
    while (m < 3 && !(strlen(methods[m]) == ml && memcmp(v, methods[m], ml) == 0))
        m++;
    if (m == 3)
        return config_fail(c, "%s: column 1: '%s' is not GET, HEAD or POST (upper case)", k->name,
                           config_quote_n(v, ml, q, sizeof q));
    size_t base = (size_t)(p - v) + 1; /* the column of the path's first character */
    if (*p != '/')
        return config_fail(c, "%s: column %zu: the path must start with '/'", k->name, base);
    for (size_t i = 0; p[i] != '\0'; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '{') {
            size_t j = i + 1 + strcspn(p + i + 1, "{}");
            if (p[j] == '{')
                return config_fail(c, "%s: column %zu: '{' inside a placeholder", k->name, base + j);
            if (p[j] != '}')
                return config_fail(c, "%s: column %zu: '{' is not closed by '}'", k->name, base + i);
            if (config_lookup_placeholder(c, p + i + 1, j - i - 1, base + i) != 0)
                return -1;
            i = j;
        } else if (ch == '}') {
            return config_fail(c, "%s: column %zu: '}' without '{'", k->name, base + i);
        } else if (ch <= 0x20 || ch >= 0x7f || ch == '#') {
            return config_fail(c,
                               "%s: column %zu: spaces, control characters, non-ASCII and '#' "
                               "are not allowed in the path (percent-encode them)",
                               k->name, base + i);
        }
    }
    if (config_set_str(&u->lookup_method, methods[m]) != 0 || config_set_str(&u->lookup_path, p) != 0)
        return config_fail_oom(c);
    return 0;
}

/* lookup_found = json:/POINTER: where, in the lookup's answer, the
 * provider's id of the action is. Kept as written, prefix included. */
static int config_lookup_found(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    if (strncmp(v, "json:", 5) != 0 || !config_pointer_ok(v + 5, strlen(v + 5)))
        return config_fail_value(c,
                                 " is not json:/POINTER (json: then nothing or /a/b, with ~0 for '~' and ~1 for '/')");
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

typedef struct config_absent {
    config_ints st;
    char **ptrs;
    size_t nptrs;
} config_absent;

/* One item of lookup_absent: a status, or json-empty: and a pointer. */
static int config_absent_item(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    static const char pfx[] = "json-empty:";
    const size_t pl = sizeof pfx - 1;
    config_absent *a = arg;
    char q[CONFIG_QUOTE_MAX];
    uint64_t code = 0;
    config_quote_n(s, n, q, sizeof q);
    if (n == 0)
        return config_fail(c, "%s: item %zu is empty (write 404 | json-empty:/data)", c->key, nth);
    if (config_parse_digits(s, 999, &code) == s + n && (code < 100 || code > 599))
        return config_fail(c, "%s: %d is not an HTTP status (100-599)", c->key, (int)code);
    if (config_parse_digits(s, 999, &code) == s + n)
        return config_add_status(c, &a->st, code);
    if (n < pl || memcmp(s, pfx, pl) != 0)
        return config_fail(c,
                           "%s: '%s' is not an HTTP status (100-599) or json-empty:/POINTER "
                           "(items separated by '|')",
                           c->key, q);
    if (!config_pointer_ok(s + pl, n - pl))
        return config_fail(c,
                           "%s: '%s' is not json-empty: then a JSON pointer (nothing or /a/b, "
                           "with ~0 for '~' and ~1 for '/')",
                           c->key, q);
    for (size_t k = 0; k < a->nptrs; k++) {
        if (strlen(a->ptrs[k]) == n - pl && memcmp(a->ptrs[k], s + pl, n - pl) == 0)
            return config_fail(c, "%s: '%s' is listed twice", c->key, q);
    }
    return config_push_str(&a->ptrs, &a->nptrs, s + pl, n - pl) != 0 ? config_fail_oom(c) : 0;
}

static void config_absent_clear(upstream_cfg *u)
{
    free(u->lookup_absent_status);
    config_free_strs(u->lookup_absent_empty, u->nlookup_absent_empty);
    u->lookup_absent_status = NULL;
    u->nlookup_absent_status = 0;
    u->lookup_absent_empty = NULL;
    u->nlookup_absent_empty = 0;
}

/* lookup_absent = 404 | json-empty:/data: '|'-separated statuses and
 * json-empty:POINTER items, each once; the pointers are stored without
 * their prefix. */
static int config_lookup_absent(config_ctx *c, const config_key *k, void *field, const char *v)
{
    upstream_cfg *u = &c->cfg->upstreams[c->cur];
    config_absent a = {{NULL, 0}, NULL, 0};
    (void)k;
    (void)field;
    if (config_split(c, v, strlen(v), '|', config_absent_item, &a) != 0) {
        free(a.st.v);
        config_free_strs(a.ptrs, a.nptrs);
        return -1;
    }
    config_absent_clear(u);
    u->lookup_absent_status = a.st.v;
    u->nlookup_absent_status = a.st.n;
    u->lookup_absent_empty = a.ptrs;
    u->nlookup_absent_empty = a.nptrs;
    return 0;
}

/* One rule of approve: "all", or a path rule (config_path_rule). */
static int config_approve_rule(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    upstream_cfg *u = arg;
    char *rule = NULL;
    if (n == 3 && memcmp(s, "all", 3) == 0)
        return config_push_str(&u->approve, &u->napprove, "* *", 3) != 0 ? config_fail_oom(c) : 0;
    if (config_path_rule(c, s, n, nth, &rule) != 0)
        return -1;
    int rc = config_push_str(&u->approve, &u->napprove, rule, strlen(rule));
    free(rule);
    return rc != 0 ? config_fail_oom(c) : 0;
}

/* approve = RULE, RULE, ...: the new requests that wait for a human. */
static int config_approve(config_ctx *c, const config_key *k, void *field, const char *v)
{
    upstream_cfg *u = &c->cfg->upstreams[c->cur];
    (void)k;
    (void)field;
    config_free_strs(u->approve, u->napprove);
    u->approve = NULL;
    u->napprove = 0;
    return config_split(c, v, strlen(v), ',', config_approve_rule, u);
}

/* [upstream.NAME]'s own rows (config_keys.h); config_endpoint_table's follow. */
static const config_key config_upstream_keys[] = {
    {.name = "url", .set = config_url, .field = UP(url), .flags = CK_BASE | CK_NO_HASH},
    {.name = "key_required", .set = config_bool, .field = UP(key_required), .default_value = "yes"},
    {.name = "key_safe_methods", .set = config_bool, .field = UP(key_safe_methods), .default_value = "no"},
    {.name = "on_mismatch", .set = config_word, .field = UP(on_mismatch),
     .default_value = "replay", .words = "replay|reject"},
    {.name = "release_on", .set = config_statuses, .field = UP(release_on), .default_value = "429, 503"},
    {.name = "unknown_on", .set = config_statuses, .field = UP(unknown_on), .default_value = "500, 502, 504"},
    {.name = "forward_key_as", .set = config_header_name, .field = UP(forward_key_as)},
    {.name = "listen", .set = config_listen, .field = UP(listen)},
    {.name = "key", .set = config_key_template, .field = UP(key), .flags = CK_NO_HASH},
    {.name = "lookup", .set = config_lookup, .field = UP(lookup_method), .flags = CK_NO_HASH},
    {.name = "lookup_found", .set = config_lookup_found, .field = UP(lookup_found)},
    /* Only with a lookup: cleared without one (config_upstream_intent). */
    {.name = "lookup_absent", .set = config_lookup_absent, .field = UP(lookup_absent_status), .default_value = "404"},
    {.name = "lookup_backoff", .set = config_duration, .field = UP(lookup_backoff_ms),
     .min = 1, .default_value = "10s"},
    {.name = "lookup_attempts", .set = config_uint, .field = UP(lookup_attempts),
     .min = 1, .max = CONFIG_LOOKUP_ATTEMPTS_MAX, .default_value = "5"},
    {.name = "actions_api", .set = config_bool, .field = UP(actions_api), .default_value = "no"},
    {.name = "listen_tls_cert", .set = config_pem, .field = UP(listen_tls_cert), .flags = CK_PATH},
    {.name = "listen_tls_key", .set = config_pem, .field = UP(listen_tls_key), .flags = CK_PATH | CK_SECRET},
    {.name = "ca_file", .set = config_pem, .field = UP(ca_file), .flags = CK_PATH},
    {.name = "tls_cert", .set = config_pem, .field = UP(tls_cert), .flags = CK_PATH},
    {.name = "tls_key", .set = config_pem, .field = UP(tls_key), .flags = CK_PATH | CK_SECRET},
    {.name = "approve", .set = config_approve, .field = UP(approve)},
};

_Static_assert(UP(nrelease_on) == UP(release_on) + sizeof(int *) && UP(nunknown_on) == UP(unknown_on) + sizeof(int *),
               "CONFIG_COUNT");
_Static_assert(sizeof(mismatch_policy) == sizeof(int), "config_word writes an int");

/* ---- after the file ------------------------------------------------------------------------ */

/* The intent-key and reconciliation keys that need another key, and
 * lookup_absent's default without a lookup. Each error names the line of
 * the key it is about. */
static int config_upstream_intent(config_ctx *c, size_t i)
{
    static const char *const lookup_only[] = {"lookup_found", "lookup_absent", "lookup_backoff", "lookup_attempts"};
    upstream_cfg *u = &c->cfg->upstreams[i];
    const char *first = NULL;
    int first_line = 0;
    if (u->key_from_template && u->key == NULL)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "key_source"),
                              "key_source: template needs key = TEMPLATE in [upstream.%s]", u->name);
    if (u->lookup_method != NULL && u->lookup_found == NULL)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "lookup"),
                              "lookup: needs lookup_found = json:/POINTER (where the answer "
                              "holds the provider's id when the action happened)");
    if (u->lookup_method != NULL)
        return 0;
    config_absent_clear(u);
    /* The first of them in the file, since that is what is read first. */
    for (size_t k = 0; k < sizeof lookup_only / sizeof lookup_only[0]; k++) {
        int line = config_line(c, CONFIG_UPSTREAM, i, lookup_only[k]);
        if (line > 0 && (first_line == 0 || line < first_line)) {
            first = lookup_only[k];
            first_line = line;
        }
    }
    if (first != NULL)
        return config_fail_at(c, first_line, "%s: does nothing without lookup = METHOD PATH in [upstream.%s]", first,
                              u->name);
    return 0;
}

/* A certificate without its key (or the reverse) is half a setting; TLS
 * settings for a plain-HTTP upstream, or for a listener that does not
 * exist, would be silently ignored. */
static int config_upstream_tls(config_ctx *c, size_t i)
{
    static const char *const pairs[][2] = {{"tls_cert", "tls_key"}, {"listen_tls_cert", "listen_tls_key"}};
    const upstream_cfg *u = &c->cfg->upstreams[i];
    for (size_t p = 0; p < 2; p++) {
        int a = config_line(c, CONFIG_UPSTREAM, i, pairs[p][0]), b = config_line(c, CONFIG_UPSTREAM, i, pairs[p][1]);
        if ((a == 0) != (b == 0))
            return config_fail_at(c, a ? a : b, "[upstream.%s]: %s and %s go together", u->name, pairs[p][0],
                                  pairs[p][1]);
    }
    if (u->listen_tls_cert && !u->listen)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "listen_tls_cert"),
                              "[upstream.%s]: listen_tls_cert needs listen", u->name);
    if ((u->ca_file || u->tls_cert) && strncasecmp(u->url, "https://", 8) != 0)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, u->ca_file ? "ca_file" : "tls_cert"),
                              "[upstream.%s]: %s applies only to an https:// url", u->name,
                              u->ca_file ? "ca_file" : "tls_cert");
    return 0;
}

/* An upstream's own listener must not fight over a socket with the
 * server's or an earlier upstream's. */
static int config_upstream_listen(config_ctx *c, size_t i)
{
    const once_config *cfg = c->cfg;
    const upstream_cfg *u = &cfg->upstreams[i];
    if (u->listen != NULL && config_listen_clash(u->listen, cfg->listen))
        return config_fail_at(c, u->line, "[upstream.%s]: listen %s clashes with the server's listen %s", u->name,
                              u->listen, cfg->listen);
    for (size_t j = 0; u->listen != NULL && j < i; j++) {
        const upstream_cfg *o = &cfg->upstreams[j];
        if (o->listen != NULL && config_listen_clash(u->listen, o->listen))
            return config_fail_at(c, u->line, "[upstream.%s]: listen %s clashes with [upstream.%s] (line %d)", u->name,
                                  u->listen, o->name, o->line);
    }
    return 0;
}

/* Each error names the line of the key it is about, or the section's when
 * the problem is a key that is missing. */
static int config_upstream_finish(config_ctx *c, size_t i)
{
    upstream_cfg *u = &c->cfg->upstreams[i];
    if (u->url == NULL)
        return config_fail_at(c, u->line, "[upstream.%s] has no url", u->name);
    if (config_upstream_intent(c, i) != 0 || config_endpoint_finish(c, i) != 0)
        return -1;
    for (size_t a = 0; a < u->nrelease_on; a++) {
        for (size_t b = 0; b < u->nunknown_on; b++) {
            if (u->release_on[a] == u->unknown_on[b])
                return config_fail_at(c, u->line, "[upstream.%s]: status %d is in both release_on and unknown_on",
                                      u->name, u->release_on[a]);
        }
    }
    if (config_upstream_tls(c, i) != 0)
        return -1;
    if (config_endpoint_ttl_used(c, i, u->napprove > 0, "RULE") != 0)
        return -1;
    return config_upstream_listen(c, i);
}

const config_section config_upstream_section =
    CONFIG_NAMED_SECTION(CONFIG_UPSTREAM, "upstream.", "an upstream", upstream_cfg, config_upstream_keys,
                         &config_endpoint_table, config_upstream_finish);
