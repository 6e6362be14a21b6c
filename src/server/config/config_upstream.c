/*
 * config_upstream.c — the [upstream.NAME] section: its key table, the
 * setters only it needs (injected headers, status lists, the key template,
 * the reconciliation lookup), and the checks of several keys made once the
 * file is read: lease and retention from [server], the lookup_* keys
 * without a lookup, release_on against unknown_on, TLS settings that would
 * be ignored, and listen addresses that clash.
 */
#include "server/config/config_keys.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/key_template.h"
#include "common/pct.h"
#include "once/once.h"

#define UP(f) offsetof(upstream_cfg, f)
/* An upstream call longer than a day is not a call; the reconciler's
 * claims (timeout + 5s) must stay within a lease's 7 days. */
#define CONFIG_TIMEOUT_MAX_MS (24 * 3600 * 1000LL)

/* ---- headers ------------------------------------------------------------------- */

/* Headers that frame the request or concern only one hop: injecting them
 * would break the proxy rather than authenticate it. */
static int config_header_forbidden(const char *name, size_t n)
{
    static const char *const names[] = {
        "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Keep-Alive", "TE", "Trailer"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) == n && strncasecmp(names[i], name, n) == 0)
            return 1;
    }
    return 0;
}

/* Checks "Name: value" and appends it, normalised to "Name: value", to the
 * current upstream's headers. where is "" for a header key or
 * "'FILE' line N: " for a header_file line. Values are never echoed: they
 * are usually secrets. */
static int config_add_header_where(config_ctx *c, const char *where, const char *s, size_t n)
{
    upstream_cfg *u = &c->cfg->upstreams[c->cur];
    char q[CONFIG_QUOTE_MAX];
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return config_fail(c, "%s: %sexpected 'Name: value'", c->key, where);
    size_t nl = (size_t)(colon - s), vl = n - nl - 1;
    const char *v = colon + 1;
    config_quote_n(s, nl, q, sizeof q);
    if (!config_is_token(s, nl))
        return config_fail(c, "%s: %s'%s' is not a valid header name", c->key, where, q);
    if (config_header_forbidden(s, nl))
        return config_fail(c, "%s: %sheader '%s' cannot be injected", c->key, where, q);
    for (; vl > 0 && (*v == ' ' || *v == '\t'); v++)
        vl--;
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (config_has_ctl(v, vl, 1))
        return config_fail(c, "%s: %sthe value of '%s' contains a control character", c->key, where, q);
    char *h = NULL;
    if (nl > INT32_MAX || vl > INT32_MAX || asprintf(&h, "%.*s: %.*s", (int)nl, s, (int)vl, v) < 0)
        return config_fail_oom(c);
    int rc = config_push_str(&u->headers, &u->nheaders, h, strlen(h));
    free(h);
    return rc != 0 ? config_fail_oom(c) : 0;
}

int config_header(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    return config_add_header_where(c, "", v, strlen(v));
}

static int config_header_line(config_ctx *c, const char *fname, int fline, const char *s, size_t n)
{
    char where[CONFIG_QUOTE_MAX * 2 + 32];
    snprintf(where, sizeof where, "'%s' line %d: ", fname, fline);
    return config_add_header_where(c, where, s, n);
}

int config_header_file(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    (void)field;
    return config_read_file(c, v, config_header_line);
}

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

/* One rule of approve: "all", or METHOD PATTERN (METHOD upper case or '*',
 * PATTERN '*' for any path, or a path starting with '/' in which '*' matches
 * any characters). The pattern is kept in the canonical form requests are
 * matched in (pct_normalize), so "/v1/%72efunds" and "/v1/refunds" are one
 * rule. */
static int config_approve_rule(config_ctx *c, void *arg, const char *s, size_t n, size_t nth)
{
    upstream_cfg *u = arg;
    char q[CONFIG_QUOTE_MAX];
    config_quote_n(s, n, q, sizeof q);
    if (n == 3 && memcmp(s, "all", 3) == 0)
        return config_push_str(&u->approve, &u->napprove, "* *", 3) != 0 ? config_fail_oom(c) : 0;
    size_t ml = 0;
    while (ml < n && s[ml] != ' ' && s[ml] != '\t')
        ml++;
    size_t p = ml;
    while (p < n && (s[p] == ' ' || s[p] == '\t'))
        p++;
    int method_ok = ml > 0;
    for (size_t i = 0; i < ml && !(ml == 1 && s[0] == '*'); i++)
        method_ok &= s[i] >= 'A' && s[i] <= 'Z';
    if (!method_ok || p == n || (s[p] != '/' && s[p] != '*'))
        return config_fail(c, "%s: item %zu '%s' is not 'all' or METHOD PATTERN (POST /v1/refunds*, DELETE *)",
                           c->key, nth, q);
    for (size_t i = p; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#')
            return config_fail(c,
                               "%s: item %zu '%s': spaces, control characters, non-ASCII, '?' and '#' are not "
                               "allowed in the path pattern",
                               c->key, nth, q);
    }
    char *rule = NULL;
    if (asprintf(&rule, "%.*s %.*s", (int)ml, s, (int)(n - p), s + p) < 0)
        return config_fail_oom(c);
    char *pattern = rule + ml + 1;
    if (!pct_valid(pattern)) {
        free(rule);
        return config_fail(c, "%s: item %zu '%s': a '%%' in the path pattern must start an escape (%%2F)", c->key,
                           nth, q);
    }
    pct_normalize(pattern, strlen(pattern));
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

/* [upstream.NAME]: a row a key (config_keys.h): name, type (its setter), field, min, max,
 * default, flags, words. */
static const config_key config_upstream_keys[] = {
    {"url", config_url, UP(url), 0, 0, NULL, CK_BASE, NULL},
    {"header", config_header, UP(headers), 0, 0, NULL, CK_REPEAT | CK_SECRET, NULL},
    {"header_file", config_header_file, UP(headers), 0, 0, NULL, CK_PATH | CK_SECRET, NULL},
    {"timeout", config_duration, UP(timeout_ms), 1, CONFIG_TIMEOUT_MAX_MS, "60s", 0, NULL},
    /* lease and retention: [server]'s unless set (config_upstream_finish). */
    {"lease", config_duration, UP(lease_ms), 1, ONCE_LEASE_MAX_MS, NULL, 0, NULL},
    {"retention", config_duration, UP(retention_ms), 1, ONCE_RETENTION_MAX_MS, NULL, 0, NULL},
    {"key_required", config_bool, UP(key_required), 0, 0, "yes", 0, NULL},
    {"key_safe_methods", config_bool, UP(key_safe_methods), 0, 0, "no", 0, NULL},
    {"on_mismatch", config_word, UP(on_mismatch), 0, 0, "replay", 0, "replay|reject"},
    {"release_on", config_statuses, UP(release_on), 0, 0, "429, 503", 0, NULL},
    {"unknown_on", config_statuses, UP(unknown_on), 0, 0, "500, 502, 504", 0, NULL},
    {"forward_key_as", config_header_name, UP(forward_key_as), 0, 0, NULL, 0, NULL},
    {"listen", config_listen, UP(listen), 0, 0, NULL, 0, NULL},
    /* At most ONCE_BODY_MAX, what the ledger stores of an answer: checked
     * after the file (config_upstream_finish), with its own message. */
    {"max_response", config_size, UP(max_response), 1, 0, "16MiB", 0, NULL},
    {"key", config_key_template, UP(key), 0, 0, NULL, 0, NULL},
    {"key_source", config_word, UP(key_from_template), 0, 0, "header", 0, "header|template"},
    {"lookup", config_lookup, UP(lookup_method), 0, 0, NULL, 0, NULL},
    {"lookup_found", config_lookup_found, UP(lookup_found), 0, 0, NULL, 0, NULL},
    /* Only with a lookup: cleared without one (config_upstream_intent). */
    {"lookup_absent", config_lookup_absent, UP(lookup_absent_status), 0, 0, "404", 0, NULL},
    {"lookup_backoff", config_duration, UP(lookup_backoff_ms), 1, 0, "10s", 0, NULL},
    {"lookup_attempts", config_uint, UP(lookup_attempts), 1, CONFIG_LOOKUP_ATTEMPTS_MAX, "5", 0, NULL},
    {"actions_api", config_bool, UP(actions_api), 0, 0, "no", 0, NULL},
    {"listen_tls_cert", config_pem, UP(listen_tls_cert), 0, 0, NULL, CK_PATH, NULL},
    {"listen_tls_key", config_pem, UP(listen_tls_key), 0, 0, NULL, CK_PATH | CK_SECRET, NULL},
    {"ca_file", config_pem, UP(ca_file), 0, 0, NULL, CK_PATH, NULL},
    {"tls_cert", config_pem, UP(tls_cert), 0, 0, NULL, CK_PATH, NULL},
    {"tls_key", config_pem, UP(tls_key), 0, 0, NULL, CK_PATH | CK_SECRET, NULL},
    {"approve", config_approve, UP(approve), 0, 0, NULL, 0, NULL},
    {"approve_ttl", config_duration, UP(approve_ttl_ms), 1, ONCE_APPROVAL_TTL_MAX_MS, "24h", 0, NULL},
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

static int config_upstream_finish(config_ctx *c, size_t i)
{
    const once_config *cfg = c->cfg;
    upstream_cfg *u = &cfg->upstreams[i];
    if (u->url == NULL)
        return config_fail_at(c, u->line, "[upstream.%s] has no url", u->name);
    /* A lease is how long a reservation lives without news from its owner,
     * who renews it every lease/3 while the call runs: it does not grow
     * with the timeout. */
    if (config_line(c, CONFIG_UPSTREAM, i, "lease") == 0)
        u->lease_ms = cfg->lease_ms;
    if (config_line(c, CONFIG_UPSTREAM, i, "retention") == 0)
        u->retention_ms = cfg->retention_ms;
    if (config_upstream_intent(c, i) != 0)
        return -1;
    if (u->max_response > ONCE_BODY_MAX)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "max_response"),
                              "[upstream.%s]: max_response may be at most 64MiB", u->name);
    for (size_t a = 0; a < u->nrelease_on; a++) {
        for (size_t b = 0; b < u->nunknown_on; b++) {
            if (u->release_on[a] == u->unknown_on[b])
                return config_fail_at(c, u->line, "[upstream.%s]: status %d is in both release_on and unknown_on",
                                      u->name, u->release_on[a]);
        }
    }
    if (config_upstream_tls(c, i) != 0)
        return -1;
    if (u->napprove == 0 && config_line(c, CONFIG_UPSTREAM, i, "approve_ttl") > 0)
        return config_fail_at(c, config_line(c, CONFIG_UPSTREAM, i, "approve_ttl"),
                              "approve_ttl: does nothing without approve = RULE in [upstream.%s]", u->name);
    return config_upstream_listen(c, i);
}

const config_section config_upstream_section =
    CONFIG_SECTION(CONFIG_UPSTREAM, "upstream.", "an upstream", config_upstream_keys, sizeof(upstream_cfg), UP(line),
                   config_upstream_finish);
