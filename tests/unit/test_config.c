/*
 * test_config.c — the gateway's configuration loader (src/server/config.c):
 * the value parsers, every class of error with the exact file:line, ${NAME}
 * expansion, *_file keys, defaults and the environment overrides.
 *
 * config.c is not part of libonce, so it is compiled into this test.
 */
#include "server/config.c"

#include "helpers.h"

typedef struct tc_env {
    char dir[128];
    char path[192];
} tc_env;

static tc_env tc;

static int tc_setup(void **state)
{
    (void)state;
    th_mkdtemp(tc.dir, sizeof tc.dir);
    snprintf(tc.path, sizeof tc.path, "%s/once.ini", tc.dir);
    unsetenv("ONCE_LISTEN");
    unsetenv("ONCE_STORE");
    unsetenv("TC_SECRET");
    unsetenv("TC_EMPTY");
    return 0;
}

static int tc_teardown(void **state)
{
    (void)state;
    th_rmrf(tc.dir);
    unsetenv("ONCE_LISTEN");
    unsetenv("ONCE_STORE");
    unsetenv("TC_SECRET");
    unsetenv("TC_EMPTY");
    return 0;
}

/* Writes len bytes of text to dir/name. */
static void tc_write_n(const char *name, const char *text, size_t len)
{
    char p[320];
    snprintf(p, sizeof p, "%s/%s", tc.dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void tc_write(const char *name, const char *text)
{
    tc_write_n(name, text, strlen(text));
}

/* Loads text as dir/once.ini; returns config_load's result. */
static int tc_load(const char *text, once_config *cfg, char *err, size_t errlen)
{
    tc_write("once.ini", text);
    return config_load(tc.path, cfg, err, errlen);
}

/* Loads text and expects it to fail with "PATH:line: ...what...", leaving
 * the config empty. */
static void tc_expect_error(const char *text, int line, const char *what)
{
    once_config cfg;
    char err[512];
    char prefix[256];
    int rc = tc_load(text, &cfg, err, sizeof err);
    if (rc == 0)
        fail_msg("expected an error at line %d (%s), loaded fine", line, what);
    assert_true(rc < 0);
    if (line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d: ", tc.path, line);
    else
        snprintf(prefix, sizeof prefix, "%s: ", tc.path);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, what) == NULL)
        fail_msg("expected '%s...%s', got '%s'", prefix, what, err);
    assert_null(cfg.listen);
    assert_null(cfg.path);
    assert_int_equal(cfg.nupstreams, 0);
    assert_null(cfg.upstreams);
}

static void tc_expect_ok(const char *text, once_config *cfg)
{
    char err[512];
    int rc = tc_load(text, cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("expected success, got %d: %s", rc, err);
}

/* ---- value parsers --------------------------------------------------------- */

static void test_duration(void **state)
{
    (void)state;
    int64_t ms = -7;
    assert_int_equal(config_parse_duration("250ms", &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(config_parse_duration("30s", &ms), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(config_parse_duration("5m", &ms), 0);
    assert_int_equal(ms, 300000);
    assert_int_equal(config_parse_duration("24h", &ms), 0);
    assert_int_equal(ms, 86400000);
    assert_int_equal(config_parse_duration("7d", &ms), 0);
    assert_int_equal(ms, 7 * 86400000LL);
    assert_int_equal(config_parse_duration("0s", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(config_parse_duration("007s", &ms), 0);
    assert_int_equal(ms, 7000);
    assert_int_equal(config_parse_duration("9223372036854775807ms", &ms), 0);
    assert_true(ms == INT64_MAX);
    assert_int_equal(config_parse_duration("106751991167d", &ms), 0);
    assert_int_equal(ms, 106751991167LL * 86400000LL);

    static const char *const bad[] = {
        "", "30", "s", "ms", "-5s", "+5s", " 5s", "5s ", "5 s", "5S", "5sec", "1.5s", "1h30m",
        "5ss", "9223372036854775808ms", "9223372036854775807s", "106751991168d",
        "99999999999999999999999999s", "0x10s",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ms = 42;
        if (config_parse_duration(bad[i], &ms) != -1)
            fail_msg("'%s' parsed as a duration", bad[i]);
        assert_int_equal(ms, 42);
    }
    assert_int_equal(config_parse_duration(NULL, &ms), -1);
    assert_int_equal(config_parse_duration("1s", NULL), -1);
}

static void test_size(void **state)
{
    (void)state;
    size_t n = 7;
    assert_int_equal(config_parse_size("512", &n), 0);
    assert_int_equal(n, 512);
    assert_int_equal(config_parse_size("0", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(config_parse_size("64KiB", &n), 0);
    assert_int_equal(n, 65536);
    assert_int_equal(config_parse_size("1MiB", &n), 0);
    assert_int_equal(n, 1048576);
    assert_int_equal(config_parse_size("16MiB", &n), 0);
    assert_int_equal(n, 16u << 20);
    assert_int_equal(config_parse_size("1GiB", &n), 0);
    assert_int_equal(n, 1u << 30);
    assert_int_equal(config_parse_size("17179869183GiB", &n), 0);
    assert_true(n == 17179869183ULL << 30);
    assert_int_equal(config_parse_size("18446744073709551615", &n), 0);
    assert_true(n == SIZE_MAX);

    static const char *const bad[] = {
        "", "MiB", "1KB", "1kib", "1mib", "1 MiB", " 1", "1 ", "-1", "+1", "1.5MiB", "1MB", "1M",
        "1B", "18446744073709551616", "17179869184GiB", "18014398509481984KiB", "1TiB",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = 42;
        if (config_parse_size(bad[i], &n) != -1)
            fail_msg("'%s' parsed as a size", bad[i]);
        assert_int_equal(n, 42);
    }
    assert_int_equal(config_parse_size(NULL, &n), -1);
    assert_int_equal(config_parse_size("1", NULL), -1);
}

static void test_listen(void **state)
{
    (void)state;
    char host[64];
    unsigned port = 0;
    assert_int_equal(config_parse_listen("127.0.0.1:7600", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 7600);
    assert_int_equal(config_parse_listen("[::1]:8080", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 8080);
    assert_int_equal(config_parse_listen("localhost:1", host, sizeof host, &port), 0);
    assert_string_equal(host, "localhost");
    assert_int_equal(port, 1);
    assert_int_equal(config_parse_listen("0.0.0.0:65535", host, sizeof host, &port), 0);
    assert_int_equal(port, 65535);
    assert_int_equal(config_parse_listen("[::]:443", host, sizeof host, &port), 0);
    assert_string_equal(host, "::");
    assert_int_equal(config_parse_listen("[2001:db8::ffff:1.2.3.4]:9", host, sizeof host, &port), 0);

    static const char *const bad[] = {
        "", ":7600", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999999999",
        "::1:7600", "[::1]7600", "[::1]", "[::1]:", "[]:80", "[127.0.0.1]:80", "example.com:80",
        "127.0.0.1:80x", "127.0.0.1:-1", "127.0.0.1:+80", "256.0.0.1:80", "1.2.3:80",
        " 127.0.0.1:80", "127.0.0.1 :80", "LOCALHOST:80", "[fe80::1%eth0]:80", "*:80",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (config_parse_listen(bad[i], host, sizeof host, &port) != -1)
            fail_msg("'%s' parsed as a listen address", bad[i]);
    }
    /* The host buffer must hold the host and its NUL. */
    assert_int_equal(config_parse_listen("127.0.0.1:80", host, 9, &port), -1);
    assert_int_equal(config_parse_listen("127.0.0.1:80", host, 10, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(config_parse_listen(NULL, host, sizeof host, &port), -1);
    assert_int_equal(config_parse_listen("127.0.0.1:80", NULL, 10, &port), -1);
    assert_int_equal(config_parse_listen("127.0.0.1:80", host, sizeof host, NULL), -1);
}

/* ---- whole files ------------------------------------------------------------- */

static const char tc_example[] =
    "[server]\n"
    "listen = 127.0.0.1:7600\n"
    "store = sqlite:once.db\n"
    "max_body = 1MiB\n"
    "lease = 30s              ; default lease of a reservation\n"
    "retention = 24h          ; how long completed results are replayed\n"
    "tokens_file = tokens   ; optional; one bearer token per line\n"
    "\n"
    "[upstream.openai]\n"
    "url = https://api.openai.com\n"
    "header = Authorization: Bearer ${TC_SECRET}   ; injected; may repeat\n"
    "timeout = 60s\n"
    "key_required = yes       ; unsafe methods need a key\n"
    "on_mismatch = replay     ; or reject (422)\n"
    "release_on = 429,503     ; statuses that certainly did nothing\n"
    "unknown_on = 500,502,504 ; statuses that may have done something\n"
    "forward_key_as = Idempotency-Key   ; optional: the provider dedupes natively on this header\n";

static void test_example(void **state)
{
    (void)state;
    once_config cfg;
    setenv("TC_SECRET", "sk-test", 1);
    tc_write("tokens", "# agents\n\n  tok-one  \ntok-two\r\n");
    tc_expect_ok(tc_example, &cfg);
    assert_string_equal(cfg.path, tc.path);
    assert_string_equal(cfg.listen, "127.0.0.1:7600");
    assert_string_equal(cfg.store, "sqlite:once.db");
    assert_int_equal(cfg.max_body, 1 << 20);
    assert_int_equal(cfg.lease_ms, 30000);
    assert_int_equal(cfg.retention_ms, 86400000);
    assert_int_equal(cfg.ntokens, 2);
    assert_string_equal(cfg.tokens[0], "tok-one");
    assert_string_equal(cfg.tokens[1], "tok-two");
    assert_int_equal(cfg.nupstreams, 1);
    const upstream_cfg *u = config_upstream(&cfg, "openai");
    assert_non_null(u);
    assert_ptr_equal(u, &cfg.upstreams[0]);
    assert_null(config_upstream(&cfg, "OpenAI"));
    assert_null(config_upstream(&cfg, "nope"));
    assert_string_equal(u->name, "openai");
    assert_string_equal(u->url, "https://api.openai.com");
    assert_int_equal(u->nheaders, 1);
    assert_string_equal(u->headers[0], "Authorization: Bearer sk-test");
    assert_int_equal(u->timeout_ms, 60000);
    assert_int_equal(u->lease_ms, 65000); /* max(30s, 60s + 5s) */
    assert_int_equal(u->retention_ms, 86400000);
    assert_int_equal(u->key_required, 1);
    assert_int_equal(u->key_safe_methods, 0);
    assert_int_equal(u->on_mismatch, MISMATCH_REPLAY);
    assert_int_equal(u->nrelease_on, 2);
    assert_int_equal(u->release_on[0], 429);
    assert_int_equal(u->release_on[1], 503);
    assert_int_equal(u->nunknown_on, 3);
    assert_int_equal(u->unknown_on[2], 504);
    assert_string_equal(u->forward_key_as, "Idempotency-Key");
    assert_null(u->listen);
    assert_int_equal(u->max_response, 16 << 20);
    assert_int_equal(u->line, 9);
    config_free(&cfg);
    assert_null(cfg.path);
    assert_int_equal(cfg.nupstreams, 0);
    config_free(&cfg); /* twice is harmless */
}

static void test_defaults(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok("; nothing but a comment\n# and another\n", &cfg);
    assert_string_equal(cfg.listen, "127.0.0.1:7600");
    assert_string_equal(cfg.store, "sqlite:once.db");
    assert_int_equal(cfg.max_body, 1 << 20);
    assert_int_equal(cfg.lease_ms, 30000);
    assert_int_equal(cfg.retention_ms, 24 * 3600 * 1000);
    assert_int_equal(cfg.ntokens, 0);
    assert_null(cfg.tokens);
    assert_int_equal(cfg.grace_ms, 30000);
    assert_int_equal(cfg.threads, 2);
    assert_int_equal(cfg.max_connections, 4096);
    assert_int_equal(cfg.loop_interval_ms, 1000);
    assert_int_equal(cfg.nupstreams, 0);
    config_free(&cfg);

    /* An empty file, and the upstream defaults. */
    tc_expect_ok("", &cfg);
    config_free(&cfg);
    tc_expect_ok("[upstream.a]\nurl = http://127.0.0.1:7700\n", &cfg);
    const upstream_cfg *u = config_upstream(&cfg, "a");
    assert_non_null(u);
    assert_int_equal(u->nheaders, 0);
    assert_int_equal(u->timeout_ms, 60000);
    assert_int_equal(u->lease_ms, 65000);
    assert_int_equal(u->retention_ms, 86400000);
    assert_int_equal(u->key_required, 1);
    assert_int_equal(u->key_safe_methods, 0);
    assert_int_equal(u->on_mismatch, MISMATCH_REPLAY);
    assert_int_equal(u->nrelease_on, 2);
    assert_int_equal(u->release_on[0], 429);
    assert_int_equal(u->nunknown_on, 3);
    assert_int_equal(u->unknown_on[0], 500);
    assert_int_equal(u->unknown_on[1], 502);
    assert_null(u->forward_key_as);
    assert_null(u->listen);
    assert_int_equal(u->max_response, 16 << 20);
    config_free(&cfg);
}

/* [server] after the upstreams still sets their lease and retention. */
static void test_defaults_late_server(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok("[upstream.fast]\n"
                 "url = http://a\n"
                 "timeout = 2s\n"
                 "[upstream.slow]\n"
                 "url = http://b\n"
                 "timeout = 10m\n"
                 "[upstream.own]\n"
                 "url = http://c\n"
                 "timeout = 1s\n"
                 "lease = 3s\n"
                 "retention = 1h\n"
                 "[server]\n"
                 "lease = 2m\n"
                 "retention = 7d\n",
                 &cfg);
    assert_int_equal(config_upstream(&cfg, "fast")->lease_ms, 120000);
    assert_int_equal(config_upstream(&cfg, "fast")->retention_ms, 7 * 86400000LL);
    assert_int_equal(config_upstream(&cfg, "slow")->lease_ms, 605000);
    assert_int_equal(config_upstream(&cfg, "own")->lease_ms, 3000);
    assert_int_equal(config_upstream(&cfg, "own")->retention_ms, 3600000);
    config_free(&cfg);
}

static void test_all_keys(void **state)
{
    (void)state;
    once_config cfg;
    tc_write("hdrs", "# secrets\nX-Api-Key: k1\n\nX-Org:   org-9  \n");
    tc_expect_ok("[server]\n"
                 "listen = [::1]:9000\n"
                 "store = sqlite:/var/lib/once/once.db\n"
                 "max_body = 64KiB\n"
                 "shutdown_grace = 0s\n"
                 "threads = 8\n"
                 "max_connections = 100\n"
                 "loop_interval = 250ms\n"
                 "[upstream.x.y-z_1]\n"
                 "url = http://[::1]:8080/v1//\n"
                 "header = A: 1\n"
                 "header_file = hdrs\n"
                 "header = B:2\n"
                 "timeout = 500ms\n"
                 "key_required = off\n"
                 "key_safe_methods = TRUE\n"
                 "on_mismatch = reject\n"
                 "release_on = none\n"
                 "unknown_on = 500 , 599,100\n"
                 "listen = 127.0.0.1:9001\n"
                 "max_response = 512\n",
                 &cfg);
    assert_string_equal(cfg.listen, "[::1]:9000");
    assert_string_equal(cfg.store, "sqlite:/var/lib/once/once.db");
    assert_int_equal(cfg.max_body, 65536);
    assert_int_equal(cfg.grace_ms, 0);
    assert_int_equal(cfg.threads, 8);
    assert_int_equal(cfg.max_connections, 100);
    assert_int_equal(cfg.loop_interval_ms, 250);
    const upstream_cfg *u = config_upstream(&cfg, "x.y-z_1");
    assert_non_null(u);
    assert_string_equal(u->url, "http://[::1]:8080/v1");
    assert_int_equal(u->nheaders, 4);
    assert_string_equal(u->headers[0], "A: 1");
    assert_string_equal(u->headers[1], "X-Api-Key: k1");
    assert_string_equal(u->headers[2], "X-Org: org-9");
    assert_string_equal(u->headers[3], "B: 2");
    assert_int_equal(u->timeout_ms, 500);
    assert_int_equal(u->lease_ms, 30000);
    assert_int_equal(u->key_required, 0);
    assert_int_equal(u->key_safe_methods, 1);
    assert_int_equal(u->on_mismatch, MISMATCH_REJECT);
    assert_int_equal(u->nrelease_on, 0);
    assert_null(u->release_on);
    assert_int_equal(u->nunknown_on, 3);
    assert_int_equal(u->unknown_on[0], 500);
    assert_int_equal(u->unknown_on[1], 599);
    assert_int_equal(u->unknown_on[2], 100);
    assert_string_equal(u->listen, "127.0.0.1:9001");
    assert_int_equal(u->max_response, 512);
    config_free(&cfg);
}

static void test_booleans(void **state)
{
    (void)state;
    static const char *const yes[] = {"yes", "true", "on", "1", "Yes", "TRUE"};
    static const char *const no[] = {"no", "false", "off", "0", "No", "OFF"};
    char text[256];
    once_config cfg;
    for (size_t i = 0; i < 6; i++) {
        snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nkey_required = %s\n", yes[i]);
        tc_expect_ok(text, &cfg);
        assert_int_equal(cfg.upstreams[0].key_required, 1);
        config_free(&cfg);
        snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nkey_required = %s\n", no[i]);
        tc_expect_ok(text, &cfg);
        assert_int_equal(cfg.upstreams[0].key_required, 0);
        config_free(&cfg);
    }
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_required = maybe\n", 3,
                    "key_required: 'maybe' is not yes or no");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_safe_methods = 2\n", 3,
                    "key_safe_methods: '2' is not yes or no");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_required = y\n", 3, "is not yes or no");
}

/* How Debian's inih treats comments and blanks, as relied on. */
static void test_comments_and_whitespace(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok("\xEF\xBB\xBF; BOM first\r\n"
                 "# hash comment\r\n"
                 "   ; indented comment\r\n"
                 "[server]   ; trailing comment\r\n"
                 "\tstore   =   sqlite:a;b.db  \r\n"
                 "  listen=127.0.0.1:7601  ; comment\r\n",
                 &cfg);
    assert_string_equal(cfg.store, "sqlite:a;b.db");
    /* ';' after whitespace starts a comment; glued to the value it does not */
    config_free(&cfg);
    tc_expect_error("[server]\nlisten=127.0.0.1:7601;x\n", 2, "listen: '127.0.0.1:7601;x'");
    /* '#' is a comment only at the start of a line. */
    tc_expect_error("[server]\nstore = sqlite:x.db #y\nlease = 30s # no\n", 3,
                    "lease: '30s # no' is not a duration");
    /* No continuation lines: an indented line is a line of its own. */
    tc_expect_error("[server]\nstore = sqlite:x.db\n   more\n", 3, "syntax error");
    /* A key with nothing after '=' is empty, and empty is not a duration. */
    tc_expect_error("[server]\nlease =\n", 2, "lease: '' is not a duration");
    tc_expect_error("[server]\nlease = ; just a comment\n", 2, "lease: '' is not a duration");
}

static void test_syntax_errors(void **state)
{
    (void)state;
    tc_expect_error("[server]\nlisten = 127.0.0.1:7600\njust words\n", 3, "syntax error");
    tc_expect_error("[server\nlisten = 127.0.0.1:7600\n", 1, "syntax error");
    tc_expect_error("[server ; comment]\n", 1, "syntax error");
    tc_expect_error("[server] junk\n", 1, "unexpected text after the section name");
    tc_expect_error("[server]\n= value\n", 2, "missing key name");
    /* The first error wins, inih's or ours. */
    tc_expect_error("[server]\nwords\nlease = forever\n", 2, "syntax error");
    tc_expect_error("[server]\nlease = forever\nwords\n", 2, "lease: 'forever'");
    /* Binary junk. */
    static const char nul[] = "[server]\nstore = sqlite:a\0b\n";
    tc_write_n("once.ini", nul, sizeof nul - 1);
    once_config cfg;
    char err[512];
    char want[256];
    assert_true(config_load(tc.path, &cfg, err, sizeof err) < 0);
    snprintf(want, sizeof want, "%s:2: NUL byte in the line", tc.path);
    assert_string_equal(err, want);
}

static void test_long_line(void **state)
{
    (void)state;
    char text[1024];
    char val[300];
    /* 250 characters on line 3: an error naming line 3, not inih's cut. */
    memset(val, 'a', sizeof val);
    int n = snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nheader = X: %.*s\nlease = 9m\n",
                     250 - 12, val);
    assert_true(n > 0 && (size_t)n < sizeof text);
    tc_expect_error(text, 3, "line too long (250 characters; at most 198)");
    /* Even inside a comment. */
    snprintf(text, sizeof text, "[server]\n; %.*s\n", 248, val);
    tc_expect_error(text, 2, "line too long (250 characters");
    /* 198 characters is the most that fits. */
    snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nheader = X: %.*s\n", 198 - 12, val);
    once_config cfg;
    tc_expect_ok(text, &cfg);
    assert_int_equal(strlen(cfg.upstreams[0].headers[0]), 198 - 9);
    config_free(&cfg);
    snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nheader = X: %.*s\n", 199 - 12, val);
    tc_expect_error(text, 3, "line too long (199 characters; at most 198)");
}

static void test_sections(void **state)
{
    (void)state;
    tc_expect_error("[server]\n[source.stripe]\nsecret = x\n", 2, "unknown section [source.stripe]");
    tc_expect_error("[Server]\n", 1, "unknown section [Server]");
    tc_expect_error("[ server ]\n", 1, "unknown section [ server ]");
    tc_expect_error("[]\n", 1, "unknown section []");
    tc_expect_error("[upstream]\n", 1, "unknown section [upstream]");
    tc_expect_error("[upstream.]\n", 1, "an upstream name is 1-64 characters");
    tc_expect_error("[upstream.a/b]\nurl = http://a\n", 1, "an upstream name is 1-64 characters");
    tc_expect_error("[upstream.a b]\nurl = http://a\n", 1, "an upstream name is 1-64 characters");
    tc_expect_error("[server]\nlease = 1s\n\n[server]\n", 4,
                    "duplicate section [server] (first at line 1)");
    tc_expect_error("[upstream.a]\nurl = http://a\n[upstream.b]\nurl = http://b\n[upstream.a]\n", 5,
                    "duplicate section [upstream.a] (first at line 1)");
    tc_expect_error("listen = 127.0.0.1:7600\n", 1, "'listen' is outside a section");

    /* 64 characters is allowed (longer than inih's 49-byte section buffer),
     * 65 is not. */
    char name[80];
    char text[256];
    memset(name, 'n', 64);
    name[64] = '\0';
    snprintf(text, sizeof text, "[upstream.%s]\nurl = http://a\n", name);
    once_config cfg;
    tc_expect_ok(text, &cfg);
    assert_non_null(config_upstream(&cfg, name));
    config_free(&cfg);
    snprintf(text, sizeof text, "[upstream.%sn]\nurl = http://a\n", name);
    tc_expect_error(text, 1, "an upstream name is 1-64 characters");
    /* Names that differ after inih's cut are different upstreams. */
    snprintf(text, sizeof text, "[upstream.%s]\nurl = http://a\n[upstream.%.63sm]\nurl = http://b\n",
             name, name);
    tc_expect_ok(text, &cfg);
    assert_int_equal(cfg.nupstreams, 2);
    config_free(&cfg);
    /* An empty upstream section is seen (and has no url). */
    tc_expect_error("[upstream.a]\nurl = http://a\n[upstream.b]\n; nothing\n", 3,
                    "[upstream.b] has no url");
}

static void test_keys(void **state)
{
    (void)state;
    tc_expect_error("[server]\nlisten = 127.0.0.1:7600\nlistn = x\n", 3,
                    "unknown key 'listn' in [server]");
    tc_expect_error("[server]\nurl = http://a\n", 2, "unknown key 'url' in [server]");
    tc_expect_error("[upstream.a]\nurl = http://a\nthreads = 2\n", 3,
                    "unknown key 'threads' in [upstream.a]");
    tc_expect_error("[server]\nLease = 1s\n", 2, "unknown key 'Lease'");
    tc_expect_error("[server]\nlease = 1s\nstore = sqlite:x\nlease = 2s\n", 4, "duplicate key 'lease'");
    tc_expect_error("[upstream.a]\nurl = http://a\nurl = http://b\n", 3, "duplicate key 'url'");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader_file = x\nheader_file = y\n", 3,
                    "header_file: cannot open");
    tc_write("h", "A: 1\n");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader_file = h\nheader_file = h\n", 4,
                    "duplicate key 'header_file'");
    /* The same key in two sections is not a duplicate. */
    once_config cfg;
    tc_expect_ok("[upstream.a]\nurl = http://a\nlease = 2m\n[upstream.b]\nurl = http://b\n"
                 "lease = 3m\n[server]\nlease = 1m\n",
                 &cfg);
    config_free(&cfg);
}

static void test_bad_values(void **state)
{
    (void)state;
    tc_expect_error("[server]\nlease = 30\n", 2, "lease: '30' is not a duration");
    tc_expect_error("[server]\nlease = 0s\n", 2, "lease: must be more than 0");
    tc_expect_error("[server]\nretention = 0ms\n", 2, "retention: must be more than 0");
    tc_expect_error("[server]\nloop_interval = 0s\n", 2, "loop_interval: must be more than 0");
    tc_expect_error("[server]\nshutdown_grace = -1s\n", 2, "shutdown_grace: '-1s' is not a duration");
    tc_expect_error("[server]\nmax_body = 1MB\n", 2, "max_body: '1MB' is not a size");
    tc_expect_error("[server]\nmax_body = 0\n", 2, "max_body: must be more than 0");
    tc_expect_error("[server]\nthreads = 0\n", 2, "threads: '0' is not a number from 1 to 1024");
    tc_expect_error("[server]\nthreads = 2x\n", 2, "threads: '2x' is not a number");
    tc_expect_error("[server]\nmax_connections = 99999999999999999999\n", 2,
                    "max_connections: '99999999999999999999' is not a number");
    tc_expect_error("[server]\nlisten = 127.0.0.1\n", 2, "listen: '127.0.0.1' is not HOST:PORT");
    tc_expect_error("[server]\nlisten = example.com:80\n", 2, "listen: 'example.com:80'");
    tc_expect_error("[server]\nstore = mysql://x\n", 2, "store: unknown scheme");
    tc_expect_error("[server]\nstore = sqlite:\n", 2, "store: 'sqlite:' needs a path");
    tc_expect_error("[upstream.a]\nurl = http://a\ntimeout = 1 s\n", 3, "timeout: '1 s'");
    tc_expect_error("[upstream.a]\nurl = http://a\nmax_response = 1GB\n", 3, "max_response: '1GB'");
    tc_expect_error("[upstream.a]\nurl = http://a\non_mismatch = Replay\n", 3,
                    "on_mismatch: 'Replay' is not replay or reject");
    tc_expect_error("[upstream.a]\nurl = http://a\nforward_key_as = Idempotency Key\n", 3,
                    "forward_key_as: 'Idempotency Key' is not a valid header name");
    tc_expect_error("[upstream.a]\nurl = http://a\nlisten = 7700\n", 3, "listen: '7700'");
}

static void test_statuses(void **state)
{
    (void)state;
    static const char *const bad[] = {"600", "99", "429,,503", "429,", ",429", "429 503", "abc",
                                      "4290", "-429", "", "None"};
    char text[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "[upstream.a]\nurl = http://a\nunknown_on = %s\n", bad[i]);
        tc_expect_error(text, 3, "is not a comma-separated list of HTTP statuses");
    }
    tc_expect_error("[upstream.a]\nurl = http://a\nrelease_on = 429,503,429\n", 3,
                    "release_on: 429 is listed twice");
    tc_expect_error("[upstream.a]\nurl = http://a\nrelease_on = 429,201\n", 3,
                    "release_on: 201 is a success");
    /* In both lists: reported at the section, after the defaults are in. */
    tc_expect_error("[upstream.a]\nurl = http://a\nrelease_on = 500\n", 1,
                    "[upstream.a]: status 500 is in both release_on and unknown_on");
    tc_expect_error("[upstream.a]\nurl = http://a\nunknown_on = 503\n", 1,
                    "status 503 is in both release_on and unknown_on");
    once_config cfg;
    tc_expect_ok("[upstream.a]\nurl = http://a\nunknown_on = 200,599\nrelease_on = 100\n", &cfg);
    assert_int_equal(cfg.upstreams[0].nunknown_on, 2);
    assert_int_equal(cfg.upstreams[0].unknown_on[0], 200);
    assert_int_equal(cfg.upstreams[0].nrelease_on, 1);
    config_free(&cfg);
}

static void test_urls(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *out;
    } good[] = {
        {"https://api.openai.com", "https://api.openai.com"},
        {"https://api.openai.com/", "https://api.openai.com"},
        {"http://127.0.0.1:7700///", "http://127.0.0.1:7700"},
        {"HTTPS://Example.COM/v1/", "HTTPS://Example.COM/v1"},
        {"http://[::1]:80/a/b", "http://[::1]:80/a/b"},
        {"http://a_b.local/x@y", "http://a_b.local/x@y"},
    };
    char text[512];
    once_config cfg;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(text, sizeof text, "[upstream.a]\nurl = %s\n", good[i].in);
        tc_expect_ok(text, &cfg);
        assert_string_equal(cfg.upstreams[0].url, good[i].out);
        config_free(&cfg);
    }
    static const struct {
        const char *in;
        const char *what;
    } bad[] = {
        {"ftp://a", "must start with http:// or https://"},
        {"api.openai.com", "must start with http://"},
        {"https://", "has no host"},
        {"https:///v1", "has no host"},
        {"https://:80", "has no host"},
        {"https://a:0", "bad port"},
        {"https://a:65536", "bad port"},
        {"https://a:", "bad port"},
        {"https://a:8x", "bad port"},
        {"https://u:p@a", "no user:password@"},
        {"https://a/v1?x=1", "'?' and '#' are not allowed"},
        {"https://a/#f", "'?' and '#' are not allowed"},
        {"https://a b", "not allowed in a base URL"},
        {"https://[::1", "bad [IPv6] host"},
        {"https://[zz]:80", "bad [IPv6] host"},
        {"https://[::1]x", "bad host"},
        {"https://a!b", "bad host"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "[upstream.a]\n\nurl = %s\n", bad[i].in);
        tc_expect_error(text, 3, bad[i].what);
    }
    tc_expect_error("[upstream.a]\ntimeout = 1s\n", 1, "[upstream.a] has no url");
}

static void test_headers(void **state)
{
    (void)state;
    tc_expect_error("[upstream.a]\nurl = http://a\nheader = Authorization Bearer x\n", 3,
                    "header: expected 'Name: value'");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader = Bad Name: x\n", 3,
                    "header: 'Bad Name' is not a valid header name");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader = : x\n", 3, "is not a valid header name");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader = content-length: 5\n", 3,
                    "header 'content-length' cannot be injected");
    /* A variable cannot smuggle in a second header; the value is not shown. */
    setenv("TC_SECRET", "s3cr3t\r\nX-Evil: 1", 1);
    tc_expect_error("[upstream.a]\nurl = http://a\nheader = Authorization: ${TC_SECRET}\n", 3,
                    "header: the value of 'Authorization' contains a control character");
    once_config cfg;
    char err[512];
    assert_true(tc_load("[upstream.a]\nurl = http://a\nheader = Authorization: ${TC_SECRET}\n", &cfg,
                        err, sizeof err) < 0);
    assert_null(strstr(err, "s3cr3t"));
    /* Empty value and repeats are fine. */
    tc_expect_ok("[upstream.a]\nurl = http://a\nheader = X-Empty:\nheader = X-Empty: again\n", &cfg);
    assert_int_equal(cfg.upstreams[0].nheaders, 2);
    assert_string_equal(cfg.upstreams[0].headers[0], "X-Empty: ");
    config_free(&cfg);
}

static void test_env_expansion(void **state)
{
    (void)state;
    once_config cfg;
    setenv("TC_SECRET", "abc", 1);
    setenv("TC_EMPTY", "", 1);
    tc_expect_ok("[upstream.a]\n"
                 "url = http://a\n"
                 "header = X: ${TC_SECRET}-${TC_SECRET}${TC_EMPTY}!\n"
                 "header = Y: $TC_SECRET $ {TC_SECRET} $$ }${TC_SECRET}\n",
                 &cfg);
    assert_string_equal(cfg.upstreams[0].headers[0], "X: abc-abc!");
    assert_string_equal(cfg.upstreams[0].headers[1], "Y: $TC_SECRET $ {TC_SECRET} $$ }abc");
    config_free(&cfg);
    /* Expansion applies to every value, before it is checked. */
    setenv("TC_SECRET", "127.0.0.1:7611", 1);
    tc_expect_ok("[server]\nlisten = ${TC_SECRET}\n", &cfg);
    assert_string_equal(cfg.listen, "127.0.0.1:7611");
    config_free(&cfg);
    setenv("TC_SECRET", "5", 1);
    tc_expect_ok("[server]\nlease = ${TC_SECRET}m\n", &cfg);
    assert_int_equal(cfg.lease_ms, 300000);
    config_free(&cfg);

    tc_expect_error("[server]\nstore = sqlite:${TC_NOT_SET_ANYWHERE}\n", 2,
                    "store: environment variable TC_NOT_SET_ANYWHERE is not set");
    tc_expect_error("[server]\nstore = sqlite:${TC_SECRET\n", 2, "store: unterminated '${'");
    tc_expect_error("[server]\nstore = sqlite:${}\n", 2, "store: empty variable name");
    tc_expect_error("[server]\nstore = sqlite:${1X}\n", 2, "store: bad variable name '1X'");
    tc_expect_error("[server]\nstore = sqlite:${A-B}\n", 2, "bad variable name 'A-B'");
    tc_expect_error("[server]\nstore = sqlite:${ A}\n", 2, "bad variable name ' A'");
    /* The second of two expansions fails: still the key's line. */
    tc_expect_error("[server]\n\nstore = ${TC_SECRET}${TC_NOPE_NOPE}\n", 3,
                    "TC_NOPE_NOPE is not set");
}

static void test_files(void **state)
{
    (void)state;
    once_config cfg;
    char text[512];
    /* Relative to the config's directory; absolute as is. */
    tc_write("tok", "a\n# c\n\n b \n");
    tc_expect_ok("[server]\ntokens_file = tok\n", &cfg);
    assert_int_equal(cfg.ntokens, 2);
    assert_string_equal(cfg.tokens[1], "b");
    config_free(&cfg);
    snprintf(text, sizeof text, "[server]\ntokens_file = %s/tok\n", tc.dir);
    tc_expect_ok(text, &cfg);
    assert_int_equal(cfg.ntokens, 2);
    config_free(&cfg);
    /* ${} in the file name, not in the contents. */
    setenv("TC_SECRET", "tok", 1);
    tc_write("tok2", "${TC_SECRET}\n");
    tc_expect_ok("[server]\ntokens_file = ${TC_SECRET}2\n", &cfg);
    assert_string_equal(cfg.tokens[0], "${TC_SECRET}");
    config_free(&cfg);

    tc_expect_error("[server]\n\ntokens_file = missing\n", 3, "tokens_file: cannot open '");
    tc_expect_error("[server]\ntokens_file = missing\n", 2, "No such file or directory");
    tc_expect_error("[server]\ntokens_file = .\n", 2, "is not a regular file");
    tc_write("empty", "# only a comment\n\n");
    tc_expect_error("[server]\ntokens_file = empty\n", 2, "tokens_file: '");
    tc_expect_error("[server]\ntokens_file = empty\n", 2, "has no entries");
    tc_write("spacey", "good\nbad token\n");
    tc_expect_error("[server]\ntokens_file = spacey\n", 2,
                    "spacey' line 2: a token must be printable ASCII without spaces");
    tc_write("badh", "A: 1\n\nno colon here\n");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader_file = badh\n", 3,
                    "header_file: '");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader_file = badh\n", 3,
                    "badh' line 3: expected 'Name: value'");
    tc_expect_error("[upstream.a]\nurl = http://a\nheader_file =\n", 3, "header_file: empty file name");
    /* Long lines are fine in a *_file: that is what they are for. */
    char big[2048];
    memcpy(big, "Authorization: Bearer ", 22);
    memset(big + 22, 'k', 1000);
    memcpy(big + 1022, "\n", 2);
    tc_write("longh", big);
    tc_expect_ok("[upstream.a]\nurl = http://a\nheader_file = longh\n", &cfg);
    assert_int_equal(strlen(cfg.upstreams[0].headers[0]), 1022);
    config_free(&cfg);
}

static void test_listen_clashes(void **state)
{
    (void)state;
    tc_expect_error("[upstream.a]\nurl = http://a\nlisten = 127.0.0.1:7600\n", 1,
                    "[upstream.a]: listen 127.0.0.1:7600 clashes with the server's listen");
    tc_expect_error("[server]\nlisten = 0.0.0.0:7000\n[upstream.a]\nurl = http://a\n"
                    "listen = 127.0.0.1:7000\n",
                    3, "clashes with the server's listen 0.0.0.0:7000");
    tc_expect_error("[upstream.a]\nurl = http://a\nlisten = 127.0.0.1:7601\n"
                    "[upstream.b]\nurl = http://b\nlisten = localhost:7601\n",
                    4, "[upstream.b]: listen localhost:7601 clashes with [upstream.a] (line 1)");
    tc_expect_error("[upstream.a]\nurl = http://a\nlisten = [::]:7601\n"
                    "[upstream.b]\nurl = http://b\nlisten = [::1]:7601\n",
                    4, "clashes with [upstream.a]");
    once_config cfg;
    tc_expect_ok("[upstream.a]\nurl = http://a\nlisten = 127.0.0.1:7601\n"
                 "[upstream.b]\nurl = http://b\nlisten = 127.0.0.2:7601\n"
                 "[upstream.c]\nurl = http://c\nlisten = 127.0.0.1:7602\n",
                 &cfg);
    config_free(&cfg);
    /* The check sees the environment's listen too. */
    setenv("ONCE_LISTEN", "127.0.0.1:7601", 1);
    tc_expect_error("[upstream.a]\nurl = http://a\nlisten = 127.0.0.1:7601\n", 1,
                    "clashes with the server's listen 127.0.0.1:7601");
}

/* An explicit lease is taken as written, even below the timeout (tests of
 * lease expiry rely on short ones); only the default is derived from it. */
static void test_lease_vs_timeout(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok("[upstream.a]\nurl = http://a\ntimeout = 30s\nlease = 2s\n", &cfg);
    assert_int_equal(cfg.upstreams[0].lease_ms, 2000);
    config_free(&cfg);
    tc_expect_ok("[upstream.a]\nurl = http://a\ntimeout = 30s\n", &cfg);
    assert_int_equal(cfg.upstreams[0].lease_ms, 35000);
    config_free(&cfg);
    /* A timeout near the limit saturates instead of overflowing. */
    tc_expect_ok("[upstream.a]\nurl = http://a\ntimeout = 9223372036854775807ms\n", &cfg);
    assert_true(cfg.upstreams[0].lease_ms == INT64_MAX);
    config_free(&cfg);
}

static void test_overrides(void **state)
{
    (void)state;
    once_config cfg;
    const char *text = "[server]\nlisten = 127.0.0.1:7600\nstore = sqlite:file.db\n";
    setenv("ONCE_LISTEN", "[::1]:9999", 1);
    setenv("ONCE_STORE", "sqlite:env.db", 1);
    tc_expect_ok(text, &cfg);
    assert_string_equal(cfg.listen, "[::1]:9999");
    assert_string_equal(cfg.store, "sqlite:env.db");
    config_free(&cfg);
    /* Over the defaults too. */
    tc_expect_ok("", &cfg);
    assert_string_equal(cfg.listen, "[::1]:9999");
    assert_string_equal(cfg.store, "sqlite:env.db");
    config_free(&cfg);
    /* Empty means unset. */
    setenv("ONCE_LISTEN", "", 1);
    setenv("ONCE_STORE", "", 1);
    tc_expect_ok(text, &cfg);
    assert_string_equal(cfg.listen, "127.0.0.1:7600");
    assert_string_equal(cfg.store, "sqlite:file.db");
    config_free(&cfg);
    /* Bad values are errors naming the variable (no line). */
    setenv("ONCE_LISTEN", "nowhere", 1);
    tc_expect_error(text, 0, "ONCE_LISTEN: 'nowhere' is not HOST:PORT");
    setenv("ONCE_LISTEN", "", 1);
    setenv("ONCE_STORE", "redis://x", 1);
    tc_expect_error(text, 0, "ONCE_STORE: unknown scheme");
}

static void test_many_upstreams(void **state)
{
    (void)state;
    size_t cap = 200 * 64;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = 0;
    for (int i = 0; i < 200; i++) {
        int n = snprintf(text + len, cap - len, "[upstream.u%d]\nurl = http://h%d\nheader = A: %d\n",
                         i, i, i);
        assert_true(n > 0 && (size_t)n < cap - len);
        len += (size_t)n;
    }
    once_config cfg;
    tc_expect_ok(text, &cfg);
    assert_int_equal(cfg.nupstreams, 200);
    assert_string_equal(config_upstream(&cfg, "u199")->url, "http://h199");
    assert_string_equal(config_upstream(&cfg, "u7")->headers[0], "A: 7");
    assert_int_equal(config_upstream(&cfg, "u150")->line, 451);
    config_free(&cfg);
    free(text);
}

static void test_load_errors(void **state)
{
    (void)state;
    once_config cfg;
    char err[512];
    char want[512];
    char missing[256];
    snprintf(missing, sizeof missing, "%s/nope.ini", tc.dir);
    assert_true(config_load(missing, &cfg, err, sizeof err) < 0);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
    assert_string_equal(err, want);
    assert_true(config_load(tc.dir, &cfg, err, sizeof err) < 0);
    assert_non_null(strstr(err, "is a directory"));
    assert_true(config_load("", &cfg, err, sizeof err) < 0);
    assert_true(config_load(NULL, &cfg, err, sizeof err) < 0);
    assert_true(config_load(tc.path, NULL, err, sizeof err) < 0);
    /* A tiny or absent error buffer is fine. */
    tc_write("once.ini", "[bogus]\n");
    char small[8];
    assert_true(config_load(tc.path, &cfg, small, sizeof small) < 0);
    assert_int_equal(strlen(small), 7);
    assert_true(config_load(tc.path, &cfg, NULL, 0) < 0);
    /* A file with no trailing newline. */
    tc_write("once.ini", "[server]\nlease = 1m");
    assert_int_equal(config_load(tc.path, &cfg, err, sizeof err), 0);
    assert_int_equal(cfg.lease_ms, 60000);
    config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_listen),
        cmocka_unit_test_setup_teardown(test_example, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_defaults, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_defaults_late_server, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_all_keys, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_booleans, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_comments_and_whitespace, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_syntax_errors, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_long_line, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_sections, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_keys, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_statuses, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_urls, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_headers, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_env_expansion, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_files, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_listen_clashes, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_lease_vs_timeout, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_overrides, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_many_upstreams, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, tc_setup, tc_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
