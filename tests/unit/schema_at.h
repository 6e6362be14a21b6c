/*
 * schema_at.h — an old store for the migration tests: a store built with
 * its schema steps 1..version, holding rows written with that version's
 * columns, then reopened, so that the migrations after version run on
 * real old rows (SQLite file and PostgreSQL schema alike). Static inline,
 * like helpers.h, which it needs first.
 */
#ifndef ONCE_TESTS_UNIT_SCHEMA_AT_H
#define ONCE_TESTS_UNIT_SCHEMA_AT_H

#include <sqlite3.h>

#include "store/pg_schema.h"
#include "store/sqlite_schema.h"

static inline void th_sq_exec_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%.80s: %s", sql, msg ? msg : "?");
}

/* e's SQLite file made anew at version, holding rows (SQL), then reopened. */
static inline void th_sqlite_at(th_env *e, int version, const char *rows)
{
    once_store_close(e->st);
    e->st = NULL;
    char p[256];
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", e->path, sfx[i]);
        unlink(p);
    }
    sqlite3 *db;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    th_sq_exec_ok(db, "BEGIN");
    for (int n = 1; n <= version; n++)
        th_sq_exec_ok(db, sqlite_schema_step(n));
    th_sq_exec_ok(db, rows);
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", version, SQ_APPLICATION_ID);
    th_sq_exec_ok(db, sql);
    th_sq_exec_ok(db, "COMMIT");
    sqlite3_close(db);
    th_env_reopen(e);
}

/* Runs sql on a connection to e's PostgreSQL schema; the first value of
 * its first row (malloc'd) when it returns rows, else "". */
static inline char *th_pg_in_schema(const th_env *e, const char *sql)
{
    PGconn *c = PQconnectdb(th_pg_url());
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PQsetNoticeProcessor(c, th_pg_quiet, NULL);
    char set[128];
    snprintf(set, sizeof set, "SET search_path TO \"%s\"", e->schema);
    PQclear(PQexec(c, set));
    PGresult *res = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        fail_msg("%.80s...: %s", sql, PQerrorMessage(c));
    char *v = strdup(s == PGRES_TUPLES_OK && PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
    assert_non_null(v);
    PQclear(res);
    PQfinish(c);
    return v;
}

/* e's PostgreSQL schema made anew at version, holding rows (SQL), its id
 * sequence ahead of them (as after a sweep), then reopened. */
static inline void th_pg_at(th_env *e, int version, const char *rows)
{
    once_store_close(e->st);
    e->st = NULL;
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", e->schema);
    assert_int_equal(th_pg_exec(sql), 0);
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", e->schema);
    assert_int_equal(th_pg_exec(sql), 0);
    free(th_pg_in_schema(e, "CREATE TABLE once_schema (version INTEGER NOT NULL)"));
    for (int n = 1; n <= version; n++)
        free(th_pg_in_schema(e, pg_schema_step(n)));
    snprintf(sql, sizeof sql, "INSERT INTO once_schema VALUES (%d)", version);
    free(th_pg_in_schema(e, sql));
    free(th_pg_in_schema(e, rows));
    free(th_pg_in_schema(e, "SELECT setval('actions_id_seq', 40)"));
    th_env_reopen(e);
}

#endif
