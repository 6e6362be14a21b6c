/*
 * internal.h — helpers shared inside libonce: the per-thread error detail and
 * small utilities. Not part of the public API.
 */
#ifndef ONCE_LEDGER_INTERNAL_H
#define ONCE_LEDGER_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "once/once.h"

#define ONCE_DETAIL_MAX 512

/* Records a printf-style detail for code on this thread and returns code, so
 * error paths read `return once_fail(ONCE_EINVAL, "key: empty");`. */
int once_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears this thread's detail at the start of a public call. */
void once_detail_clear(void);

/* Formats into a caller buffer, always NUL-terminated, truncating. */
void once_vformat(char *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Heap copy of n bytes plus a NUL; NULL on allocation failure. */
void *once_memdup0(const void *src, size_t n);

/* 16 random bytes as 32 lower-case hex characters and a NUL. */
int once_token_new(char out[ONCE_TOKEN_LEN + 1]);

#endif
