/*
 * helpers.h — shared helpers for the cmocka unit tests of libonce.
 *
 * Every test gets a fresh store in its own mkdtemp directory under /tmp
 * (removed in teardown). Everything here is static inline so that a test
 * file that does not use a helper does not warn.
 *
 * Store kinds: TH_MEM (sqlite::memory:), TH_FILE (sqlite:PATH) and TH_PG:
 * $ONCE_TEST_PG_URL?once_schema=t_<pid>_<n>_<rand>, a schema of its own that
 * teardown drops. Without ONCE_TEST_PG_URL the PostgreSQL variants (the P()
 * entries, see TH_PG_TEST) are skipped, so ctest works without a database.
 */
#ifndef ONCE_TESTS_UNIT_HELPERS_H
#define ONCE_TESTS_UNIT_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <once/once.h>

enum { TH_MEM = 0, TH_FILE = 1, TH_PG = 2 };

/* A test environment: a temporary directory and (optionally) a store. */
typedef struct th_env {
    char dir[128];   /* the mkdtemp directory */
    char path[192];  /* dir/once.db */
    char url[1024];  /* sqlite:dir/once.db, sqlite::memory: or postgres://...?once_schema=... */
    int kind;        /* TH_MEM, TH_FILE or TH_PG */
    int file;        /* 1 when the store is an SQLite file */
    int durable;     /* 1 when the store outlives its handle (file or PostgreSQL) */
    char schema[64]; /* TH_PG: the schema, dropped in teardown */
    int pg_skip;     /* TH_PG without ONCE_TEST_PG_URL: the test is skipped */
    uintptr_t fn;    /* TH_PG_TEST: the test function th_pg_run calls */
    once_store *st;
} th_env;

/* 1 when the store answers a reservation of an existing row with a read,
 * without its writer (PostgreSQL). SQLite sends every reservation to its
 * writer (store/sqlite_store.c, sqs_reserve); a COMPLETED answer is then
 * replayed from the ledger's replay cache. */
static inline int th_reserve_reads(const th_env *e)
{
    return e->kind == TH_PG;
}

static inline int th_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(p) != 0)
        fprintf(stderr, "th_rm: %s: %s\n", p, strerror(errno));
    return 0;
}

static inline void th_rmrf(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, th_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void th_mkdtemp(char *out, size_t n)
{
    snprintf(out, n, "/tmp/once-unit-XXXXXX");
    assert_non_null(mkdtemp(out));
}

/* $ONCE_TEST_PG_URL, or NULL when unset or empty. */
static inline const char *th_pg_url(void)
{
    const char *u = getenv("ONCE_TEST_PG_URL");
    return u && u[0] ? u : NULL;
}

static inline void th_pg_quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

/* Runs one statement on $ONCE_TEST_PG_URL (outside any once store);
 * returns 0 on success. */
static inline int th_pg_exec(const char *sql)
{
    const char *base = th_pg_url();
    if (!base)
        return -1;
    PGconn *c = PQconnectdb(base);
    int rc = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PQsetNoticeProcessor(c, th_pg_quiet, NULL); /* no "drop cascades to ..." */
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
            rc = 0;
        else
            fprintf(stderr, "th_pg_exec(%s): %s", sql, PQerrorMessage(c));
        PQclear(r);
    } else {
        fprintf(stderr, "th_pg_exec: cannot connect: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

/* Builds the env and opens its store (kind: TH_MEM, TH_FILE or TH_PG; for
 * TH_PG without ONCE_TEST_PG_URL, no store and pg_skip set). */
static inline th_env *th_env_new(int kind)
{
    static unsigned counter;
    th_env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    th_mkdtemp(e->dir, sizeof e->dir);
    snprintf(e->path, sizeof e->path, "%s/once.db", e->dir);
    e->kind = kind;
    e->file = kind == TH_FILE;
    e->durable = kind != TH_MEM;
    if (kind == TH_PG) {
        const char *base = th_pg_url();
        if (!base) {
            e->pg_skip = 1;
            return e;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(e->schema, sizeof e->schema, "t_%ld_%u_%lx", (long)getpid(), ++counter,
                 (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)) & 0xffffffUL);
        snprintf(e->url, sizeof e->url, "%s%sonce_schema=%s", base, strchr(base, '?') ? "&" : "?",
                 e->schema);
    } else if (kind == TH_FILE) {
        snprintf(e->url, sizeof e->url, "sqlite:%s", e->path);
    } else {
        snprintf(e->url, sizeof e->url, "sqlite::memory:");
    }
    int rc = once_store_open(e->url, &e->st);
    if (rc != 0)
        fprintf(stderr, "once_store_open(%s): %d %s: %s\n", e->url, rc, once_strerror(rc),
                once_errdetail());
    assert_int_equal(rc, 0);
    assert_non_null(e->st);
    return e;
}

static inline void th_env_free(th_env *e)
{
    if (!e)
        return;
    once_store_close(e->st);
    e->st = NULL;
    if (e->schema[0]) {
        char sql[128];
        snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", e->schema);
        if (th_pg_exec(sql) != 0)
            fprintf(stderr, "th_env_free: could not drop schema %s\n", e->schema);
    }
    th_rmrf(e->dir);
    free(e);
}

/* Closes and reopens a durable (file or PostgreSQL) store. */
static inline void th_env_reopen(th_env *e)
{
    assert_true(e->durable);
    once_store_close(e->st);
    e->st = NULL;
    int rc = once_store_open(e->url, &e->st);
    if (rc != 0)
        fail_msg("reopen %s: rc %d (%s): %s", e->url, rc, once_strerror(rc), once_errdetail());
    assert_non_null(e->st);
}

static inline int th_setup_file(void **state)
{
    *state = th_env_new(TH_FILE);
    return 0;
}

static inline int th_setup_mem(void **state)
{
    *state = th_env_new(TH_MEM);
    return 0;
}

/* The setup of a TH_PG_TEST entry: *state holds the test function on entry. */
static inline int th_setup_pg(void **state)
{
    uintptr_t fn = (uintptr_t)*state;
    th_env *e = th_env_new(TH_PG);
    e->fn = fn;
    *state = e;
    return 0;
}

static inline int th_teardown(void **state)
{
    th_env_free(*state);
    *state = NULL;
    return 0;
}

/* The test function of a TH_PG_TEST entry: skips (cmocka's skip(), which
 * cmocka prints) without ONCE_TEST_PG_URL, else runs the real test. A skip
 * from a setup function would count as an error, hence this trampoline. */
static inline void th_pg_run(void **state)
{
    th_env *e = *state;
    if (e->pg_skip) {
        print_message("ONCE_TEST_PG_URL is not set: PostgreSQL variant skipped\n");
        skip();
    }
    void (*fn)(void **) = (void (*)(void **))e->fn;
    fn(state);
}

/* A cmocka entry that runs test f on a fresh PostgreSQL schema, set up by
 * setup (th_setup_pg, or one that behaves like it). */
#define TH_PG_TEST(f, setup) {#f " [postgres]", th_pg_run, setup, th_teardown, (void *)(uintptr_t)(f)}
#define P(f) TH_PG_TEST(f, th_setup_pg)

/* ---- small utilities ---------------------------------------------------- */

static inline void th_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline int th_str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static inline int th_mem_eq(const void *a, size_t alen, const void *b, size_t blen)
{
    if (alen != blen)
        return 0;
    if (alen == 0)
        return 1;
    if (!a || !b)
        return 0;
    return memcmp(a, b, alen) == 0;
}

/* Asserts a nullable string equals an expected nullable string. */
#define th_assert_str(actual, expected)                                                          \
    do {                                                                                         \
        const char *th_a_ = (actual), *th_e_ = (expected);                                       \
        if (!th_str_eq(th_a_, th_e_))                                                             \
            fail_msg("%s: got %s%s%s, want %s%s%s", #actual, th_a_ ? "\"" : "",                  \
                     th_a_ ? th_a_ : "NULL", th_a_ ? "\"" : "", th_e_ ? "\"" : "",               \
                     th_e_ ? th_e_ : "NULL", th_e_ ? "\"" : "");                                 \
    } while (0)

static inline int th_is_hex_token(const char *t)
{
    if (strlen(t) != ONCE_TOKEN_LEN)
        return 0;
    for (const char *p = t; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return 0;
    return 1;
}

/* Asserts two responses are byte-identical (NULL and empty are equal). */
static inline void th_assert_response_eq(const once_response *a, const once_response *b)
{
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->headers_len, b->headers_len);
    assert_true(th_mem_eq(a->headers, a->headers_len, b->headers, b->headers_len));
    assert_int_equal(a->body_len, b->body_len);
    assert_true(th_mem_eq(a->body, a->body_len, b->body, b->body_len));
}

/* Asserts every field of two records is equal. */
static inline void th_assert_action_eq(const once_action *a, const once_action *b)
{
    th_assert_str(a->scope, b->scope);
    th_assert_str(a->key, b->key);
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->attempt, b->attempt);
    assert_int_equal(a->created_at, b->created_at);
    assert_int_equal(a->updated_at, b->updated_at);
    assert_int_equal(a->lease_expires_at, b->lease_expires_at);
    assert_int_equal(a->expires_at, b->expires_at);
    assert_int_equal(a->retention_ms, b->retention_ms);
    th_assert_str(a->fingerprint, b->fingerprint);
    assert_int_equal(a->request_len, b->request_len);
    assert_true(th_mem_eq(a->request, a->request_len, b->request, b->request_len));
    assert_int_equal(a->has_response, b->has_response);
    if (a->has_response)
        th_assert_response_eq(&a->response, &b->response);
    th_assert_str(a->provider_id, b->provider_id);
    th_assert_str(a->error, b->error);
    th_assert_str(a->note, b->note);
    th_assert_str(a->decided_by, b->decided_by);
    th_assert_str(a->decision_note, b->decision_note);
}

/* ---- store shortcuts ------------------------------------------------------ */

static inline once_reserve_req th_req(const char *scope, const char *key, int64_t lease_ms)
{
    once_reserve_req r;
    memset(&r, 0, sizeof r);
    r.scope = scope;
    r.key = key;
    r.lease_ms = lease_ms;
    return r;
}

/* Reserves (scope, key); asserts rc 0 and status. */
static inline void th_reserve_expect(once_store *st, const once_reserve_req *req,
                                     once_reserve_status want, once_reservation *out)
{
    memset(out, 0, sizeof *out);
    int rc = once_reserve(st, req, out);
    if (rc != 0)
        fail_msg("once_reserve(%s, %s): rc %d (%s): %s", req->scope, req->key, rc,
                 once_strerror(rc), once_errdetail());
    if ((int)out->status != (int)want)
        fail_msg("once_reserve(%s, %s): status %d (%s), want %d (%s)", req->scope, req->key,
                 (int)out->status, once_reserve_status_name(out->status) ? once_reserve_status_name(out->status) : "?",
                 (int)want, once_reserve_status_name(want));
}

/* Reserves a fresh (scope, key) with a long lease; token into tok (33 bytes). */
static inline void th_reserve_new(once_store *st, const char *scope, const char *key, char *tok,
                                  int64_t want_attempt)
{
    once_reserve_req req = th_req(scope, key, 60000);
    once_reservation r;
    th_reserve_expect(st, &req, ONCE_RESERVED, &r);
    assert_int_equal(r.attempt, want_attempt);
    assert_true(th_is_hex_token(r.token));
    if (tok)
        memcpy(tok, r.token, ONCE_TOKEN_LEN + 1);
    once_reservation_free(&r);
}

static inline void th_get(once_store *st, const char *scope, const char *key, once_action *out)
{
    memset(out, 0, sizeof *out);
    int rc = once_get(st, scope, key, out);
    if (rc != 0)
        fail_msg("once_get(%s, %s): rc %d (%s): %s", scope, key, rc, once_strerror(rc),
                 once_errdetail());
}

static inline once_state th_state(once_store *st, const char *scope, const char *key)
{
    once_action a;
    th_get(st, scope, key, &a);
    once_state s = a.state;
    once_action_free(&a);
    return s;
}

/* Asserts rc == want, with the error detail in the failure message. */
#define th_assert_rc(call, want)                                                                 \
    do {                                                                                         \
        int th_rc_ = (call);                                                                     \
        int th_want_ = (want);                                                                   \
        if (th_rc_ != th_want_)                                                                  \
            fail_msg("%s: rc %d (%s), want %d (%s); detail: %s", #call, th_rc_,                  \
                     once_strerror(th_rc_), th_want_, once_strerror(th_want_), once_errdetail()); \
    } while (0)

/* Runs call, asserts rc == want and that the (scope, key) record is
 * unchanged in every field. */
#define th_assert_rc_unchanged(st, scope, key, call, want)                                       \
    do {                                                                                         \
        once_action th_before_, th_after_;                                                       \
        th_get((st), (scope), (key), &th_before_);                                               \
        th_assert_rc(call, want);                                                                \
        th_get((st), (scope), (key), &th_after_);                                                \
        th_assert_action_eq(&th_after_, &th_before_);                                            \
        once_action_free(&th_before_);                                                           \
        once_action_free(&th_after_);                                                            \
    } while (0)

/* A response with binary bytes (NULs, 0xff) in the body and headers. */
static const uint8_t th_body_bin[] = {'o', 'k', 0x00, 0x01, 0xff, 0x00, 0x7f, '\n', 0x00, 'z'};
static const char th_headers_json[] = "[[\"content-type\",\"application/octet-stream\"],[\"x-a\",\"1\"]]";

static inline once_response th_resp(void)
{
    once_response r;
    memset(&r, 0, sizeof r);
    r.status = 201;
    r.headers = (char *)th_headers_json;
    r.headers_len = sizeof th_headers_json - 1;
    r.body = (uint8_t *)th_body_bin;
    r.body_len = sizeof th_body_bin;
    return r;
}

/* Reads a whole file (malloc'd) into *buf; returns its length. */
static inline size_t th_read_file(const char *path, uint8_t **buf)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    *buf = malloc((size_t)n + 1);
    assert_non_null(*buf);
    assert_int_equal(fread(*buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

#endif
