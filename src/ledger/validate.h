/*
 * validate.h — argument checks used by the ledger before a store is asked.
 */
#ifndef ONCE_LEDGER_VALIDATE_H
#define ONCE_LEDGER_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

/* 0, or ONCE_EINVAL with a detail. */
int validate_token(const char *token);
/* s is exactly len lower-case hex characters (what names it in the detail). */
int validate_hex(const char *what, const char *s, size_t len);
/* NULL is fine; otherwise at most max bytes, printable ASCII if asked. */
int validate_text(const char *what, const char *s, size_t max, int printable);
/* A list cursor into *after: empty or NULL is 0 (from the start). */
int validate_cursor(const char *cursor, int64_t *after);

#endif
