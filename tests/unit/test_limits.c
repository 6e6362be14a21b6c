/*
 * test_limits.c — agents and limits (once.h: once_reserve_req.agent and
 * charges, once_limit_use, once_event_claim_as; issue 28): the agent of an
 * attempt stored and listed, budgets drawn only by new attempts and given
 * back when they are released or denied, OVER_LIMIT with when to retry,
 * windows that let room come back, over-limit approvals, concurrent
 * reservations that never pass a limit (on one store, and through two
 * PostgreSQL handles), and stores migrated from the schema before; on
 * SQLite (file and memory) and on PostgreSQL.
 */
#include "helpers.h"
#include "schema_at.h"

#include <math.h>
#include <pthread.h>
#include <sqlite3.h>

#include "store/pg_schema.h"
#include "store/sqlite_schema.h"

#define S "pay"
#define HOUR_MS 3600000LL
#define LIMIT_COUNT "bot-1\ncount(*) <= 3 per 1h"

/* A charge of amount on limit (window_ms, max). */
static once_limit_charge charge(const char *limit, int64_t window_ms, double max, double amount)
{
    once_limit_charge c = {limit, window_ms, max, amount};
    return c;
}

/* A request of (S, key) by agent that draws the n charges c. */
static once_reserve_req limited_req(const char *key, const char *agent, const once_limit_charge *c, size_t n)
{
    once_reserve_req r = th_req(S, key, 60000);
    r.agent = agent;
    r.charges = c;
    r.ncharges = n;
    return r;
}

/* Reserves key with the charges; asserts status, and returns the answer
 * (to free) in *out. */
static void reserve_charged(once_store *st, const char *key, const once_limit_charge *c, size_t n,
                            once_reserve_status want, once_reservation *out)
{
    once_reserve_req req = limited_req(key, "bot-1", c, n);
    th_reserve_expect(st, &req, want, out);
}

/* What once_limit_use says of limit now. */
static double use_of(once_store *st, const char *limit, int64_t window_ms, int64_t *retry)
{
    double used = -1;
    int64_t r = -2;
    th_assert_rc(once_limit_use(st, limit, window_ms, &used, &r), 0);
    if (retry)
        *retry = r;
    return used;
}

/* ---- the agent ---- */

static size_t count_listed(once_store *st, const char *agent)
{
    once_list_req lr = {0};
    lr.agent = agent;
    once_action_list l;
    th_assert_rc(once_list(st, &lr, &l), 0);
    size_t n = l.count;
    once_action_list_free(&l);
    return n;
}

/* The agent is kept with the attempt that it asked for, listed by it, and
 * replaced by the agent of a new attempt; events name their claimer. */
static void test_agent(void **state)
{
    th_env *e = *state;
    once_reserve_req req = limited_req("a", "bot-1", NULL, 0);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    th_reserve_new(e->st, S, "nobody", NULL, 1);

    once_action a;
    th_get(e->st, S, "a", &a);
    th_assert_str(a.agent, "bot-1");
    assert_int_equal(a.waits_for_limit, 0);
    once_action_free(&a);
    th_get(e->st, S, "nobody", &a);
    assert_null(a.agent);
    once_action_free(&a);
    assert_int_equal(count_listed(e->st, "bot-1"), 1);
    assert_int_equal(count_listed(e->st, "bot-2"), 0);
    assert_int_equal(count_listed(e->st, NULL), 2);

    /* a replay by another agent changes nothing; a new attempt replaces it */
    req.agent = "bot-2";
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
    th_assert_str(r.action.agent, "bot-1");
    once_reservation_free(&r);
    th_assert_rc(once_release(e->st, S, "a", tok, "not sent"), 0);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    th_get(e->st, S, "a", &a);
    th_assert_str(a.agent, "bot-2");
    once_action_free(&a);
    assert_int_equal(count_listed(e->st, "bot-1"), 0);
    assert_int_equal(count_listed(e->st, "bot-2"), 1);

    /* refused names */
    once_list_req lr = {0};
    lr.agent = "bot 1";
    once_action_list l;
    th_assert_rc(once_list(e->st, &lr, &l), ONCE_EINVAL);
    req.agent = "";
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);

    /* events: the claimer is kept, and shown */
    once_event_in ev = {.source = "hooks", .event_id = "e1", .body = (const uint8_t *)"{}", .body_len = 2};
    int inserted = 0;
    th_assert_rc(once_event_insert(e->st, &ev, &inserted), 0);
    once_event_list el;
    th_assert_rc(once_event_claim_as(e->st, "hooks", "bot-1", 10, 30000, &el), 0);
    assert_int_equal(el.count, 1);
    th_assert_str(el.items[0].claimed_by, "bot-1");
    once_event_list_free(&el);
    once_event got;
    th_assert_rc(once_event_get(e->st, "hooks", "e1", &got), 0);
    th_assert_str(got.claimed_by, "bot-1");
    once_event_free(&got);
    th_assert_rc(once_event_claim_as(e->st, "hooks", "bot 1", 10, 30000, &el), ONCE_EINVAL);
    th_assert_rc(once_event_redeliver(e->st, "hooks", "e1"), 0);
    th_assert_rc(once_event_claim(e->st, "hooks", 10, 30000, &el), 0);
    assert_int_equal(el.count, 1);
    assert_null(el.items[0].claimed_by);
    once_event_list_free(&el);
}

/* ---- counts ---- */

/* count(*) <= 3 per hour: three fit, the fourth is refused with when to
 * retry; a replay never draws, a release and a denial give back, an
 * unknown action stays counted. */
static void test_count(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge(LIMIT_COUNT, HOUR_MS, 3, 1);
    once_reservation r;
    char tok[3][ONCE_TOKEN_LEN + 1];
    const char *keys[] = {"k1", "k2", "k3"};
    for (int i = 0; i < 3; i++) {
        reserve_charged(e->st, keys[i], &c, 1, ONCE_RESERVED, &r);
        memcpy(tok[i], r.token, sizeof tok[i]);
        once_reservation_free(&r);
    }
    reserve_charged(e->st, "k4", &c, 1, ONCE_OVER_LIMIT, &r);
    assert_int_equal(r.over_limit, 0);
    assert_true(r.retry_after_ms > 0 && r.retry_after_ms <= HOUR_MS + HOUR_MS / 60);
    assert_null(r.action.key);
    once_reservation_free(&r);
    once_action a;
    th_assert_rc(once_get(e->st, S, "k4", &a), ONCE_ENOTFOUND); /* nothing written */
    int64_t retry;
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, &retry) - 3) < 1e-9);
    assert_true(retry > 0 && retry <= HOUR_MS + HOUR_MS / 60);

    /* a completed key replays, twice, and never draws or is refused */
    th_assert_rc(once_complete(e->st, S, "k1", tok[0], NULL, "p-1"), 0);
    for (int i = 0; i < 2; i++) {
        reserve_charged(e->st, "k1", &c, 1, ONCE_COMPLETED, &r);
        once_reservation_free(&r);
    }
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 3) < 1e-9);
    /* a conflict neither */
    reserve_charged(e->st, "k2", &c, 1, ONCE_IN_FLIGHT, &r);
    once_reservation_free(&r);

    /* a release gives back: the fourth fits */
    th_assert_rc(once_release(e->st, S, "k2", tok[1], "not sent"), 0);
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 2) < 1e-9);
    th_assert_rc(once_release(e->st, S, "k2", tok[1], "not sent"), 0); /* repeated: nothing more */
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 2) < 1e-9);
    reserve_charged(e->st, "k4", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);

    /* an unknown action stays counted */
    th_assert_rc(once_mark_unknown(e->st, S, "k3", tok[2], "timeout"), 0);
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 3) < 1e-9);
    reserve_charged(e->st, "k5", &c, 1, ONCE_OVER_LIMIT, &r);
    once_reservation_free(&r);
    /* ... until a human says it was not done */
    th_assert_rc(once_resolve(e->st, S, "k3", ONCE_OUTCOME_RELEASED, NULL, "checked"), 0);
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 2) < 1e-9);

    /* approvals draw when the row is written, and a denial gives back, as
     * does the expiry of an undecided one */
    once_limit_charge one = charge("bot-1\napproved <= 1 per 1h", HOUR_MS, 1, 1);
    once_reserve_req req = limited_req("ap1", "bot-1", &one, 1);
    req.approval_ttl_ms = 60000;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.action.waits_for_limit, 0);
    once_reservation_free(&r);
    req.key = "ap2";
    th_reserve_expect(e->st, &req, ONCE_OVER_LIMIT, &r);
    once_reservation_free(&r);
    th_assert_rc(once_deny(e->st, S, "ap1", "alice", "no"), 0);
    assert_true(fabs(use_of(e->st, one.limit, HOUR_MS, NULL)) < 1e-9);
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    assert_true(fabs(use_of(e->st, one.limit, HOUR_MS, NULL) - 1) < 1e-9);
    size_t n = 0;
    th_assert_rc(once_expire_approvals(e->st, NULL, once_now_ms() + 120000, &n), 0);
    assert_int_equal(n, 1);
    assert_true(fabs(use_of(e->st, one.limit, HOUR_MS, NULL)) < 1e-9);
}

/* ---- sums ---- */

/* sum(amount) <= 100: 60 and 40 fit, one more is refused (the index names
 * the charge), and 150 can never fit (-1). */
static void test_sum(void **state)
{
    th_env *e = *state;
    once_limit_charge c[2] = {charge(LIMIT_COUNT, HOUR_MS, 1000, 1), charge("bot-1\nsum(amount) <= 100", HOUR_MS,
                                                                          100, 60)};
    once_reservation r;
    reserve_charged(e->st, "s1", c, 2, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    c[1].amount = 40;
    reserve_charged(e->st, "s2", c, 2, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    c[1].amount = 1;
    reserve_charged(e->st, "s3", c, 2, ONCE_OVER_LIMIT, &r);
    assert_int_equal(r.over_limit, 1);
    assert_true(r.retry_after_ms > 0);
    once_reservation_free(&r);
    /* nothing of a refused reservation is drawn, not even its first charge */
    assert_true(fabs(use_of(e->st, LIMIT_COUNT, HOUR_MS, NULL) - 2) < 1e-9);
    assert_true(fabs(use_of(e->st, c[1].limit, HOUR_MS, NULL) - 100) < 1e-9);

    once_limit_charge big = charge("bot-1\nsum(amount) <= 100 (b)", HOUR_MS, 100, 150);
    reserve_charged(e->st, "s4", &big, 1, ONCE_OVER_LIMIT, &r);
    assert_int_equal(r.over_limit, 0);
    assert_int_equal(r.retry_after_ms, -1);
    once_reservation_free(&r);

    /* fractions that add up exactly fit exactly */
    once_limit_charge dime = charge("bot-1\nsum <= 0.3", HOUR_MS, 0.3, 0.1);
    const char *dimes[] = {"d1", "d2", "d3"};
    for (int i = 0; i < 3; i++) {
        reserve_charged(e->st, dimes[i], &dime, 1, ONCE_RESERVED, &r);
        once_reservation_free(&r);
    }
    reserve_charged(e->st, "d4", &dime, 1, ONCE_OVER_LIMIT, &r);
    once_reservation_free(&r);
}

/* ---- windows ---- */

/* A window of 1 s (buckets of 16 ms): once full, room comes back after
 * about a second. */
static void test_window(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge("bot-1\n2 per 1s", 1000, 2, 1);
    once_reservation r;
    /* Before the first charge: room comes back a window after that
     * charge's bucket, whatever the two durable reservations cost on a
     * busy machine (taken after them, it failed under load). */
    int64_t start = once_now_ms();
    reserve_charged(e->st, "w1", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    reserve_charged(e->st, "w2", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    reserve_charged(e->st, "w3", &c, 1, ONCE_OVER_LIMIT, &r);
    assert_true(r.retry_after_ms > 0 && r.retry_after_ms <= 1000 + 3 * 16);
    once_reservation_free(&r);
    int64_t used_retry;
    assert_true(fabs(use_of(e->st, c.limit, c.window_ms, &used_retry) - 2) < 1e-9);
    assert_true(used_retry > 0 && used_retry <= 1000 + 3 * 16);
    once_reserve_status got = ONCE_OVER_LIMIT;
    while (got == ONCE_OVER_LIMIT && once_now_ms() - start < 3000) {
        th_sleep_ms(50);
        once_reserve_req req = limited_req("w3", "bot-1", &c, 1);
        th_assert_rc(once_reserve(e->st, &req, &r), 0);
        got = r.status;
        once_reservation_free(&r);
    }
    assert_int_equal(got, ONCE_RESERVED);
    assert_true(once_now_ms() - start >= 900); /* never early by more than the rounding of buckets */
    int64_t retry;
    use_of(e->st, c.limit, c.window_ms, &retry);
    assert_true(retry > 0);
    /* empty: nothing counted, nothing to wait for */
    assert_true(fabs(use_of(e->st, "bot-1\nnever used", HOUR_MS, &retry)) < 1e-9);
    assert_int_equal(retry, 0);
}

/* ---- over-limit approvals ---- */

/* Past a limit with over_limit_approve, the new attempt waits for a person
 * (waits_for_limit, the over-limit deadline) and draws nothing; approved,
 * it is claimed and sent as any approval. */
static void test_over_limit_approve(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge("bot-1\n1 per 1h", HOUR_MS, 1, 1);
    once_reservation r;
    reserve_charged(e->st, "o1", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    once_reserve_req req = limited_req("o2", "bot-1", &c, 1);
    req.over_limit_approve = 1;
    req.over_limit_ttl_ms = 90000;
    int64_t t0 = once_now_ms();
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.action.waits_for_limit, 1);
    assert_int_equal(r.over_limit, 0);
    assert_true(r.retry_after_ms > 0);
    assert_true(r.action.lease_expires_at >= t0 + 90000 && r.action.lease_expires_at <= once_now_ms() + 90000);
    th_assert_str(r.action.agent, "bot-1");
    once_reservation_free(&r);
    assert_true(fabs(use_of(e->st, c.limit, HOUR_MS, NULL) - 1) < 1e-9);
    /* a retry of the key answers the row, nothing drawn */
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    th_assert_rc(once_approve(e->st, S, "o2", "alice", "this once"), 0);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 1);
    assert_string_equal(r.action.key, "o2");
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    th_assert_rc(once_release(e->st, S, "o2", tok, "not sent"), 0);
    assert_true(fabs(use_of(e->st, c.limit, HOUR_MS, NULL) - 1) < 1e-9); /* nothing to give back */
    /* a denied over-limit row gives nothing back either */
    req.key = "o3";
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    th_assert_rc(once_deny(e->st, S, "o3", "alice", NULL), 0);
    assert_true(fabs(use_of(e->st, c.limit, HOUR_MS, NULL) - 1) < 1e-9);
}

/* ---- arguments ---- */

static void test_refusals(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge("bot-1\nx", HOUR_MS, 1, 1);
    once_reserve_req req = limited_req("bad", "bot-1", &c, 1);
    once_reservation r;
    req.ncharges = ONCE_LIMIT_CHARGES_MAX + 1;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    req.ncharges = 1;
    req.charges = NULL;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    req.charges = &c;
    c.window_ms = 999;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.window_ms = ONCE_LIMIT_WINDOW_MAX_MS + 1;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.window_ms = HOUR_MS;
    c.max = 0;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.max = 1;
    c.amount = NAN;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.amount = INFINITY;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.amount = 1;
    c.limit = "bad \xff utf-8";
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    c.limit = "";
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    char longname[ONCE_LIMIT_NAME_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    c.limit = longname;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    longname[ONCE_LIMIT_NAME_MAX] = '\0'; /* exactly the most */
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    c.limit = "bot-1\nx";
    req.key = "bad2";
    req.over_limit_approve = 1;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL); /* no deadline */
    double used;
    int64_t retry;
    th_assert_rc(once_limit_use(e->st, "x", 10, &used, &retry), ONCE_EINVAL);
    th_assert_rc(once_limit_use(e->st, NULL, HOUR_MS, &used, &retry), ONCE_EINVAL);
    assert_int_equal(once_get(e->st, S, "bad2", &(once_action){0}), ONCE_ENOTFOUND);
    assert_string_equal(once_reserve_status_name(ONCE_OVER_LIMIT), "over_limit");
}

/* A limit whose identity holds quotes, backslashes, control characters and
 * non-ASCII UTF-8 is drawn and given back exactly (the row's JSON). */
static void test_odd_names(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge("bot-1\n\"q\" \\ \t \x01 caf\xc3\xa9 \xe2\x82\xac", HOUR_MS, 1, 1);
    once_reservation r;
    reserve_charged(e->st, "n1", &c, 1, ONCE_RESERVED, &r);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    reserve_charged(e->st, "n2", &c, 1, ONCE_OVER_LIMIT, &r);
    once_reservation_free(&r);
    th_assert_rc(once_release(e->st, S, "n1", tok, NULL), 0);
    assert_true(fabs(use_of(e->st, c.limit, HOUR_MS, NULL)) < 1e-9);
    reserve_charged(e->st, "n2", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);
}

/* ---- asynchronous reservations ---- */

typedef struct async_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int rc;
} async_wait;

static void async_cb(void *ctx, int rc, const char *detail)
{
    (void)detail;
    async_wait *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The charges travel with a queued reservation (the op's copy of req). */
static void test_async(void **state)
{
    th_env *e = *state;
    once_limit_charge c = charge("bot-1\nasync 1 per 1h", HOUR_MS, 1, 1);
    once_reserve_status want[] = {ONCE_RESERVED, ONCE_OVER_LIMIT};
    const char *keys[] = {"a1", "a2"};
    for (int i = 0; i < 2; i++) {
        once_reserve_req req = limited_req(keys[i], "bot-1", &c, 1);
        once_reservation r;
        async_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
        th_assert_rc(once_reserve_async(e->st, &req, &r, async_cb, &w), 0);
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        th_assert_rc(w.rc, 0);
        assert_int_equal(r.status, want[i]);
        once_reservation_free(&r);
    }
}

/* ---- concurrency ---- */

#define NTHREADS 8
#define KEYS_PER_THREAD 10
#define CONC_MAX 20

typedef struct racer {
    once_store *st;
    int id;
    int reserved;
    int over;
    int failed;
} racer;

static void *race(void *arg)
{
    racer *rc = arg;
    once_limit_charge c = charge("bot-1\nconcurrent <= 20 per 1h", HOUR_MS, CONC_MAX, 1);
    for (int k = 0; k < KEYS_PER_THREAD; k++) {
        char key[32];
        snprintf(key, sizeof key, "t%d-%d", rc->id, k);
        once_reserve_req req = limited_req(key, "bot-1", &c, 1);
        once_reservation r;
        memset(&r, 0, sizeof r);
        if (once_reserve(rc->st, &req, &r) != 0)
            rc->failed++;
        else if (r.status == ONCE_RESERVED)
            rc->reserved++;
        else if (r.status == ONCE_OVER_LIMIT)
            rc->over++;
        else
            rc->failed++;
        once_reservation_free(&r);
    }
    return NULL;
}

/* Eight threads reserve ten new keys each against 20: exactly 20 go
 * ahead; with two, through two handles (two nodes of one PostgreSQL). */
static void run_race(once_store *a, once_store *b)
{
    racer r[NTHREADS];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        r[i] = (racer){.st = (i % 2 && b) ? b : a, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    int reserved = 0, over = 0, failed = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        reserved += r[i].reserved;
        over += r[i].over;
        failed += r[i].failed;
    }
    assert_int_equal(failed, 0);
    assert_int_equal(reserved, CONC_MAX);
    assert_int_equal(over, NTHREADS * KEYS_PER_THREAD - CONC_MAX);
    assert_true(fabs(use_of(a, "bot-1\nconcurrent <= 20 per 1h", HOUR_MS, NULL) - CONC_MAX) < 1e-9);
}

static void test_concurrent(void **state)
{
    th_env *e = *state;
    run_race(e->st, NULL);
}

static void test_concurrent_two_nodes(void **state)
{
    th_env *e = *state;
    once_store *second = NULL;
    th_assert_rc(once_store_open(e->url, &second), 0);
    run_race(e->st, second);
    once_store_close(second);
}

/* ---- migrations ---- */

/* An action written before agents and limits, as the migrated store reads
 * it: no agent, no charges; and the store draws and gives back. */
static const char old_rows[] =
    "INSERT INTO actions (id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    " expires_at, retention_ms) VALUES (1, 'pay', 'old', 'released', 1, 'tok', 1000, 2000, 3000, 99999999999999,"
    " 86400000);"
    "INSERT INTO events (source, event_id, state, received_at, updated_at, next_at, retention_ms)"
    " VALUES ('hooks', 'old', 'pending', 1, 1, 1, 86400000);";

static void check_migrated(once_store *st)
{
    once_action a;
    th_get(st, S, "old", &a);
    assert_null(a.agent);
    assert_int_equal(a.waits_for_limit, 0);
    assert_int_equal(a.state, ONCE_STATE_RELEASED);
    once_action_free(&a);
    once_event ev;
    th_assert_rc(once_event_get(st, "hooks", "old", &ev), 0);
    assert_null(ev.claimed_by);
    once_event_free(&ev);
    once_limit_charge c = charge("bot-1\nmigrated 1 per 1h", HOUR_MS, 1, 1);
    once_reservation r;
    reserve_charged(st, "old", &c, 1, ONCE_RESERVED, &r);
    assert_int_equal(r.attempt, 2);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    reserve_charged(st, "new", &c, 1, ONCE_OVER_LIMIT, &r);
    once_reservation_free(&r);
    th_assert_rc(once_release(st, S, "old", tok, NULL), 0);
    reserve_charged(st, "new", &c, 1, ONCE_RESERVED, &r);
    once_reservation_free(&r);
}

#define SQ_BEFORE_LIMITS 8
#define PG_BEFORE_LIMITS 7


static void test_migrate_sqlite(void **state)
{
    th_env *e = *state;
    assert_int_equal(sqlite_schema_latest(), SQ_BEFORE_LIMITS + 1);
    th_sqlite_at(e, SQ_BEFORE_LIMITS, old_rows);
    check_migrated(e->st);
}

static void test_migrate_pg(void **state)
{
    th_env *e = *state;
    assert_int_equal(pg_schema_latest(), PG_BEFORE_LIMITS + 1);
    th_pg_at(e, PG_BEFORE_LIMITS, old_rows);
    check_migrated(e->st);
    /* a gateway not yet upgraded reserves through the old signature: no
     * agent, nothing drawn */
    free(th_pg_in_schema(e, "SELECT * FROM once_reserve('pay', 'older', 'cccccccccccccccccccccccccccccccc', 1, 1000, 1000,"
                    " NULL, NULL, false, 0)"));
    once_action a;
    th_get(e->st, S, "older", &a);
    assert_null(a.agent);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    once_action_free(&a);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_agent),
        M(test_agent),
        P(test_agent),
        T(test_count),
        M(test_count),
        P(test_count),
        T(test_sum),
        P(test_sum),
        T(test_window),
        P(test_window),
        T(test_over_limit_approve),
        M(test_over_limit_approve),
        P(test_over_limit_approve),
        M(test_refusals),
        P(test_refusals),
        T(test_odd_names),
        P(test_odd_names),
        T(test_async),
        M(test_async),
        P(test_async),
        T(test_concurrent),
        M(test_concurrent),
        P(test_concurrent),
        P(test_concurrent_two_nodes),
        T(test_migrate_sqlite),
        P(test_migrate_pg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
