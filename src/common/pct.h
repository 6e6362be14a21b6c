/*
 * pct.h — percent-decoding of request paths and query values (untrusted).
 */
#ifndef ONCE_SERVER_PCT_H
#define ONCE_SERVER_PCT_H

#include <stddef.h>

#include "common/buf.h"

/* Appends s[0..n) to b percent-encoded (RFC 3986: unreserved characters
 * kept, every other byte as %XX), within max bytes. 0, or -1 (b unchanged
 * past what fit). */
int pct_encode(buf *b, const char *s, size_t n, size_t max);

/* Percent-decodes n bytes of in into out (cap bytes with the NUL). -1 on a
 * malformed escape, an encoded NUL, or overflow. */
int pct_decode(const char *in, size_t n, char *out, size_t cap);

/* Rewrites the n bytes of s, whose escapes are well formed (pct_valid),
 * to the normal form of RFC 3986 6.2.2: an escape of an unreserved
 * character (A-Z a-z 0-9 - . _ ~) becomes the character, the hex digits of
 * every other escape are upper-cased. In place: the form is never longer.
 * Returns the new length (s is NUL-terminated there when it was at n).
 * Two spellings of one path thus compare equal, and what a rule matched is
 * what is sent. */
size_t pct_normalize(char *s, size_t n);

/* Whether c is an unreserved character of RFC 3986 (kept as is when
 * percent-encoding). */
int pct_unreserved(unsigned char c);

/* 1 if every '%' in s starts a well-formed escape and every byte is a
 * visible ASCII character, else 0. */
int pct_valid(const char *s);

#endif
