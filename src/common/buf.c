/*
 * buf.c — a growable byte buffer with a hard cap (see buf.h).
 */
#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

int buf_append(buf *b, const void *p, size_t n, size_t max)
{
    if (n > max || b->len > max - n)
        return -1;
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(buf *b, const char *s, size_t max)
{
    return buf_append(b, s, strlen(s), max);
}

void buf_free(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
