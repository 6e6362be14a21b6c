/*
 * validate.h — argument checks used by the ledger before a store is asked.
 */
#ifndef ONCE_LEDGER_VALIDATE_H
#define ONCE_LEDGER_VALIDATE_H

#include <stddef.h>

/* 0, or ONCE_EINVAL with a detail. */
int validate_token(const char *token);
/* s is exactly len lower-case hex characters (what names it in the detail). */
int validate_hex(const char *what, const char *s, size_t len);
/* NULL is fine; otherwise at most max bytes, printable ASCII if asked. */
int validate_text(const char *what, const char *s, size_t max, int printable);

#endif
