/*
 * errbuf.h — a message into a caller's buffer that may be NULL or empty, so
 * every error path of a parser reports without checking the buffer itself.
 */
#ifndef ONCE_COMMON_ERRBUF_H
#define ONCE_COMMON_ERRBUF_H

#include <stddef.h>

void errbuf_set(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
