/*
 * pct.h — percent-decoding of request paths and query values (untrusted).
 */
#ifndef ONCE_SERVER_PCT_H
#define ONCE_SERVER_PCT_H

#include <stddef.h>

/* The value of a hex digit, or -1. */
int pct_hexval(char c);

/* Percent-decodes n bytes of in into out (cap bytes with the NUL). -1 on a
 * malformed escape, an encoded NUL, or overflow. */
int pct_decode(const char *in, size_t n, char *out, size_t cap);

/* 1 if every '%' in s starts a well-formed escape and every byte is a
 * visible ASCII character, else 0. */
int pct_valid(const char *s);

#endif
