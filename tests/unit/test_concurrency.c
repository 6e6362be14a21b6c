/*
 * test_concurrency.c — many threads on one store: the unique constraint
 * decides races; replays are byte-identical; fencing holds under races.
 * Worker threads never call cmocka asserts: they record results, and the
 * main thread checks them.
 */
#include "helpers.h"

#include <pthread.h>

#define NTHREADS 64
#define S "race"

typedef struct shared {
    once_store *st;
    pthread_barrier_t barrier;
    const char *key;
} shared;

typedef struct worker {
    shared *sh;
    int idx;
    int rc;
    once_reservation r;
    /* for the distinct-key test */
    int nkeys;
    int fails;
} worker;

static void *reserve_same(void *arg)
{
    worker *w = arg;
    once_reserve_req req = th_req(S, w->sh->key, 60000);
    pthread_barrier_wait(&w->sh->barrier);
    memset(&w->r, 0, sizeof w->r);
    w->rc = once_reserve(w->sh->st, &req, &w->r);
    return NULL;
}

static void run_threads(shared *sh, worker *ws, void *(*fn)(void *))
{
    pthread_t th[NTHREADS];
    assert_int_equal(pthread_barrier_init(&sh->barrier, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++) {
        ws[i].sh = sh;
        ws[i].idx = i;
        assert_int_equal(pthread_create(&th[i], NULL, fn, &ws[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&sh->barrier);
}

/* 64 threads reserve one key at once: exactly one RESERVED, 63 IN_FLIGHT
 * with the winner's lease; after complete, all 64 see COMPLETED with a
 * byte-identical response. */
static void test_same_key_race(void **state)
{
    th_env *e = *state;
    shared sh = {.st = e->st, .key = "order-42"};
    worker *ws = calloc(NTHREADS, sizeof *ws);
    assert_non_null(ws);

    run_threads(&sh, ws, reserve_same);
    int reserved = 0, in_flight = 0, winner = -1;
    for (int i = 0; i < NTHREADS; i++) {
        if (ws[i].rc != 0)
            fail_msg("thread %d: rc %d (%s)", i, ws[i].rc, once_strerror(ws[i].rc));
        if (ws[i].r.status == ONCE_RESERVED) {
            reserved++;
            winner = i;
        } else if (ws[i].r.status == ONCE_IN_FLIGHT) {
            in_flight++;
        } else {
            fail_msg("thread %d: status %d", i, (int)ws[i].r.status);
        }
    }
    assert_int_equal(reserved, 1);
    assert_int_equal(in_flight, NTHREADS - 1);
    const once_reservation *win = &ws[winner].r;
    assert_true(th_is_hex_token(win->token));
    assert_int_equal(win->attempt, 1);
    for (int i = 0; i < NTHREADS; i++) {
        if (i == winner)
            continue;
        assert_int_equal(ws[i].r.attempt, 1);
        assert_int_equal(ws[i].r.lease_expires_at, win->lease_expires_at);
        assert_int_not_equal(strcmp(ws[i].r.token, win->token), 0);
        assert_int_equal(ws[i].r.action.state, ONCE_STATE_PENDING);
    }

    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, sh.key, win->token, &resp, "prov-42"), 0);
    for (int i = 0; i < NTHREADS; i++)
        once_reservation_free(&ws[i].r);

    once_action stored;
    th_get(e->st, S, sh.key, &stored);
    assert_int_equal(stored.state, ONCE_STATE_COMPLETED);
    assert_int_equal(stored.attempt, 1);

    run_threads(&sh, ws, reserve_same);
    for (int i = 0; i < NTHREADS; i++) {
        if (ws[i].rc != 0)
            fail_msg("thread %d: rc %d (%s)", i, ws[i].rc, once_strerror(ws[i].rc));
        assert_int_equal(ws[i].r.status, ONCE_COMPLETED);
        assert_int_equal(ws[i].r.fingerprint_mismatch, 0);
        assert_int_equal(ws[i].r.action.has_response, 1);
        th_assert_response_eq(&ws[i].r.action.response, &resp);
        th_assert_action_eq(&ws[i].r.action, &stored);
        once_reservation_free(&ws[i].r);
    }
    once_action_free(&stored);
    free(ws);
}

static void *reserve_distinct(void *arg)
{
    worker *w = arg;
    char key[64];
    pthread_barrier_wait(&w->sh->barrier);
    for (int k = 0; k < w->nkeys; k++) {
        snprintf(key, sizeof key, "t%02d-k%03d", w->idx, k);
        once_reserve_req req = th_req(S, key, 60000);
        once_reservation r;
        memset(&r, 0, sizeof r);
        int rc = once_reserve(w->sh->st, &req, &r);
        if (rc != 0 || r.status != ONCE_RESERVED || r.attempt != 1) {
            w->fails++;
        } else if (k % 2 == 0) {
            /* complete half of them from the same thread */
            if (once_complete(w->sh->st, S, key, r.token, NULL, NULL) != 0)
                w->fails++;
        }
        once_reservation_free(&r);
    }
    return NULL;
}

static size_t g_hook_batches;
static size_t g_hook_ops;
static int g_hook_bad;
static pthread_mutex_t g_hook_mu = PTHREAD_MUTEX_INITIALIZER;

static void hook(void *ctx, size_t batch, double seconds)
{
    pthread_mutex_lock(&g_hook_mu);
    if (ctx != &g_hook_batches || batch == 0 || seconds < 0)
        g_hook_bad = 1;
    g_hook_batches++;
    g_hook_ops += batch;
    pthread_mutex_unlock(&g_hook_mu);
}

/* 64 threads reserving distinct keys all get RESERVED; every row is there
 * once with the right state; the commit hook sees the writes. */
static void test_distinct_keys(void **state)
{
    th_env *e = *state;
    enum { NK = 8 };
    g_hook_batches = g_hook_ops = 0;
    g_hook_bad = 0;
    once_store_set_commit_hook(e->st, hook, &g_hook_batches);
    shared sh = {.st = e->st, .key = NULL};
    worker *ws = calloc(NTHREADS, sizeof *ws);
    assert_non_null(ws);
    for (int i = 0; i < NTHREADS; i++)
        ws[i].nkeys = NK;
    run_threads(&sh, ws, reserve_distinct);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(ws[i].fails, 0);

    size_t total = 0, completed = 0, pending = 0;
    once_list_req lr = {.limit = 1000};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    total = l.count;
    for (size_t i = 0; i < l.count; i++) {
        if (l.items[i].state == ONCE_STATE_COMPLETED)
            completed++;
        else if (l.items[i].state == ONCE_STATE_PENDING)
            pending++;
    }
    assert_string_equal(l.next, "");
    once_action_list_free(&l);
    assert_int_equal(total, NTHREADS * NK);
    assert_int_equal(completed, NTHREADS * NK / 2);
    assert_int_equal(pending, NTHREADS * NK / 2);

    once_store_set_commit_hook(e->st, NULL, NULL);
    pthread_mutex_lock(&g_hook_mu);
    assert_int_equal(g_hook_bad, 0);
    assert_true(g_hook_batches >= 1);
    /* every reserve and complete is a durable write */
    assert_true(g_hook_ops >= (size_t)(NTHREADS * NK + NTHREADS * NK / 2));
    pthread_mutex_unlock(&g_hook_mu);
    free(ws);
}

typedef struct fence_arg {
    once_store *st;
    pthread_barrier_t *barrier;
    const char *key;
    const char *token;
    int op; /* 0 complete, 1 release, 2 mark_unknown */
    int rc;
} fence_arg;

static void *fence_worker(void *arg)
{
    fence_arg *f = arg;
    once_response resp = {.status = 200, .body = (uint8_t *)"x", .body_len = 1};
    pthread_barrier_wait(f->barrier);
    if (f->op == 0)
        f->rc = once_complete(f->st, S, f->key, f->token, &resp, NULL);
    else if (f->op == 1)
        f->rc = once_release(f->st, S, f->key, f->token, "r");
    else
        f->rc = once_mark_unknown(f->st, S, f->key, f->token, "u");
    return NULL;
}

/* Racing outcomes on attempt 2: 9 threads with the current token (3 each of
 * complete, release, mark_unknown) and 3 with attempt 1's token. The stale
 * ones always get ONCE_ESTALE. The current ones end COMPLETED (complete
 * first, or a late completion after mark_unknown: releases all ONCE_ESTATE,
 * completes all 0) or RELEASED (releases all 0, the rest ONCE_ESTATE). */
static void test_outcome_race(void **state)
{
    th_env *e = *state;
    for (int round = 0; round < 6; round++) {
        char key[16], t1[33], t2[33];
        snprintf(key, sizeof key, "fenced-%d", round);
        th_reserve_new(e->st, S, key, t1, 1);
        th_assert_rc(once_release(e->st, S, key, t1, NULL), 0);
        th_reserve_new(e->st, S, key, t2, 2);

        enum { N = 12 };
        pthread_barrier_t b;
        assert_int_equal(pthread_barrier_init(&b, NULL, N), 0);
        fence_arg fa[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            fa[i] = (fence_arg){.st = e->st, .barrier = &b, .key = key, .op = i % 3,
                                .token = i < 9 ? t2 : t1};
            assert_int_equal(pthread_create(&th[i], NULL, fence_worker, &fa[i]), 0);
        }
        for (int i = 0; i < N; i++)
            assert_int_equal(pthread_join(th[i], NULL), 0);
        pthread_barrier_destroy(&b);

        for (int i = 9; i < N; i++)
            if (fa[i].rc != ONCE_ESTALE)
                fail_msg("stale op %d: rc %d, want ONCE_ESTALE", fa[i].op, fa[i].rc);
        once_action a;
        th_get(e->st, S, key, &a);
        assert_int_equal(a.attempt, 2);
        if (a.state == ONCE_STATE_COMPLETED) {
            for (int i = 0; i < 9; i++) {
                if (fa[i].op == 0 && fa[i].rc != 0)
                    fail_msg("complete: rc %d, want 0", fa[i].rc);
                if (fa[i].op == 1 && fa[i].rc != ONCE_ESTATE)
                    fail_msg("release after complete/unknown: rc %d, want ONCE_ESTATE", fa[i].rc);
                if (fa[i].op == 2 && fa[i].rc != 0 && fa[i].rc != ONCE_ESTATE)
                    fail_msg("mark_unknown: rc %d, want 0 or ONCE_ESTATE", fa[i].rc);
            }
            assert_int_equal(a.has_response, 1);
            assert_int_equal(a.response.status, 200);
        } else if (a.state == ONCE_STATE_RELEASED) {
            for (int i = 0; i < 9; i++) {
                int want = fa[i].op == 1 ? 0 : ONCE_ESTATE;
                if (fa[i].rc != want)
                    fail_msg("op %d after release: rc %d, want %d", fa[i].op, fa[i].rc, want);
            }
        } else {
            fail_msg("final state %d: want completed or released", (int)a.state);
        }
        once_action_free(&a);
    }
}

/* Readers (get / list) racing with writers see consistent rows. */
typedef struct rw_arg {
    once_store *st;
    int writer;
    int errors;
    volatile int *stop;
} rw_arg;

static void *rw_worker(void *arg)
{
    rw_arg *a = arg;
    char key[32];
    if (a->writer) {
        for (int i = 0; i < 40; i++) {
            snprintf(key, sizeof key, "w%d-%d", a->writer, i);
            once_reserve_req req = th_req("rw", key, 60000);
            once_reservation r;
            memset(&r, 0, sizeof r);
            if (once_reserve(a->st, &req, &r) != 0 || r.status != ONCE_RESERVED)
                a->errors++;
            else if (once_complete(a->st, "rw", key, r.token, NULL, "p") != 0)
                a->errors++;
            once_reservation_free(&r);
        }
    } else {
        while (!*a->stop) {
            once_list_req lr = {.scope = "rw", .limit = 1000};
            once_action_list l;
            memset(&l, 0, sizeof l);
            if (once_list(a->st, &lr, &l) != 0) {
                a->errors++;
                break;
            }
            for (size_t i = 0; i < l.count; i++) {
                once_action g;
                memset(&g, 0, sizeof g);
                if (once_get(a->st, "rw", l.items[i].key, &g) != 0)
                    a->errors++;
                else if (g.attempt != 1 || strcmp(g.scope, "rw") != 0 ||
                         (g.state != ONCE_STATE_PENDING && g.state != ONCE_STATE_COMPLETED))
                    a->errors++;
                once_action_free(&g);
                if (i >= 5)
                    break;
            }
            once_action_list_free(&l);
        }
    }
    return NULL;
}

static void test_readers_and_writers(void **state)
{
    th_env *e = *state;
    enum { NW = 4, NR = 4 };
    volatile int stop = 0;
    rw_arg args[NW + NR];
    pthread_t th[NW + NR];
    for (int i = 0; i < NW + NR; i++) {
        args[i] = (rw_arg){.st = e->st, .writer = i < NW ? i + 1 : 0, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, rw_worker, &args[i]), 0);
    }
    for (int i = 0; i < NW; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    stop = 1;
    for (int i = NW; i < NW + NR; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < NW + NR; i++)
        assert_int_equal(args[i].errors, 0);
    once_list_req lr = {.scope = "rw", .state = ONCE_STATE_COMPLETED, .limit = 1000};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    assert_int_equal(l.count, NW * 40);
    once_action_list_free(&l);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)
/* P(f): f on a PostgreSQL schema of its own (helpers.h; skipped without ONCE_TEST_PG_URL). */

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_same_key_race),
        M(test_same_key_race),
        P(test_same_key_race),
        T(test_distinct_keys),
        M(test_distinct_keys),
        P(test_distinct_keys),
        T(test_outcome_race),
        M(test_outcome_race),
        P(test_outcome_race),
        T(test_readers_and_writers),
        M(test_readers_and_writers),
        P(test_readers_and_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
