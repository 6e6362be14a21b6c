/*
 * test_transitions.c — every legal transition of the action state machine
 * (once.h, docs/architecture.md), the lease expiry loop and the sweep.
 */
#include "helpers.h"

#include <pthread.h>
#include <sys/wait.h>

#include "ledger/store.h"

#define S "pay"
#define DAY_MS (24LL * 3600 * 1000)

/* reserve on a fresh key: RESERVED, attempt 1, a hex token, the lease, and
 * a PENDING row holding everything the request carried. */
static void test_reserve_fresh(void **state)
{
    th_env *e = *state;
    static const uint8_t meta[] = {'m', 0, 'e', 0xfe, 't', 'a'};
    char fp[65];
    assert_int_equal(once_fingerprint("POST", "/v1/charges", (const uint8_t *)"{}", 2, fp), 0);

    once_reserve_req req = th_req(S, "k1", 30000);
    req.fingerprint = fp;
    req.request = meta;
    req.request_len = sizeof meta;
    int64_t t0 = once_now_ms();
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    int64_t t1 = once_now_ms();
    assert_int_equal(r.attempt, 1);
    assert_true(th_is_hex_token(r.token));
    assert_in_range(r.lease_expires_at, t0 + 30000, t1 + 30000);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    int64_t lease = r.lease_expires_at;
    once_reservation_free(&r);
    /* freeing twice is harmless and leaves it zeroed */
    once_reservation_free(&r);
    assert_int_equal(r.token[0], 0);

    once_action a;
    th_get(e->st, S, "k1", &a);
    assert_string_equal(a.scope, S);
    assert_string_equal(a.key, "k1");
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 1);
    assert_in_range(a.created_at, t0, t1);
    assert_in_range(a.updated_at, t0, t1);
    assert_int_equal(a.lease_expires_at, lease);
    assert_int_equal(a.expires_at, 0);
    assert_int_equal(a.retention_ms, DAY_MS); /* 0 = 24 h */
    assert_non_null(a.fingerprint);
    assert_string_equal(a.fingerprint, fp);
    assert_int_equal(a.request_len, sizeof meta);
    assert_memory_equal(a.request, meta, sizeof meta);
    assert_int_equal(a.has_response, 0);
    once_action_free(&a);
    once_action_free(&a); /* second call harmless */
    assert_null(a.scope);
    assert_null(a.key);

    /* the token is the row's: it completes it */
    th_assert_rc(once_complete(e->st, S, "k1", tok, NULL, NULL), 0);
}

/* PENDING -> COMPLETED, stored response byte-identical, NUL-terminated. */
static void test_complete(void **state)
{
    th_env *e = *state;
    char tok[33];
    once_reserve_req req = th_req(S, "k", 60000);
    req.retention_ms = 3600000;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);

    once_response resp = th_resp();
    int64_t t0 = once_now_ms();
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, "ch_123"), 0);
    int64_t t1 = once_now_ms();

    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_int_equal(a.attempt, 1);
    assert_int_equal(a.has_response, 1);
    th_assert_response_eq(&a.response, &resp);
    assert_non_null(a.response.body);
    assert_int_equal(a.response.body[a.response.body_len], 0);   /* NUL-terminated */
    assert_non_null(a.response.headers);
    assert_int_equal(a.response.headers[a.response.headers_len], 0);
    assert_string_equal(a.provider_id, "ch_123");
    assert_int_equal(a.retention_ms, 3600000);
    assert_in_range(a.updated_at, t0, t1);
    assert_in_range(a.expires_at, t0 + 3600000, t1 + 3600000);
    once_action_free(&a);
}

/* complete with a NULL response and NULL provider id is fine. */
static void test_complete_null_response(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, S, "k", tok, 1);
    th_assert_rc(once_complete(e->st, S, "k", tok, NULL, NULL), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_null(a.provider_id);
    once_action_free(&a);

    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.action.state, ONCE_STATE_COMPLETED);
    once_reservation_free(&r);
}

/* A completed action whose answer was delivered but not stored (a stream
 * longer than max_response): the length is kept and replayed by reserve,
 * with no body; a body beside it, or a negative length, is refused. */
static void test_complete_body_not_stored(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, S, "k", tok, 1);
    once_response bad = {.status = 200, .body = (uint8_t *)"x", .body_len = 1, .body_not_stored = 5};
    th_assert_rc(once_complete(e->st, S, "k", tok, &bad, NULL), ONCE_EINVAL);
    bad = (once_response){.status = 200, .body_not_stored = -1};
    th_assert_rc(once_complete(e->st, S, "k", tok, &bad, NULL), ONCE_EINVAL);
    once_response resp = {.status = 200, .headers = "[[\"Content-Type\",\"text/event-stream\"]]",
                          .headers_len = 38, .body_not_stored = 70000000};
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, NULL), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_int_equal(a.response.body_not_stored, 70000000);
    assert_null(a.response.body);
    once_action_free(&a);
    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.action.response.body_not_stored, 70000000);
    assert_int_equal(r.action.response.status, 200);
    once_reservation_free(&r);
    /* Other rows say 0. */
    th_reserve_new(e->st, S, "k2", tok, 1);
    resp.body_not_stored = 0;
    th_assert_rc(once_complete(e->st, S, "k2", tok, &resp, NULL), 0);
    th_get(e->st, S, "k2", &a);
    assert_int_equal(a.response.body_not_stored, 0);
    once_action_free(&a);
}

/* A completed row is replayed by reserve: the exact stored record, and
 * fingerprint_mismatch says whether the request differs. */
static void test_replay_completed(void **state)
{
    th_env *e = *state;
    char fp1[65], fp2[65];
    assert_int_equal(once_fingerprint("POST", "/p", (const uint8_t *)"a", 1, fp1), 0);
    assert_int_equal(once_fingerprint("POST", "/p", (const uint8_t *)"b", 1, fp2), 0);

    once_reserve_req req = th_req(S, "k", 60000);
    req.fingerprint = fp1;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    char tok[33];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, "prov-1"), 0);

    once_action stored;
    th_get(e->st, S, "k", &stored);

    /* same fingerprint */
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.fingerprint_mismatch, 0);
    assert_int_equal(r.attempt, 1);
    assert_int_not_equal(strcmp(r.token, tok), 0);
    th_assert_action_eq(&r.action, &stored);
    assert_int_equal(r.action.has_response, 1);
    th_assert_response_eq(&r.action.response, &resp);
    assert_int_equal(r.action.response.body[r.action.response.body_len], 0);
    once_reservation_free(&r);

    /* different fingerprint: still the first response, flagged */
    req.fingerprint = fp2;
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.fingerprint_mismatch, 1);
    th_assert_action_eq(&r.action, &stored);
    th_assert_response_eq(&r.action.response, &resp);
    assert_string_equal(r.action.fingerprint, fp1);
    once_reservation_free(&r);

    /* the replays changed nothing */
    once_action after;
    th_get(e->st, S, "k", &after);
    th_assert_action_eq(&after, &stored);
    once_action_free(&after);
    once_action_free(&stored);
}

/* PENDING -> RELEASED -> reserve again: attempt 2, a new token. */
static void test_release_then_reserve(void **state)
{
    th_env *e = *state;
    char tok1[33], tok2[33];
    th_reserve_new(e->st, S, "k", tok1, 1);
    int64_t t0 = once_now_ms();
    th_assert_rc(once_release(e->st, S, "k", tok1, "connect refused"), 0);
    int64_t t1 = once_now_ms();

    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_RELEASED);
    assert_int_equal(a.attempt, 1);
    assert_string_equal(a.error, "connect refused");
    assert_in_range(a.expires_at, t0 + DAY_MS, t1 + DAY_MS);
    int64_t created = a.created_at;
    once_action_free(&a);

    th_reserve_new(e->st, S, "k", tok2, 2);
    assert_int_not_equal(strcmp(tok1, tok2), 0);
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 2);
    assert_int_equal(a.created_at, created);
    assert_int_equal(a.expires_at, 0);
    once_action_free(&a);

    /* and the new attempt can finish */
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", tok2, &resp, NULL), 0);
    assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_COMPLETED);

    /* release with a NULL error is accepted */
    char tok3[33];
    th_reserve_new(e->st, S, "k2", tok3, 1);
    th_assert_rc(once_release(e->st, S, "k2", tok3, NULL), 0);
    assert_int_equal(th_state(e->st, S, "k2"), ONCE_STATE_RELEASED);
}

/* PENDING -> UNKNOWN via mark_unknown; reserve then answers UNKNOWN. */
static void test_mark_unknown(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, S, "k", tok, 1);
    th_assert_rc(once_mark_unknown(e->st, S, "k", tok, "timeout after send"), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_UNKNOWN);
    assert_int_equal(a.attempt, 1);
    assert_string_equal(a.error, "timeout after send");
    assert_int_equal(a.expires_at, 0);

    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r);
    assert_int_equal(r.attempt, 1);
    assert_int_not_equal(strcmp(r.token, tok), 0);
    th_assert_action_eq(&r.action, &a);
    once_reservation_free(&r);

    /* reserve did not change the row */
    once_action b;
    th_get(e->st, S, "k", &b);
    th_assert_action_eq(&b, &a);
    once_action_free(&b);
    once_action_free(&a);
}

/* expire_leases moves only PENDING rows whose lease ended at or before now. */
static void test_expire_leases(void **state)
{
    th_env *e = *state;
    char t1[33], t2[33], t3[33];
    once_reserve_req req = th_req(S, "short", 10000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(t1, r.token, sizeof t1);
    int64_t lease = r.lease_expires_at;
    once_reservation_free(&r);

    req = th_req(S, "long", 3600000);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(t2, r.token, sizeof t2);
    once_reservation_free(&r);

    th_reserve_new(e->st, S, "done", t3, 1);
    th_assert_rc(once_complete(e->st, S, "done", t3, NULL, NULL), 0);

    size_t n = 99;
    th_assert_rc(once_expire_leases(e->st, lease - 1, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(th_state(e->st, S, "short"), ONCE_STATE_PENDING);

    once_action done_before;
    th_get(e->st, S, "done", &done_before);

    n = 99;
    th_assert_rc(once_expire_leases(e->st, lease, &n), 0); /* "at or before now" */
    assert_int_equal(n, 1);
    once_action a;
    th_get(e->st, S, "short", &a);
    assert_int_equal(a.state, ONCE_STATE_UNKNOWN);
    assert_int_equal(a.attempt, 1);
    assert_non_null(a.error); /* "lease expired" */
    assert_true(strlen(a.error) > 0);
    once_action_free(&a);
    assert_int_equal(th_state(e->st, S, "long"), ONCE_STATE_PENDING);

    once_action done_after;
    th_get(e->st, S, "done", &done_after);
    th_assert_action_eq(&done_after, &done_before);
    once_action_free(&done_before);
    once_action_free(&done_after);

    /* nothing left to move; a NULL count is fine */
    n = 99;
    th_assert_rc(once_expire_leases(e->st, lease, &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_expire_leases(e->st, lease + 3600000 + 10000, NULL), 0);
    assert_int_equal(th_state(e->st, S, "long"), ONCE_STATE_UNKNOWN);

    /* the expired attempt's token still completes late */
    th_assert_rc(once_complete(e->st, S, "short", t1, NULL, "late"), 0);
    assert_int_equal(th_state(e->st, S, "short"), ONCE_STATE_COMPLETED);
    (void)t2;
}

/* UNKNOWN -> HELD; reserve answers HELD with the reason in action.error,
 * followed by the error that made the action unknown. */
static void test_hold(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, S, "k", tok, 1);
    th_assert_rc(once_mark_unknown(e->st, S, "k", tok, "reset"), 0);
    th_assert_rc(once_hold(e->st, S, "k", "no lookup configured"), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_HELD);
    assert_int_equal(a.attempt, 1);
    assert_string_equal(a.error, "no lookup configured (after: reset)");
    assert_int_equal(a.expires_at, 0);

    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_HELD, &r);
    th_assert_action_eq(&r.action, &a);
    assert_int_not_equal(strcmp(r.token, tok), 0);
    once_reservation_free(&r);
    once_action_free(&a);

    /* hold with a NULL reason */
    th_reserve_new(e->st, S, "k2", tok, 1);
    th_assert_rc(once_mark_unknown(e->st, S, "k2", tok, NULL), 0);
    th_assert_rc(once_hold(e->st, S, "k2", NULL), 0);
    assert_int_equal(th_state(e->st, S, "k2"), ONCE_STATE_HELD);
}

static void make_unknown(th_env *e, const char *key, char *tok)
{
    th_reserve_new(e->st, S, key, tok, 1);
    th_assert_rc(once_mark_unknown(e->st, S, key, tok, "ambiguous"), 0);
}

static void make_held(th_env *e, const char *key, char *tok)
{
    make_unknown(e, key, tok);
    th_assert_rc(once_hold(e->st, S, key, "human"), 0);
}

/* resolve UNKNOWN/HELD -> COMPLETED (provider id + note, no response). */
static void test_resolve_completed(void **state)
{
    th_env *e = *state;
    char tok[33];
    const char *keys[2] = {"u", "h"};
    make_unknown(e, "u", tok);
    make_held(e, "h", tok);
    for (int i = 0; i < 2; i++) {
        int64_t t0 = once_now_ms();
        th_assert_rc(once_resolve(e->st, S, keys[i], ONCE_OUTCOME_COMPLETED, "ch_9", "found in dashboard"), 0);
        int64_t t1 = once_now_ms();
        once_action a;
        th_get(e->st, S, keys[i], &a);
        assert_int_equal(a.state, ONCE_STATE_COMPLETED);
        assert_int_equal(a.attempt, 1);
        assert_int_equal(a.has_response, 0);
        assert_string_equal(a.provider_id, "ch_9");
        assert_string_equal(a.note, "found in dashboard");
        assert_in_range(a.expires_at, t0 + DAY_MS, t1 + DAY_MS);

        once_reserve_req req = th_req(S, keys[i], 60000);
        once_reservation r;
        th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
        th_assert_action_eq(&r.action, &a);
        once_reservation_free(&r);
        once_action_free(&a);
    }
}

/* resolve UNKNOWN/HELD -> RELEASED; the key is free again (attempt 2). */
static void test_resolve_released(void **state)
{
    th_env *e = *state;
    char tok[33], tok2[33];
    const char *keys[2] = {"u", "h"};
    make_unknown(e, "u", tok);
    make_held(e, "h", tok);
    for (int i = 0; i < 2; i++) {
        th_assert_rc(once_resolve(e->st, S, keys[i], ONCE_OUTCOME_RELEASED, NULL, "not in dashboard"), 0);
        once_action a;
        th_get(e->st, S, keys[i], &a);
        assert_int_equal(a.state, ONCE_STATE_RELEASED);
        assert_int_equal(a.attempt, 1);
        assert_string_equal(a.note, "not in dashboard");
        assert_true(a.expires_at > 0);
        once_action_free(&a);
        th_reserve_new(e->st, S, keys[i], tok2, 2);
    }
}

/* Late completion: complete with the current token on UNKNOWN and on HELD
 * is accepted, stores the response and notes it. */
static void test_late_completion(void **state)
{
    th_env *e = *state;
    char tu[33], th[33];
    make_unknown(e, "u", tu);
    make_held(e, "h", th);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "u", tu, &resp, "p-u"), 0);
    th_assert_rc(once_complete(e->st, S, "h", th, &resp, "p-h"), 0);
    const char *keys[2] = {"u", "h"};
    const char *pids[2] = {"p-u", "p-h"};
    for (int i = 0; i < 2; i++) {
        once_action a;
        th_get(e->st, S, keys[i], &a);
        assert_int_equal(a.state, ONCE_STATE_COMPLETED);
        assert_int_equal(a.attempt, 1);
        assert_int_equal(a.has_response, 1);
        th_assert_response_eq(&a.response, &resp);
        assert_string_equal(a.provider_id, pids[i]);
        assert_non_null(a.note); /* "noted as a late completion" */
        assert_true(strlen(a.note) > 0);
        assert_true(a.expires_at > 0);

        once_reserve_req req = th_req(S, keys[i], 60000);
        once_reservation r;
        th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
        th_assert_response_eq(&r.action.response, &resp);
        once_reservation_free(&r);
        once_action_free(&a);
    }
}

/* reserve on a live PENDING row: IN_FLIGHT with the lease deadline, and no
 * token for the caller. */
static void test_in_flight(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "k", 60000);
    once_reservation r1, r2;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r1);
    req.lease_ms = 5000; /* a different lease does not matter */
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r2);
    assert_int_equal(r2.attempt, 1);
    assert_int_equal(r2.lease_expires_at, r1.lease_expires_at);
    assert_true(r2.lease_expires_at > once_now_ms());
    assert_int_not_equal(strcmp(r2.token, r1.token), 0);
    assert_int_equal(r2.action.state, ONCE_STATE_PENDING);
    assert_int_equal(r2.action.lease_expires_at, r1.lease_expires_at);
    assert_string_equal(r2.action.key, "k");
    /* the holder is still the holder */
    th_assert_rc(once_complete(e->st, S, "k", r1.token, NULL, NULL), 0);
    once_reservation_free(&r1);
    once_reservation_free(&r2);
}

/* A PENDING row past its lease is answered UNKNOWN by reserve, and stays
 * UNKNOWN; it is never handed out again. */
static void test_reserve_sees_expired_lease(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "k", 1);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    char tok[33];
    memcpy(tok, r.token, sizeof tok);
    int64_t lease = r.lease_expires_at;
    once_reservation_free(&r);
    while (once_now_ms() <= lease + 2)
        th_sleep_ms(5);

    req.lease_ms = 60000;
    th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r);
    assert_int_equal(r.attempt, 1);
    assert_int_equal(r.action.state, ONCE_STATE_UNKNOWN);
    assert_int_not_equal(strcmp(r.token, tok), 0);
    once_reservation_free(&r);
    assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_UNKNOWN);

    th_reserve_expect(e->st, &req, ONCE_UNKNOWN, &r);
    once_reservation_free(&r);

    /* the truth arrives late */
    th_assert_rc(once_complete(e->st, S, "k", tok, NULL, "p"), 0);
    assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_COMPLETED);
}

/* A COMPLETED row past its retention is reserved again with attempt + 1;
 * one within retention is replayed. */
static void test_completed_past_retention(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "k", 60000);
    req.retention_ms = 20;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    char tok[33];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, "old-pid"), 0);

    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.retention_ms, 20);
    assert_int_equal(a.has_response, 1);
    int64_t exp = a.expires_at;
    assert_true(exp > 0);
    once_action_free(&a);
    while (once_now_ms() <= exp + 2)
        th_sleep_ms(5);

    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    assert_int_equal(r.attempt, 2);
    assert_int_not_equal(strcmp(r.token, tok), 0);
    once_reservation_free(&r);
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    assert_int_equal(a.attempt, 2);
    assert_int_equal(a.has_response, 0);
    once_action_free(&a);

    /* within retention: replayed */
    req = th_req(S, "k2", 60000);
    req.retention_ms = 3600000;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    th_assert_rc(once_complete(e->st, S, "k2", tok, NULL, NULL), 0);
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    once_reservation_free(&r);
}

/* The sweep deletes only COMPLETED and RELEASED rows past retention. */
static void test_sweep(void **state)
{
    th_env *e = *state;
    char tok[33];
    /* completed, released (two scopes) */
    th_reserve_new(e->st, S, "c1", tok, 1);
    th_assert_rc(once_complete(e->st, S, "c1", tok, NULL, NULL), 0);
    th_reserve_new(e->st, "other", "c2", tok, 1);
    th_assert_rc(once_complete(e->st, "other", "c2", tok, NULL, NULL), 0);
    th_reserve_new(e->st, S, "r1", tok, 1);
    th_assert_rc(once_release(e->st, S, "r1", tok, NULL), 0);
    /* resolved ones count too */
    make_unknown(e, "ru", tok);
    th_assert_rc(once_resolve(e->st, S, "ru", ONCE_OUTCOME_RELEASED, NULL, NULL), 0);
    /* the ones that must survive */
    th_reserve_new(e->st, S, "p1", tok, 1);
    once_reserve_req req = th_req(S, "p-expired", 1);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    make_unknown(e, "u1", tok);
    make_held(e, "h1", tok);

    size_t n = 99;
    /* nothing is past its 24 h retention yet */
    th_assert_rc(once_sweep(e->st, once_now_ms(), &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(th_state(e->st, S, "c1"), ONCE_STATE_COMPLETED);

    int64_t far = once_now_ms() + 10LL * 365 * DAY_MS;
    n = 99;
    th_assert_rc(once_sweep(e->st, far, &n), 0);
    assert_int_equal(n, 4);

    once_action a;
    const char *gone[] = {"c1", "r1", "ru"};
    for (size_t i = 0; i < 3; i++)
        th_assert_rc(once_get(e->st, S, gone[i], &a), ONCE_ENOTFOUND);
    th_assert_rc(once_get(e->st, "other", "c2", &a), ONCE_ENOTFOUND);
    assert_int_equal(th_state(e->st, S, "p1"), ONCE_STATE_PENDING);
    assert_int_equal(th_state(e->st, S, "p-expired"), ONCE_STATE_PENDING);
    assert_int_equal(th_state(e->st, S, "u1"), ONCE_STATE_UNKNOWN);
    assert_int_equal(th_state(e->st, S, "h1"), ONCE_STATE_HELD);

    once_list_req lr = {0};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    assert_int_equal(l.count, 4);
    once_action_list_free(&l);

    /* a second sweep finds nothing; a NULL count is fine */
    n = 99;
    th_assert_rc(once_sweep(e->st, far, &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_sweep(e->st, far, NULL), 0);

    /* a swept key is a fresh action again */
    th_reserve_new(e->st, S, "c1", tok, 1);
}

/* Many rows in one sweep go in pieces of STORE_SWEEP_ROWS, each its own
 * commit (issue 30: a day's rows deleted in one transaction stalled every
 * caller queued behind it), and the count is the whole. */
#define SWEEP_MANY (2 * STORE_SWEEP_ROWS + 345)

typedef struct sweep_fill {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t done, failed;
} sweep_fill;

static void sweep_fill_cb(void *ctx, int rc, const char *detail)
{
    sweep_fill *f = ctx;
    (void)detail;
    pthread_mutex_lock(&f->mu);
    f->done++;
    f->failed += rc < 0;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void sweep_fill_wait(sweep_fill *f, size_t n)
{
    pthread_mutex_lock(&f->mu);
    while (f->done < n)
        pthread_cond_wait(&f->cv, &f->mu);
    f->done = 0;
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(f->failed, 0);
}

static void count_commit(void *ctx, size_t batch, double seconds)
{
    (void)batch;
    (void)seconds;
    (*(size_t *)ctx)++;
}

static void test_sweep_in_pieces(void **state)
{
    th_env *e = *state;
    static char keys[SWEEP_MANY][16];
    static once_reserve_req reqs[SWEEP_MANY];
    static once_reservation rs[SWEEP_MANY];
    sweep_fill f = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    for (size_t i = 0; i < SWEEP_MANY; i++) {
        snprintf(keys[i], sizeof keys[i], "m%zu", i);
        reqs[i] = th_req(S, keys[i], 60000);
        reqs[i].retention_ms = 1000;
        assert_int_equal(once_reserve_async(e->st, &reqs[i], &rs[i], sweep_fill_cb, &f), 0);
    }
    sweep_fill_wait(&f, SWEEP_MANY);
    for (size_t i = 0; i < SWEEP_MANY; i++) {
        assert_int_equal(rs[i].status, ONCE_RESERVED);
        assert_int_equal(once_complete_async(e->st, S, keys[i], rs[i].token, NULL, NULL, sweep_fill_cb, &f), 0);
    }
    sweep_fill_wait(&f, SWEEP_MANY);
    for (size_t i = 0; i < SWEEP_MANY; i++)
        once_reservation_free(&rs[i]);

    size_t commits = 0, n = 0;
    once_store_set_commit_hook(e->st, count_commit, &commits);
    th_assert_rc(once_sweep(e->st, once_now_ms() + 10LL * 365 * DAY_MS, &n), 0);
    once_store_set_commit_hook(e->st, NULL, NULL);
    assert_int_equal(n, SWEEP_MANY);
    assert_true(commits >= 3);
    once_action a;
    th_assert_rc(once_get(e->st, S, keys[SWEEP_MANY - 1], &a), ONCE_ENOTFOUND);
    th_assert_rc(once_sweep(e->st, once_now_ms() + 10LL * 365 * DAY_MS, &n), 0);
    assert_int_equal(n, 0);
}

/* The sweep honours each row's own retention, "at or before now". */
static void test_sweep_boundary(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "a", 60000);
    req.retention_ms = 1000;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    th_assert_rc(once_complete(e->st, S, "a", r.token, NULL, NULL), 0);
    once_reservation_free(&r);
    req = th_req(S, "b", 60000);
    req.retention_ms = 3600000;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    th_assert_rc(once_complete(e->st, S, "b", r.token, NULL, NULL), 0);
    once_reservation_free(&r);

    once_action a;
    th_get(e->st, S, "a", &a);
    int64_t exp = a.expires_at;
    once_action_free(&a);

    size_t n = 99;
    th_assert_rc(once_sweep(e->st, exp - 1, &n), 0);
    assert_int_equal(n, 0);
    n = 99;
    th_assert_rc(once_sweep(e->st, exp, &n), 0);
    assert_int_equal(n, 1);
    th_assert_rc(once_get(e->st, S, "a", &a), ONCE_ENOTFOUND);
    assert_int_equal(th_state(e->st, S, "b"), ONCE_STATE_COMPLETED);
}

/* The same key in two scopes is two actions. */
static void test_scope_isolation(void **state)
{
    th_env *e = *state;
    char t1[33], t2[33];
    th_reserve_new(e->st, "alpha", "same", t1, 1);
    th_reserve_new(e->st, "beta", "same", t2, 1);
    assert_int_not_equal(strcmp(t1, t2), 0);
    th_assert_rc(once_complete(e->st, "alpha", "same", t2, NULL, NULL), ONCE_ESTALE);
    th_assert_rc(once_complete(e->st, "alpha", "same", t1, NULL, NULL), 0);
    assert_int_equal(th_state(e->st, "beta", "same"), ONCE_STATE_PENDING);
}

/* The maximum key and scope lengths and every printable byte work. */
static void test_edge_keys_roundtrip(void **state)
{
    th_env *e = *state;
    char key[ONCE_KEY_MAX + 1], scope[ONCE_SCOPE_MAX + 1];
    memset(key, 'k', ONCE_KEY_MAX);
    key[ONCE_KEY_MAX] = 0;
    memset(scope, 's', ONCE_SCOPE_MAX);
    scope[ONCE_SCOPE_MAX] = 0;
    char tok[33];
    th_reserve_new(e->st, scope, key, tok, 1);
    once_action a;
    th_get(e->st, scope, key, &a);
    assert_string_equal(a.key, key);
    assert_string_equal(a.scope, scope);
    once_action_free(&a);

    char all[96];
    for (int i = 0; i < 95; i++)
        all[i] = (char)(0x20 + i);
    all[95] = 0;
    th_reserve_new(e->st, "Az09._-", all, tok, 1);
    th_get(e->st, "Az09._-", all, &a);
    assert_string_equal(a.key, all);
    once_action_free(&a);
    /* keys are case-sensitive, exact bytes */
    th_reserve_new(e->st, S, "Key", tok, 1);
    th_reserve_new(e->st, S, "key", tok, 1);
    th_reserve_new(e->st, S, "key ", tok, 1);
}

/* complete on a PENDING row whose lease passed but that nobody has moved
 * yet: still PENDING, so the current token completes it. */
static void test_complete_after_lease_passed(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "k", 1);
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    int64_t lease = r.lease_expires_at;
    while (once_now_ms() <= lease + 2)
        th_sleep_ms(5);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", r.token, &resp, "p"), 0);
    once_reservation_free(&r);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    th_assert_response_eq(&a.response, &resp);
    once_action_free(&a);
}

/* An empty response (status only) and a large binary request round-trip. */
static void test_empty_response_and_big_request(void **state)
{
    th_env *e = *state;
    size_t n = 1u << 20;
    uint8_t *meta = malloc(n);
    assert_non_null(meta);
    for (size_t i = 0; i < n; i++)
        meta[i] = (uint8_t)(i ^ (i >> 8));
    once_reserve_req req = th_req(S, "k", 60000);
    req.request = meta;
    req.request_len = n;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_response resp = {.status = 204};
    th_assert_rc(once_complete(e->st, S, "k", r.token, &resp, NULL), 0);
    once_reservation_free(&r);
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    assert_int_equal(r.action.has_response, 1);
    assert_int_equal(r.action.response.status, 204);
    assert_int_equal(r.action.response.body_len, 0);
    assert_int_equal(r.action.response.headers_len, 0);
    assert_int_equal(r.action.request_len, n);
    assert_memory_equal(r.action.request, meta, n);
    once_reservation_free(&r);
    free(meta);
}

/* request_fn: the request is described only when a row is written. A
 * replay, a conflict and a refused reserve never call it; a failing producer
 * fails the reserve and writes nothing; what it gives is held to the limits
 * of `request` (regression: the gateway built the stored request, JSON of
 * every header and the body, for each replayed request too). */
typedef struct producer {
    int calls;
    int rc;
    const uint8_t *data;
    size_t len;
} producer;

static int produce(void *arg, const uint8_t **data, size_t *len)
{
    producer *p = arg;
    p->calls++;
    *data = p->data;
    *len = p->len;
    return p->rc;
}

static void test_request_fn_only_when_written(void **state)
{
    th_env *e = *state;
    static const uint8_t meta[] = "{\"method\":\"POST\"}";
    producer p = {.data = meta, .len = sizeof meta - 1};
    once_reserve_req req = th_req(S, "lazy", 60000);
    req.request_fn = produce;
    req.request_arg = &p;
    req.request = (const uint8_t *)"ignored";
    req.request_len = 7;

    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    assert_int_equal(p.calls, 1);
    once_action a;
    th_get(e->st, S, "lazy", &a);
    assert_int_equal(a.request_len, sizeof meta - 1);
    assert_memory_equal(a.request, meta, sizeof meta - 1);
    once_action_free(&a);

    /* in flight: PostgreSQL answers by a read, without describing the
     * request; SQLite sends each reserve to its writer, which describes it */
    int per_reserve = th_reserve_reads(e) ? 0 : 1;
    once_reservation r2;
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r2);
    once_reservation_free(&r2);
    assert_int_equal(p.calls, 1 + per_reserve);

    /* completed: replayed without a write */
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "lazy", r.token, &resp, NULL), 0);
    once_reservation_free(&r);
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r2);
    once_reservation_free(&r2);
    assert_int_equal(p.calls, 1 + 2 * per_reserve);

    /* a bad argument is refused before the producer runs */
    once_reserve_req bad = req;
    bad.lease_ms = 0;
    th_assert_rc(once_reserve(e->st, &bad, &r2), ONCE_EINVAL);
    assert_int_equal(p.calls, 1 + 2 * per_reserve);

    /* a failing producer fails the reserve and nothing is written */
    producer fail = {.rc = ONCE_ENOMEM};
    once_reserve_req req2 = th_req(S, "lazy-fail", 60000);
    req2.request_fn = produce;
    req2.request_arg = &fail;
    th_assert_rc(once_reserve(e->st, &req2, &r2), ONCE_ENOMEM);
    assert_int_equal(fail.calls, 1);
    th_assert_rc(once_get(e->st, S, "lazy-fail", &a), ONCE_ENOTFOUND);

    /* too large, or NULL with a length: EINVAL, nothing written */
    producer big = {.data = meta, .len = (size_t)ONCE_REQUEST_MAX + 1};
    req2.request_arg = &big;
    th_assert_rc(once_reserve(e->st, &req2, &r2), ONCE_EINVAL);
    producer nul = {.data = NULL, .len = 3};
    req2.request_arg = &nul;
    th_assert_rc(once_reserve(e->st, &req2, &r2), ONCE_EINVAL);
    th_assert_rc(once_get(e->st, S, "lazy-fail", &a), ONCE_ENOTFOUND);

    /* and then the key is still free */
    p.calls = 0;
    req2.request_arg = &p;
    th_reserve_expect(e->st, &req2, ONCE_RESERVED, &r2);
    assert_int_equal(p.calls, 1);
    once_reservation_free(&r2);
}

/* Replays of a completed key are answered from the ledger's replay cache
 * after the first: every replay is the same action (deep copies the caller
 * may free), the fingerprint is compared on each one, and an outcome past its
 * retention is not replayed from memory any more than from the store. */
/* For an async call that must answer at once: its callback never runs. */
static void never_called_cb(void *ctx, int rc, const char *detail)
{
    (void)ctx;
    (void)rc;
    (void)detail;
    abort();
}

static void test_replays_from_memory_match_the_store(void **state)
{
    th_env *e = *state;
    once_reserve_req req = th_req(S, "cached", 60000);
    req.fingerprint = "fp-a";
    req.retention_ms = 1500;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "cached", r.token, &resp, "prov_1"), 0);
    once_reservation_free(&r);

    once_action stored;
    th_get(e->st, S, "cached", &stored);
    for (int i = 0; i < 4; i++) {
        once_reservation rr;
        th_reserve_expect(e->st, &req, ONCE_COMPLETED, &rr);
        assert_int_equal(rr.fingerprint_mismatch, 0);
        assert_int_equal(rr.attempt, 1);
        assert_int_equal(rr.token[0], 0);
        th_assert_action_eq(&rr.action, &stored);
        /* the caller owns its copy: scribbling on it changes no later replay */
        rr.action.response.body[0] ^= 0x55;
        once_reservation_free(&rr);
    }
    /* the fingerprint of each request is compared with the first's */
    once_reserve_req other = req;
    other.fingerprint = "fp-b";
    once_reservation rr;
    th_reserve_expect(e->st, &other, ONCE_COMPLETED, &rr);
    assert_int_equal(rr.fingerprint_mismatch, 1);
    once_reservation_free(&rr);
    other.fingerprint = NULL;
    th_reserve_expect(e->st, &other, ONCE_COMPLETED, &rr);
    assert_int_equal(rr.fingerprint_mismatch, 0);
    once_reservation_free(&rr);
    /* the async call answers a cached replay at once, as a read would */
    if (e->durable) {
        memset(&rr, 0, sizeof rr);
        int rc = once_reserve_async(e->st, &req, &rr, never_called_cb, NULL);
        assert_int_equal(rc, 1);
        assert_int_equal(rr.status, ONCE_COMPLETED);
        th_assert_action_eq(&rr.action, &stored);
        once_reservation_free(&rr);
    }
    /* past its retention the key is new again, cached or not */
    while (once_now_ms() < stored.expires_at + 5)
        th_sleep_ms(50);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &rr);
    once_reservation_free(&rr);
    once_action_free(&stored);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)
/* P(f): f on a PostgreSQL schema of its own (helpers.h; skipped without ONCE_TEST_PG_URL). */

/* Tokens come from a per-thread buffer of CSPRNG bytes: each is fresh,
 * and a forked child never hands out the bytes its parent will. Without
 * the fork hook the child's first token is the parent's next one. */
static void test_tokens_unique_across_fork(void **state)
{
    (void)state;
    enum { N = 40 };
    char seen[N][ONCE_TOKEN_LEN + 1];
    for (int i = 0; i < N; i++) {
        assert_int_equal(once_token_new(seen[i]), ONCE_OK);
        assert_true(th_is_hex_token(seen[i]));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(seen[i], seen[j]);
    }
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char t[ONCE_TOKEN_LEN + 1];
        int ok = once_token_new(t) == ONCE_OK && write(fds[1], t, sizeof t) == (ssize_t)sizeof t;
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    char child[ONCE_TOKEN_LEN + 1];
    assert_int_equal(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 16; i++) {
        char mine[ONCE_TOKEN_LEN + 1];
        assert_int_equal(once_token_new(mine), ONCE_OK);
        assert_string_not_equal(mine, child);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_unique_across_fork),
        T(test_reserve_fresh),
        P(test_reserve_fresh),
        T(test_complete),
        P(test_complete),
        T(test_sweep_in_pieces),
        P(test_sweep_in_pieces),
        T(test_complete_null_response),
        P(test_complete_null_response),
        T(test_complete_body_not_stored),
        M(test_complete_body_not_stored),
        P(test_complete_body_not_stored),
        T(test_replay_completed),
        M(test_replay_completed),
        P(test_replay_completed),
        T(test_release_then_reserve),
        P(test_release_then_reserve),
        T(test_mark_unknown),
        P(test_mark_unknown),
        T(test_expire_leases),
        M(test_expire_leases),
        P(test_expire_leases),
        T(test_hold),
        P(test_hold),
        T(test_resolve_completed),
        P(test_resolve_completed),
        T(test_resolve_released),
        P(test_resolve_released),
        T(test_late_completion),
        M(test_late_completion),
        P(test_late_completion),
        T(test_in_flight),
        P(test_in_flight),
        T(test_reserve_sees_expired_lease),
        P(test_reserve_sees_expired_lease),
        T(test_completed_past_retention),
        P(test_completed_past_retention),
        T(test_sweep),
        M(test_sweep),
        P(test_sweep),
        T(test_sweep_boundary),
        P(test_sweep_boundary),
        T(test_scope_isolation),
        P(test_scope_isolation),
        T(test_edge_keys_roundtrip),
        P(test_edge_keys_roundtrip),
        T(test_complete_after_lease_passed),
        P(test_complete_after_lease_passed),
        T(test_empty_response_and_big_request),
        P(test_empty_response_and_big_request),
        T(test_request_fn_only_when_written),
        M(test_request_fn_only_when_written),
        P(test_request_fn_only_when_written),
        T(test_replays_from_memory_match_the_store),
        M(test_replays_from_memory_match_the_store),
        P(test_replays_from_memory_match_the_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
