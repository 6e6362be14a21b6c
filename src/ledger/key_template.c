/*
 * key_template.c — idempotency keys derived from the request (the intent),
 * never from the attempt: a template over request fields, parsed once at
 * config load and evaluated per request. See key_template.h for the grammar.
 *
 * Decisions (the header leaves them open):
 *  - Parsing: the text is UTF-8 without control characters, at most
 *    KT_TEXT_MAX bytes, at most KT_NODES_MAX parts and KT_DEPTH_MAX nested
 *    calls; columns in errors count characters from 1. The only escapes are
 *    \{ \} \( \) and \\ (a backslash before anything else is an error, so
 *    the set can grow later without changing the meaning of a template). An
 *    identifier right before '(' is a function call; an unknown one is an
 *    error ("sha265(" is a typo, not text). Function names are lower-case.
 *  - A template must use at least one field (a constant template would give
 *    every request the same key), no call may be empty, and non-ASCII
 *    literal text is only allowed inside sha256(), digits() or domain()
 *    (elsewhere it could never be part of a key).
 *  - Field values: a JSON string as is, a JSON integer in decimal; null,
 *    true/false, reals, objects and arrays count as missing (-1), as does an
 *    empty value of any kind (an empty field means the request does not say
 *    what the intent is, and "order::" would merge distinct intents). A
 *    value with a NUL byte, or longer than KT_VALUE_MAX, is unusable (-2).
 *    On -1, err holds exactly the field ("json:/to") for key_field_missing.
 *  - Functions: lower() folds ASCII A-Z only; trim() strips ASCII
 *    whitespace; digits() keeps 0-9; sha256() gives 64 lower-case hex;
 *    domain() is described at kt_domain. A function whose result is empty
 *    fails (-2) for the same reason an empty field is missing.
 *  - A field whose value is not printable ASCII, used outside sha256(),
 *    digits() and domain(), fails (-2) naming the field and saying to wrap
 *    it in sha256() (under lower() or trim() the check is on their result,
 *    so trim() may remove a tab); the final key must be
 *    1..min(cap - 1, ONCE_KEY_MAX) printable ASCII bytes, else -2.
 *  - domain(), sha256() and their state: the Public Suffix List and the
 *    SHA-256 implementation are loaded once per process (pthread_once) and
 *    kept; evaluation is otherwise stateless, so templates may be evaluated
 *    from any number of threads at once.
 */
#include "ledger/key_template.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idn2.h>
#include <libpsl.h>
#include <openssl/evp.h>

#include <once/once.h>

#include "ledger/json_pointer.h"

#define KT_TEXT_MAX 4096          /* bytes of template text */
#define KT_NODES_MAX 256          /* literals, fields and calls */
#define KT_DEPTH_MAX 16           /* nested calls */
#define KT_PATH_MAX 255           /* highest {path:N} */
#define KT_VALUE_MAX (1024 * 1024) /* bytes of any intermediate value */
#define KT_DOMAIN_MAX 253         /* a DNS name, without the trailing dot */

typedef enum { KT_LIT, KT_FIELD, KT_CALL } kt_type;
typedef enum { KT_HEADER, KT_JSON, KT_QUERY, KT_PATH } kt_kind;
typedef enum { KT_LOWER, KT_TRIM, KT_DIGITS, KT_DOMAIN, KT_SHA256 } kt_func;

static const char *const kt_kind_names[] = {"header", "json", "query", "path"};
static const char *const kt_func_names[] = {"lower", "trim", "digits", "domain", "sha256"};

/* One part of a template. Parts of one sequence are chained by next; a
 * call's argument is the sequence starting at child. -1 ends a chain. */
typedef struct kt_node {
    kt_type type;
    int what;    /* kt_kind of a field, kt_func of a call */
    int next;    /* the following part of the same sequence */
    int child;   /* a call: its argument's first part */
    int end;     /* a call: one past its argument's last part (parts are in text order) */
    char *s;     /* a literal: its text; a field: "kind:value" */
    size_t len;  /* strlen(s) */
    size_t vofs; /* a field: where its value starts in s */
    size_t n;    /* a path field: the segment index */
} kt_node;

struct key_template {
    int first; /* the top-level sequence */
    int nnodes;
    kt_node nodes[KT_NODES_MAX];
    char *arena; /* every node's s, NUL-terminated one after another */
};

/* ---- messages ----------------------------------------------------------- */

/* Writes a message into a caller's buffer that may be NULL or empty, so
 * every error path can report without checking the buffer itself. */
static void kt_msg_write(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kt_msg_write(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct kt_parser {
    const char *text;
    size_t len;
    size_t pos;
    key_template *t;
    size_t used; /* bytes of t->arena in use */
    int nfields;
    char *err;
    size_t errlen;
} kt_parser;

/* Columns count characters (UTF-8 lead bytes), as an editor shows them;
 * the text was checked to be UTF-8 before anything asks. */
static size_t kt_parse_column(const kt_parser *p, size_t pos)
{
    size_t col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (((unsigned char)p->text[i] & 0xC0) != 0x80)
            col++;
    }
    return col;
}

static int kt_parse_fail(kt_parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int kt_parse_fail(kt_parser *p, size_t pos, const char *fmt, ...)
{
    if (p->err == NULL || p->errlen == 0)
        return -1;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    kt_msg_write(p->err, p->errlen, "column %zu: %s", kt_parse_column(p, pos), what);
    return -1;
}

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is
 * malformed (overlong, surrogate, above U+10FFFF or cut short). */
static size_t kt_utf8_length(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* A template is a line of a config file: UTF-8, no control characters. */
static int kt_parse_check_text(kt_parser *p)
{
    for (size_t i = 0; i < p->len;) {
        unsigned char c = (unsigned char)p->text[i];
        if (c < 0x20 || c == 0x7F)
            return kt_parse_fail(p, i, "control character 0x%02x", c);
        size_t n = kt_utf8_length((const unsigned char *)p->text + i, p->len - i);
        if (n == 0)
            return kt_parse_fail(p, i, "invalid UTF-8"); /* the text before it is valid */
        i += n;
    }
    return 0;
}

/* A new part, chained after *tail (or as the sequence's first). */
static int kt_parse_node_new(kt_parser *p, kt_type type, size_t pos, int *first, int *tail)
{
    if (p->t->nnodes >= KT_NODES_MAX)
        return kt_parse_fail(p, pos, "more than %d parts", KT_NODES_MAX);
    int i = p->t->nnodes++;
    kt_node *nd = &p->t->nodes[i];
    memset(nd, 0, sizeof *nd);
    nd->type = type;
    nd->next = -1;
    nd->child = -1;
    if (*tail >= 0)
        p->t->nodes[*tail].next = i;
    else
        *first = i;
    *tail = i;
    return i;
}

/* Starts a string in the arena; kt_parse_arena_end terminates it. The arena
 * holds 2 * len + 2 bytes: every string comes from a distinct stretch of
 * the text at least as long as its unescaped bytes, plus one NUL each, and
 * a one-byte literal is the worst case (1 byte of text, 2 of arena). */
static char *kt_parse_arena_at(kt_parser *p)
{
    return p->t->arena + p->used;
}

static int kt_is_ident(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* RFC 9110 tchar: what a header name may hold. */
static int kt_is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Reads the character at p->pos as part of a literal or a field value:
 * an escape gives the escaped byte. 0 with the byte in *c and p->pos
 * advanced, or -1 (a bad escape). */
static int kt_parse_char(kt_parser *p, unsigned char *c)
{
    unsigned char ch = (unsigned char)p->text[p->pos];
    if (ch == '\\') {
        unsigned char e = p->pos + 1 < p->len ? (unsigned char)p->text[p->pos + 1] : 0;
        if (e == 0 || strchr("{}()\\", e) == NULL)
            return kt_parse_fail(p, p->pos, "'\\' must be followed by {, }, (, ) or \\");
        *c = e;
        p->pos += 2;
        return 0;
    }
    *c = ch;
    p->pos++;
    return 0;
}

/* Parses "{kind:value}" at p->pos (on the '{'). */
static int kt_parse_field(kt_parser *p, int *first, int *tail)
{
    size_t open = p->pos++;
    size_t kstart = p->pos;
    while (p->pos < p->len && kt_is_ident((unsigned char)p->text[p->pos]))
        p->pos++;
    size_t klen = p->pos - kstart;
    if (p->pos >= p->len)
        return kt_parse_fail(p, open, "unclosed '{'");
    if (p->text[p->pos] != ':' || klen == 0)
        return kt_parse_fail(p, kstart, "'{' must start a field: {header:NAME}, {json:/POINTER}, "
                                        "{query:NAME} or {path:N} (write \\{ for a literal '{')");
    int kind = -1;
    for (int k = 0; k < 4; k++) {
        if (strlen(kt_kind_names[k]) == klen && memcmp(p->text + kstart, kt_kind_names[k], klen) == 0)
            kind = k;
    }
    if (kind < 0)
        return kt_parse_fail(p, kstart, "unknown field '%.*s' (header, json, query or path)", (int)klen,
                             p->text + kstart);
    p->pos++; /* the ':' */

    int i = kt_parse_node_new(p, KT_FIELD, open, first, tail);
    if (i < 0)
        return -1;
    kt_node *nd = &p->t->nodes[i];
    nd->what = kind;
    nd->s = kt_parse_arena_at(p);
    memcpy(nd->s, kt_kind_names[kind], klen);
    nd->s[klen] = ':';
    nd->vofs = klen + 1;
    size_t n = nd->vofs;
    size_t vstart = p->pos;
    size_t path = 0;
    for (;;) {
        if (p->pos >= p->len)
            return kt_parse_fail(p, open, "unclosed '{'");
        size_t at = p->pos;
        unsigned char c0 = (unsigned char)p->text[at];
        if (c0 == '}')
            break;
        if (c0 == '{')
            return kt_parse_fail(p, at, "'{' inside a field (a '}' missing? write \\{ for a literal '{')");
        unsigned char c;
        if (kt_parse_char(p, &c) != 0)
            return -1;
        size_t vlen = n - nd->vofs;
        switch (kind) {
        case KT_HEADER:
            if (!kt_is_tchar(c))
                return kt_parse_fail(p, at, "a header name cannot hold '%c'", c < 0x80 ? c : '?');
            break;
        case KT_JSON:
            if (vlen == 0 && c != '/')
                return kt_parse_fail(p, at, "a JSON pointer starts with '/' (json:/a/0)");
            if (c == '~' && (p->pos >= p->len || (p->text[p->pos] != '0' && p->text[p->pos] != '1')))
                return kt_parse_fail(p, at, "in a JSON pointer '~' must be followed by 0 or 1");
            break;
        case KT_QUERY:
            break;
        case KT_PATH:
            if (c < '0' || c > '9')
                return kt_parse_fail(p, at, "a path segment is a number from 0");
            if (vlen == 1 && path == 0)
                return kt_parse_fail(p, at - 1, "a path segment number has no leading zeros");
            path = path * 10 + (size_t)(c - '0');
            if (path > KT_PATH_MAX)
                return kt_parse_fail(p, vstart, "a path segment number is at most %d", KT_PATH_MAX);
            break;
        }
        nd->s[n++] = (char)c;
    }
    if (n == nd->vofs)
        return kt_parse_fail(p, vstart, "%s: needs %s", kt_kind_names[kind],
                             kind == KT_JSON    ? "a pointer (json:/a/b)"
                             : kind == KT_PATH ? "a segment number (path:0)"
                                                : "a name");
    nd->s[n] = '\0';
    nd->len = n;
    nd->n = path;
    p->used += n + 1;
    p->pos++; /* the '}' */
    p->nfields++;
    /* The per-character checks above are the pointer syntax; this keeps
     * the two in step should json_pointer ever grow stricter. */
    if (kind == KT_JSON && json_pointer_check(nd->s + nd->vofs) != 0)
        return kt_parse_fail(p, vstart, "not a JSON pointer");
    return 0;
}

static int kt_parse_seq(kt_parser *p, int depth, int in_call, int ascii, size_t call_pos, int *first);

/* Ends the pending literal [lit, lit + *n) as a part, if non-empty. lpos
 * is where it began in the text, for the non-ASCII check's column. */
static int kt_parse_lit_end(kt_parser *p, char *lit, size_t *n, size_t lpos, int ascii, int *first,
                            int *tail)
{
    if (*n == 0)
        return 0;
    if (!ascii) {
        for (size_t i = 0; i < *n; i++) {
            if ((unsigned char)lit[i] >= 0x80) {
                /* Find the offending character in the text for the column. */
                size_t at = lpos;
                while (at < p->len && (unsigned char)p->text[at] < 0x80)
                    at++;
                return kt_parse_fail(p, at,
                                     "non-ASCII text can never be part of a key; it may only appear "
                                     "inside sha256(), digits() or domain()");
            }
        }
    }
    int i = kt_parse_node_new(p, KT_LIT, lpos, first, tail);
    if (i < 0)
        return -1;
    kt_node *nd = &p->t->nodes[i];
    nd->s = lit;
    nd->len = *n;
    lit[*n] = '\0';
    p->used += *n + 1;
    *n = 0;
    return 0;
}

/* Parses a sequence: to the end of the text at the top level, to the
 * matching ')' inside a call (p->pos then after it). ascii: whether an
 * enclosing call makes any text ASCII (sha256, digits, domain). */
static int kt_parse_seq(kt_parser *p, int depth, int in_call, int ascii, size_t call_pos, int *first)
{
    int tail = -1;
    *first = -1;
    char *lit = kt_parse_arena_at(p); /* the pending literal */
    size_t n = 0;
    size_t lpos = p->pos;
    size_t run = 0; /* identifier characters, unescaped, at the end of lit */
    for (;;) {
        if (p->pos >= p->len) {
            if (in_call)
                return kt_parse_fail(p, call_pos, "unclosed '('");
            return kt_parse_lit_end(p, lit, &n, lpos, ascii, first, &tail);
        }
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c == '{') {
            if (kt_parse_lit_end(p, lit, &n, lpos, ascii, first, &tail) != 0 ||
                kt_parse_field(p, first, &tail) != 0)
                return -1;
            lit = kt_parse_arena_at(p);
            lpos = p->pos;
            run = 0;
        } else if (c == '}') {
            return kt_parse_fail(p, p->pos, "'}' without '{' (write \\} for a literal '}')");
        } else if (c == ')') {
            if (!in_call)
                return kt_parse_fail(p, p->pos, "')' without '(' (write \\) for a literal ')')");
            p->pos++;
            return kt_parse_lit_end(p, lit, &n, lpos, ascii, first, &tail);
        } else if (c == '(') {
            size_t fpos = p->pos - run; /* identifiers are ASCII and unescaped */
            if (run == 0)
                return kt_parse_fail(p, p->pos, "'(' without a function (write \\( for a literal '(')");
            int fn = -1;
            for (int f = 0; f < 5; f++) {
                if (strlen(kt_func_names[f]) == run && memcmp(lit + n - run, kt_func_names[f], run) == 0)
                    fn = f;
            }
            if (fn < 0)
                return kt_parse_fail(p, fpos,
                                     "unknown function '%.*s' (lower, trim, digits, domain or sha256; "
                                     "write \\( for a literal '(')",
                                     (int)run, lit + n - run);
            if (depth >= KT_DEPTH_MAX)
                return kt_parse_fail(p, fpos, "functions nest deeper than %d", KT_DEPTH_MAX);
            n -= run;
            if (kt_parse_lit_end(p, lit, &n, lpos, ascii, first, &tail) != 0)
                return -1;
            int i = kt_parse_node_new(p, KT_CALL, fpos, first, &tail);
            if (i < 0)
                return -1;
            p->t->nodes[i].what = fn;
            p->pos++; /* the '(' */
            int child;
            int cascii = ascii || fn == KT_SHA256 || fn == KT_DIGITS || fn == KT_DOMAIN;
            if (kt_parse_seq(p, depth + 1, 1, cascii, fpos, &child) != 0)
                return -1;
            if (child < 0)
                return kt_parse_fail(p, fpos, "%s() is empty", kt_func_names[fn]);
            p->t->nodes[i].child = child;
            p->t->nodes[i].end = p->t->nnodes;
            lit = kt_parse_arena_at(p);
            lpos = p->pos;
            run = 0;
        } else {
            int escaped = c == '\\';
            if (kt_parse_char(p, &c) != 0)
                return -1;
            if (n == 0)
                lpos = p->pos - (escaped ? 2 : 1);
            lit[n++] = (char)c;
            run = !escaped && kt_is_ident(c) ? run + 1 : 0;
        }
    }
}

int key_template_parse(const char *text, key_template **out, char *err, size_t errlen)
{
    if (out != NULL)
        *out = NULL;
    kt_parser p = {.text = text, .err = err, .errlen = errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (text == NULL || out == NULL) {
        kt_msg_write(err, errlen, "column 1: no template");
        return -1;
    }
    p.len = strnlen(text, KT_TEXT_MAX + 1);
    if (p.len > KT_TEXT_MAX) {
        kt_msg_write(err, errlen, "column 1: the template is longer than %d bytes", KT_TEXT_MAX);
        return -1;
    }
    if (p.len == 0) {
        kt_msg_write(err, errlen, "column 1: the template is empty");
        return -1;
    }
    if (kt_parse_check_text(&p) != 0)
        return -1;
    key_template *t = calloc(1, sizeof *t);
    if (t == NULL) {
        kt_msg_write(err, errlen, "column 1: out of memory");
        return -1;
    }
    t->arena = malloc(2 * p.len + 2);
    if (t->arena == NULL) {
        free(t);
        kt_msg_write(err, errlen, "column 1: out of memory");
        return -1;
    }
    p.t = t;
    if (kt_parse_seq(&p, 0, 0, 0, 0, &t->first) != 0) {
        key_template_free(t);
        return -1;
    }
    if (p.nfields == 0) {
        kt_parse_fail(&p, 0,
                      "the template has no field ({header:NAME}, {json:/POINTER}, {query:NAME} or "
                      "{path:N}), so every request would get the same key");
        key_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void key_template_free(key_template *t)
{
    if (t == NULL)
        return;
    free(t->arena);
    free(t);
}

int key_template_json_only(const key_template *t, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (t == NULL)
        return 0;
    /* Parts are stored in the order of the text, so the first found is the
     * first written. */
    for (int i = 0; i < t->nnodes; i++) {
        const kt_node *nd = &t->nodes[i];
        if (nd->type == KT_FIELD && nd->what != KT_JSON) {
            kt_msg_write(err, errlen, "%s", nd->s);
            return -1;
        }
    }
    return 0;
}

/* ---- values ------------------------------------------------------------- */

/* A growing value, never longer than KT_VALUE_MAX. */
typedef struct kt_buf {
    char *p;
    size_t len;
    size_t cap;
} kt_buf;

/* 0, or -2 (too long, or out of memory) with a message. */
static int kt_buf_append(kt_buf *b, const char *s, size_t n, char *err, size_t errlen)
{
    if (n > KT_VALUE_MAX - b->len) {
        kt_msg_write(err, errlen, "a value of the key would be longer than %d bytes", KT_VALUE_MAX);
        return -2;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL) {
            kt_msg_write(err, errlen, "out of memory");
            return -2;
        }
        b->p = np;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int kt_is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int kt_is_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c > 0x7E)
            return 0;
    }
    return 1;
}

/* ---- sha256() ----------------------------------------------------------- */

static pthread_once_t g_sha_once = PTHREAD_ONCE_INIT;
static EVP_MD *g_sha256; /* fetched once, kept for the life of the process */

/* An explicit fetch per call would take the provider store's lock every
 * time and serialise evaluations across threads. */
static void kt_sha_fetch(void)
{
    g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static int kt_sha_hex(const char *s, size_t n, char hex[65], char *err, size_t errlen)
{
    static const char digits[] = "0123456789abcdef";
    if (pthread_once(&g_sha_once, kt_sha_fetch) != 0 || g_sha256 == NULL) {
        kt_msg_write(err, errlen, "sha256(): SHA-256 is unavailable");
        return -2;
    }
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (EVP_Digest(s, n, md, &mdlen, g_sha256, NULL) != 1 || mdlen != sizeof md) {
        kt_msg_write(err, errlen, "sha256(): the digest failed");
        return -2;
    }
    for (size_t i = 0; i < sizeof md; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 0x0F];
    }
    hex[64] = '\0';
    return 0;
}

/* ---- domain() ----------------------------------------------------------- */

static pthread_once_t g_psl_once = PTHREAD_ONCE_INIT;
static const psl_ctx_t *g_psl; /* loaded once, kept for the life of the process */

/* The newest list available: psl_latest(NULL) picks between the
 * distribution's file (Debian's publicsuffix package) and the copy built
 * into libpsl; psl_builtin() if that fails. Never freed: one load serves
 * every evaluation, and it stays reachable, so LSan does not report it. */
static void kt_psl_load(void)
{
    g_psl = psl_latest(NULL);
    if (g_psl == NULL)
        g_psl = psl_builtin();
}

static const psl_ctx_t *kt_psl(void)
{
    if (pthread_once(&g_psl_once, kt_psl_load) != 0)
        return NULL;
    return g_psl;
}

/* Finds the host in an e-mail address or a URL: [b, e) narrowed to it.
 * Accepted: "local@host", "Name <local@host>", "scheme://user@host:port/p?q",
 * "//host/p", "host:port", "host/p" and a bare "host". 0, or -2. */
static int kt_domain_host(const char *s, size_t n, size_t *hb, size_t *he, char *err, size_t errlen)
{
    size_t b = 0, e = n;
    while (b < e && kt_is_space((unsigned char)s[b]))
        b++;
    while (e > b && kt_is_space((unsigned char)s[e - 1]))
        e--;
    /* "Name <addr>": the address between the angle brackets. */
    if (e > b && s[e - 1] == '>') {
        size_t lt = e - 1;
        while (lt > b && s[lt - 1] != '<')
            lt--;
        if (lt > b) {
            b = lt;
            e--;
        }
    }
    /* A scheme ([A-Za-z][A-Za-z0-9+.-]*) followed by "//", or just "//". */
    int url = 0;
    size_t i = b;
    if (i < e && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) {
        while (i < e && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                         (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '.' || s[i] == '-'))
            i++;
        if (i + 3 <= e && s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') {
            b = i + 3;
            url = 1;
        }
    }
    if (!url && b + 2 <= e && s[b] == '/' && s[b + 1] == '/') {
        b += 2;
        url = 1;
    }
    if (url) {
        /* The authority ends at the path, query or fragment; the
         * userinfo ends at its last '@'. */
        for (size_t j = b; j < e; j++) {
            if (s[j] == '/' || s[j] == '?' || s[j] == '#') {
                e = j;
                break;
            }
        }
        for (size_t j = e; j > b; j--) {
            if (s[j - 1] == '@') {
                b = j;
                break;
            }
        }
    } else {
        /* An e-mail address: the domain follows the last '@' (a quoted
         * local part may hold '@' too). */
        for (size_t j = e; j > b; j--) {
            if (s[j - 1] == '@') {
                b = j;
                break;
            }
        }
        for (size_t j = b; j < e; j++) {
            if (s[j] == '/' || s[j] == '?' || s[j] == '#') {
                e = j;
                break;
            }
        }
    }
    if (b < e && s[b] == '[') {
        kt_msg_write(err, errlen, "domain(): an IP address has no registrable domain");
        return -2;
    }
    /* host:port. Two colons or more make an IPv6 address. */
    const char *colon = memchr(s + b, ':', e - b);
    if (colon != NULL) {
        size_t c = (size_t)(colon - s);
        if (memchr(s + c + 1, ':', e - c - 1) != NULL) {
            kt_msg_write(err, errlen, "domain(): an IP address has no registrable domain");
            return -2;
        }
        for (size_t j = c + 1; j < e; j++) {
            if (s[j] < '0' || s[j] > '9') {
                kt_msg_write(err, errlen, "domain(): the port is not a number");
                return -2;
            }
        }
        e = c;
    }
    if (e > b && s[e - 1] == '.')
        e--; /* the root: "example.com." is "example.com" */
    if (b >= e) {
        kt_msg_write(err, errlen, "domain(): no host name in the value");
        return -2;
    }
    *hb = b;
    *he = e;
    return 0;
}

/* domain(): the registrable domain (one label below the public suffix, by
 * the Public Suffix List, private section included: "x.github.io") of the
 * host of an e-mail address or URL, lower-case, IDNs as A-labels (UTS #46
 * nontransitional, so "faß.de" is "xn--fa-hia.de" as browsers resolve it).
 * An IP address, a public suffix itself ("co.uk", "localhost") or something
 * that is not a host name fails with -2. */
static int kt_domain(const char *s, size_t n, kt_buf *out, char *err, size_t errlen)
{
    size_t b, e;
    if (memchr(s, '\0', n) != NULL) {
        kt_msg_write(err, errlen, "domain(): the value holds a NUL byte");
        return -2;
    }
    if (kt_domain_host(s, n, &b, &e, err, errlen) != 0)
        return -2;
    if (e - b > 4 * KT_DOMAIN_MAX) {
        kt_msg_write(err, errlen, "domain(): the host name is too long");
        return -2;
    }
    char host[4 * KT_DOMAIN_MAX + 1];
    memcpy(host, s + b, e - b);
    host[e - b] = '\0';

    /* UTS #46 maps (lower-cases, NFC, full-width dots and digits) and
     * encodes; it also checks A-labels that are given. */
    char *ace = NULL;
    int rc = idn2_to_ascii_8z(host, &ace, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
    if (rc != IDN2_OK || ace == NULL) {
        kt_msg_write(err, errlen, "domain(): not a host name (%s)", idn2_strerror(rc));
        idn2_free(ace);
        return -2;
    }
    size_t alen = strlen(ace);
    if (alen > 0 && ace[alen - 1] == '.' && host[e - b - 1] != '.')
        ace[--alen] = '\0'; /* a full-width trailing dot ("。") maps to '.' */
    /* idn2 passes ASCII through unchecked, so the letters of a host name
     * (and '_', which real names such as _dmarc use) are checked here. */
    int bad = alen == 0 || alen > KT_DOMAIN_MAX;
    size_t label = 0, last = 0;
    for (size_t j = 0; j < alen && !bad; j++) {
        unsigned char c = (unsigned char)ace[j];
        if (c >= 'A' && c <= 'Z')
            ace[j] = (char)(c - 'A' + 'a');
        if (c == '.') {
            bad = label == 0;
            label = 0;
            last = j + 1;
        } else {
            bad = !(kt_is_ident(c) || c == '-') || ++label > 63;
        }
    }
    if (bad || label == 0) {
        kt_msg_write(err, errlen, "domain(): not a host name");
        idn2_free(ace);
        return -2;
    }
    /* A numeric last label is an IPv4 address in any of its spellings
     * ("127.0.0.1", "127.1"), as URL parsers read it. */
    size_t digits = 0;
    for (size_t j = last; j < alen; j++)
        digits += ace[j] >= '0' && ace[j] <= '9';
    if (digits == alen - last) {
        kt_msg_write(err, errlen, "domain(): an IP address has no registrable domain");
        idn2_free(ace);
        return -2;
    }
    const psl_ctx_t *psl = kt_psl();
    if (psl == NULL) {
        kt_msg_write(err, errlen, "domain(): no public suffix list");
        idn2_free(ace);
        return -2;
    }
    const char *reg = psl_registrable_domain(psl, ace);
    if (reg == NULL) {
        kt_msg_write(err, errlen, "domain(): '%s' is a public suffix, not a registrable domain", ace);
        idn2_free(ace);
        return -2;
    }
    rc = kt_buf_append(out, reg, strlen(reg), err, errlen);
    idn2_free(ace);
    return rc;
}

/* ---- evaluation --------------------------------------------------------- */

/* The value of a field, borrowed (or in num for a JSON integer). 0; -1
 * (missing: err is the field); -2 (unusable). */
static int kt_eval_field(const kt_node *nd, const key_source *src, char num[32], const char **v, size_t *vlen,
                         char *err, size_t errlen)
{
    const char *val = nd->s + nd->vofs;
    const char *s = NULL;
    size_t n = 0;
    switch ((kt_kind)nd->what) {
    case KT_HEADER:
        s = src->header != NULL ? src->header(src->ctx, val) : NULL;
        break;
    case KT_QUERY:
        s = src->query != NULL ? src->query(src->ctx, val) : NULL;
        break;
    case KT_PATH:
        s = src->path != NULL ? src->path(src->ctx, nd->n) : NULL;
        break;
    case KT_JSON: {
        json_t *j = json_pointer_get(src->json, val);
        if (json_is_string(j)) {
            s = json_string_value(j);
            n = json_string_length(j);
            if (s != NULL && memchr(s, '\0', n) != NULL) {
                kt_msg_write(err, errlen, "%s: the string holds a NUL byte", nd->s);
                return -2;
            }
        } else if (json_is_integer(j)) {
            snprintf(num, 32, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
            s = num;
        }
        break;
    }
    }
    if (s != NULL && n == 0)
        n = strlen(s);
    if (s == NULL || n == 0) {
        kt_msg_write(err, errlen, "%s", nd->s);
        return -1;
    }
    if (n > KT_VALUE_MAX) {
        kt_msg_write(err, errlen, "%s: the value is longer than %d bytes", nd->s, KT_VALUE_MAX);
        return -2;
    }
    *v = s;
    *vlen = n;
    return 0;
}

/* Applies a function to in, appending to out. */
static int kt_eval_func(kt_func fn, const kt_buf *in, kt_buf *out, char *err, size_t errlen)
{
    const char *s = in->p != NULL ? in->p : "";
    size_t n = in->len;
    size_t start = out->len;
    int rc = 0;
    switch (fn) {
    case KT_LOWER:
        rc = kt_buf_append(out, s, n, err, errlen);
        for (size_t i = start; rc == 0 && i < out->len; i++) {
            if (out->p[i] >= 'A' && out->p[i] <= 'Z')
                out->p[i] = (char)(out->p[i] - 'A' + 'a');
        }
        break;
    case KT_TRIM: {
        size_t b = 0, e = n;
        while (b < e && kt_is_space((unsigned char)s[b]))
            b++;
        while (e > b && kt_is_space((unsigned char)s[e - 1]))
            e--;
        rc = kt_buf_append(out, s + b, e - b, err, errlen);
        break;
    }
    case KT_DIGITS:
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (s[i] >= '0' && s[i] <= '9')
                rc = kt_buf_append(out, s + i, 1, err, errlen);
        }
        break;
    case KT_DOMAIN:
        rc = kt_domain(s, n, out, err, errlen);
        break;
    case KT_SHA256: {
        char hex[65];
        rc = kt_sha_hex(s, n, hex, err, errlen);
        if (rc == 0)
            rc = kt_buf_append(out, hex, 64, err, errlen);
        break;
    }
    }
    if (rc == 0 && out->len == start) {
        kt_msg_write(err, errlen, "%s() gave an empty value", kt_func_names[fn]);
        rc = -2;
    }
    return rc;
}

/* The message for a value that is not printable ASCII where the key
 * needs it to be, naming the field it came from. */
static int kt_eval_unprintable(const kt_node *field, char *err, size_t errlen)
{
    kt_msg_write(err, errlen,
                 "%s is not printable ASCII, so the key would not be; wrap it in sha256() (or digits() or "
                 "domain())",
                 field->s);
    return -2;
}

/* After lower() or trim() outside any ASCII-making call gave text that is
 * not printable ASCII: finds the first field of the call whose value is
 * not (literals there are ASCII, the parser saw to it) to name it. */
static int kt_eval_culprit(const key_template *t, int call, const key_source *src, char *err, size_t errlen)
{
    for (int i = call + 1; i < t->nodes[call].end; i++) {
        const kt_node *nd = &t->nodes[i];
        char num[32];
        const char *v = NULL;
        size_t vlen = 0;
        if (nd->type == KT_FIELD && kt_eval_field(nd, src, num, &v, &vlen, NULL, 0) == 0 &&
            !kt_is_printable(v, vlen))
            return kt_eval_unprintable(nd, err, errlen);
    }
    kt_msg_write(err, errlen, "%s() gives text that is not printable ASCII; wrap it in sha256()",
                 kt_func_names[t->nodes[call].what]);
    return -2;
}

/* Evaluates the sequence from i into out. check: the text appended here
 * goes into the key as is (no enclosing call), so it must be printable
 * ASCII. A field is checked as it comes; lower() and trim() are checked on
 * their result, as trim() may remove what would fail (a trailing tab). */
static int kt_eval_seq(const key_template *t, int i, const key_source *src, int check, kt_buf *out, char *err,
                       size_t errlen)
{
    for (; i >= 0; i = t->nodes[i].next) {
        const kt_node *nd = &t->nodes[i];
        int rc = 0;
        if (nd->type == KT_LIT) {
            rc = kt_buf_append(out, nd->s, nd->len, err, errlen);
        } else if (nd->type == KT_FIELD) {
            char num[32];
            const char *v = NULL;
            size_t vlen = 0;
            rc = kt_eval_field(nd, src, num, &v, &vlen, err, errlen);
            if (rc == 0 && check && !kt_is_printable(v, vlen))
                rc = kt_eval_unprintable(nd, err, errlen);
            if (rc == 0)
                rc = kt_buf_append(out, v, vlen, err, errlen);
        } else {
            kt_buf arg = {0};
            size_t start = out->len;
            rc = kt_eval_seq(t, nd->child, src, 0, &arg, err, errlen);
            if (rc == 0)
                rc = kt_eval_func((kt_func)nd->what, &arg, out, err, errlen);
            free(arg.p);
            if (rc == 0 && check && !kt_is_printable(out->p + start, out->len - start))
                rc = kt_eval_culprit(t, i, src, err, errlen);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int key_template_eval(const key_template *t, const key_source *src, char *out, size_t cap, char *err,
                      size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (out != NULL && cap > 0)
        out[0] = '\0';
    if (t == NULL || src == NULL || out == NULL || cap < 2) {
        kt_msg_write(err, errlen, "no template, source or room for a key");
        return -2;
    }
    kt_buf b = {0};
    int rc = kt_eval_seq(t, t->first, src, 1, &b, err, errlen);
    if (rc == 0) {
        size_t max = cap - 1 < ONCE_KEY_MAX ? cap - 1 : ONCE_KEY_MAX;
        if (b.len == 0) {
            kt_msg_write(err, errlen, "the key is empty");
            rc = -2;
        } else if (b.len > max) {
            kt_msg_write(err, errlen, "the key would be %zu bytes, longer than %zu; wrap it in sha256()", b.len,
                         max);
            rc = -2;
        } else if (!kt_is_printable(b.p, b.len)) {
            /* Unreachable by construction (see kt_eval_seq and the parser's
             * non-ASCII check); kept so that no future path can break it. */
            kt_msg_write(err, errlen, "the key would not be printable ASCII; wrap it in sha256()");
            rc = -2;
        } else {
            memcpy(out, b.p, b.len);
            out[b.len] = '\0';
        }
    }
    free(b.p);
    return rc;
}
