/*
 * utf8.h — well-formed UTF-8 (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF). Stored text comes from callers and providers and
 * is checked before it is put in JSON or on a terminal.
 */
#ifndef ONCE_COMMON_UTF8_H
#define ONCE_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of the well-formed sequence at p (n bytes available): 1-4, or
 * 0 when p does not start one. */
size_t utf8_seq_len(const uint8_t *p, size_t n);

/* Whether p[0..n) is well-formed UTF-8. */
int utf8_valid(const uint8_t *p, size_t n);

#endif
