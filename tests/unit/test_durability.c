/*
 * test_durability.c — what once_reserve / once_complete report is on disk:
 * a child process does the call, tells the parent over a pipe after the call
 * returned, and is killed with SIGKILL; the parent reopens the file and finds
 * the exact row. Also: reopen keeps rows; processes race on one file.
 *
 * On PostgreSQL (the P entries, skipped without ONCE_TEST_PG_URL): a child
 * reserves (and completes) through PostgreSQL, is SIGKILLed, and the parent
 * reopens the schema and finds the row; reopen, two handles and the process
 * race run there too.
 *
 * The SQLite store commits unsynced and a syncer fdatasyncs the WAL before
 * anyone hears (fault-injection builds only, F entries): a read waits for
 * that sync, and a failed fdatasync fails the operations it covered and,
 * sticky, every later one.
 *
 * fork() is only called while the parent has no store open (no libonce
 * threads), so the child starts from a single-threaded copy.
 */
#include "helpers.h"

#include "common/clock.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define S "crash"

typedef struct crash_msg {
    int ok;                           /* 1 when the child's calls succeeded */
    char token[ONCE_TOKEN_LEN + 1];
    int64_t attempt;
    int64_t lease_expires_at;
} crash_msg;

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* In the child: open, reserve (and complete when do_complete), report,
 * block. Never returns. */
static void child_main(const char *url, int fd, int do_complete)
{
    crash_msg m;
    memset(&m, 0, sizeof m);
    once_store *st = NULL;
    if (once_store_open(url, &st) != 0)
        goto report;
    once_reserve_req req = th_req(S, "k", 600000);
    req.retention_ms = 3600000;
    once_reservation r;
    memset(&r, 0, sizeof r);
    if (once_reserve(st, &req, &r) != 0 || r.status != ONCE_RESERVED)
        goto report;
    memcpy(m.token, r.token, sizeof m.token);
    m.attempt = r.attempt;
    m.lease_expires_at = r.lease_expires_at;
    if (do_complete) {
        once_response resp = th_resp();
        if (once_complete(st, S, "k", r.token, &resp, "prov-crash") != 0)
            goto report;
    }
    m.ok = 1;
report:
    if (write_all(fd, &m, sizeof m) != 0)
        _exit(3);
    for (;;)
        pause(); /* wait for SIGKILL, store still open */
}

/* Runs the child, waits for its report, kills it. */
static void crash_child(th_env *e, int do_complete, crash_msg *m)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_main(e->url, fds[1], do_complete);
        _exit(4);
    }
    close(fds[1]);
    int got = read_all(fds[0], m, sizeof *m);
    close(fds[0]);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_int_equal(got, 0);
    assert_int_equal(m->ok, 1);
}

/* An env whose file exists but whose store is not open in this process. */
static int setup_closed(void **state)
{
    th_env *e = th_env_new(TH_FILE);
    once_store_close(e->st);
    e->st = NULL;
    *state = e;
    return 0;
}

/* The same on a PostgreSQL schema (a TH_PG_TEST setup: *state is the test). */
static int setup_closed_pg(void **state)
{
    th_setup_pg(state);
    th_env *e = *state;
    once_store_close(e->st);
    e->st = NULL;
    return 0;
}

/* Case 1: the reservation survives SIGKILL; the child's token still fences. */
static void test_crash_after_reserve(void **state)
{
    th_env *e = *state;
    crash_msg m;
    crash_child(e, 0, &m);
    assert_true(th_is_hex_token(m.token));

    th_assert_rc(once_store_open(e->url, &e->st), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 1);
    assert_int_equal(a.attempt, m.attempt);
    assert_int_equal(a.lease_expires_at, m.lease_expires_at);
    assert_int_equal(a.retention_ms, 3600000);
    assert_int_equal(a.has_response, 0);
    once_action_free(&a);

    /* the live lease is still honoured */
    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
    assert_int_equal(r.lease_expires_at, m.lease_expires_at);
    once_reservation_free(&r);

    /* fencing: a bogus token is stale, the child's token completes */
    th_assert_rc(once_complete(e->st, S, "k", "00000000000000000000000000000000", NULL, NULL),
                 ONCE_ESTALE);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", m.token, &resp, "p"), 0);
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    th_assert_response_eq(&a.response, &resp);
    once_action_free(&a);
}

/* Case 2: the completion survives SIGKILL, response byte-identical. */
static void test_crash_after_complete(void **state)
{
    th_env *e = *state;
    crash_msg m;
    crash_child(e, 1, &m);

    th_assert_rc(once_store_open(e->url, &e->st), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_int_equal(a.attempt, 1);
    assert_int_equal(a.has_response, 1);
    once_response resp = th_resp();
    th_assert_response_eq(&a.response, &resp);
    assert_string_equal(a.provider_id, "prov-crash");

    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    th_assert_action_eq(&r.action, &a);
    once_reservation_free(&r);
    once_action_free(&a);

    /* the child's token: a repeated complete is 0 and changes nothing */
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", m.token, NULL, NULL), 0);
}

/* Several crashes in a row on one file, then everything is still there. */
static void test_crash_repeated(void **state)
{
    th_env *e = *state;
    crash_msg m;
    crash_child(e, 0, &m); /* reserve k, crash */
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    th_assert_rc(once_release(e->st, S, "k", m.token, "crashed before send"), 0);
    once_store_close(e->st);
    e->st = NULL;

    crash_msg m2;
    crash_child(e, 1, &m2); /* reserve k again (attempt 2) + complete, crash */
    assert_int_equal(m2.attempt, 2);
    assert_int_not_equal(strcmp(m.token, m2.token), 0);
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_int_equal(a.attempt, 2);
    once_action_free(&a);
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", m.token, NULL, NULL), ONCE_ESTALE);
}

/* Close and reopen keeps every row exactly; migrations are idempotent. */
static void test_reopen_keeps_rows(void **state)
{
    th_env *e = *state;
    char tp[33], tc[33], tr[33], tu[33], th[33];
    th_reserve_new(e->st, S, "p", tp, 1);
    th_reserve_new(e->st, S, "c", tc, 1);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "c", tc, &resp, "pc"), 0);
    th_reserve_new(e->st, S, "r", tr, 1);
    th_assert_rc(once_release(e->st, S, "r", tr, "no"), 0);
    th_reserve_new(e->st, S, "u", tu, 1);
    th_assert_rc(once_mark_unknown(e->st, S, "u", tu, "maybe"), 0);
    th_reserve_new(e->st, "other", "h", th, 1);
    th_assert_rc(once_mark_unknown(e->st, "other", "h", th, NULL), 0);
    th_assert_rc(once_hold(e->st, "other", "h", "ask"), 0);

    once_list_req lr = {0};
    once_action_list before, after;
    memset(&before, 0, sizeof before);
    th_assert_rc(once_list(e->st, &lr, &before), 0);
    assert_int_equal(before.count, 5);

    for (int i = 0; i < 3; i++) {
        th_env_reopen(e);
        th_assert_rc(once_store_ping(e->st), 0);
        memset(&after, 0, sizeof after);
        th_assert_rc(once_list(e->st, &lr, &after), 0);
        assert_int_equal(after.count, before.count);
        for (size_t j = 0; j < before.count; j++)
            th_assert_action_eq(&after.items[j], &before.items[j]);
        once_action_list_free(&after);
    }
    once_action_list_free(&before);

    /* tokens issued before the reopen still fence */
    th_assert_rc(once_complete(e->st, S, "p", tr, NULL, NULL), ONCE_ESTALE);
    th_assert_rc(once_complete(e->st, S, "p", tp, NULL, NULL), 0);
    th_assert_rc(once_complete(e->st, S, "u", tu, NULL, NULL), 0);
    th_reserve_new(e->st, S, "r", tr, 2);
}

/* Two handles on the same file in one process see each other's writes. */
static void test_two_handles(void **state)
{
    th_env *e = *state;
    once_store *st2 = NULL;
    th_assert_rc(once_store_open(e->url, &st2), 0);
    char tok[33];
    th_reserve_new(e->st, S, "k", tok, 1);
    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(st2, &req, ONCE_IN_FLIGHT, &r);
    once_reservation_free(&r);
    th_assert_rc(once_complete(st2, S, "k", tok, NULL, "via-2"), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_string_equal(a.provider_id, "via-2");
    once_action_free(&a);
    once_store_close(st2);
}

/* Processes race on one key in one file: exactly one RESERVED. */
static void test_process_race(void **state)
{
    th_env *e = *state;
    enum { NP = 8 };
    int fds[NP][2];
    int go[2];
    pid_t pids[NP];
    assert_int_equal(pipe(go), 0);
    fflush(NULL);
    for (int i = 0; i < NP; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[i][0]);
            close(go[1]);
            int status = -100;
            once_store *st = NULL;
            if (once_store_open(e->url, &st) == 0) {
                char c;
                if (read(go[0], &c, 1) < 0) /* wait for the start (EOF) */
                    _exit(5);
                once_reserve_req req = th_req(S, "shared", 60000);
                once_reservation r;
                memset(&r, 0, sizeof r);
                int rc = once_reserve(st, &req, &r);
                status = rc == 0 ? (int)r.status : rc;
                once_reservation_free(&r);
                once_store_close(st);
            }
            if (write_all(fds[i][1], &status, sizeof status) != 0)
                _exit(3);
            _exit(0);
        }
        close(fds[i][1]);
    }
    close(go[0]);
    close(go[1]); /* everyone starts */
    int reserved = 0, in_flight = 0;
    for (int i = 0; i < NP; i++) {
        int status = -200;
        int got = read_all(fds[i][0], &status, sizeof status);
        close(fds[i][0]);
        int ws = 0;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_int_equal(got, 0);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
        if (status == ONCE_RESERVED)
            reserved++;
        else if (status == ONCE_IN_FLIGHT)
            in_flight++;
        else
            fail_msg("child %d: status/rc %d", i, status);
    }
    assert_int_equal(reserved, 1);
    assert_int_equal(in_flight, NP - 1);
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    once_action a;
    th_get(e->st, S, "shared", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 1);
    once_action_free(&a);
}

#define C(f) cmocka_unit_test_setup_teardown(f, setup_closed, th_teardown)
#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define CP(f) TH_PG_TEST(f, setup_closed_pg)


/* A store opened through a symlink: SQLite keeps the WAL beside the file
 * the link resolves to, and that is the WAL the syncer must fdatasync and
 * once_store_wal_bytes measure (both used LINK-wal, which does not exist:
 * the open failed, found by test_one_gateway's symlink test). */
static void test_open_through_symlink(void **state)
{
    th_env *e = *state;
    char link[256], url[300];
    snprintf(link, sizeof link, "%s/link.db", e->dir);
    snprintf(url, sizeof url, "sqlite:%s", link);
    assert_int_equal(symlink(e->path, link), 0);
    once_store *st = NULL;
    th_assert_rc(once_store_open(url, &st), 0);
    char tok[ONCE_TOKEN_LEN + 1];
    th_reserve_new(st, S, "via-link", tok, 1);
    int64_t wal = 0;
    th_assert_rc(once_store_wal_bytes(st, &wal), 0);
    assert_true(wal > 0);
    once_store_close(st);
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    assert_int_equal(th_state(e->st, S, "via-link"), ONCE_STATE_PENDING);
}

#ifdef ONCE_FAULT_INJECTION
typedef struct reserver {
    once_store *st;
    double done_at;
    int rc;
} reserver;

static void *reserve_main(void *arg)
{
    reserver *r = arg;
    once_reserve_req req = th_req(S, "slow", 60000);
    once_reservation res;
    memset(&res, 0, sizeof res);
    r->rc = once_reserve(r->st, &req, &res);
    r->done_at = clock_mono_seconds();
    once_reservation_free(&res);
    return NULL;
}

/* A reservation committed but not yet fdatasynced is visible in the WAL to
 * the pool's readers; a get that finds it must not answer before the sync
 * (a replay served from it could be taken back by a power cut). The syncer
 * sleeps 400 ms before each fdatasync; the get, started while the
 * reservation waits for it, finds the row no earlier than the reserver
 * hears. Without the wait it found it ~400 ms before. */
static void test_read_waits_for_sync(void **state)
{
    th_env *e = *state;
    setenv("ONCE_FAULT_DELAY", "before_sync:400", 1);
    reserver r = {.st = e->st};
    pthread_t t;
    double t0 = clock_mono_seconds();
    assert_int_equal(pthread_create(&t, NULL, reserve_main, &r), 0);
    double found_at = 0;
    while (clock_mono_seconds() - t0 < 5) {
        once_action a;
        memset(&a, 0, sizeof a);
        int rc = once_get(e->st, S, "slow", &a);
        once_action_free(&a);
        if (rc == ONCE_OK) {
            found_at = clock_mono_seconds();
            break;
        }
        assert_int_equal(rc, ONCE_ENOTFOUND);
        struct timespec ms = {0, 5000000};
        nanosleep(&ms, NULL);
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    unsetenv("ONCE_FAULT_DELAY");
    th_assert_rc(r.rc, 0);
    assert_true(found_at > 0);
    /* the reserver heard after its sync; the get saw the row only then */
    if (found_at < r.done_at - 0.1)
        fail_msg("the get found the row %.0f ms before the reservation was durable", (r.done_at - found_at) * 1000);
    assert_true(r.done_at - t0 >= 0.35);
}

/* Duplicates of webhook events are answered by a read, and under a steady
 * flow of new events the store is never settled: one batch is always being
 * synced. A duplicate of an event whose own batch is durable is answered at
 * once (issue 30: it waited in the writer's queue behind the new events'
 * batches); a duplicate of an event whose batch is not durable yet waits
 * for that sync. The syncer sleeps 400 ms before each fdatasync. */
typedef struct ev_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    double at;
} ev_wait;

static void ev_wait_cb(void *ctx, int rc, const char *detail)
{
    ev_wait *w = ctx;
    (void)detail;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->rc = rc;
    w->at = clock_mono_seconds();
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void ev_wait_reset(ev_wait *w)
{
    *w = (ev_wait){.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
}

static void ev_wait_for(ev_wait *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    th_assert_rc(w->rc, 0);
}

static once_event_in ev_in(const char *id)
{
    return (once_event_in){.source = "gh", .event_id = id, .body = (const uint8_t *)id, .body_len = strlen(id)};
}

static void test_durable_duplicate_answers_at_once(void **state)
{
    th_env *e = *state;
    static once_event_in old, fresh;
    old = ev_in("old");
    int inserted = 0;
    th_assert_rc(once_event_insert(e->st, &old, &inserted), 0);
    assert_int_equal(inserted, 1);

    setenv("ONCE_FAULT_DELAY", "before_sync:400", 1);
    fresh = ev_in("fresh");
    /* static: a callback that comes after a failed assertion finds them */
    static ev_wait wf, wd, wdf;
    static int fresh_inserted, dup_inserted, dupf_inserted;
    ev_wait_reset(&wf);
    ev_wait_reset(&wd);
    ev_wait_reset(&wdf);
    fresh_inserted = 0;
    assert_int_equal(once_event_insert_async(e->st, &fresh, &fresh_inserted, ev_wait_cb, &wf), 0);
    th_sleep_ms(100); /* fresh's batch is committed and waits for its sync */

    /* old's batch is long durable: answered by the read, now */
    dup_inserted = -1;
    double t0 = clock_mono_seconds();
    assert_int_equal(once_event_insert_async(e->st, &old, &dup_inserted, ev_wait_cb, &wd), 1);
    assert_int_equal(dup_inserted, 0);
    assert_true(clock_mono_seconds() - t0 < 0.25);

    /* fresh's batch is not durable: its duplicate is not answered before it */
    dupf_inserted = -1;
    int rc = once_event_insert_async(e->st, &fresh, &dupf_inserted, ev_wait_cb, &wdf);
    assert_int_equal(rc, 0);
    ev_wait_for(&wf);
    ev_wait_for(&wdf);
    unsetenv("ONCE_FAULT_DELAY");
    assert_int_equal(fresh_inserted, 1);
    assert_int_equal(dupf_inserted, 0);
    assert_true(wdf.at >= wf.at);
}

/* An fdatasync that fails: the operations it covered fail (never reported
 * done), and so does every later write and read until the store is
 * reopened; after the reopen the row the failed commit wrote is whatever
 * the disk kept, here pending, and is never handed out again. */
static void test_sync_failure_is_sticky(void **state)
{
    th_env *e = *state;
    setenv("ONCE_FAULT_FAIL", "before_sync", 1);
    once_reserve_req req = th_req(S, "eio", 60000);
    once_reservation r;
    memset(&r, 0, sizeof r);
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_ESTORE);
    assert_non_null(strstr(once_errdetail(), "fdatasync"));
    unsetenv("ONCE_FAULT_FAIL");
    req.key = "after";
    memset(&r, 0, sizeof r);
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_ESTORE);
    assert_non_null(strstr(once_errdetail(), "restart once"));
    once_action a;
    memset(&a, 0, sizeof a);
    th_assert_rc(once_get(e->st, S, "eio", &a), ONCE_ESTORE);

    th_env_reopen(e);
    req.key = "eio";
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
    once_reservation_free(&r);
    th_reserve_new(e->st, S, "after", NULL, 1);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        C(test_crash_after_reserve),
        C(test_crash_after_complete),
        C(test_crash_repeated),
        T(test_reopen_keeps_rows),
        T(test_two_handles),
        C(test_process_race),
        CP(test_crash_after_reserve),
        CP(test_crash_after_complete),
        CP(test_crash_repeated),
        P(test_reopen_keeps_rows),
        P(test_two_handles),
        CP(test_process_race),
        C(test_open_through_symlink),
#ifdef ONCE_FAULT_INJECTION
        T(test_read_waits_for_sync),
        T(test_durable_duplicate_answers_at_once),
        T(test_sync_failure_is_sticky),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
