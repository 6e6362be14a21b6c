/*
 * stores.h — the stores there are, for src/store/open.c: each one's opener
 * (and SQLite's process-wide set-up). Nothing outside src/store includes it.
 */
#ifndef ONCE_STORE_STORES_H
#define ONCE_STORE_STORES_H

#include "ledger/store.h"

/* sqlite3_config before SQLite starts (once_global_init). */
void sqlite_store_global_init(void);

/* Opens a SQLite store on path (":memory:" for a private in-memory one). */
int sqlite_store_open(const char *path, once_store **out);

/* Opens a PostgreSQL store on a libpq URL; ?once_schema=NAME puts its
 * tables in that schema (created if needed). */
int pg_store_open(const char *url, once_store **out);

#endif
