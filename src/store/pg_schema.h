/*
 * pg_schema.h — the PostgreSQL schema of once and its forward migrations.
 */
#ifndef ONCE_STORE_PG_SCHEMA_H
#define ONCE_STORE_PG_SCHEMA_H

#include <libpq-fe.h>

/* Creates schema (when not NULL; the connection's search_path must already
 * name it) and migrates it forward under an advisory lock, so that nodes
 * starting together migrate once. 0 or an ONCE_E* code with a detail. */
int pg_schema_prepare(PGconn *c, const char *schema);

/* The schema version this build writes. */
int pg_schema_latest(void);

/* The SQL of migration n (1..latest), which takes a database from version
 * n-1 to n; NULL outside. For the tests that build a database of an older
 * version and open it with this one. */
const char *pg_schema_step(int n);

#endif
