/*
 * sqlite_schema.h — the SQLite schema of once and its forward migrations.
 */
#ifndef ONCE_STORE_SQLITE_SCHEMA_H
#define ONCE_STORE_SQLITE_SCHEMA_H

#include <sqlite3.h>

#define SQ_APPLICATION_ID 0x4f4e4345 /* "ONCE" */

/* Checks that db is a once database this version can use (or an empty
 * file), without writing anything; then switches it to WAL and applies the
 * missing migrations in one transaction. Returns 0 or an ONCE_E* code with a
 * detail. memory: the database is in memory (no WAL). */
int sqlite_schema_prepare(sqlite3 *db, int memory);

/* The schema version this build writes. */
int sqlite_schema_latest(void);

/* The SQL of migration n (1..latest), which takes a database from version
 * n-1 to n; NULL outside. For the tests that build a database of an older
 * version and open it with this one. */
const char *sqlite_schema_step(int n);

#endif
