/*
 * validate.h — argument checks used by the ledger before a store is asked.
 */
#ifndef ONCE_LEDGER_VALIDATE_H
#define ONCE_LEDGER_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "once/once.h"

/* 0, or ONCE_EINVAL with a detail. */
int validate_token(const char *token);
/* s is exactly len lower-case hex characters (what names it in the detail). */
int validate_hex(const char *what, const char *s, size_t len);
/* NULL is fine; otherwise at most max bytes, printable ASCII if asked. */
int validate_text(const char *what, const char *s, size_t max, int printable);
/* A list cursor into *after: empty or NULL is 0 (from the start). */
int validate_cursor(const char *cursor, int64_t *after);
/* An agent's name: NULL (nobody named), or 1..ONCE_AGENT_MAX bytes of
 * [A-Za-z0-9._-]. */
int validate_agent(const char *agent);
/* A limit's identity and window, as once_limit_charge and once_limit_use
 * take them: 1..ONCE_LIMIT_NAME_MAX bytes of UTF-8, a window of 1 s..30 d. */
int validate_limit(const char *limit, int64_t window_ms);
/* The charges of a reservation: at most ONCE_LIMIT_CHARGES_MAX, each with
 * validate_limit's limit and window and a positive, finite max and amount. */
int validate_charges(const once_limit_charge *charges, size_t n);

#endif
