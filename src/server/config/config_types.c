/*
 * config_types.c — the typed setters the key tables name (a duration, a
 * size, a bounded number, yes/no, one of some words, a listen address, an
 * http(s) URL, a PEM file, a header name), so that every key of a type is
 * read, bounded and explained in one place; the value parsers config.h
 * exports; the small checks the sections' own setters share; and the path
 * rules approve, allow and limit lines are written in.
 */
#include "server/config/config_keys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <curl/curl.h>

#include "common/json_pointer.h"
#include "common/pct.h"

/* ---- parsers ---------------------------------------------------------------- */

typedef struct config_unit {
    const char *name;
    uint64_t mult;
} config_unit;

/* Largest first, for config_fmt_unit. */
static const config_unit config_ms_units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000},
                                              {"s", 1000},     {"ms", 1},      {NULL, 0}};
static const config_unit config_size_units[] = {
    {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"", 1}, {NULL, 0}};

/* Reads a run of decimal digits, refusing values above max. Returns the
 * position after the digits, or NULL if there are none or it overflows. */
const char *config_parse_digits(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return NULL;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (n > (max - d) / 10)
            return NULL;
        n = n * 10 + d;
    }
    *out = n;
    return p;
}

/* Digits then exactly one of the units (no unit is an error where "" is
 * not one: "30" could mean anything), the product at most max. */
static int config_parse_unit(const char *s, const config_unit *u, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;
    const char *p = s != NULL ? config_parse_digits(s, max, &n) : NULL;
    for (; p != NULL && u->name != NULL; u++) {
        if (strcmp(p, u->name) == 0 && n <= max / u->mult) {
            *out = n * u->mult;
            return 0;
        }
    }
    return -1;
}

/* n in the largest unit that divides it, for a bound in a message: 7d. */
static const char *config_fmt_unit(uint64_t n, const config_unit *u, char *text, size_t cap)
{
    while (u[1].name != NULL && n % u->mult != 0)
        u++;
    snprintf(text, cap, "%llu%s", (unsigned long long)(n / u->mult), u->name);
    return text;
}

int config_parse_duration(const char *s, int64_t *ms)
{
    uint64_t v;
    if (ms == NULL || config_parse_unit(s, config_ms_units, (uint64_t)INT64_MAX, &v) != 0)
        return -1;
    *ms = (int64_t)v;
    return 0;
}

int config_parse_size(const char *s, size_t *bytes)
{
    uint64_t v;
    if (bytes == NULL || config_parse_unit(s, config_size_units, (uint64_t)SIZE_MAX, &v) != 0)
        return -1;
    *bytes = (size_t)v;
    return 0;
}

/* host[0..hl) for config_parse_listen: an IPv6 literal when bracketed,
 * else IPv4 or "localhost"; copied into tmp (NUL-terminated). */
static int config_listen_host(const char *h, size_t hl, int v6, char *tmp, size_t cap)
{
    unsigned char addr[16];
    if (hl == 0 || hl >= cap)
        return -1;
    memcpy(tmp, h, hl);
    tmp[hl] = '\0';
    if (v6)
        return inet_pton(AF_INET6, tmp, addr) == 1 ? 0 : -1;
    return strcmp(tmp, "localhost") == 0 || inet_pton(AF_INET, tmp, addr) == 1 ? 0 : -1;
}

int config_parse_listen(const char *s, char *host, size_t hostlen, unsigned *port)
{
    char tmp[CONFIG_HOST_MAX];
    if (host != NULL && hostlen > 0)
        host[0] = '\0';
    if (s == NULL || host == NULL || hostlen == 0 || port == NULL)
        return -1;
    int v6 = s[0] == '[';
    const char *end = strchr(s, v6 ? ']' : ':');
    const char *p = end == NULL ? NULL : !v6 ? end + 1 : end[1] == ':' ? end + 2 : NULL;
    /* Unbracketed, one colon only: a bare IPv6 address must be bracketed. */
    if (p == NULL || (!v6 && strchr(p, ':') != NULL))
        return -1;
    const char *h = s + v6;
    size_t hl = (size_t)(end - h);
    uint64_t n;
    const char *pe = config_parse_digits(p, 65535, &n);
    if (config_listen_host(h, hl, v6, tmp, sizeof tmp) != 0 || pe == NULL || *pe != '\0' || n == 0 || hl + 1 > hostlen)
        return -1;
    memcpy(host, tmp, hl + 1);
    *port = (unsigned)n;
    return 0;
}

/* ---- small checks ------------------------------------------------------------- */

static int config_alnum(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* RFC 9110 tchar: what a header name may contain. */
int config_is_token(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!config_alnum(ch) && (ch == '\0' || strchr("!#$%&'*+-.^_`|~", ch) == NULL))
            return 0;
    }
    return n > 0;
}

/* Control characters: a newline in a header or a URL is an injection. */
int config_has_ctl(const char *s, size_t n, int allow_tab)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch < 0x20 && !(allow_tab && ch == '\t')) || ch == 0x7f)
            return 1;
    }
    return 0;
}

/* json_pointer's syntax, and no control characters (which a variable could
 * bring in). */
int config_pointer_ok(const char *p, size_t n)
{
    return json_pointer_valid(p, n) && !config_has_ctl(p, n, 0);
}

/* Replaces *dst with a copy of s; 0 or -1. */
int config_set_str(char **dst, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL)
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* Appends a copy of s[0..len) to a string array; 0 or -1 (out of memory). */
int config_push_str(char ***arr, size_t *n, const char *s, size_t len)
{
    if (*n >= SIZE_MAX / sizeof **arr - 1)
        return -1;
    char *copy = strndup(s, len);
    char **grown = copy != NULL ? realloc(*arr, (*n + 1) * sizeof **arr) : NULL;
    if (grown == NULL) {
        free(copy);
        return -1;
    }
    grown[(*n)++] = copy;
    *arr = grown;
    return 0;
}

/* ---- typed setters --------------------------------------------------------------- */

/* A number and a unit into field: a duration (ms, an int64_t) or a size
 * (bytes, a size_t), in [min, max] (max 0: none). Below min is "more than
 * 0" for 0, else "at least". */
static int config_amount(config_ctx *c, const config_key *k, const char *v, int ms, void *field)
{
    const config_unit *u = ms ? config_ms_units : config_size_units;
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_unit(v, u, ms ? (uint64_t)INT64_MAX : (uint64_t)SIZE_MAX, &n) != 0)
        return config_fail_value(c, " is not %s",
                                 ms ? "a duration (a number with ms, s, m, h or d: 30s)"
                                    : "a size (bytes, or a number with KiB, MiB or GiB)");
    if (n < (uint64_t)k->min && n == 0)
        return config_fail(c, "%s: must be more than 0", k->name);
    if (n < (uint64_t)k->min)
        return config_fail(c, "%s: at least %s", k->name, config_fmt_unit((uint64_t)k->min, u, q, sizeof q));
    if (k->max > 0 && n > (uint64_t)k->max)
        return config_fail(c, "%s: at most %s", k->name, config_fmt_unit((uint64_t)k->max, u, q, sizeof q));
    int64_t d = (int64_t)n;
    size_t z = (size_t)n;
    memcpy(field, ms ? (void *)&d : (void *)&z, ms ? sizeof d : sizeof z);
    return 0;
}

int config_duration(config_ctx *c, const config_key *k, void *field, const char *v)
{
    return config_amount(c, k, v, 1, field);
}

int config_size(config_ctx *c, const config_key *k, void *field, const char *v)
{
    return config_amount(c, k, v, 0, field);
}

/* A number in [min, max], digits only, into an int or an unsigned (the same
 * size; max is at most a million). A minimum of 0 is "no cap". */
int config_uint(config_ctx *c, const config_key *k, void *field, const char *v)
{
    _Static_assert(sizeof(int) == sizeof(unsigned), "int and unsigned fields");
    uint64_t n;
    const char *e = config_parse_digits(v, (uint64_t)k->max, &n);
    if (e == NULL || *e != '\0' || n < (uint64_t)k->min)
        return config_fail_value(c, " is not a number from %lld%s to %lld", (long long)k->min,
                                 k->min == 0 ? " (no cap)" : "", (long long)k->max);
    unsigned u = (unsigned)n;
    memcpy(field, &u, sizeof u);
    return 0;
}

/* yes/no and the usual spellings into an int; anything else is an error
 * rather than a silent "no". */
int config_bool(config_ctx *c, const config_key *k, void *field, const char *v)
{
    static const char *const words[] = {"no", "yes", "false", "true", "off", "on", "0", "1"};
    (void)k;
    for (int i = 0; i < 8; i++) {
        if (strcasecmp(v, words[i]) == 0) {
            int b = i % 2;
            memcpy(field, &b, sizeof b);
            return 0;
        }
    }
    return config_fail_value(c, " is not yes or no");
}

/* One of k->words ("a|b"), exactly: its index into an int (or an enum of
 * int's size whose values are in the words' order). */
int config_word(config_ctx *c, const config_key *k, void *field, const char *v)
{
    char list[CONFIG_QUOTE_MAX];
    size_t vl = strlen(v), n = 0;
    int i = 0;
    for (const char *w = k->words; *w != '\0'; i++) {
        size_t wl = strcspn(w, "|");
        if (wl == vl && memcmp(w, v, vl) == 0) {
            memcpy(field, &i, sizeof i);
            return 0;
        }
        w += wl + (w[wl] == '|');
    }
    for (const char *w = k->words; *w != '\0' && n + 5 < sizeof list; w++) {
        if (*w == '|')
            n += (size_t)snprintf(list + n, sizeof list - n, " or ");
        else
            list[n++] = *w;
    }
    list[n] = '\0';
    return config_fail_value(c, " is not %s", list);
}

/* host:port into a char * (see config_parse_listen). */
int config_listen(config_ctx *c, const config_key *k, void *field, const char *v)
{
    char host[CONFIG_HOST_MAX];
    unsigned port;
    (void)k;
    if (config_parse_listen(v, host, sizeof host, &port) != 0)
        return config_fail_value(c, " is not HOST:PORT (an IPv4 address, [IPv6] or localhost; port 1-65535)");
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* A header name into a char *. */
int config_header_name(config_ctx *c, const config_key *k, void *field, const char *v)
{
    (void)k;
    if (!config_is_token(v, strlen(v)))
        return config_fail_value(c, " is not a valid header name");
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* A PEM file (certificate, key or CA), already resolved against the
 * config's directory: checked readable now, so a typo fails the load (and
 * check-config) rather than the start. */
int config_pem(config_ctx *c, const config_key *k, void *field, const char *v)
{
    char q[CONFIG_QUOTE_MAX * 2];
    struct stat st;
    FILE *fp = fopen(v, "re");
    int ok = fp != NULL && fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode);
    int e = errno;
    if (fp != NULL)
        fclose(fp);
    if (!ok)
        return config_fail(c, "%s: cannot read '%s'%s%s", k->name, config_quote(v, q, sizeof q),
                           fp ? ": not a regular file" : ": ", fp ? "" : strerror(e));
    return config_set_str(field, v) != 0 ? config_fail_oom(c) : 0;
}

/* What libcurl's URL parser (the one the proxy and the deliverer use) says
 * of v, or NULL when it is a URL we take: libcurl finds the host and the
 * port; on top of it, a host name is only letters, digits, '.', '-' and
 * '_', an IPv6 host has no zone, and a port is not 0 or empty.
 * auth[0..alen) is the authority as written. */
static const char *config_url_problem(const char *v, const char *auth, size_t alen)
{
    static const char *const bad_host = ": bad host", *const bad_v6 = ": bad [IPv6] host";
    static const char *const bad_port = ": bad port";
    CURLU *h = curl_url();
    if (h == NULL)
        return ""; /* out of memory, which the caller says */
    char *port = NULL, *zone = NULL;
    const char *why = NULL;
    const char *close = auth[0] == '[' ? memchr(auth, ']', alen) : NULL;
    CURLUcode rc = curl_url_set(h, CURLUPART_URL, v, 0);
    if (rc == CURLUE_OUT_OF_MEMORY)
        why = "";
    else if (rc == CURLUE_NO_HOST)
        why = " has no host";
    else if (rc == CURLUE_BAD_IPV6)
        why = bad_v6;
    else if (rc == CURLUE_BAD_PORT_NUMBER)
        why = close != NULL && close + 1 < auth + alen && close[1] != ':' ? bad_host : bad_port;
    else if (rc != CURLUE_OK)
        why = bad_host;
    else if (close != NULL && curl_url_get(h, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK)
        why = bad_v6;
    else if (close == NULL && strspn(auth, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789.-_") < strcspn(auth, ":/"))
        why = bad_host;
    else if (auth[alen - 1] == ':' ||
             (curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK && strcmp(port, "0") == 0))
        why = bad_port;
    curl_free(port);
    curl_free(zone);
    curl_url_cleanup(h);
    return why;
}

/* An http(s) URL into a char *, kept as written. A base URL (an
 * upstream's) is stored without trailing slashes, so the proxy can append
 * "/path" as it is; an endpoint (a source's deliver_to) is kept whole,
 * since "/events/" and "/events" may be different resources. Userinfo,
 * query and fragment are refused: credentials go in a header, and a query
 * cannot take a path after it ('?' and '#' are refused as characters:
 * libcurl before 8.8 does not report an empty query or fragment). */
int config_url(config_ctx *c, const config_key *k, void *field, const char *v)
{
    int base = (k->flags & CK_BASE) != 0;
    size_t skip = strncasecmp(v, "http://", 7) == 0 ? 7 : strncasecmp(v, "https://", 8) == 0 ? 8 : 0;
    if (skip == 0)
        return config_fail_value(c, " must start with http:// or https://");
    for (const char *p = v; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#')
            return config_fail_value(c, ": spaces, control characters, non-ASCII, '?' and '#' are not allowed in %s",
                                     base ? "a base URL" : "the URL");
    }
    const char *auth = v + skip;
    size_t alen = strcspn(auth, "/");
    /* Userinfo is what comes before an '@' in the authority (for libcurl
     * too); named first, whatever else is wrong, as it is the likeliest
     * mistake with a credential in it. */
    const char *why = memchr(auth, '@', alen) != NULL ? ": no user:password@ in the URL (use a header)"
                      : alen == 0 || auth[0] == ':'   ? " has no host"
                                                      : config_url_problem(v, auth, alen);
    if (why != NULL && why[0] == '\0')
        return config_fail_oom(c);
    if (why != NULL)
        return config_fail_value(c, "%s", why);
    size_t len = strlen(v);
    while (base && len > skip + alen && v[len - 1] == '/')
        len--;
    char *copy = strndup(v, len);
    if (copy == NULL)
        return config_fail_oom(c);
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

/* METHOD PATTERN: METHOD upper case or '*', PATTERN '*' for any path, or a
 * path starting with '/' in which '*' matches any characters. The pattern
 * is kept in the canonical form requests are matched in, so
 * "/v1/%72efunds" and "/v1/refunds" are one rule. */
int config_path_rule(config_ctx *c, const char *s, size_t n, size_t nth, char **out)
{
    char q[CONFIG_QUOTE_MAX];
    config_quote_n(s, n, q, sizeof q);
    *out = NULL;
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
        return config_fail(c, "%s: item %zu '%s' is not %sMETHOD PATTERN (POST /v1/refunds*, DELETE *)", c->key,
                           nth, q, strcmp(c->key, "approve") == 0 ? "'all' or " : "");
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
    *out = rule;
    return 0;
}


int config_url_transport_ok(const char *url)
{
    if (strncasecmp(url, "https://", 8) == 0)
        return 1;
    if (strncasecmp(url, "http://", 7) != 0)
        return 0;
    CURLU *h = curl_url();
    char *host = NULL;
    int ok = 0;
    if (h != NULL && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        unsigned char a[16];
        static const unsigned char v6_loopback[16] = {[15] = 1};
        size_t n = strlen(host);
        if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
            host[n - 1] = '\0';
            ok = inet_pton(AF_INET6, host + 1, a) == 1 && memcmp(a, v6_loopback, 16) == 0;
        } else {
            ok = strcasecmp(host, "localhost") == 0 || (inet_pton(AF_INET, host, a) == 1 && a[0] == 127);
        }
    }
    curl_free(host);
    curl_url_cleanup(h);
    return ok;
}
