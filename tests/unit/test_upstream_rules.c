/*
 * test_upstream_rules.c — which client headers never reach an upstream, and
 * what each way a call can end is recorded as, and which requests wait for
 * a human's approval (server/core/upstream_rules.c),
 * without a socket. The black-box proofs are tests/integration/test_proxy.py
 * and tests/security.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "server/core/upstream_rules.h"

static char *injected[] = {"Authorization: Bearer sk_live_operator", "OpenAI-Organization: org-1"};
static int release_on[] = {429, 503};
static int unknown_on[] = {500, 502, 504};

static upstream_cfg demo(void)
{
    return (upstream_cfg){.name = "demo",
                          .headers = injected,
                          .nheaders = 2,
                          .release_on = release_on,
                          .nrelease_on = 2,
                          .unknown_on = unknown_on,
                          .nunknown_on = 3,
                          .forward_key_as = "Idempotency-Key-Upstream"};
}

static void test_hop_by_hop_and_forged_forwarding_dropped(void **state)
{
    (void)state;
    upstream_cfg up = demo();
    static const char *const dropped[] = {"Connection", "keep-alive", "TE", "Trailer", "Transfer-Encoding",
                                          "Upgrade", "Host", "Content-Length", "Proxy-Authorization",
                                          "Idempotency-Key", "Prefer", "Expect", "Forwarded", "X-Forwarded-For",
                                          "x-forwarded-host", "X-Forwarded-Proto", "X-Real-IP",
                                          /* any forwarding claim, and the URL rewrites some frameworks honour */
                                          "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server",
                                          "X-Original-URL", "x-rewrite-url", "X-Original-Host", "X-Host"};
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        if (!upstream_header_dropped(&up, 0, NULL, dropped[i]))
            fail_msg("%s reached the upstream", dropped[i]);
    static const char *const kept[] = {"Content-Type", "Accept", "User-Agent", "X-Request-Id", "Authorizatio",
                                       "X-Forwarded", "Stripe-Version"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (upstream_header_dropped(&up, 0, NULL, kept[i]))
            fail_msg("%s was dropped", kept[i]);
}

static void test_connection_names_are_hop_by_hop(void **state)
{
    (void)state;
    upstream_cfg up = demo();
    assert_true(upstream_header_dropped(&up, 0, "keep-alive, X-Secret-Hop", "x-secret-hop"));
    assert_true(upstream_header_dropped(&up, 0, " ,\tX-A ,X-B", "X-B"));
    assert_false(upstream_header_dropped(&up, 0, "X-Secret-Hop", "X-Secret"));
    assert_false(upstream_header_dropped(&up, 0, "X-Secret", "X-Secret-Hop"));
    assert_false(upstream_header_dropped(&up, 0, "", "Accept"));
}

static void test_injected_and_once_headers_replace_the_clients(void **state)
{
    (void)state;
    upstream_cfg up = demo();
    /* The operator's credential is never the agent's to choose. */
    assert_true(upstream_header_dropped(&up, 0, NULL, "authorization"));
    assert_true(upstream_header_dropped(&up, 0, NULL, "OPENAI-ORGANIZATION"));
    assert_true(upstream_header_dropped(&up, 0, NULL, "Idempotency-Key-Upstream"));
    assert_false(upstream_header_dropped(&up, 0, NULL, "OpenAI-Org"));
    /* once's own bearer token stays with once even where nothing is injected. */
    upstream_cfg bare = {.name = "bare"};
    assert_false(upstream_header_dropped(&bare, 0, NULL, "Authorization"));
    assert_true(upstream_header_dropped(&bare, 1, NULL, "Authorization"));
}

static void expect_class(const upstream_cfg *up, out_kind kind, long status, upstream_outcome want,
                         once_state state, const char *why_has)
{
    char why[256] = "transport error";
    upstream_outcome got = upstream_classify(up, kind, status, why, sizeof why);
    if (got != want)
        fail_msg("kind %d status %ld: outcome %d, want %d", kind, status, got, want);
    assert_int_equal(upstream_outcome_state(got), state);
    if (!strstr(why, why_has))
        fail_msg("kind %d status %ld: why '%s' lacks '%s'", kind, status, why, why_has);
}

static void test_answers_classified_by_status_lists(void **state)
{
    (void)state;
    upstream_cfg up = demo();
    /* Any answer outside the lists is the provider's answer: stored and replayed. */
    static const long completed[] = {200, 201, 204, 301, 400, 401, 402, 404, 409, 422, 501, 599};
    for (size_t i = 0; i < sizeof completed / sizeof completed[0]; i++)
        expect_class(&up, OUT_ANSWERED, completed[i], UPSTREAM_COMPLETED, ONCE_STATE_COMPLETED, "");
    expect_class(&up, OUT_ANSWERED, 429, UPSTREAM_RELEASED_PASS, ONCE_STATE_RELEASED, "429 (release_on)");
    expect_class(&up, OUT_ANSWERED, 503, UPSTREAM_RELEASED_PASS, ONCE_STATE_RELEASED, "503 (release_on)");
    expect_class(&up, OUT_ANSWERED, 500, UPSTREAM_UNKNOWN_PASS, ONCE_STATE_UNKNOWN, "500 (unknown_on)");
    expect_class(&up, OUT_ANSWERED, 504, UPSTREAM_UNKNOWN_PASS, ONCE_STATE_UNKNOWN, "504 (unknown_on)");
    char why[16] = "x";
    upstream_classify(&up, OUT_ANSWERED, 200, why, sizeof why);
    assert_string_equal(why, "");
}

static void test_transport_endings(void **state)
{
    (void)state;
    upstream_cfg up = demo();
    /* Nothing left the gateway: the next attempt may send. */
    expect_class(&up, OUT_NOT_SENT, 0, UPSTREAM_UNREACHABLE, ONCE_STATE_RELEASED, "transport error");
    /* The request went out and no whole answer came back: never resent. */
    expect_class(&up, OUT_AMBIGUOUS, 0, UPSTREAM_AMBIGUOUS, ONCE_STATE_UNKNOWN, "transport error");
    expect_class(&up, OUT_TOO_LARGE, 200, UPSTREAM_TOO_LARGE, ONCE_STATE_UNKNOWN, "transport error");
    assert_int_equal(upstream_outcome_state(UPSTREAM_NOT_FORWARDED), ONCE_STATE_RELEASED);
}

static void test_empty_lists(void **state)
{
    (void)state;
    upstream_cfg up = {.name = "plain"};
    expect_class(&up, OUT_ANSWERED, 503, UPSTREAM_COMPLETED, ONCE_STATE_COMPLETED, "");
    expect_class(&up, OUT_ANSWERED, 500, UPSTREAM_COMPLETED, ONCE_STATE_COMPLETED, "");
}

/* approve = POST /v1/refunds*, DELETE /v1/customers/ *, * /admin/ *: the
 * method or any, '*' over any characters (slashes too), letters without
 * case (a false match only asks a person), the query never part of the
 * match. */
static void test_approval_rules(void **state)
{
    (void)state;
    static char *rules[] = {"POST /v1/refunds*", "DELETE /v1/customers/*", "* /admin/*/purge"};
    upstream_cfg up = demo();
    up.approve = rules;
    up.napprove = 3;
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds"));
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds/re_1?expand=x"));
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds?x=1"));
    assert_false(upstream_needs_approval(&up, "PUT", "/v1/refunds"));
    assert_true(upstream_needs_approval(&up, "post", "/v1/refunds"));
    assert_true(upstream_needs_approval(&up, "POST", "/V1/Refunds"));
    assert_false(upstream_needs_approval(&up, "POST", "/v1/refund"));
    assert_false(upstream_needs_approval(&up, "POST", "/x/v1/refunds"));
    assert_true(upstream_needs_approval(&up, "DELETE", "/v1/customers/cu_1"));
    assert_true(upstream_needs_approval(&up, "DELETE", "/v1/customers/"));
    assert_false(upstream_needs_approval(&up, "DELETE", "/v1/customers"));
    assert_true(upstream_needs_approval(&up, "GET", "/admin/a/b/purge"));
    assert_false(upstream_needs_approval(&up, "GET", "/admin/a/b/purge/now"));
    assert_false(upstream_needs_approval(&up, "GET", "/admin/purge?/x/purge"));
    /* "all" is stored as "* *": every request, the empty target too. */
    static char *all[] = {"* *"};
    up.approve = all;
    up.napprove = 1;
    assert_true(upstream_needs_approval(&up, "GET", ""));
    assert_true(upstream_needs_approval(&up, "PATCH", "/anything?q"));
    up.napprove = 0;
    assert_false(upstream_needs_approval(&up, "POST", "/v1/refunds"));
    assert_false(upstream_has_path_rules(&up));
}

/* A rule holds however a lenient router reads the path: ";params" cut from
 * each segment, a trailing '/' dropped; the path as sent still counts. */
static void test_approval_rules_as_routed(void **state)
{
    (void)state;
    static char *rules[] = {"POST /v1/refunds", "DELETE /v1/customers/*/cards"};
    upstream_cfg up = demo();
    up.approve = rules;
    up.napprove = 2;
    assert_true(upstream_has_path_rules(&up));
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds"));
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds/"));
    assert_true(upstream_needs_approval(&up, "POST", "/v1/refunds;jsessionid=1"));
    assert_true(upstream_needs_approval(&up, "POST", "/v1;x=1/refunds;y=2/?q"));
    assert_false(upstream_needs_approval(&up, "POST", "/v1/refunds/re_1"));
    assert_true(upstream_needs_approval(&up, "DELETE", "/v1/customers/c;v=1/cards/"));
    assert_false(upstream_needs_approval(&up, "DELETE", "/v1/customers/c/cards/x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hop_by_hop_and_forged_forwarding_dropped),
        cmocka_unit_test(test_connection_names_are_hop_by_hop),
        cmocka_unit_test(test_injected_and_once_headers_replace_the_clients),
        cmocka_unit_test(test_answers_classified_by_status_lists),
        cmocka_unit_test(test_transport_endings),
        cmocka_unit_test(test_empty_lists),
        cmocka_unit_test(test_approval_rules),
        cmocka_unit_test(test_approval_rules_as_routed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
