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
 *    1..cap - 1 printable ASCII bytes, else -2.
 *  - domain(), sha256() and their state: the Public Suffix List and the
 *    SHA-256 implementation are loaded once per process (pthread_once) and
 *    kept; evaluation is otherwise stateless, so templates may be evaluated
 *    from any number of threads at once.
 */
#include "common/key_template_int.h"

#include "common/errbuf.h"

#include "common/json_pointer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kt_kind_names[] = {"header", "json", "query", "path"};
const char *const kt_func_names[] = {"lower", "trim", "digits", "domain", "sha256"};


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
    errbuf_set(p->err, p->errlen, "column %zu: %s", kt_parse_column(p, pos), what);
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

int kt_is_ident(unsigned char c)
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
        errbuf_set(err, errlen, "column 1: no template");
        return -1;
    }
    p.len = strnlen(text, KT_TEXT_MAX + 1);
    if (p.len > KT_TEXT_MAX) {
        errbuf_set(err, errlen, "column 1: the template is longer than %d bytes", KT_TEXT_MAX);
        return -1;
    }
    if (p.len == 0) {
        errbuf_set(err, errlen, "column 1: the template is empty");
        return -1;
    }
    if (kt_parse_check_text(&p) != 0)
        return -1;
    key_template *t = calloc(1, sizeof *t);
    if (t == NULL) {
        errbuf_set(err, errlen, "column 1: out of memory");
        return -1;
    }
    t->arena = malloc(2 * p.len + 2);
    if (t->arena == NULL) {
        free(t);
        errbuf_set(err, errlen, "column 1: out of memory");
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
    return key_template_json_header_only(t, 0, err, errlen);
}

int key_template_json_header_only(const key_template *t, int headers, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (t == NULL)
        return 0;
    /* Parts are stored in the order of the text, so the first found is the
     * first written. */
    for (int i = 0; i < t->nnodes; i++) {
        const kt_node *nd = &t->nodes[i];
        if (nd->type == KT_FIELD && nd->what != KT_JSON && !(headers && nd->what == KT_HEADER)) {
            errbuf_set(err, errlen, "%s", nd->s);
            return -1;
        }
    }
    return 0;
}

