/*
 * cli_table.c — output for people: aligned tables and escaping. Stored
 * values (keys, provider ids, notes, bodies) come from agents and providers,
 * so they are escaped before reaching a terminal: a newline must not break a
 * table row, and an escape sequence must not drive the terminal.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "json/action_json.h"

/* One character of output for the input at p: its escaped or copied bytes in
 * out (at most 6), the count in *olen; returns how many input bytes it
 * stands for. */
static size_t table_escape_char(const uint8_t *p, size_t n, char out[8], size_t *olen)
{
    static const char hex[] = "0123456789abcdef";
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
    size_t l = b < 0x80 ? 0 : json_utf8_seq_len(p, n);
    if (l == 2 && b == 0xc2 && p[1] < 0xa0) {
        /* C1 controls: 0x9b alone is a CSI on many terminals. */
        memcpy(out, "\\u00", 4);
        out[4] = hex[p[1] >> 4];
        out[5] = hex[p[1] & 0xf];
        *olen = 6;
        return 2;
    }
    if (l == 0) {
        out[0] = '\\';
        out[1] = 'x';
        out[2] = hex[b >> 4];
        out[3] = hex[b & 0xf];
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
    else if (json_time_format(ms, buf, len) != ONCE_OK)
        snprintf(buf, len, "%lld", (long long)ms);
    return buf;
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
