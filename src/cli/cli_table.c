/*
 * cli_table.c — output for people: aligned tables and escaping. Stored
 * values (keys, provider ids, notes, bodies) come from agents and providers,
 * so they are escaped before reaching a terminal: a newline must not break a
 * table row, and an escape sequence must not drive the terminal.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/hex.h"
#include "common/timefmt.h"
#include "common/utf8.h"
#include "cli/cli.h"
#include "json/action_json.h"

/* One character of output for the input at p: its escaped or copied bytes in
 * out (at most 6), the count in *olen; returns how many input bytes it
 * stands for. */
static size_t table_escape_char(const uint8_t *p, size_t n, char out[8], size_t *olen)
{
    uint8_t b = p[0];
    if (b >= 0x20 && b < 0x7f) {
        out[0] = (char)b;
        *olen = 1;
        return 1;
    }
    if (b == '\n' || b == '\t' || b == '\r') {
        out[0] = '\\';
        out[1] = b == '\n' ? 'n' : b == '\t' ? 't' : 'r';
        *olen = 2;
        return 1;
    }
    size_t l = b < 0x80 ? 0 : utf8_seq_len(p, n);
    if (l == 2 && b == 0xc2 && p[1] < 0xa0) {
        /* C1 controls: 0x9b alone is a CSI on many terminals. */
        memcpy(out, "\\u00", 4);
        out[4] = hex_digit(p[1] >> 4, 0);
        out[5] = hex_digit(p[1], 0);
        *olen = 6;
        return 2;
    }
    if (l == 0) {
        out[0] = '\\';
        out[1] = 'x';
        out[2] = hex_digit(b >> 4, 0);
        out[3] = hex_digit(b, 0);
        *olen = 4;
        return 1;
    }
    memcpy(out, p, l);
    *olen = l;
    return l;
}

char *cli_escape_dup(const char *s, size_t len, size_t max)
{
    const uint8_t *p = (const uint8_t *)s;
    char piece[8];
    size_t plen;
    size_t total = 0;
    for (size_t i = 0; i < len;) {
        i += table_escape_char(p + i, len - i, piece, &plen);
        total += plen;
    }
    int cut = max > 0 && total > max;
    /* When cut, the text keeps max - 3 bytes and gains "..." */
    size_t room = cut ? (max > 3 ? max - 3 : 0) : total;
    char *out = malloc((cut ? room + 3 : total) + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t used = table_escape_char(p + i, len - i, piece, &plen);
        if (o + plen > room)
            break;
        memcpy(out + o, piece, plen);
        o += plen;
        i += used;
    }
    if (cut) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

const char *cli_format_time(int64_t ms, char *buf, size_t len)
{
    if (ms == 0)
        snprintf(buf, len, "-");
    else if (timefmt_rfc3339(ms, buf, len) != 0)
        snprintf(buf, len, "%lld", (long long)ms);
    return buf;
}

/* `once show` and `once hooks show` print records the same way, so a
 * field looks alike in both. */
int cli_print_field(const char *name, const char *value, size_t len, size_t max)
{
    if (value == NULL) {
        printf("%s: -\n", name);
        return ONCE_OK;
    }
    char *e = cli_escape_dup(value, len, max);
    if (e == NULL)
        return ONCE_ENOMEM;
    printf("%s: %s\n", name, e);
    free(e);
    return ONCE_OK;
}

/* Most fields are short strings that a person wants whole. */
int cli_print_text(const char *name, const char *value)
{
    return cli_print_field(name, value, value != NULL ? strlen(value) : 0, 0);
}

/* Times read the same in every record: RFC 3339, "-" when unset. */
void cli_print_time(const char *name, int64_t ms)
{
    char buf[32];
    printf("%s: %s\n", name, cli_format_time(ms, buf, sizeof buf));
}

/* The JSON forms of show and of the listings' rows differ only in the
 * record's builder, the layout and what goes before; the record is built
 * first so a failed build prints nothing. */
int cli_print_json(const void *rec, cli_json_fn build, const char *lead, size_t flags)
{
    json_t *j = NULL;
    int rc = build(rec, &j);
    if (rc != ONCE_OK)
        return rc;
    fputs(lead, stdout);
    int w = json_dumpf(j, stdout, flags);
    json_decref(j);
    return w == 0 ? ONCE_OK : ONCE_ENOMEM;
}

/* A record on its own is read by a person: indented, one member a line. */
int cli_print_json_record(const void *rec, cli_json_fn build)
{
    int rc = cli_print_json(rec, build, "", JSON_INDENT(2));
    if (rc == ONCE_OK)
        fputc('\n', stdout);
    return rc;
}

struct cli_table {
    size_t ncols;
    size_t nrows;
    size_t cap;    /* rows allocated */
    char **cells;  /* nrows * ncols escaped strings */
    size_t *width; /* per column, in characters */
};

/* Columns are padded by characters, not bytes, so UTF-8 text lines up
 * (wide CJK characters aside). */
static size_t table_width(const char *s)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if ((*p & 0xc0) != 0x80)
            w++;
    }
    return w;
}

cli_table *cli_table_new(size_t ncols)
{
    if (ncols == 0)
        return NULL;
    cli_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->ncols = ncols;
    t->width = calloc(ncols, sizeof *t->width);
    if (t->width == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

int cli_table_add_row(cli_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t ncap = t->cap == 0 ? 64 : t->cap * 2;
        if (ncap > SIZE_MAX / t->ncols / sizeof(char *))
            return ONCE_ENOMEM;
        char **n = realloc(t->cells, ncap * t->ncols * sizeof(char *));
        if (n == NULL)
            return ONCE_ENOMEM;
        t->cells = n;
        t->cap = ncap;
    }
    char **row = t->cells + t->nrows * t->ncols;
    for (size_t c = 0; c < t->ncols; c++) {
        const char *v = cells[c] != NULL ? cells[c] : "-";
        row[c] = cli_escape_dup(v, strlen(v), 0);
        if (row[c] == NULL) {
            while (c-- > 0)
                free(row[c]);
            return ONCE_ENOMEM;
        }
    }
    for (size_t c = 0; c < t->ncols; c++) {
        size_t w = table_width(row[c]);
        if (w > t->width[c])
            t->width[c] = w;
    }
    t->nrows++;
    return ONCE_OK;
}

int cli_table_print(const cli_table *t, FILE *out)
{
    for (size_t r = 0; r < t->nrows; r++) {
        char *const *row = t->cells + r * t->ncols;
        for (size_t c = 0; c < t->ncols; c++) {
            fputs(row[c], out);
            if (c + 1 < t->ncols) {
                /* Two spaces between columns; none after the last. */
                for (size_t pad = table_width(row[c]); pad < t->width[c] + 2; pad++)
                    fputc(' ', out);
            }
        }
        fputc('\n', out);
    }
    return ferror(out) ? -1 : 0;
}

void cli_table_free(cli_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t->width);
    free(t);
}
