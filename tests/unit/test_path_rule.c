/*
 * test_path_rule.c — "METHOD PATTERN" rules both ways (server/core/path_rule.c):
 * wide (approve, limits: without case, either reading of the path) and
 * narrow (an agent's allow grants: with case, every reading). The attacks
 * through the proxy are in tests/security.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "server/core/path_rule.h"

static char *rules[] = {"POST /v1/refunds*", "GET /v1/public/*", "* /health"};
#define N (sizeof rules / sizeof *rules)

static void test_wide_ignores_case_and_takes_either_reading(void **state)
{
    (void)state;
    assert_true(path_rule_any(rules, N, "post", "/V1/Refunds", PATH_RULE_WIDE));
    assert_true(path_rule_any(rules, N, "POST", "/v1;x=1/refunds;y=2/?q=1", PATH_RULE_WIDE));
    assert_true(path_rule_any(rules, N, "DELETE", "/health", PATH_RULE_WIDE));
    assert_false(path_rule_any(rules, N, "POST", "/v1/charges", PATH_RULE_WIDE));
}

static void test_narrow_needs_case_and_every_reading(void **state)
{
    (void)state;
    assert_true(path_rule_any(rules, N, "POST", "/v1/refunds/re_1?x=2", PATH_RULE_NARROW));
    assert_true(path_rule_any(rules, N, "GET", "/v1/public/a", PATH_RULE_NARROW));
    /* Another case is another path to a provider that routes with case. */
    assert_false(path_rule_any(rules, N, "POST", "/V1/refunds", PATH_RULE_NARROW));
    assert_false(path_rule_any(rules, N, "post", "/v1/refunds", PATH_RULE_NARROW));
    /* As sent it matches; a router that cuts ";params" and a trailing '/'
     * reads /v1/public, which the rule does not grant. */
    assert_false(path_rule_any(rules, N, "GET", "/v1/public/;x", PATH_RULE_NARROW));
    assert_true(path_rule_any(rules, N, "GET", "/v1/public/;x", PATH_RULE_WIDE));
    /* The query is not part of the path. */
    assert_false(path_rule_any(rules, N, "GET", "/v1/x?/v1/public/a", PATH_RULE_NARROW));
}

static void test_star_pattern_and_empty_list(void **state)
{
    (void)state;
    char *all[] = {"* *"};
    assert_true(path_rule_any(all, 1, "GET", "", PATH_RULE_NARROW));
    assert_false(path_rule_any(NULL, 0, "GET", "/", PATH_RULE_WIDE));
    assert_true(path_rule_glob("create_*", "create_issue", 12, 0));
    assert_false(path_rule_glob("create_*", "Create_issue", 12, 0));
    assert_true(path_rule_glob("support-*", "SUPPORT-eu", 10, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wide_ignores_case_and_takes_either_reading),
        cmocka_unit_test(test_narrow_needs_case_and_every_reading),
        cmocka_unit_test(test_star_pattern_and_empty_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
