/*
 * config.c — loads the gateway's INI configuration (see config.h and
 * docs/config.md) with libinih, strictly: the first thing that is wrong stops
 * the load with "file:line: what".
 *
 * How the file is read. inih parses, but its lines come from our own reader
 * (ini_parse_stream), because Debian's inih has three traps:
 *   - lines longer than its 200-byte buffer are cut: the first part parses
 *     as a (truncated!) value and the rest is reported as an error on the
 *     *next* line. The reader measures each whole line itself and refuses a
 *     long one, naming its real line;
 *   - the handler gets no line number. Our reader counts lines; inih calls
 *     the handler while it processes the line it just read, so the count is
 *     the handler's line;
 *   - section names are cut at 49 bytes and empty sections are never seen by
 *     the handler. The reader recognises "[...]" lines itself (with inih's
 *     own rule for where the name ends) and opens sections there.
 * The reader also strips leading whitespace, which turns off inih's
 * multi-line continuation values (an indented line would otherwise be glued
 * to the previous key), and refuses NUL bytes.
 *
 * Comments: a line whose first non-blank character is ';' or '#', and an
 * inline comment that starts with ';' preceded by whitespace
 * ("lease = 30s  ; why"). "a;b" and "a #b" are values.
 *
 * Values: ${NAME} expands the environment variable NAME (unset is an error;
 * set-but-empty expands to nothing); a '$' not followed by '{' is literal.
 * *_file keys read files — relative paths are relative to the config file's
 * directory — and their contents are taken literally (no ${} expansion).
 *
 * Order of precedence: defaults < the file < environment (ONCE_LISTEN,
 * ONCE_STORE, when set and not empty; applied here, after the file) < command
 * line flags (applied by the caller, after config_load). Defaults that depend
 * on other keys (an upstream's lease and retention, a source's event_id) are
 * computed once the whole file is read, since [server] may come after the
 * upstreams and a source's verify may come after its other keys; for the
 * same reason the checks that involve several keys of a section (verify =
 * none without insecure = yes, a standard secret that is not whsec_...) are
 * made then, each naming the line of the key it is about.
 */
#include "server/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <ini.h>

#include "ledger/key_template.h"
#include "ledger/webhook_sig.h" /* the sig_scheme values only: nothing here links against it */
#include "once/once.h"

#define CONFIG_DEFAULT_LISTEN "127.0.0.1:7600"
#define CONFIG_DEFAULT_STORE "sqlite:once.db"
#define CONFIG_DEFAULT_MAX_BODY ((size_t)1 << 20)
#define CONFIG_DEFAULT_LEASE_MS 10000
#define CONFIG_DEFAULT_RETENTION_MS (24 * 3600 * 1000LL)
#define CONFIG_DEFAULT_GRACE_MS 30000
#define CONFIG_DEFAULT_THREADS 4
#define CONFIG_DEFAULT_MAX_CONNECTIONS 4096u
#define CONFIG_DEFAULT_LOOP_MS 1000
#define CONFIG_DEFAULT_TIMEOUT_MS 60000
#define CONFIG_DEFAULT_MAX_RESPONSE ((size_t)16 << 20)
#define CONFIG_DEFAULT_PER_CLIENT 256u
#define CONFIG_DEFAULT_REQUEST_TIMEOUT_MS 30000
#define CONFIG_DEFAULT_WAL_MAX ((size_t)64 << 20)
/* Reconciliation (lookup = ...) defaults and limits. */
#define CONFIG_LOOKUP_BACKOFF_MS 10000
#define CONFIG_LOOKUP_ATTEMPTS 5
#define CONFIG_LOOKUP_ATTEMPTS_MAX 100
#define CONFIG_LOOKUP_ABSENT_STATUS 404
/* An upstream call longer than a day is not a call; the reconciler's claims
 * (timeout + 5s) must stay within a lease's 7 days. */
#define CONFIG_TIMEOUT_MAX_MS (24 * 3600 * 1000LL)
/* [source.NAME] defaults. */
#define CONFIG_SRC_TOLERANCE_MS (5 * 60 * 1000LL)
#define CONFIG_SRC_MAX_ATTEMPTS 12
#define CONFIG_SRC_RETRY_BASE_MS 1000
#define CONFIG_SRC_RETRY_CAP_MS (3600 * 1000LL)
#define CONFIG_SRC_RETENTION_MS (7 * 86400 * 1000LL)
#define CONFIG_SRC_TIMEOUT_MS 30000
#define CONFIG_SRC_CONCURRENCY 8
#define CONFIG_SRC_LIMIT 1000 /* max_attempts and concurrency: 1..this */
/* webhook_sig's own limits (SIG_MAX_SECRETS, SIG_MAX_SECRET_LEN), checked
 * here too so a mistake is reported at its line rather than at start-up. */
#define CONFIG_MAX_SECRETS 16
#define CONFIG_MAX_SECRET_LEN 4096

#define CONFIG_MAX_THREADS 1024
#define CONFIG_MAX_CONNECTIONS_LIMIT 1048576u
/* A secrets file is a few lines; refuse to slurp a log file by mistake. */
#define CONFIG_FILE_MAX ((off_t)1 << 20)
#define CONFIG_VAR_MAX 255
#define CONFIG_QUOTE_MAX 64
#define CONFIG_MSG_MAX 512
/* Enough for an IPv6 literal or "localhost". */
#define CONFIG_HOST_MAX 64

enum config_section_kind {
    CONFIG_SEC_NONE = 0,
    CONFIG_SEC_SERVER,
    CONFIG_SEC_UPSTREAM,
    CONFIG_SEC_SOURCE
};

/* Keys per table, bounded so a section's seen keys fit one 64-bit mask. */
#define CONFIG_MAX_KEYS 64

/* What the loader remembers of an [upstream.NAME] or a [source.NAME] while
 * reading it: which keys it set and on which line, for the checks made after
 * the file (they depend on keys that may come later, such as a source's
 * verify or an upstream's lookup) to name the line they are about. */
typedef struct config_sec_state {
    uint64_t seen;
    int line[CONFIG_MAX_KEYS]; /* by index in config_keys */
} config_sec_state;

typedef struct config_ctx config_ctx;
typedef int (*config_setter)(config_ctx *c, const char *v);

typedef struct config_key {
    int kind;             /* the section it belongs in */
    const char *name;
    config_setter set;    /* gets the expanded value */
    int repeat;           /* may appear more than once in its section */
} config_key;

struct config_ctx {
    once_config *cfg;
    char qpath[CONFIG_QUOTE_MAX * 2]; /* the file name as messages show it */
    char *dir;            /* the file's directory, or NULL for "." */
    FILE *fp;
    char *linebuf;
    size_t linecap;
    int lineno;
    int kind;             /* enum config_section_kind of the current section */
    size_t cur;           /* current upstream or source (by kind) */
    size_t upcap;
    size_t srccap;
    uint64_t server_seen; /* bits of config_keys seen in [server] */
    config_sec_state *up;  /* per upstream (parallel to cfg->upstreams) */
    config_sec_state *src; /* per source (parallel to cfg->sources) */
    int server_line;
    const char *key;      /* the key being set, for messages */
    const char *raw;      /* its value as written, for messages */
    int failed;
    int errline;          /* line of the recorded error (0: none / not a line) */
    int code;             /* negative, once failed */
    char *err;
    size_t errlen;
};

/* ---- messages ------------------------------------------------------------ */

/* Copies enough of s into buf to recognise it, with anything that is not
 * printable ASCII replaced, so an error message stays one clean line. */
static const char *config_quote(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return "";
    for (; s != NULL && s[n] != '\0' && n + 1 < cap; n++) {
        unsigned char ch = (unsigned char)s[n];
        buf[n] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s != NULL && s[n] != '\0' && n >= 3)
        memcpy(buf + n - 3, "...", 3);
    buf[n] = '\0';
    return buf;
}

/* Records the first error as "file:line: what" (line 0: "file: what");
 * later ones are dropped, since they are often consequences of the first.
 * Always returns -1 so setters can `return config_fail(...)`. */
__attribute__((format(printf, 3, 4))) static int config_fail_at(config_ctx *c, int line,
                                                                const char *fmt, ...)
{
    if (c->failed)
        return -1;
    c->failed = 1;
    c->errline = line;
    if (c->code == 0)
        c->code = -EINVAL;
    char msg[CONFIG_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err != NULL && c->errlen > 0) {
        if (line > 0)
            snprintf(c->err, c->errlen, "%s:%d: %s", c->qpath, line, msg);
        else
            snprintf(c->err, c->errlen, "%s: %s", c->qpath, msg);
    }
    return -1;
}

#define config_fail(c, ...) config_fail_at((c), (c)->lineno, __VA_ARGS__)

static int config_fail_oom(config_ctx *c)
{
    c->code = -ENOMEM;
    return config_fail_at(c, 0, "out of memory");
}

/* The value as written (before ${} expansion, so a message does not show
 * what a variable held), quoted for a message. */
static const char *config_raw(config_ctx *c, char *buf, size_t cap)
{
    return config_quote(c->raw, buf, cap);
}

/* ---- small parsers (exported ones are in config.h) ------------------------ */

/* Reads a run of decimal digits, refusing values above max. Returns the
 * position after the digits, or NULL if there are none or it overflows. */
static const char *config_parse_digits(const char *s, uint64_t max, uint64_t *out)
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

int config_parse_duration(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    uint64_t n;
    if (s == NULL || ms == NULL)
        return -1;
    const char *p = config_parse_digits(s, (uint64_t)INT64_MAX, &n);
    if (p == NULL)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) == 0) {
            if (n > (uint64_t)INT64_MAX / units[i].ms)
                return -1;
            *ms = (int64_t)(n * units[i].ms);
            return 0;
        }
    }
    return -1; /* no unit, or an unknown one: "30" could mean anything */
}

int config_parse_size(const char *s, size_t *bytes)
{
    static const struct {
        const char *unit;
        uint64_t mult;
    } units[] = {{"", 1}, {"KiB", 1024}, {"MiB", 1024 * 1024}, {"GiB", 1024 * 1024 * 1024}};
    uint64_t n;
    if (s == NULL || bytes == NULL)
        return -1;
    const char *p = config_parse_digits(s, (uint64_t)SIZE_MAX, &n);
    if (p == NULL)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) == 0) {
            if (n > (uint64_t)SIZE_MAX / units[i].mult)
                return -1;
            *bytes = (size_t)(n * units[i].mult);
            return 0;
        }
    }
    return -1;
}

/* A port: 1..65535, digits only, the whole string. */
static int config_parse_port(const char *s, unsigned *port)
{
    uint64_t n;
    const char *p = config_parse_digits(s, 65535, &n);
    if (p == NULL || *p != '\0' || n == 0)
        return -1;
    *port = (unsigned)n;
    return 0;
}

int config_parse_listen(const char *s, char *host, size_t hostlen, unsigned *port)
{
    char tmp[CONFIG_HOST_MAX];
    unsigned char addr[16];
    const char *h;
    const char *p;
    size_t hl;
    if (host != NULL && hostlen > 0)
        host[0] = '\0';
    if (s == NULL || host == NULL || hostlen == 0 || port == NULL)
        return -1;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (end == NULL || end[1] != ':')
            return -1;
        h = s + 1;
        hl = (size_t)(end - h);
        p = end + 2;
        if (hl == 0 || hl >= sizeof tmp)
            return -1;
        memcpy(tmp, h, hl);
        tmp[hl] = '\0';
        if (inet_pton(AF_INET6, tmp, addr) != 1)
            return -1;
    } else {
        const char *colon = strchr(s, ':');
        /* One colon only: a bare IPv6 address must be bracketed. */
        if (colon == NULL || strchr(colon + 1, ':') != NULL)
            return -1;
        h = s;
        hl = (size_t)(colon - s);
        p = colon + 1;
        if (hl == 0 || hl >= sizeof tmp)
            return -1;
        memcpy(tmp, h, hl);
        tmp[hl] = '\0';
        if (strcmp(tmp, "localhost") != 0 && inet_pton(AF_INET, tmp, addr) != 1)
            return -1;
    }
    unsigned pt;
    if (config_parse_port(p, &pt) != 0 || hl + 1 > hostlen)
        return -1;
    memcpy(host, tmp, hl + 1);
    *port = pt;
    return 0;
}

/* An integer in [min, max], digits only. */
static int config_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t n;
    const char *p = config_parse_digits(s, max, &n);
    if (p == NULL || *p != '\0' || n < min)
        return -1;
    *out = n;
    return 0;
}

/* yes/no and the usual spellings; anything else is an error rather than a
 * silent "no". */
static int config_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* RFC 9110 tchar: what a header name may contain. */
static int config_is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int config_is_token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!config_is_tchar((unsigned char)s[i]))
            return 0;
    }
    return 1;
}

/* No control characters (a newline in a header or a URL is an injection). */
static int config_has_ctl(const char *s, int allow_tab)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && !(allow_tab && ch == '\t')) || ch == 0x7f)
            return 1;
    }
    return 0;
}

/* ---- growing arrays --------------------------------------------------------- */

/* Appends a copy of s[0..n) to a string array; 0 or -1 (out of memory). */
static int config_push_str(char ***arr, size_t *n, const char *s, size_t len)
{
    if (*n >= SIZE_MAX / sizeof **arr - 1)
        return -1;
    char *copy = strndup(s, len);
    if (copy == NULL)
        return -1;
    char **grown = realloc(*arr, (*n + 1) * sizeof **arr);
    if (grown == NULL) {
        free(copy);
        return -1;
    }
    grown[(*n)++] = copy;
    *arr = grown;
    return 0;
}

/* Replaces *dst with a copy of s; 0 or -1. */
static int config_set_str(char **dst, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL)
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* ---- ${NAME} expansion ------------------------------------------------------- */

/* Appends n bytes to a growing buffer; 0 or -1 (out of memory). */
static int config_buf_add(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (n > SIZE_MAX - *len - 1)
        return -1;
    if (*len + n + 1 > *cap) {
        size_t want = *cap;
        while (want < *len + n + 1)
            want = want > SIZE_MAX / 2 ? *len + n + 1 : want * 2;
        char *grown = realloc(*buf, want);
        if (grown == NULL)
            return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

/* Expands every ${NAME} in v from the environment, so secrets need not be
 * written into the file. Returns a new string, or NULL after recording the
 * error. */
static char *config_expand(config_ctx *c, const char *v)
{
    size_t cap = strlen(v) + 1;
    size_t len = 0;
    char *out = malloc(cap);
    if (out == NULL) {
        config_fail_oom(c);
        return NULL;
    }
    out[0] = '\0';
    const char *p = v;
    while (*p != '\0') {
        const char *dollar = strstr(p, "${");
        size_t lit = dollar != NULL ? (size_t)(dollar - p) : strlen(p);
        if (config_buf_add(&out, &len, &cap, p, lit) != 0)
            goto oom;
        if (dollar == NULL)
            break;
        const char *name = dollar + 2;
        const char *end = strchr(name, '}');
        if (end == NULL) {
            config_fail(c, "%s: unterminated '${' (write ${NAME})", c->key);
            goto fail;
        }
        size_t nl = (size_t)(end - name);
        if (nl == 0) {
            config_fail(c, "%s: empty variable name in '${}'", c->key);
            goto fail;
        }
        char nbuf[CONFIG_VAR_MAX + 1];
        char q[CONFIG_QUOTE_MAX];
        int ok = nl <= CONFIG_VAR_MAX && !(name[0] >= '0' && name[0] <= '9');
        for (size_t i = 0; ok && i < nl; i++) {
            unsigned char ch = (unsigned char)name[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_';
        }
        if (!ok) {
            char shown[CONFIG_QUOTE_MAX];
            size_t sl = nl < sizeof shown - 1 ? nl : sizeof shown - 1;
            memcpy(shown, name, sl);
            shown[sl] = '\0';
            config_fail(c, "%s: bad variable name '%s' in ${...} (letters, digits and _)", c->key,
                        config_quote(shown, q, sizeof q));
            goto fail;
        }
        memcpy(nbuf, name, nl);
        nbuf[nl] = '\0';
        const char *val = getenv(nbuf);
        if (val == NULL) {
            config_fail(c, "%s: environment variable %s is not set", c->key, nbuf);
            goto fail;
        }
        if (config_buf_add(&out, &len, &cap, val, strlen(val)) != 0)
            goto oom;
        p = end + 1;
    }
    return out;
oom:
    config_fail_oom(c);
fail:
    free(out);
    return NULL;
}

/* ---- files named by *_file keys ----------------------------------------------- */

typedef int (*config_line_fn)(config_ctx *c, const char *fname, int fline, const char *s, size_t n);

/* A path named by a key: relative paths are relative to the config's
 * directory, so the server does not depend on its working directory. The
 * result is malloc'd; NULL after recording an error. */
static char *config_resolve_path(config_ctx *c, const char *value)
{
    if (value[0] == '\0') {
        config_fail(c, "%s: empty file name", c->key);
        return NULL;
    }
    char *full;
    if (value[0] != '/' && c->dir != NULL) {
        size_t need = strlen(c->dir) + 1 + strlen(value) + 1;
        full = malloc(need);
        if (full != NULL)
            snprintf(full, need, "%s/%s", c->dir, value);
    } else {
        full = strdup(value);
    }
    if (full == NULL)
        config_fail_oom(c);
    return full;
}

/* Remembers a file that holds a secret, so `once serve` can warn when
 * others may read it. */
static int config_note_secret_file(config_ctx *c, const char *path)
{
    once_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->nsecret_files; i++)
        if (strcmp(cfg->secret_files[i], path) == 0)
            return 0;
    if (config_push_str(&cfg->secret_files, &cfg->nsecret_files, path, strlen(path)) != 0)
        return config_fail_oom(c);
    return 0;
}

/* Reads the file a *_file key names and hands each non-blank, non-#
 * line (trimmed) to fn, so secrets can live outside the config (and outside
 * inih's 200-byte lines). Every such file holds secrets (tokens, injected
 * headers, signing keys) and is remembered as one.
 * Returns the number of lines given to fn, or -1 after recording an error. */
static int config_read_file(config_ctx *c, const char *value, config_line_fn fn)
{
    char q[CONFIG_QUOTE_MAX * 2];
    char *full = config_resolve_path(c, value);
    if (full == NULL)
        return -1;
    const char *fname = full;
    config_quote(fname, q, sizeof q);
    int count = -1;
    char *line = NULL;
    size_t linecap = 0;
    FILE *fp = fopen(fname, "re");
    if (fp == NULL) {
        config_fail(c, "%s: cannot open '%s': %s", c->key, q, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) {
        config_fail(c, "%s: cannot stat '%s': %s", c->key, q, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        config_fail(c, "%s: '%s' is not a regular file", c->key, q);
        goto out;
    }
    if (st.st_size > CONFIG_FILE_MAX) {
        config_fail(c, "%s: '%s' is larger than %lld bytes", c->key, q, (long long)CONFIG_FILE_MAX);
        goto out;
    }
    int fline = 0;
    int given = 0;
    ssize_t n;
    errno = 0;
    while ((n = getline(&line, &linecap, fp)) >= 0) {
        fline++;
        size_t len = (size_t)n;
        if (memchr(line, '\0', len) != NULL) {
            config_fail(c, "%s: '%s' line %d: NUL byte", c->key, q, fline);
            goto out;
        }
        const char *s = line;
        while (len > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            len--;
        }
        while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' ' ||
                           s[len - 1] == '\t'))
            len--;
        if (len == 0 || s[0] == '#')
            continue;
        if (fn(c, q, fline, s, len) != 0)
            goto out;
        if (given == INT32_MAX)
            break;
        given++;
    }
    if (ferror(fp)) {
        config_fail(c, "%s: cannot read '%s': %s", c->key, q, strerror(errno));
        goto out;
    }
    if (given == 0) {
        config_fail(c, "%s: '%s' has no entries", c->key, q);
        goto out;
    }
    if (config_note_secret_file(c, fname) != 0)
        goto out;
    count = given;
out:
    free(line);
    if (fp != NULL)
        fclose(fp);
    free(full);
    return count;
}

/* One word of a tokens_file line: printable ASCII without spaces. */
static size_t config_word(const char *s, size_t n, size_t *at, const char **word)
{
    size_t i = *at;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    *word = s + i;
    size_t start = i;
    while (i < n && s[i] != ' ' && s[i] != '\t')
        i++;
    *at = i;
    return i - start;
}

/* "TOKEN [ROLE [NAME]]" per line (DESIGN.md §6). The token itself is never
 * shown in a message. */
static int config_add_token(config_ctx *c, const char *fname, int fline, const char *s, size_t n)
{
    static const char form[] = "a token must be printable ASCII without spaces, then optionally a role "
                               "(agent or operator) and a name";
    once_config *cfg = c->cfg;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 && ch != '\t')
            return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, form);
        if (ch >= 0x7f)
            return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, form);
    }
    size_t at = 0;
    const char *tok, *role, *name, *extra;
    size_t tl = config_word(s, n, &at, &tok);
    size_t rl = config_word(s, n, &at, &role);
    size_t nl = config_word(s, n, &at, &name);
    size_t xl = config_word(s, n, &at, &extra);
    token_role r = ROLE_AGENT;
    if (rl == 5 && strncmp(role, "agent", 5) == 0)
        r = ROLE_AGENT;
    else if (rl == 8 && strncmp(role, "operator", 8) == 0)
        r = ROLE_OPERATOR;
    else if (rl != 0)
        return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, form);
    if (tl == 0 || xl != 0 || nl > 64)
        return config_fail(c, "%s: '%s' line %d: %s", c->key, fname, fline, form);
    for (size_t i = 0; i < cfg->ntokens; i++)
        if (strlen(cfg->tokens[i].secret) == tl && memcmp(cfg->tokens[i].secret, tok, tl) == 0)
            return config_fail(c, "%s: '%s' line %d: the same token is on an earlier line", c->key, fname,
                               fline);
    auth_token *grown = realloc(cfg->tokens, (cfg->ntokens + 1) * sizeof *grown);
    if (grown == NULL)
        return config_fail_oom(c);
    cfg->tokens = grown;
    auth_token *t = &cfg->tokens[cfg->ntokens];
    char defname[32];
    snprintf(defname, sizeof defname, "%s-%d", r == ROLE_OPERATOR ? "operator" : "agent", fline);
    t->secret = strndup(tok, tl);
    t->name = nl ? strndup(name, nl) : strdup(defname);
    t->role = r;
    if (t->secret == NULL || t->name == NULL) {
        free(t->secret);
        free(t->name);
        return config_fail_oom(c);
    }
    cfg->ntokens++;
    return 0;
}

/* Headers that frame the request or concern only one hop: injecting them
 * would break the proxy rather than authenticate it. */
static int config_header_forbidden(const char *name, size_t n)
{
    static const char *const names[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                        "Upgrade", "Keep-Alive", "TE", "Trailer"};
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
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return config_fail(c, "%s: %sexpected 'Name: value'", c->key, where);
    size_t nl = (size_t)(colon - s);
    char q[CONFIG_QUOTE_MAX];
    char nbuf[CONFIG_QUOTE_MAX];
    size_t shown = nl < sizeof nbuf - 1 ? nl : sizeof nbuf - 1;
    memcpy(nbuf, s, shown);
    nbuf[shown] = '\0';
    if (!config_is_token(s, nl))
        return config_fail(c, "%s: %s'%s' is not a valid header name", c->key, where,
                           config_quote(nbuf, q, sizeof q));
    if (config_header_forbidden(s, nl))
        return config_fail(c, "%s: %sheader '%s' cannot be injected", c->key, where,
                           config_quote(nbuf, q, sizeof q));
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    for (size_t i = 0; i < vl; i++) {
        unsigned char ch = (unsigned char)v[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return config_fail(c, "%s: %sthe value of '%s' contains a control character", c->key,
                               where, config_quote(nbuf, q, sizeof q));
    }
    if (nl > SIZE_MAX - vl - 3)
        return config_fail_oom(c);
    size_t total = nl + 2 + vl;
    char *h = malloc(total + 1);
    if (h == NULL)
        return config_fail_oom(c);
    memcpy(h, s, nl);
    memcpy(h + nl, ": ", 2);
    memcpy(h + nl + 2, v, vl);
    h[total] = '\0';
    int rc = config_push_str(&u->headers, &u->nheaders, h, total);
    free(h);
    if (rc != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_add_header_line(config_ctx *c, const char *fname, int fline, const char *s,
                                  size_t n)
{
    char where[CONFIG_QUOTE_MAX * 2 + 32];
    snprintf(where, sizeof where, "'%s' line %d: ", fname, fline);
    return config_add_header_where(c, where, s, n);
}

/* ---- setters: [server] ----------------------------------------------------------- */

static int config_want_duration(config_ctx *c, const char *v, int64_t min, int64_t *out)
{
    char q[CONFIG_QUOTE_MAX];
    int64_t ms;
    if (config_parse_duration(v, &ms) != 0)
        return config_fail(c, "%s: '%s' is not a duration (a number with ms, s, m, h or d: 30s)",
                           c->key, config_raw(c, q, sizeof q));
    if (ms < min)
        return config_fail(c, "%s: must be more than 0", c->key);
    *out = ms;
    return 0;
}

static int config_want_size(config_ctx *c, const char *v, size_t *out)
{
    char q[CONFIG_QUOTE_MAX];
    size_t n;
    if (config_parse_size(v, &n) != 0)
        return config_fail(c, "%s: '%s' is not a size (bytes, or a number with KiB, MiB or GiB)",
                           c->key, config_raw(c, q, sizeof q));
    if (n == 0)
        return config_fail(c, "%s: must be more than 0", c->key);
    *out = n;
    return 0;
}

static int config_want_listen(config_ctx *c, const char *v, char **dst)
{
    char q[CONFIG_QUOTE_MAX];
    char host[CONFIG_HOST_MAX];
    unsigned port;
    if (config_parse_listen(v, host, sizeof host, &port) != 0)
        return config_fail(c,
                           "%s: '%s' is not HOST:PORT (an IPv4 address, [IPv6] or localhost; "
                           "port 1-65535)",
                           c->key, config_raw(c, q, sizeof q));
    if (config_set_str(dst, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_want_bool(config_ctx *c, const char *v, int *out)
{
    char q[CONFIG_QUOTE_MAX];
    if (config_parse_bool(v, out) != 0)
        return config_fail(c, "%s: '%s' is not yes or no", c->key, config_raw(c, q, sizeof q));
    return 0;
}

/* A key that takes one of two words: *out is 0 for the first, 1 for the second. */
static int config_want_either(config_ctx *c, const char *v, const char *first, const char *second, int *out)
{
    char q[CONFIG_QUOTE_MAX];
    if (strcmp(v, first) == 0 || strcmp(v, second) == 0) {
        *out = strcmp(v, second) == 0;
        return 0;
    }
    return config_fail(c, "%s: '%s' is not %s or %s", c->key, config_raw(c, q, sizeof q), first, second);
}

static int config_set_server_listen(config_ctx *c, const char *v)
{
    return config_want_listen(c, v, &c->cfg->listen);
}

/* Why a store URL is wrong, or NULL. The store itself decides what it can
 * open; this only catches what can never work. */
static const char *config_store_problem(const char *v)
{
    if (v[0] == '\0')
        return "empty (try sqlite:once.db)";
    if (config_has_ctl(v, 0))
        return "contains a control character";
    if (strncmp(v, "sqlite:", 7) == 0)
        return v[7] == '\0' ? "'sqlite:' needs a path (sqlite:PATH)" : NULL;
    if (strncmp(v, "postgres://", 11) == 0 || strncmp(v, "postgresql://", 13) == 0)
        return NULL;
    return "unknown scheme (expected sqlite:PATH or postgres://...)";
}

static int config_set_server_store(config_ctx *c, const char *v)
{
    const char *why = config_store_problem(v);
    if (why != NULL)
        return config_fail(c, "%s: %s", c->key, why);
    if (config_set_str(&c->cfg->store, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_set_server_max_body(config_ctx *c, const char *v)
{
    if (config_want_size(c, v, &c->cfg->max_body) != 0)
        return -1;
    /* The stored request (a binary body in base64) must fit the ledger's
     * 16 MiB of request metadata. */
    if (c->cfg->max_body > (size_t)12 << 20)
        return config_fail(c, "max_body: at most 12MiB");
    return 0;
}

/* A lease or a retention the ledger would refuse on every reservation
 * (ONCE_LEASE_MAX_MS, ONCE_RETENTION_MAX_MS) is refused here, at load, not
 * as a 400 on each request. */
static int config_want_lease(config_ctx *c, const char *v, int64_t *out)
{
    if (config_want_duration(c, v, 1, out) != 0)
        return -1;
    return *out > ONCE_LEASE_MAX_MS ? config_fail(c, "lease: at most 7d") : 0;
}

static int config_want_retention(config_ctx *c, const char *v, int64_t *out)
{
    if (config_want_duration(c, v, 1, out) != 0)
        return -1;
    return *out > ONCE_RETENTION_MAX_MS ? config_fail(c, "retention: at most 3650d") : 0;
}

static int config_set_server_lease(config_ctx *c, const char *v)
{
    return config_want_lease(c, v, &c->cfg->lease_ms);
}

static int config_set_server_retention(config_ctx *c, const char *v)
{
    return config_want_retention(c, v, &c->cfg->retention_ms);
}

static int config_set_server_tokens_file(config_ctx *c, const char *v)
{
    return config_read_file(c, v, config_add_token) < 0 ? -1 : 0;
}

static int config_set_server_grace(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 0, &c->cfg->grace_ms);
}

static int config_set_server_threads(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_uint(v, 1, CONFIG_MAX_THREADS, &n) != 0)
        return config_fail(c, "%s: '%s' is not a number from 1 to %d", c->key,
                           config_raw(c, q, sizeof q), CONFIG_MAX_THREADS);
    c->cfg->threads = (int)n;
    return 0;
}

static int config_set_server_max_connections(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_uint(v, 1, CONFIG_MAX_CONNECTIONS_LIMIT, &n) != 0)
        return config_fail(c, "%s: '%s' is not a number from 1 to %u", c->key,
                           config_raw(c, q, sizeof q), CONFIG_MAX_CONNECTIONS_LIMIT);
    c->cfg->max_connections = (unsigned)n;
    return 0;
}

static int config_set_server_loop_interval(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &c->cfg->loop_interval_ms);
}

static int config_set_server_insecure_no_auth(config_ctx *c, const char *v)
{
    return config_want_bool(c, v, &c->cfg->insecure_no_auth);
}

/* A connection cap: 0 (none) up to max_connections' own limit. */
static int config_want_cap(config_ctx *c, const char *v, unsigned *out)
{
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_uint(v, 0, CONFIG_MAX_CONNECTIONS_LIMIT, &n) != 0)
        return config_fail(c, "%s: '%s' is not a number from 0 (no cap) to %u", c->key,
                           config_raw(c, q, sizeof q), CONFIG_MAX_CONNECTIONS_LIMIT);
    *out = (unsigned)n;
    return 0;
}

static int config_set_server_per_client(config_ctx *c, const char *v)
{
    return config_want_cap(c, v, &c->cfg->max_conn_per_client);
}

static int config_set_server_per_loopback(config_ctx *c, const char *v)
{
    return config_want_cap(c, v, &c->cfg->max_conn_per_loopback);
}

static int config_set_server_request_timeout(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &c->cfg->request_timeout_ms);
}

/* redact_headers = A, B: header names, each a token. */
static int config_set_server_redact_headers(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    once_config *cfg = c->cfg;
    for (const char *p = v;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == 0 || !config_is_token(p, n))
            return config_fail(c, "%s: '%s' is not a comma-separated list of header names", c->key,
                               config_raw(c, q, sizeof q));
        if (config_push_str(&cfg->redact_headers, &cfg->nredact_headers, p, n) != 0)
            return config_fail_oom(c);
        p += n;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            return 0;
        if (*p++ != ',')
            return config_fail(c, "%s: '%s' is not a comma-separated list of header names", c->key,
                               config_raw(c, q, sizeof q));
    }
}

static int config_set_server_metrics_token(config_ctx *c, const char *v)
{
    if (v[0] == '\0' || config_has_ctl(v, 0) || strchr(v, ' ') != NULL)
        return config_fail(c, "%s: must be printable ASCII without spaces", c->key);
    if (config_set_str(&c->cfg->metrics_token, v) != 0)
        return config_fail_oom(c);
    c->cfg->inline_secrets = 1;
    return 0;
}

/* A PEM file (certificate, key or CA) named by a key: resolved against the
 * config's directory and checked readable now, so a typo fails the load
 * (and check-config) rather than the start. Keys are remembered as secrets. */
static int config_want_pem(config_ctx *c, const char *v, char **dst, int secret)
{
    char q[CONFIG_QUOTE_MAX * 2];
    char *full = config_resolve_path(c, v);
    if (full == NULL)
        return -1;
    struct stat st;
    FILE *fp = fopen(full, "re");
    int ok = fp != NULL && fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode);
    int e = errno;
    if (fp != NULL)
        fclose(fp);
    if (!ok) {
        config_quote(full, q, sizeof q);
        free(full);
        return config_fail(c, "%s: cannot read '%s'%s%s", c->key, q, fp ? ": not a regular file" : ": ",
                           fp ? "" : strerror(e));
    }
    if (secret && config_note_secret_file(c, full) != 0) {
        free(full);
        return -1;
    }
    free(*dst);
    *dst = full;
    return 0;
}

static int config_set_server_wal_max(config_ctx *c, const char *v)
{
    if (config_want_size(c, v, &c->cfg->wal_max) != 0)
        return -1;
    return c->cfg->wal_max < ((size_t)1 << 20) ? config_fail(c, "wal_max: at least 1MiB") : 0;
}

static int config_set_server_tls_cert(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &c->cfg->tls_cert, 0);
}

static int config_set_server_tls_key(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &c->cfg->tls_key, 1);
}

/* ---- setters: [upstream.NAME] ------------------------------------------------------ */

static upstream_cfg *config_cur(config_ctx *c)
{
    return &c->cfg->upstreams[c->cur];
}

/* Checks that v is an http(s) URL with a host (and at most a port and a
 * path) and stores it in *dst. A base URL (an upstream's) is stored without
 * trailing slashes, so the proxy can append "/path" as it is; an endpoint
 * (a source's deliver_to) is kept as written, since "/events/" and
 * "/events" may be different resources. Userinfo, query and fragment are
 * refused: credentials go in a header, and a query cannot take a path
 * after it. */
static int config_want_url(config_ctx *c, const char *v, char **dst, int base)
{
    char q[CONFIG_QUOTE_MAX];
    const char *rest;
    if (strncasecmp(v, "http://", 7) == 0)
        rest = v + 7;
    else if (strncasecmp(v, "https://", 8) == 0)
        rest = v + 8;
    else
        return config_fail(c, "%s: '%s' must start with http:// or https://", c->key,
                           config_raw(c, q, sizeof q));
    for (const char *p = v; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#')
            return config_fail(c,
                               "%s: '%s': spaces, control characters, non-ASCII, '?' and '#' are "
                               "not allowed in %s",
                               c->key, config_raw(c, q, sizeof q), base ? "a base URL" : "the URL");
    }
    size_t alen = strcspn(rest, "/");
    const char *path = rest + alen;
    if (memchr(rest, '@', alen) != NULL)
        return config_fail(c, "%s: '%s': no user:password@ in the URL (use a header)", c->key,
                           config_raw(c, q, sizeof q));
    const char *port = NULL;
    size_t hl;
    char host[CONFIG_HOST_MAX + 2];
    if (rest[0] == '[') {
        const char *end = memchr(rest, ']', alen);
        unsigned char addr[16];
        hl = end != NULL ? (size_t)(end - rest - 1) : 0;
        if (end == NULL || hl == 0 || hl >= sizeof host)
            return config_fail(c, "%s: '%s': bad [IPv6] host", c->key, config_raw(c, q, sizeof q));
        memcpy(host, rest + 1, hl);
        host[hl] = '\0';
        if (inet_pton(AF_INET6, host, addr) != 1)
            return config_fail(c, "%s: '%s': bad [IPv6] host", c->key, config_raw(c, q, sizeof q));
        if (end + 1 < path) {
            if (end[1] != ':')
                return config_fail(c, "%s: '%s': bad host", c->key, config_raw(c, q, sizeof q));
            port = end + 2;
        }
    } else {
        const char *colon = memchr(rest, ':', alen);
        hl = colon != NULL ? (size_t)(colon - rest) : alen;
        if (hl == 0)
            return config_fail(c, "%s: '%s' has no host", c->key, config_raw(c, q, sizeof q));
        for (size_t i = 0; i < hl; i++) {
            unsigned char ch = (unsigned char)rest[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '-' || ch == '_'))
                return config_fail(c, "%s: '%s': bad host", c->key, config_raw(c, q, sizeof q));
        }
        if (colon != NULL)
            port = colon + 1;
    }
    if (port != NULL) {
        char pbuf[8];
        size_t pl = (size_t)(path - port);
        unsigned pn;
        if (pl == 0 || pl >= sizeof pbuf)
            return config_fail(c, "%s: '%s': bad port", c->key, config_raw(c, q, sizeof q));
        memcpy(pbuf, port, pl);
        pbuf[pl] = '\0';
        if (config_parse_port(pbuf, &pn) != 0)
            return config_fail(c, "%s: '%s': bad port", c->key, config_raw(c, q, sizeof q));
    }
    size_t len = strlen(v);
    while (base && len > 0 && v + len > path && v[len - 1] == '/')
        len--;
    char *copy = strndup(v, len);
    if (copy == NULL)
        return config_fail_oom(c);
    free(*dst);
    *dst = copy;
    return 0;
}

static int config_set_up_url(config_ctx *c, const char *v)
{
    return config_want_url(c, v, &config_cur(c)->url, 1);
}

static int config_set_up_header(config_ctx *c, const char *v)
{
    c->cfg->inline_secrets = 1; /* injected headers are credentials */
    return config_add_header_where(c, "", v, strlen(v));
}

static int config_set_up_header_file(config_ctx *c, const char *v)
{
    return config_read_file(c, v, config_add_header_line) < 0 ? -1 : 0;
}

static int config_set_up_timeout(config_ctx *c, const char *v)
{
    if (config_want_duration(c, v, 1, &config_cur(c)->timeout_ms) != 0)
        return -1;
    return config_cur(c)->timeout_ms > CONFIG_TIMEOUT_MAX_MS ? config_fail(c, "timeout: at most 1d") : 0;
}

static int config_set_up_lease(config_ctx *c, const char *v)
{
    return config_want_lease(c, v, &config_cur(c)->lease_ms);
}

static int config_set_up_retention(config_ctx *c, const char *v)
{
    return config_want_retention(c, v, &config_cur(c)->retention_ms);
}

static int config_set_up_key_required(config_ctx *c, const char *v)
{
    return config_want_bool(c, v, &config_cur(c)->key_required);
}

static int config_set_up_key_safe_methods(config_ctx *c, const char *v)
{
    return config_want_bool(c, v, &config_cur(c)->key_safe_methods);
}

static int config_set_up_on_mismatch(config_ctx *c, const char *v)
{
    int reject;
    if (config_want_either(c, v, "replay", "reject", &reject) != 0)
        return -1;
    config_cur(c)->on_mismatch = reject ? MISMATCH_REJECT : MISMATCH_REPLAY;
    return 0;
}

/* "429, 503" -> a list of distinct statuses in 100..599; "none" -> empty.
 * release_on refuses 2xx: a success certainly did something, and releasing
 * it would let the action run twice. */
static int config_want_statuses(config_ctx *c, const char *v, int **arr, size_t *n, int release)
{
    char q[CONFIG_QUOTE_MAX];
    int *list = NULL;
    size_t count = 0;
    free(*arr);
    *arr = NULL;
    *n = 0;
    if (strcmp(v, "none") == 0)
        return 0;
    const char *p = v;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        uint64_t st;
        const char *e = config_parse_digits(p, 999, &st);
        if (e == NULL || st < 100 || st > 599) {
            free(list);
            return config_fail(c,
                               "%s: '%s' is not a comma-separated list of HTTP statuses (100-599) "
                               "or none",
                               c->key, config_raw(c, q, sizeof q));
        }
        if (release && st >= 200 && st <= 299) {
            free(list);
            return config_fail(c, "%s: %d is a success; it cannot mean the upstream did nothing",
                               c->key, (int)st);
        }
        for (size_t i = 0; i < count; i++) {
            if (list[i] == (int)st) {
                free(list);
                return config_fail(c, "%s: %d is listed twice", c->key, (int)st);
            }
        }
        if (count >= 500) { /* cannot happen with distinct 100..599, but bound it */
            free(list);
            return config_fail(c, "%s: too many statuses", c->key);
        }
        int *grown = realloc(list, (count + 1) * sizeof *list);
        if (grown == NULL) {
            free(list);
            return config_fail_oom(c);
        }
        list = grown;
        list[count++] = (int)st;
        p = e;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',') {
            free(list);
            return config_fail(c,
                               "%s: '%s' is not a comma-separated list of HTTP statuses (100-599) "
                               "or none",
                               c->key, config_raw(c, q, sizeof q));
        }
        p++;
    }
    *arr = list;
    *n = count;
    return 0;
}

static int config_set_up_release_on(config_ctx *c, const char *v)
{
    upstream_cfg *u = config_cur(c);
    return config_want_statuses(c, v, &u->release_on, &u->nrelease_on, 1);
}

static int config_set_up_unknown_on(config_ctx *c, const char *v)
{
    upstream_cfg *u = config_cur(c);
    return config_want_statuses(c, v, &u->unknown_on, &u->nunknown_on, 0);
}

static int config_set_up_forward_key_as(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    if (!config_is_token(v, strlen(v)))
        return config_fail(c, "%s: '%s' is not a valid header name", c->key,
                           config_raw(c, q, sizeof q));
    if (config_set_str(&config_cur(c)->forward_key_as, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_set_up_listen(config_ctx *c, const char *v)
{
    return config_want_listen(c, v, &config_cur(c)->listen);
}

static int config_set_up_max_response(config_ctx *c, const char *v)
{
    return config_want_size(c, v, &config_cur(c)->max_response);
}

/* Whether p[0..n) is an RFC 6901 JSON pointer: empty (the whole document),
 * or '/' then tokens in which '~' is only ever "~0" or "~1"; no control
 * characters. */
static int config_is_pointer(const char *p, size_t n)
{
    if (n > 0 && p[0] != '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch < 0x20 || ch == 0x7f)
            return 0;
        if (ch == '~' && (i + 1 >= n || (p[i + 1] != '0' && p[i + 1] != '1')))
            return 0;
    }
    return 1;
}

/* key = TEMPLATE: parsed now, so a mistake is reported at its line (and the
 * parser's column) rather than on the first request. */
static int config_set_up_key(config_ctx *c, const char *v)
{
    char why[CONFIG_MSG_MAX / 2];
    char q[CONFIG_MSG_MAX / 2];
    key_template *t = NULL;
    if (v[0] == '\0')
        return config_fail(c, "%s: empty (leave the key out to use only the client's key)",
                           c->key);
    why[0] = '\0';
    if (key_template_parse(v, &t, why, sizeof why) != 0) {
        if (t != NULL)
            key_template_free(t);
        return config_fail(c, "%s: %s", c->key,
                           why[0] != '\0' ? config_quote(why, q, sizeof q) : "not a valid template");
    }
    if (t == NULL)
        return config_fail_oom(c);
    upstream_cfg *u = config_cur(c);
    if (u->key != NULL)
        key_template_free(u->key);
    u->key = t;
    return 0;
}

static int config_set_up_key_source(config_ctx *c, const char *v)
{
    return config_want_either(c, v, "header", "template", &config_cur(c)->key_from_template);
}

/* Checks the {...} placeholder of a lookup path: name[0..n) is what is
 * between the braces, col the column of its '{'. */
static int config_lookup_placeholder(config_ctx *c, const char *name, size_t n, size_t col)
{
    char shown[CONFIG_QUOTE_MAX];
    char q[CONFIG_QUOTE_MAX];
    if ((n == 3 && memcmp(name, "key", 3) == 0) || (n == 5 && memcmp(name, "scope", 5) == 0))
        return 0;
    if (n >= 5 && memcmp(name, "json:", 5) == 0) {
        if (config_is_pointer(name + 5, n - 5))
            return 0;
        return config_fail(c,
                           "%s: column %zu: not a JSON pointer after json: (nothing, or /a/b "
                           "with ~0 for '~' and ~1 for '/')",
                           c->key, col);
    }
    if (n >= 7 && memcmp(name, "header:", 7) == 0) {
        if (config_is_token(name + 7, n - 7))
            return 0;
        return config_fail(c, "%s: column %zu: not a valid header name after header:", c->key,
                           col);
    }
    size_t sl = n < sizeof shown - 1 ? n : sizeof shown - 1;
    memcpy(shown, name, sl);
    shown[sl] = '\0';
    return config_fail(c,
                       "%s: column %zu: unknown placeholder '{%s}' (expected {key}, {scope}, "
                       "{json:/POINTER} or {header:NAME})",
                       c->key, col, config_quote(shown, q, sizeof q));
}

/* lookup = METHOD PATH: GET, HEAD or POST, then a path (and query) that is
 * appended to the upstream's url, with {key}, {scope}, {json:/POINTER} and
 * {header:NAME} filled in from the original request. Columns count from the
 * first character of the value. */
static int config_set_up_lookup(config_ctx *c, const char *v)
{
    static const char *const methods[] = {"GET", "HEAD", "POST"};
    char q[CONFIG_QUOTE_MAX];
    char shown[CONFIG_QUOTE_MAX];
    size_t ml = strcspn(v, " \t");
    const char *p = v + ml;
    while (*p == ' ' || *p == '\t')
        p++;
    if (ml == 0 || *p == '\0')
        return config_fail(c, "%s: '%s' is not METHOD PATH (GET /v1/things?ref={key})", c->key,
                           config_raw(c, q, sizeof q));
    size_t m;
    for (m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        if (strlen(methods[m]) == ml && memcmp(v, methods[m], ml) == 0)
            break;
    }
    if (m == sizeof methods / sizeof methods[0]) {
        size_t sl = ml < sizeof shown - 1 ? ml : sizeof shown - 1;
        memcpy(shown, v, sl);
        shown[sl] = '\0';
        return config_fail(c, "%s: column 1: '%s' is not GET, HEAD or POST (upper case)", c->key,
                           config_quote(shown, q, sizeof q));
    }
    size_t base = (size_t)(p - v) + 1; /* the column of the path's first character */
    if (*p != '/')
        return config_fail(c, "%s: column %zu: the path must start with '/'", c->key, base);
    for (size_t i = 0; p[i] != '\0'; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '{') {
            size_t j = i + 1;
            while (p[j] != '\0' && p[j] != '}' && p[j] != '{')
                j++;
            if (p[j] == '{')
                return config_fail(c, "%s: column %zu: '{' inside a placeholder", c->key,
                                   base + j);
            if (p[j] != '}')
                return config_fail(c, "%s: column %zu: '{' is not closed by '}'", c->key,
                                   base + i);
            if (config_lookup_placeholder(c, p + i + 1, j - i - 1, base + i) != 0)
                return -1;
            i = j;
        } else if (ch == '}') {
            return config_fail(c, "%s: column %zu: '}' without '{'", c->key, base + i);
        } else if (ch <= 0x20 || ch >= 0x7f || ch == '#') {
            return config_fail(c,
                               "%s: column %zu: spaces, control characters, non-ASCII and '#' "
                               "are not allowed in the path (percent-encode them)",
                               c->key, base + i);
        }
    }
    upstream_cfg *u = config_cur(c);
    if (config_set_str(&u->lookup_method, methods[m]) != 0 ||
        config_set_str(&u->lookup_path, p) != 0)
        return config_fail_oom(c);
    return 0;
}

/* lookup_found = json:/POINTER: where, in the lookup's answer, the
 * provider's id of the action is. Kept as written, prefix included. */
static int config_set_up_lookup_found(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    if (strncmp(v, "json:", 5) != 0 || !config_is_pointer(v + 5, strlen(v + 5)))
        return config_fail(c,
                           "%s: '%s' is not json:/POINTER (json: then nothing or /a/b, with ~0 "
                           "for '~' and ~1 for '/')",
                           c->key, config_raw(c, q, sizeof q));
    if (config_set_str(&config_cur(c)->lookup_found, v) != 0)
        return config_fail_oom(c);
    return 0;
}

/* lookup_absent = 404 | json-empty:/data: '|'-separated statuses (100-599)
 * and json-empty:POINTER items, each once. The pointers are stored without
 * their "json-empty:" prefix. */
static int config_set_up_lookup_absent(config_ctx *c, const char *v)
{
    static const char empty_pfx[] = "json-empty:";
    const size_t epl = sizeof empty_pfx - 1;
    char q[CONFIG_QUOTE_MAX];
    char shown[CONFIG_QUOTE_MAX];
    upstream_cfg *u = config_cur(c);
    int *st = NULL;
    size_t nst = 0;
    char **ptrs = NULL;
    size_t nptrs = 0;
    size_t nth = 0;
    int rc = -1;
    for (const char *p = v;;) {
        const char *bar = strchr(p, '|');
        const char *e = bar != NULL ? bar : p + strlen(p);
        const char *b = p;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        size_t len = (size_t)(e - b);
        nth++;
        size_t sl = len < sizeof shown - 1 ? len : sizeof shown - 1;
        memcpy(shown, b, sl);
        shown[sl] = '\0';
        uint64_t code = 0;
        const char *after = len > 0 ? config_parse_digits(b, 999, &code) : NULL;
        if (len == 0) {
            config_fail(c, "%s: item %zu is empty (write 404 | json-empty:/data)", c->key, nth);
            goto out;
        } else if (after == e) {
            if (code < 100 || code > 599) {
                config_fail(c, "%s: %d is not an HTTP status (100-599)", c->key, (int)code);
                goto out;
            }
            for (size_t k = 0; k < nst; k++) {
                if (st[k] == (int)code) {
                    config_fail(c, "%s: %d is listed twice", c->key, (int)code);
                    goto out;
                }
            }
            int *grown = realloc(st, (nst + 1) * sizeof *st);
            if (grown == NULL) {
                config_fail_oom(c);
                goto out;
            }
            st = grown;
            st[nst++] = (int)code;
        } else if (len >= epl && memcmp(b, empty_pfx, epl) == 0) {
            if (!config_is_pointer(b + epl, len - epl)) {
                config_fail(c,
                            "%s: '%s' is not json-empty: then a JSON pointer (nothing or /a/b, "
                            "with ~0 for '~' and ~1 for '/')",
                            c->key, config_quote(shown, q, sizeof q));
                goto out;
            }
            for (size_t k = 0; k < nptrs; k++) {
                if (strlen(ptrs[k]) == len - epl && memcmp(ptrs[k], b + epl, len - epl) == 0) {
                    config_fail(c, "%s: '%s' is listed twice", c->key,
                                config_quote(shown, q, sizeof q));
                    goto out;
                }
            }
            if (config_push_str(&ptrs, &nptrs, b + epl, len - epl) != 0) {
                config_fail_oom(c);
                goto out;
            }
        } else {
            config_fail(c,
                        "%s: '%s' is not an HTTP status (100-599) or json-empty:/POINTER "
                        "(items separated by '|')",
                        c->key, config_quote(shown, q, sizeof q));
            goto out;
        }
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    free(u->lookup_absent_status);
    for (size_t k = 0; k < u->nlookup_absent_empty; k++)
        free(u->lookup_absent_empty[k]);
    free(u->lookup_absent_empty);
    u->lookup_absent_status = st;
    u->nlookup_absent_status = nst;
    u->lookup_absent_empty = ptrs;
    u->nlookup_absent_empty = nptrs;
    st = NULL;
    ptrs = NULL;
    nptrs = 0;
    rc = 0;
out:
    free(st);
    for (size_t k = 0; k < nptrs; k++)
        free(ptrs[k]);
    free(ptrs);
    return rc;
}

static int config_set_up_lookup_backoff(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur(c)->lookup_backoff_ms);
}

static int config_set_up_lookup_attempts(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_uint(v, 1, CONFIG_LOOKUP_ATTEMPTS_MAX, &n) != 0)
        return config_fail(c, "%s: '%s' is not a number from 1 to %d", c->key,
                           config_raw(c, q, sizeof q), CONFIG_LOOKUP_ATTEMPTS_MAX);
    config_cur(c)->lookup_attempts = (int)n;
    return 0;
}

static int config_set_up_actions_api(config_ctx *c, const char *v)
{
    return config_want_bool(c, v, &config_cur(c)->actions_api);
}

static int config_set_up_listen_tls_cert(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &config_cur(c)->listen_tls_cert, 0);
}

static int config_set_up_listen_tls_key(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &config_cur(c)->listen_tls_key, 1);
}

static int config_set_up_ca_file(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &config_cur(c)->ca_file, 0);
}

static int config_set_up_tls_cert(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &config_cur(c)->tls_cert, 0);
}

static int config_set_up_tls_key(config_ctx *c, const char *v)
{
    return config_want_pem(c, v, &config_cur(c)->tls_key, 1);
}

/* ---- setters: [source.NAME] ------------------------------------------------------- */

static source_cfg *config_cur_src(config_ctx *c)
{
    return &c->cfg->sources[c->cur];
}

/* The verify schemes: config name, sig_scheme value, the event_id used when
 * the source gives none (NULL: no id the sender always sends, so it must be
 * given), and whether the scheme signs a timestamp (tolerance applies). The
 * names are webhook_sig's; they are listed here rather than taken from
 * sig_scheme_parse so the loader does not link against the verifier. */
static const struct {
    const char *name;
    int scheme;
    const char *event_id;
    int timestamp;
} config_schemes[] = {
    {"stripe", SIG_STRIPE, "json:/id", 1},
    {"github", SIG_GITHUB, "header:X-GitHub-Delivery", 0},
    {"standard", SIG_STANDARD, "header:webhook-id", 1},
    {"slack", SIG_SLACK, "json:/event_id", 1},
    {"hmac-sha256", SIG_HMAC_SHA256, NULL, 0},
    {"none", SIG_NONE, NULL, 0},
};

#define CONFIG_NSCHEMES (sizeof config_schemes / sizeof config_schemes[0])

/* The config_schemes entry of a sig_scheme value (verify, once set, is
 * always one of them). */
static size_t config_scheme_index(int scheme)
{
    for (size_t i = 0; i < CONFIG_NSCHEMES; i++) {
        if (config_schemes[i].scheme == scheme)
            return i;
    }
    return 0;
}

/* The standard base64 value of ch (RFC 4648 §4), or -1. */
static int config_b64val(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Whether s[0..n) is "whsec_" and strict base64 of at least one byte — the
 * same rule as webhook_sig's decoder (correct '=' padding or none, no stray
 * characters, zero unused bits), so a key accepted here is accepted when the
 * verifier or signer is built at start-up. */
static int config_is_whsec(const char *s, size_t n)
{
    static const char pfx[] = "whsec_";
    const size_t pl = sizeof pfx - 1;
    if (n <= pl || memcmp(s, pfx, pl) != 0)
        return 0;
    s += pl;
    n -= pl;
    size_t pad = 0;
    if (n >= 4 && n % 4 == 0) {
        if (s[n - 1] == '=')
            pad++;
        if (pad == 1 && s[n - 2] == '=')
            pad++;
    }
    size_t m = n - pad;
    size_t rem = m % 4;
    if (m == 0 || rem == 1 || (pad == 1 && rem != 3) || (pad == 2 && rem != 2))
        return 0;
    int last = 0;
    for (size_t i = 0; i < m; i++) {
        last = config_b64val((unsigned char)s[i]);
        if (last < 0)
            return 0;
    }
    /* The bits of the last character that fall outside the last byte. */
    if ((rem == 2 && (last & 0xf) != 0) || (rem == 3 && (last & 0x3) != 0))
        return 0;
    return 1;
}

/* Splits "a, b" into secrets appended to the current source: each trimmed,
 * not empty, without control characters (a CR from a CRLF file, or a
 * newline from a variable, would never match), within webhook_sig's limits.
 * where is "" for the secret key or "'FILE' line N: " for a secret_file
 * line. Secrets are never shown in a message, only their position. */
static int config_add_secrets_where(config_ctx *c, const char *where, const char *s, size_t n)
{
    source_cfg *src = config_cur_src(c);
    const char *end = s + n;
    for (const char *p = s;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma != NULL ? comma : end;
        const char *b = p;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        size_t len = (size_t)(e - b);
        size_t nth = src->nsecrets + 1;
        if (len == 0)
            return config_fail(c, "%s: %ssecret %zu is empty", c->key, where, nth);
        if (len > CONFIG_MAX_SECRET_LEN)
            return config_fail(c, "%s: %ssecret %zu is longer than %d bytes", c->key, where, nth,
                               CONFIG_MAX_SECRET_LEN);
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)b[i];
            if (ch < 0x20 || ch == 0x7f)
                return config_fail(c, "%s: %ssecret %zu contains a control character", c->key,
                                   where, nth);
        }
        if (src->nsecrets >= CONFIG_MAX_SECRETS)
            return config_fail(c, "%s: %sat most %d secrets", c->key, where, CONFIG_MAX_SECRETS);
        if (config_push_str(&src->secrets, &src->nsecrets, b, len) != 0)
            return config_fail_oom(c);
        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

static int config_add_secret_line(config_ctx *c, const char *fname, int fline, const char *s,
                                  size_t n)
{
    char where[CONFIG_QUOTE_MAX * 2 + 32];
    snprintf(where, sizeof where, "'%s' line %d: ", fname, fline);
    return config_add_secrets_where(c, where, s, n);
}

static uint64_t config_key_bit(int kind, const char *name);

/* secret and secret_file are two ways of saying the same thing: both at
 * once is refused rather than merged, so it is clear which secrets are on. */
static int config_src_one_secret_key(config_ctx *c, const char *other)
{
    if ((c->src[c->cur].seen & config_key_bit(CONFIG_SEC_SOURCE, other)) != 0)
        return config_fail(c, "%s: the secrets are already given by %s; use one of them", c->key,
                           other);
    return 0;
}

static int config_set_src_verify(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    for (size_t i = 0; i < CONFIG_NSCHEMES; i++) {
        if (strcmp(v, config_schemes[i].name) == 0) {
            config_cur_src(c)->verify = config_schemes[i].scheme;
            return 0;
        }
    }
    return config_fail(c, "%s: '%s' is not stripe, github, standard, slack, hmac-sha256 or none",
                       c->key, config_raw(c, q, sizeof q));
}

static int config_set_src_secret(config_ctx *c, const char *v)
{
    if (config_src_one_secret_key(c, "secret_file") != 0)
        return -1;
    c->cfg->inline_secrets = 1;
    return config_add_secrets_where(c, "", v, strlen(v));
}

static int config_set_src_secret_file(config_ctx *c, const char *v)
{
    if (config_src_one_secret_key(c, "secret") != 0)
        return -1;
    return config_read_file(c, v, config_add_secret_line) < 0 ? -1 : 0;
}

static int config_set_src_insecure(config_ctx *c, const char *v)
{
    return config_want_bool(c, v, &config_cur_src(c)->insecure);
}

/* json:POINTER (RFC 6901: empty, or '/' then tokens where '~' is only ever
 * "~0" or "~1") or header:NAME (a header token). */
static int config_set_src_event_id(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    if (strncmp(v, "json:", 5) == 0) {
        if (!config_is_pointer(v + 5, strlen(v + 5)))
            return config_fail(c,
                               "%s: '%s' is not a JSON pointer (json: then nothing or /a/b, "
                               "with ~0 for '~' and ~1 for '/')",
                               c->key, config_raw(c, q, sizeof q));
    } else if (strncmp(v, "header:", 7) == 0) {
        if (!config_is_token(v + 7, strlen(v + 7)))
            return config_fail(c, "%s: '%s' is not header: then a valid header name", c->key,
                               config_raw(c, q, sizeof q));
    } else {
        return config_fail(c, "%s: '%s' is not json:/POINTER or header:NAME", c->key,
                           config_raw(c, q, sizeof q));
    }
    if (config_set_str(&config_cur_src(c)->event_id, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_set_src_tolerance(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur_src(c)->tolerance_ms);
}

static int config_set_src_signature_header(config_ctx *c, const char *v)
{
    char q[CONFIG_QUOTE_MAX];
    if (!config_is_token(v, strlen(v)))
        return config_fail(c, "%s: '%s' is not a valid header name", c->key,
                           config_raw(c, q, sizeof q));
    if (config_set_str(&config_cur_src(c)->signature_header, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_set_src_signature_encoding(config_ctx *c, const char *v)
{
    return config_want_either(c, v, "hex", "base64", &config_cur_src(c)->signature_base64);
}

static int config_set_src_signature_prefix(config_ctx *c, const char *v)
{
    if (v[0] == '\0')
        return config_fail(c, "%s: empty (leave the key out when there is no prefix)", c->key);
    if (config_has_ctl(v, 0))
        return config_fail(c, "%s: contains a control character", c->key);
    if (config_set_str(&config_cur_src(c)->signature_prefix, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_set_src_deliver_to(config_ctx *c, const char *v)
{
    return config_want_url(c, v, &config_cur_src(c)->deliver_to, 0);
}

/* Always a Standard Webhooks key, whatever the source's verify: it signs
 * what the gateway delivers. Not shown in messages. */
static int config_set_src_deliver_secret(config_ctx *c, const char *v)
{
    size_t n = strlen(v);
    if (n > CONFIG_MAX_SECRET_LEN)
        return config_fail(c, "%s: longer than %d bytes", c->key, CONFIG_MAX_SECRET_LEN);
    if (!config_is_whsec(v, n))
        return config_fail(c, "%s: not \"whsec_\" followed by base64", c->key);
    if (config_set_str(&config_cur_src(c)->deliver_secret, v) != 0)
        return config_fail_oom(c);
    return 0;
}

static int config_want_count(config_ctx *c, const char *v, int *out)
{
    char q[CONFIG_QUOTE_MAX];
    uint64_t n;
    if (config_parse_uint(v, 1, CONFIG_SRC_LIMIT, &n) != 0)
        return config_fail(c, "%s: '%s' is not a number from 1 to %d", c->key,
                           config_raw(c, q, sizeof q), CONFIG_SRC_LIMIT);
    *out = (int)n;
    return 0;
}

static int config_set_src_max_attempts(config_ctx *c, const char *v)
{
    return config_want_count(c, v, &config_cur_src(c)->max_attempts);
}

static int config_set_src_retry_base(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur_src(c)->retry_base_ms);
}

static int config_set_src_retry_cap(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur_src(c)->retry_cap_ms);
}

static int config_set_src_retention(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur_src(c)->retention_ms);
}

static int config_set_src_timeout(config_ctx *c, const char *v)
{
    return config_want_duration(c, v, 1, &config_cur_src(c)->timeout_ms);
}

static int config_set_src_concurrency(config_ctx *c, const char *v)
{
    return config_want_count(c, v, &config_cur_src(c)->concurrency);
}

/* Every key there is; a bit per entry records which ones a section has set. */
static const config_key config_keys[] = {
    {CONFIG_SEC_SERVER, "listen", config_set_server_listen, 0},
    {CONFIG_SEC_SERVER, "store", config_set_server_store, 0},
    {CONFIG_SEC_SERVER, "max_body", config_set_server_max_body, 0},
    {CONFIG_SEC_SERVER, "lease", config_set_server_lease, 0},
    {CONFIG_SEC_SERVER, "retention", config_set_server_retention, 0},
    {CONFIG_SEC_SERVER, "tokens_file", config_set_server_tokens_file, 0},
    {CONFIG_SEC_SERVER, "shutdown_grace", config_set_server_grace, 0},
    {CONFIG_SEC_SERVER, "threads", config_set_server_threads, 0},
    {CONFIG_SEC_SERVER, "max_connections", config_set_server_max_connections, 0},
    {CONFIG_SEC_SERVER, "loop_interval", config_set_server_loop_interval, 0},
    {CONFIG_SEC_SERVER, "insecure_no_auth", config_set_server_insecure_no_auth, 0},
    {CONFIG_SEC_SERVER, "max_connections_per_client", config_set_server_per_client, 0},
    {CONFIG_SEC_SERVER, "max_connections_per_loopback_client", config_set_server_per_loopback, 0},
    {CONFIG_SEC_SERVER, "request_timeout", config_set_server_request_timeout, 0},
    {CONFIG_SEC_SERVER, "redact_headers", config_set_server_redact_headers, 0},
    {CONFIG_SEC_SERVER, "metrics_token", config_set_server_metrics_token, 0},
    {CONFIG_SEC_SERVER, "tls_cert", config_set_server_tls_cert, 0},
    {CONFIG_SEC_SERVER, "tls_key", config_set_server_tls_key, 0},
    {CONFIG_SEC_SERVER, "wal_max", config_set_server_wal_max, 0},
    {CONFIG_SEC_UPSTREAM, "url", config_set_up_url, 0},
    {CONFIG_SEC_UPSTREAM, "header", config_set_up_header, 1},
    {CONFIG_SEC_UPSTREAM, "header_file", config_set_up_header_file, 0},
    {CONFIG_SEC_UPSTREAM, "timeout", config_set_up_timeout, 0},
    {CONFIG_SEC_UPSTREAM, "lease", config_set_up_lease, 0},
    {CONFIG_SEC_UPSTREAM, "retention", config_set_up_retention, 0},
    {CONFIG_SEC_UPSTREAM, "key_required", config_set_up_key_required, 0},
    {CONFIG_SEC_UPSTREAM, "key_safe_methods", config_set_up_key_safe_methods, 0},
    {CONFIG_SEC_UPSTREAM, "on_mismatch", config_set_up_on_mismatch, 0},
    {CONFIG_SEC_UPSTREAM, "release_on", config_set_up_release_on, 0},
    {CONFIG_SEC_UPSTREAM, "unknown_on", config_set_up_unknown_on, 0},
    {CONFIG_SEC_UPSTREAM, "forward_key_as", config_set_up_forward_key_as, 0},
    {CONFIG_SEC_UPSTREAM, "listen", config_set_up_listen, 0},
    {CONFIG_SEC_UPSTREAM, "max_response", config_set_up_max_response, 0},
    {CONFIG_SEC_UPSTREAM, "key", config_set_up_key, 0},
    {CONFIG_SEC_UPSTREAM, "key_source", config_set_up_key_source, 0},
    {CONFIG_SEC_UPSTREAM, "lookup", config_set_up_lookup, 0},
    {CONFIG_SEC_UPSTREAM, "lookup_found", config_set_up_lookup_found, 0},
    {CONFIG_SEC_UPSTREAM, "lookup_absent", config_set_up_lookup_absent, 0},
    {CONFIG_SEC_UPSTREAM, "lookup_backoff", config_set_up_lookup_backoff, 0},
    {CONFIG_SEC_UPSTREAM, "lookup_attempts", config_set_up_lookup_attempts, 0},
    {CONFIG_SEC_UPSTREAM, "actions_api", config_set_up_actions_api, 0},
    {CONFIG_SEC_UPSTREAM, "listen_tls_cert", config_set_up_listen_tls_cert, 0},
    {CONFIG_SEC_UPSTREAM, "listen_tls_key", config_set_up_listen_tls_key, 0},
    {CONFIG_SEC_UPSTREAM, "ca_file", config_set_up_ca_file, 0},
    {CONFIG_SEC_UPSTREAM, "tls_cert", config_set_up_tls_cert, 0},
    {CONFIG_SEC_UPSTREAM, "tls_key", config_set_up_tls_key, 0},
    {CONFIG_SEC_SOURCE, "verify", config_set_src_verify, 0},
    {CONFIG_SEC_SOURCE, "secret", config_set_src_secret, 0},
    {CONFIG_SEC_SOURCE, "secret_file", config_set_src_secret_file, 0},
    {CONFIG_SEC_SOURCE, "insecure", config_set_src_insecure, 0},
    {CONFIG_SEC_SOURCE, "event_id", config_set_src_event_id, 0},
    {CONFIG_SEC_SOURCE, "tolerance", config_set_src_tolerance, 0},
    {CONFIG_SEC_SOURCE, "signature_header", config_set_src_signature_header, 0},
    {CONFIG_SEC_SOURCE, "signature_encoding", config_set_src_signature_encoding, 0},
    {CONFIG_SEC_SOURCE, "signature_prefix", config_set_src_signature_prefix, 0},
    {CONFIG_SEC_SOURCE, "deliver_to", config_set_src_deliver_to, 0},
    {CONFIG_SEC_SOURCE, "deliver_secret", config_set_src_deliver_secret, 0},
    {CONFIG_SEC_SOURCE, "max_attempts", config_set_src_max_attempts, 0},
    {CONFIG_SEC_SOURCE, "retry_base", config_set_src_retry_base, 0},
    {CONFIG_SEC_SOURCE, "retry_cap", config_set_src_retry_cap, 0},
    {CONFIG_SEC_SOURCE, "retention", config_set_src_retention, 0},
    {CONFIG_SEC_SOURCE, "timeout", config_set_src_timeout, 0},
    {CONFIG_SEC_SOURCE, "concurrency", config_set_src_concurrency, 0},
};

#define CONFIG_NKEYS (sizeof config_keys / sizeof config_keys[0])
_Static_assert(CONFIG_NKEYS <= CONFIG_MAX_KEYS, "seen masks are 64 bits");

/* The bit of a key, for the checks made after the file is read. */
static uint64_t config_key_bit(int kind, const char *name)
{
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        if (config_keys[i].kind == kind && strcmp(config_keys[i].name, name) == 0)
            return (uint64_t)1 << i;
    }
    return 0;
}

/* The line where a section of the given kind (its state st) set the key
 * name, or 0 when it did not. For a key that may repeat, the last line. */
static int config_key_line(const config_sec_state *st, int kind, const char *name)
{
    for (size_t k = 0; k < CONFIG_NKEYS; k++) {
        if (config_keys[k].kind == kind && strcmp(config_keys[k].name, name) == 0)
            return (st->seen & ((uint64_t)1 << k)) != 0 ? st->line[k] : 0;
    }
    return 0;
}

/* The line where source i set the key name, or 0 when it did not. */
static int config_src_line(const config_ctx *c, size_t i, const char *name)
{
    return config_key_line(&c->src[i], CONFIG_SEC_SOURCE, name);
}

/* The line where upstream i set the key name, or 0 when it did not. */
static int config_up_line(const config_ctx *c, size_t i, const char *name)
{
    return config_key_line(&c->up[i], CONFIG_SEC_UPSTREAM, name);
}

/* ---- sections ------------------------------------------------------------------------ */

/* Starts the upstream called name (from [upstream.NAME]) with its defaults;
 * the ones that depend on [server] are filled in by config_finish. */
static int config_open_upstream(config_ctx *c, const char *name)
{
    once_config *cfg = c->cfg;
    char q[CONFIG_QUOTE_MAX];
    if (once_scope_validate(name) != ONCE_OK)
        return config_fail(c,
                           "[upstream.%s]: an upstream name is 1-64 characters of A-Z a-z 0-9 . _ -",
                           config_quote(name, q, sizeof q));
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        if (strcmp(cfg->upstreams[i].name, name) == 0)
            return config_fail(c, "duplicate section [upstream.%s] (first at line %d)", name,
                               cfg->upstreams[i].line);
    }
    if (cfg->nupstreams == c->upcap) {
        size_t want = c->upcap == 0 ? 4 : c->upcap * 2;
        if (want > SIZE_MAX / sizeof *c->up || want > SIZE_MAX / sizeof *cfg->upstreams)
            return config_fail_oom(c);
        upstream_cfg *grown = realloc(cfg->upstreams, want * sizeof *grown);
        if (grown == NULL)
            return config_fail_oom(c);
        cfg->upstreams = grown;
        config_sec_state *st = realloc(c->up, want * sizeof *st);
        if (st == NULL)
            return config_fail_oom(c);
        c->up = st;
        c->upcap = want;
    }
    upstream_cfg *u = &cfg->upstreams[cfg->nupstreams];
    memset(u, 0, sizeof *u);
    u->name = strdup(name);
    if (u->name == NULL)
        return config_fail_oom(c);
    u->timeout_ms = CONFIG_DEFAULT_TIMEOUT_MS;
    u->lease_ms = -1;     /* set by config_finish unless given */
    u->retention_ms = -1; /* likewise */
    u->key_required = 1;
    u->key_safe_methods = 0;
    u->on_mismatch = MISMATCH_REPLAY;
    u->max_response = CONFIG_DEFAULT_MAX_RESPONSE;
    u->key_from_template = 0;
    u->lookup_backoff_ms = CONFIG_LOOKUP_BACKOFF_MS;
    u->lookup_attempts = CONFIG_LOOKUP_ATTEMPTS;
    u->line = c->lineno;
    memset(&c->up[cfg->nupstreams], 0, sizeof c->up[cfg->nupstreams]);
    c->cur = cfg->nupstreams++;
    c->kind = CONFIG_SEC_UPSTREAM;
    return 0;
}

/* Starts the source called name (from [source.NAME]) with its defaults;
 * event_id's, which depends on verify, is filled in by config_finish. */
static int config_open_source(config_ctx *c, const char *name)
{
    once_config *cfg = c->cfg;
    char q[CONFIG_QUOTE_MAX];
    if (once_scope_validate(name) != ONCE_OK)
        return config_fail(c, "[source.%s]: a source name is 1-64 characters of A-Z a-z 0-9 . _ -",
                           config_quote(name, q, sizeof q));
    for (size_t i = 0; i < cfg->nsources; i++) {
        if (strcmp(cfg->sources[i].name, name) == 0)
            return config_fail(c, "duplicate section [source.%s] (first at line %d)", name,
                               cfg->sources[i].line);
    }
    if (cfg->nsources == c->srccap) {
        size_t want = c->srccap == 0 ? 4 : c->srccap * 2;
        if (want > SIZE_MAX / sizeof *c->src || want > SIZE_MAX / sizeof *cfg->sources)
            return config_fail_oom(c);
        source_cfg *grown = realloc(cfg->sources, want * sizeof *grown);
        if (grown == NULL)
            return config_fail_oom(c);
        cfg->sources = grown;
        config_sec_state *st = realloc(c->src, want * sizeof *st);
        if (st == NULL)
            return config_fail_oom(c);
        c->src = st;
        c->srccap = want;
    }
    source_cfg *s = &cfg->sources[cfg->nsources];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    if (s->name == NULL)
        return config_fail_oom(c);
    s->verify = -1; /* required: config_finish says so if it stays unset */
    s->tolerance_ms = CONFIG_SRC_TOLERANCE_MS;
    s->max_attempts = CONFIG_SRC_MAX_ATTEMPTS;
    s->retry_base_ms = CONFIG_SRC_RETRY_BASE_MS;
    s->retry_cap_ms = CONFIG_SRC_RETRY_CAP_MS;
    s->retention_ms = CONFIG_SRC_RETENTION_MS;
    s->timeout_ms = CONFIG_SRC_TIMEOUT_MS;
    s->concurrency = CONFIG_SRC_CONCURRENCY;
    s->line = c->lineno;
    memset(&c->src[cfg->nsources], 0, sizeof c->src[cfg->nsources]);
    c->cur = cfg->nsources++;
    c->kind = CONFIG_SEC_SOURCE;
    return 0;
}

/* Opens the section named by a "[name]" line. */
static int config_open_section(config_ctx *c, const char *name)
{
    char q[CONFIG_QUOTE_MAX];
    if (strcmp(name, "server") == 0) {
        if (c->server_line > 0)
            return config_fail(c, "duplicate section [server] (first at line %d)", c->server_line);
        c->server_line = c->lineno;
        c->kind = CONFIG_SEC_SERVER;
        return 0;
    }
    if (strncmp(name, "upstream.", 9) == 0)
        return config_open_upstream(c, name + 9);
    if (strncmp(name, "source.", 7) == 0)
        return config_open_source(c, name + 7);
    c->kind = CONFIG_SEC_NONE;
    return config_fail(c,
                       "unknown section [%s] (expected [server], [upstream.NAME] or [source.NAME])",
                       config_quote(name, q, sizeof q));
}

/* Finds where inih thinks a section name ends: the first ']', unless an
 * inline comment (';' after whitespace) comes first. Returns the position
 * of the ']' or NULL. */
static char *config_section_end(char *s)
{
    int was_space = 0;
    for (; *s != '\0'; s++) {
        if (*s == ']')
            return s;
        if (was_space && *s == ';')
            return NULL;
        was_space = *s == ' ' || *s == '\t' || *s == '\v' || *s == '\f' || *s == '\r';
    }
    return NULL;
}

/* ---- the reader and the handler given to inih ----------------------------------------- */

/* inih's fgets-style reader (see the top of the file for why it exists).
 * Reads one whole line, refuses NUL bytes and lines that do not fit inih's
 * buffer (num bytes), strips the BOM and leading whitespace, opens sections,
 * and hands inih the rest. Returns NULL at the end or after an error, which
 * stops inih. */
static char *config_read_line(char *str, int num, void *stream)
{
    config_ctx *c = stream;
    if (c->failed)
        return NULL;
    errno = 0;
    ssize_t n = getline(&c->linebuf, &c->linecap, c->fp);
    if (n < 0) {
        if (ferror(c->fp))
            config_fail_at(c, c->lineno + 1, "cannot read: %s",
                           errno != 0 ? strerror(errno) : "I/O error");
        else if (errno == ENOMEM)
            config_fail_oom(c);
        return NULL;
    }
    if (c->lineno == INT32_MAX) {
        config_fail(c, "too many lines");
        return NULL;
    }
    c->lineno++;
    size_t len = (size_t)n;
    char *s = c->linebuf;
    if (memchr(s, '\0', len) != NULL) {
        config_fail(c, "NUL byte in the line");
        return NULL;
    }
    if (c->lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;
        len -= 3;
    }
    if (len > 0 && s[len - 1] == '\n')
        len--;
    if (len > 0 && s[len - 1] == '\r')
        len--;
    s[len] = '\0';
    while (len > 0 && (*s == ' ' || *s == '\t' || *s == '\v' || *s == '\f' || *s == '\r')) {
        s++;
        len--;
    }
    /* The line plus "\n\0" must fit, or inih would cut it. */
    if (num < 3 || len > (size_t)num - 2) {
        config_fail(c, "line too long (%zu characters; at most %d): put long values in a *_file key",
                    len, num < 3 ? 0 : num - 2);
        return NULL;
    }
    if (s[0] == '[') {
        char *end = config_section_end(s + 1);
        if (end != NULL) {
            const char *after = end + 1;
            while (*after == ' ' || *after == '\t')
                after++;
            if (*after != '\0' && *after != ';') {
                config_fail(c, "unexpected text after the section name");
                return NULL;
            }
            *end = '\0';
            int rc = config_open_section(c, s + 1);
            *end = ']';
            if (rc != 0)
                return NULL;
        }
        /* else: inih reports the missing ']' on this line. */
    }
    memcpy(str, s, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    return str;
}

/* inih's handler: one "key = value" of the current section (inih's own
 * section argument is not used: it is cut at 49 bytes). Returns 1 to go on,
 * 0 after recording an error. */
static int config_on_pair(void *user, const char *section, const char *name, const char *value)
{
    config_ctx *c = user;
    char q[CONFIG_QUOTE_MAX];
    (void)section;
    if (c->failed)
        return 0;
    if (value == NULL) {
        config_fail(c, "expected key = value");
        return 0;
    }
    if (name[0] == '\0') {
        config_fail(c, "missing key name before '='");
        return 0;
    }
    if (c->kind == CONFIG_SEC_NONE) {
        config_fail(c,
                    "'%s' is outside a section (start with [server], [upstream.NAME] or "
                    "[source.NAME])",
                    config_quote(name, q, sizeof q));
        return 0;
    }
    size_t i;
    for (i = 0; i < CONFIG_NKEYS; i++) {
        if (config_keys[i].kind == c->kind && strcmp(config_keys[i].name, name) == 0)
            break;
    }
    if (i == CONFIG_NKEYS) {
        if (c->kind == CONFIG_SEC_SERVER)
            config_fail(c, "unknown key '%s' in [server]", config_quote(name, q, sizeof q));
        else if (c->kind == CONFIG_SEC_UPSTREAM)
            config_fail(c, "unknown key '%s' in [upstream.%s]", config_quote(name, q, sizeof q),
                        c->cfg->upstreams[c->cur].name);
        else
            config_fail(c, "unknown key '%s' in [source.%s]", config_quote(name, q, sizeof q),
                        c->cfg->sources[c->cur].name);
        return 0;
    }
    uint64_t bit = (uint64_t)1 << i;
    uint64_t *seen = c->kind == CONFIG_SEC_SERVER     ? &c->server_seen
                     : c->kind == CONFIG_SEC_UPSTREAM ? &c->up[c->cur].seen
                                                      : &c->src[c->cur].seen;
    if ((*seen & bit) != 0 && !config_keys[i].repeat) {
        config_fail(c, "duplicate key '%s'", name);
        return 0;
    }
    *seen |= bit;
    if (c->kind == CONFIG_SEC_SOURCE)
        c->src[c->cur].line[i] = c->lineno;
    else if (c->kind == CONFIG_SEC_UPSTREAM)
        c->up[c->cur].line[i] = c->lineno;
    c->key = config_keys[i].name;
    c->raw = value;
    char *v = config_expand(c, value);
    if (v == NULL)
        return 0;
    int rc = config_keys[i].set(c, v);
    free(v);
    c->key = NULL;
    c->raw = NULL;
    return rc == 0 && !c->failed;
}

/* ---- after the file -------------------------------------------------------------------- */

typedef struct config_addr {
    int family;             /* AF_INET, AF_INET6, or 0 for localhost */
    unsigned char addr[16];
    unsigned port;
} config_addr;

static void config_addr_of(const char *listen, config_addr *a)
{
    char host[CONFIG_HOST_MAX];
    memset(a, 0, sizeof *a);
    if (config_parse_listen(listen, host, sizeof host, &a->port) != 0)
        return;
    if (inet_pton(AF_INET, host, a->addr) == 1)
        a->family = AF_INET;
    else if (inet_pton(AF_INET6, host, a->addr) == 1)
        a->family = AF_INET6;
}

static int config_addr_is_any(const config_addr *a)
{
    static const unsigned char zero[16];
    return a->family != 0 && memcmp(a->addr, zero, a->family == AF_INET ? 4 : 16) == 0;
}

/* Whether two listen addresses would fight over a socket: the same port,
 * and the same host, or either a wildcard, or either "localhost" (which may
 * be any loopback address). */
static int config_listen_clash(const char *x, const char *y)
{
    config_addr a;
    config_addr b;
    config_addr_of(x, &a);
    config_addr_of(y, &b);
    if (a.port != b.port)
        return 0;
    if (a.family == 0 || b.family == 0 || config_addr_is_any(&a) || config_addr_is_any(&b))
        return 1;
    return a.family == b.family && memcmp(a.addr, b.addr, a.family == AF_INET ? 4 : 16) == 0;
}

int config_listen_is_loopback(const char *listen)
{
    char host[CONFIG_HOST_MAX];
    unsigned port;
    unsigned char a[16];
    if (config_parse_listen(listen, host, sizeof host, &port) != 0)
        return 0;
    if (strcmp(host, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, host, a) == 1)
        return a[0] == 127;
    static const unsigned char v6_loopback[16] = {[15] = 1};
    return inet_pton(AF_INET6, host, a) == 1 && memcmp(a, v6_loopback, 16) == 0;
}

int config_check_exposure(const once_config *cfg, char *err, size_t errlen)
{
    if (cfg->ntokens > 0 || cfg->insecure_no_auth)
        return 0;
    const char *bad = NULL;
    if (!config_listen_is_loopback(cfg->listen))
        bad = cfg->listen;
    for (size_t i = 0; !bad && i < cfg->nupstreams; i++)
        if (cfg->upstreams[i].listen && !config_listen_is_loopback(cfg->upstreams[i].listen))
            bad = cfg->upstreams[i].listen;
    if (!bad)
        return 0;
    snprintf(err, errlen,
             "refusing to listen on %s without tokens: it is not a loopback address, and with no tokens_file "
             "anyone who reaches it may use the upstreams' credentials (set tokens_file, listen on 127.0.0.1, "
             "or set insecure_no_auth = yes)",
             bad);
    return -1;
}

/* Applies ONCE_LISTEN and ONCE_STORE (set and not empty) over the file. */
static int config_apply_env(config_ctx *c)
{
    once_config *cfg = c->cfg;
    char q[CONFIG_QUOTE_MAX];
    char host[CONFIG_HOST_MAX];
    unsigned port;
    const char *listen = getenv("ONCE_LISTEN");
    if (listen != NULL && listen[0] != '\0') {
        if (config_parse_listen(listen, host, sizeof host, &port) != 0)
            return config_fail_at(c, 0, "ONCE_LISTEN: '%s' is not HOST:PORT",
                                  config_quote(listen, q, sizeof q));
        if (config_set_str(&cfg->listen, listen) != 0)
            return config_fail_oom(c);
    }
    const char *store = getenv("ONCE_STORE");
    if (store != NULL && store[0] != '\0') {
        const char *why = config_store_problem(store);
        if (why != NULL)
            return config_fail_at(c, 0, "ONCE_STORE: %s", why);
        if (config_set_str(&cfg->store, store) != 0)
            return config_fail_oom(c);
    }
    return 0;
}

/* Fails at the line of source i's key name, if it set it, saying it has no
 * meaning with the source's other settings (why). Used for keys that would
 * otherwise be silently ignored: someone who wrote them believes they work. */
static int config_src_refuse(config_ctx *c, size_t i, const char *name, const char *why)
{
    int line = config_src_line(c, i, name);
    if (line == 0)
        return 0;
    return config_fail_at(c, line, "%s: %s", name, why);
}

/* A source's checks that depend on verify or on deliver_to, and its
 * event_id default. Each error names the line of the key it is about, or
 * the section's when the problem is a key that is missing. */
static int config_finish_source(config_ctx *c, size_t i)
{
    source_cfg *s = &c->cfg->sources[i];
    char why[CONFIG_MSG_MAX / 2];
    if (s->verify < 0)
        return config_fail_at(c, s->line,
                              "[source.%s] has no verify (stripe, github, standard, slack, "
                              "hmac-sha256 or none)",
                              s->name);
    size_t sch = config_scheme_index(s->verify);
    const char *scheme = config_schemes[sch].name;
    int secret_line = config_src_line(c, i, "secret");
    if (secret_line == 0)
        secret_line = config_src_line(c, i, "secret_file");
    if (s->verify == SIG_NONE) {
        if (!s->insecure)
            return config_fail_at(c, config_src_line(c, i, "verify"),
                                  "verify: none accepts whatever anyone sends to this source; "
                                  "it needs insecure = yes");
        if (secret_line > 0)
            return config_fail_at(c, secret_line,
                                  "[source.%s]: verify = none checks no signature, so a secret "
                                  "would be unused",
                                  s->name);
    } else {
        if (s->insecure)
            return config_fail_at(c, config_src_line(c, i, "insecure"),
                                  "insecure: yes only goes with verify = none (this source "
                                  "verifies %s signatures)",
                                  scheme);
        if (s->nsecrets == 0)
            return config_fail_at(c, s->line,
                                  "[source.%s]: verify = %s needs secret or secret_file", s->name,
                                  scheme);
    }
    if (s->verify == SIG_STANDARD) {
        for (size_t k = 0; k < s->nsecrets; k++) {
            if (!config_is_whsec(s->secrets[k], strlen(s->secrets[k])))
                return config_fail_at(c, secret_line,
                                      "[source.%s]: secret %zu is not \"whsec_\" followed by "
                                      "base64 (verify = standard)",
                                      s->name, k + 1);
        }
    }
    snprintf(why, sizeof why, "only for verify = hmac-sha256 (this source has verify = %s)",
             scheme);
    if (s->verify == SIG_HMAC_SHA256) {
        if (s->signature_header == NULL)
            return config_fail_at(c, s->line,
                                  "[source.%s]: verify = hmac-sha256 needs signature_header",
                                  s->name);
    } else if (config_src_refuse(c, i, "signature_header", why) != 0 ||
               config_src_refuse(c, i, "signature_encoding", why) != 0 ||
               config_src_refuse(c, i, "signature_prefix", why) != 0) {
        return -1;
    }
    if (!config_schemes[sch].timestamp) {
        snprintf(why, sizeof why, "verify = %s signs no timestamp", scheme);
        if (config_src_refuse(c, i, "tolerance", why) != 0)
            return -1;
    }
    /* The event id of a Standard Webhooks request is the id its signature
     * covers; one taken from elsewhere could be chosen by a replayer. */
    if (s->verify == SIG_STANDARD &&
        config_src_refuse(c, i, "event_id",
                          "verify = standard takes the event id its signature covers (webhook-id, or svix-id)") != 0)
        return -1;
    if (s->event_id == NULL) {
        const char *def = config_schemes[sch].event_id;
        if (def == NULL)
            return config_fail_at(c, s->line,
                                  "[source.%s]: event_id is required with verify = %s "
                                  "(json:/POINTER or header:NAME)",
                                  s->name, scheme);
        if (config_set_str(&s->event_id, def) != 0)
            return config_fail_oom(c);
    }
    if (s->deliver_to == NULL) {
        static const char push_only[] = "only applies with deliver_to (push delivery)";
        if (config_src_refuse(c, i, "deliver_secret", push_only) != 0 ||
            config_src_refuse(c, i, "timeout", push_only) != 0 ||
            config_src_refuse(c, i, "concurrency", push_only) != 0)
            return -1;
    }
    if (s->retry_cap_ms < s->retry_base_ms) {
        int line = config_src_line(c, i, "retry_cap");
        return config_fail_at(c, line > 0 ? line : config_src_line(c, i, "retry_base"),
                              "[source.%s]: retry_cap is shorter than retry_base", s->name);
    }
    return 0;
}

/* An upstream's intent-key and reconciliation checks, which involve
 * several keys, and lookup_absent's default. Each error names the line of
 * the key it is about. */
static int config_finish_upstream_keys(config_ctx *c, size_t i)
{
    static const char *const lookup_only[] = {"lookup_found", "lookup_absent", "lookup_backoff",
                                              "lookup_attempts"};
    upstream_cfg *u = &c->cfg->upstreams[i];
    if (u->key_from_template && u->key == NULL)
        return config_fail_at(c, config_up_line(c, i, "key_source"),
                              "key_source: template needs key = TEMPLATE in [upstream.%s]",
                              u->name);
    if (u->lookup_method == NULL) {
        /* The first of them in the file, since that is what is read first. */
        const char *first = NULL;
        int first_line = 0;
        for (size_t k = 0; k < sizeof lookup_only / sizeof lookup_only[0]; k++) {
            int line = config_up_line(c, i, lookup_only[k]);
            if (line > 0 && (first_line == 0 || line < first_line)) {
                first = lookup_only[k];
                first_line = line;
            }
        }
        if (first != NULL)
            return config_fail_at(c, first_line,
                                  "%s: does nothing without lookup = METHOD PATH in "
                                  "[upstream.%s]",
                                  first, u->name);
        return 0;
    }
    if (u->lookup_found == NULL)
        return config_fail_at(c, config_up_line(c, i, "lookup"),
                              "lookup: needs lookup_found = json:/POINTER (where the answer "
                              "holds the provider's id when the action happened)");
    if (u->nlookup_absent_status == 0 && u->nlookup_absent_empty == 0) {
        u->lookup_absent_status = malloc(sizeof *u->lookup_absent_status);
        if (u->lookup_absent_status == NULL)
            return config_fail_oom(c);
        u->lookup_absent_status[0] = CONFIG_LOOKUP_ABSENT_STATUS;
        u->nlookup_absent_status = 1;
    }
    return 0;
}

/* Fills the defaults that depend on other keys and checks what involves
 * more than one key, once the whole file and the environment are in. */
/* A certificate without its key (or the reverse) is half a setting; TLS
 * settings for a plain-HTTP upstream, or for a listener that does not
 * exist, would be silently ignored. */
static int config_finish_upstream_tls(config_ctx *c, size_t i)
{
    const upstream_cfg *u = &c->cfg->upstreams[i];
    static const char *const pairs[][2] = {{"tls_cert", "tls_key"}, {"listen_tls_cert", "listen_tls_key"}};
    for (size_t p = 0; p < 2; p++) {
        int a = config_up_line(c, i, pairs[p][0]), b = config_up_line(c, i, pairs[p][1]);
        if ((a == 0) != (b == 0))
            return config_fail_at(c, a ? a : b, "[upstream.%s]: %s and %s go together", u->name, pairs[p][0],
                                  pairs[p][1]);
    }
    if (u->listen_tls_cert && !u->listen)
        return config_fail_at(c, config_up_line(c, i, "listen_tls_cert"),
                              "[upstream.%s]: listen_tls_cert needs listen", u->name);
    if ((u->ca_file || u->tls_cert) && strncasecmp(u->url, "https://", 8) != 0)
        return config_fail_at(c, config_up_line(c, i, u->ca_file ? "ca_file" : "tls_cert"),
                              "[upstream.%s]: %s applies only to an https:// url", u->name,
                              u->ca_file ? "ca_file" : "tls_cert");
    return 0;
}

static int config_finish(config_ctx *c)
{
    once_config *cfg = c->cfg;
    if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL))
        return config_fail_at(c, c->server_line, "[server]: tls_cert and tls_key go together");
    if (cfg->listen == NULL && config_set_str(&cfg->listen, CONFIG_DEFAULT_LISTEN) != 0)
        return config_fail_oom(c);
    if (cfg->store == NULL && config_set_str(&cfg->store, CONFIG_DEFAULT_STORE) != 0)
        return config_fail_oom(c);
    if (config_apply_env(c) != 0)
        return -1;
    static const int def_release[] = {429, 503};
    static const int def_unknown[] = {500, 502, 504};
    uint64_t bit_release = config_key_bit(CONFIG_SEC_UPSTREAM, "release_on");
    uint64_t bit_unknown = config_key_bit(CONFIG_SEC_UPSTREAM, "unknown_on");
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        upstream_cfg *u = &cfg->upstreams[i];
        if (u->url == NULL)
            return config_fail_at(c, u->line, "[upstream.%s] has no url", u->name);
        if (u->retention_ms < 0)
            u->retention_ms = cfg->retention_ms;
        /* A lease is how long a reservation lives without news from its
         * owner, who renews it every lease/3 while the call runs: it does
         * not grow with the timeout (DESIGN.md §7). */
        if (u->lease_ms < 0)
            u->lease_ms = cfg->lease_ms;
        if (config_finish_upstream_keys(c, i) != 0)
            return -1;
        /* The ledger stores at most ONCE_BODY_MAX of an answer. */
        if (u->max_response > ONCE_BODY_MAX)
            return config_fail_at(c, config_up_line(c, i, "max_response"),
                                  /* a line: only a set key can exceed the cap */
                                  "[upstream.%s]: max_response may be at most 64MiB", u->name);
        if ((c->up[i].seen & bit_release) == 0) {
            u->release_on = malloc(sizeof def_release);
            if (u->release_on == NULL)
                return config_fail_oom(c);
            memcpy(u->release_on, def_release, sizeof def_release);
            u->nrelease_on = sizeof def_release / sizeof def_release[0];
        }
        if ((c->up[i].seen & bit_unknown) == 0) {
            u->unknown_on = malloc(sizeof def_unknown);
            if (u->unknown_on == NULL)
                return config_fail_oom(c);
            memcpy(u->unknown_on, def_unknown, sizeof def_unknown);
            u->nunknown_on = sizeof def_unknown / sizeof def_unknown[0];
        }
        for (size_t a = 0; a < u->nrelease_on; a++) {
            for (size_t b = 0; b < u->nunknown_on; b++) {
                if (u->release_on[a] == u->unknown_on[b])
                    return config_fail_at(c, u->line,
                                          "[upstream.%s]: status %d is in both release_on and "
                                          "unknown_on",
                                          u->name, u->release_on[a]);
            }
        }
        if (config_finish_upstream_tls(c, i) != 0)
            return -1;
        if (u->listen == NULL)
            continue;
        if (config_listen_clash(u->listen, cfg->listen))
            return config_fail_at(c, u->line,
                                  "[upstream.%s]: listen %s clashes with the server's listen %s",
                                  u->name, u->listen, cfg->listen);
        for (size_t j = 0; j < i; j++) {
            const upstream_cfg *o = &cfg->upstreams[j];
            if (o->listen != NULL && config_listen_clash(u->listen, o->listen))
                return config_fail_at(c, u->line,
                                      "[upstream.%s]: listen %s clashes with [upstream.%s] "
                                      "(line %d)",
                                      u->name, u->listen, o->name, o->line);
        }
    }
    for (size_t i = 0; i < cfg->nsources; i++) {
        if (config_finish_source(c, i) != 0)
            return -1;
    }
    return 0;
}

/* ---- the interface ---------------------------------------------------------------------- */

/* Loads from an open stream; path is only used for messages and for
 * resolving relative *_file paths. Split from config_load so the fuzzer can
 * feed memory. */
static int config_load_stream(FILE *fp, const char *path, once_config *cfg, char *err,
                              size_t errlen)
{
    config_ctx c;
    memset(&c, 0, sizeof c);
    memset(cfg, 0, sizeof *cfg);
    c.cfg = cfg;
    c.fp = fp;
    c.err = err;
    c.errlen = errlen;
    config_quote(path, c.qpath, sizeof c.qpath);
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    const char *slash = strrchr(path, '/');
    if (slash != NULL) {
        c.dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
        if (c.dir == NULL)
            config_fail_oom(&c);
    }
    cfg->path = strdup(path);
    if (cfg->path == NULL)
        config_fail_oom(&c);
    cfg->max_body = CONFIG_DEFAULT_MAX_BODY;
    cfg->lease_ms = CONFIG_DEFAULT_LEASE_MS;
    cfg->retention_ms = CONFIG_DEFAULT_RETENTION_MS;
    cfg->grace_ms = CONFIG_DEFAULT_GRACE_MS;
    cfg->threads = CONFIG_DEFAULT_THREADS;
    cfg->max_connections = CONFIG_DEFAULT_MAX_CONNECTIONS;
    cfg->loop_interval_ms = CONFIG_DEFAULT_LOOP_MS;
    cfg->max_conn_per_client = CONFIG_DEFAULT_PER_CLIENT;
    cfg->request_timeout_ms = CONFIG_DEFAULT_REQUEST_TIMEOUT_MS;
    cfg->wal_max = CONFIG_DEFAULT_WAL_MAX;

    if (!c.failed) {
        int rc = ini_parse_stream(config_read_line, &c, config_on_pair, &c);
        /* rc > 0 is inih's first bad line. Our own errors stop the reader at
         * their line, so an earlier inih error is the first error. */
        if (rc == -2)
            config_fail_oom(&c);
        else if (rc < 0)
            config_fail_at(&c, 0, "cannot parse (inih error %d)", rc);
        else if (rc > 0 && (!c.failed || (rc < c.errline && c.code != -ENOMEM))) {
            c.failed = 0;
            config_fail_at(&c, rc, "syntax error: expected 'key = value', '[section]' or a comment");
        }
    }
    if (!c.failed)
        config_finish(&c);

    free(c.linebuf);
    free(c.up);
    free(c.src);
    free(c.dir);
    if (c.failed) {
        config_free(cfg);
        return c.code != 0 ? c.code : -EINVAL;
    }
    return 0;
}

int config_load(const char *path, once_config *cfg, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (cfg == NULL)
        return -EINVAL;
    memset(cfg, 0, sizeof *cfg);
    if (path == NULL || path[0] == '\0') {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "no configuration file given");
        return -EINVAL;
    }
    FILE *fp = fopen(path, "re");
    if (fp == NULL) {
        int e = errno;
        char q[CONFIG_QUOTE_MAX * 2];
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: cannot open: %s", config_quote(path, q, sizeof q),
                     strerror(e));
        return e != 0 ? -e : -EIO;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        char q[CONFIG_QUOTE_MAX * 2];
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: is a directory", config_quote(path, q, sizeof q));
        fclose(fp);
        return -EISDIR;
    }
    int rc = config_load_stream(fp, path, cfg, err, errlen);
    fclose(fp);
    return rc;
}

void config_free(once_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->path);
    free(cfg->listen);
    free(cfg->store);
    for (size_t i = 0; i < cfg->ntokens; i++) {
        free(cfg->tokens[i].secret);
        free(cfg->tokens[i].name);
    }
    free(cfg->tokens);
    for (size_t i = 0; i < cfg->nsecret_files; i++)
        free(cfg->secret_files[i]);
    free(cfg->secret_files);
    for (size_t i = 0; i < cfg->nredact_headers; i++)
        free(cfg->redact_headers[i]);
    free(cfg->redact_headers);
    free(cfg->metrics_token);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        upstream_cfg *u = &cfg->upstreams[i];
        free(u->name);
        free(u->url);
        for (size_t j = 0; j < u->nheaders; j++)
            free(u->headers[j]);
        free(u->headers);
        free(u->release_on);
        free(u->unknown_on);
        free(u->forward_key_as);
        free(u->listen);
        free(u->listen_tls_cert);
        free(u->listen_tls_key);
        free(u->ca_file);
        free(u->tls_cert);
        free(u->tls_key);
        if (u->key != NULL)
            key_template_free(u->key);
        free(u->lookup_method);
        free(u->lookup_path);
        free(u->lookup_found);
        free(u->lookup_absent_status);
        for (size_t j = 0; j < u->nlookup_absent_empty; j++)
            free(u->lookup_absent_empty[j]);
        free(u->lookup_absent_empty);
    }
    free(cfg->upstreams);
    for (size_t i = 0; i < cfg->nsources; i++) {
        source_cfg *s = &cfg->sources[i];
        free(s->name);
        for (size_t j = 0; j < s->nsecrets; j++)
            free(s->secrets[j]);
        free(s->secrets);
        free(s->event_id);
        free(s->signature_header);
        free(s->signature_prefix);
        free(s->deliver_to);
        free(s->deliver_secret);
    }
    free(cfg->sources);
    memset(cfg, 0, sizeof *cfg);
}

const upstream_cfg *config_upstream(const once_config *cfg, const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->nupstreams; i++) {
        if (strcmp(cfg->upstreams[i].name, name) == 0)
            return &cfg->upstreams[i];
    }
    return NULL;
}

const source_cfg *config_source(const once_config *cfg, const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->nsources; i++) {
        if (strcmp(cfg->sources[i].name, name) == 0)
            return &cfg->sources[i];
    }
    return NULL;
}
