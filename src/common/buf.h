/*
 * buf.h — a growable byte buffer with a hard cap, for bodies and headers
 * that arrive in pieces from untrusted peers.
 */
#ifndef ONCE_SERVER_BUF_H
#define ONCE_SERVER_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct buf {
    uint8_t *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
} buf;

/* Appends n bytes; -1 when the result would exceed max or memory ran out
 * (the buffer is then unchanged). */
int buf_append(buf *b, const void *p, size_t n, size_t max);
int buf_append_str(buf *b, const char *s, size_t max);
void buf_free(buf *b);

#endif
