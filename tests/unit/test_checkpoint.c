/*
 * test_checkpoint.c — regression test: the checkpointer copies the WAL back
 * into the database file. It once never did (its connection had not read
 * the file, so SQLite did not know it was in WAL mode and every checkpoint
 * was a silent no-op): the WAL grew for as long as a store was open. Also
 * the bound on the WAL, and a failed sync of the checkpointer's.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

#define CYCLES 3000

static void test_wal_is_checkpointed(void **state)
{
    th_env *e = *state;
    for (int i = 0; i < CYCLES; i++) {
        char key[32], tok[33];
        snprintf(key, sizeof key, "k%d", i);
        th_reserve_new(e->st, "ckpt", key, tok, 1);
        once_response resp = th_resp();
        assert_int_equal(once_complete(e->st, "ckpt", key, tok, &resp, NULL), 0);
    }
    /* The checkpointer runs at least once a second. */
    struct stat sb = {0};
    for (int i = 0; i < 50; i++) {
        th_sleep_ms(100);
        assert_int_equal(stat(e->path, &sb), 0);
        if (sb.st_size > 256 * 1024)
            break;
    }
    /* 3000 rows with bodies do not fit in the first pages: if the database
     * file is still tiny, nothing was ever copied back from the WAL. */
    assert_true(sb.st_size > 256 * 1024);
}

/* Passive checkpoints leave the WAL file at its peak size (and under a
 * sustained load never catch up: it grew to 319 MB in a benchmark). Past
 * the limit, the checkpointer truncates it. */
static void test_wal_is_bounded(void **state)
{
    th_env *e = *state;
    th_assert_rc(once_store_set_wal_limit(e->st, 1 << 20), 0);
    th_assert_rc(once_store_set_wal_limit(e->st, 1000), ONCE_EINVAL);
    int64_t wal = -1, peak = 0;
    for (int i = 0; i < CYCLES; i++) {
        char key[32], tok[33];
        snprintf(key, sizeof key, "w%d", i);
        th_reserve_new(e->st, "wal", key, tok, 1);
        once_response resp = th_resp();
        assert_int_equal(once_complete(e->st, "wal", key, tok, &resp, NULL), 0);
        th_assert_rc(once_store_wal_bytes(e->st, &wal), 0);
        if (wal > peak)
            peak = wal;
    }
    assert_true(peak > 0);
    /* Within the bound, never past it (test_wal_bound_holds_against_large_commits). */
    if (peak > (1 << 20))
        fail_msg("the WAL reached %lld bytes under a 1 MiB bound", (long long)peak);
    /* The checkpointer runs at least once a second. */
    for (int i = 0; i < 50; i++) {
        th_assert_rc(once_store_wal_bytes(e->st, &wal), 0);
        if (wal <= (1 << 20))
            break;
        th_sleep_ms(100);
    }
    if (wal > (1 << 20))
        fail_msg("the WAL is %lld bytes after 5 s, over its 1 MiB limit (peak %lld)", (long long)wal,
                 (long long)peak);
}

/* Watches the WAL's size from another thread, as a monitor would: the
 * largest it saw. The file is over the bound only between a commit and the
 * writer's truncate, before that commit's callers hear of it. */
typedef struct {
    once_store *st;
    atomic_int stop;
    int64_t peak;
} wal_watch;

static void *wal_watch_main(void *arg)
{
    wal_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        int64_t wal = 0;
        if (once_store_wal_bytes(w->st, &wal) == 0 && wal > w->peak)
            w->peak = wal;
    }
    return NULL;
}

/* A body that does not compress or repeat: each byte from its offset. */
static void fill_body(uint8_t *body, size_t n)
{
    for (size_t i = 0; i < n; i++)
        body[i] = (uint8_t)(i * 2654435761u >> 24);
}

/* The bound holds when commits outrun the checkpointer (it runs a round
 * at most once a second under a 1 MiB bound): each answer here is 96 KiB,
 * so the WAL reaches the bound every few commits and the writer truncates
 * it itself. Before, it did so after the commit that passed the bound, and
 * the file held the bound plus that commit until then (64.2 MB under
 * 64 MiB in bench/sustained.sh); now after the commit that brings it
 * within one commit (the largest so far) of the bound. */
static void test_wal_bound_holds_against_large_commits(void **state)
{
    th_env *e = *state;
    th_assert_rc(once_store_set_wal_limit(e->st, 1 << 20), 0);
    static uint8_t body[96 << 10];
    fill_body(body, sizeof body);
    wal_watch w = {.st = e->st};
    pthread_t watcher;
    assert_int_equal(pthread_create(&watcher, NULL, wal_watch_main, &w), 0);
    int64_t wal = -1, peak = 0;
    for (int i = 0; i < 200; i++) {
        char key[32], tok[33];
        snprintf(key, sizeof key, "big%d", i);
        th_reserve_new(e->st, "wal", key, tok, 1);
        once_response resp = th_resp();
        resp.body = body;
        resp.body_len = sizeof body;
        assert_int_equal(once_complete(e->st, "wal", key, tok, &resp, NULL), 0);
        th_assert_rc(once_store_wal_bytes(e->st, &wal), 0);
        if (wal > peak)
            peak = wal;
    }
    atomic_store(&w.stop, 1);
    assert_int_equal(pthread_join(watcher, NULL), 0);
    if (w.peak > peak)
        peak = w.peak;
    assert_true(peak > (512 << 10)); /* it came near the bound */
    if (peak > (1 << 20))
        fail_msg("the WAL reached %lld bytes under a 1 MiB bound", (long long)peak);
}

static void count_writer_checkpoints(void *ctx, int by_writer, double seconds, int frames, int copied)
{
    (void)seconds;
    (void)frames;
    (void)copied;
    if (by_writer)
        atomic_fetch_add((atomic_int *)ctx, 1);
}

/* One commit as large as the bound (an answer of 1.1 MiB under 1 MiB) must
 * not leave the writer truncating after every later commit: the room kept
 * for the largest commit is at most a quarter of the bound. Without that
 * cap, each of the small commits after it was followed by a truncate. */
static void test_one_large_commit_does_not_shrink_the_bound(void **state)
{
    th_env *e = *state;
    th_assert_rc(once_store_set_wal_limit(e->st, 1 << 20), 0);
    static uint8_t body[1100 << 10];
    fill_body(body, sizeof body);
    char tok[33];
    th_reserve_new(e->st, "wal", "huge", tok, 1);
    once_response resp = th_resp();
    resp.body = body;
    resp.body_len = sizeof body;
    assert_int_equal(once_complete(e->st, "wal", "huge", tok, &resp, NULL), 0);

    atomic_int by_writer = 0;
    once_store_set_checkpoint_hook(e->st, count_writer_checkpoints, &by_writer);
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof key, "small%d", i);
        th_reserve_new(e->st, "wal", key, tok, 1);
    }
    once_store_set_checkpoint_hook(e->st, NULL, NULL);
    /* 100 commits of a few pages fill about 300 of the 254 frames a 1 MiB
     * WAL holds: a truncate or two, and the writer's share of the
     * checkpointer's rounds (at most one a second). */
    if (atomic_load(&by_writer) >= 20)
        fail_msg("the writer checkpointed %d times in 100 small commits", atomic_load(&by_writer));
}

static void test_wal_bytes_of_other_stores(void **state)
{
    th_env *e = *state;
    int64_t wal = -1;
    th_assert_rc(once_store_wal_bytes(e->st, &wal), 0);
    assert_int_equal(wal, 0);
    th_assert_rc(once_store_set_wal_limit(e->st, 1 << 20), 0);
    th_assert_rc(once_store_wal_bytes(NULL, &wal), ONCE_EINVAL);
}

#ifdef ONCE_FAULT_INJECTION
/* The checkpointer syncs the database after each pass (issue 30). When that
 * sync fails, the store fails as a failed sync of the WAL makes it fail:
 * every later write, until it is reopened (a second sync through the same
 * descriptor could report success over pages the kernel dropped). The close
 * then leaves the WAL as it is, never checkpointing it over a database file
 * the disk may not hold, and every write acknowledged before the failure is
 * there after the reopen. */
static void test_checkpointer_sync_failure_is_sticky(void **state)
{
    th_env *e = *state;
    setenv("ONCE_FAULT_FAIL", "ckpt_sync", 1);
    int acked = 0, rc = 0;
    /* The checkpointer runs a round at least once a second: its first pass
     * that copies frames fails. */
    for (int i = 0; i < 200 && rc == 0; i++) {
        char key[32];
        snprintf(key, sizeof key, "c%d", i);
        once_reserve_req req = th_req("sync", key, 60000);
        once_reservation r;
        memset(&r, 0, sizeof r);
        rc = once_reserve(e->st, &req, &r);
        if (rc == 0) {
            acked++;
            once_reservation_free(&r);
            th_sleep_ms(50);
        }
    }
    unsetenv("ONCE_FAULT_FAIL");
    th_assert_rc(rc, ONCE_ESTORE);
    assert_true(acked > 0);
    once_reserve_req later = th_req("sync", "later", 60000);
    once_reservation r;
    memset(&r, 0, sizeof r);
    th_assert_rc(once_reserve(e->st, &later, &r), ONCE_ESTORE);
    assert_non_null(strstr(once_errdetail(), "checkpointer's sync of the database failed"));

    once_store_close(e->st);
    e->st = NULL;
    char wal[sizeof e->path + 8];
    snprintf(wal, sizeof wal, "%s-wal", e->path);
    struct stat sb;
    if (stat(wal, &sb) != 0 || sb.st_size == 0)
        fail_msg("the close checkpointed and removed the WAL after a failed sync");
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    for (int i = 0; i < acked; i++) {
        char key[32];
        snprintf(key, sizeof key, "c%d", i);
        once_reserve_req req = th_req("sync", key, 60000);
        memset(&r, 0, sizeof r);
        th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
        once_reservation_free(&r);
    }
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wal_is_checkpointed, th_setup_file, th_teardown),
        cmocka_unit_test_setup_teardown(test_wal_is_bounded, th_setup_file, th_teardown),
        cmocka_unit_test_setup_teardown(test_wal_bound_holds_against_large_commits, th_setup_file, th_teardown),
        cmocka_unit_test_setup_teardown(test_one_large_commit_does_not_shrink_the_bound, th_setup_file, th_teardown),
        cmocka_unit_test_setup_teardown(test_wal_bytes_of_other_stores, th_setup_mem, th_teardown),
#ifdef ONCE_FAULT_INJECTION
        cmocka_unit_test_setup_teardown(test_checkpointer_sync_failure_is_sticky, th_setup_file, th_teardown),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
