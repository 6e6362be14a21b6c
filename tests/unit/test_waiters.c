/*
 * test_waiters.c — src/server/core/waiters.c, the requests parked on
 * `Prefer: wait` (docs/guarantees.md), on a real SQLite store: a waiter is
 * settled once its action leaves the live pending state (completed,
 * released, its lease run out), times out at its deadline otherwise, and
 * either way exactly one of its callbacks runs exactly once, on the waiter
 * thread; waiters_stop answers everything still waiting; adds after the stop
 * fail. And the two things every room that waits shares: which reservation
 * answers park (waiters_park) and how Prefer: wait=N reads
 * (waiters_prefer_wait).
 */
#include "helpers.h"

#include <pthread.h>
#include <stdatomic.h>

#include "common/clock.h"
#include "server/core/services.h"
#include "server/core/waiters.h"

#define WAIT_MS 10000 /* the longest any wait here takes before the test fails */
#define NW 12

typedef struct wrec {
    atomic_int settled;
    atomic_int timeouts;
    int64_t at;        /* clock_mono_ms when the (last) callback ran */
    pthread_t thread;  /* where it ran */
} wrec;

typedef struct wenv {
    th_env *e;
    server srv; /* only what waiters.c reads: the store */
    waiters *w;
    int stopped;
    wrec rec[NW];
} wenv;

static void on_settled(void *state)
{
    wrec *r = state;
    r->at = clock_mono_ms();
    r->thread = pthread_self();
    atomic_fetch_add(&r->settled, 1);
}

static void on_timeout(void *state)
{
    wrec *r = state;
    r->at = clock_mono_ms();
    r->thread = pthread_self();
    atomic_fetch_add(&r->timeouts, 1);
}

static int ended(const wrec *r)
{
    return atomic_load(&r->settled) + atomic_load(&r->timeouts);
}

/* Waits (bounded) until the waiter of r answered; 1 if it did. */
static int wait_answered(const wrec *r)
{
    int64_t deadline = clock_mono_ms() + WAIT_MS;
    while (ended(r) == 0 && clock_mono_ms() < deadline)
        th_sleep_ms(5);
    return ended(r) > 0;
}

static void add(wenv *v, const char *key, int i, int64_t wait_ms)
{
    assert_int_equal(waiters_add(v->w, "s", key, &v->rec[i], clock_mono_ms() + wait_ms, on_settled, on_timeout), 0);
}

static void stop(wenv *v)
{
    waiters_stop(v->w);
    v->stopped = 1;
}

static int setup(void **state)
{
    wenv *v = calloc(1, sizeof *v);
    assert_non_null(v);
    v->e = th_env_new(TH_FILE);
    v->srv.store = v->e->st;
    assert_int_equal(waiters_start(&v->srv, &v->w), 0);
    *state = v;
    return 0;
}

static int teardown(void **state)
{
    wenv *v = *state;
    if (!v->stopped)
        waiters_stop(v->w);
    waiters_free(v->w);
    th_env_free(v->e);
    free(v);
    return 0;
}

/* Every answered waiter ran one callback once, on one thread that is not
 * this one. */
static void assert_once_elsewhere(wenv *v, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(ended(&v->rec[i]), 1);
        assert_false(pthread_equal(v->rec[i].thread, pthread_self()));
        assert_true(pthread_equal(v->rec[i].thread, v->rec[0].thread));
    }
}

/* Waiters on a pending action wait; its completion settles every one of
 * them, once. */
static void test_settled_on_complete(void **state)
{
    wenv *v = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    th_reserve_new(v->e->st, "s", "k", tok, 1);
    for (int i = 0; i < NW; i++)
        add(v, "k", i, 30000);
    th_sleep_ms(200); /* several rounds: still pending, nobody answered */
    for (int i = 0; i < NW; i++)
        assert_int_equal(ended(&v->rec[i]), 0);
    once_response resp = th_resp();
    th_assert_rc(once_complete(v->e->st, "s", "k", tok, &resp, NULL), 0);
    for (int i = 0; i < NW; i++)
        if (!wait_answered(&v->rec[i]))
            fail_msg("waiter %d not settled within %d ms of the completion", i, WAIT_MS);
    th_sleep_ms(100); /* and nothing runs twice */
    for (int i = 0; i < NW; i++)
        assert_int_equal(atomic_load(&v->rec[i].settled), 1);
    assert_once_elsewhere(v, NW);
}

/* A release (certainly not done) leaves pending too. */
static void test_settled_on_release(void **state)
{
    wenv *v = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    th_reserve_new(v->e->st, "s", "k", tok, 1);
    add(v, "k", 0, 30000);
    th_sleep_ms(100);
    assert_int_equal(ended(&v->rec[0]), 0);
    th_assert_rc(once_release(v->e->st, "s", "k", tok, "refused"), 0);
    assert_true(wait_answered(&v->rec[0]));
    assert_int_equal(atomic_load(&v->rec[0].settled), 1);
    assert_int_equal(atomic_load(&v->rec[0].timeouts), 0);
}

/* A pending action whose lease ran out is no one's any more: settled
 * (the waiter's retry takes it over), not held to the deadline. */
static void test_settled_on_lease_expiry(void **state)
{
    wenv *v = *state;
    once_reserve_req req = th_req("s", "k", 300);
    once_reservation r;
    th_reserve_expect(v->e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    int64_t t0 = clock_mono_ms();
    add(v, "k", 0, 30000);
    assert_true(wait_answered(&v->rec[0]));
    assert_int_equal(atomic_load(&v->rec[0].settled), 1);
    assert_int_equal(atomic_load(&v->rec[0].timeouts), 0);
    assert_true(v->rec[0].at - t0 >= 200); /* not before the lease ran out (less the clocks' skew) */
}

/* A waiter on an action that stays pending times out at its deadline:
 * not before it, and not much after (rounds are POLL_MS apart). */
static void test_timeout_at_deadline(void **state)
{
    wenv *v = *state;
    th_reserve_new(v->e->st, "s", "k", NULL, 1);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(waiters_add(v->w, "s", "k", &v->rec[0], t0 + 300, on_settled, on_timeout), 0);
    assert_int_equal(waiters_add(v->w, "s", "k", &v->rec[1], t0 + 900, on_settled, on_timeout), 0);
    assert_true(wait_answered(&v->rec[0]));
    assert_int_equal(atomic_load(&v->rec[0].timeouts), 1);
    assert_int_equal(atomic_load(&v->rec[0].settled), 0);
    assert_true(v->rec[0].at >= t0 + 300);
    assert_true(v->rec[0].at < t0 + 300 + 2000);
    assert_int_equal(ended(&v->rec[1]), 0); /* its own deadline is later */
    assert_true(wait_answered(&v->rec[1]));
    assert_int_equal(atomic_load(&v->rec[1].timeouts), 1);
    assert_true(v->rec[1].at >= t0 + 900);
    th_sleep_ms(100);
    assert_once_elsewhere(v, 2);
    assert_int_equal(th_state(v->e->st, "s", "k"), ONCE_STATE_PENDING);
}

/* waiters_stop answers (times out) everything still waiting, once, before
 * it returns; an add after the stop fails and nothing of it ever runs. */
static void test_stop_answers_all_then_refuses(void **state)
{
    wenv *v = *state;
    th_reserve_new(v->e->st, "s", "k", NULL, 1);
    th_reserve_new(v->e->st, "s", "k2", NULL, 1);
    for (int i = 0; i < NW - 2; i++)
        add(v, i % 2 ? "k" : "k2", i, 60000);
    th_sleep_ms(100); /* these wait in the kept list, ... */
    add(v, "k", NW - 2, 60000); /* ... this one is posted, not yet in a round */
    int64_t t0 = clock_mono_ms();
    stop(v);
    assert_true(clock_mono_ms() - t0 < WAIT_MS); /* not the 60 s deadlines */
    for (int i = 0; i < NW - 1; i++) {
        assert_int_equal(atomic_load(&v->rec[i].timeouts), 1);
        assert_int_equal(atomic_load(&v->rec[i].settled), 0);
    }
    assert_once_elsewhere(v, NW - 1);
    assert_int_equal(waiters_add(v->w, "s", "k", &v->rec[NW - 1], clock_mono_ms() + 100, on_settled, on_timeout),
                     -1);
    th_sleep_ms(200);
    assert_int_equal(ended(&v->rec[NW - 1]), 0);
}

/* A waiter on an action that does not exist is answered at once (settled:
 * its retry then meets what the store says). */
static void test_missing_action_settled(void **state)
{
    wenv *v = *state;
    add(v, "nothing-here", 0, 30000);
    assert_true(wait_answered(&v->rec[0]));
    assert_int_equal(atomic_load(&v->rec[0].settled), 1);
    assert_int_equal(atomic_load(&v->rec[0].timeouts), 0);
}

/* Only a row that may still change parks, and only with wait left: in
 * flight, or awaiting a decision the caller may wait for. The parked ones
 * then wait like any waiter (here until the stop). */
static void test_park_only_what_may_change(void **state)
{
    wenv *v = *state;
    th_reserve_new(v->e->st, "s", "k", NULL, 1);
    int64_t later = clock_mono_ms() + 60000;
    static const once_reserve_status answered_now[] = {ONCE_RESERVED, ONCE_COMPLETED, ONCE_UNKNOWN,
                                                       ONCE_HELD,     ONCE_DENIED,    ONCE_OVER_LIMIT};
    for (size_t i = 0; i < sizeof answered_now / sizeof *answered_now; i++)
        assert_int_equal(waiters_park(v->w, "s", "k", answered_now[i], 1, &v->rec[0], later, on_settled, on_timeout),
                         0);
    /* no wait asked (0), or none left */
    assert_int_equal(waiters_park(v->w, "s", "k", ONCE_IN_FLIGHT, 1, &v->rec[0], 0, on_settled, on_timeout), 0);
    assert_int_equal(waiters_park(v->w, "s", "k", ONCE_IN_FLIGHT, 1, &v->rec[0], clock_mono_ms() - 1, on_settled,
                                  on_timeout),
                     0);
    /* a decision this caller may not wait for */
    assert_int_equal(
        waiters_park(v->w, "s", "k", ONCE_AWAITING_APPROVAL, 0, &v->rec[0], later, on_settled, on_timeout), 0);
    th_sleep_ms(100);
    assert_int_equal(ended(&v->rec[0]), 0); /* nothing of the refused ones runs */
    assert_int_equal(waiters_park(v->w, "s", "k", ONCE_IN_FLIGHT, 0, &v->rec[1], later, on_settled, on_timeout), 1);
    assert_int_equal(
        waiters_park(v->w, "s", "k", ONCE_AWAITING_APPROVAL, 1, &v->rec[2], later, on_settled, on_timeout), 1);
    th_sleep_ms(100);
    assert_int_equal(ended(&v->rec[1]) + ended(&v->rec[2]), 0); /* still in flight: they wait */
    stop(v);
    assert_int_equal(atomic_load(&v->rec[1].timeouts), 1);
    assert_int_equal(atomic_load(&v->rec[2].timeouts), 1);
    assert_int_equal(ended(&v->rec[0]), 0);
}

/* Prefer: wait=N: seconds, at most 60, as milliseconds; anything else is no
 * wait (a preference, never an error). */
static void test_prefer_wait_parse(void **state)
{
    (void)state;
    assert_int_equal(waiters_prefer_wait(NULL), 0);
    assert_int_equal(waiters_prefer_wait(""), 0);
    assert_int_equal(waiters_prefer_wait("respond-async"), 0);
    assert_int_equal(waiters_prefer_wait("wait=5"), 5000);
    assert_int_equal(waiters_prefer_wait("WAIT=1"), 1000);
    assert_int_equal(waiters_prefer_wait("respond-async, wait=10"), 10000);
    assert_int_equal(waiters_prefer_wait("wait=60"), 60000);
    assert_int_equal(waiters_prefer_wait("wait=61"), 60000);
    assert_int_equal(waiters_prefer_wait("wait=99999999999999999999"), 60000);
    assert_int_equal(waiters_prefer_wait("wait=0"), 0);
    assert_int_equal(waiters_prefer_wait("wait=-3"), 0);
    assert_int_equal(waiters_prefer_wait("wait=abc"), 0);
    assert_int_equal(waiters_prefer_wait("wait="), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_settled_on_complete),
        T(test_settled_on_release),
        T(test_settled_on_lease_expiry),
        T(test_timeout_at_deadline),
        T(test_stop_answers_all_then_refuses),
        T(test_missing_action_settled),
        T(test_park_only_what_may_change),
        cmocka_unit_test(test_prefer_wait_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
