/*
 * limits.c — the arithmetic of limits both stores share (see limits.h).
 */
#include "store/limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

limit_span limit_span_at(int64_t window_ms, int64_t now)
{
    limit_span s;
    s.width = window_ms / 60 > 1 ? window_ms / 60 : 1;
    /* 60 when the window is a multiple of 60 ms; a little more otherwise,
     * so that back * width covers the whole window (never late). */
    s.back = (window_ms + s.width - 1) / s.width;
    s.now_bucket = now / s.width;
    s.first = s.now_bucket - s.back;
    return s;
}

int64_t limit_leaves(const limit_span *s, int64_t bucket)
{
    return (bucket + s->back + 1) * s->width;
}

int limit_fits(double used, double amount, double max)
{
    return used + amount <= max + max * 1e-9;
}

/* Appends s as a JSON string at p (room for 6 bytes per byte and the
 * quotes); returns the end. Bytes from 0x80 are UTF-8 (validate_limit) and
 * pass as they are. */
static char *json_string(char *p, const char *s)
{
    *p++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            p += sprintf(p, "\\u%04x", c);
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return p;
}

char *limits_json(const once_limit_charge *charges, size_t n, const int64_t *buckets)
{
    /* Each charge: its escaped limit, two numbers of at most 24 bytes and
     * one %.17g of at most 24, brackets and commas. */
    size_t cap = 3;
    for (size_t i = 0; i < n; i++)
        cap += 6 * strlen(charges[i].limit) + 3 * 32 + 8;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    char *p = out;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        const once_limit_charge *c = &charges[i];
        if (i)
            *p++ = ',';
        *p++ = '[';
        p = json_string(p, c->limit);
        if (buckets)
            p += sprintf(p, ",%lld,%.17g]", (long long)buckets[i], c->amount);
        else
            p += sprintf(p, ",%lld,%.17g,%.17g]", (long long)c->window_ms, c->max, c->amount);
    }
    *p++ = ']';
    *p = '\0';
    return out;
}
