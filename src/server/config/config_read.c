/*
 * config_read.c — reads the gateway's INI file with libinih, strictly: the
 * first thing that is wrong stops the load with "file:line: what". Each
 * key's value goes through its table row (config_keys.h); this file knows
 * no key by name.
 *
 * inih parses, but its lines come from our own reader, for the three things
 * Debian's inih cannot do:
 *   - lines longer than its 200-byte buffer are cut: the first part parses
 *     as a (truncated!) value and the rest is reported on the *next* line.
 *     The reader measures each whole line and refuses a long one, naming
 *     its real line;
 *   - the handler gets no line number. The reader counts lines; inih calls
 *     the handler while it processes the line just read, so the count is
 *     the handler's line;
 *   - section names are cut at 49 bytes and empty sections never reach the
 *     handler. The reader recognises "[...]" lines (with inih's rule for
 *     where the name ends) and opens sections itself.
 * It also strips leading whitespace, which turns off inih's continuation
 * lines (an indented line would be glued to the previous value), and
 * refuses NUL bytes.
 *
 * Comments: a line whose first non-blank character is ';' or '#', and an
 * inline comment that starts with ';' after whitespace ("lease = 30s ; why").
 * "a;b" and "a #b" are values.
 *
 * Values: ${NAME} expands the environment variable NAME (unset is an error;
 * set but empty expands to nothing); a '$' not followed by '{' is literal.
 * *_file keys read files, relative to the config file's directory, taken
 * literally (no ${} expansion).
 *
 * Precedence: defaults (the tables' own, applied when a section opens) <
 * the file < the environment (ONCE_LISTEN, ONCE_STORE: config_server.c) <
 * command-line flags (the caller's). Defaults that depend on other keys,
 * and the checks of several keys, wait for the whole file: [server] may
 * come after the upstreams, and a source's verify after its other keys.
 */
#include "server/config/config_keys.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <ini.h>

#include "once/once.h"

#define CONFIG_VAR_MAX 255
/* A secrets file is a few lines; refuse to slurp a log file by mistake. */
#define CONFIG_FILE_MAX ((off_t)1 << 20)

/* The named sections, by prefix. [mcp.NAME] instances live beside
 * [upstream.NAME] ones (one namespace, one array): each instance's state
 * says which table it was read with. */
static const config_section *const config_named[] = {&config_upstream_section, &config_mcp_section,
                                                     &config_source_section, &config_agent_section};

const config_section *const *config_named_sections(size_t *n)
{
    *n = sizeof config_named / sizeof config_named[0];
    return config_named;
}

/* ---- messages ------------------------------------------------------------------- */

/* Copies enough of s[0..n) into buf to recognise it, with anything that is
 * not printable ASCII replaced, so an error message stays one clean line. */
const char *config_quote_n(const char *s, size_t n, char *buf, size_t cap)
{
    size_t i = 0;
    if (cap == 0)
        return "";
    for (; s != NULL && i < n && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    buf[i] = '\0';
    return buf;
}

/* The same of a whole string, ending in "..." when it is cut. */
const char *config_quote(const char *s, char *buf, size_t cap)
{
    size_t n = s != NULL ? strlen(s) : 0;
    config_quote_n(s, n, buf, cap);
    if (n >= cap && cap > 3)
        memcpy(buf + cap - 4, "...", 3);
    return cap > 0 ? buf : "";
}

/* Records the first error as "file:line: what" (line 0: "file: what");
 * later ones are dropped, since they are often consequences of the first.
 * Always returns -1 so setters can `return config_fail(...)`. */
int config_fail_at(config_ctx *c, int line, const char *fmt, ...)
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
    if (c->err != NULL && c->errlen > 0 && line > 0)
        snprintf(c->err, c->errlen, "%s:%d: %s", c->qpath, line, msg);
    else if (c->err != NULL && c->errlen > 0)
        snprintf(c->err, c->errlen, "%s: %s", c->qpath, msg);
    return -1;
}

int config_fail_oom(config_ctx *c)
{
    c->code = -ENOMEM;
    return config_fail_at(c, 0, "out of memory");
}

/* "KEY: 'VALUE'" then what: the value as written, not expanded, so a
 * message does not show what a variable held. */
int config_fail_value(config_ctx *c, const char *fmt, ...)
{
    char what[CONFIG_MSG_MAX / 2];
    char q[CONFIG_QUOTE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return config_fail(c, "%s: '%s'%s", c->key, config_quote(c->raw, q, sizeof q), what);
}

/* ---- values ------------------------------------------------------------------------ */

/* The value of ${name[0..n)}, or NULL after recording why there is none. */
static const char *config_getenv(config_ctx *c, const char *name, size_t n)
{
    char nbuf[CONFIG_VAR_MAX + 1];
    char q[CONFIG_QUOTE_MAX];
    if (n == 0)
        return config_fail(c, "%s: empty variable name in '${}'", c->key), NULL;
    static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_";
    /* name[n] is the '}', which stops strspn. */
    if (n > CONFIG_VAR_MAX || (name[0] >= '0' && name[0] <= '9') || strspn(name, ok) < n)
        return config_fail(c, "%s: bad variable name '%s' in ${...} (letters, digits and _)", c->key,
                           config_quote_n(name, n, q, sizeof q)),
               NULL;
    memcpy(nbuf, name, n);
    nbuf[n] = '\0';
    const char *val = getenv(nbuf);
    if (val == NULL)
        config_fail(c, "%s: environment variable %s is not set", c->key, nbuf);
    return val;
}

/* Expands every ${NAME} in v from the environment, so secrets need not be
 * written into the file. A new string, or NULL after recording the error. */
static char *config_expand(config_ctx *c, const char *v)
{
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    if (m == NULL)
        return config_fail_oom(c), NULL;
    const char *p = v;
    for (const char *d; !c->failed && (d = strstr(p, "${")) != NULL;) {
        const char *end = strchr(d + 2, '}');
        const char *val = end != NULL ? config_getenv(c, d + 2, (size_t)(end - d - 2)) : NULL;
        if (end == NULL)
            config_fail(c, "%s: unterminated '${' (write ${NAME})", c->key);
        fwrite(p, 1, (size_t)(d - p), m);
        fputs(val != NULL ? val : "", m);
        p = end != NULL ? end + 1 : d + 2;
    }
    fputs(p, m);
    int bad = ferror(m);
    if (fclose(m) != 0 || bad)
        config_fail_oom(c);
    if (c->failed) {
        free(out);
        return NULL;
    }
    return out;
}

/* A path named by a key: relative paths are relative to the config's
 * directory, so the server does not depend on its working directory. The
 * result is malloc'd; NULL after recording an error. */
static char *config_resolve_path(config_ctx *c, const char *value)
{
    if (value[0] == '\0')
        return config_fail(c, "%s: empty file name", c->key), NULL;
    char *full = NULL;
    if (value[0] == '/' || c->dir == NULL)
        full = strdup(value);
    else if (asprintf(&full, "%s/%s", c->dir, value) < 0)
        full = NULL;
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

/* Opens a *_file: a regular file of at most CONFIG_FILE_MAX bytes. NULL
 * after recording why not. */
static FILE *config_open_file(config_ctx *c, const char *path, const char *q)
{
    struct stat st;
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return config_fail(c, "%s: cannot open '%s': %s", c->key, q, strerror(errno)), NULL;
    if (fstat(fileno(fp), &st) != 0)
        config_fail(c, "%s: cannot stat '%s': %s", c->key, q, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        config_fail(c, "%s: '%s' is not a regular file", c->key, q);
    else if (st.st_size > CONFIG_FILE_MAX)
        config_fail(c, "%s: '%s' is larger than %lld bytes", c->key, q, (long long)CONFIG_FILE_MAX);
    else
        return fp;
    fclose(fp);
    return NULL;
}

/* Secrets can live outside the config, and outside inih's 200-byte lines:
 * each non-blank, non-# line of the file, trimmed, goes to fn. */
int config_read_file(config_ctx *c, const char *path, config_line_fn fn)
{
    char q[CONFIG_QUOTE_MAX * 2];
    config_quote(path, q, sizeof q);
    FILE *fp = config_open_file(c, path, q);
    char *line = NULL;
    size_t linecap = 0;
    int fline = 0, given = 0;
    ssize_t n;
    errno = 0;
    while (fp != NULL && !c->failed && given < INT32_MAX && (n = getline(&line, &linecap, fp)) >= 0) {
        const char *s = line;
        size_t len = (size_t)n;
        fline++;
        if (memchr(line, '\0', len) != NULL) {
            config_fail(c, "%s: '%s' line %d: NUL byte", c->key, q, fline);
            break;
        }
        while (len > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            len--;
        }
        while (len > 0 && strchr("\n\r \t", s[len - 1]) != NULL)
            len--;
        if (len > 0 && s[0] != '#' && fn(c, q, fline, s, len) == 0)
            given++;
    }
    if (fp != NULL && !c->failed && ferror(fp))
        config_fail(c, "%s: cannot read '%s': %s", c->key, q, strerror(errno));
    else if (fp != NULL && !c->failed && given == 0)
        config_fail(c, "%s: '%s' has no entries", c->key, q);
    free(line);
    if (fp != NULL)
        fclose(fp);
    return c->failed ? -1 : 0;
}

int config_split(config_ctx *c, const char *s, size_t n, char sep, config_item_fn fn, void *arg)
{
    const char *end = s + n;
    for (size_t nth = 1;; nth++) {
        const char *at = memchr(s, sep, (size_t)(end - s));
        const char *b = s, *e = at != NULL ? at : end;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (fn(c, arg, b, (size_t)(e - b), nth) != 0)
            return -1;
        if (at == NULL)
            return 0;
        s = at + 1;
    }
}

/* ---- keys and sections ------------------------------------------------------------------ */

/* The array of a named kind's instances in the once_config. */
static char *config_array(const once_config *cfg, enum config_kind kind)
{
    switch (kind) {
    case CONFIG_UPSTREAM: return (char *)cfg->upstreams;
    case CONFIG_SOURCE: return (char *)cfg->sources;
    case CONFIG_AGENT: return (char *)cfg->agents;
    default: return NULL;
    }
}

/* How many instances of a named kind there are. */
static size_t *config_count(once_config *cfg, enum config_kind kind)
{
    switch (kind) {
    case CONFIG_UPSTREAM: return &cfg->nupstreams;
    case CONFIG_SOURCE: return &cfg->nsources;
    case CONFIG_AGENT: return &cfg->nagents;
    default: return NULL;
    }
}

/* Instance i of a section: [server] is the once_config itself. */
static char *config_instance(once_config *cfg, const config_section *s, size_t i)
{
    if (s->kind == CONFIG_SERVER)
        return (char *)cfg;
    if (s->kind == CONFIG_AUTH)
        return (char *)&cfg->auth;
    return config_array(cfg, s->kind) + i * s->size;
}

/* How many keys section s has: its own rows and the shared ones. */
static size_t config_nkeys(const config_section *s)
{
    return s->nkeys + (s->shared != NULL ? s->shared->nkeys : 0);
}

/* Key k of section s (k < config_nkeys(s)): its own rows first, then the
 * shared ones, so that one index names a key in the section's state. */
static const config_key *config_key_at(const config_section *s, size_t k)
{
    return k < s->nkeys ? &s->keys[k] : &s->shared->keys[k - s->nkeys];
}

int config_line(const config_ctx *c, enum config_kind kind, size_t i, const char *name)
{
    const config_section *s = c->st[kind][i].sec;
    for (size_t k = 0; k < config_nkeys(s); k++) {
        if (strcmp(config_key_at(s, k)->name, name) == 0)
            return (c->st[kind][i].seen >> k & 1) != 0 ? c->st[kind][i].line[k] : 0;
    }
    return 0;
}

/* Whether a value holds a blank followed by '#': what a newcomer writes as
 * an end-of-line comment. */
static int config_hash_comment(const char *v)
{
    for (const char *h = strchr(v, '#'); h != NULL; h = strchr(h + 1, '#')) {
        if (h > v && (h[-1] == ' ' || h[-1] == '\t'))
            return 1;
    }
    return 0;
}

/* Sets key k of the current section from its value as written (raw): the
 * ${} expansion, the path resolution and the secret bookkeeping the row's
 * flags ask for, around its setter. 0 or -1. */
static int config_set_key(config_ctx *c, const config_key *k, const char *raw)
{
    c->key = k->name;
    c->raw = raw;
    if ((k->flags & CK_NO_HASH) && config_hash_comment(raw)) {
        config_fail(c, "%s: ' #' is not a comment here (only ';' after a blank starts one) and would become part "
                       "of the value; put the comment on a line of its own",
                    k->name);
        c->key = NULL;
        c->raw = NULL;
        return -1;
    }
    char *v = config_expand(c, raw);
    char *path = v != NULL && (k->flags & CK_PATH) ? config_resolve_path(c, v) : NULL;
    if (!c->failed) {
        void *field = config_instance(c->cfg, c->sec, c->cur) + k->field;
        if (k->set(c, k, field, path != NULL ? path : v) == 0 && (k->flags & CK_SECRET)) {
            if (path != NULL)
                config_note_secret_file(c, path);
            else
                c->cfg->inline_secrets = 1;
        }
    }
    free(path);
    free(v);
    c->key = NULL;
    c->raw = NULL;
    return c->failed ? -1 : 0;
}

/* The table's defaults, written as a file would say them. */
static int config_defaults(config_ctx *c)
{
    for (size_t k = 0; k < config_nkeys(c->sec); k++) {
        const config_key *key = config_key_at(c->sec, k);
        if (key->default_value != NULL && config_set_key(c, key, key->default_value) != 0)
            return -1;
    }
    return 0;
}

/* Makes room for instance n of a named section and its state. */
static int config_grow(config_ctx *c, const config_section *s, size_t n)
{
    size_t want = n == 0 ? 4 : n * 2;
    if (n < c->cap[s->kind])
        return 0;
    if (want > SIZE_MAX / sizeof(config_sec_state) || want > SIZE_MAX / s->size)
        return config_fail_oom(c);
    config_sec_state *st = realloc(c->st[s->kind], want * sizeof *st);
    if (st != NULL)
        c->st[s->kind] = st;
    void *arr = st != NULL ? realloc(config_array(c->cfg, s->kind), want * s->size) : NULL;
    if (arr == NULL)
        return config_fail_oom(c);
    if (s->kind == CONFIG_UPSTREAM)
        c->cfg->upstreams = arr;
    else if (s->kind == CONFIG_SOURCE)
        c->cfg->sources = arr;
    else
        c->cfg->agents = arr;
    c->cap[s->kind] = want;
    return 0;
}

/* Opens [upstream.NAME], [mcp.NAME], [source.NAME] or [agent.NAME]: a
 * valid, new name, then the table's defaults. Their structs start with the
 * name (and have a line). */
static int config_open_named(config_ctx *c, const config_section *s, const char *name)
{
    _Static_assert(offsetof(upstream_cfg, name) == 0 && offsetof(source_cfg, name) == 0 &&
                       offsetof(agent_cfg, name) == 0,
                   "name first");
    char q[CONFIG_QUOTE_MAX];
    size_t *n = config_count(c->cfg, s->kind);
    if (once_scope_validate(name) != ONCE_OK)
        return config_fail(c, "[%s%s]: %s name is 1-64 characters of A-Z a-z 0-9 . _ -", s->prefix,
                           config_quote(name, q, sizeof q), s->noun);
    for (size_t i = 0; i < *n; i++) {
        char *other = config_instance(c->cfg, s, i);
        const config_section *os = c->st[s->kind][i].sec;
        if (strcmp(*(char **)other, name) == 0 && os == s)
            return config_fail(c, "duplicate section [%s%s] (first at line %d)", s->prefix, name,
                               *(int *)(void *)(other + s->line_field));
        if (strcmp(*(char **)other, name) == 0)
            return config_fail(c, "[%s%s]: the name is taken by [%s%s] (line %d): upstreams and MCP servers "
                               "share one namespace", s->prefix, name, os->prefix, name,
                               *(int *)(void *)(other + os->line_field));
    }
    if (config_grow(c, s, *n) != 0)
        return -1;
    char *inst = config_instance(c->cfg, s, *n);
    memset(inst, 0, s->size);
    memset(&c->st[s->kind][*n], 0, sizeof c->st[s->kind][*n]);
    c->st[s->kind][*n].sec = s;
    if ((*(char **)inst = strdup(name)) == NULL)
        return config_fail_oom(c);
    *(int *)(void *)(inst + s->line_field) = c->lineno;
    c->sec = s;
    c->cur = (*n)++;
    c->secname = *(char **)inst;
    return config_defaults(c);
}

/* Opens the section named by a "[name]" line. */
static int config_open_section(config_ctx *c, const char *name)
{
    char q[CONFIG_QUOTE_MAX];
    if (strcmp(name, "server") == 0 && c->server_line > 0)
        return config_fail(c, "duplicate section [server] (first at line %d)", c->server_line);
    if (strcmp(name, "server") == 0) {
        c->server_line = c->lineno;
        c->sec = &config_server_section;
        c->cur = 0;
        c->secname = "";
        return 0;
    }
    if (strcmp(name, "auth") == 0) {
        if (c->cfg->auth.line > 0)
            return config_fail(c, "duplicate section [auth] (first at line %d)", c->cfg->auth.line);
        c->cfg->auth.line = c->lineno;
        c->sec = &config_auth_section;
        c->cur = 0;
        c->secname = "";
        return config_defaults(c);
    }
    for (size_t k = 0; k < sizeof config_named / sizeof config_named[0]; k++) {
        const char *prefix = config_named[k]->prefix;
        if (strncmp(name, prefix, strlen(prefix)) == 0)
            return config_open_named(c, config_named[k], name + strlen(prefix));
    }
    c->sec = NULL;
    return config_fail(c,
                       "unknown section [%s] (expected [server], [auth], [upstream.NAME], [mcp.NAME], [source.NAME] or "
                       "[agent.NAME])",
                       config_quote(name, q, sizeof q));
}

/* ---- the reader and the handler given to inih --------------------------------------------- */

/* Where inih thinks a section name ends: the first ']', unless an inline
 * comment (';' after whitespace) comes first. The ']' or NULL. */
static char *config_section_end(char *s)
{
    for (int was_space = 0; *s != '\0'; s++) {
        if (*s == ']')
            return s;
        if (was_space && *s == ';')
            return NULL;
        was_space = *s == ' ' || *s == '\t' || *s == '\v' || *s == '\f' || *s == '\r';
    }
    return NULL;
}

/* A "[...]" line: opens the section (inih reports a missing ']'). */
static int config_section_line(config_ctx *c, char *s)
{
    char *end = config_section_end(s + 1);
    if (end == NULL)
        return 0;
    const char *after = end + strspn(end + 1, " \t") + 1;
    if (*after != '\0' && *after != ';')
        return config_fail(c, "unexpected text after the section name");
    *end = '\0';
    int rc = config_open_section(c, s + 1);
    *end = ']';
    return rc;
}

/* inih's fgets-style reader (see the top of the file for why it exists):
 * one whole line, refusing NUL bytes and lines that do not fit inih's
 * buffer (num bytes), without the BOM and leading whitespace; opens
 * sections. NULL at the end or after an error, which stops inih. */
static char *config_read_line(char *str, int num, void *stream)
{
    config_ctx *c = stream;
    errno = 0;
    ssize_t n = c->failed ? -1 : getline(&c->linebuf, &c->linecap, c->fp);
    if (n < 0 && !c->failed && ferror(c->fp))
        config_fail_at(c, c->lineno + 1, "cannot read: %s", errno != 0 ? strerror(errno) : "I/O error");
    else if (n < 0 && errno == ENOMEM)
        config_fail_oom(c);
    else if (n >= 0 && c->lineno == INT32_MAX)
        config_fail(c, "too many lines");
    if (n < 0 || c->failed)
        return NULL;
    size_t len = (size_t)n;
    char *s = c->linebuf;
    if (++c->lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;
        len -= 3;
    }
    if (memchr(s, '\0', len) != NULL)
        return config_fail(c, "NUL byte in the line"), NULL;
    len -= len > 0 && s[len - 1] == '\n';
    len -= len > 0 && s[len - 1] == '\r';
    s[len] = '\0';
    size_t lead = strspn(s, " \t\v\f\r");
    s += lead;
    len -= lead;
    /* The line plus "\n\0" must fit, or inih would cut it. */
    if (num < 3 || len > (size_t)num - 2)
        return config_fail(c, "line too long (%zu characters; at most %d): put long values in a *_file key", len,
                           num < 3 ? 0 : num - 2),
               NULL;
    if (s[0] == '[' && config_section_line(c, s) != 0)
        return NULL;
    memcpy(str, s, len);
    memcpy(str + len, "\n", 2);
    return str;
}

/* A CK_PREFIX row ("key.") matches "key.TOOL" with a non-empty rest. */
static int config_key_prefixed(const config_key *k, const char *name)
{
    size_t n = strlen(k->name);
    return (k->flags & CK_PREFIX) && strncmp(name, k->name, n) == 0 && name[n] != '\0';
}

/* inih's handler: one "key = value" of the current section (inih's own
 * section argument is cut at 49 bytes: unused). 1 to go on, 0 after an
 * error. */
static int config_on_pair(void *user, const char *section, const char *name, const char *value)
{
    config_ctx *c = user;
    const config_section *s = c->sec;
    char q[CONFIG_QUOTE_MAX];
    size_t k = 0;
    (void)section;
    if (c->failed)
        return 0;
    if (value == NULL)
        return config_fail(c, "expected key = value"), 0;
    if (name[0] == '\0')
        return config_fail(c, "missing key name before '='"), 0;
    if (s == NULL)
        return config_fail(c, "'%s' is outside a section (start with [server], [upstream.NAME] or [source.NAME])",
                           config_quote(name, q, sizeof q)),
               0;
    while (k < config_nkeys(s) && strcmp(config_key_at(s, k)->name, name) != 0 &&
           !config_key_prefixed(config_key_at(s, k), name))
        k++;
    if (k == config_nkeys(s))
        return config_fail(c, "unknown key '%s' in [%s%s]", config_quote(name, q, sizeof q), s->prefix, c->secname), 0;
    const config_key *key = config_key_at(s, k);
    config_sec_state *st = &c->st[s->kind][c->cur];
    if ((st->seen >> k & 1) != 0 && !(key->flags & CK_REPEAT))
        return config_fail(c, "duplicate key '%s'", name), 0;
    st->seen |= (uint64_t)1 << k;
    st->line[k] = c->lineno;
    c->suffix = (key->flags & CK_PREFIX) ? name + strlen(key->name) : NULL;
    return config_set_key(c, key, value) == 0;
}

/* ---- the load ------------------------------------------------------------------------------ */

/* inih's own result, merged with ours: rc > 0 is inih's first bad line.
 * Our errors stop the reader at their line, so an earlier inih error is
 * the first error. */
static void config_parse(config_ctx *c)
{
    int rc = ini_parse_stream(config_read_line, c, config_on_pair, c);
    if (rc == -2)
        config_fail_oom(c);
    else if (rc < 0)
        config_fail_at(c, 0, "cannot parse (inih error %d)", rc);
    else if (rc > 0 && (!c->failed || (rc < c->errline && c->code != -ENOMEM))) {
        c->failed = 0;
        config_fail_at(c, rc, "syntax error: expected 'key = value', '[section]' or a comment");
    }
}

/* Each section's checks, [server]'s first: the upstreams' defaults come
 * from it. */
static void config_finish(config_ctx *c)
{
    size_t n[CONFIG_NKINDS] = {1, 1, c->cfg->nupstreams, c->cfg->nsources, c->cfg->nagents};
    for (int k = 0; k < CONFIG_NKINDS; k++) {
        for (size_t i = 0; i < n[k] && !c->failed; i++)
            c->st[k][i].sec->finish(c, i);
    }
}

int config_load_stream(FILE *fp, const char *path, once_config *cfg, char *err, size_t errlen)
{
    config_ctx c;
    config_sec_state server, auth;
    memset(&c, 0, sizeof c);
    memset(&server, 0, sizeof server);
    memset(&auth, 0, sizeof auth);
    memset(cfg, 0, sizeof *cfg);
    c.cfg = cfg;
    c.fp = fp;
    c.err = err;
    c.errlen = errlen;
    server.sec = &config_server_section;
    c.st[CONFIG_SERVER] = &server;
    auth.sec = &config_auth_section;
    c.st[CONFIG_AUTH] = &auth;
    config_quote(path, c.qpath, sizeof c.qpath);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    const char *slash = strrchr(path, '/');
    if (slash != NULL && (c.dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path))) == NULL)
        config_fail_oom(&c);
    if ((cfg->path = strdup(path)) == NULL)
        config_fail_oom(&c);
    c.sec = &config_server_section;
    if (!c.failed && config_defaults(&c) == 0) {
        c.sec = NULL;
        config_parse(&c);
    }
    if (!c.failed)
        config_finish(&c);
    free(c.linebuf);
    for (int k = CONFIG_UPSTREAM; k < CONFIG_NKINDS; k++)
        free(c.st[k]);
    free(c.dir);
    if (c.failed) {
        config_free(cfg);
        return c.code != 0 ? c.code : -EINVAL;
    }
    return 0;
}
