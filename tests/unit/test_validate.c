/*
 * test_validate.c — input validation (keys, scopes, leases, sizes, NULL
 * pointers), error strings, state names and once_fingerprint.
 */
#include "helpers.h"

#include <ctype.h>
#include <pthread.h>

static void expect_key_invalid(const char *key, const char *what)
{
    int rc = once_key_validate(key);
    if (rc != ONCE_EINVAL)
        fail_msg("key %s: rc %d, want ONCE_EINVAL", what, rc);
    assert_true(strlen(once_errdetail()) > 0);
}

static void expect_scope_invalid(const char *scope, const char *what)
{
    int rc = once_scope_validate(scope);
    if (rc != ONCE_EINVAL)
        fail_msg("scope %s: rc %d, want ONCE_EINVAL", what, rc);
    assert_true(strlen(once_errdetail()) > 0);
}

static void test_key_validate(void **state)
{
    (void)state;
    char buf[300];
    expect_key_invalid("", "empty");
    expect_key_invalid(NULL, "NULL");
    memset(buf, 'a', 256);
    buf[256] = 0;
    expect_key_invalid(buf, "256 bytes");
    buf[255] = 0;
    th_assert_rc(once_key_validate(buf), 0); /* 255 is the max */
    for (int c = 1; c < 0x20; c++) {
        snprintf(buf, sizeof buf, "ab%cc", c);
        expect_key_invalid(buf, "control byte");
    }
    expect_key_invalid("ab\x7f", "0x7f");
    expect_key_invalid("caf\xc3\xa9", "UTF-8 e-acute");
    expect_key_invalid("\x80", "0x80");
    expect_key_invalid("x\xff", "0xff");
    expect_key_invalid("\t", "tab");
    expect_key_invalid("a\nb", "newline");
    th_assert_rc(once_key_validate(" "), 0);
    th_assert_rc(once_key_validate("~"), 0);
    th_assert_rc(once_key_validate("msg-123:step/4 {\"x\"}"), 0);
    for (int c = 0x20; c < 0x7f; c++) {
        snprintf(buf, sizeof buf, "%c", c);
        th_assert_rc(once_key_validate(buf), 0);
    }
}

static void test_scope_validate(void **state)
{
    (void)state;
    char buf[100];
    expect_scope_invalid("", "empty");
    expect_scope_invalid(NULL, "NULL");
    memset(buf, 's', 65);
    buf[65] = 0;
    expect_scope_invalid(buf, "65 bytes");
    buf[64] = 0;
    th_assert_rc(once_scope_validate(buf), 0);
    expect_scope_invalid("a/b", "slash");
    expect_scope_invalid("a b", "space");
    expect_scope_invalid(" ", "lone space");
    expect_scope_invalid("a:b", "colon");
    expect_scope_invalid("a\tb", "tab");
    expect_scope_invalid("\xc3\xa9", "non-ASCII");
    expect_scope_invalid("a\x7f", "0x7f");
    th_assert_rc(once_scope_validate("stripe"), 0);
    th_assert_rc(once_scope_validate("Open.AI_v1-x"), 0);
    th_assert_rc(once_scope_validate("0"), 0);
    for (int c = 1; c < 0x100; c++) {
        buf[0] = 'a';
        buf[1] = (char)c;
        buf[2] = 0;
        int ok = isalnum(c) && c < 0x80;
        ok = ok || c == '.' || c == '_' || c == '-';
        int rc = once_scope_validate(buf);
        if (rc != (ok ? 0 : ONCE_EINVAL))
            fail_msg("scope \"a\\x%02x\": rc %d, want %d", c, rc, ok ? 0 : ONCE_EINVAL);
    }
}

/* reserve rejects what validate rejects, and creates nothing. */
static void test_reserve_invalid(void **state)
{
    th_env *e = *state;
    once_reservation r;
    once_reserve_req req;
    char long_key[300], long_scope[80];
    memset(long_key, 'k', 256);
    long_key[256] = 0;
    memset(long_scope, 's', 65);
    long_scope[65] = 0;

    const char *bad_keys[] = {"", long_key, "a\x01", "a\x7f", "\xc3\xa9t\xc3\xa9", "a\nb"};
    for (size_t i = 0; i < sizeof bad_keys / sizeof *bad_keys; i++) {
        req = th_req("ok", bad_keys[i], 1000);
        memset(&r, 0, sizeof r);
        th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
        assert_true(strlen(once_errdetail()) > 0);
        once_reservation_free(&r);
    }
    const char *bad_scopes[] = {"", long_scope, "a/b", "a b"};
    for (size_t i = 0; i < sizeof bad_scopes / sizeof *bad_scopes; i++) {
        req = th_req(bad_scopes[i], "k", 1000);
        memset(&r, 0, sizeof r);
        th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
        once_reservation_free(&r);
    }
    /* lease */
    int64_t bad_leases[] = {0, -1, -60000, ONCE_LEASE_MAX_MS + 1, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof bad_leases / sizeof *bad_leases; i++) {
        req = th_req("ok", "lease", bad_leases[i]);
        memset(&r, 0, sizeof r);
        int rc = once_reserve(e->st, &req, &r);
        if (rc != ONCE_EINVAL)
            fail_msg("lease_ms %lld: rc %d, want ONCE_EINVAL", (long long)bad_leases[i], rc);
        once_reservation_free(&r);
    }
    /* fingerprint: too long, or not printable */
    char long_fp[ONCE_FINGERPRINT_MAX + 2];
    memset(long_fp, 'f', sizeof long_fp - 1);
    long_fp[sizeof long_fp - 1] = 0;
    req = th_req("ok", "fp", 1000);
    req.fingerprint = long_fp;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    req.fingerprint = "ab\x01";
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    /* request metadata: NULL with a length, or over the limit */
    req = th_req("ok", "rq", 1000);
    req.request = NULL;
    req.request_len = 10;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    static const uint8_t one = 1;
    req.request = &one; /* never read past the check */
    req.request_len = (size_t)ONCE_REQUEST_MAX + 1;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);
    /* negative retention */
    req = th_req("ok", "ret", 1000);
    req.retention_ms = -5;
    th_assert_rc(once_reserve(e->st, &req, &r), ONCE_EINVAL);

    /* nothing was created */
    once_list_req lr = {0};
    once_action_list l;
    memset(&l, 0, sizeof l);
    th_assert_rc(once_list(e->st, &lr, &l), 0);
    assert_int_equal(l.count, 0);
    once_action_list_free(&l);

    /* limits themselves are fine */
    req = th_req("ok", "max-lease", ONCE_LEASE_MAX_MS);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    long_fp[ONCE_FINGERPRINT_MAX] = 0;
    req = th_req("ok", "max-fp", 1);
    req.fingerprint = long_fp;
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
    long_key[255] = 0;
    long_scope[64] = 0;
    req = th_req(long_scope, long_key, 1);
    th_reserve_expect(e->st, &req, ONCE_RESERVED, &r);
    once_reservation_free(&r);
}

/* Oversize outcome arguments. */
static void test_outcome_sizes(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, "s", "k", tok, 1);
    char pid[ONCE_PROVIDER_ID_MAX + 2];
    memset(pid, 'p', sizeof pid - 1);
    pid[sizeof pid - 1] = 0;
    th_assert_rc_unchanged(e->st, "s", "k", once_complete(e->st, "s", "k", tok, NULL, pid), ONCE_EINVAL);
    once_response resp = {.status = 200};
    resp.headers = NULL;
    resp.headers_len = 5; /* length without bytes */
    th_assert_rc_unchanged(e->st, "s", "k", once_complete(e->st, "s", "k", tok, &resp, NULL), ONCE_EINVAL);
    resp.headers_len = 0;
    resp.body = NULL;
    resp.body_len = 5;
    th_assert_rc_unchanged(e->st, "s", "k", once_complete(e->st, "s", "k", tok, &resp, NULL), ONCE_EINVAL);
    static const uint8_t b = 'x';
    resp.body = (uint8_t *)&b; /* never read past the check */
    resp.body_len = (size_t)ONCE_BODY_MAX + 1;
    th_assert_rc_unchanged(e->st, "s", "k", once_complete(e->st, "s", "k", tok, &resp, NULL), ONCE_EINVAL);
    resp.body_len = 0;
    resp.headers = "h";
    resp.headers_len = (size_t)ONCE_HEADERS_MAX + 1;
    th_assert_rc_unchanged(e->st, "s", "k", once_complete(e->st, "s", "k", tok, &resp, NULL), ONCE_EINVAL);

    /* an empty body and a large binary body round-trip */
    size_t big = 3u << 20;
    uint8_t *body = malloc(big);
    assert_non_null(body);
    for (size_t i = 0; i < big; i++)
        body[i] = (uint8_t)(i * 31 + 7);
    resp = (once_response){.status = 200, .body = body, .body_len = big};
    th_assert_rc(once_complete(e->st, "s", "k", tok, &resp, pid + 1), 0); /* 255 bytes */
    once_action a;
    th_get(e->st, "s", "k", &a);
    assert_int_equal(a.response.body_len, big);
    assert_memory_equal(a.response.body, body, big);
    assert_int_equal(strlen(a.provider_id), ONCE_PROVIDER_ID_MAX);
    once_action_free(&a);
    free(body);
}

/* NULL pointers: ONCE_EINVAL, no crash. */
static void test_null_pointers(void **state)
{
    th_env *e = *state;
    once_store *st = e->st;
    char tok[33];
    th_reserve_new(st, "s", "k", tok, 1);
    once_reserve_req req = th_req("s", "n", 1000);
    once_reservation r;
    once_action a;
    memset(&a, 0, sizeof a);
    size_t n;

    once_store *tmp = NULL;
    th_assert_rc(once_store_open(NULL, &tmp), ONCE_EINVAL);
    assert_null(tmp);
    th_assert_rc(once_store_open("sqlite::memory:", NULL), ONCE_EINVAL);

    th_assert_rc(once_reserve(NULL, &req, &r), ONCE_EINVAL);
    th_assert_rc(once_reserve(st, NULL, &r), ONCE_EINVAL);
    th_assert_rc(once_reserve(st, &req, NULL), ONCE_EINVAL);
    req.scope = NULL;
    th_assert_rc(once_reserve(st, &req, &r), ONCE_EINVAL);
    req = th_req("s", NULL, 1000);
    th_assert_rc(once_reserve(st, &req, &r), ONCE_EINVAL);

    th_assert_rc(once_complete(NULL, "s", "k", tok, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_complete(st, NULL, "k", tok, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_complete(st, "s", NULL, tok, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_complete(st, "s", "k", NULL, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_release(NULL, "s", "k", tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_release(st, NULL, "k", tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_release(st, "s", NULL, tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_release(st, "s", "k", NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown(NULL, "s", "k", tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown(st, NULL, "k", tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown(st, "s", NULL, tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown(st, "s", "k", NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_get(NULL, "s", "k", &a), ONCE_EINVAL);
    th_assert_rc(once_get(st, NULL, "k", &a), ONCE_EINVAL);
    th_assert_rc(once_get(st, "s", NULL, &a), ONCE_EINVAL);
    th_assert_rc(once_get(st, "s", "k", NULL), ONCE_EINVAL);
    th_assert_rc(once_resolve(NULL, "s", "k", ONCE_OUTCOME_COMPLETED, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_resolve(st, NULL, "k", ONCE_OUTCOME_COMPLETED, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_resolve(st, "s", NULL, ONCE_OUTCOME_COMPLETED, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_hold(NULL, "s", "k", NULL), ONCE_EINVAL);
    th_assert_rc(once_hold(st, NULL, "k", NULL), ONCE_EINVAL);
    th_assert_rc(once_hold(st, "s", NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_expire_leases(NULL, 0, &n), ONCE_EINVAL);
    th_assert_rc(once_sweep(NULL, 0, &n), ONCE_EINVAL);
    assert_int_not_equal(once_store_ping(NULL), 0);
    char fp[65];
    th_assert_rc(once_fingerprint(NULL, "/", NULL, 0, fp), ONCE_EINVAL);
    th_assert_rc(once_fingerprint("GET", NULL, NULL, 0, fp), ONCE_EINVAL);
    th_assert_rc(once_fingerprint("GET", "/", NULL, 3, fp), ONCE_EINVAL);
    th_assert_rc(once_fingerprint("GET", "/", NULL, 0, NULL), ONCE_EINVAL);
    th_assert_rc(once_state_parse(NULL, NULL), ONCE_EINVAL);

    /* *_free and close accept NULL */
    once_action_free(NULL);
    once_reservation_free(NULL);
    once_action_list_free(NULL);
    once_store_close(NULL);
    once_store_set_commit_hook(NULL, NULL, NULL);

    /* and the row is untouched by all of it */
    th_get(st, "s", "k", &a);
    assert_int_equal(a.state, ONCE_STATE_PENDING);
    once_action_free(&a);
    th_assert_rc(once_get(st, "s", "n", &a), ONCE_ENOTFOUND);
}

/* Invalid scope/key on every call that takes one. */
static void test_invalid_names_everywhere(void **state)
{
    th_env *e = *state;
    once_store *st = e->st;
    char tok[33];
    th_reserve_new(st, "s", "k", tok, 1);
    once_action a;
    memset(&a, 0, sizeof a);
    const char *bad_scope = "a/b", *bad_key = "k\x7f";
    th_assert_rc(once_get(st, bad_scope, "k", &a), ONCE_EINVAL);
    th_assert_rc(once_get(st, "s", bad_key, &a), ONCE_EINVAL);
    th_assert_rc(once_complete(st, bad_scope, "k", tok, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_complete(st, "s", bad_key, tok, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_release(st, "s", bad_key, tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_mark_unknown(st, "s", "", tok, NULL), ONCE_EINVAL);
    th_assert_rc(once_resolve(st, "", "k", ONCE_OUTCOME_RELEASED, NULL, NULL), ONCE_EINVAL);
    th_assert_rc(once_hold(st, "s", bad_key, NULL), ONCE_EINVAL);
    assert_int_equal(th_state(st, "s", "k"), ONCE_STATE_PENDING);
}

/* Malformed tokens are refused (as invalid or stale) and change nothing. */
static void test_malformed_tokens(void **state)
{
    th_env *e = *state;
    char tok[33];
    th_reserve_new(e->st, "s", "k", tok, 1);
    char prefix[17];
    memcpy(prefix, tok, 16);
    prefix[16] = 0;
    char longer[40];
    snprintf(longer, sizeof longer, "%s00", tok);
    const char *bad[] = {"", "x", prefix, longer, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "' OR 1=1 --"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        once_action before, after;
        th_get(e->st, "s", "k", &before);
        int rc = once_complete(e->st, "s", "k", bad[i], NULL, NULL);
        if (rc != ONCE_EINVAL && rc != ONCE_ESTALE)
            fail_msg("token \"%s\": rc %d, want ONCE_EINVAL or ONCE_ESTALE", bad[i], rc);
        rc = once_release(e->st, "s", "k", bad[i], NULL);
        assert_true(rc == ONCE_EINVAL || rc == ONCE_ESTALE);
        th_get(e->st, "s", "k", &after);
        th_assert_action_eq(&after, &before);
        once_action_free(&before);
        once_action_free(&after);
    }
}

static void test_strerror(void **state)
{
    (void)state;
    const int codes[] = {ONCE_OK, ONCE_EINVAL, ONCE_ENOMEM, ONCE_ESTORE, ONCE_ENOTFOUND,
                         ONCE_ESTALE, ONCE_ESTATE, ONCE_ESCHEMA, ONCE_ENOTDB, ONCE_ENOTSUP,
                         ONCE_ECLOSED, ONCE_EBUSY};
    size_t n = sizeof codes / sizeof *codes;
    for (size_t i = 0; i < n; i++) {
        const char *s = once_strerror(codes[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < i; j++)
            if (strcmp(s, once_strerror(codes[j])) == 0)
                fail_msg("codes %d and %d share \"%s\"", codes[i], codes[j], s);
    }
    /* unknown codes still get a string */
    assert_non_null(once_strerror(-999));
    assert_non_null(once_strerror(12345));
    assert_non_null(once_strerror(INT32_MIN));

    /* errdetail: never NULL; non-empty after an error */
    assert_non_null(once_errdetail());
    assert_int_equal(once_key_validate("bad\x01"), ONCE_EINVAL);
    const char *d = once_errdetail();
    assert_non_null(d);
    assert_true(strlen(d) > 0);
    assert_int_equal(once_scope_validate("a b"), ONCE_EINVAL);
    assert_true(strlen(once_errdetail()) > 0);
}

static void *errdetail_thread(void *arg)
{
    (void)arg;
    /* a fresh thread has had no error: empty, not NULL */
    const char *d = once_errdetail();
    return (void *)(uintptr_t)(d != NULL && d[0] == 0);
}

/* The detail belongs to the thread. */
static void test_errdetail_per_thread(void **state)
{
    (void)state;
    assert_int_equal(once_key_validate(""), ONCE_EINVAL);
    assert_true(strlen(once_errdetail()) > 0);
    pthread_t t;
    void *ok = NULL;
    assert_int_equal(pthread_create(&t, NULL, errdetail_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_true(ok != NULL);
    assert_true(strlen(once_errdetail()) > 0);
}

static void test_state_names(void **state)
{
    (void)state;
    const struct {
        once_state s;
        const char *name;
    } st[] = {{ONCE_STATE_PENDING, "pending"},
              {ONCE_STATE_COMPLETED, "completed"},
              {ONCE_STATE_RELEASED, "released"},
              {ONCE_STATE_UNKNOWN, "unknown"},
              {ONCE_STATE_HELD, "held"},
              {ONCE_STATE_AWAITING_APPROVAL, "awaiting_approval"},
              {ONCE_STATE_DENIED, "denied"}};
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        assert_string_equal(once_state_name(st[i].s), st[i].name);
        once_state out = 0;
        th_assert_rc(once_state_parse(st[i].name, &out), 0);
        assert_int_equal(out, st[i].s);
    }
    assert_null(once_state_name((once_state)0));
    assert_null(once_state_name((once_state)8));
    assert_null(once_state_name((once_state)-1));
    once_state out = ONCE_STATE_HELD;
    th_assert_rc(once_state_parse("", &out), ONCE_EINVAL);
    th_assert_rc(once_state_parse("bogus", &out), ONCE_EINVAL);
    th_assert_rc(once_state_parse("pending ", &out), ONCE_EINVAL);
    th_assert_rc(once_state_parse("pending", NULL), ONCE_EINVAL);

    const struct {
        once_reserve_status s;
        const char *name;
    } rs[] = {{ONCE_RESERVED, "reserved"},
              {ONCE_COMPLETED, "completed"},
              {ONCE_IN_FLIGHT, "in_flight"},
              {ONCE_UNKNOWN, "unknown"},
              {ONCE_HELD, "held"},
              {ONCE_AWAITING_APPROVAL, "awaiting_approval"},
              {ONCE_DENIED, "denied"},
              {ONCE_OVER_LIMIT, "over_limit"}};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        const char *name = once_reserve_status_name(rs[i].s);
        assert_non_null(name);
        assert_true(strlen(name) > 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(name, once_reserve_status_name(rs[j].s));
    }
    assert_string_equal(once_reserve_status_name(ONCE_RESERVED), "reserved");
    assert_string_equal(once_reserve_status_name(ONCE_COMPLETED), "completed");
    assert_null(once_reserve_status_name((once_reserve_status)0));
    assert_null(once_reserve_status_name((once_reserve_status)9));
}

static int is_lower_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

static void test_fingerprint(void **state)
{
    (void)state;
    char a[65], b[65];
    const uint8_t body[] = {'{', '}', 0, 1};
    th_assert_rc(once_fingerprint("POST", "/v1/x", body, sizeof body, a), 0);
    assert_true(is_lower_hex64(a));
    th_assert_rc(once_fingerprint("POST", "/v1/x", body, sizeof body, b), 0);
    assert_string_equal(a, b); /* deterministic */

    struct {
        const char *m, *p;
        const uint8_t *b;
        size_t n;
    } other[] = {
        {"PUT", "/v1/x", body, sizeof body},
        {"POST", "/v1/y", body, sizeof body},
        {"POST", "/v1/x", body, 2},        /* a shorter body */
        {"POST", "/v1/x", body, 3},        /* trailing NUL counts */
        {"POST", "/v1/x", NULL, 0},
        {"POST", "/v1/x{}", NULL, 0},      /* bytes moved between fields */
        {"POST/v1/x", "", body, sizeof body},
    };
    char seen[8][65];
    memcpy(seen[0], a, 65);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        th_assert_rc(once_fingerprint(other[i].m, other[i].p, other[i].b, other[i].n, seen[i + 1]), 0);
        assert_true(is_lower_hex64(seen[i + 1]));
        for (size_t j = 0; j <= i; j++)
            if (strcmp(seen[i + 1], seen[j]) == 0)
                fail_msg("fingerprint case %zu equals case %zu", i + 1, j);
    }

    /* length-prefixed: ("a","bc") vs ("ab","c"), in each pair of fields */
    char x[65], y[65];
    th_assert_rc(once_fingerprint("a", "bc", NULL, 0, x), 0);
    th_assert_rc(once_fingerprint("ab", "c", NULL, 0, y), 0);
    assert_string_not_equal(x, y);
    th_assert_rc(once_fingerprint("m", "a", (const uint8_t *)"bc", 2, x), 0);
    th_assert_rc(once_fingerprint("m", "ab", (const uint8_t *)"c", 1, y), 0);
    assert_string_not_equal(x, y);
    th_assert_rc(once_fingerprint("", "", NULL, 0, x), 0);
    assert_true(is_lower_hex64(x));
    /* an empty non-NULL body equals a NULL one */
    th_assert_rc(once_fingerprint("GET", "/", (const uint8_t *)"", 0, x), 0);
    th_assert_rc(once_fingerprint("GET", "/", NULL, 0, y), 0);
    assert_string_equal(x, y);
}

static void test_now_ms(void **state)
{
    (void)state;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t mine = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t now = once_now_ms();
    assert_true(now >= mine - 5 && now <= mine + 1000);
    assert_true(now > 1600000000000LL); /* after 2020 */
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_setup_file, th_teardown)
#define M(f) cmocka_unit_test_setup_teardown(f, th_setup_mem, th_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_validate),
        cmocka_unit_test(test_scope_validate),
        M(test_reserve_invalid),
        T(test_reserve_invalid),
        M(test_outcome_sizes),
        M(test_null_pointers),
        M(test_invalid_names_everywhere),
        M(test_malformed_tokens),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_errdetail_per_thread),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_now_ms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
