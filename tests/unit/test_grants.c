/*
 * test_grants.c — [agent.NAME] sections (server/config/config_agent.c) and
 * what they grant (server/core/grants.c), without a socket: each kind of
 * grant allowed and refused, limits read with their rule, sum and window,
 * tokens that name agents (sha256: lines too), and every mistake refused at
 * its file:line. The black-box proofs are tests/integration/test_agents.py.
 */
#include "server/config/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/core/grants.h"

#define TG_DIR "/tmp/once-test-grants"
#define TG_PATH TG_DIR "/once.ini"

static const char base[] = "[server]\n"
                           "listen = 127.0.0.1:7600\n"
                           "store = sqlite::memory:\n"
                           "[upstream.stripe]\n"
                           "url = http://127.0.0.1:9\n"
                           "[mcp.github]\n"
                           "url = http://127.0.0.1:9/mcp\n"
                           "[source.zendesk]\n"
                           "verify = none\n"
                           "insecure = yes\n"
                           "event_id = header:X-Id\n";

static char *tg_text(const char *agents)
{
    char *t = NULL;
    assert_true(asprintf(&t, "%s%s", base, agents) > 0);
    return t;
}

static void tg_expect_ok(const char *agents, once_config *cfg)
{
    char err[512];
    char *text = tg_text(agents);
    int rc = config_load_buffer(text, strlen(text), TG_PATH, cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("expected success, got %d: %s\n--- config:\n%s", rc, err, text);
    free(text);
}

/* Expects "PATH:line: ...what...". Lines count from the first line of
 * base (11 lines). */
static void tg_expect_error(const char *agents, int line, const char *what)
{
    once_config cfg;
    char err[512], prefix[128];
    char *text = tg_text(agents);
    int rc = config_load_buffer(text, strlen(text), TG_PATH, &cfg, err, sizeof err);
    if (rc == 0) {
        config_free(&cfg);
        fail_msg("expected an error at line %d (%s), loaded fine:\n%s", line, what, text);
    }
    snprintf(prefix, sizeof prefix, "%s:%d: ", TG_PATH, line);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, what) == NULL)
        fail_msg("expected '%s...%s', got '%s'\n--- config:\n%s", prefix, what, err, text);
    free(text);
}

static void test_grants_of_each_kind(void **state)
{
    (void)state;
    once_config cfg;
    tg_expect_ok("[agent.support]\n"
                 "allow = stripe: GET *, POST /v1/refunds*\n"
                 "allow = mcp.github: create_issue, add_comment\n"
                 "allow = actions: support-*\n"
                 "allow = hooks: zendesk\n",
                 &cfg);
    assert_int_equal(cfg.nagents, 1);
    const agent_cfg *a = &cfg.agents[0];
    assert_string_equal(a->name, "support");
    assert_int_equal(a->ngrants, 4);
    assert_true(grants_upstream(a, "stripe", "POST", "/v1/refunds/re_1"));
    assert_true(grants_upstream(a, "stripe", "GET", "/v1/anything"));
    assert_false(grants_upstream(a, "stripe", "POST", "/v1/charges"));
    assert_false(grants_upstream(a, "stripe", "POST", "/V1/refunds"));
    assert_false(grants_upstream(a, "other", "GET", "/"));
    assert_true(grants_tool(a, "github", "create_issue"));
    assert_false(grants_tool(a, "github", "delete_repo"));
    assert_false(grants_tool(a, "gitlab", "create_issue"));
    assert_true(grants_actions_scope(a, "support-eu"));
    assert_false(grants_actions_scope(a, "stripe"));
    assert_true(grants_scope(a, "stripe"));
    assert_true(grants_scope(a, "github"));
    assert_false(grants_scope(a, "billing"));
    assert_true(grants_source(a, "zendesk"));
    assert_false(grants_source(a, "github-hooks"));
    assert_true(grants_has_path_rules(&cfg, "stripe"));
    /* NULL (no section): full reach. */
    assert_true(grants_upstream(NULL, "x", "DELETE", "/"));
    assert_true(grants_source(NULL, "x"));
    config_free(&cfg);
}

static void test_limits_are_read_with_rule_sum_and_window(void **state)
{
    (void)state;
    once_config cfg;
    tg_expect_ok("[agent.support]\n"
                 "allow = stripe: *\n"
                 "allow = mcp.github: *\n"
                 "limit = stripe 200/1d\n"
                 "limit = stripe: POST /v1/refunds* sum({json:/amount}) 50000/1d\n"
                 "limit = mcp.github: create_issue 20/1h\n"
                 "over_limit = approve\n",
                 &cfg);
    const agent_cfg *a = &cfg.agents[0];
    assert_int_equal(a->nlimits, 3);
    assert_int_equal(a->over_limit_approve, 1);
    assert_int_equal(a->limits[0].kind, GRANT_UPSTREAM);
    assert_null(a->limits[0].rule);
    assert_null(a->limits[0].sum);
    assert_int_equal(a->limits[0].max, 200);
    assert_int_equal(a->limits[0].window_ms, 86400000);
    assert_string_equal(a->limits[1].rule, "POST /v1/refunds*");
    assert_string_equal(a->limits[1].sum, "/amount");
    assert_int_equal(a->limits[1].max, 50000);
    assert_string_equal(a->limits[1].text, "stripe: POST /v1/refunds* sum({json:/amount}) 50000/1d");
    assert_int_equal(a->limits[2].kind, GRANT_MCP);
    assert_string_equal(a->limits[2].target, "github");
    assert_string_equal(a->limits[2].rule, "create_issue");
    assert_int_equal(a->limits[2].window_ms, 3600000);
    config_free(&cfg);
}

static void test_mistakes_are_refused_at_their_line(void **state)
{
    (void)state;
    tg_expect_error("[agent.a]\nallow = nowhere: *\n", 13, "no [upstream.NAME] named 'nowhere'");
    tg_expect_error("[agent.a]\nallow = mcp.stripe: *\n", 13, "'stripe' is an upstream");
    tg_expect_error("[agent.a]\nallow = github: *\n", 13, "'github' is an MCP server");
    tg_expect_error("[agent.a]\nallow = stripe\n", 13, "is not TARGET: ITEM");
    tg_expect_error("[agent.a]\nallow = stripe: post /x\n", 13, "METHOD PATTERN");
    tg_expect_error("[agent.a]\nallow = mcp.github: a b\n", 13, "a tool name or *");
    tg_expect_error("[agent.a]\nallow = hooks: nope\n", 13, "no [source.NAME] named 'nope'");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = stripe 10/1y\n", 14, "N/WINDOW");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = stripe 0/1d\n", 14, "N/WINDOW");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = stripe 10/100d\n", 14, "between 1s and 30d");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = stripe 10/500ms\n", 14, "between 1s and 30d");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = stripe sum({header:X}) 10/1d\n", 14,
                    "sum() reads a member of the JSON body");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = actions 10/1d\n", 14, "no allow line grants its target");
    tg_expect_error("[agent.a]\nallow = stripe: *\nlimit = hooks 10/1d\n", 14, "hooks have no limits");
    tg_expect_error("[agent.a]\nallow = stripe: *\nover_limit = approve\n", 14, "does nothing without limit");
    tg_expect_error("[agent.a]\nover_limit = refuse\n", 12, "allows nothing");
    tg_expect_error("[agent.a]\nallow = stripe: *\n[agent.a]\nallow = stripe: *\n", 14, "duplicate section");
}

/* A tokens file beside the config: agents named by tokens. */
static void tg_tokens(const char *lines)
{
    mkdir(TG_DIR, 0700);
    FILE *f = fopen(TG_DIR "/tokens", "w");
    assert_non_null(f);
    fputs(lines, f);
    fclose(f);
    chmod(TG_DIR "/tokens", 0600);
}

static void test_tokens_name_agents_and_closed_needs_sections(void **state)
{
    (void)state;
    once_config cfg;
    /* sha256 of "tok-support-1": the file leaks no token. */
    tg_tokens("sha256:2b8a5ac8b63a3e2d0bb9e3a9c0d7f1f1b9d8f3d3e5b2a4c6e8f0a1b3c5d7e9f1 agent support\n"
              "tok-free-1 agent free\n"
              "tok-op-1 operator ops\n");
    char *text = NULL;
    assert_true(asprintf(&text,
                         "[server]\nlisten = 127.0.0.1:7600\nstore = sqlite::memory:\ntokens_file = tokens\n"
                         "agents = %s\n[upstream.stripe]\nurl = http://127.0.0.1:9\n"
                         "[agent.support]\nallow = stripe: *\n",
                         "open") > 0);
    char err[512];
    int rc = config_load_buffer(text, strlen(text), TG_PATH, &cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
    assert_int_equal(cfg.ntokens, 3);
    assert_non_null(grants_agent(&cfg.tokens[0]));
    assert_null(grants_agent(&cfg.tokens[1])); /* free: no section, full reach */
    assert_null(grants_agent(&cfg.tokens[2])); /* an operator */
    /* "stripe: *" is no path rule: the upstream's paths need not read one way. */
    assert_false(grants_has_path_rules(&cfg, "stripe"));
    config_free(&cfg);
    free(text);
    assert_true(asprintf(&text,
                         "[server]\nlisten = 127.0.0.1:7600\nstore = sqlite::memory:\ntokens_file = tokens\n"
                         "agents = closed\n[upstream.stripe]\nurl = http://127.0.0.1:9\n"
                         "[agent.support]\nallow = stripe: *\n") > 0);
    rc = config_load_buffer(text, strlen(text), TG_PATH, &cfg, err, sizeof err);
    assert_int_not_equal(rc, 0);
    if (strstr(err, "'free'") == NULL || strstr(err, "agents = closed") == NULL)
        fail_msg("got '%s'", err);
    free(text);
    unlink(TG_DIR "/tokens");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grants_of_each_kind),
        cmocka_unit_test(test_limits_are_read_with_rule_sum_and_window),
        cmocka_unit_test(test_mistakes_are_refused_at_their_line),
        cmocka_unit_test(test_tokens_name_agents_and_closed_needs_sections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
