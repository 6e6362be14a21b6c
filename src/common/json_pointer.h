/*
 * json_pointer.h — RFC 6901 JSON Pointers over jansson values, for taking
 * an event id (or a template field) out of an untrusted JSON body.
 */
#ifndef ONCE_LEDGER_JSON_POINTER_H
#define ONCE_LEDGER_JSON_POINTER_H

#include <jansson.h>
#include <stddef.h>

/* 0 if ptr is a syntactically valid pointer ("" or "/a/b~1c/0"), else -1. */
int json_pointer_check(const char *ptr);
/* The same check of p[0..n), which need not be NUL-terminated (a pointer
 * inside a longer text): 1 if valid, else 0. */
int json_pointer_valid(const char *p, size_t n);

/* The value at ptr inside root (borrowed), or NULL when absent or ptr is
 * malformed. Array indexes are decimal without leading zeros; "-" is never
 * present. */
json_t *json_pointer_get(json_t *root, const char *ptr);

/* The value at ptr as text for an id or a key: a string as is, an integer
 * in decimal; anything else (absent, null, object, array, real, bool)
 * gives -1. Writes at most cap bytes with the NUL; -1 if it does not fit. */
int json_pointer_text(json_t *root, const char *ptr, char *out, size_t cap);

#endif
