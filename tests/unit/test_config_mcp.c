/*
 * test_config_mcp.c — the [mcp.NAME] sections of the configuration
 * (server/config/config_mcp.c): a Streamable HTTP server (url) and a stdio server
 * (command) load with their fields and defaults, and every mistake is
 * refused at its file:line, since a wrong tool list or key template is a
 * double effect or a skipped approval waiting to happen. The rest of the
 * loader is tests/unit/test_config.c.
 */
#include "server/config/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/key_template.h"

/* The name the text is loaded as: it names the file in messages, and its
 * directory is the base of relative paths. */
#define TM_PATH "/etc/once-test/once.ini"

static int tm_load(const char *text, once_config *cfg, char *err, size_t errlen)
{
    return config_load_buffer(text, strlen(text), TM_PATH, cfg, err, errlen);
}

static void tm_expect_ok(const char *text, once_config *cfg)
{
    char err[512];
    int rc = tm_load(text, cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("expected success, got %d: %s\n--- config:\n%s", rc, err, text);
}

/* Expects "PATH:line: ...what..." and an empty config. */
static void tm_expect_error(const char *text, int line, const char *what)
{
    once_config cfg;
    char err[512], prefix[128];
    int rc = tm_load(text, &cfg, err, sizeof err);
    if (rc == 0) {
        config_free(&cfg);
        fail_msg("expected an error at line %d (%s), loaded fine:\n%s", line, what, text);
    }
    snprintf(prefix, sizeof prefix, "%s:%d: ", TM_PATH, line);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, what) == NULL)
        fail_msg("expected '%s...%s', got '%s'\n--- config:\n%s", prefix, what, err, text);
    assert_null(cfg.upstreams);
    assert_int_equal(cfg.nupstreams, 0);
}

/* Evaluates the key template of tool over params text. */
static void tm_expect_tool_key(const upstream_cfg *u, const char *tool, const char *params, const char *want)
{
    const key_template *t = NULL;
    for (size_t i = 0; i < u->ntool_keys; i++)
        if (strcmp(u->tool_keys[i].tool, tool) == 0)
            t = u->tool_keys[i].key;
    if (t == NULL)
        fail_msg("no key.%s", tool);
    json_error_t jerr;
    json_t *p = json_loads(params, 0, &jerr);
    assert_non_null(p);
    key_source src = {.json = p};
    char key[256], err[256];
    int rc = key_template_eval(t, &src, key, sizeof key, err, sizeof err);
    json_decref(p);
    if (rc != 0)
        fail_msg("key.%s over %s: rc %d (%s)", tool, params, rc, err);
    assert_string_equal(key, want);
}

static void test_url_server(void **state)
{
    (void)state;
    once_config cfg;
    tm_expect_ok("[mcp.pay]\n"                                       /* 1 */
                 "url = http://127.0.0.1:9000/mcp\n"                 /* 2 */
                 "header = Authorization: Bearer sk-test\n"          /* 3 */
                 "header = X-Org: org-1\n"                           /* 4 */
                 "timeout = 20s\n"                                   /* 5 */
                 "key.charge = order-{json:/arguments/order_id}\n"   /* 6 */
                 "key.billing/refund = {json:/arguments/refund_id}\n" /* 7 */
                 "readonly = search, get_balance\n"                  /* 8 */
                 "approve = refund, destructive\n"                   /* 9 */
                 "approve_ttl = 1h\n"                                /* 10 */
                 "\n"
                 "[upstream.api]\n"
                 "url = http://127.0.0.1:7700\n"
                 "\n"
                 "[server]\n"
                 "lease = 20s\n"
                 "retention = 2d\n",
                 &cfg);
    assert_int_equal(cfg.nupstreams, 2);
    const upstream_cfg *u = config_upstream(&cfg, "pay");
    assert_non_null(u);
    assert_int_equal(u->mcp, 1);
    assert_int_equal(u->line, 1);
    assert_string_equal(u->url, "http://127.0.0.1:9000/mcp");
    assert_null(u->command);
    assert_int_equal(u->ncommand, 0);
    assert_int_equal(u->nheaders, 2);
    assert_string_equal(u->headers[0], "Authorization: Bearer sk-test");
    assert_string_equal(u->headers[1], "X-Org: org-1");
    assert_int_equal(u->timeout_ms, 20000);
    /* The server's lease and retention, though [server] comes later. */
    assert_int_equal(u->lease_ms, 20000);
    assert_int_equal(u->retention_ms, 2 * 86400000LL);
    assert_int_equal(u->wait_ms, 30000);
    assert_int_equal(u->ntool_keys, 2);
    assert_string_equal(u->tool_keys[0].tool, "charge");
    assert_string_equal(u->tool_keys[1].tool, "billing/refund");
    tm_expect_tool_key(u, "charge", "{\"name\":\"charge\",\"arguments\":{\"order_id\":\"o-7\"}}", "order-o-7");
    tm_expect_tool_key(u, "billing/refund", "{\"arguments\":{\"refund_id\":12}}", "12");
    assert_int_equal(u->nreadonly, 2);
    assert_string_equal(u->readonly[0], "search");
    assert_string_equal(u->readonly[1], "get_balance");
    assert_int_equal(u->napprove, 1);
    assert_string_equal(u->approve[0], "refund");
    assert_int_equal(u->approve_destructive, 1);
    assert_int_equal(u->approve_ttl_ms, 3600000);
    /* The HTTP upstream beside it is not an MCP server. */
    const upstream_cfg *api = config_upstream(&cfg, "api");
    assert_non_null(api);
    assert_int_equal(api->mcp, 0);
    assert_int_equal(api->ntool_keys, 0);
    config_free(&cfg);
    assert_null(cfg.upstreams);
}

static void test_command_server(void **state)
{
    (void)state;
    once_config cfg;
    tm_expect_ok("[server]\n"
                 "lease = 7s\n"
                 "[mcp.local]\n"
                 "command =   node  mcp_server.mjs\t--stdio   --port=0 \n"
                 "wait = 5s\n"
                 "retention = 1h\n",
                 &cfg);
    const upstream_cfg *u = config_upstream(&cfg, "local");
    assert_non_null(u);
    assert_int_equal(u->mcp, 1);
    assert_null(u->url);
    assert_int_equal(u->ncommand, 4);
    assert_string_equal(u->command[0], "node");
    assert_string_equal(u->command[1], "mcp_server.mjs");
    assert_string_equal(u->command[2], "--stdio");
    assert_string_equal(u->command[3], "--port=0");
    assert_int_equal(u->nheaders, 0);
    assert_int_equal(u->wait_ms, 5000);
    assert_int_equal(u->lease_ms, 7000);
    assert_int_equal(u->retention_ms, 3600000);
    assert_int_equal(u->timeout_ms, 60000);
    assert_int_equal(u->ntool_keys, 0);
    assert_int_equal(u->nreadonly, 0);
    assert_int_equal(u->napprove, 0);
    assert_int_equal(u->approve_destructive, 0);
    assert_int_equal(u->approve_ttl_ms, 86400000);
    config_free(&cfg);

    /* Defaults: [server]'s lease and retention, wait 30s; wait = 0s is
     * allowed (a duplicate answers in_flight at once). */
    tm_expect_ok("[mcp.a]\ncommand = srv\n[mcp.b]\nurl = https://mcp.example.com/v1/mcp\nwait = 0s\n", &cfg);
    u = config_upstream(&cfg, "a");
    assert_non_null(u);
    assert_int_equal(u->ncommand, 1);
    assert_string_equal(u->command[0], "srv");
    assert_int_equal(u->lease_ms, 10000);
    assert_int_equal(u->retention_ms, 86400000);
    assert_int_equal(u->wait_ms, 30000);
    u = config_upstream(&cfg, "b");
    assert_non_null(u);
    assert_int_equal(u->wait_ms, 0);
    assert_string_equal(u->url, "https://mcp.example.com/v1/mcp");
    config_free(&cfg);

    /* A later line replaces a list, it does not add to it. */
    tm_expect_ok("[mcp.a]\ncommand = srv\nreadonly = x\n", &cfg);
    assert_int_equal(config_upstream(&cfg, "a")->nreadonly, 1);
    config_free(&cfg);
}

/* The program is kept as written: docs/mcp.md says it is looked up in
 * PATH from once's working directory (nothing is resolved against the
 * config's directory, unlike *_file paths). */
static void test_command_as_written(void **state)
{
    (void)state;
    once_config cfg;
    tm_expect_ok("[mcp.a]\ncommand = bin/server --stdio\n[mcp.b]\ncommand = /usr/bin/env node x.mjs\n", &cfg);
    const upstream_cfg *a = config_upstream(&cfg, "a");
    assert_int_equal(a->ncommand, 2);
    assert_string_equal(a->command[0], "bin/server");
    assert_string_equal(a->command[1], "--stdio");
    const upstream_cfg *b = config_upstream(&cfg, "b");
    assert_int_equal(b->ncommand, 3);
    assert_string_equal(b->command[0], "/usr/bin/env");
    assert_string_equal(b->command[2], "x.mjs");
    config_free(&cfg);
    /* Control characters are refused (a tab is a blank). */
    tm_expect_error("[mcp.a]\ncommand = srv \x01x\n", 2, "control characters are not allowed");
}

static void test_url_or_command(void **state)
{
    (void)state;
    tm_expect_error("[server]\nlease = 1s\n[mcp.x]\nurl = http://127.0.0.1:9/mcp\ncommand = srv\n", 3,
                    "[mcp.x] needs exactly one of url (a Streamable HTTP server) and command");
    tm_expect_error("[mcp.x]\ntimeout = 5s\n[server]\n", 1, "[mcp.x] needs exactly one of url");
    tm_expect_error("[mcp.x]\n", 1, "needs exactly one of url");
    tm_expect_error("[mcp.x]\ncommand =   \t \n", 2, "command: empty");
    tm_expect_error("[mcp.x]\nurl = ftp://127.0.0.1/mcp\n", 2, "must start with http:// or https://");
    /* header goes to a url server only: named at its line. */
    tm_expect_error("[mcp.x]\ncommand = srv\nwait = 1s\nheader = Authorization: Bearer k\n", 4,
                    "header applies to a url server");
    tm_expect_error("[mcp.x]\nheader = Authorization: Bearer k\ncommand = srv\n", 2,
                    "header applies to a url server");
}

static void test_tool_keys(void **state)
{
    (void)state;
    /* A key.TOOL must name a tool. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.a*b = {json:/arguments/id}\n", 3, "is not a tool name");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.caf\xc3\xa9 = {json:/arguments/id}\n", 3,
                    "is not a tool name");
    char text[512];
    char tool[130];
    memset(tool, 't', 129);
    tool[129] = '\0';
    snprintf(text, sizeof text, "[mcp.x]\nurl = http://a/mcp\nkey.%s = {json:/arguments/id}\n", tool);
    tm_expect_error(text, 3, "is not a tool name");
    /* 128 characters are allowed. */
    tool[128] = '\0';
    snprintf(text, sizeof text, "[mcp.x]\nurl = http://a/mcp\nkey.%s = {json:/arguments/id}\n", tool);
    once_config cfg;
    tm_expect_ok(text, &cfg);
    assert_string_equal(config_upstream(&cfg, "x")->tool_keys[0].tool, tool);
    config_free(&cfg);
    /* Twice for one tool. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge = {json:/arguments/a}\nkey.other = {json:/b}\n"
                    "key.charge = {json:/arguments/b}\n",
                    5, "duplicate key 'key.charge'");
    /* Empty, and not a template. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge =\n", 3, "key.charge: empty");
    /* A tool call has JSON and headers, no path or query: refused at load,
     * not on every call. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge = {query:id}\n", 3,
                    "key.charge: {query:id} is not available to a tool call");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge = a-{path:0}\n", 3, "{path:0} is not available");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = a\napprove = a\n", 3,
                    "[mcp.x]: 'a' is in both readonly and approve");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge = {nope:x}\n", 3, "key.charge: ");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey.charge = constant\n", 3, "key.charge: ");
    /* key. alone, and the upstreams' key =, are no keys here. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey. = {json:/a}\n", 3, "key.: '' is not a tool name");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey = {json:/a}\n", 3, "unknown key 'key' in [mcp.x]");
}

/* key_source, as the proxy's (issue 26): header (the default) lets the
 * agent's own key win; template makes key.TOOL win over
 * _meta.idempotencyKey and the Idempotency-Key header, so an agent cannot
 * turn one order into two charges by sending two keys. template without
 * any key.TOOL would protect nothing: an error at its line. */
static void test_key_source(void **state)
{
    (void)state;
    once_config cfg;
    tm_expect_ok("[mcp.x]\nurl = http://a/mcp\nkey.charge = order:{json:/arguments/order_id}\nkey_source = template\n",
                 &cfg);
    assert_int_equal(config_upstream(&cfg, "x")->key_from_template, 1);
    config_free(&cfg);
    tm_expect_ok("[mcp.x]\ncommand = srv\nkey_source = header\nkey.charge = {json:/arguments/id}\n", &cfg);
    assert_int_equal(config_upstream(&cfg, "x")->key_from_template, 0);
    config_free(&cfg);
    /* The default is header, as for upstreams. */
    tm_expect_ok("[mcp.x]\ncommand = srv\nkey.charge = {json:/arguments/id}\n", &cfg);
    assert_int_equal(config_upstream(&cfg, "x")->key_from_template, 0);
    config_free(&cfg);
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey_source = always\n", 3, "key_source: 'always' is not header or "
                    "template");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nkey_source = template\nwait = 1s\n", 3,
                    "key_source: template needs key.TOOL = TEMPLATE in [mcp.x]");
    tm_expect_error("[mcp.x]\ncommand = srv\nkey_source = template\nkey_source = header\n", 4,
                    "duplicate key 'key_source'");
}

static void test_tool_lists(void **state)
{
    (void)state;
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = a,,b\n", 3, "readonly: item 2 '' is not a tool name");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = a:b\n", 3, "is not a tool name");
    /* destructive is a word of approve only. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = destructive,a b\n", 3,
                    "readonly: item 2 'a b' is not a tool name");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\napprove = refund, GET /v1/refunds\n", 3,
                    "approve: item 2 'GET /v1/refunds' is not a tool name (1-128 of A-Z a-z 0-9 _ - . /) or "
                    "'destructive'");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\napprove =\n", 3, "approve: item 1 '' is not a tool name");
    /* approve_ttl without approve does nothing: an error at its line. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\napprove_ttl = 1h\nwait = 1s\n", 3,
                    "approve_ttl: does nothing without approve");
    once_config cfg;
    tm_expect_ok("[mcp.x]\nurl = http://a/mcp\napprove = destructive\napprove_ttl = 10m\n", &cfg);
    assert_int_equal(config_upstream(&cfg, "x")->approve_destructive, 1);
    assert_int_equal(config_upstream(&cfg, "x")->napprove, 0);
    assert_int_equal(config_upstream(&cfg, "x")->approve_ttl_ms, 600000);
    config_free(&cfg);
    /* Bounds. */
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nwait = 11m\n", 3, "wait");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\ntimeout = 0s\n", 3, "timeout");
}

/* A tool listed twice is named in the message (config_tool_item quotes
 * it). */
static void test_tool_listed_twice(void **state)
{
    (void)state;
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = a, b, a\n", 3, "readonly: 'a' is listed twice");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\napprove = refund, refund\n", 3, "approve: 'refund' is listed twice");
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nreadonly = get_balance,search , get_balance\n", 3,
                    "readonly: 'get_balance' is listed twice");
}

static void test_one_namespace(void **state)
{
    (void)state;
    tm_expect_error("[upstream.pay]\nurl = http://127.0.0.1:7700\n\n[mcp.pay]\nurl = http://127.0.0.1:9/mcp\n", 4,
                    "[mcp.pay]: the name is taken by [upstream.pay] (line 1): upstreams and MCP servers share one "
                    "namespace");
    tm_expect_error("[mcp.pay]\ncommand = srv\n[upstream.pay]\nurl = http://127.0.0.1:7700\n", 3,
                    "[upstream.pay]: the name is taken by [mcp.pay] (line 1): upstreams and MCP servers share one "
                    "namespace");
    tm_expect_error("[mcp.pay]\ncommand = srv\n[mcp.pay]\ncommand = srv\n", 3,
                    "duplicate section [mcp.pay] (first at line 1)");
    tm_expect_error("[mcp.a/b]\ncommand = srv\n", 1, "name is 1-64 characters");
    tm_expect_error("[mcp.]\ncommand = srv\n", 1, "name is 1-64 characters");
}

static void test_unknown_keys(void **state)
{
    (void)state;
    tm_expect_error("[mcp.x]\nurl = http://a/mcp\nrelease_on = 429\n", 3, "unknown key 'release_on' in [mcp.x]");
    tm_expect_error("[mcp.x]\ncommand = srv\nreadOnly = a\n", 3, "unknown key 'readOnly' in [mcp.x]");
    tm_expect_error("[mcp.x]\ncommand = srv\nlookup = GET /x\n", 3, "unknown key 'lookup' in [mcp.x]");
    tm_expect_error("[mcp.x]\ncommand = srv\nwait = 1s\nwait = 2s\n", 4, "duplicate key 'wait'");
    tm_expect_error("[mcp.x]\ncommand = srv\ncommand = other\n", 3, "duplicate key 'command'");
}

/* The keys every endpoint has (config_endpoint.c) read, default and fail
 * alike in [upstream.NAME] and [mcp.NAME], each message naming its own
 * section; a duplicate of a shared key is still a duplicate. */
static void test_endpoint_keys(void **state)
{
    static const char *const heads[] = {"[upstream.x]\nurl = http://a\n", "[mcp.x]\nurl = http://a/mcp\n"};
    static const char *const names[] = {"upstream.x", "mcp.x"};
    char text[512], what[128];
    (void)state;
    for (size_t s = 0; s < 2; s++) {
        once_config cfg;
        snprintf(text, sizeof text, "%sheader = X-Api: k\n[server]\nlease = 9s\nretention = 2h\n", heads[s]);
        tm_expect_ok(text, &cfg);
        const upstream_cfg *u = &cfg.upstreams[0];
        assert_int_equal(u->mcp, (int)s);
        assert_int_equal(u->nheaders, 1);
        assert_string_equal(u->headers[0], "X-Api: k");
        assert_int_equal(u->timeout_ms, 60000);
        assert_int_equal(u->lease_ms, 9000);
        assert_int_equal(u->retention_ms, 2 * 3600000LL);
        assert_int_equal(u->max_response, 16u << 20);
        assert_int_equal(u->key_from_template, 0);
        assert_int_equal(u->approve_ttl_ms, 24 * 3600000LL);
        config_free(&cfg);
        snprintf(text, sizeof text, "%stimeout = 25h\n", heads[s]);
        tm_expect_error(text, 3, "timeout: at most 1d");
        snprintf(text, sizeof text, "%slease = 8d\n", heads[s]);
        tm_expect_error(text, 3, "lease: at most 7d");
        snprintf(text, sizeof text, "%smax_response = 65MiB\n", heads[s]);
        snprintf(what, sizeof what, "[%s]: max_response may be at most 64MiB", names[s]);
        tm_expect_error(text, 3, what);
        snprintf(text, sizeof text, "%sheader = Connection: close\n", heads[s]);
        tm_expect_error(text, 3, "header: header 'Connection' cannot be injected");
        snprintf(text, sizeof text, "%sapprove_ttl = 1h\napprove_ttl = 2h\n", heads[s]);
        tm_expect_error(text, 4, "duplicate key 'approve_ttl'");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_server),
        cmocka_unit_test(test_command_server),
        cmocka_unit_test(test_command_as_written),
        cmocka_unit_test(test_url_or_command),
        cmocka_unit_test(test_tool_keys),
        cmocka_unit_test(test_key_source),
        cmocka_unit_test(test_tool_lists),
        cmocka_unit_test(test_tool_listed_twice),
        cmocka_unit_test(test_one_namespace),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_endpoint_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
