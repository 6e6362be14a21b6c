/*
 * buf.h — a growable byte buffer with a hard cap, for bodies and headers
 * that arrive in pieces from untrusted peers.
 */
#ifndef ONCE_COMMON_BUF_H
#define ONCE_COMMON_BUF_H

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
/* Appends printf output, whole (never cut); -1 as buf_append. */
int buf_printf(buf *b, size_t max, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void buf_free(buf *b);

#endif
