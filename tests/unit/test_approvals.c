/*
 * test_approvals.c — approvals (once.h, docs/approvals.md): a reservation that
 * needs a human waits (AWAITING_APPROVAL), is approved, claimed by one
 * sender and completed, or denied (by a human, or because nobody decided
 * in time) and swept after its retention; on SQLite (file and memory) and
 * on PostgreSQL, and on databases migrated from the schema before
 * approvals.
 */
#include "helpers.h"
#include "schema_at.h"

#include <pthread.h>
#include <sqlite3.h>

#include "json/action_json.h"
#include "ledger/store.h"
#include "store/pg_schema.h"
#include "store/sqlite_schema.h"

#define S "mail"
#define TTL_MS 60000
#define NCLAIMERS 8

/* A reservation of (S, key) that needs approval within ttl_ms. */
static once_reserve_req approval_req(const char *key, int64_t ttl_ms)
{
    once_reserve_req r = th_req(S, key, 30000);
    r.approval_ttl_ms = ttl_ms;
    return r;
}

/* Reserves key with approval_ttl_ms; asserts AWAITING_APPROVAL. */
static void reserve_awaiting(once_store *st, const char *key, int64_t ttl_ms)
{
    once_reserve_req req = approval_req(key, ttl_ms);
    once_reservation r;
    th_reserve_expect(st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
}

/* Whether the trail of (S, key) holds text. */
static int trail_has(once_store *st, const char *key, const char *text)
{
    once_action a;
    th_get(st, S, key, &a);
    int has = a.trail && strstr(a.trail, text) != NULL;
    once_action_free(&a);
    return has;
}

/* ---- an asynchronous reserve, waited for ---- */

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

/* once_reserve_async, answered by a read (1) or through the callback (0). */
static int reserve_async(once_store *st, const once_reserve_req *req, once_reservation *out)
{
    async_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    memset(out, 0, sizeof *out);
    int rc = once_reserve_async(st, req, out, async_cb, &w);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    return w.rc;
}

/* ---- the tests ---- */

/* A reservation with an approval_ttl stores the request and waits: no
 * token, the decision's deadline in lease_expires_at; every retry (with
 * or without a ttl, another payload, asynchronous) gets the stored row,
 * and nothing of the attempt's calls takes it. */
static void test_reserve_awaits(void **state)
{
    th_env *e = *state;
    static const uint8_t meta[] = {'r', 0, 'q', 0xff};
    char fp[65], fp2[65];
    assert_int_equal(once_fingerprint("POST", "/send", (const uint8_t *)"a", 1, fp), 0);
    assert_int_equal(once_fingerprint("POST", "/send", (const uint8_t *)"b", 1, fp2), 0);
    once_reserve_req req = approval_req("k", TTL_MS);
    req.fingerprint = fp;
    req.request = meta;
    req.request_len = sizeof meta;
    int64_t t0 = once_now_ms();
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    int64_t t1 = once_now_ms();
    assert_string_equal(r.token, "");
    assert_int_equal(r.attempt, 1);
    assert_int_equal(r.action.state, ONCE_STATE_AWAITING_APPROVAL);
    th_assert_str(r.action.fingerprint, fp);
    assert_in_range(r.action.lease_expires_at, t0 + TTL_MS, t1 + TTL_MS);
    assert_int_equal(r.action.approved_at, 0);
    assert_null(r.action.decided_by); /* undecided */
    assert_null(r.action.decision_note);
    assert_int_equal(r.action.request_len, sizeof meta);
    assert_memory_equal(r.action.request, meta, sizeof meta);
    int64_t deadline = r.action.lease_expires_at;
    once_reservation_free(&r);

    /* a retry with another payload: the stored row, to compare with */
    req.fingerprint = fp2;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    th_assert_str(r.action.fingerprint, fp);
    assert_int_equal(r.action.lease_expires_at, deadline);
    once_reservation_free(&r);
    /* the row decides, not the request */
    once_reserve_req plain = th_req(S, "k", 30000);
    th_reserve_expect(e->st, &plain, ONCE_AWAITING_APPROVAL, &r);
    assert_string_equal(r.token, "");
    once_reservation_free(&r);
    th_assert_rc(reserve_async(e->st, &plain, &r), th_reserve_reads(e));
    assert_int_equal(r.status, ONCE_AWAITING_APPROVAL);
    th_assert_str(r.action.fingerprint, fp);
    once_reservation_free(&r);
    /* a new key through the asynchronous path waits too */
    once_reserve_req areq = approval_req("k-async", TTL_MS);
    th_assert_rc(reserve_async(e->st, &areq, &r), 0);
    assert_int_equal(r.status, ONCE_AWAITING_APPROVAL);
    assert_int_equal(r.action.state, ONCE_STATE_AWAITING_APPROVAL);
    assert_string_equal(r.token, "");
    once_reservation_free(&r);

    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_AWAITING_APPROVAL);
    assert_in_range(a.created_at, t0, t1);
    once_action_free(&a);

    /* no token opens it; no operator transition applies */
    const char *tok = "0123456789abcdef0123456789abcdef";
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", tok, NULL, NULL), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_release(e->st, S, "k", tok, NULL), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_renew(e->st, S, "k", tok, 1000, NULL), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_resolve(e->st, S, "k", ONCE_OUTCOME_RELEASED, NULL, NULL),
                           ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "k", once_hold(e->st, S, "k", NULL), ONCE_ESTATE);

    /* listed by its state */
    once_list_req lr = {.state = ONCE_STATE_AWAITING_APPROVAL};
    once_action_list l;
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    assert_int_equal(l.count, 2);
    once_action_list_free(&l);
    lr.state = ONCE_STATE_PENDING;
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    assert_int_equal(l.count, 0);
    once_action_list_free(&l);
}

/* The names of the new states and answers, both ways. */
static void test_names(void **state)
{
    (void)state;
    once_state s;
    assert_string_equal(once_state_name(ONCE_STATE_AWAITING_APPROVAL), "awaiting_approval");
    assert_string_equal(once_state_name(ONCE_STATE_DENIED), "denied");
    assert_null(once_state_name((once_state)8));
    assert_int_equal(once_state_parse("awaiting_approval", &s), 0);
    assert_int_equal(s, ONCE_STATE_AWAITING_APPROVAL);
    assert_int_equal(once_state_parse("denied", &s), 0);
    assert_int_equal(s, ONCE_STATE_DENIED);
    assert_int_equal(once_state_parse("approved", &s), ONCE_EINVAL);
    assert_string_equal(once_reserve_status_name(ONCE_AWAITING_APPROVAL), "awaiting_approval");
    assert_string_equal(once_reserve_status_name(ONCE_DENIED), "denied");
    assert_true(ledger_transition_allowed(ONCE_STATE_AWAITING_APPROVAL, ONCE_STATE_PENDING));
    assert_true(ledger_transition_allowed(ONCE_STATE_AWAITING_APPROVAL, ONCE_STATE_DENIED));
    assert_true(ledger_transition_allowed(ONCE_STATE_DENIED, ONCE_STATE_AWAITING_APPROVAL));
    assert_true(ledger_transition_allowed(ONCE_STATE_RELEASED, ONCE_STATE_AWAITING_APPROVAL));
    assert_false(ledger_transition_allowed(ONCE_STATE_AWAITING_APPROVAL, ONCE_STATE_COMPLETED));
    assert_false(ledger_transition_allowed(ONCE_STATE_DENIED, ONCE_STATE_COMPLETED));
}

/* Approve: approved_at set, a trail line, still waiting; again: nothing
 * changes. Claim: pending under a fresh token with the stored request, to
 * one claimer; its completion is replayed. */
static void test_approve_claim_complete(void **state)
{
    th_env *e = *state;
    static const uint8_t meta[] = "{\"to\":\"x\"}";
    once_reserve_req req = approval_req("k", TTL_MS);
    req.request = meta;
    req.request_len = sizeof meta - 1;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);

    int64_t t0 = once_now_ms();
    th_assert_rc(once_approve(e->st, S, "k", "alice", "ok"), 0);
    int64_t t1 = once_now_ms();
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_AWAITING_APPROVAL);
    assert_in_range(a.approved_at, t0, t1);
    assert_int_equal(a.updated_at, a.approved_at);
    assert_non_null(a.trail);
    /* "2026-...Z approved by alice: ok", stamped as reconciliation steps are */
    assert_non_null(strstr(a.trail, "Z approved by alice: ok"));
    assert_null(strchr(a.trail, '\n'));
    /* who and why are the record's own members, not only text in the trail */
    th_assert_str(a.decided_by, "alice");
    th_assert_str(a.decision_note, "ok");
    assert_null(a.note); /* an approval's note is not the action's note */
    int64_t approved = a.approved_at;
    once_action_free(&a);

    /* approving again is 0 and changes nothing */
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "bob", NULL), 0);
    assert_false(trail_has(e->st, "k", "bob"));
    /* a retry still waits, and sees the approval */
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.action.approved_at, approved);
    once_reservation_free(&r);

    /* nothing to claim in another scope */
    th_assert_rc(once_approval_claim(e->st, "other", 30000, &r), 0);
    t0 = once_now_ms();
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 1);
    t1 = once_now_ms();
    assert_int_equal(r.status, ONCE_RESERVED);
    assert_true(th_is_hex_token(r.token));
    assert_int_equal(r.attempt, 2);
    assert_in_range(r.lease_expires_at, t0 + 30000, t1 + 30000);
    assert_int_equal(r.action.state, ONCE_STATE_PENDING);
    assert_int_equal(r.action.approved_at, approved);
    th_assert_str(r.action.decided_by, "alice"); /* the claim's row says who allowed it */
    th_assert_str(r.action.decision_note, "ok");
    assert_int_equal(r.action.request_len, sizeof meta - 1);
    assert_memory_equal(r.action.request, meta, sizeof meta - 1);
    char tok[ONCE_TOKEN_LEN + 1];
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    /* taken: the next claim finds none, and leaves *out zeroed */
    memset(&r, 0x5a, sizeof r);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 0);
    assert_int_equal(r.status, 0);
    assert_null(r.action.scope);
    /* a retry while it is sent is in flight */
    th_reserve_expect(e->st, &req, ONCE_IN_FLIGHT, &r);
    once_reservation_free(&r);
    /* approving again while it is sent changes nothing (an operator who
     * clicked twice); denying is too late */
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "bob", NULL), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_deny(e->st, S, "k", "alice", NULL), ONCE_ESTATE);

    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, "m-1"), 0);
    th_reserve_expect(e->st, &req, ONCE_COMPLETED, &r);
    th_assert_response_eq(&r.action.response, &resp);
    assert_int_equal(r.action.approved_at, approved); /* kept after it is sent */
    th_assert_str(r.action.decided_by, "alice");
    th_assert_str(r.action.decision_note, "ok");
    once_reservation_free(&r);
    /* and once it is done */
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "bob", NULL), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_deny(e->st, S, "k", "alice", NULL), ONCE_ESTATE);
}

/* Deny: DENIED with the note, a trail line, kept for the retention; every
 * retry is refused with the note. No decision after it. */
static void test_deny(void **state)
{
    th_env *e = *state;
    once_reserve_req req = approval_req("k", TTL_MS);
    req.retention_ms = 3600000;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    int64_t t0 = once_now_ms();
    th_assert_rc(once_deny(e->st, S, "k", "alice", "too expensive"), 0);
    int64_t t1 = once_now_ms();
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_int_equal(a.state, ONCE_STATE_DENIED);
    th_assert_str(a.note, "too expensive");
    assert_int_equal(a.approved_at, 0);
    assert_in_range(a.updated_at, t0, t1);
    assert_int_equal(a.expires_at, a.updated_at + 3600000);
    assert_non_null(a.trail);
    assert_non_null(strstr(a.trail, "Z denied by alice: too expensive"));
    th_assert_str(a.decided_by, "alice");
    th_assert_str(a.decision_note, "too expensive");
    once_action_free(&a);

    th_reserve_expect(e->st, &req, ONCE_DENIED, &r);
    th_assert_str(r.action.note, "too expensive");
    th_assert_str(r.action.decided_by, "alice"); /* a refused retry sees who said no */
    assert_string_equal(r.token, "");
    once_reservation_free(&r);
    once_reserve_req plain = th_req(S, "k", 30000);
    th_reserve_expect(e->st, &plain, ONCE_DENIED, &r);
    once_reservation_free(&r);
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "alice", NULL), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "k", once_deny(e->st, S, "k", "alice", NULL), ONCE_ESTATE);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 0);

    /* without a note, the note says who */
    reserve_awaiting(e->st, "k2", TTL_MS);
    th_assert_rc(once_deny(e->st, S, "k2", "bob", NULL), 0);
    th_get(e->st, S, "k2", &a);
    th_assert_str(a.note, "denied by bob");
    assert_non_null(strstr(a.trail, "Z denied by bob"));
    th_assert_str(a.decided_by, "bob");
    assert_null(a.decision_note); /* no note was given: none is made up */
    once_action_free(&a);
}

/* An approved action is being sent: it can no longer be denied. */
static void test_deny_after_approve(void **state)
{
    th_env *e = *state;
    reserve_awaiting(e->st, "k", TTL_MS);
    th_assert_rc(once_approve(e->st, S, "k", "alice", NULL), 0);
    assert_true(trail_has(e->st, "k", "Z approved by alice"));
    th_assert_rc(once_deny(e->st, S, "k", "bob", "no"), ONCE_ESTATE);
    assert_non_null(strstr(once_errdetail(), "approved and is being sent"));
    th_assert_rc_unchanged(e->st, S, "k", once_deny(e->st, S, "k", "bob", "no"), ONCE_ESTATE);
    assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_AWAITING_APPROVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "bob", NULL), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    th_assert_str(a.decided_by, "alice");
    assert_null(a.decision_note);
    once_action_free(&a);
}

/* The arguments and states the calls refuse. */
static void test_refusals(void **state)
{
    th_env *e = *state;
    th_assert_rc(once_approve(e->st, S, "none", "alice", NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_deny(e->st, S, "none", "alice", NULL), ONCE_ENOTFOUND);
    th_reserve_new(e->st, S, "pending", NULL, 1);
    th_assert_rc(once_approve(e->st, S, "pending", "alice", NULL), ONCE_ESTATE);
    assert_non_null(strstr(once_errdetail(), "is pending"));
    th_assert_rc_unchanged(e->st, S, "pending", once_approve(e->st, S, "pending", "alice", NULL), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "pending", once_deny(e->st, S, "pending", "alice", NULL), ONCE_ESTATE);

    reserve_awaiting(e->st, "k", TTL_MS);
    char long_who[66];
    memset(long_who, 'w', 65);
    long_who[65] = '\0';
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", NULL, NULL), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "", NULL), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", long_who, NULL), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_deny(e->st, S, "k", "al\nice", NULL), ONCE_EINVAL);
    char *long_note = malloc(ONCE_TEXT_MAX + 2);
    assert_non_null(long_note);
    memset(long_note, 'n', ONCE_TEXT_MAX + 1);
    long_note[ONCE_TEXT_MAX + 1] = '\0';
    th_assert_rc_unchanged(e->st, S, "k", once_approve(e->st, S, "k", "alice", long_note), ONCE_EINVAL);
    long_note[ONCE_TEXT_MAX] = '\0';
    long_who[64] = '\0';
    th_assert_rc(once_approve(e->st, S, "k", long_who, long_note), 0); /* 64 and 4096 bytes are fine */
    once_action a;
    th_get(e->st, S, "k", &a);
    th_assert_str(a.decided_by, long_who);
    th_assert_str(a.decision_note, long_note);
    once_action_free(&a);
    free(long_note);
    th_assert_rc(once_approve(NULL, S, "k", "alice", NULL), ONCE_EINVAL);
    th_assert_rc(once_approve(e->st, "bad scope", "k", "alice", NULL), ONCE_EINVAL);

    once_reserve_req req = approval_req("t", -1);
    once_reservation r;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    req.approval_ttl_ms = ONCE_APPROVAL_TTL_MAX_MS + 1;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    req.approval_ttl_ms = ONCE_APPROVAL_TTL_MAX_MS;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);

    th_assert_rc(once_approval_claim(e->st, S, 0, &r), ONCE_EINVAL);
    th_assert_rc(once_approval_claim(e->st, S, ONCE_LEASE_MAX_MS + 1, &r), ONCE_EINVAL);
    th_assert_rc(once_approval_claim(e->st, "bad scope", 1000, &r), ONCE_EINVAL);
    th_assert_rc(once_approval_claim(e->st, S, 1000, NULL), ONCE_EINVAL);
    th_assert_rc(once_approval_oldest(e->st, NULL), ONCE_EINVAL);
    th_assert_rc(once_expire_approvals(e->st, "bad scope", once_now_ms(), NULL), ONCE_EINVAL);
    th_assert_rc(once_expire_approvals(e->st, NULL, -1, NULL), ONCE_EINVAL);
}

/* Past the deadline, undecided actions are denied (approved ones never);
 * the lease loops never take a deadline for a lease; the oldest undecided
 * one's age is there to watch. */
static void test_expire(void **state)
{
    th_env *e = *state;
    int64_t oldest = -1;
    th_assert_rc(once_approval_oldest(e->st, &oldest), 0);
    assert_int_equal(oldest, 0);

    reserve_awaiting(e->st, "a", 50);  /* undecided: expires */
    reserve_awaiting(e->st, "b", 50);  /* approved: waits for its sender */
    th_sleep_ms(5);
    reserve_awaiting(e->st, "c", TTL_MS);
    th_assert_rc(once_approve(e->st, S, "b", "alice", NULL), 0);
    once_action a, c;
    th_get(e->st, S, "a", &a);
    th_get(e->st, S, "c", &c);
    th_assert_rc(once_approval_oldest(e->st, &oldest), 0);
    assert_int_equal(oldest, a.created_at);
    th_sleep_ms(120);

    /* the lease loops leave them alone */
    int64_t now = once_now_ms();
    size_t n = 99;
    th_assert_rc(once_expire_leases(e->st, now, &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_hold_unknown(e->st, NULL, "held", &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_sweep(e->st, now, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(th_state(e->st, S, "a"), ONCE_STATE_AWAITING_APPROVAL);

    /* past its deadline, before the loop: a retry still waits */
    once_reservation r;
    once_reserve_req plain = th_req(S, "a", 30000);
    th_reserve_expect(e->st, &plain, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);

    th_assert_rc(once_expire_approvals(e->st, "other", now, &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_expire_approvals(e->st, NULL, a.lease_expires_at - 1, &n), 0);
    assert_int_equal(n, 0);
    th_assert_rc(once_expire_approvals(e->st, S, now, &n), 0);
    assert_int_equal(n, 1);
    once_action x;
    th_get(e->st, S, "a", &x);
    assert_int_equal(x.state, ONCE_STATE_DENIED);
    th_assert_str(x.note, "approval expired (nobody decided within approve_ttl)");
    assert_non_null(x.trail);
    assert_non_null(strstr(x.trail, "Z expired: nobody decided within approve_ttl"));
    assert_int_equal(x.updated_at, now);
    assert_int_equal(x.expires_at, now + x.retention_ms);
    assert_null(x.decided_by); /* nobody decided: no human's name */
    assert_null(x.decision_note);
    once_action_free(&x);
    th_get(e->st, S, "b", &x);
    th_assert_str(x.decided_by, "alice");
    once_action_free(&x);
    assert_int_equal(th_state(e->st, S, "b"), ONCE_STATE_AWAITING_APPROVAL);
    assert_int_equal(th_state(e->st, S, "c"), ONCE_STATE_AWAITING_APPROVAL);
    th_assert_rc(once_expire_approvals(e->st, NULL, now, &n), 0);
    assert_int_equal(n, 0);

    th_reserve_expect(e->st, &plain, ONCE_DENIED, &r);
    th_assert_str(r.action.note, "approval expired (nobody decided within approve_ttl)");
    once_reservation_free(&r);

    /* the oldest undecided is now c; approved b does not count */
    th_assert_rc(once_approval_oldest(e->st, &oldest), 0);
    assert_int_equal(oldest, c.created_at);
    th_assert_rc(once_deny(e->st, S, "c", "alice", NULL), 0);
    th_assert_rc(once_approval_oldest(e->st, &oldest), 0);
    assert_int_equal(oldest, 0);
    once_action_free(&a);
    once_action_free(&c);
}

/* A denial is swept after its retention; a reservation then starts over
 * (approval again, or a plain attempt), and a re-armed row forgets its
 * approval. */
static void test_retention_sweep_rearm(void **state)
{
    th_env *e = *state;
    once_reserve_req req = approval_req("swept", TTL_MS);
    req.retention_ms = 50;
    once_reservation r;
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    th_assert_rc(once_deny(e->st, S, "swept", "alice", NULL), 0);
    once_action a;
    th_get(e->st, S, "swept", &a);
    int64_t expires = a.expires_at;
    once_action_free(&a);
    size_t n = 9;
    th_assert_rc(once_sweep(e->st, expires - 1, &n), 0);
    assert_int_equal(n, 0); /* within its retention */
    th_sleep_ms(80);
    th_assert_rc(once_sweep(e->st, once_now_ms(), &n), 0);
    assert_int_equal(n, 1);
    th_assert_rc(once_get(e->st, S, "swept", &a), ONCE_ENOTFOUND);

    /* past its retention, not swept yet: a new attempt, waiting again */
    req.key = "again";
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    th_assert_rc(once_deny(e->st, S, "again", "alice", "no"), 0);
    th_sleep_ms(80);
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.attempt, 2);
    assert_int_equal(r.action.state, ONCE_STATE_AWAITING_APPROVAL);
    assert_null(r.action.note);
    assert_null(r.action.decided_by); /* undecided again */
    assert_null(r.action.decision_note);
    assert_int_equal(r.action.expires_at, 0);
    once_reservation_free(&r);
    /* ... or a plain one */
    th_assert_rc(once_deny(e->st, S, "again", "alice", "no"), 0);
    th_sleep_ms(80);
    once_reserve_req plain = th_req(S, "again", 30000);
    plain.retention_ms = 50;
    th_reserve_expect(e->st, &plain, ONCE_RESERVED, &r);
    assert_int_equal(r.attempt, 3);
    assert_true(th_is_hex_token(r.token));
    once_reservation_free(&r);
    once_action a2;
    th_get(e->st, S, "again", &a2);
    assert_null(a2.decided_by);
    assert_null(a2.decision_note);
    once_action_free(&a2);

    /* approved, claimed, released: a new reservation forgets the approval */
    req.key = "rearm";
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    once_reservation_free(&r);
    th_assert_rc(once_approve(e->st, S, "rearm", "alice", "fine"), 0);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 1);
    assert_string_equal(r.action.key, "rearm");
    th_assert_rc(once_release(e->st, S, "rearm", r.token, "refused upstream"), 0);
    once_reservation_free(&r);
    th_reserve_expect(e->st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.attempt, 3);
    assert_int_equal(r.action.approved_at, 0);
    assert_null(r.action.error);
    assert_null(r.action.decided_by);
    assert_null(r.action.decision_note);
    once_reservation_free(&r);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 0); /* waits for a human again */
}

/* Approved actions are claimed oldest approval first, each once. */
static void test_claim_order(void **state)
{
    th_env *e = *state;
    reserve_awaiting(e->st, "first", TTL_MS);
    reserve_awaiting(e->st, "second", TTL_MS);
    reserve_awaiting(e->st, "undecided", TTL_MS);
    th_assert_rc(once_approve(e->st, S, "second", "alice", NULL), 0);
    th_sleep_ms(3);
    th_assert_rc(once_approve(e->st, S, "first", "alice", NULL), 0);
    once_reservation r;
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 1);
    assert_string_equal(r.action.key, "second");
    once_reservation_free(&r);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 1);
    assert_string_equal(r.action.key, "first");
    once_reservation_free(&r);
    th_assert_rc(once_approval_claim(e->st, S, 30000, &r), 0);
}

typedef struct claimer {
    once_store *st;
    pthread_barrier_t *barrier;
    int rc;
    char token[ONCE_TOKEN_LEN + 1];
} claimer;

static void *claim_main(void *arg)
{
    claimer *c = arg;
    pthread_barrier_wait(c->barrier);
    once_reservation r;
    c->rc = once_approval_claim(c->st, S, 30000, &r);
    if (c->rc == 1)
        memcpy(c->token, r.token, sizeof c->token);
    once_reservation_free(&r);
    return NULL;
}

/* Eight threads (on two store handles when the store outlives one) claim
 * one approved action at once: exactly one gets it, and its token is the
 * row's. */
static void test_concurrent_claims(void **state)
{
    th_env *e = *state;
    reserve_awaiting(e->st, "once", TTL_MS);
    th_assert_rc(once_approve(e->st, S, "once", "alice", NULL), 0);
    once_store *second = NULL;
    if (e->durable)
        th_assert_rc(once_store_open(e->url, &second), 0);
    pthread_barrier_t barrier;
    assert_int_equal(pthread_barrier_init(&barrier, NULL, NCLAIMERS), 0);
    claimer cs[NCLAIMERS];
    pthread_t th[NCLAIMERS];
    for (int i = 0; i < NCLAIMERS; i++) {
        cs[i] = (claimer){.st = second && i % 2 ? second : e->st, .barrier = &barrier};
        assert_int_equal(pthread_create(&th[i], NULL, claim_main, &cs[i]), 0);
    }
    int won = -1;
    for (int i = 0; i < NCLAIMERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (cs[i].rc != 0 && cs[i].rc != 1)
            fail_msg("claimer %d: rc %d", i, cs[i].rc);
        if (cs[i].rc == 1) {
            assert_int_equal(won, -1);
            won = i;
        }
    }
    pthread_barrier_destroy(&barrier);
    once_store_close(second);
    assert_int_not_equal(won, -1);
    th_assert_rc(once_complete(e->st, S, "once", cs[won].token, NULL, NULL), 0);
    assert_int_equal(th_state(e->st, S, "once"), ONCE_STATE_COMPLETED);
}

/* The member name of j, which must be a string; NULL (failing) if it is
 * absent, null or of another type. */
static const char *json_str_member(json_t *j, const char *name)
{
    json_t *v = json_object_get(j, name);
    if (!json_is_string(v))
        fail_msg("%s: not a string", name);
    return json_string_value(v);
}

/* The JSON of an action carries approved_at (a time, or null), decided_by
 * and decision_note (strings, or null: undecided, or no note). */
static void test_json(void **state)
{
    th_env *e = *state;
    reserve_awaiting(e->st, "k", TTL_MS);
    once_action a;
    th_get(e->st, S, "k", &a);
    json_t *j = NULL;
    assert_int_equal(action_json_from(&a, &j), 0);
    assert_true(json_is_null(json_object_get(j, "approved_at")));
    assert_true(json_is_null(json_object_get(j, "decided_by")));
    assert_true(json_is_null(json_object_get(j, "decision_note")));
    assert_string_equal(json_string_value(json_object_get(j, "state")), "awaiting_approval");
    json_decref(j);
    once_action_free(&a);
    th_assert_rc(once_approve(e->st, S, "k", "alice", "ok"), 0);
    th_get(e->st, S, "k", &a);
    assert_int_equal(action_json_from(&a, &j), 0);
    const char *t = json_string_value(json_object_get(j, "approved_at"));
    assert_non_null(t);
    assert_non_null(strchr(t, 'T'));
    assert_int_equal(t[strlen(t) - 1], 'Z');
    json_t *trail = json_object_get(j, "trail");
    assert_int_equal(json_array_size(trail), 1);
    assert_non_null(strstr(json_string_value(json_array_get(trail, 0)), "approved by alice: ok"));
    assert_string_equal(json_str_member(j, "decided_by"), "alice");
    assert_string_equal(json_str_member(j, "decision_note"), "ok");
    json_decref(j);
    once_action_free(&a);

    /* denied without a note: who, and a null note */
    reserve_awaiting(e->st, "d", TTL_MS);
    th_assert_rc(once_deny(e->st, S, "d", "operator", NULL), 0);
    th_get(e->st, S, "d", &a);
    assert_int_equal(action_json_from(&a, &j), 0);
    assert_string_equal(json_str_member(j, "decided_by"), "operator");
    assert_true(json_is_null(json_object_get(j, "decision_note")));
    assert_string_equal(json_str_member(j, "note"), "denied by operator");
    json_decref(j);
    once_action_free(&a);

    /* a stored name or note that is not UTF-8 still makes valid JSON */
    th_get(e->st, S, "d", &a);
    free(a.decision_note);
    a.decision_note = strdup("caf\xe9");
    assert_non_null(a.decision_note);
    assert_int_equal(action_json_from(&a, &j), 0);
    assert_string_equal(json_str_member(j, "decision_note"), "caf\xef\xbf\xbd");
    json_decref(j);
    once_action_free(&a);
}

/* ---- migrations from the schema before approvals (version 5) ---- */

#define OLD_VERSION 5

/* Rows of every old state, written with version 5's columns. */
#define OLD_ROWS \
    "INSERT INTO actions (id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at," \
    " expires_at, retention_ms, fingerprint, request, has_response, resp_status, resp_headers, resp_body," \
    " provider_id, error, note, lookups, lookup_next_at, trail, resp_not_stored) VALUES" \
    " (1, 'mail', 'done', 'completed', 1, '0123456789abcdef0123456789abcdef', 1000, 2000, 3000," \
    "  99999999999999, 86400000, 'fp', 'req', true, 200, '[]', 'body', 'p-1', NULL, NULL, 0, 0, NULL, 0)," \
    " (2, 'mail', 'lost', 'unknown', 2, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 1000, 2000, 3000, 0, 86400000," \
    "  NULL, NULL, false, NULL, NULL, NULL, NULL, 'lease expired', NULL, 3, 5000, 'step one', 0)," \
    " (3, 'mail', 'gone', 'released', 1, 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 1000, 2000, 3000, 4000, 1," \
    "  NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, 0);"
static const char old_rows[] = OLD_ROWS;
/* And one swept row (on SQLite), so that the id sequence is ahead of them. */
static const char old_rows_swept[] =
    OLD_ROWS "INSERT INTO actions (id, scope, key, state, attempt, token, created_at, updated_at,"
             " lease_expires_at, retention_ms) VALUES (40, 'mail', 'swept', 'completed', 1, 't', 1, 1, 1, 1);"
             "DELETE FROM actions WHERE id = 40;";

/* The rows above, as the migrated store reads them. */
static void check_old_rows(once_store *st)
{
    once_action a;
    th_get(st, S, "done", &a);
    assert_int_equal(a.state, ONCE_STATE_COMPLETED);
    assert_int_equal(a.created_at, 1000);
    assert_int_equal(a.response.status, 200);
    assert_int_equal(a.response.body_len, 4);
    assert_memory_equal(a.response.body, "body", 4);
    th_assert_str(a.provider_id, "p-1");
    assert_int_equal(a.approved_at, 0);
    assert_null(a.decided_by);
    assert_null(a.decision_note);
    once_action_free(&a);
    th_get(st, S, "lost", &a);
    assert_int_equal(a.state, ONCE_STATE_UNKNOWN);
    assert_int_equal(a.attempt, 2);
    assert_int_equal(a.lookups, 3);
    th_assert_str(a.trail, "step one");
    th_assert_str(a.error, "lease expired");
    once_action_free(&a);
    /* the migrated store works: a replay, approvals, a re-armed row */
    once_reservation r;
    once_reserve_req req = th_req(S, "done", 30000);
    th_reserve_expect(st, &req, ONCE_COMPLETED, &r);
    once_reservation_free(&r);
    req = approval_req("gone", TTL_MS);
    th_reserve_expect(st, &req, ONCE_AWAITING_APPROVAL, &r);
    assert_int_equal(r.attempt, 2);
    once_reservation_free(&r);
    th_assert_rc(once_approve(st, S, "gone", "alice", "migrated"), 0);
    th_assert_rc(once_approval_claim(st, S, 30000, &r), 1);
    th_assert_str(r.action.decided_by, "alice");
    th_assert_str(r.action.decision_note, "migrated");
    once_reservation_free(&r);
    reserve_awaiting(st, "new", TTL_MS);
    th_assert_rc(once_deny(st, S, "new", "bob", NULL), 0);
    th_get(st, S, "new", &a);
    th_assert_str(a.decided_by, "bob");
    assert_null(a.decision_note);
    once_action_free(&a);
}

/* A SQLite file at version 5 is rebuilt with the new states: every row, the
 * id sequence and the indexes kept (but actions_state, which version 7
 * drops). */
static void test_migrate_sqlite(void **state)
{
    th_env *e = *state;
    assert_int_equal(sqlite_schema_latest(), 9);
    th_sqlite_at(e, OLD_VERSION, old_rows_swept);
    check_old_rows(e->st);
    once_store_close(e->st);
    e->st = NULL;

    sqlite3 *db;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT (SELECT user_version FROM pragma_user_version),"
                                        " (SELECT min(id) FROM actions WHERE key = 'new'),"
                                        " (SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name ="
                                        " 'actions' AND name IN ('actions_pending_lease', 'actions_expiry',"
                                        " 'actions_state', 'actions_unknown', 'actions_awaiting')),"
                                        " (SELECT count(*) FROM sqlite_master WHERE name = 'actions_new')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), sqlite_schema_latest());
    assert_true(sqlite3_column_int64(st, 1) > 40); /* a swept row's id is never reused */
    assert_int_equal(sqlite3_column_int(st, 2), 4); /* all but actions_state */
    assert_int_equal(sqlite3_column_int(st, 3), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    th_env_reopen(e);
}

/* A PostgreSQL schema at version 5 migrates: rows kept, and the old
 * once_reserve (of gateways not yet upgraded) answers a row awaiting
 * approval as the new one does instead of re-arming it. */
static void test_migrate_pg(void **state)
{
    th_env *e = *state;
    assert_int_equal(pg_schema_latest(), 8);
    th_pg_at(e, OLD_VERSION, old_rows);
    check_old_rows(e->st);
    char *v = th_pg_in_schema(e, "SELECT max(version)::text || ',' || (SELECT min(id) FROM actions WHERE key = 'new')"
                              " FROM once_schema");
    char want[32];
    snprintf(want, sizeof want, "%d,", pg_schema_latest());
    assert_int_equal(strncmp(v, want, strlen(want)), 0);
    assert_true(atoll(v + strlen(want)) > 40);
    free(v);

    /* an old gateway's call meets a row awaiting approval: not re-armed */
    reserve_awaiting(e->st, "waits", TTL_MS);
    v = th_pg_in_schema(e, "SELECT answer || ',' || state FROM once_reserve('mail', 'waits',"
                        " 'cccccccccccccccccccccccccccccccc', 1, 1000, 1000, NULL, NULL, false)");
    assert_string_equal(v, "awaiting_approval,awaiting_approval");
    free(v);
}

/* ---- migrations from the schema before decided_by (SQLite 7, PostgreSQL 6) ---- */

#define SQ_BEFORE_DECIDED 7
#define PG_BEFORE_DECIDED 6

/* Decided before the columns existed: one approved and waiting for its
 * sender, one denied (its note the denial's). */
static const char decided_rows[] =
    "INSERT INTO actions (id, scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    " expires_at, retention_ms, request, note, trail, approved_at) VALUES"
    " (1, 'mail', 'yes', 'awaiting_approval', 1, '', 1000, 2000, 99999999999999, 0, 86400000, 'req', NULL,"
    "  '1970-01-01T00:00:02.000Z approved by alice: fine', 2000),"
    " (2, 'mail', 'no', 'denied', 1, '', 1000, 2000, 99999999999999, 99999999999999, 86400000, 'req', 'too much',"
    "  '1970-01-01T00:00:02.000Z denied by bob: too much', 0);";

/* The rows above, as the migrated store reads them: the decider of a
 * decision taken before the upgrade is in the trail only (decided_by null);
 * the approved one is still sent; new decisions are recorded. */
static void check_decided_rows(once_store *st)
{
    once_action a;
    th_get(st, S, "yes", &a);
    assert_int_equal(a.approved_at, 2000);
    assert_null(a.decided_by);
    assert_null(a.decision_note);
    assert_non_null(strstr(a.trail, "approved by alice: fine"));
    once_action_free(&a);
    th_get(st, S, "no", &a);
    assert_int_equal(a.state, ONCE_STATE_DENIED);
    th_assert_str(a.note, "too much");
    assert_null(a.decided_by);
    once_action_free(&a);
    once_reservation r;
    th_assert_rc(once_approval_claim(st, S, 30000, &r), 1);
    assert_string_equal(r.action.key, "yes");
    assert_null(r.action.decided_by);
    once_reservation_free(&r);
    reserve_awaiting(st, "after", TTL_MS);
    th_assert_rc(once_approve(st, S, "after", "carol", "new columns"), 0);
    th_get(st, S, "after", &a);
    th_assert_str(a.decided_by, "carol");
    th_assert_str(a.decision_note, "new columns");
    once_action_free(&a);
}

/* A SQLite file at version 7 gains decided_by and decision_note: rows
 * kept, empty for decisions taken before. */
static void test_migrate_sqlite_decided(void **state)
{
    th_env *e = *state;
    th_sqlite_at(e, SQ_BEFORE_DECIDED, decided_rows);
    check_decided_rows(e->st);
    once_store_close(e->st);
    e->st = NULL;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT (SELECT user_version FROM pragma_user_version),"
                                        " (SELECT decided_by || ',' || decision_note FROM actions WHERE key = 'after')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), sqlite_schema_latest());
    assert_string_equal((const char *)sqlite3_column_text(st, 1), "carol,new columns");
    sqlite3_finalize(st);
    sqlite3_close(db);
    th_env_reopen(e);
}

/* A PostgreSQL schema at version 6 gains them too; a gateway not yet
 * upgraded still decides through the old once_decide (nobody's name then),
 * and re-arms rows through the old once_reserve, which forgets the new
 * columns with the rest of the attempt. */
static void test_migrate_pg_decided(void **state)
{
    th_env *e = *state;
    th_pg_at(e, PG_BEFORE_DECIDED, decided_rows);
    check_decided_rows(e->st);
    char *v = th_pg_in_schema(e, "SELECT max(version)::text FROM once_schema");
    char want[16];
    snprintf(want, sizeof want, "%d", pg_schema_latest());
    assert_string_equal(v, want);
    free(v);
    v = th_pg_in_schema(e, "SELECT decided_by || ',' || decision_note FROM actions WHERE key = 'after'");
    assert_string_equal(v, "carol,new columns");
    free(v);

    /* an old gateway's decision: recorded as before, without a name */
    reserve_awaiting(e->st, "old", TTL_MS);
    v = th_pg_in_schema(e, "SELECT once_decide('mail', 'old', false, 'by an old node', 'step', 5)");
    assert_string_equal(v, "ok");
    free(v);
    once_action a;
    th_get(e->st, S, "old", &a);
    assert_int_equal(a.state, ONCE_STATE_DENIED);
    th_assert_str(a.note, "by an old node");
    assert_null(a.decided_by);
    once_action_free(&a);

    /* an old gateway's reserve re-arms a decided row past its retention:
     * the decision is forgotten with the attempt */
    reserve_awaiting(e->st, "rearm", TTL_MS);
    th_assert_rc(once_deny(e->st, S, "rearm", "dave", "no"), 0);
    free(th_pg_in_schema(e, "UPDATE actions SET expires_at = 1 WHERE key = 'rearm'"));
    v = th_pg_in_schema(e, "SELECT answer || ',' || coalesce(decided_by, '-') || ',' || coalesce(decision_note, '-')"
                        " FROM once_reserve('mail', 'rearm', 'cccccccccccccccccccccccccccccccc', 10, 1000, 1000,"
                        " NULL, NULL, false)");
    assert_string_equal(v, "reserved,-,-");
    free(v);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        T(test_reserve_awaits),
        M(test_reserve_awaits),
        P(test_reserve_awaits),
        T(test_approve_claim_complete),
        M(test_approve_claim_complete),
        P(test_approve_claim_complete),
        T(test_deny),
        M(test_deny),
        P(test_deny),
        T(test_deny_after_approve),
        P(test_deny_after_approve),
        T(test_refusals),
        P(test_refusals),
        T(test_expire),
        M(test_expire),
        P(test_expire),
        T(test_retention_sweep_rearm),
        P(test_retention_sweep_rearm),
        T(test_claim_order),
        P(test_claim_order),
        T(test_concurrent_claims),
        M(test_concurrent_claims),
        P(test_concurrent_claims),
        T(test_json),
        M(test_json),
        P(test_json),
        T(test_migrate_sqlite),
        P(test_migrate_pg),
        T(test_migrate_sqlite_decided),
        P(test_migrate_pg_decided),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
