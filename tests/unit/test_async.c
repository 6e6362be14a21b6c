/*
 * test_async.c — the asynchronous API (once_reserve_async, once_complete_async,
 * once_release_async, once_mark_unknown_async) and the newer calls:
 * retry_unknown in once_reserve_req, once_hold_unknown and
 * once_store_set_commit_hook.
 *
 * Callbacks run on a store thread and never call cmocka: they record what
 * they saw (under a mutex or with atomics) and the main thread checks it.
 * Every wait is bounded. Everything a callback may touch (its context, the
 * reservation it fills, the request it reads) has static storage, so that a
 * failing test whose callbacks run later (when teardown closes the store)
 * cannot make them write into a dead stack frame.
 *
 * To know that every callback that was going to run has run, tests "flush"
 * the store: a synchronous write that matches nothing (once_expire_leases at
 * time 0) goes through the same single writer after everything queued
 * before it, and the writer calls the callbacks of a batch before it takes
 * the next one. The PostgreSQL store has several writers, so there a flush
 * only shows that the store still works: every test waits for the callbacks
 * it expects before it flushes, and never relies on the flush for ordering.
 *
 * The P entries run the tests on PostgreSQL (ONCE_TEST_PG_URL; skipped
 * without it). PostgreSQL answers replays from a read (once_reserve_async
 * returns 1; SQLite's writer answers them through the callback) and, like a
 * file store, outlives its handle (e->durable).
 */
#include "helpers.h"

#include <pthread.h>
#include <stdatomic.h>

#define WAIT_MS 10000      /* one callback */
#define WAIT_BULK_MS 60000 /* hundreds of callbacks, under ASan on a shared box */

static pthread_t g_main_thread;

/* ---- waiting for callbacks ---------------------------------------------- */

/* What one callback (or a series of callbacks sharing a context) saw. */
typedef struct cbrec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int rc;             /* of the last call */
    int detail_null;    /* a call got detail == NULL */
    char detail[1024];  /* of the last call */
    int on_main;        /* a call ran on the main (test) thread */
    /* The reservation the operation fills, as seen from inside the callback
     * (the header promises *out is filled before cb runs). */
    once_reservation *out;
    int status_at_cb;
    int64_t attempt_at_cb;
    int token_ok_at_cb;
} cbrec;

static void cb_init(cbrec *w, once_reservation *out)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->out = out;
    w->status_at_cb = -1;
}

static void cb_destroy(cbrec *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

static void rec_cb(void *ctx, int rc, const char *detail)
{
    cbrec *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->calls++;
    w->rc = rc;
    if (!detail)
        w->detail_null = 1;
    snprintf(w->detail, sizeof w->detail, "%s", detail ? detail : "");
    if (pthread_equal(pthread_self(), g_main_thread))
        w->on_main = 1;
    if (w->out) {
        w->status_at_cb = (int)w->out->status;
        w->attempt_at_cb = w->out->attempt;
        w->token_ok_at_cb = th_is_hex_token(w->out->token);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits (bounded) until w has been called at least n times; fails the test
 * on a timeout. */
static void cb_wait(cbrec *w, int n, long ms)
{
    struct timespec dl;
    deadline_in(&dl, ms);
    pthread_mutex_lock(&w->mu);
    while (w->calls < n) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT)
            break;
    }
    int calls = w->calls;
    pthread_mutex_unlock(&w->mu);
    if (calls < n)
        fail_msg("callback: %d call(s) within %ld ms, want %d", calls, ms, n);
}

static int cb_calls(cbrec *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->calls;
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* A synchronous write through the writer that changes nothing: once it
 * returns, every operation queued before it has called back. */
static void flush(once_store *st)
{
    size_t n = 99;
    th_assert_rc(once_expire_leases(st, 0, &n), 0);
    assert_int_equal(n, 0);
}

/* Asserts w was called exactly once, off the main thread, with rc want and
 * a non-NULL detail that is empty on success and non-empty on failure. */
static void cb_assert_once(once_store *st, cbrec *w, int want)
{
    cb_wait(w, 1, WAIT_MS);
    flush(st);
    assert_int_equal(cb_calls(w), 1);
    if (w->rc != want)
        fail_msg("callback rc %d (%s), want %d (%s); detail: %s", w->rc, once_strerror(w->rc), want,
                 once_strerror(want), w->detail);
    assert_false(w->detail_null);
    assert_false(w->on_main);
    if (want == 0)
        th_assert_str(w->detail, "");
    else
        assert_true(w->detail[0] != '\0');
}

/* ---- fixtures: rows in each state ----------------------------------------- */

#define S "async"

/* Static so that late callbacks never write into a dead frame. */
static cbrec g_rec[4];
static once_reservation g_out[4];
static once_reserve_req g_req[4];

static void mk_pending(once_store *st, const char *key, char *tok)
{
    th_reserve_new(st, S, key, tok, 1);
}

static void mk_completed(once_store *st, const char *key, const char *fp)
{
    char tok[ONCE_TOKEN_LEN + 1];
    once_reserve_req req = th_req(S, key, 60000);
    req.fingerprint = fp;
    once_reservation r;
    th_reserve_expect(st, &req, ONCE_RESERVED, &r);
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    once_response resp = th_resp();
    th_assert_rc(once_complete(st, S, key, tok, &resp, "prov-1"), 0);
}

static void mk_unknown(once_store *st, const char *scope, const char *key, const char *err, char *tok_out)
{
    char tok[ONCE_TOKEN_LEN + 1];
    once_reserve_req req = th_req(scope, key, 60000);
    once_reservation r;
    th_reserve_expect(st, &req, ONCE_RESERVED, &r);
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    th_assert_rc(once_mark_unknown(st, scope, key, tok, err), 0);
    if (tok_out)
        memcpy(tok_out, tok, sizeof tok);
}

static void mk_held(once_store *st, const char *key, char *tok_out)
{
    mk_unknown(st, S, key, "timeout", tok_out);
    th_assert_rc(once_hold(st, S, key, "needs a human"), 0);
}

static void mk_released(once_store *st, const char *key)
{
    char tok[ONCE_TOKEN_LEN + 1];
    mk_pending(st, key, tok);
    th_assert_rc(once_release(st, S, key, tok, "not sent"), 0);
}

/* ---- once_reserve_async: writes --------------------------------------------- */

/* A new key needs the writer: 0, then the callback once, on another thread,
 * rc 0, with *out already RESERVED when it runs. */
static void test_reserve_async_new(void **state)
{
    th_env *e = *state;
    cbrec *w = &g_rec[0];
    once_reservation *out = &g_out[0];
    memset(out, 0xab, sizeof *out); /* garbage the call must overwrite */
    cb_init(w, out);
    g_req[0] = th_req(S, "new-1", 60000);
    int64_t before = once_now_ms();

    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    assert_int_equal(w->status_at_cb, ONCE_RESERVED);
    assert_int_equal(w->attempt_at_cb, 1);
    assert_true(w->token_ok_at_cb);
    assert_int_equal(out->status, ONCE_RESERVED);
    assert_int_equal(out->attempt, 1);
    assert_true(th_is_hex_token(out->token));
    assert_true(out->lease_expires_at >= before + 60000);
    assert_true(out->lease_expires_at <= once_now_ms() + 60000);

    /* Durable and visible to an ordinary read; the token is the row's. */
    once_action a;
    th_get(e->st, S, "new-1", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 1);
    assert_int_equal(a.lease_expires_at, out->lease_expires_at);
    once_action_free(&a);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, out->token, sizeof tok);
    once_reservation_free(out);
    th_assert_rc(once_complete(e->st, S, "new-1", tok, NULL, NULL), 0);
    assert_int_equal(th_state(e->st, S, "new-1"), ONCE_STATE_COMPLETED);
    if (e->durable) {
        th_env_reopen(e);
        assert_int_equal(th_state(e->st, S, "new-1"), ONCE_STATE_COMPLETED);
    }
    cb_destroy(w);
}

/* A released key needs the writer too: 0, callback, RESERVED attempt 2. */
static void test_reserve_async_released(void **state)
{
    th_env *e = *state;
    mk_released(e->st, "rel-1");
    cbrec *w = &g_rec[0];
    once_reservation *out = &g_out[0];
    cb_init(w, out);
    g_req[0] = th_req(S, "rel-1", 60000);

    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    assert_int_equal(w->status_at_cb, ONCE_RESERVED);
    assert_int_equal(out->status, ONCE_RESERVED);
    assert_int_equal(out->attempt, 2);
    assert_true(th_is_hex_token(out->token));
    once_action a;
    th_get(e->st, S, "rel-1", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 2);
    once_action_free(&a);
    once_reservation_free(out);
    cb_destroy(w);
}

/* ---- once_reserve_async: answers without a write ---------------------------- */

/* Calls once_reserve_async on a row whose answer is want. On PostgreSQL one
 * indexed read answers: 1, *out filled, no callback ever. SQLite sends the
 * reservation to its writer: 0, then one callback with rc 0 and *out
 * filled; or 1 when the replay cache holds the COMPLETED answer. */
static void reserve_async_expect_answer(th_env *e, const once_reserve_req *req, once_reserve_status want)
{
    cbrec *w = &g_rec[1];
    once_reservation *out = &g_out[1];
    memset(out, 0, sizeof *out);
    cb_init(w, out);
    g_req[1] = *req;
    int rc = once_reserve_async(e->st, &g_req[1], out, rec_cb, w);
    if (th_reserve_reads(e) && rc != 1)
        fail_msg("once_reserve_async(%s): rc %d, want 1 (answered by a read); detail: %s", req->key, rc,
                 once_errdetail());
    if (rc == 1) {
        flush(e->st);
        if (cb_calls(w) != 0)
            fail_msg("once_reserve_async(%s) returned 1 but the callback ran %d time(s)", req->key, cb_calls(w));
    } else if (rc == 0) {
        cb_assert_once(e->st, w, 0);
        assert_int_equal(w->status_at_cb, want);
    } else {
        fail_msg("once_reserve_async(%s): rc %d (%s): %s", req->key, rc, once_strerror(rc), once_errdetail());
    }
    if ((int)out->status != (int)want)
        fail_msg("once_reserve_async(%s): status %d, want %d", req->key, (int)out->status, (int)want);
    th_assert_str(out->action.scope, S);
    th_assert_str(out->action.key, req->key);
    cb_destroy(w);
}

static void test_reserve_async_answered(void **state)
{
    th_env *e = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    mk_completed(e->st, "done", "fp-a");
    mk_pending(e->st, "busy", tok);
    mk_unknown(e->st, S, "unk", "timeout", NULL);
    mk_held(e->st, "held", NULL);

    once_action before;
    th_get(e->st, S, "busy", &before);

    once_reserve_req req = th_req(S, "done", 60000);
    req.fingerprint = "fp-a";
    reserve_async_expect_answer(e, &req, ONCE_COMPLETED);
    once_response resp = th_resp();
    assert_true(g_out[1].action.has_response);
    th_assert_response_eq(&g_out[1].action.response, &resp);
    th_assert_str(g_out[1].action.provider_id, "prov-1");
    assert_int_equal(g_out[1].fingerprint_mismatch, 0);
    assert_int_equal(g_out[1].attempt, 1);
    once_reservation_free(&g_out[1]);

    req.fingerprint = "fp-b";
    reserve_async_expect_answer(e, &req, ONCE_COMPLETED);
    assert_int_equal(g_out[1].fingerprint_mismatch, 1);
    once_reservation_free(&g_out[1]);

    req = th_req(S, "busy", 60000);
    reserve_async_expect_answer(e, &req, ONCE_IN_FLIGHT);
    assert_int_equal(g_out[1].lease_expires_at, before.lease_expires_at);
    assert_int_equal(g_out[1].attempt, 1);
    assert_int_equal(g_out[1].action.state, ONCE_STATE_PENDING);
    once_reservation_free(&g_out[1]);

    req = th_req(S, "unk", 60000);
    reserve_async_expect_answer(e, &req, ONCE_UNKNOWN);
    assert_int_equal(g_out[1].action.state, ONCE_STATE_UNKNOWN);
    th_assert_str(g_out[1].action.error, "timeout");
    once_reservation_free(&g_out[1]);

    req = th_req(S, "held", 60000);
    reserve_async_expect_answer(e, &req, ONCE_HELD);
    assert_int_equal(g_out[1].action.state, ONCE_STATE_HELD);
    assert_non_null(g_out[1].action.error);
    assert_non_null(strstr(g_out[1].action.error, "needs a human"));
    once_reservation_free(&g_out[1]);

    /* Nothing was changed by the answers. */
    once_action after;
    th_get(e->st, S, "busy", &after);
    th_assert_action_eq(&after, &before);
    once_action_free(&before);
    once_action_free(&after);
    assert_int_equal(th_state(e->st, S, "unk"), ONCE_STATE_UNKNOWN);
    assert_int_equal(th_state(e->st, S, "held"), ONCE_STATE_HELD);
}

/* A replay the writer answered through a callback is replayed from memory
 * from then on: the second once_reserve_async of a completed key returns 1
 * (no callback) on every store. On SQLite, where every reservation goes to
 * the writer, this is what keeps replays off the writer (the cache is
 * filled in store/op.c before the callback); without it each replay waits
 * for a commit and an fdatasync. */
static void test_reserve_async_replay_cached(void **state)
{
    th_env *e = *state;
    mk_completed(e->st, "again", "fp-a");
    once_reserve_req req = th_req(S, "again", 60000);
    req.fingerprint = "fp-a";
    reserve_async_expect_answer(e, &req, ONCE_COMPLETED);
    once_reservation_free(&g_out[1]);

    cbrec *w = &g_rec[1];
    once_reservation *out = &g_out[1];
    memset(out, 0, sizeof *out);
    cb_init(w, out);
    g_req[1] = req;
    int rc = once_reserve_async(e->st, &g_req[1], out, rec_cb, w);
    if (rc != 1)
        fail_msg("the second replay of a completed key: rc %d, want 1 (from the replay cache); detail: %s", rc,
                 once_errdetail());
    assert_int_equal(out->status, ONCE_COMPLETED);
    th_assert_str(out->action.provider_id, "prov-1");
    assert_int_equal(out->fingerprint_mismatch, 0);
    flush(e->st);
    assert_int_equal(cb_calls(w), 0);
    once_reservation_free(out);
    cb_destroy(w);
}

/* ---- bad arguments: refused, no callback -------------------------------- */

static void test_async_bad_args(void **state)
{
    th_env *e = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    mk_pending(e->st, "ok", tok);
    cbrec *w = &g_rec[0];
    once_reservation *out = &g_out[0];
    cb_init(w, out);
    static char long_key[ONCE_KEY_MAX + 2];
    memset(long_key, 'k', ONCE_KEY_MAX + 1);
    long_key[ONCE_KEY_MAX + 1] = '\0';

    static const char *const bad_keys[] = {"", "bad\x01key", "tab\tkey", "\x7f", long_key};
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        g_req[0] = th_req(S, bad_keys[i], 60000);
        int rc = once_reserve_async(e->st, &g_req[0], out, rec_cb, w);
        if (rc != ONCE_EINVAL)
            fail_msg("reserve_async(bad key %zu): rc %d, want ONCE_EINVAL", i, rc);
        assert_true(once_errdetail()[0] != '\0');
    }
    g_req[0] = th_req(S, NULL, 60000);
    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), ONCE_EINVAL);
    g_req[0] = th_req("bad scope", "k", 60000);
    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), ONCE_EINVAL);
    g_req[0] = th_req(S, "k", 0);
    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), ONCE_EINVAL);
    g_req[0] = th_req(S, "k", 60000);
    th_assert_rc(once_reserve_async(e->st, &g_req[0], out, NULL, w), ONCE_EINVAL);
    assert_true(once_errdetail()[0] != '\0');
    th_assert_rc(once_reserve_async(e->st, NULL, out, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_reserve_async(e->st, &g_req[0], NULL, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_reserve_async(NULL, &g_req[0], out, rec_cb, w), ONCE_EINVAL);
    /* A refused reserve left nothing behind. */
    once_action a;
    th_assert_rc(once_get(e->st, S, "k", &a), ONCE_ENOTFOUND);

    /* Fenced calls: NULL cb, malformed token, bad key, over-long error. */
    static char long_text[ONCE_TEXT_MAX + 2];
    memset(long_text, 'e', ONCE_TEXT_MAX + 1);
    long_text[ONCE_TEXT_MAX + 1] = '\0';
    th_assert_rc(once_complete_async(e->st, S, "ok", tok, NULL, NULL, NULL, w), ONCE_EINVAL);
    th_assert_rc(once_release_async(e->st, S, "ok", tok, NULL, NULL, w), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown_async(e->st, S, "ok", tok, NULL, NULL, w), ONCE_EINVAL);
    th_assert_rc(once_complete_async(e->st, S, "ok", "XYZ", NULL, NULL, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_release_async(e->st, S, "ok", "0123456789ABCDEF0123456789ABCDEF", NULL, rec_cb, w),
                 ONCE_EINVAL);
    th_assert_rc(once_mark_unknown_async(e->st, S, "ok", NULL, NULL, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_complete_async(e->st, S, "", tok, NULL, NULL, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_release_async(e->st, S, "ok", tok, long_text, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown_async(e->st, "no/slash", "ok", tok, NULL, rec_cb, w), ONCE_EINVAL);
    once_response bad = th_resp();
    bad.status = -1;
    th_assert_rc(once_complete_async(e->st, S, "ok", tok, &bad, NULL, rec_cb, w), ONCE_EINVAL);
    th_assert_rc(once_complete_async(NULL, S, "ok", tok, NULL, NULL, rec_cb, w), ONCE_EINVAL);

    flush(e->st);
    assert_int_equal(cb_calls(w), 0);
    assert_int_equal(th_state(e->st, S, "ok"), ONCE_STATE_PENDING);
    cb_destroy(w);
}

/* ---- outcomes ------------------------------------------------------------- */

static void test_complete_async(void **state)
{
    th_env *e = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    mk_pending(e->st, "c1", tok);
    cbrec *w = &g_rec[0];
    cb_init(w, NULL);
    static once_response resp;
    resp = th_resp();
    static char tokbuf[ONCE_TOKEN_LEN + 1];
    memcpy(tokbuf, tok, sizeof tokbuf);

    th_assert_rc(once_complete_async(e->st, S, "c1", tokbuf, &resp, "prov-c1", rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    once_action a;
    th_get(e->st, S, "c1", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_true(a.has_response);
    th_assert_response_eq(&a.response, &resp);
    th_assert_str(a.provider_id, "prov-c1");
    assert_true(a.expires_at > 0);
    once_action_free(&a);

    /* A repeated complete with the same token: 0, first result stays. */
    cb_destroy(w);
    cb_init(w, NULL);
    once_action b;
    th_get(e->st, S, "c1", &b);
    th_assert_rc(once_complete_async(e->st, S, "c1", tokbuf, NULL, "other", rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    th_get(e->st, S, "c1", &a);
    th_assert_action_eq(&a, &b);
    th_assert_str(a.provider_id, "prov-c1");
    once_action_free(&a);
    once_action_free(&b);

    /* A replay afterwards sees the async completion. */
    once_reserve_req req = th_req(S, "c1", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    th_assert_response_eq(&r.action.response, &resp);
    once_reservation_free(&r);
    if (e->durable) {
        th_env_reopen(e);
        assert_int_equal(th_state(e->st, S, "c1"), ONCE_STATE_COMPLETED);
    }
    cb_destroy(w);
}

static void test_release_async(void **state)
{
    th_env *e = *state;
    static char tok[ONCE_TOKEN_LEN + 1];
    mk_pending(e->st, "r1", tok);
    cbrec *w = &g_rec[0];
    cb_init(w, NULL);

    th_assert_rc(once_release_async(e->st, S, "r1", tok, "connection refused", rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    once_action a;
    th_get(e->st, S, "r1", &a);
    assert_int_equal(a.state, ONCE_STATE_RELEASED);
    th_assert_str(a.error, "connection refused");
    assert_true(a.expires_at > 0);
    once_action_free(&a);

    /* Released: the key is free again (attempt 2). */
    th_reserve_new(e->st, S, "r1", NULL, 2);
    if (e->durable) {
        th_env_reopen(e);
        assert_int_equal(th_state(e->st, S, "r1"), ONCE_STATE_PENDING);
    }
    cb_destroy(w);
}

static void test_mark_unknown_async(void **state)
{
    th_env *e = *state;
    static char tok[ONCE_TOKEN_LEN + 1];
    mk_pending(e->st, "u1", tok);
    cbrec *w = &g_rec[0];
    cb_init(w, NULL);

    th_assert_rc(once_mark_unknown_async(e->st, S, "u1", tok, "read timeout", rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    once_action a;
    th_get(e->st, S, "u1", &a);
    assert_int_equal(a.state, ONCE_STATE_UNKNOWN);
    th_assert_str(a.error, "read timeout");
    once_action_free(&a);
    once_reserve_req req = th_req(S, "u1", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r);
    once_reservation_free(&r);

    /* A state error also arrives through the callback: release of an
     * UNKNOWN row is ONCE_ESTATE, row unchanged. */
    cb_destroy(w);
    cb_init(w, NULL);
    once_action b;
    th_get(e->st, S, "u1", &b);
    th_assert_rc(once_release_async(e->st, S, "u1", tok, "x", rec_cb, w), 0);
    cb_assert_once(e->st, w, ONCE_ESTATE);
    th_get(e->st, S, "u1", &a);
    th_assert_action_eq(&a, &b);
    once_action_free(&a);
    once_action_free(&b);
    if (e->durable) {
        th_env_reopen(e);
        assert_int_equal(th_state(e->st, S, "u1"), ONCE_STATE_UNKNOWN);
    }
    cb_destroy(w);
}

/* No such action: queued (the arguments are fine), the callback says
 * ONCE_ENOTFOUND. */
static void test_async_notfound(void **state)
{
    th_env *e = *state;
    cbrec *w = &g_rec[0];
    static const char tok[] = "0123456789abcdef0123456789abcdef";
    cb_init(w, NULL);
    th_assert_rc(once_complete_async(e->st, S, "ghost", tok, NULL, NULL, rec_cb, w), 0);
    cb_assert_once(e->st, w, ONCE_ENOTFOUND);
    cb_destroy(w);
    cb_init(w, NULL);
    th_assert_rc(once_release_async(e->st, S, "ghost", tok, NULL, rec_cb, w), 0);
    cb_assert_once(e->st, w, ONCE_ENOTFOUND);
    cb_destroy(w);
    cb_init(w, NULL);
    th_assert_rc(once_mark_unknown_async(e->st, S, "ghost", tok, NULL, rec_cb, w), 0);
    cb_assert_once(e->st, w, ONCE_ENOTFOUND);
    once_action a;
    th_assert_rc(once_get(e->st, S, "ghost", &a), ONCE_ENOTFOUND);
    cb_destroy(w);
}

/* Runs op (0..2: complete, release, mark_unknown) asynchronously with tok on
 * (S, key); asserts the callback gets ONCE_ESTALE with a detail and the row
 * is unchanged in every field. */
static void stale_case(th_env *e, const char *key, const char *tok, int op)
{
    static once_response resp;
    resp = th_resp();
    cbrec *w = &g_rec[2];
    cb_init(w, NULL);
    once_action before, after;
    th_get(e->st, S, key, &before);
    int rc;
    switch (op) {
    case 0: rc = once_complete_async(e->st, S, key, tok, &resp, "p", rec_cb, w); break;
    case 1: rc = once_release_async(e->st, S, key, tok, "stale release", rec_cb, w); break;
    default: rc = once_mark_unknown_async(e->st, S, key, tok, "stale unknown", rec_cb, w); break;
    }
    if (rc != 0)
        fail_msg("%s op %d: rc %d (%s), want 0 (queued)", key, op, rc, once_strerror(rc));
    cb_wait(w, 1, WAIT_MS);
    flush(e->st);
    assert_int_equal(cb_calls(w), 1);
    if (w->rc != ONCE_ESTALE)
        fail_msg("%s op %d: callback rc %d (%s), want ONCE_ESTALE; detail: %s", key, op, w->rc,
                 once_strerror(w->rc), w->detail);
    assert_false(w->detail_null);
    assert_true(w->detail[0] != '\0');
    assert_false(w->on_main);
    th_get(e->st, S, key, &after);
    th_assert_action_eq(&after, &before);
    once_action_free(&before);
    once_action_free(&after);
    cb_destroy(w);
}

/* Stale tokens: an earlier attempt's token, and a well-formed token that
 * was never issued, against rows in every state. */
static void test_async_stale(void **state)
{
    th_env *e = *state;
    static char old_tok[ONCE_TOKEN_LEN + 1], cur_tok[ONCE_TOKEN_LEN + 1];
    static const char never[] = "ffffffffffffffffffffffffffffffff";

    /* attempt 1 released, attempt 2 pending: old_tok is stale. */
    mk_pending(e->st, "st-p", old_tok);
    th_assert_rc(once_release(e->st, S, "st-p", old_tok, NULL), 0);
    th_reserve_new(e->st, S, "st-p", cur_tok, 2);
    for (int op = 0; op < 3; op++) {
        stale_case(e, "st-p", old_tok, op);
        stale_case(e, "st-p", never, op);
    }
    assert_int_equal(th_state(e->st, S, "st-p"), ONCE_STATE_PENDING);

    /* A completed row: stale whatever the state. */
    mk_completed(e->st, "st-c", NULL);
    for (int op = 0; op < 3; op++)
        stale_case(e, "st-c", never, op);
    /* Unknown and held rows. */
    mk_unknown(e->st, S, "st-u", "timeout", NULL);
    mk_held(e->st, "st-h", NULL);
    for (int op = 0; op < 3; op++) {
        stale_case(e, "st-u", never, op);
        stale_case(e, "st-h", never, op);
    }
    /* The current token still works afterwards. */
    static char cur[ONCE_TOKEN_LEN + 1];
    memcpy(cur, cur_tok, sizeof cur);
    cbrec *w = &g_rec[0];
    cb_init(w, NULL);
    th_assert_rc(once_complete_async(e->st, S, "st-p", cur, NULL, NULL, rec_cb, w), 0);
    cb_assert_once(e->st, w, 0);
    assert_int_equal(th_state(e->st, S, "st-p"), ONCE_STATE_COMPLETED);
    cb_destroy(w);
}

/* ---- many async operations from several threads ----------------------------- */

#define NBULK 500
#define NSUBMITTERS 5

typedef struct bulk_item {
    char key[32];
    once_reserve_req req;
    once_reservation out;
    char token[ONCE_TOKEN_LEN + 1];
    atomic_int calls;
    atomic_int rc;
    atomic_int status_at_cb;
    int submit_rc;
    atomic_int on_main;
} bulk_item;

typedef struct bulk {
    bulk_item items[NBULK];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int total;
    once_store *st;
    int phase; /* 0 reserve, 1 complete */
    pthread_barrier_t start;
} bulk;

static bulk g_bulk;

static void bulk_cb(void *ctx, int rc, const char *detail)
{
    (void)detail;
    bulk_item *it = ctx;
    atomic_store(&it->rc, rc);
    atomic_store(&it->status_at_cb, (int)it->out.status);
    if (pthread_equal(pthread_self(), g_main_thread))
        atomic_store(&it->on_main, 1);
    atomic_fetch_add(&it->calls, 1);
    pthread_mutex_lock(&g_bulk.mu);
    g_bulk.total++;
    pthread_cond_broadcast(&g_bulk.cv);
    pthread_mutex_unlock(&g_bulk.mu);
}

static void bulk_reset(once_store *st, int phase)
{
    g_bulk.st = st;
    g_bulk.phase = phase;
    g_bulk.total = 0;
    for (int i = 0; i < NBULK; i++) {
        atomic_store(&g_bulk.items[i].calls, 0);
        atomic_store(&g_bulk.items[i].rc, 1);
        atomic_store(&g_bulk.items[i].status_at_cb, -1);
        atomic_store(&g_bulk.items[i].on_main, 0);
        g_bulk.items[i].submit_rc = 1;
    }
}

static void *bulk_submitter(void *arg)
{
    int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&g_bulk.start);
    for (int i = t; i < NBULK; i += NSUBMITTERS) {
        bulk_item *it = &g_bulk.items[i];
        if (g_bulk.phase == 0)
            it->submit_rc = once_reserve_async(g_bulk.st, &it->req, &it->out, bulk_cb, it);
        else
            it->submit_rc = once_complete_async(g_bulk.st, "bulk", it->key, it->token, NULL, it->key, bulk_cb, it);
    }
    return NULL;
}

static void bulk_run(once_store *st, int phase)
{
    bulk_reset(st, phase);
    pthread_t th[NSUBMITTERS];
    assert_int_equal(pthread_barrier_init(&g_bulk.start, NULL, NSUBMITTERS), 0);
    for (int t = 0; t < NSUBMITTERS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, bulk_submitter, (void *)(intptr_t)t), 0);
    for (int t = 0; t < NSUBMITTERS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&g_bulk.start);
    for (int i = 0; i < NBULK; i++)
        if (g_bulk.items[i].submit_rc != 0)
            fail_msg("phase %d item %d: submit rc %d (%s)", phase, i, g_bulk.items[i].submit_rc,
                     once_strerror(g_bulk.items[i].submit_rc));

    struct timespec dl;
    deadline_in(&dl, WAIT_BULK_MS);
    pthread_mutex_lock(&g_bulk.mu);
    while (g_bulk.total < NBULK) {
        if (pthread_cond_timedwait(&g_bulk.cv, &g_bulk.mu, &dl) == ETIMEDOUT)
            break;
    }
    int total = g_bulk.total;
    pthread_mutex_unlock(&g_bulk.mu);
    if (total < NBULK)
        fail_msg("phase %d: %d of %d callbacks within %d ms", phase, total, NBULK, WAIT_BULK_MS);
    flush(st);
    pthread_mutex_lock(&g_bulk.mu);
    total = g_bulk.total;
    pthread_mutex_unlock(&g_bulk.mu);
    assert_int_equal(total, NBULK);
    for (int i = 0; i < NBULK; i++) {
        bulk_item *it = &g_bulk.items[i];
        if (atomic_load(&it->calls) != 1)
            fail_msg("phase %d item %d: %d callbacks", phase, i, atomic_load(&it->calls));
        if (atomic_load(&it->rc) != 0)
            fail_msg("phase %d item %d: callback rc %d (%s)", phase, i, atomic_load(&it->rc),
                     once_strerror(atomic_load(&it->rc)));
        assert_false(atomic_load(&it->on_main));
    }
}

/* Counts the rows of scope "bulk" in state (0 = any) through paged lists,
 * and checks each key appears once. */
static void bulk_count(once_store *st, once_state want_state, size_t want)
{
    static unsigned char seen[NBULK];
    memset(seen, 0, sizeof seen);
    size_t n = 0;
    char cursor[ONCE_CURSOR_MAX] = "";
    for (int page = 0; page < 100; page++) {
        once_list_req lr = {.state = want_state, .scope = "bulk", .limit = 128, .cursor = cursor};
        once_action_list l;
        th_assert_rc(once_list(st, &lr, &l), 0);
        for (size_t i = 0; i < l.count; i++) {
            int idx;
            if (sscanf(l.items[i].key, "bulk-%d", &idx) != 1 || idx < 0 || idx >= NBULK)
                fail_msg("unexpected key %s", l.items[i].key);
            if (seen[idx]++)
                fail_msg("key %s listed twice", l.items[i].key);
            if (want_state)
                assert_int_equal(l.items[i].state, want_state);
            n++;
        }
        snprintf(cursor, sizeof cursor, "%s", l.next);
        once_action_list_free(&l);
        if (!cursor[0])
            break;
    }
    assert_int_equal(n, want);
}

static void test_async_bulk(void **state)
{
    th_env *e = *state;
    pthread_mutex_init(&g_bulk.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_bulk.cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < NBULK; i++) {
        bulk_item *it = &g_bulk.items[i];
        snprintf(it->key, sizeof it->key, "bulk-%d", i);
        it->req = th_req("bulk", it->key, 600000);
        memset(&it->out, 0, sizeof it->out);
    }

    bulk_run(e->st, 0);
    for (int i = 0; i < NBULK; i++) {
        bulk_item *it = &g_bulk.items[i];
        assert_int_equal(atomic_load(&it->status_at_cb), ONCE_RESERVED);
        assert_int_equal(it->out.status, ONCE_RESERVED);
        assert_int_equal(it->out.attempt, 1);
        assert_true(th_is_hex_token(it->out.token));
        memcpy(it->token, it->out.token, sizeof it->token);
        once_reservation_free(&it->out);
    }
    for (int i = 0; i < NBULK; i++)
        for (int j = i + 1; j < NBULK; j++)
            if (strcmp(g_bulk.items[i].token, g_bulk.items[j].token) == 0)
                fail_msg("items %d and %d got the same token", i, j);
    if (e->durable)
        th_env_reopen(e);
    bulk_count(e->st, ONCE_STATE_PENDING, NBULK);

    /* Then complete them all asynchronously, from several threads. */
    bulk_run(e->st, 1);
    if (e->durable)
        th_env_reopen(e);
    bulk_count(e->st, ONCE_STATE_COMPLETED, NBULK);
    bulk_count(e->st, 0, NBULK);
    once_action a;
    th_get(e->st, "bulk", "bulk-123", &a);
    th_assert_str(a.provider_id, "bulk-123");
    once_action_free(&a);
    pthread_cond_destroy(&g_bulk.cv);
    pthread_mutex_destroy(&g_bulk.mu);
}

/* Two async reserves of the same new key submitted back to back: exactly one
 * RESERVED, the other IN_FLIGHT (in the same batch or answered by a read). */
static void test_async_same_key(void **state)
{
    th_env *e = *state;
    int rc[2], reserved = 0, in_flight = 0;
    for (int i = 0; i < 2; i++) {
        memset(&g_out[i], 0, sizeof g_out[i]);
        cb_init(&g_rec[i], &g_out[i]);
        g_req[i] = th_req(S, "twin", 60000);
    }
    for (int i = 0; i < 2; i++)
        rc[i] = once_reserve_async(e->st, &g_req[i], &g_out[i], rec_cb, &g_rec[i]);
    for (int i = 0; i < 2; i++) {
        if (rc[i] == 0) {
            cb_assert_once(e->st, &g_rec[i], 0);
        } else {
            assert_int_equal(rc[i], 1);
            flush(e->st);
            assert_int_equal(cb_calls(&g_rec[i]), 0);
        }
        if (g_out[i].status == ONCE_RESERVED)
            reserved++;
        else if (g_out[i].status == ONCE_IN_FLIGHT)
            in_flight++;
        else
            fail_msg("twin %d: status %d", i, (int)g_out[i].status);
    }
    assert_int_equal(reserved, 1);
    assert_int_equal(in_flight, 1);
    assert_int_equal(g_out[0].attempt, 1);
    assert_int_equal(g_out[1].attempt, 1);
    for (int i = 0; i < 2; i++) {
        once_reservation_free(&g_out[i]);
        cb_destroy(&g_rec[i]);
    }
}

/* ---- retry_unknown ---------------------------------------------------------- */

/* Asserts a reservation with retry_unknown got a new attempt of key, and
 * that the old token is now stale while the new one completes. */
static void expect_rearmed(th_env *e, const char *key, const char *old_tok, int64_t want_attempt)
{
    once_reserve_req req = th_req(S, key, 60000);
    req.retry_unknown = 1;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    assert_int_equal(r.attempt, want_attempt);
    assert_true(th_is_hex_token(r.token));
    if (old_tok)
        assert_string_not_equal(r.token, old_tok);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    once_action a;
    th_get(e->st, S, key, &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, want_attempt);
    assert_int_equal(a.has_response, 0);
    once_action_free(&a);
    /* A second reserve (even with retry_unknown) sees the new live lease. */
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
    assert_int_equal(r.attempt, want_attempt);
    once_reservation_free(&r);
    if (old_tok)
        th_assert_rc_unchanged(e->st, S, key, once_complete(e->st, S, key, old_tok, NULL, NULL), ONCE_ESTALE);
    th_assert_rc(once_complete(e->st, S, key, tok, NULL, "after-retry"), 0);
    assert_int_equal(th_state(e->st, S, key), ONCE_STATE_COMPLETED);
}

static void test_retry_unknown(void **state)
{
    th_env *e = *state;
    char tok_u[ONCE_TOKEN_LEN + 1], tok_h[ONCE_TOKEN_LEN + 1];
    mk_unknown(e->st, S, "ru-u", "timeout", tok_u);
    mk_held(e->st, "ru-h", tok_h);

    /* Without retry_unknown: answered, unchanged. */
    once_reserve_req req = th_req(S, "ru-u", 60000);
    once_reservation r;
    th_assert_rc_unchanged(e->st, S, "ru-u", (th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r), 0), 0);
    assert_int_equal(r.attempt, 1);
    once_reservation_free(&r);
    req = th_req(S, "ru-h", 60000);
    th_assert_rc_unchanged(e->st, S, "ru-h", (th_reserve_expect(e->st, &req, ONCE_HELD, &r), 0), 0);
    assert_int_equal(r.attempt, 1);
    once_reservation_free(&r);

    /* With it: a new attempt. */
    expect_rearmed(e, "ru-u", tok_u, 2);
    expect_rearmed(e, "ru-h", tok_h, 2);

    /* A completed row is replayed, never re-sent, even with retry_unknown. */
    req = th_req(S, "ru-u", 60000);
    req.retry_unknown = 1;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.attempt, 2);
    th_assert_str(r.action.provider_id, "after-retry");
    once_reservation_free(&r);

    /* A live pending row is IN_FLIGHT even with retry_unknown: no stealing. */
    char tok_p[ONCE_TOKEN_LEN + 1];
    mk_pending(e->st, "ru-live", tok_p);
    req = th_req(S, "ru-live", 60000);
    req.retry_unknown = 1;
    th_assert_rc_unchanged(e->st, S, "ru-live", (th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r), 0), 0);
    once_reservation_free(&r);
    th_assert_rc(once_complete(e->st, S, "ru-live", tok_p, NULL, NULL), 0);

    if (e->durable) {
        th_env_reopen(e);
        assert_int_equal(th_state(e->st, S, "ru-h"), ONCE_STATE_COMPLETED);
    }
}

/* A pending row past its lease: reserved again with retry_unknown; answered
 * UNKNOWN (and marked so) without. */
static void test_retry_unknown_expired_lease(void **state)
{
    th_env *e = *state;
    char tok_a[ONCE_TOKEN_LEN + 1], tok_b[ONCE_TOKEN_LEN + 1];
    once_reserve_req req = th_req(S, "lease-a", 1);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(tok_a, r.token, sizeof tok_a);
    once_reservation_free(&r);
    req = th_req(S, "lease-b", 1);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(tok_b, r.token, sizeof tok_b);
    once_reservation_free(&r);
    th_sleep_ms(30);

    expect_rearmed(e, "lease-a", tok_a, 2);

    req = th_req(S, "lease-b", 60000);
    th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r);
    assert_int_equal(r.attempt, 1);
    once_reservation_free(&r);
    assert_int_equal(th_state(e->st, S, "lease-b"), ONCE_STATE_UNKNOWN);
    /* ... and then retry_unknown takes it. */
    expect_rearmed(e, "lease-b", tok_b, 2);
}

/* retry_unknown through once_reserve_async: the row needs the writer, so
 * the call queues and the callback reports the new attempt. */
static void test_retry_unknown_async(void **state)
{
    th_env *e = *state;
    char tok_u[ONCE_TOKEN_LEN + 1];
    mk_unknown(e->st, S, "rua", "timeout", tok_u);
    mk_held(e->st, "ruh", NULL);
    const char *keys[2] = {"rua", "ruh"};
    for (int i = 0; i < 2; i++) {
        cbrec *w = &g_rec[0];
        once_reservation *out = &g_out[0];
        memset(out, 0, sizeof *out);
        cb_init(w, out);
        g_req[0] = th_req(S, keys[i], 60000);
        g_req[0].retry_unknown = 1;
        th_assert_rc(once_reserve_async(e->st, &g_req[0], out, rec_cb, w), 0);
        cb_assert_once(e->st, w, 0);
        assert_int_equal(w->status_at_cb, ONCE_RESERVED);
        assert_int_equal(out->status, ONCE_RESERVED);
        assert_int_equal(out->attempt, 2);
        assert_true(th_is_hex_token(out->token));
        if (i == 0)
            assert_string_not_equal(out->token, tok_u);
        once_action a;
        th_get(e->st, S, keys[i], &a);
        assert_int_equal(a.state, ONCE_STATE_PENDING);
        assert_int_equal(a.attempt, 2);
        once_action_free(&a);
        once_reservation_free(out);
        cb_destroy(w);
    }
}

/* ---- once_hold_unknown -------------------------------------------------------- */

static void test_hold_unknown(void **state)
{
    th_env *e = *state;
    char tok[ONCE_TOKEN_LEN + 1];
    /* scope S: two unknown (one with an error), and one of every other state. */
    mk_unknown(e->st, S, "h-u1", "read timeout", NULL);
    mk_unknown(e->st, S, "h-u2", NULL, NULL);
    mk_pending(e->st, "h-p", tok);
    mk_completed(e->st, "h-c", NULL);
    mk_released(e->st, "h-r");
    mk_held(e->st, "h-h", NULL);
    /* scope other: one unknown. */
    mk_unknown(e->st, "other", "h-o", "boom", NULL);

    once_action p0, c0, r0, h0, o0;
    th_get(e->st, S, "h-p", &p0);
    th_get(e->st, S, "h-c", &c0);
    th_get(e->st, S, "h-r", &r0);
    th_get(e->st, S, "h-h", &h0);
    th_get(e->st, "other", "h-o", &o0);

    size_t count = 99;
    th_assert_rc(once_hold_unknown(e->st, S, "audit 7", &count), 0);
    assert_int_equal(count, 2);
    once_action a;
    th_get(e->st, S, "h-u1", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    th_assert_str(a.error, "audit 7 (after: read timeout)");
    once_action_free(&a);
    th_get(e->st, S, "h-u2", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    th_assert_str(a.error, "audit 7");
    once_action_free(&a);

    /* Nothing else moved. */
    once_action x;
    th_get(e->st, S, "h-p", &x);
    th_assert_action_eq(&x, &p0);
    once_action_free(&x);
    th_get(e->st, S, "h-c", &x);
    th_assert_action_eq(&x, &c0);
    once_action_free(&x);
    th_get(e->st, S, "h-r", &x);
    th_assert_action_eq(&x, &r0);
    once_action_free(&x);
    th_get(e->st, S, "h-h", &x);
    th_assert_action_eq(&x, &h0);
    once_action_free(&x);
    th_get(e->st, "other", "h-o", &x);
    th_assert_action_eq(&x, &o0);
    once_action_free(&x);

    /* Again: nothing left in S. */
    count = 99;
    th_assert_rc(once_hold_unknown(e->st, S, "audit 8", &count), 0);
    assert_int_equal(count, 0);
    th_get(e->st, S, "h-u1", &a);
    th_assert_str(a.error, "audit 7 (after: read timeout)");
    once_action_free(&a);

    /* Every scope (NULL): the other scope's row. */
    count = 99;
    th_assert_rc(once_hold_unknown(e->st, NULL, "all", &count), 0);
    assert_int_equal(count, 1);
    th_get(e->st, "other", "h-o", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    th_assert_str(a.error, "all (after: boom)");
    once_action_free(&a);

    /* A held row answers HELD with its reason, and a human can resolve it. */
    once_reserve_req req = th_req(S, "h-u1", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_HELD, &r);
    th_assert_str(r.action.error, "audit 7 (after: read timeout)");
    once_reservation_free(&r);
    th_assert_rc(once_resolve(e->st, S, "h-u1", ONCE_OUTCOME_RELEASED, NULL, "checked"), 0);

    /* A NULL reason keeps the earlier error; count may be NULL. */
    mk_unknown(e->st, S, "h-n", "earlier", NULL);
    th_assert_rc(once_hold_unknown(e->st, S, NULL, NULL), 0);
    th_get(e->st, S, "h-n", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    th_assert_str(a.error, "earlier");
    once_action_free(&a);

    /* A row made unknown by lease expiry keeps "lease expired". */
    req = th_req(S, "h-l", 1);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    th_sleep_ms(20);
    size_t expired = 0;
    th_assert_rc(once_expire_leases(e->st, once_now_ms(), &expired), 0);
    assert_int_equal(expired, 1);
    count = 0;
    th_assert_rc(once_hold_unknown(e->st, S, "stuck", &count), 0);
    assert_int_equal(count, 1);
    th_get(e->st, S, "h-l", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    th_assert_str(a.error, "stuck (after: lease expired)");
    once_action_free(&a);

    /* Bad arguments: nothing moves, count is 0. */
    mk_unknown(e->st, S, "h-bad", "e", NULL);
    count = 99;
    th_assert_rc(once_hold_unknown(e->st, "bad scope!", "r", &count), ONCE_EINVAL);
    assert_int_equal(count, 0);
    static char long_text[ONCE_TEXT_MAX + 2];
    memset(long_text, 'r', ONCE_TEXT_MAX + 1);
    long_text[ONCE_TEXT_MAX + 1] = '\0';
    count = 99;
    th_assert_rc(once_hold_unknown(e->st, S, long_text, &count), ONCE_EINVAL);
    assert_int_equal(count, 0);
    th_assert_rc(once_hold_unknown(NULL, S, "r", &count), ONCE_EINVAL);
    assert_int_equal(th_state(e->st, S, "h-bad"), ONCE_STATE_UNKNOWN);

    if (e->durable) {
        th_env_reopen(e);
        th_get(e->st, "other", "h-o", &a);
        assert_int_equal(a.state, ONCE_STATE_HELD);
        th_assert_str(a.error, "all (after: boom)");
        once_action_free(&a);
    }
    once_action_free(&p0);
    once_action_free(&c0);
    once_action_free(&r0);
    once_action_free(&h0);
    once_action_free(&o0);
}

/* ---- commit hook ---------------------------------------------------------- */

typedef struct hookrec {
    atomic_size_t sum;
    atomic_size_t calls;
    atomic_int zero_batch;
    atomic_int bad_seconds;
    atomic_int on_main;
} hookrec;

static hookrec g_hook;

static void hook_fn(void *ctx, size_t batch, double seconds)
{
    hookrec *h = ctx;
    atomic_fetch_add(&h->sum, batch);
    atomic_fetch_add(&h->calls, 1);
    if (batch == 0)
        atomic_store(&h->zero_batch, 1);
    if (!(seconds >= 0.0) || seconds > 600.0)
        atomic_store(&h->bad_seconds, 1);
    if (pthread_equal(pthread_self(), g_main_thread))
        atomic_store(&h->on_main, 1);
}

#define NHOOK 20
#define NHOOK_ASYNC 100

static void test_commit_hook(void **state)
{
    th_env *e = *state;
    memset(&g_hook, 0, sizeof g_hook);
    once_store_set_commit_hook(e->st, hook_fn, &g_hook);
    size_t writes = 0;

    static char keys[NHOOK][16];
    static char toks[NHOOK][ONCE_TOKEN_LEN + 1];
    for (int i = 0; i < NHOOK; i++) {
        snprintf(keys[i], sizeof keys[i], "hk-%d", i);
        th_reserve_new(e->st, "hook", keys[i], toks[i], 1);
        writes++;
    }
    /* The sync calls returned after their commit, so the hook has run. */
    assert_int_equal(atomic_load(&g_hook.sum), writes);
    for (int i = 0; i < NHOOK; i++) {
        th_assert_rc(once_complete(e->st, "hook", keys[i], toks[i], NULL, NULL), 0);
        writes++;
    }
    assert_int_equal(atomic_load(&g_hook.sum), writes);

    if (e->durable) {
        /* Reads do not go through the writer on a file or PostgreSQL store:
         * no commit. SQLite's writer answers a replay's first reservation
         * (one op in a commit), the replay cache every later one. */
        once_action a;
        once_reservation r;
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < NHOOK; i++) {
                th_get(e->st, "hook", keys[i], &a);
                once_action_free(&a);
                once_reserve_req req = th_req("hook", keys[i], 60000);
                th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
                once_reservation_free(&r);
                if (round == 0 && !th_reserve_reads(e))
                    writes++;
            }
        }
        once_list_req lr = {.scope = "hook"};
        once_action_list l;
        th_assert_rc(once_list(e->st, &lr, &l), 0);
        assert_int_equal(l.count, NHOOK);
        once_action_list_free(&l);
        assert_int_equal(atomic_load(&g_hook.sum), writes);
    }

    /* Async writes: the hook runs before the callbacks. */
    static char akeys[NHOOK_ASYNC][16];
    static once_reserve_req areq[NHOOK_ASYNC];
    static once_reservation aout[NHOOK_ASYNC];
    cbrec *w = &g_rec[0];
    cb_init(w, NULL);
    for (int i = 0; i < NHOOK_ASYNC; i++) {
        snprintf(akeys[i], sizeof akeys[i], "hka-%d", i);
        areq[i] = th_req("hook", akeys[i], 60000);
        th_assert_rc(once_reserve_async(e->st, &areq[i], &aout[i], rec_cb, w), 0);
        writes++;
    }
    cb_wait(w, NHOOK_ASYNC, WAIT_BULK_MS);
    assert_int_equal(atomic_load(&g_hook.sum), writes);
    for (int i = 0; i < NHOOK_ASYNC; i++) {
        assert_int_equal(aout[i].status, ONCE_RESERVED);
        once_reservation_free(&aout[i]);
    }
    size_t calls = atomic_load(&g_hook.calls);
    assert_true(calls >= 1);
    assert_true(calls <= writes);
    assert_false(atomic_load(&g_hook.zero_batch));
    assert_false(atomic_load(&g_hook.bad_seconds));
    assert_false(atomic_load(&g_hook.on_main));

    /* Removed: no more calls. */
    once_store_set_commit_hook(e->st, NULL, NULL);
    th_reserve_new(e->st, "hook", "after-removal", NULL, 1);
    assert_int_equal(atomic_load(&g_hook.sum), writes);
    assert_int_equal(atomic_load(&g_hook.calls), calls);
    cb_destroy(w);
}

/* ---- close with async operations queued --------------------------------------- */

#define NCLOSE_RES 300
#define NCLOSE_FEN 60

typedef struct close_item {
    char key[32];
    char token[ONCE_TOKEN_LEN + 1];
    once_reserve_req req;
    once_reservation out;
    int kind; /* 0 reserve, 1 complete, 2 release, 3 mark_unknown */
    int submit_rc;
    atomic_int calls;
    atomic_int rc;
} close_item;

static close_item g_close[NCLOSE_RES + NCLOSE_FEN];

static void close_cb(void *ctx, int rc, const char *detail)
{
    close_item *it = ctx;
    (void)detail;
    atomic_store(&it->rc, rc);
    atomic_fetch_add(&it->calls, 1);
}

static void test_close_with_queued(void **state)
{
    th_env *e = *state;
    const int n = NCLOSE_RES + NCLOSE_FEN;
    for (int i = 0; i < n; i++) {
        close_item *it = &g_close[i];
        memset(it, 0, sizeof *it);
        atomic_store(&it->rc, 1);
        if (i < NCLOSE_RES) {
            snprintf(it->key, sizeof it->key, "cq-r%d", i);
            it->req = th_req("closeq", it->key, 600000);
            it->kind = 0;
        } else {
            snprintf(it->key, sizeof it->key, "cq-f%d", i);
            it->kind = 1 + (i % 3);
            once_reserve_req req = th_req("closeq", it->key, 600000);
            once_reservation r;
            th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
            memcpy(it->token, r.token, sizeof it->token);
            once_reservation_free(&r);
        }
    }
    /* Fenced operations first, so they are surely behind nothing but each
     * other; the reserves pile up behind them. */
    for (int i = NCLOSE_RES; i < n; i++) {
        close_item *it = &g_close[i];
        switch (it->kind) {
        case 1: it->submit_rc = once_complete_async(e->st, "closeq", it->key, it->token, NULL, "p", close_cb, it); break;
        case 2: it->submit_rc = once_release_async(e->st, "closeq", it->key, it->token, "r", close_cb, it); break;
        default: it->submit_rc = once_mark_unknown_async(e->st, "closeq", it->key, it->token, "u", close_cb, it); break;
        }
    }
    for (int i = 0; i < NCLOSE_RES; i++) {
        close_item *it = &g_close[i];
        it->submit_rc = once_reserve_async(e->st, &it->req, &it->out, close_cb, it);
    }
    once_store_close(e->st);
    e->st = NULL;

    /* Close waited: every queued callback has run, exactly once. */
    int ok = 0, closed = 0;
    for (int i = 0; i < n; i++) {
        close_item *it = &g_close[i];
        if (it->submit_rc != 0)
            fail_msg("item %d (%s): submit rc %d (%s)", i, it->key, it->submit_rc, once_strerror(it->submit_rc));
        if (atomic_load(&it->calls) != 1)
            fail_msg("item %d (%s): %d callbacks after close", i, it->key, atomic_load(&it->calls));
        int rc = atomic_load(&it->rc);
        if (rc == 0)
            ok++;
        else if (rc == ONCE_ECLOSED)
            closed++;
        else
            fail_msg("item %d (%s): callback rc %d (%s)", i, it->key, rc, once_strerror(rc));
        if (it->kind == 0) {
            if (rc == 0)
                assert_int_equal(it->out.status, ONCE_RESERVED);
            once_reservation_free(&it->out);
        }
    }
    if (closed)
        print_message("close: %d ok, %d ONCE_ECLOSED\n", ok, closed);

    if (!e->durable) {
        th_assert_rc(once_store_open(e->url, &e->st), 0);
        return;
    }
    /* What said 0 is durable. */
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    for (int i = 0; i < n; i++) {
        close_item *it = &g_close[i];
        if (atomic_load(&it->rc) != 0)
            continue;
        static const once_state want[] = {ONCE_STATE_PENDING, ONCE_STATE_COMPLETED, ONCE_STATE_RELEASED,
                                          ONCE_STATE_UNKNOWN};
        once_action a;
        th_get(e->st, "closeq", it->key, &a);
        if (a.state != want[it->kind])
            fail_msg("%s: state %d after reopen, want %d", it->key, (int)a.state, (int)want[it->kind]);
        once_action_free(&a);
    }
}

/* Close right after one async reserve of a fresh store (nothing warmed up). */
static void test_close_right_after_submit(void **state)
{
    th_env *e = *state;
    cbrec *w = &g_rec[3];
    once_reservation *out = &g_out[3];
    memset(out, 0, sizeof *out);
    cb_init(w, out);
    g_req[3] = th_req(S, "one", 60000);
    th_assert_rc(once_reserve_async(e->st, &g_req[3], out, rec_cb, w), 0);
    once_store_close(e->st);
    e->st = NULL;
    assert_int_equal(cb_calls(w), 1);
    assert_true(w->rc == 0 || w->rc == ONCE_ECLOSED);
    assert_false(w->on_main);
    if (w->rc == 0)
        assert_int_equal(out->status, ONCE_RESERVED);
    once_reservation_free(out);
    th_assert_rc(once_store_open(e->url, &e->st), 0);
    if (e->durable && w->rc == 0)
        assert_int_equal(th_state(e->st, S, "one"), ONCE_STATE_PENDING);
    cb_destroy(w);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)
/* P(f): f on a PostgreSQL schema of its own (helpers.h; skipped without ONCE_TEST_PG_URL). */

int main(void)
{
    g_main_thread = pthread_self();
    const struct CMUnitTest tests[] = {
        T(test_reserve_async_new),
        M(test_reserve_async_new),
        P(test_reserve_async_new),
        T(test_reserve_async_released),
        M(test_reserve_async_released),
        P(test_reserve_async_released),
        T(test_reserve_async_answered),
        M(test_reserve_async_answered),
        P(test_reserve_async_answered),
        T(test_async_bad_args),
        M(test_async_bad_args),
        P(test_async_bad_args),
        T(test_complete_async),
        M(test_complete_async),
        P(test_complete_async),
        T(test_release_async),
        M(test_release_async),
        P(test_release_async),
        T(test_mark_unknown_async),
        M(test_mark_unknown_async),
        P(test_mark_unknown_async),
        T(test_async_notfound),
        M(test_async_notfound),
        P(test_async_notfound),
        T(test_async_stale),
        M(test_async_stale),
        P(test_async_stale),
        T(test_async_bulk),
        M(test_async_bulk),
        P(test_async_bulk),
        T(test_async_same_key),
        M(test_async_same_key),
        P(test_async_same_key),
        T(test_retry_unknown),
        M(test_retry_unknown),
        P(test_retry_unknown),
        T(test_retry_unknown_expired_lease),
        M(test_retry_unknown_expired_lease),
        P(test_retry_unknown_expired_lease),
        T(test_retry_unknown_async),
        M(test_retry_unknown_async),
        P(test_retry_unknown_async),
        T(test_hold_unknown),
        M(test_hold_unknown),
        P(test_hold_unknown),
        T(test_reserve_async_replay_cached),
        M(test_reserve_async_replay_cached),
        P(test_reserve_async_replay_cached),
        T(test_commit_hook),
        M(test_commit_hook),
        P(test_commit_hook),
        T(test_close_with_queued),
        M(test_close_with_queued),
        P(test_close_with_queued),
        T(test_close_right_after_submit),
        M(test_close_right_after_submit),
        P(test_close_right_after_submit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
