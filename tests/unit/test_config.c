/*
 * test_config.c — the gateway's configuration loader (src/server/config/config.c):
 * the value parsers, every class of error with the exact file:line, ${NAME}
 * expansion, *_file keys, defaults and the environment overrides, and the
 * [source.NAME] webhook sections (per-scheme defaults, secrets, checks).
 *
 * The loader is part of the server's object library, which this test links.
 */
#include "server/config/config.h"

#include "common/digest.h"
#include "common/webhook_sig.h"
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
    assert_int_equal(cfg.nsources, 0);
    assert_null(cfg.sources);
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

/* The gateway keeps a token's SHA-256 only: is t the token tok? */
static void tc_assert_token(const auth_token *t, const char *tok)
{
    unsigned char d[32];
    assert_int_equal(EVP_Digest(tok, strlen(tok), d, NULL, digest_sha256(), NULL), 1);
    assert_memory_equal(t->digest, d, sizeof d);
}

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
    tc_assert_token(&cfg.tokens[0], "tok-one");
    tc_assert_token(&cfg.tokens[1], "tok-two");
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
    assert_int_equal(u->lease_ms, 30000); /* the server's: renewed while a call runs, not grown with timeout */
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
    assert_int_equal(cfg.lease_ms, 10000);
    assert_int_equal(cfg.retention_ms, 24 * 3600 * 1000);
    assert_int_equal(cfg.ntokens, 0);
    assert_null(cfg.tokens);
    assert_int_equal(cfg.grace_ms, 30000);
    assert_int_equal(cfg.threads, 4);
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
    assert_int_equal(u->lease_ms, 10000);
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
    assert_int_equal(config_upstream(&cfg, "slow")->lease_ms, 120000);
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
    assert_int_equal(u->lease_ms, 10000); /* the server's default */
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

/* [auth] (docs/auth.md): defaults, the audience from the listener, and the
 * transport rule for key material. */
static void test_auth(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok("[server]\nlisten = 127.0.0.1:7600\n\n[auth]\nissuer = http://127.0.0.1:9000\n", &cfg);
    assert_string_equal(cfg.auth.issuer, "http://127.0.0.1:9000");
    assert_string_equal(cfg.auth.audience, "http://127.0.0.1:7600");
    assert_string_equal(cfg.auth.agent_claim, "sub");
    assert_string_equal(cfg.auth.operator_scope, "once:operator");
    assert_null(cfg.auth.jwks_url);
    assert_true(config_auth_on(&cfg));
    config_free(&cfg);
    tc_expect_ok("[auth]\nissuer = https://idp.example/realms/a/\naudience = https://once.example/\n"
                 "agent_claim = client_id\nrequired_scopes = mcp, tools  extra\njwks_url = https://idp.example/k\n",
                 &cfg);
    assert_string_equal(cfg.auth.issuer, "https://idp.example/realms/a/"); /* iss is compared as written */
    assert_string_equal(cfg.auth.audience, "https://once.example");
    assert_int_equal(cfg.auth.nrequired_scopes, 3);
    assert_string_equal(cfg.auth.required_scopes[2], "extra");
    config_free(&cfg);
    tc_expect_ok("[server]\n", &cfg);
    assert_false(config_auth_on(&cfg));
    config_free(&cfg);
    tc_expect_error("[auth]\naudience = https://a\n", 1, "[auth]: issuer is required");
    tc_expect_error("[auth]\nissuer = http://idp.example\n", 2, "issuer: plain http is allowed for a loopback host");
    tc_expect_error("[auth]\nissuer = http://10.0.0.1:80\n", 2, "plain http is allowed for a loopback host");
    tc_expect_error("[auth]\nissuer = https://a\njwks_url = http://idp.example/jwks\n", 3,
                    "jwks_url: plain http is allowed for a loopback host");
    tc_expect_ok("[auth]\nissuer = http://[::1]:9000\njwks_url = http://localhost:9/k\n", &cfg);
    config_free(&cfg);
    tc_expect_error("[server]\nlisten = 0.0.0.0:7600\n[auth]\nissuer = https://a\n", 3,
                    "set audience to the gateway's base URL");
    tc_expect_error("[auth]\nissuer = https://a\n[auth]\n", 3, "duplicate section [auth] (first at line 1)");
    tc_expect_error("[auth]\nissuer = https://a\nagent_claim = a b\n", 3, "agent_claim: 1-64 printable");
    tc_expect_error("[auth]\nissuer = https://a\ntokens_file = x\n", 3, "unknown key 'tokens_file' in [auth]");
}

static void test_sections(void **state)
{
    (void)state;
    tc_expect_error("[server]\n[sources.stripe]\nsecret = x\n", 2,
                    "unknown section [sources.stripe] (expected [server], [auth], [upstream.NAME], [mcp.NAME], "
                    "[source.NAME] or [agent.NAME])");
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
    /* over the ledger's limits: refused at load, not as a 400 on every request */
    tc_expect_error("[server]\nlease = 8d\n", 2, "lease: at most 7d");
    tc_expect_error("[server]\nretention = 3651d\n", 2, "retention: at most 3650d");
    tc_expect_error("[upstream.a]\nurl = http://a\nlease = 169h\n", 3, "lease: at most 7d");
    tc_expect_error("[upstream.a]\nurl = http://a\nretention = 3651d\n", 3, "retention: at most 3650d");
    tc_expect_error("[upstream.a]\nurl = http://a\ntimeout = 7d\n", 3, "timeout: at most 1d");
    once_config cfg;
    tc_expect_ok("[server]\nlease = 7d\nretention = 3650d\n[upstream.a]\nurl = http://a\ntimeout = 1d\n", &cfg);
    assert_int_equal(cfg.upstreams[0].lease_ms, 7LL * 24 * 3600 * 1000);
    config_free(&cfg);
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
    tc_assert_token(&cfg.tokens[1], "b");
    config_free(&cfg);
    snprintf(text, sizeof text, "[server]\ntokens_file = %s/tok\n", tc.dir);
    tc_expect_ok(text, &cfg);
    assert_int_equal(cfg.ntokens, 2);
    config_free(&cfg);
    /* ${} in the file name, not in the contents. */
    setenv("TC_SECRET", "tok", 1);
    tc_write("tok2", "${TC_SECRET}\n");
    tc_expect_ok("[server]\ntokens_file = ${TC_SECRET}2\n", &cfg);
    tc_assert_token(&cfg.tokens[0], "${TC_SECRET}");
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
    assert_int_equal(cfg.upstreams[0].lease_ms, 10000);
    config_free(&cfg);
    /* A timeout near the limit neither overflows nor passes. */
    tc_expect_error("[upstream.a]\nurl = http://a\ntimeout = 9223372036854775807ms\n", 3,
                    "timeout: at most 1d");
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

/* ---- [source.NAME] ------------------------------------------------------------ */

/* A Standard Webhooks key from its documentation (24 bytes). */
#define TC_WHSEC "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

static const char tc_source_example[] =
    "[source.stripe]\n"
    "verify = stripe            ; stripe | github | standard | slack | hmac-sha256 | none\n"
    "secret = ${TC_SECRET}   ; or secret_file; several (comma) for rotation\n"
    "event_id = json:/id        ; or header:NAME; each scheme has a default\n"
    "tolerance = 5m             ; for schemes that sign a timestamp\n"
    "deliver_to = http://127.0.0.1:8000/events   ; push; leave out for pull\n"
    "deliver_secret = ${TC_EMPTY}        ; optional, whsec_<base64>: sign what we deliver\n"
    "max_attempts = 12\n"
    "retry_base = 1s            ; backoff: base * 2^(attempt-1), full jitter, capped\n"
    "retry_cap = 1h\n"
    "retention = 7d             ; the dedupe window\n"
    "timeout = 30s\n"
    "concurrency = 8\n";

static void test_source_example(void **state)
{
    (void)state;
    once_config cfg;
    setenv("TC_SECRET", "whsec_new, whsec_old", 1);
    setenv("TC_EMPTY", TC_WHSEC, 1);
    tc_expect_ok(tc_source_example, &cfg);
    assert_int_equal(cfg.nsources, 1);
    assert_int_equal(cfg.nupstreams, 0);
    const source_cfg *s = config_source(&cfg, "stripe");
    assert_non_null(s);
    assert_ptr_equal(s, &cfg.sources[0]);
    assert_null(config_source(&cfg, "Stripe"));
    assert_null(config_source(&cfg, "nope"));
    assert_null(config_source(&cfg, NULL));
    assert_null(config_source(NULL, "stripe"));
    assert_null(config_upstream(&cfg, "stripe")); /* two namespaces */
    assert_string_equal(s->name, "stripe");
    assert_int_equal(s->verify, SIG_STRIPE);
    assert_int_equal(s->nsecrets, 2);
    assert_string_equal(s->secrets[0], "whsec_new");
    assert_string_equal(s->secrets[1], "whsec_old");
    assert_int_equal(s->insecure, 0);
    assert_string_equal(s->event_id, "json:/id");
    assert_int_equal(s->tolerance_ms, 300000);
    assert_null(s->signature_header);
    assert_int_equal(s->signature_base64, 0);
    assert_null(s->signature_prefix);
    assert_string_equal(s->deliver_to, "http://127.0.0.1:8000/events");
    assert_string_equal(s->deliver_secret, TC_WHSEC);
    assert_int_equal(s->max_attempts, 12);
    assert_int_equal(s->retry_base_ms, 1000);
    assert_int_equal(s->retry_cap_ms, 3600000);
    assert_int_equal(s->retention_ms, 7 * 86400000LL);
    assert_int_equal(s->timeout_ms, 30000);
    assert_int_equal(s->concurrency, 8);
    assert_int_equal(s->line, 1);
    config_free(&cfg);
    assert_null(cfg.sources);
    assert_int_equal(cfg.nsources, 0);
    config_free(&cfg);
}

/* The defaults of every scheme, with the fewest keys each one accepts. */
static void test_source_defaults(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int verify;
        const char *event_id;
    } cases[] = {
        {"verify = stripe\nsecret = whsec_x\n", SIG_STRIPE, "json:/id"},
        {"verify = github\nsecret = gh\n", SIG_GITHUB, "header:X-GitHub-Delivery"},
        {"verify = standard\nsecret = " TC_WHSEC "\n", SIG_STANDARD, "header:webhook-id"},
        {"verify = slack\nsecret = sl\n", SIG_SLACK, "json:/event_id"},
        {"verify = hmac-sha256\nsecret = k\nsignature_header = X-Sig\nevent_id = json:/uuid\n",
         SIG_HMAC_SHA256, "json:/uuid"},
        {"verify = none\ninsecure = yes\nevent_id = header:X-Id\n", SIG_NONE, "header:X-Id"},
    };
    char text[512];
    once_config cfg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "[server]\nlease = 1m\n\n[source.s%zu]\n%s", i, cases[i].text);
        tc_expect_ok(text, &cfg);
        assert_int_equal(cfg.nsources, 1);
        const source_cfg *s = &cfg.sources[0];
        assert_int_equal(s->verify, cases[i].verify);
        assert_string_equal(s->event_id, cases[i].event_id);
        assert_int_equal(s->insecure, cases[i].verify == SIG_NONE);
        assert_int_equal(s->nsecrets, cases[i].verify == SIG_NONE ? 0 : 1);
        assert_int_equal(s->tolerance_ms, 5 * 60000);
        assert_int_equal(s->signature_base64, 0);
        assert_null(s->signature_prefix);
        assert_null(s->deliver_to);
        assert_null(s->deliver_secret);
        assert_int_equal(s->max_attempts, 12);
        assert_int_equal(s->retry_base_ms, 1000);
        assert_int_equal(s->retry_cap_ms, 3600000);
        assert_int_equal(s->retention_ms, 7 * 86400000LL);
        assert_int_equal(s->timeout_ms, 30000);
        assert_int_equal(s->concurrency, 8);
        assert_int_equal(s->line, 4);
        /* The source's retention is its own, not the server's. */
        assert_int_equal(cfg.retention_ms, 86400000);
        config_free(&cfg);
    }
    /* hmac-sha256 with everything; the schemes' own event_id overridden. */
    tc_expect_ok("[source.shop]\nverify = hmac-sha256\nsecret = k1,k2\nsignature_header = "
                 "X-Shop-Hmac-Sha256\nsignature_encoding = base64\nsignature_prefix = sha256=\n"
                 "event_id = header:X-Shop-Webhook-Id\n"
                 "[source.gh]\nverify = github\nsecret = s\nevent_id = json:/hook/id\n"
                 "[source.sl]\nverify = slack\nsecret = s\ntolerance = 250ms\nevent_id = json:\n",
                 &cfg);
    assert_int_equal(cfg.nsources, 3);
    const source_cfg *s = config_source(&cfg, "shop");
    assert_string_equal(s->signature_header, "X-Shop-Hmac-Sha256");
    assert_int_equal(s->signature_base64, 1);
    assert_string_equal(s->signature_prefix, "sha256=");
    assert_string_equal(s->event_id, "header:X-Shop-Webhook-Id");
    assert_int_equal(s->nsecrets, 2);
    assert_string_equal(config_source(&cfg, "gh")->event_id, "json:/hook/id");
    assert_int_equal(config_source(&cfg, "gh")->line, 8);
    assert_string_equal(config_source(&cfg, "sl")->event_id, "json:");
    assert_int_equal(config_source(&cfg, "sl")->tolerance_ms, 250);
    config_free(&cfg);
    tc_expect_ok("[source.s]\nverify = hmac-sha256\nsecret = k\nsignature_header = X-Sig\n"
                 "signature_encoding = hex\nevent_id = header:X-Id\n",
                 &cfg);
    assert_int_equal(cfg.sources[0].signature_base64, 0);
    config_free(&cfg);
    /* Sources, upstreams and [server] mix in any order. */
    tc_expect_ok("[source.a]\nverify = github\nsecret = s\n[upstream.a]\nurl = http://a\n"
                 "[server]\nlease = 1m\n[source.b]\nverify = github\nsecret = t\n",
                 &cfg);
    assert_int_equal(cfg.nsources, 2);
    assert_int_equal(cfg.nupstreams, 1);
    assert_string_equal(config_source(&cfg, "b")->secrets[0], "t");
    config_free(&cfg);
}

static void test_source_names(void **state)
{
    (void)state;
    tc_expect_error("[source.]\n", 1, "[source.]: a source name is 1-64 characters");
    tc_expect_error("[source.a/b]\nverify = github\n", 1, "a source name is 1-64 characters");
    tc_expect_error("[source.a b]\n", 1, "a source name is 1-64 characters");
    tc_expect_error("[source]\n", 1, "unknown section [source]");
    tc_expect_error("[Source.a]\n", 1, "unknown section [Source.a]");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\n\n[source.a]\n", 5,
                    "duplicate section [source.a] (first at line 1)");
    tc_expect_error("[source.a]\n; nothing\n", 1,
                    "[source.a] has no verify (stripe, github, standard, slack, hmac-sha256 or "
                    "none)");
    /* 64 characters (more than inih's section buffer), and 65. */
    char name[80];
    char text[256];
    memset(name, 'n', 64);
    name[64] = '\0';
    snprintf(text, sizeof text, "[source.%s]\nverify = github\nsecret = s\n", name);
    once_config cfg;
    tc_expect_ok(text, &cfg);
    assert_non_null(config_source(&cfg, name));
    config_free(&cfg);
    snprintf(text, sizeof text, "[source.%sn]\nverify = github\nsecret = s\n", name);
    tc_expect_error(text, 1, "a source name is 1-64 characters");
    tc_expect_ok("[source.A-z_0.9]\nverify = github\nsecret = s\n", &cfg);
    assert_non_null(config_source(&cfg, "A-z_0.9"));
    config_free(&cfg);
    /* Many sources (the arrays grow). */
    size_t cap = 100 * 64;
    char *big = malloc(cap);
    assert_non_null(big);
    size_t len = 0;
    for (int i = 0; i < 100; i++) {
        int n = snprintf(big + len, cap - len, "[source.s%d]\nverify = github\nsecret = k%d\n", i,
                         i);
        assert_true(n > 0 && (size_t)n < cap - len);
        len += (size_t)n;
    }
    tc_expect_ok(big, &cfg);
    assert_int_equal(cfg.nsources, 100);
    assert_string_equal(config_source(&cfg, "s99")->secrets[0], "k99");
    assert_int_equal(config_source(&cfg, "s50")->line, 151);
    config_free(&cfg);
    free(big);
}

/* Every error a source can have, with its line. */
static void test_source_errors(void **state)
{
    (void)state;
    /* Keys. */
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nurl = http://a\n", 4,
                    "unknown key 'url' in [source.a]");
    tc_expect_error("[source.a]\nverify = github\nVerify = github\n", 3, "unknown key 'Verify'");
    tc_expect_error("[source.a]\nverify = github\nverify = stripe\n", 3, "duplicate key 'verify'");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nsecret = t\n", 4,
                    "duplicate key 'secret'");
    tc_expect_error("[source.a]\nverify = github\nlisten = 127.0.0.1:1\n", 3,
                    "unknown key 'listen' in [source.a]");
    /* verify. */
    tc_expect_error("[source.a]\nverify = Stripe\n", 2,
                    "verify: 'Stripe' is not stripe, github, standard, slack, hmac-sha256 or none");
    tc_expect_error("[source.a]\nverify = hmac\n", 2, "verify: 'hmac' is not");
    tc_expect_error("[source.a]\nverify =\n", 2, "verify: '' is not");
    /* none needs insecure = yes, named at verify's line; and takes no secret. */
    tc_expect_error("[source.a]\nevent_id = json:/id\n\nverify = none\n", 4,
                    "verify: none accepts whatever anyone sends to this source; it needs "
                    "insecure = yes");
    tc_expect_error("[source.a]\nverify = none\ninsecure = no\nevent_id = json:/id\n", 2,
                    "it needs insecure = yes");
    tc_expect_error("[source.a]\nverify = none\ninsecure = maybe\n", 3,
                    "insecure: 'maybe' is not yes or no");
    tc_expect_error("[source.a]\nverify = none\ninsecure = yes\nevent_id = json:/id\nsecret = s\n",
                    5, "[source.a]: verify = none checks no signature");
    tc_expect_error("[source.a]\nverify = none\ninsecure = yes\n", 1,
                    "[source.a]: event_id is required with verify = none");
    /* Any other scheme needs a secret, and insecure is not for it. */
    tc_expect_error("[source.a]\nverify = stripe\n", 1,
                    "[source.a]: verify = stripe needs secret or secret_file");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\ninsecure = yes\n", 4,
                    "insecure: yes only goes with verify = none (this source verifies github");
    /* hmac-sha256. */
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsecret = s\nevent_id = json:/id\n", 1,
                    "[source.a]: verify = hmac-sha256 needs signature_header");
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsecret = s\nsignature_header = X\n", 1,
                    "[source.a]: event_id is required with verify = hmac-sha256");
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsignature_header = X Sig\n", 3,
                    "signature_header: 'X Sig' is not a valid header name");
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsignature_encoding = HEX\n", 3,
                    "signature_encoding: 'HEX' is not hex or base64");
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsignature_prefix =\n", 3,
                    "signature_prefix: empty");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nsignature_header = X\n", 4,
                    "signature_header: only for verify = hmac-sha256 (this source has verify = "
                    "github)");
    tc_expect_error("[source.a]\nsignature_encoding = hex\nverify = stripe\nsecret = s\n", 2,
                    "signature_encoding: only for verify = hmac-sha256");
    tc_expect_error("[source.a]\nverify = slack\nsecret = s\n\nsignature_prefix = v0=\n", 5,
                    "signature_prefix: only for verify = hmac-sha256");
    /* tolerance: only for schemes that sign a timestamp, and more than 0. */
    tc_expect_error("[source.a]\nverify = github\nsecret = s\ntolerance = 5m\n", 4,
                    "tolerance: verify = github signs no timestamp");
    tc_expect_error("[source.a]\nverify = hmac-sha256\nsecret = s\nsignature_header = X\n"
                    "event_id = json:/id\ntolerance = 1m\n",
                    6, "tolerance: verify = hmac-sha256 signs no timestamp");
    tc_expect_error("[source.a]\nverify = stripe\nsecret = s\ntolerance = 0s\n", 4,
                    "tolerance: must be more than 0");
    tc_expect_error("[source.a]\nverify = stripe\nsecret = s\ntolerance = 5\n", 4,
                    "tolerance: '5' is not a duration");
    /* Standard secrets are whsec_ + base64: named at the secret's line, not
     * shown. */
    tc_expect_error("[source.a]\nverify = standard\nsecret = " TC_WHSEC ", whsec_AB==\n", 3,
                    "[source.a]: secret 2 is not \"whsec_\" followed by base64 (verify = "
                    "standard)");
    tc_expect_error("[source.a]\nsecret = sk_live_x\n\nverify = standard\n", 2,
                    "secret 1 is not \"whsec_\"");
    /* Push-only keys without deliver_to. */
    tc_expect_error("[source.a]\nverify = github\nsecret = s\ndeliver_secret = " TC_WHSEC "\n", 4,
                    "deliver_secret: only applies with deliver_to (push delivery)");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\ntimeout = 5s\n", 4,
                    "timeout: only applies with deliver_to");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nconcurrency = 2\n", 4,
                    "concurrency: only applies with deliver_to");
    /* deliver_to is a URL like an upstream's url. */
    static const struct {
        const char *in;
        const char *what;
    } bad_urls[] = {
        {"ftp://a/x", "deliver_to: 'ftp://a/x' must start with http:// or https://"},
        {"127.0.0.1:8000/events", "must start with http://"},
        {"http:///events", "has no host"},
        {"http://a:0/x", "bad port"},
        {"http://u:p@a/x", "no user:password@"},
        {"http://a/x?token=1", "'?' and '#' are not allowed in the URL"},
        {"http://[::1/x", "bad [IPv6] host"},
    };
    char text[512];
    for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
        snprintf(text, sizeof text, "[source.a]\nverify = github\nsecret = s\ndeliver_to = %s\n",
                 bad_urls[i].in);
        tc_expect_error(text, 4, bad_urls[i].what);
    }
    /* deliver_secret: whsec_ + base64 of at least one byte; not shown. */
    static const char *const bad_whsec[] = {"whsec_",      "whsec_!!!!", "whsec_A",  "whsec_AB==",
                                            "whsec_AAF=",  "whsec_A===", "Zm9vYmFy", "WHSEC_Zm9v",
                                            "whsec_Zm9v ", "whsec_Zm9v\tZm9v"};
    for (size_t i = 0; i < sizeof bad_whsec / sizeof bad_whsec[0]; i++) {
        setenv("TC_SECRET", bad_whsec[i], 1);
        snprintf(text, sizeof text,
                 "[source.a]\nverify = github\nsecret = s\ndeliver_to = http://a/x\n"
                 "deliver_secret = ${TC_SECRET}\n");
        tc_expect_error(text, 5, "deliver_secret: not \"whsec_\" followed by base64");
    }
    /* Numbers and durations. */
    static const struct {
        const char *line;
        const char *what;
    } bad_values[] = {
        {"max_attempts = 0", "max_attempts: '0' is not a number from 1 to 1000"},
        {"max_attempts = 1001", "max_attempts: '1001' is not a number from 1 to 1000"},
        {"max_attempts = -1", "max_attempts: '-1' is not a number"},
        {"concurrency = 0", "concurrency: '0' is not a number from 1 to 1000"},
        {"concurrency = 1001", "concurrency: '1001' is not a number from 1 to 1000"},
        {"concurrency = 8x", "concurrency: '8x' is not a number"},
        {"retry_base = 0s", "retry_base: must be more than 0"},
        {"retry_cap = 0ms", "retry_cap: must be more than 0"},
        {"retention = 0d", "retention: must be more than 0"},
        {"retention = 7 d", "retention: '7 d' is not a duration"},
        {"timeout = 0s", "timeout: must be more than 0"},
        {"timeout = 30", "timeout: '30' is not a duration"},
    };
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        snprintf(text, sizeof text,
                 "[source.a]\nverify = github\nsecret = s\ndeliver_to = http://a/x\n%s\n",
                 bad_values[i].line);
        tc_expect_error(text, 5, bad_values[i].what);
    }
    /* retry_cap >= retry_base: at retry_cap's line, else retry_base's (the
     * default cap is 1h). */
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nretry_cap = 1s\nretry_base = 2s\n", 4,
                    "[source.a]: retry_cap is shorter than retry_base");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nretry_base = 2h\n", 4,
                    "retry_cap is shorter than retry_base");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nretry_cap = 500ms\n", 4,
                    "retry_cap is shorter than retry_base");
    once_config cfg;
    tc_expect_ok("[source.a]\nverify = github\nsecret = s\nretry_base = 1m\nretry_cap = 1m\n"
                 "max_attempts = 1\nretention = 1ms\n",
                 &cfg);
    assert_int_equal(cfg.sources[0].retry_base_ms, 60000);
    assert_int_equal(cfg.sources[0].retry_cap_ms, 60000);
    assert_int_equal(cfg.sources[0].max_attempts, 1);
    assert_int_equal(cfg.sources[0].retention_ms, 1);
    config_free(&cfg);
    tc_expect_ok("[source.a]\nverify = github\nsecret = s\ndeliver_to = https://[::1]:8443/in/\n"
                 "timeout = 2m\nconcurrency = 1000\nmax_attempts = 1000\n"
                 "deliver_secret = whsec_AAE=\n",
                 &cfg);
    assert_string_equal(cfg.sources[0].deliver_to, "https://[::1]:8443/in/"); /* kept as is */
    assert_int_equal(cfg.sources[0].timeout_ms, 120000);
    assert_int_equal(cfg.sources[0].concurrency, 1000);
    assert_int_equal(cfg.sources[0].max_attempts, 1000);
    assert_string_equal(cfg.sources[0].deliver_secret, "whsec_AAE=");
    config_free(&cfg);
    /* The first source's error is reported even when a later one is fine. */
    tc_expect_error("[source.a]\nverify = github\n[source.b]\nverify = github\nsecret = s\n", 1,
                    "[source.a]: verify = github needs secret");
}

static void test_source_event_id(void **state)
{
    (void)state;
    static const char *const good[] = {"json:/id", "json:", "json:/", "json:/a/b~0c~1d/0",
                                       "json:/data/object/id", "header:X-Request-Id",
                                       "header:webhook-id", "json:/a b"};
    char text[256];
    once_config cfg;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(text, sizeof text, "[source.a]\nverify = github\nsecret = s\nevent_id = %s\n",
                 good[i]);
        tc_expect_ok(text, &cfg);
        assert_string_equal(cfg.sources[0].event_id, good[i]);
        config_free(&cfg);
    }
    static const struct {
        const char *in;
        const char *what;
    } bad[] = {
        {"/id", "event_id: '/id' is not json:/POINTER or header:NAME"},
        {"id", "is not json:/POINTER or header:NAME"},
        {"JSON:/id", "is not json:/POINTER or header:NAME"},
        {"body:/id", "is not json:/POINTER or header:NAME"},
        {"", "event_id: '' is not json:/POINTER"},
        {"json:id", "event_id: 'json:id' is not a JSON pointer"},
        {"json:/a~2", "is not a JSON pointer"},
        {"json:/a~", "is not a JSON pointer"},
        {"header:", "event_id: 'header:' is not header: then a valid header name"},
        {"header:X Id", "is not header: then a valid header name"},
        {"header: X-Id", "is not header: then a valid header name"},
        {"header:X-Id:", "is not header: then a valid header name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "[source.a]\nverify = github\nsecret = s\n\nevent_id = %s\n",
                 bad[i].in);
        tc_expect_error(text, 5, bad[i].what);
    }
    /* A variable cannot put a control character into a pointer. */
    setenv("TC_SECRET", "/a\r\nb", 1);
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nevent_id = json:${TC_SECRET}\n", 4,
                    "is not a JSON pointer");
}

/* secret lists (rotation) and secret_file. */
static void test_source_secrets(void **state)
{
    (void)state;
    once_config cfg;
    char text[512];
    /* Comma-separated, trimmed, in order. */
    tc_expect_ok("[source.a]\nverify = github\nsecret = new ,\told,  older\n", &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 3);
    assert_string_equal(cfg.sources[0].secrets[0], "new");
    assert_string_equal(cfg.sources[0].secrets[1], "old");
    assert_string_equal(cfg.sources[0].secrets[2], "older");
    config_free(&cfg);
    /* Inline ';' glued to a value is part of it; ';' after a space starts a
     * comment. */
    tc_expect_ok("[source.a]\nverify = github\nsecret = a;b ; comment\n", &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 1);
    assert_string_equal(cfg.sources[0].secrets[0], "a;b");
    config_free(&cfg);
    /* Standard: every secret of the list must be whsec_. */
    tc_expect_ok("[source.a]\nverify = standard\nsecret = " TC_WHSEC ",whsec_AAE=\n", &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 2);
    config_free(&cfg);
    /* Errors: never the secret itself. */
    static const struct {
        const char *value;
        const char *what;
    } bad[] = {
        {"", "secret: secret 1 is empty"},
        {"a,", "secret: secret 2 is empty"},
        {",a", "secret: secret 1 is empty"},
        {"a, ,b", "secret: secret 2 is empty"},
        {"a,b\x01z", "secret: secret 2 contains a control character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("TC_SECRET", bad[i].value, 1);
        tc_expect_error("[source.a]\nverify = github\nsecret = ${TC_SECRET}\n", 3, bad[i].what);
    }
    char err[512];
    setenv("TC_SECRET", "hunter2,bad\x01", 1);
    assert_true(tc_load("[source.a]\nverify = github\nsecret = ${TC_SECRET}\n", &cfg, err,
                        sizeof err) < 0);
    assert_null(strstr(err, "hunter2"));
    /* 16 secrets at most. */
    tc_expect_ok("[source.a]\nverify = github\nsecret = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\n",
                 &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 16);
    config_free(&cfg);
    tc_expect_error("[source.a]\nverify = github\n"
                    "secret = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n",
                    3, "secret: at most 16 secrets");
    /* secret and secret_file: one or the other. */
    tc_write("sec", "s1\n");
    tc_expect_error("[source.a]\nverify = github\nsecret = s\nsecret_file = sec\n", 4,
                    "secret_file: the secrets are already given by secret; use one of them");
    tc_expect_error("[source.a]\nverify = github\nsecret_file = sec\nsecret = s\n", 4,
                    "secret: the secrets are already given by secret_file");

    /* secret_file: one per line or comma-separated, trimmed, # comments and
     * blank lines skipped, relative to the config's directory, CRLF fine,
     * contents literal. */
    tc_write("secrets", "# rotation: newest first\n  whsec_new  \r\n\nwhsec_a, whsec_b\n${X}\n");
    tc_expect_ok("[source.a]\nverify = stripe\nsecret_file = secrets\n", &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 4);
    assert_string_equal(cfg.sources[0].secrets[0], "whsec_new");
    assert_string_equal(cfg.sources[0].secrets[1], "whsec_a");
    assert_string_equal(cfg.sources[0].secrets[2], "whsec_b");
    assert_string_equal(cfg.sources[0].secrets[3], "${X}");
    config_free(&cfg);
    snprintf(text, sizeof text, "[source.a]\nverify = github\nsecret_file = %s/secrets\n", tc.dir);
    tc_expect_ok(text, &cfg);
    assert_int_equal(cfg.sources[0].nsecrets, 4);
    config_free(&cfg);
    /* A long secret is fine in a file (not on a 198-character line). */
    char big[2048];
    memcpy(big, "whsec_", 6);
    memset(big + 6, 'A', 1200);
    memcpy(big + 1206, "\n", 2);
    tc_write("long", big);
    tc_expect_ok("[source.a]\nverify = standard\nsecret_file = long\n", &cfg);
    assert_int_equal(strlen(cfg.sources[0].secrets[0]), 1206);
    config_free(&cfg);
    /* Too long for webhook_sig: refused here, at the key's line. */
    char *huge = malloc(5000);
    assert_non_null(huge);
    memset(huge, 'k', 4097);
    memcpy(huge + 4097, "\n", 2);
    tc_write("huge", huge);
    free(huge);
    tc_expect_error("[source.a]\nverify = github\nsecret_file = huge\n", 3,
                    "huge' line 1: secret 1 is longer than 4096 bytes");
    /* Errors in the file name the key's line and the file's. */
    tc_expect_error("[source.a]\nverify = github\n\nsecret_file = missing\n", 4,
                    "secret_file: cannot open '");
    tc_write("empty", "# nothing yet\n\n");
    tc_expect_error("[source.a]\nverify = github\nsecret_file = empty\n", 3, "has no entries");
    tc_write("holes", "a\nb,,c\n");
    tc_expect_error("[source.a]\nverify = github\nsecret_file = holes\n", 3,
                    "holes' line 2: secret 3 is empty");
    tc_write("std", "whsec_Zm9v\nnot-a-whsec\n");
    tc_expect_error("[source.a]\nverify = standard\nsecret_file = std\n", 3,
                    "[source.a]: secret 2 is not \"whsec_\" followed by base64");
    tc_expect_error("[source.a]\nverify = github\nsecret_file =\n", 3,
                    "secret_file: empty file name");
}

/* ---- intent-derived keys: key, key_source ------------------------------------ */

static void test_key_template(void **state)
{
    (void)state;
    once_config cfg;
    /* Unset: no template, the client's key. */
    tc_expect_ok("[upstream.a]\nurl = http://a\n", &cfg);
    assert_null(cfg.upstreams[0].key);
    assert_int_equal(cfg.upstreams[0].key_from_template, 0);
    config_free(&cfg);
    /* "One email per company per 30 days". */
    tc_expect_ok("[upstream.mailer]\n"
                 "url = https://api.mailer.example\n"
                 "key = domain({json:/to})\n"
                 "retention = 30d\n",
                 &cfg);
    const upstream_cfg *u = config_upstream(&cfg, "mailer");
    assert_non_null(u);
    assert_non_null(u->key);
    assert_int_equal(u->key_from_template, 0);
    assert_int_equal(u->retention_ms, 30 * 86400000LL);
    config_free(&cfg);
    /* key_source = template: the rule even when a key is sent; header is
     * the default and may be written. */
    tc_expect_ok("[upstream.a]\nurl = http://a\nkey_source = template\n"
                 "key = order:{json:/cart}:{header:X-Customer}\n"
                 "[upstream.b]\nurl = http://b\nkey = sha256(lower({json:/to}))\n"
                 "key_source = header\n",
                 &cfg);
    assert_non_null(config_upstream(&cfg, "a")->key);
    assert_int_equal(config_upstream(&cfg, "a")->key_from_template, 1);
    assert_non_null(config_upstream(&cfg, "b")->key);
    assert_int_equal(config_upstream(&cfg, "b")->key_from_template, 0);
    config_free(&cfg);
    /* key_source = header without a key is the default said aloud. */
    tc_expect_ok("[upstream.a]\nurl = http://a\nkey_source = header\n", &cfg);
    assert_null(cfg.upstreams[0].key);
    config_free(&cfg);

    /* Errors: the template's, with the column; at the key's line. */
    tc_expect_error("[upstream.a]\nurl = http://a\n\nkey = {json:/to\n", 4, "key: column 1: ");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey = x{nope:1}\n", 3, "key: column ");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey = domain({json:/to}\n", 3, "key: column ");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey =\n", 3, "key: empty");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey = {json:/a}\nkey = {json:/b}\n", 4,
                    "duplicate key 'key'");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_source = client\n", 3,
                    "key_source: 'client' is not header or template");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_source = Template\n", 3,
                    "key_source: 'Template' is not header or template");
    /* template without key: at key_source's line, after the whole section
     * (key may come later). */
    tc_expect_error("[upstream.a]\nkey_source = template\nurl = http://a\n", 2,
                    "key_source: template needs key = TEMPLATE in [upstream.a]");
    tc_expect_error("[upstream.a]\nurl = http://a\nkey_source = template\n"
                    "[upstream.b]\nurl = http://b\nkey = {json:/id}\n",
                    3, "key_source: template needs key");
}

/* ---- reconciliation: lookup and lookup_* -------------------------------------- */

/* The issue's example, comments and all. */
static const char tc_mailer[] =
    "[upstream.mailer]\n"
    "url = https://api.mailer.example\n"
    "lookup = GET /v1/messages?client_ref={key}\n"
    "lookup_found = json:/data/0/id        ; present \xe2\x86\x92 it happened; its value is the "
    "provider id\n"
    "lookup_absent = 404 | json-empty:/data ; \xe2\x86\x92 it did not happen\n";

static void test_lookup(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_ok(tc_mailer, &cfg);
    const upstream_cfg *u = config_upstream(&cfg, "mailer");
    assert_non_null(u);
    assert_string_equal(u->lookup_method, "GET");
    assert_string_equal(u->lookup_path, "/v1/messages?client_ref={key}");
    assert_string_equal(u->lookup_found, "json:/data/0/id");
    assert_int_equal(u->nlookup_absent_status, 1);
    assert_int_equal(u->lookup_absent_status[0], 404);
    assert_int_equal(u->nlookup_absent_empty, 1);
    assert_string_equal(u->lookup_absent_empty[0], "/data");
    assert_int_equal(u->lookup_backoff_ms, 10000);
    assert_int_equal(u->lookup_attempts, 5);
    config_free(&cfg);

    /* No lookup: nothing set, the numeric defaults in place. */
    tc_expect_ok("[upstream.a]\nurl = http://a\n", &cfg);
    u = &cfg.upstreams[0];
    assert_null(u->lookup_method);
    assert_null(u->lookup_path);
    assert_null(u->lookup_found);
    assert_int_equal(u->nlookup_absent_status, 0);
    assert_null(u->lookup_absent_status);
    assert_int_equal(u->nlookup_absent_empty, 0);
    assert_null(u->lookup_absent_empty);
    assert_int_equal(u->lookup_backoff_ms, 10000);
    assert_int_equal(u->lookup_attempts, 5);
    config_free(&cfg);

    /* lookup_absent defaults to 404; every placeholder form; every key. */
    tc_expect_ok("[upstream.a]\nurl = http://a\n"
                 "lookup = POST   /v1/{scope}/find/{key}?to={json:/to/0}&r={json:}&h={header:X-Req-Id}\n"
                 "lookup_found = json:\n"
                 "lookup_backoff = 250ms\n"
                 "lookup_attempts = 100\n"
                 "[upstream.b]\nurl = http://b\nlookup = HEAD /x/{json:/a~1b~0c}\n"
                 "lookup_found = json:/id\nlookup_attempts = 1\n"
                 "lookup_absent = 410|json-empty:/items|json-empty:  |  204 | json-empty:/a~0\n",
                 &cfg);
    u = config_upstream(&cfg, "a");
    assert_string_equal(u->lookup_method, "POST");
    assert_string_equal(u->lookup_path,
                        "/v1/{scope}/find/{key}?to={json:/to/0}&r={json:}&h={header:X-Req-Id}");
    assert_string_equal(u->lookup_found, "json:");
    assert_int_equal(u->nlookup_absent_status, 1);
    assert_int_equal(u->lookup_absent_status[0], 404);
    assert_int_equal(u->nlookup_absent_empty, 0);
    assert_int_equal(u->lookup_backoff_ms, 250);
    assert_int_equal(u->lookup_attempts, 100);
    u = config_upstream(&cfg, "b");
    assert_string_equal(u->lookup_method, "HEAD");
    assert_string_equal(u->lookup_path, "/x/{json:/a~1b~0c}");
    assert_int_equal(u->lookup_attempts, 1);
    assert_int_equal(u->nlookup_absent_status, 2);
    assert_int_equal(u->lookup_absent_status[0], 410);
    assert_int_equal(u->lookup_absent_status[1], 204);
    assert_int_equal(u->nlookup_absent_empty, 3);
    assert_string_equal(u->lookup_absent_empty[0], "/items");
    assert_string_equal(u->lookup_absent_empty[1], "");
    assert_string_equal(u->lookup_absent_empty[2], "/a~0");
    config_free(&cfg);
    /* Only json-empty items: no 404 added. */
    tc_expect_ok("[upstream.a]\nurl = http://a\nlookup = GET /m?ref={key}\n"
                 "lookup_found = json:/id\nlookup_absent = json-empty:/data\n",
                 &cfg);
    assert_int_equal(cfg.upstreams[0].nlookup_absent_status, 0);
    assert_int_equal(cfg.upstreams[0].nlookup_absent_empty, 1);
    config_free(&cfg);
    /* The key lines may come in any order; lookup last. */
    tc_expect_ok("[upstream.a]\nlookup_attempts = 3\nlookup_found = json:/id\nurl = http://a\n"
                 "lookup_backoff = 1m\nlookup = GET /m/{key}\n",
                 &cfg);
    assert_int_equal(cfg.upstreams[0].lookup_attempts, 3);
    assert_int_equal(cfg.upstreams[0].lookup_backoff_ms, 60000);
    config_free(&cfg);
}

static void test_lookup_errors(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        const char *what;
    } bad[] = {
        {"", "lookup: '' is not METHOD PATH"},
        {"GET", "lookup: 'GET' is not METHOD PATH"},
        {"/v1/messages", "lookup: '/v1/messages' is not METHOD PATH"},
        {"get /v1/m", "lookup: column 1: 'get' is not GET, HEAD or POST (upper case)"},
        {"PUT /v1/m", "lookup: column 1: 'PUT' is not GET, HEAD or POST"},
        {"GET v1/m", "lookup: column 5: the path must start with '/'"},
        {"GET  {key}", "lookup: column 6: the path must start with '/'"},
        {"GET /v1/m /x", "lookup: column 10: spaces, control characters, non-ASCII and '#'"},
        {"GET /v1/m#frag", "lookup: column 10: spaces"},
        {"GET /v1/\xc3\xa9", "lookup: column 9: spaces"},
        {"GET /m?ref={key", "lookup: column 12: '{' is not closed by '}'"},
        {"GET /m?ref={", "lookup: column 12: '{' is not closed"},
        {"GET /m?ref=key}", "lookup: column 15: '}' without '{'"},
        {"GET /m/{json:/a{b}}", "lookup: column 16: '{' inside a placeholder"},
        {"GET /m/{id}", "lookup: column 8: unknown placeholder '{id}' (expected {key}, {scope}, "
                        "{json:/POINTER} or {header:NAME})"},
        {"GET /m/{}", "lookup: column 8: unknown placeholder '{}'"},
        {"GET /m/{Key}", "lookup: column 8: unknown placeholder '{Key}'"},
        {"GET /m/{key }", "lookup: column 8: unknown placeholder '{key }'"},
        {"GET /m/{query:x}", "lookup: column 8: unknown placeholder"},
        {"GET /m/{json:a}", "lookup: column 8: not a JSON pointer after json:"},
        {"GET /m/{json:/a~2}", "lookup: column 8: not a JSON pointer"},
        {"GET /m/{json:/a~}", "lookup: column 8: not a JSON pointer"},
        {"GET /m/{header:}", "lookup: column 8: not a valid header name after header:"},
        {"GET /m/{header:X Y}", "lookup: column 8: not a valid header name"},
        {"GET /m/{header:X:Y}", "lookup: column 8: not a valid header name"},
    };
    char text[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text,
                 "[upstream.a]\nurl = http://a\nlookup = %s\nlookup_found = json:/id\n",
                 bad[i].value);
        tc_expect_error(text, 3, bad[i].what);
    }

    static const struct {
        const char *value;
        const char *what;
    } bad_found[] = {
        {"", "lookup_found: '' is not json:/POINTER"},
        {"/data/0/id", "lookup_found: '/data/0/id' is not json:/POINTER"},
        {"json:data", "lookup_found: 'json:data' is not json:/POINTER"},
        {"json:/a~", "is not json:/POINTER"},
        {"JSON:/id", "is not json:/POINTER"},
        {"header:X-Id", "is not json:/POINTER"},
        {"status:200", "is not json:/POINTER"},
    };
    for (size_t i = 0; i < sizeof bad_found / sizeof bad_found[0]; i++) {
        snprintf(text, sizeof text,
                 "[upstream.a]\nurl = http://a\nlookup = GET /m/{key}\nlookup_found = %s\n",
                 bad_found[i].value);
        tc_expect_error(text, 4, bad_found[i].what);
    }

    static const struct {
        const char *value;
        const char *what;
    } bad_absent[] = {
        {"", "lookup_absent: item 1 is empty"},
        {"404 |", "lookup_absent: item 2 is empty"},
        {"| 404", "lookup_absent: item 1 is empty"},
        {"404 || 410", "lookup_absent: item 2 is empty"},
        {"404,410", "lookup_absent: '404,410' is not an HTTP status (100-599) or "
                    "json-empty:/POINTER"},
        {"404 410", "lookup_absent: '404 410' is not an HTTP status"},
        {"600", "lookup_absent: 600 is not an HTTP status (100-599)"},
        {"99", "lookup_absent: 99 is not an HTTP status"},
        {"4040", "lookup_absent: '4040' is not an HTTP status"},
        {"-404", "lookup_absent: '-404' is not an HTTP status"},
        {"404 | 404", "lookup_absent: 404 is listed twice"},
        {"json-empty:/d | json-empty:/d", "lookup_absent: 'json-empty:/d' is listed twice"},
        {"json-empty:data", "lookup_absent: 'json-empty:data' is not json-empty: then a JSON "
                            "pointer"},
        {"json-empty:/a~3", "is not json-empty: then a JSON pointer"},
        {"json:/data", "lookup_absent: 'json:/data' is not an HTTP status"},
        {"empty:/data", "is not an HTTP status (100-599) or json-empty:/POINTER"},
        {"none", "is not an HTTP status"},
    };
    for (size_t i = 0; i < sizeof bad_absent / sizeof bad_absent[0]; i++) {
        snprintf(text, sizeof text,
                 "[upstream.a]\nurl = http://a\nlookup = GET /m/{key}\nlookup_found = json:/id\n"
                 "lookup_absent = %s\n",
                 bad_absent[i].value);
        tc_expect_error(text, 5, bad_absent[i].what);
    }

    /* lookup_backoff and lookup_attempts. */
    static const char lk[] = "[upstream.a]\nurl = http://a\nlookup = GET /m/{key}\n"
                             "lookup_found = json:/id\n";
    static const struct {
        const char *line;
        const char *what;
    } bad_num[] = {
        {"lookup_backoff = 0s", "lookup_backoff: must be more than 0"},
        {"lookup_backoff = 10", "lookup_backoff: '10' is not a duration"},
        {"lookup_backoff = -1s", "lookup_backoff: '-1s' is not a duration"},
        {"lookup_attempts = 0", "lookup_attempts: '0' is not a number from 1 to 100"},
        {"lookup_attempts = 101", "lookup_attempts: '101' is not a number from 1 to 100"},
        {"lookup_attempts = 5x", "lookup_attempts: '5x' is not a number"},
        {"lookup_attempts = -1", "lookup_attempts: '-1' is not a number"},
        {"lookup_attempts =", "lookup_attempts: '' is not a number"},
    };
    for (size_t i = 0; i < sizeof bad_num / sizeof bad_num[0]; i++) {
        snprintf(text, sizeof text, "%s%s\n", lk, bad_num[i].line);
        tc_expect_error(text, 5, bad_num[i].what);
    }

    /* lookup without lookup_found: at lookup's line, after the section. */
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup = GET /m/{key}\nlookup_absent = 404\n", 3,
                    "lookup: needs lookup_found = json:/POINTER");
    /* The lookup_* keys without lookup do nothing: the first of them in the
     * file is named. */
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup_found = json:/id\n", 3,
                    "lookup_found: does nothing without lookup = METHOD PATH in [upstream.a]");
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup_absent = 404\n", 3,
                    "lookup_absent: does nothing without lookup");
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup_backoff = 10s\n", 3,
                    "lookup_backoff: does nothing without lookup");
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup_attempts = 5\n", 3,
                    "lookup_attempts: does nothing without lookup");
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup_attempts = 5\nlookup_found = json:/id\n"
                    "lookup_backoff = 10s\n",
                    3, "lookup_attempts: does nothing without lookup");
    /* Another upstream's lookup does not count. */
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup = GET /m/{key}\nlookup_found = json:/id\n"
                    "[upstream.b]\nurl = http://b\nlookup_backoff = 1s\n",
                    7, "lookup_backoff: does nothing without lookup = METHOD PATH in [upstream.b]");
    tc_expect_error("[upstream.a]\nurl = http://a\nlookup = GET /m\nlookup = GET /n\n", 4,
                    "duplicate key 'lookup'");
    tc_expect_error("[server]\nlookup = GET /m\n", 2, "unknown key 'lookup' in [server]");
    tc_expect_error("[source.s]\nverify = github\nsecret = s\nkey = {json:/id}\n", 4,
                    "unknown key 'key' in [source.s]");
}

/* Only ';' after a blank starts an inline comment: a ' #' in a header, a
 * key template or a URL would silently become part of the credential, the
 * ledger key or the address (issue 33), so it is refused at its line. */
static void test_hash_after_a_value(void **state)
{
    (void)state;
    once_config cfg;
    tc_expect_error("[upstream.a]\nurl = http://127.0.0.1:9   # the provider\n", 2,
                    "url: ' #' is not a comment here");
    tc_expect_error("[upstream.a]\nurl = http://127.0.0.1:9\nheader = Authorization: Bearer s3cret  # never seen\n",
                    3, "header: ' #' is not a comment here");
    tc_expect_error("[upstream.a]\nurl = http://127.0.0.1:9\nkey = order:{json:/id}\t# one per order\n", 3,
                    "key: ' #' is not a comment here");
    /* A '#' that is part of a value, and a ';' comment, are fine. */
    tc_expect_ok("[upstream.a]\nurl = http://127.0.0.1:9\nheader = X-Tag: a#b ; a comment\n", &cfg);
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
        cmocka_unit_test_setup_teardown(test_hash_after_a_value, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_defaults_late_server, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_all_keys, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_booleans, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_comments_and_whitespace, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_syntax_errors, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_long_line, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_sections, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_auth, tc_setup, tc_teardown),
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
        cmocka_unit_test_setup_teardown(test_source_example, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_source_defaults, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_source_names, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_source_errors, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_source_event_id, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_source_secrets, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_key_template, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_lookup, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_lookup_errors, tc_setup, tc_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
