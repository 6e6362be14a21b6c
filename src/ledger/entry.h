/*
 * entry.h — what the public entry points of libonce share across their
 * files (ledger.c and action.c for actions, events.c for webhook events):
 * the size of a page, a page request's checks, the sweeps, and how a list
 * of records is freed.
 */
#ifndef ONCE_LEDGER_ENTRY_H
#define ONCE_LEDGER_ENTRY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/store.h"

#define LEDGER_LIST_DEFAULT 100 /* rows of a page when the caller asks for 0 */
#define LEDGER_LIST_MAX 1000    /* rows of a page or of a claim, at the most */

/* How the entry points that fill *out start: this thread's detail cleared;
 * ONCE_EINVAL with the detail missing unless args_ok (the store, out and any
 * request are there); then *out (size bytes) zeroed, so that a failure from
 * here on leaves it empty or the store's to free. */
int ledger_begin_out(int args_ok, void *out, size_t size, const char *missing);

/* Checks a page request's limit (0 asks for the default) and cursor; what
 * names the entry point in the detail. 0 with *limit_out and *after_id set
 * for the store, or ONCE_EINVAL. */
int ledger_check_page(const char *what, size_t limit, const char *cursor, size_t *limit_out, int64_t *after_id);

/* A store's sweep of the rows due at now (store_vtable: expire_leases,
 * sweep, event_sweep). */
typedef int (*ledger_sweep_fn)(once_store *store, int64_t now, size_t *count);

/* The entry points that sweep: this thread's detail cleared, the arguments
 * checked (what names the entry point in the detail), then fn; *count (may
 * be NULL) is 0 unless fn succeeds. Pass fn as store ? store->vt->X : NULL. */
int ledger_sweep(once_store *store, ledger_sweep_fn fn, int64_t now, size_t *count, const char *what);
/* As ledger_sweep, for a sweep the store does STORE_SWEEP_ROWS rows at a time: called
 * again while a call deleted that many, each call its own transaction. */
int ledger_sweep_all(once_store *store, ledger_sweep_fn fn, int64_t now, size_t *count, const char *what);

/* Defines fn, the public free of a list type (items, count) whose records
 * item_free frees: each record, then the array, then the list zeroed (so a
 * second call frees nothing). NULL is a no-op. One definition for the
 * lists of actions and of events. */
#define LEDGER_LIST_FREE(fn, list_type, item_free)                                                                 \
    void fn(list_type *l)                                                                                          \
    {                                                                                                              \
        if (!l)                                                                                                    \
            return;                                                                                                \
        for (size_t i = 0; i < l->count; i++)                                                                      \
            item_free(&l->items[i]);                                                                               \
        free(l->items);                                                                                            \
        memset(l, 0, sizeof *l);                                                                                   \
    }

#endif
