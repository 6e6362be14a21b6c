/*
 * key_template_eval.c — evaluating a parsed key template over a request
 * (see key_template.h): fields, lower(), trim(), digits(), sha256() and
 * domain() (the Public Suffix List through libpsl, IDNs through libidn2).
 */
#include "common/key_template_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idn2.h>
#include <libpsl.h>
#include <openssl/evp.h>

#include "common/digest.h"
#include "common/json_pointer.h"

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
        errbuf_set(err, errlen, "a value of the key would be longer than %d bytes", KT_VALUE_MAX);
        return -2;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL) {
            errbuf_set(err, errlen, "out of memory");
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

static int kt_sha_hex(const char *s, size_t n, char hex[65], char *err, size_t errlen)
{
    if (digest_sha256_hex(s, n, hex) != 0) {
        errbuf_set(err, errlen, "sha256(): SHA-256 is unavailable or failed");
        return -2;
    }
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
        errbuf_set(err, errlen, "domain(): an IP address has no registrable domain");
        return -2;
    }
    /* host:port. Two colons or more make an IPv6 address. */
    const char *colon = memchr(s + b, ':', e - b);
    if (colon != NULL) {
        size_t c = (size_t)(colon - s);
        if (memchr(s + c + 1, ':', e - c - 1) != NULL) {
            errbuf_set(err, errlen, "domain(): an IP address has no registrable domain");
            return -2;
        }
        for (size_t j = c + 1; j < e; j++) {
            if (s[j] < '0' || s[j] > '9') {
                errbuf_set(err, errlen, "domain(): the port is not a number");
                return -2;
            }
        }
        e = c;
    }
    if (e > b && s[e - 1] == '.')
        e--; /* the root: "example.com." is "example.com" */
    if (b >= e) {
        errbuf_set(err, errlen, "domain(): no host name in the value");
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
        errbuf_set(err, errlen, "domain(): the value holds a NUL byte");
        return -2;
    }
    if (kt_domain_host(s, n, &b, &e, err, errlen) != 0)
        return -2;
    if (e - b > 4 * KT_DOMAIN_MAX) {
        errbuf_set(err, errlen, "domain(): the host name is too long");
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
        errbuf_set(err, errlen, "domain(): not a host name (%s)", idn2_strerror(rc));
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
        errbuf_set(err, errlen, "domain(): not a host name");
        idn2_free(ace);
        return -2;
    }
    /* A numeric last label is an IPv4 address in any of its spellings
     * ("127.0.0.1", "127.1"), as URL parsers read it. */
    size_t digits = 0;
    for (size_t j = last; j < alen; j++)
        digits += ace[j] >= '0' && ace[j] <= '9';
    if (digits == alen - last) {
        errbuf_set(err, errlen, "domain(): an IP address has no registrable domain");
        idn2_free(ace);
        return -2;
    }
    const psl_ctx_t *psl = kt_psl();
    if (psl == NULL) {
        errbuf_set(err, errlen, "domain(): no public suffix list");
        idn2_free(ace);
        return -2;
    }
    const char *reg = psl_registrable_domain(psl, ace);
    if (reg == NULL) {
        errbuf_set(err, errlen, "domain(): '%s' is a public suffix, not a registrable domain", ace);
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
                errbuf_set(err, errlen, "%s: the string holds a NUL byte", nd->s);
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
        errbuf_set(err, errlen, "%s", nd->s);
        return -1;
    }
    if (n > KT_VALUE_MAX) {
        errbuf_set(err, errlen, "%s: the value is longer than %d bytes", nd->s, KT_VALUE_MAX);
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
        errbuf_set(err, errlen, "%s() gave an empty value", kt_func_names[fn]);
        rc = -2;
    }
    return rc;
}

/* The message for a value that is not printable ASCII where the key
 * needs it to be, naming the field it came from. */
static int kt_eval_unprintable(const kt_node *field, char *err, size_t errlen)
{
    errbuf_set(err, errlen,
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
    errbuf_set(err, errlen, "%s() gives text that is not printable ASCII; wrap it in sha256()",
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
        errbuf_set(err, errlen, "no template, source or room for a key");
        return -2;
    }
    kt_buf b = {0};
    int rc = kt_eval_seq(t, t->first, src, 1, &b, err, errlen);
    if (rc == 0) {
        size_t max = cap - 1;
        if (b.len == 0) {
            errbuf_set(err, errlen, "the key is empty");
            rc = -2;
        } else if (b.len > max) {
            errbuf_set(err, errlen, "the key would be %zu bytes, longer than %zu; wrap it in sha256()", b.len,
                         max);
            rc = -2;
        } else if (!kt_is_printable(b.p, b.len)) {
            /* Unreachable by construction (see kt_eval_seq and the parser's
             * non-ASCII check); kept so that no future path can break it. */
            errbuf_set(err, errlen, "the key would not be printable ASCII; wrap it in sha256()");
            rc = -2;
        } else {
            memcpy(out, b.p, b.len);
            out[b.len] = '\0';
        }
    }
    free(b.p);
    return rc;
}
