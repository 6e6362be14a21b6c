/*
 * sqlite_schema.c — the SQLite schema of once and its forward migrations.
 *
 * The version lives in PRAGMA user_version and the file is stamped with an
 * application_id, so a file written by another program, or by a newer once,
 * is refused before a single byte of it is changed.
 */
#include <stdio.h>
#include <string.h>

#include "ledger/store.h"
#include "store/sqlite_ops.h"
#include "store/sqlite_schema.h"
#include "store/schema_steps.h"

/* Migration N takes a database from version N-1 to N. Never edit a shipped
 * step; append a new one. */
static const char *const migrations[] = {
    /* 1: the action ledger. States are stored by name so that operators can
     * read the table with sqlite3; the unique constraint is the arbiter. */
    "CREATE TABLE actions ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  scope TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','completed','released','unknown','held')),"
    "  attempt INTEGER NOT NULL,"
    "  token TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  lease_expires_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL DEFAULT 0,"
    "  retention_ms INTEGER NOT NULL,"
    "  fingerprint TEXT,"
    "  request BLOB,"
    "  has_response INTEGER NOT NULL DEFAULT 0,"
    "  resp_status INTEGER,"
    "  resp_headers TEXT,"
    "  resp_body BLOB,"
    "  provider_id TEXT,"
    "  error TEXT,"
    "  note TEXT,"
    "  UNIQUE (scope, key)"
    ");"
    "CREATE INDEX actions_pending_lease ON actions (lease_expires_at) WHERE state = 'pending';"
    "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released');"
    "CREATE INDEX actions_state ON actions (state, id);",
    /* 2: webhook events, deduplicated by (source, event_id). A claim is a
     * receipt and a lease; next_at carries backoff and nack delays. */
    "CREATE TABLE events ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  source TEXT NOT NULL,"
    "  event_id TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','delivered','dead')),"
    "  attempt INTEGER NOT NULL DEFAULT 0,"
    "  received_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  next_at INTEGER NOT NULL,"
    "  claim_until INTEGER NOT NULL DEFAULT 0,"
    "  receipt TEXT,"
    "  delivered_at INTEGER NOT NULL DEFAULT 0,"
    "  expires_at INTEGER NOT NULL DEFAULT 0,"
    "  retention_ms INTEGER NOT NULL,"
    "  content_type TEXT,"
    "  headers TEXT,"
    "  body BLOB,"
    "  error TEXT,"
    "  UNIQUE (source, event_id)"
    ");"
    "CREATE INDEX events_due ON events (source, next_at) WHERE state = 'pending';"
    "CREATE INDEX events_expiry ON events (expires_at) WHERE state IN ('delivered','dead');",
    /* 3: reconciliation — lookups tried, when the next is due, and the
     * trail of what each one found. */
    "ALTER TABLE actions ADD COLUMN lookups INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE actions ADD COLUMN lookup_next_at INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE actions ADD COLUMN trail TEXT;"
    "CREATE INDEX actions_unknown ON actions (scope, lookup_next_at) WHERE state = 'unknown';",
    /* 4: a second dedupe key for events whose id the signature does not
     * cover (GitHub's delivery id): the body's digest, unique per source. */
    ("ALTER TABLE events ADD COLUMN digest TEXT;"
     "CREATE UNIQUE INDEX events_digest ON events (source, digest) WHERE digest IS NOT NULL;"),
    /* 5: a completed action whose answer was delivered but not stored (a
     * stream longer than max_response): its length. */
    "ALTER TABLE actions ADD COLUMN resp_not_stored INTEGER NOT NULL DEFAULT 0;",
    /* 6: approvals — two states (awaiting_approval, denied) and when a
     * human approved. The state's CHECK is part of the table, so the table
     * is rebuilt: every row and id kept, the AUTOINCREMENT sequence too (a
     * swept row's id is never handed out again), every index recreated. */
    "CREATE TABLE actions_new ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  scope TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','completed','released','unknown','held',"
    "    'awaiting_approval','denied')),"
    "  attempt INTEGER NOT NULL,"
    "  token TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  lease_expires_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL DEFAULT 0,"
    "  retention_ms INTEGER NOT NULL,"
    "  fingerprint TEXT,"
    "  request BLOB,"
    "  has_response INTEGER NOT NULL DEFAULT 0,"
    "  resp_status INTEGER,"
    "  resp_headers TEXT,"
    "  resp_body BLOB,"
    "  provider_id TEXT,"
    "  error TEXT,"
    "  note TEXT,"
    "  lookups INTEGER NOT NULL DEFAULT 0,"
    "  lookup_next_at INTEGER NOT NULL DEFAULT 0,"
    "  trail TEXT,"
    "  resp_not_stored INTEGER NOT NULL DEFAULT 0,"
    "  approved_at INTEGER NOT NULL DEFAULT 0,"
    "  UNIQUE (scope, key)"
    ");"
    "INSERT INTO actions_new (id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    "  expires_at, retention_ms, fingerprint, request, has_response, resp_status, resp_headers, resp_body,"
    "  provider_id, error, note, lookups, lookup_next_at, trail, resp_not_stored)"
    " SELECT id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    "  expires_at, retention_ms, fingerprint, request, has_response, resp_status, resp_headers, resp_body,"
    "  provider_id, error, note, lookups, lookup_next_at, trail, resp_not_stored FROM actions ORDER BY id;"
    "UPDATE sqlite_sequence SET seq = (SELECT max(seq) FROM sqlite_sequence WHERE name IN ('actions','actions_new'))"
    " WHERE name = 'actions_new';"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'actions_new', seq FROM sqlite_sequence WHERE name = 'actions'"
    " AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'actions_new');"
    "DROP TABLE actions;"
    "ALTER TABLE actions_new RENAME TO actions;"
    "CREATE INDEX actions_pending_lease ON actions (lease_expires_at) WHERE state = 'pending';"
    "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released','denied');"
    "CREATE INDEX actions_state ON actions (state, id);"
    "CREATE INDEX actions_unknown ON actions (scope, lookup_next_at) WHERE state = 'unknown';"
    "CREATE INDEX actions_awaiting ON actions (scope, approved_at) WHERE state = 'awaiting_approval';",
    /* 7: actions_state (state, id) covered every row, so every reserve
     * and every completion rewrote it, and no statement used it but the
     * hold of all unknown actions, which the partial actions_unknown
     * serves as well (EXPLAIN QUERY PLAN; the list's "?2 IS NULL OR
     * state = ?2" never could). Issue 19: one index fewer per write. */
    "DROP INDEX actions_state;",
    /* 8: who decided on an action awaiting approval, and the note they
     * gave, as columns of their own (they were text in the trail only).
     * NULL for decisions taken before: their trail names the decider. */
    ("ALTER TABLE actions ADD COLUMN decided_by TEXT;"
     "ALTER TABLE actions ADD COLUMN decision_note TEXT;"),
    /* 9: agents and limits (issue 28) — who asked for an action's
     * current attempt, the charges it drew (JSON [[limit, bucket, amount],
     * ...], NULL when none), whether it waits for a person because it was
     * past a limit, the buckets of every limit (limit_use), and who claimed
     * an event last. An attempt that becomes released or denied gives its
     * charges back, whichever statement moved it (release, resolve,
     * reconcile, deny, the expiry of approvals): one trigger says so. */
    ("ALTER TABLE actions ADD COLUMN agent TEXT;"
     "ALTER TABLE actions ADD COLUMN charges TEXT;"
     "ALTER TABLE actions ADD COLUMN waits_for_limit INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE events ADD COLUMN claimed_by TEXT;"
     "CREATE TABLE limit_use ("
     "  lim TEXT NOT NULL,"
     "  bucket INTEGER NOT NULL,"
     "  used REAL NOT NULL,"
     "  PRIMARY KEY (lim, bucket)"
     ") WITHOUT ROWID;"
     "CREATE TRIGGER actions_give_back AFTER UPDATE OF state ON actions"
     " WHEN NEW.charges IS NOT NULL AND NEW.state IN ('released','denied') AND OLD.state <> NEW.state"
     " BEGIN"
     "  UPDATE limit_use SET used = used - (SELECT total(json_extract(j.value, '$[2]')) FROM json_each(NEW.charges) j"
     "   WHERE json_extract(j.value, '$[0]') = limit_use.lim AND json_extract(j.value, '$[1]') = limit_use.bucket)"
     "   WHERE (lim, bucket) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')"
     "    FROM json_each(NEW.charges));"
     "  UPDATE actions SET charges = NULL WHERE id = NEW.id;"
     " END;"),
};

#define LATEST SCHEMA_STEPS_COUNT(migrations)

SCHEMA_STEPS_DEFINE(sqlite_schema_latest, sqlite_schema_step, migrations)

static int pragma_int(sqlite3 *db, const char *sql, long long *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        int code = sq_errcode(rc);
        once_fail(code, "%s: %s", sql, sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return code;
    }
    sqlite3_finalize(st);
    return ONCE_OK;
}

static int exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        int code = sq_errcode(rc);
        once_fail(code, "schema: %s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return code;
    }
    return ONCE_OK;
}

/* Read-only checks: is this file ours (or empty), and not from the future? */
static int schema_check(sqlite3 *db, long long *version)
{
    long long app = 0, foreign = 0;
    int rc = pragma_int(db, "PRAGMA application_id", &app);
    if (rc == ONCE_ENOTDB)
        return once_fail(ONCE_ENOTDB, "the file is not a SQLite database");
    if (rc < 0 || (rc = pragma_int(db, "PRAGMA user_version", version)) < 0)
        return rc;
    if (app != 0 && app != SQ_APPLICATION_ID)
        return once_fail(ONCE_ENOTDB, "the file is a SQLite database of another application (id %lld)", app);
    if (*version > LATEST)
        return once_fail(ONCE_ESCHEMA,
                         "the store has schema version %lld but this once knows only up to %d: "
                         "upgrade once (the file was left untouched)",
                         *version, LATEST);
    if (app == 0) {
        rc = pragma_int(db, "SELECT count(*) FROM sqlite_master", &foreign);
        if (rc < 0)
            return rc;
        if (foreign > 0)
            return once_fail(ONCE_ENOTDB, "the file is a SQLite database with tables of another application");
    }
    return ONCE_OK;
}

static int schema_migrate(sqlite3 *db)
{
    int rc = exec(db, "BEGIN IMMEDIATE");
    if (rc < 0)
        return rc;
    long long v = 0;
    /* Another process may have migrated while we waited for the lock. */
    if ((rc = pragma_int(db, "PRAGMA user_version", &v)) < 0)
        goto fail;
    if (v > LATEST) {
        rc = once_fail(ONCE_ESCHEMA, "the store was upgraded to schema version %lld meanwhile", v);
        goto fail;
    }
    for (long long step = v; step < LATEST; step++) {
        if ((rc = exec(db, migrations[step])) < 0)
            goto fail;
    }
    if (v < LATEST) {
        char sql[96];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", LATEST,
                 SQ_APPLICATION_ID);
        if ((rc = exec(db, sql)) < 0)
            goto fail;
    }
    return exec(db, "COMMIT");
fail:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int sqlite_schema_prepare(sqlite3 *db, int memory)
{
    long long version = 0;
    int rc = schema_check(db, &version);
    if (rc < 0)
        return rc;
    if (!memory) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        int ok = rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
                 strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
        sqlite3_finalize(st);
        if (!ok)
            return once_fail(ONCE_ESTORE, "cannot switch the store to WAL: %s", sqlite3_errmsg(db));
        /* FULL: a commit is on disk before the caller hears of it. Automatic
         * checkpoints stay off: they run inside a commit and raise its p99. */
        /* journal_size_limit: once a checkpoint catches up and the WAL
         * restarts, its file is cut back instead of staying at its peak. */
        if ((rc = exec(db, "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 0; "
                           "PRAGMA journal_size_limit = 67108864")) < 0)
            return rc;
    }
    if (version < LATEST)
        return schema_migrate(db);
    return ONCE_OK;
}
