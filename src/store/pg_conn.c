/*
 * pg_conn.c — connections of the PostgreSQL store: connecting with bounded
 * timeouts and a back-off while the database is away, the pool of read
 * connections, and the check that replaces a connection the server closed
 * before anything is sent on it (docs/guarantees.md §4).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/pg_int.h"

/* The first line of libpq's message, which ends with a newline. */
const char *pg_msg(const char *m, char *buf, size_t len)
{
    snprintf(buf, len, "%s", m && *m ? m : "unknown error");
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

/* ---- connections --------------------------------------------------------- */

/* Set by notice_recv when the server, unasked, sent a FATAL or PANIC on a
 * connection this thread was reading (pg_alive resets and reads it). */
static _Thread_local int fatal_seen;

/* NOTICEs ("already exists, skipping") are not errors; libpq's default
 * prints them on stderr, in the middle of the CLI's output and the gateway's
 * JSON log, so they are dropped. An error the server sends on an idle
 * connection arrives here too: a FATAL one (a restart's "terminating
 * connection due to administrator command") says the connection is dead
 * even before the server's close is read. */
static void notice_recv(void *arg, const PGresult *res)
{
    (void)arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0))
        fatal_seen = 1;
}

/* Opens and prepares a connection. While the database was just found
 * unreachable, refuses at once (the back-off) instead of waiting again —
 * except for a readiness probe (PG_CONNECT_PROBE): /readyz must follow the
 * database's return at once, not up to a back-off (5 s) later, and a probe
 * that succeeds ends the back-off for every operation. Probes are one at a
 * time and at most every BACKOFF_MIN_MS, however often /readyz is asked, so
 * a database coming back is not flooded. */
int pg_connect(pg_store *s, PGconn **out, int mode)
{
    pthread_mutex_lock(&s->mu);
    int64_t now = clock_mono_ms();
    int probe = 0;
    if (mode != PG_CONNECT_FORCE && s->retry_at && now < s->retry_at) {
        if (mode != PG_CONNECT_PROBE || s->probing || now - s->probe_at < BACKOFF_MIN_MS) {
            pthread_mutex_unlock(&s->mu);
            return once_fail(ONCE_ESTORE, "store unavailable: PostgreSQL is unreachable (retrying)");
        }
        s->probing = probe = 1;
        s->probe_at = now;
    }
    pthread_mutex_unlock(&s->mu);

    /* Our defaults come before the URL, so that the URL's own win. */
    const char *keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count",
                          "application_name", "dbname", NULL};
    const char *vals[] = {"5", "5", "2", "3", "once", s->url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    char msg[256];
    int rc = ONCE_OK;
    if (c)
        PQsetNoticeReceiver(c, notice_recv, NULL);
    if (!c) {
        rc = once_fail(ONCE_ENOMEM, "store: out of memory");
    } else if (PQstatus(c) != CONNECTION_OK) {
        rc = once_fail(ONCE_ESTORE, "store unavailable: %s", pg_msg(PQerrorMessage(c), msg, sizeof msg));
    } else {
        char sql[256];
        /* Bounded statements: a stuck query may not hold a thread forever.
         * synchronous_commit on: a commit is on the server's disk before
         * anyone is told a reservation or an outcome is durable. */
        snprintf(sql, sizeof sql, "SET statement_timeout = '30s'; SET synchronous_commit = on%s%s%s", s->schema ? "; SET search_path TO \"" : "",
                 s->schema ? s->schema : "", s->schema ? "\"" : "");
        PGresult *res = PQexec(c, sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = once_fail(ONCE_ESTORE, "store: %s", pg_msg(PQresultErrorMessage(res), msg, sizeof msg));
        PQclear(res);
    }
    /* The back-off doubles once per round of attempts, not once per failed
     * attempt: the writers, the readers and the loops often try at the same
     * moment, and with a doubling each it reached 5 s after a short outage
     * (readiness then lagged the database's return by as much). retry_at
     * is also when the last outcome was decided (a success sets it to now,
     * which lets anyone connect, as 0 does): a failure of an attempt begun
     * before it is old news, and neither doubles the back-off nor sets one
     * after a success. */
    pthread_mutex_lock(&s->mu);
    if (rc < 0 && now >= s->retry_at) {
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (s->backoff_ms > BACKOFF_MAX_MS)
            s->backoff_ms = BACKOFF_MAX_MS;
        s->retry_at = clock_mono_ms() + s->backoff_ms;
    } else if (rc == ONCE_OK) {
        s->backoff_ms = 0;
        s->retry_at = clock_mono_ms();
    }
    if (probe)
        s->probing = 0;
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        PQfinish(c);
        return rc;
    }
    *out = c;
    return ONCE_OK;
}

/* Prepares every statement (after the schema exists). */
int pg_prepare_all(PGconn *c)
{
    char msg[256];
    for (size_t i = 0; i < pg_nstmts; i++) {
        PGresult *res = PQprepare(c, pg_stmts[i].name, pg_stmts[i].sql, 0, NULL);
        int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            once_fail(ONCE_ESTORE, "store: prepare %s: %s", pg_stmts[i].name,
                      pg_msg(PQresultErrorMessage(res), msg, sizeof msg));
        PQclear(res);
        if (!ok)
            return ONCE_ESTORE;
    }
    return ONCE_OK;
}

/* A connection ready for the store's statements (mode: PG_CONNECT_*). */
int pg_open_conn(pg_store *s, PGconn **out, int mode)
{
    PGconn *c;
    int rc = pg_connect(s, &c, mode);
    if (rc < 0)
        return rc;
    if ((rc = pg_prepare_all(c)) < 0) {
        PQfinish(c);
        return rc;
    }
    *out = c;
    return ONCE_OK;
}

/* Whether a connection that sat idle may still be used. A server that
 * restarted (or killed the session) has sent its FATAL and closed; reading
 * what is there reveals it before anything is sent on the connection, so a
 * request is never the one that finds out (docs/guarantees.md §4).
 *
 * One PQconsumeInput is not enough: it reads the FATAL's bytes and returns
 * without parsing them, and the close behind them is only seen by the next
 * read, so a dead connection passed once (issue 26, item 10: every writer
 * answered one batch, or a /readyz, with "terminating connection" after a
 * restart). So: while the socket has something to read, read it and parse
 * it (an unsolicited FATAL reaches notice_recv); a close, or a FATAL, is
 * dead. Nothing is read on an idle connection otherwise. Never waits. */
int pg_alive(PGconn *c)
{
    fatal_seen = 0;
    for (int reads = 0; reads < 4; reads++) {
        if (PQstatus(c) != CONNECTION_OK)
            return 0;
        struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
        int n = poll(&p, 1, 0);
        if (n == 0)
            return 1; /* nothing waiting: the server has said nothing */
        if (n < 0 && errno != EINTR)
            return 0;
        if (PQconsumeInput(c) != 1)
            return 0;
        (void)PQisBusy(c); /* parses what came: an idle connection's error goes to notice_recv */
        if (fatal_seen)
            return 0;
    }
    return PQstatus(c) == CONNECTION_OK;
}

/* Closes every idle pooled connection: one was found dead, so the server
 * went away and the others are as dead. Under s->mu. */
static void pool_reset(pg_store *s)
{
    while (s->pool_nfree > 0) {
        PQfinish(s->pool_free[--s->pool_nfree]);
        s->pool_nopen--;
    }
}

static int pool_get(pg_store *s, PGconn **out)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->pool_nfree > 0) {
            PGconn *c = s->pool_free[--s->pool_nfree];
            if (pg_alive(c)) {
                *out = c;
                pthread_mutex_unlock(&s->mu);
                return ONCE_OK;
            }
            PQfinish(c);
            s->pool_nopen--;
            pool_reset(s);
            continue;
        }
        if (s->pool_nopen < POOL_MAX)
            break;
        pthread_cond_wait(&s->pool_cv, &s->mu);
    }
    s->pool_nopen++;
    pthread_mutex_unlock(&s->mu);
    int rc = pg_open_conn(s, out, PG_CONNECT_BACKOFF);
    if (rc < 0) {
        pthread_mutex_lock(&s->mu);
        s->pool_nopen--;
        pthread_cond_signal(&s->pool_cv);
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* Returns a connection, or drops it when it broke. */
static void pool_put(pg_store *s, PGconn *c)
{
    int broken = PQstatus(c) != CONNECTION_OK;
    if (broken)
        PQfinish(c);
    pthread_mutex_lock(&s->mu);
    if (broken)
        s->pool_nopen--;
    else
        s->pool_free[s->pool_nfree++] = c;
    pthread_cond_signal(&s->pool_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Runs a read statement on a pooled connection. *res is the result (the
 * caller clears it) or NULL with the error set. */
int read_exec(pg_store *s, const char *name, const params *p, PGresult **res)
{
    *res = NULL;
    /* A read is safe to run again: one whose connection broke under it
     * (the server went away between the check and the query) gets one more
     * try on a fresh connection. */
    for (int attempt = 0;; attempt++) {
        PGconn *c;
        int rc = pool_get(s, &c);
        if (rc < 0)
            return rc;
        PGresult *r = PQexecPrepared(c, name, p->n, p->v, p->len, p->fmt, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            pool_put(s, c);
            *res = r;
            return ONCE_OK;
        }
        char msg[256];
        rc = once_fail(ONCE_ESTORE, "store unavailable: %s", pg_msg(PQresultErrorMessage(r), msg, sizeof msg));
        PQclear(r);
        int broken = PQstatus(c) != CONNECTION_OK;
        pool_put(s, c);
        if (!broken || attempt > 0)
            return rc;
        pthread_mutex_lock(&s->mu);
        pool_reset(s);
        pthread_mutex_unlock(&s->mu);
    }
}

