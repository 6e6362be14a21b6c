/*
 * test_illegal.c — every illegal transition answers its documented error
 * code and leaves the row unchanged in every field (once_get before and
 * after); the documented idempotent repeats answer 0 and change nothing.
 */
#include "helpers.h"

#define S "mail"
static const char *BOGUS = "0123456789abcdef0123456789abcdef"; /* well-formed, never issued */

static void make_pending(th_env *e, const char *key, char *tok)
{
    th_reserve_new(e->st, S, key, tok, 1);
}

static void make_completed(th_env *e, const char *key, char *tok)
{
    make_pending(e, key, tok);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, key, tok, &resp, "prov"), 0);
}

static void make_released(th_env *e, const char *key, char *tok)
{
    make_pending(e, key, tok);
    th_assert_rc(once_release(e->st, S, key, tok, "refused"), 0);
}

static void make_unknown(th_env *e, const char *key, char *tok)
{
    make_pending(e, key, tok);
    th_assert_rc(once_mark_unknown(e->st, S, key, tok, "reset"), 0);
}

static void make_held(th_env *e, const char *key, char *tok)
{
    make_unknown(e, key, tok);
    th_assert_rc(once_hold(e->st, S, key, "human"), 0);
}

/* A token that was never issued is stale on a PENDING row. */
static void test_stale_token_pending(void **state)
{
    th_env *e = *state;
    char tok[33];
    make_pending(e, "k", tok);
    once_response resp = th_resp();
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", BOGUS, &resp, "x"), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_release(e->st, S, "k", BOGUS, "x"), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_mark_unknown(e->st, S, "k", BOGUS, "x"), ONCE_ESTALE);
    /* upper-cased version of the real token is not the token */
    char up[33];
    for (int i = 0; i < 33; i++)
        up[i] = (tok[i] >= 'a' && tok[i] <= 'f') ? (char)(tok[i] - 32) : tok[i];
    if (strcmp(up, tok) != 0) {
        int rc = once_complete(e->st, S, "k", up, NULL, NULL);
        assert_true(rc == ONCE_ESTALE || rc == ONCE_EINVAL);
        assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_PENDING);
    }
    /* the real token still works */
    th_assert_rc(once_complete(e->st, S, "k", tok, &resp, NULL), 0);
}

/* The token of attempt 1, after a release and a new reservation, is stale. */
static void test_stale_token_old_attempt(void **state)
{
    th_env *e = *state;
    char t1[33], t2[33];
    make_released(e, "k", t1);
    th_reserve_new(e->st, S, "k", t2, 2);
    once_response resp = th_resp();
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", t1, &resp, "x"), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_release(e->st, S, "k", t1, "x"), ONCE_ESTALE);
    th_assert_rc_unchanged(e->st, S, "k", once_mark_unknown(e->st, S, "k", t1, "x"), ONCE_ESTALE);
    assert_int_equal(th_state(e->st, S, "k"), ONCE_STATE_PENDING);

    /* attempt 2 moves to unknown; attempt 1 still cannot complete it late */
    th_assert_rc(once_mark_unknown(e->st, S, "k", t2, "timeout"), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", t1, &resp, "x"), ONCE_ESTALE);
    th_assert_rc(once_hold(e->st, S, "k", "h"), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", t1, &resp, "x"), ONCE_ESTALE);
    /* attempt 2 can */
    th_assert_rc(once_complete(e->st, S, "k", t2, &resp, "x"), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", t1, &resp, "y"), ONCE_ESTALE);
}

/* Stale tokens on settled rows. */
static void test_stale_token_settled(void **state)
{
    th_env *e = *state;
    char tok[33];
    make_completed(e, "c", tok);
    th_assert_rc_unchanged(e->st, S, "c", once_complete(e->st, S, "c", BOGUS, NULL, "x"), ONCE_ESTALE);
    make_unknown(e, "u", tok);
    th_assert_rc_unchanged(e->st, S, "u", once_complete(e->st, S, "u", BOGUS, NULL, "x"), ONCE_ESTALE);
    make_held(e, "h", tok);
    th_assert_rc_unchanged(e->st, S, "h", once_complete(e->st, S, "h", BOGUS, NULL, "x"), ONCE_ESTALE);
    make_released(e, "r", tok);
    th_assert_rc_unchanged(e->st, S, "r", once_release(e->st, S, "r", BOGUS, "x"), ONCE_ESTALE);
}

/* release / mark_unknown on UNKNOWN, HELD, COMPLETED with the current token. */
static void test_release_unknown_wrong_state(void **state)
{
    th_env *e = *state;
    char tu[33], th[33], tc[33], tr[33];
    make_unknown(e, "u", tu);
    make_held(e, "h", th);
    make_completed(e, "c", tc);
    make_released(e, "r", tr);

    th_assert_rc_unchanged(e->st, S, "u", once_release(e->st, S, "u", tu, "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "h", once_release(e->st, S, "h", th, "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "c", once_release(e->st, S, "c", tc, "x"), ONCE_ESTATE);

    th_assert_rc_unchanged(e->st, S, "h", once_mark_unknown(e->st, S, "h", th, "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "c", once_mark_unknown(e->st, S, "c", tc, "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "r", once_mark_unknown(e->st, S, "r", tr, "x"), ONCE_ESTATE);

    /* complete on RELEASED with its token */
    once_response resp = th_resp();
    th_assert_rc_unchanged(e->st, S, "r", once_complete(e->st, S, "r", tr, &resp, "x"), ONCE_ESTATE);
}

/* The documented idempotent repeats: 0 and nothing changes. */
static void test_idempotent_repeats(void **state)
{
    th_env *e = *state;
    char tc[33], tr[33], tu[33];
    make_completed(e, "c", tc);
    once_response other = th_resp();
    other.status = 500;
    other.body = (uint8_t *)"different";
    other.body_len = 9;
    th_assert_rc_unchanged(e->st, S, "c", once_complete(e->st, S, "c", tc, &other, "another"), 0);
    th_assert_rc_unchanged(e->st, S, "c", once_complete(e->st, S, "c", tc, NULL, NULL), 0);
    once_action a;
    th_get(e->st, S, "c", &a);
    once_response first = th_resp();
    th_assert_response_eq(&a.response, &first);
    assert_string_equal(a.provider_id, "prov");
    once_action_free(&a);

    make_released(e, "r", tr);
    th_assert_rc_unchanged(e->st, S, "r", once_release(e->st, S, "r", tr, "again"), 0);
    th_get(e->st, S, "r", &a);
    assert_string_equal(a.error, "refused");
    once_action_free(&a);

    make_unknown(e, "u", tu);
    th_assert_rc_unchanged(e->st, S, "u", once_mark_unknown(e->st, S, "u", tu, "again"), 0);
    th_get(e->st, S, "u", &a);
    assert_string_equal(a.error, "reset");
    once_action_free(&a);

    /* a late completion then a repeat: the first result stays */
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "u", tu, &resp, "p1"), 0);
    th_assert_rc_unchanged(e->st, S, "u", once_complete(e->st, S, "u", tu, &other, "p2"), 0);
}

/* resolve is only for UNKNOWN and HELD. */
static void test_resolve_wrong_state(void **state)
{
    th_env *e = *state;
    char t[33];
    make_pending(e, "p", t);
    make_completed(e, "c", t);
    make_released(e, "r", t);
    const char *keys[] = {"p", "c", "r"};
    for (int i = 0; i < 3; i++) {
        th_assert_rc_unchanged(e->st, S, keys[i],
                               once_resolve(e->st, S, keys[i], ONCE_OUTCOME_COMPLETED, "pid", "n"),
                               ONCE_ESTATE);
        th_assert_rc_unchanged(e->st, S, keys[i],
                               once_resolve(e->st, S, keys[i], ONCE_OUTCOME_RELEASED, NULL, "n"),
                               ONCE_ESTATE);
    }
    /* a resolved row cannot be resolved again */
    make_unknown(e, "u", t);
    th_assert_rc(once_resolve(e->st, S, "u", ONCE_OUTCOME_RELEASED, NULL, NULL), 0);
    th_assert_rc_unchanged(e->st, S, "u",
                           once_resolve(e->st, S, "u", ONCE_OUTCOME_COMPLETED, "pid", "n"),
                           ONCE_ESTATE);
}

/* hold is only for UNKNOWN. */
static void test_hold_wrong_state(void **state)
{
    th_env *e = *state;
    char t[33];
    make_pending(e, "p", t);
    make_completed(e, "c", t);
    make_released(e, "r", t);
    make_held(e, "h", t);
    th_assert_rc_unchanged(e->st, S, "p", once_hold(e->st, S, "p", "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "c", once_hold(e->st, S, "c", "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "r", once_hold(e->st, S, "r", "x"), ONCE_ESTATE);
    th_assert_rc_unchanged(e->st, S, "h", once_hold(e->st, S, "h", "x"), ONCE_ESTATE);
}

/* Missing rows are ONCE_ENOTFOUND for every call that names one. */
static void test_not_found(void **state)
{
    th_env *e = *state;
    char t[33];
    make_pending(e, "exists", t);          /* same scope, other key */
    th_reserve_new(e->st, "elsewhere", "missing", NULL, 1); /* same key, other scope */
    once_action a;
    memset(&a, 0, sizeof a);
    th_assert_rc(once_get(e->st, S, "missing", &a), ONCE_ENOTFOUND);
    th_assert_rc(once_complete(e->st, S, "missing", t, NULL, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_complete(e->st, S, "missing", BOGUS, NULL, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_release(e->st, S, "missing", t, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_mark_unknown(e->st, S, "missing", t, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_resolve(e->st, S, "missing", ONCE_OUTCOME_COMPLETED, NULL, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_resolve(e->st, S, "missing", ONCE_OUTCOME_RELEASED, NULL, NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_hold(e->st, S, "missing", NULL), ONCE_ENOTFOUND);
    th_assert_rc(once_get(e->st, "nosuchscope", "exists", &a), ONCE_ENOTFOUND);
    once_action_free(&a);
    /* none of that created a row */
    th_assert_rc(once_get(e->st, S, "missing", &a), ONCE_ENOTFOUND);
    assert_int_equal(th_state(e->st, S, "exists"), ONCE_STATE_PENDING);
}

/* Invalid arguments on an existing row leave it unchanged. */
static void test_invalid_args_row_unchanged(void **state)
{
    th_env *e = *state;
    char t[33];
    make_pending(e, "k", t);
    char big_pid[ONCE_PROVIDER_ID_MAX + 2];
    memset(big_pid, 'p', sizeof big_pid - 1);
    big_pid[sizeof big_pid - 1] = 0;
    char *big_text = malloc(ONCE_TEXT_MAX + 2);
    assert_non_null(big_text);
    memset(big_text, 'e', ONCE_TEXT_MAX + 1);
    big_text[ONCE_TEXT_MAX + 1] = 0;

    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", t, NULL, big_pid), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_release(e->st, S, "k", t, big_text), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_mark_unknown(e->st, S, "k", t, big_text), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_complete(e->st, S, "k", NULL, NULL, NULL), ONCE_EINVAL);

    th_assert_rc(once_mark_unknown(e->st, S, "k", t, NULL), 0);
    th_assert_rc_unchanged(e->st, S, "k", once_hold(e->st, S, "k", big_text), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k",
                           once_resolve(e->st, S, "k", ONCE_OUTCOME_COMPLETED, big_pid, "n"), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k",
                           once_resolve(e->st, S, "k", ONCE_OUTCOME_COMPLETED, "p", big_text), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_resolve(e->st, S, "k", (once_outcome)0, "p", "n"), ONCE_EINVAL);
    th_assert_rc_unchanged(e->st, S, "k", once_resolve(e->st, S, "k", (once_outcome)3, "p", "n"), ONCE_EINVAL);

    /* exactly at the limits is fine */
    big_pid[ONCE_PROVIDER_ID_MAX] = 0;
    big_text[ONCE_TEXT_MAX] = 0;
    th_assert_rc(once_resolve(e->st, S, "k", ONCE_OUTCOME_COMPLETED, big_pid, big_text), 0);
    once_action a;
    th_get(e->st, S, "k", &a);
    assert_string_equal(a.provider_id, big_pid);
    assert_string_equal(a.note, big_text);
    once_action_free(&a);
    free(big_text);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)
/* P(f): f on a PostgreSQL schema of its own (helpers.h; skipped without ONCE_TEST_PG_URL). */

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_stale_token_pending),
        P(test_stale_token_pending),
        T(test_stale_token_old_attempt),
        M(test_stale_token_old_attempt),
        P(test_stale_token_old_attempt),
        T(test_stale_token_settled),
        P(test_stale_token_settled),
        T(test_release_unknown_wrong_state),
        M(test_release_unknown_wrong_state),
        P(test_release_unknown_wrong_state),
        T(test_idempotent_repeats),
        P(test_idempotent_repeats),
        T(test_resolve_wrong_state),
        P(test_resolve_wrong_state),
        T(test_hold_wrong_state),
        P(test_hold_wrong_state),
        T(test_not_found),
        M(test_not_found),
        P(test_not_found),
        T(test_invalid_args_row_unchanged),
        P(test_invalid_args_row_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
