/*
 * test_list.c — once_list: filters, limits, creation order, cursor paging
 * (each row exactly once, stable under concurrent inserts), bad cursors.
 */
#include "helpers.h"

#define S "lst"

static void reserve_n(once_store *st, const char *scope, const char *prefix, int from, int to)
{
    char key[64];
    for (int i = from; i < to; i++) {
        snprintf(key, sizeof key, "%s%04d", prefix, i);
        th_reserve_new(st, scope, key, NULL, 1);
    }
}

/* Pages through everything matching req with the given limit; returns the
 * keys (scope/key strings, malloc'd) in order in *keys, and the count. */
static size_t page_all(once_store *st, once_list_req req, char ***keys, size_t *pages)
{
    size_t n = 0, cap = 0;
    char **out = NULL;
    char cursor[ONCE_CURSOR_MAX] = "";
    *pages = 0;
    for (;;) {
        req.cursor = cursor;
        once_action_list l;
        memset(&l, 0, sizeof l);
        th_assert_rc(once_list(st, &req, &l), 0);
        (*pages)++;
        size_t lim = req.limit ? req.limit : 100;
        assert_true(l.count <= lim);
        for (size_t i = 0; i < l.count; i++) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                out = realloc(out, cap * sizeof *out);
                assert_non_null(out);
            }
            size_t len = strlen(l.items[i].scope) + strlen(l.items[i].key) + 2;
            out[n] = malloc(len);
            assert_non_null(out[n]);
            snprintf(out[n], len, "%s/%s", l.items[i].scope, l.items[i].key);
            n++;
        }
        assert_true(strlen(l.next) < ONCE_CURSOR_MAX);
        if (l.next[0] == 0) {
            once_action_list_free(&l);
            break;
        }
        assert_int_equal(l.count, lim); /* a page with a next is full */
        memcpy(cursor, l.next, sizeof cursor);
        once_action_list_free(&l);
        assert_true(*pages < 10000);
    }
    *keys = out;
    return n;
}

static void free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

/* 250 rows, paged by 7, 100 (default) and 1000: each exactly once, in
 * creation order. */
static void test_paging_250(void **state)
{
    th_env *e = *state;
    reserve_n(e->st, S, "k", 0, 250);
    size_t limits[] = {7, 0, 1, 250, 249, 1000};
    for (size_t li = 0; li < sizeof limits / sizeof *limits; li++) {
        once_list_req req = {.limit = limits[li]};
        char **keys;
        size_t pages;
        size_t n = page_all(e->st, req, &keys, &pages);
        assert_int_equal(n, 250);
        for (size_t i = 0; i < n; i++) {
            char want[64];
            snprintf(want, sizeof want, S "/k%04zu", i);
            assert_string_equal(keys[i], want);
        }
        size_t lim = limits[li] ? limits[li] : 100;
        size_t full = 250 / lim, rest = 250 % lim;
        /* 250 / lim full pages, plus the remainder; an empty last page is
         * tolerated only right after a full page */
        assert_true(pages == full + (rest ? 1 : 0) || (rest == 0 && pages == full + 1));
        free_keys(keys, n);
    }

    /* default limit is 100 */
    once_list_req req = {0};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 100);
    assert_true(l.next[0] != 0);
    once_action_list_free(&l);
    assert_int_equal(l.count, 0);
    assert_null(l.items);
    once_action_list_free(&l); /* twice is harmless */

    /* "" is the start, like NULL */
    req.cursor = "";
    req.limit = 3;
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.items[0].key, "k0000");
    assert_string_equal(l.items[2].key, "k0002");
    once_action_list_free(&l);
}

/* List items are the full records, identical to once_get. */
static void test_items_are_full_records(void **state)
{
    th_env *e = *state;
    char tok[33];
    once_reserve_req rq = th_req(S, "full", 60000);
    static const uint8_t meta[] = {1, 0, 2};
    rq.request = meta;
    rq.request_len = sizeof meta;
    rq.fingerprint = "fp-abc";
    once_reservation r;
    th_reserve_expect(e->st, &rq, ONCE_RESERVED, &r);
    memcpy(tok, r.token, sizeof tok);
    once_reservation_free(&r);
    once_response resp = th_resp();
    th_assert_rc(once_complete(e->st, S, "full", tok, &resp, "pid"), 0);
    th_reserve_new(e->st, S, "second", tok, 1);

    once_list_req req = {0};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 2);
    assert_string_equal(l.next, "");
    for (size_t i = 0; i < 2; i++) {
        once_action g;
        th_get(e->st, S, l.items[i].key, &g);
        th_assert_action_eq(&l.items[i], &g);
        once_action_free(&g);
    }
    assert_string_equal(l.items[0].key, "full");
    assert_int_equal(l.items[0].has_response, 1);
    th_assert_response_eq(&l.items[0].response, &resp);
    once_action_list_free(&l);
}

/* Filters by state and scope, alone and together, with paging. */
static void test_filters(void **state)
{
    th_env *e = *state;
    char tok[33], key[32];
    /* scope a: 10 pending, 10 completed, 10 released, 10 unknown, 10 held;
     * scope b: 15 completed, 5 pending */
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "a%03d", i);
        th_reserve_new(e->st, "a", key, tok, 1);
        switch (i % 5) {
        case 0:
            break;
        case 1:
            th_assert_rc(once_complete(e->st, "a", key, tok, NULL, NULL), 0);
            break;
        case 2:
            th_assert_rc(once_release(e->st, "a", key, tok, NULL), 0);
            break;
        case 3:
            th_assert_rc(once_mark_unknown(e->st, "a", key, tok, NULL), 0);
            break;
        case 4:
            th_assert_rc(once_mark_unknown(e->st, "a", key, tok, NULL), 0);
            th_assert_rc(once_hold(e->st, "a", key, NULL), 0);
            break;
        }
    }
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "b%03d", i);
        th_reserve_new(e->st, "b", key, tok, 1);
        if (i < 15)
            th_assert_rc(once_complete(e->st, "b", key, tok, NULL, NULL), 0);
    }

    struct {
        once_state state;
        const char *scope;
        size_t want;
    } cases[] = {
        {0, NULL, 70},
        {0, "a", 50},
        {0, "b", 20},
        {0, "c", 0},
        {ONCE_STATE_PENDING, NULL, 15},
        {ONCE_STATE_PENDING, "a", 10},
        {ONCE_STATE_PENDING, "b", 5},
        {ONCE_STATE_COMPLETED, NULL, 25},
        {ONCE_STATE_COMPLETED, "a", 10},
        {ONCE_STATE_COMPLETED, "b", 15},
        {ONCE_STATE_RELEASED, NULL, 10},
        {ONCE_STATE_RELEASED, "b", 0},
        {ONCE_STATE_UNKNOWN, NULL, 10},
        {ONCE_STATE_HELD, "a", 10},
        {ONCE_STATE_HELD, "b", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t limits[] = {3, 1000};
        for (size_t li = 0; li < 2; li++) {
            once_list_req req = {.state = cases[c].state, .scope = cases[c].scope, .limit = limits[li]};
            char **keys;
            size_t pages;
            size_t n = page_all(e->st, req, &keys, &pages);
            if (n != cases[c].want)
                fail_msg("state %d scope %s limit %zu: %zu rows, want %zu", (int)cases[c].state,
                         cases[c].scope ? cases[c].scope : "(any)", limits[li], n, cases[c].want);
            /* each row matches the filter and comes once */
            for (size_t i = 0; i < n; i++) {
                char *slash = strchr(keys[i], '/');
                assert_non_null(slash);
                *slash = 0;
                if (cases[c].scope)
                    assert_string_equal(keys[i], cases[c].scope);
                if (cases[c].state)
                    assert_int_equal(th_state(e->st, keys[i], slash + 1), cases[c].state);
                *slash = '/';
                for (size_t j = 0; j < i; j++)
                    assert_string_not_equal(keys[j], keys[i]);
            }
            free_keys(keys, n);
        }
    }

    /* the filtered page has the state of its items */
    once_list_req req = {.state = ONCE_STATE_HELD, .limit = 1000};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 10);
    for (size_t i = 0; i < l.count; i++)
        assert_int_equal(l.items[i].state, ONCE_STATE_HELD);
    once_action_list_free(&l);
}

/* Inserts between pages: nothing skipped or repeated; new rows come after
 * the old ones, on later pages. */
static void test_paging_stable_under_inserts(void **state)
{
    th_env *e = *state;
    reserve_n(e->st, S, "old", 0, 100);
    once_list_req req = {.limit = 30};
    char cursor[ONCE_CURSOR_MAX] = "";
    char seen[200][16];
    size_t n = 0;
    int page = 0;
    int added = 0;
    for (;;) {
        req.cursor = cursor;
        once_action_list l;
        memset(&l, 0, sizeof l);
        th_assert_rc(once_list(e->st, &req, &l), 0);
        for (size_t i = 0; i < l.count; i++) {
            assert_true(n < 200);
            snprintf(seen[n++], sizeof seen[0], "%s", l.items[i].key);
        }
        int more = l.next[0] != 0;
        memcpy(cursor, l.next, sizeof cursor);
        once_action_list_free(&l);
        page++;
        if (page <= 3) {
            /* 10 new rows after each of the first three pages; another
             * scope too, and a transition of an already-seen row */
            reserve_n(e->st, S, "new", added, added + 10);
            added += 10;
        }
        if (!more)
            break;
        assert_true(page < 100);
    }
    assert_int_equal(added, 30);
    assert_int_equal(n, 130);
    for (size_t i = 0; i < 100; i++) {
        char want[16];
        snprintf(want, sizeof want, "old%04zu", i);
        assert_string_equal(seen[i], want);
    }
    for (size_t i = 0; i < 30; i++) {
        char want[16];
        snprintf(want, sizeof want, "new%04zu", i);
        assert_string_equal(seen[100 + i], want);
    }
}

/* Rows deleted (swept) or changed between pages do not disturb paging. */
static void test_paging_with_updates(void **state)
{
    th_env *e = *state;
    char tok[33], key[32];
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "u%04d", i);
        once_reserve_req rq = th_req(S, key, 60000);
        rq.retention_ms = 1;
        once_reservation r;
        th_reserve_expect(e->st, &rq, ONCE_RESERVED, &r);
        if (i % 2)
            th_assert_rc(once_complete(e->st, S, key, r.token, NULL, NULL), 0);
        once_reservation_free(&r);
    }
    (void)tok;
    once_list_req req = {.limit = 10};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 10);
    char cursor[ONCE_CURSOR_MAX];
    memcpy(cursor, l.next, sizeof cursor);
    once_action_list_free(&l);
    /* sweep removes the 20 completed rows (half of the rest) */
    size_t swept = 0;
    th_assert_rc(once_sweep(e->st, once_now_ms() + 3600000, &swept), 0);
    assert_int_equal(swept, 20);
    size_t total = 0;
    req.cursor = cursor;
    req.limit = 1000;
    th_assert_rc(once_list(e->st, &req, &l), 0);
    total = l.count;
    for (size_t i = 0; i < l.count; i++) {
        int idx = atoi(l.items[i].key + 1);
        assert_true(idx >= 10);
        assert_int_equal(idx % 2, 0);
    }
    once_action_list_free(&l);
    assert_int_equal(total, 15); /* pending u0010..u0038, even */
}

/* Bad cursors, limits and scopes are ONCE_EINVAL. */
static void test_bad_requests(void **state)
{
    th_env *e = *state;
    reserve_n(e->st, S, "k", 0, 5);
    const char *bad[] = {"garbage", "!!!!", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", " ", "\x01\x02"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        once_list_req req = {.cursor = bad[i], .limit = 2};
        once_action_list l;
        memset(&l, 0, sizeof l);
        int rc = once_list(e->st, &req, &l);
        if (rc != ONCE_EINVAL)
            fail_msg("cursor \"%s\": rc %d, want ONCE_EINVAL", bad[i], rc);
        assert_true(strlen(once_errdetail()) > 0);
        once_action_list_free(&l);
    }
    once_list_req req = {.limit = 2};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_true(l.next[0] != 0);
    char cur[ONCE_CURSOR_MAX];
    memcpy(cur, l.next, sizeof cur);
    once_action_list_free(&l);
    /* the cursor is reusable: the same page twice */
    req.cursor = cur;
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 2);
    char k0[16];
    snprintf(k0, sizeof k0, "%s", l.items[0].key);
    assert_string_equal(k0, "k0002");
    once_action_list_free(&l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_string_equal(l.items[0].key, k0);
    once_action_list_free(&l);

    req = (once_list_req){.limit = 1001};
    th_assert_rc(once_list(e->st, &req, &l), ONCE_EINVAL);
    req = (once_list_req){.limit = (size_t)-1};
    th_assert_rc(once_list(e->st, &req, &l), ONCE_EINVAL);
    req = (once_list_req){.scope = "bad/scope"};
    th_assert_rc(once_list(e->st, &req, &l), ONCE_EINVAL);
    req = (once_list_req){.scope = ""};
    th_assert_rc(once_list(e->st, &req, &l), ONCE_EINVAL);
    req = (once_list_req){.state = (once_state)9};
    th_assert_rc(once_list(e->st, &req, &l), ONCE_EINVAL);
    req = (once_list_req){.limit = 1000};
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 5);
    once_action_list_free(&l);
    th_assert_rc(once_list(e->st, NULL, &l), ONCE_EINVAL);
    th_assert_rc(once_list(e->st, &req, NULL), ONCE_EINVAL);
    th_assert_rc(once_list(NULL, &req, &l), ONCE_EINVAL);
}

/* The scope filter is exact: "_" and "%" are not wildcards, case matters. */
static void test_scope_filter_exact(void **state)
{
    th_env *e = *state;
    const char *scopes[] = {"a_b", "axb", "a-b", "A_B", "a_b.c"};
    for (size_t i = 0; i < 5; i++)
        th_reserve_new(e->st, scopes[i], "k", NULL, 1);
    for (size_t i = 0; i < 5; i++) {
        once_list_req req = {.scope = scopes[i]};
        once_action_list l;
        memset(&l, 0, sizeof l);
        th_assert_rc(once_list(e->st, &req, &l), 0);
        assert_int_equal(l.count, 1);
        assert_string_equal(l.items[0].scope, scopes[i]);
        once_action_list_free(&l);
    }
}

/* An empty store: no items, no next. */
static void test_empty(void **state)
{
    th_env *e = *state;
    once_list_req req = {0};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &req, &l), 0);
    assert_int_equal(l.count, 0);
    assert_string_equal(l.next, "");
    once_action_list_free(&l);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)
/* P(f): f on a PostgreSQL schema of its own (helpers.h; skipped without ONCE_TEST_PG_URL). */

int main(void)
{
    const struct CMUnitTest tests[] = {
        M(test_paging_250),
        T(test_paging_250),
        P(test_paging_250),
        T(test_items_are_full_records),
        P(test_items_are_full_records),
        M(test_filters),
        P(test_filters),
        T(test_paging_stable_under_inserts),
        M(test_paging_stable_under_inserts),
        P(test_paging_stable_under_inserts),
        T(test_paging_with_updates),
        P(test_paging_with_updates),
        T(test_bad_requests),
        P(test_bad_requests),
        T(test_empty),
        P(test_empty),
        M(test_scope_filter_exact),
        P(test_scope_filter_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
