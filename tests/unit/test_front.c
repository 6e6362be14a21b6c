/*
 * test_front.c — the gateway's header-phase decisions, without a socket:
 * request targets and the upstream URLs built from them (target.c), roles,
 * Origin and Host (access.c), and the route table (router.c). Each attack
 * of docs/security.md has a row here; the black-box proof is tests/security.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "common/digest.h"
#include "server/front/access.h"
#include "server/front/router.h"
#include "server/server.h"

/* Every room's routes, as server.c registers them. */
static const router *test_routes(void)
{
    static router rt;
    if (rt.n == 0 && server_routes(&rt) < 0)
        abort();
    return &rt;
}
#include "server/core/target.h"

/* ---- targets ----------------------------------------------------------- */

/* Asserts check's verdict on target, and that a refusal says why. */
static void expect_verdict(target_verdict (*check)(const char *, char *, size_t), const char *target,
                           target_verdict want)
{
    char why[200] = "";
    target_verdict got = check(target, why, sizeof why);
    if (got != want)
        fail_msg("target '%s': verdict %d, want %d (%s)", target, got, want, why);
    if (want != TARGET_OK && !why[0])
        fail_msg("target '%s': refused without a reason", target);
}

static void expect_target(const char *target, target_verdict want)
{
    expect_verdict(target_check, target, want);
}

static void test_target_accepts_paths(void **state)
{
    (void)state;
    static const char *const ok[] = {"", "/", "/x", "/v1/charges", "?a=1", "/x?y=../../z", "/a..b/c.d",
                                     "/...", "/.well-known/x", "/a/%2Fb", "//double", "/x?q=%2e%2e"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        expect_target(ok[i], TARGET_OK);
}

static void test_target_refuses_other_hosts(void **state)
{
    (void)state;
    /* Appended to a base URL, each of these names another host or port. */
    static const char *const bad[] = {"@127.0.0.1:9/steal", ":8080/x", ".evil.example/x", "evil.example/x",
                                      "http://127.0.0.1:9/x", "*", "#frag", "/x#y", "\\\\evil/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_target(bad[i], TARGET_INVALID);
}

static void test_target_refuses_dot_segments(void **state)
{
    (void)state;
    static const char *const bad[] = {"/..", "/../admin", "/x/../../admin", "/.", "/./x", "/x/.",
                                      "/%2e%2e/admin", "/%2E%2e/admin", "/.%2e/x", "/%2e/x", "/..%2fadmin",
                                      "/..%2Fadmin", "/a%2f..%2fb", "/..%5cadmin", "/x/..?q=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_target(bad[i], TARGET_INVALID);
}

/* "..;" and "..%00" climb out on servers that cut a segment at ';' (Tomcat,
 * Spring) or at a NUL (C): refused on every upstream. */
static void test_target_refuses_dot_segments_behind_params(void **state)
{
    (void)state;
    static const char *const bad[] = {"/x/..;/admin", "/..;", "/x/%2e%2e;/a", "/x/.;/a", "/x/..%00/a",
                                      "/x/.%00", "/..;x=1/a", "/a/%2E%2E%3B/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_target(bad[i], TARGET_INVALID);
    expect_target("/a;..", TARGET_OK);
    expect_target("/..a;/b", TARGET_OK);
}

static void expect_ambiguous(const char *target, target_verdict want)
{
    expect_verdict(target_ambiguous, target, want);
}

/* Where path rules apply, a path some provider reads as another path is
 * refused; the same paths pass target_check on other upstreams. */
static void test_target_ambiguous(void **state)
{
    (void)state;
    static const char *const bad[] = {"/v1%2Frefunds", "/v1%2frefunds", "/a%5Cb", "/a\\b", "/a%00b", "//approve",
                                      "/v1//refunds", "/x/..;/a", "/x/%2e%2e;/a", "/x/.;p/a", "/x/..", "/%2e",
                                      "/v1/%2572efunds", "/a%25%32%46b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_ambiguous(bad[i], TARGET_AMBIGUOUS);
    static const char *const ok[] = {"", "/", "?q=//x%2F", "/v1/refunds/", "/v1/refunds;p=1", "/a%25",
                                     "/a%25zz", "/100%25", "/caf%C3%A9", "/v1/%72efunds"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        expect_ambiguous(ok[i], TARGET_OK);
    expect_ambiguous("/%zz", TARGET_MALFORMED);
}

static void expect_canon(const char *target, const char *want)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", target);
    target_canon(buf);
    if (strcmp(buf, want) != 0)
        fail_msg("canonical form of '%s': '%s', want '%s'", target, buf, want);
    target_canon(buf);
    if (strcmp(buf, want) != 0)
        fail_msg("canonical form of '%s' is not idempotent: '%s'", target, buf);
}

/* Unreserved characters decoded, other escapes upper-cased, the query as
 * sent: one spelling per path, for the rules and for the upstream. */
static void test_target_canon(void **state)
{
    (void)state;
    expect_canon("", "");
    expect_canon("/v1/%72efunds", "/v1/refunds");
    expect_canon("/%761/%72%65%66%75%6e%64%73", "/v1/refunds");
    expect_canon("/caf%c3%a9/%7e%2d%2E%5f", "/caf%C3%A9/~-._");
    expect_canon("/a%2fb%20c", "/a%2Fb%20c");
    expect_canon("/x?q=%72%2f", "/x?q=%72%2f");
    expect_canon("?%72", "?%72");
    expect_canon("/%25%37%32", "/%2572");
}

static void test_target_refuses_malformed(void **state)
{
    (void)state;
    expect_target("/%zz", TARGET_MALFORMED);
    expect_target("/%2", TARGET_MALFORMED);
    expect_target("/a b", TARGET_MALFORMED);
    expect_target("/\x7f", TARGET_MALFORMED);
    expect_target("/caf\xc3\xa9", TARGET_MALFORMED);
}

static void expect_url(const char *base, const char *target, const char *want)
{
    char *url = NULL, why[160] = "";
    if (target_url(base, target, &url, why, sizeof why) != 0)
        fail_msg("url of '%s' + '%s': refused (%s)", base, target, why);
    if (strcmp(url, want) != 0)
        fail_msg("url of '%s' + '%s': '%s', want '%s'", base, target, url, want);
    free(url);
}

static void test_target_url(void **state)
{
    (void)state;
    expect_url("http://127.0.0.1:7700", "/v1/x?a=1", "http://127.0.0.1:7700/v1/x?a=1");
    expect_url("http://127.0.0.1:7700", "", "http://127.0.0.1:7700/");
    expect_url("https://api.example.com/api/public", "/x", "https://api.example.com/api/public/x");
    expect_url("https://api.example.com/api/public", "?q=2", "https://api.example.com/api/public?q=2");
    expect_url("https://api.example.com/api/public", "", "https://api.example.com/api/public");
    expect_url("http://h:81", "//evil.example/x", "http://h:81//evil.example/x");
    expect_url("http://[::1]:9000", "/a%20b", "http://[::1]:9000/a%20b");
    /* the path is sent as given (canonical), not re-spelled by libcurl */
    expect_url("http://127.0.0.1:7700/api", "/caf%C3%A9?q=%2f", "http://127.0.0.1:7700/api/caf%C3%A9?q=%2f");
    expect_url("http://127.0.0.1:7700", "/x?", "http://127.0.0.1:7700/x?");
}

/* A target that slipped past target_check must still not leave the
 * upstream: the URL API keeps the host, and the re-parse checks it. */
static void test_target_url_keeps_host(void **state)
{
    (void)state;
    static const char *const sneaky[] = {"@evil.example/x", ".evil.example/x", ":9/x"};
    for (size_t i = 0; i < sizeof sneaky / sizeof sneaky[0]; i++) {
        char *url = NULL, why[160];
        if (target_url("https://api.stripe.com", sneaky[i], &url, why, sizeof why) == 0) {
            CURLU *h = curl_url();
            char *host = NULL;
            assert_int_equal(curl_url_set(h, CURLUPART_URL, url, 0), CURLUE_OK);
            assert_int_equal(curl_url_get(h, CURLUPART_HOST, &host, 0), CURLUE_OK);
            if (strcmp(host, "api.stripe.com") != 0)
                fail_msg("'%s' led to host '%s' (%s)", sneaky[i], host, url);
            curl_free(host);
            curl_url_cleanup(h);
            free(url);
        }
    }
}

/* ---- access ------------------------------------------------------------ */

static auth_token tokens[] = {{.role = ROLE_AGENT, .name = "bot"}, {.role = ROLE_OPERATOR, .name = "alice"}};

/* The gateway keeps each token's SHA-256 only. */
static void tokens_digest(void)
{
    static const char *const secrets[] = {"agent-secret", "op-secret"};
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(EVP_Digest(secrets[i], strlen(secrets[i]), tokens[i].digest, NULL, digest_sha256(), NULL), 1);
}

static void test_access_roles(void **state)
{
    (void)state;
    tokens_digest();
    once_config cfg = {.tokens = tokens, .ntokens = 2};
    problem p;
    const auth_token *who;
    assert_int_equal(access_check(&cfg, ACCESS_OPEN, NULL, &who, &p), 0);
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, NULL, &who, &p), -1);
    assert_int_equal(p.status, 401);
    assert_string_equal(p.header, "WWW-Authenticate");
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "Bearer nope", &who, &p), -1);
    assert_int_equal(p.status, 401);
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "Bearer agent-secre", &who, &p), -1);
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "Bearer agent-secretX", &who, &p), -1);
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "Basic agent-secret", &who, &p), -1);
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "Bearer agent-secret", &who, &p), 0);
    assert_string_equal(who->name, "bot");
    assert_int_equal(access_check(&cfg, ACCESS_AGENT, "bearer op-secret", &who, &p), 0);
    assert_string_equal(who->name, "alice");
    assert_int_equal(access_check(&cfg, ACCESS_OPERATOR, "Bearer agent-secret", &who, &p), -1);
    assert_int_equal(p.status, 403);
    assert_string_equal(p.code, "forbidden");
    assert_int_equal(access_check(&cfg, ACCESS_OPERATOR, "Bearer op-secret", &who, &p), 0);
    /* /metrics: open without metrics_token; with it, that token or an operator's. */
    assert_int_equal(access_check(&cfg, ACCESS_METRICS, NULL, &who, &p), 0);
    cfg.metrics_token = "m-secret";
    assert_int_equal(access_check(&cfg, ACCESS_METRICS, NULL, &who, &p), -1);
    assert_int_equal(p.status, 401);
    assert_int_equal(access_check(&cfg, ACCESS_METRICS, "Bearer m-secret", &who, &p), 0);
    assert_int_equal(access_check(&cfg, ACCESS_METRICS, "Bearer op-secret", &who, &p), 0);
    assert_int_equal(access_check(&cfg, ACCESS_METRICS, "Bearer agent-secret", &who, &p), -1);
    assert_int_equal(p.status, 403);
}

static void test_access_open_without_tokens(void **state)
{
    (void)state;
    once_config cfg = {0};
    problem p;
    const auth_token *who;
    assert_int_equal(access_check(&cfg, ACCESS_OPERATOR, NULL, &who, &p), 0);
    assert_null(who);
}

static void expect_browser(const once_config *cfg, int tls, const char *host, const char *origin, const char *site,
                           unsigned want)
{
    problem p = {0};
    int rc = access_browser(cfg, tls, host, origin, site, &p);
    unsigned got = rc == 0 ? 0 : p.status;
    if (got != want)
        fail_msg("host %s origin %s site %s: %u, want %u (%s)", host ? host : "-", origin ? origin : "-",
                 site ? site : "-", got, want, rc ? p.detail : "allowed");
}

static void test_access_browser(void **state)
{
    (void)state;
    once_config open = {0}, closed = {.tokens = tokens, .ntokens = 2};
    expect_browser(&open, 0, "127.0.0.1:7600", NULL, NULL, 0);
    expect_browser(&open, 0, "localhost:7600", NULL, NULL, 0);
    expect_browser(&open, 0, "LOCALHOST", NULL, NULL, 0);
    expect_browser(&open, 0, "[::1]:7600", NULL, NULL, 0);
    expect_browser(&open, 0, NULL, NULL, NULL, 0);
    /* DNS rebinding: a name the attacker's DNS points at 127.0.0.1. */
    expect_browser(&open, 0, "evil.example:7600", NULL, NULL, 421);
    expect_browser(&open, 0, "attacker.localhost", NULL, NULL, 421);
    expect_browser(&open, 0, "127.0.0.1.nip.io", NULL, NULL, 421);
    expect_browser(&closed, 0, "evil.example:7600", NULL, NULL, 0);
    /* Origins. */
    expect_browser(&open, 0, "127.0.0.1:7600", "http://127.0.0.1:7600", NULL, 0);
    expect_browser(&open, 0, "127.0.0.1", "http://127.0.0.1:80", NULL, 0);
    expect_browser(&open, 1, "127.0.0.1:443", "https://127.0.0.1", NULL, 0);
    expect_browser(&open, 0, "127.0.0.1:7600", "http://127.0.0.1:7601", NULL, 403);
    expect_browser(&open, 0, "127.0.0.1:7600", "https://127.0.0.1:7600", NULL, 403);
    expect_browser(&open, 1, "127.0.0.1:7600", "http://127.0.0.1:7600", NULL, 403);
    expect_browser(&open, 0, "127.0.0.1:7600", "http://evil.example", NULL, 403);
    expect_browser(&open, 0, "127.0.0.1:7600", "null", NULL, 403);
    expect_browser(&closed, 0, "127.0.0.1:7600", "http://evil.example", NULL, 403);
    expect_browser(&open, 0, "127.0.0.1:7600", NULL, "cross-site", 403);
    expect_browser(&open, 0, "127.0.0.1:7600", NULL, "same-origin", 0);
    expect_browser(&open, 0, "127.0.0.1:7600", NULL, "none", 0);
}

/* ---- routes ------------------------------------------------------------ */

static void expect_route(const char *target, const char *method, const char *pattern, unsigned status)
{
    route_match m;
    problem p = {0};
    route_fn fn = NULL;
    if (router_match(test_routes(), target, &m, &p) < 0) {
        if (status != p.status)
            fail_msg("%s %s: %u, want %u", method, target, p.status, status);
        return;
    }
    if (strcmp(m.rt->pattern, pattern) != 0)
        fail_msg("%s %s: matched %s, want %s", method, target, m.rt->pattern, pattern);
    int rc = router_method(&m, method, &fn, &p);
    unsigned got = rc == 0 ? 0 : p.status;
    if (got != status)
        fail_msg("%s %s: %u, want %u", method, target, got, status);
    if (rc == 0)
        assert_non_null(fn);
}

static void test_router(void **state)
{
    (void)state;
    expect_route("/healthz", "GET", "/healthz", 0);
    expect_route("/healthz", "HEAD", "/healthz", 0);
    expect_route("/healthz", "POST", "/healthz", 405);
    expect_route("/healthz/", "GET", "", 404);
    expect_route("/v1/proxy/demo/x?y=1", "PATCH", "/v1/proxy/{**}", 0);
    expect_route("/v1/proxy/", "POST", "/v1/proxy/{**}", 0);
    expect_route("/v1/proxy", "POST", "", 404);
    expect_route("/v1/actions", "POST", "/v1/actions", 0);
    expect_route("/v1/actions?status=held", "GET", "/v1/actions", 0);
    expect_route("/v1/actions", "HEAD", "/v1/actions", 0);
    expect_route("/v1/actions", "PUT", "/v1/actions", 405);
    expect_route("/v1/actions/complete", "POST", "/v1/actions/complete", 0);
    expect_route("/v1/actions/s/k", "GET", "/v1/actions/{}/{}", 0);
    expect_route("/v1/actions/s/k", "POST", "/v1/actions/{}/{}", 405);
    expect_route("/v1/actions/s/k/resolve", "POST", "/v1/actions/{}/{}/resolve", 0);
    expect_route("/v1/actions/s//resolve", "POST", "", 404);
    expect_route("/v1/actions/a/b/c", "GET", "", 404);
    expect_route("/v1/hooks/stripe", "POST", "/v1/hooks/{**}", 0);
    expect_route("/v1/inbox/src/claim", "POST", "/v1/inbox/{**}", 0);
    expect_route("/nope", "GET", "", 404);
}

static void test_router_captures(void **state)
{
    (void)state;
    route_match m;
    problem p;
    assert_int_equal(router_match(test_routes(), "/v1/actions/s%2F1/k%20x/resolve?z=1", &m, &p), 0);
    assert_int_equal(m.seglen[0], 5);
    assert_memory_equal(m.seg[0], "s%2F1", 5);
    assert_int_equal(m.seglen[1], 5);
    assert_memory_equal(m.seg[1], "k%20x", 5);
    assert_string_equal(m.query, "z=1");
    assert_int_equal(m.rt->access, ACCESS_OPERATOR);
    assert_int_equal(router_match(test_routes(), "/v1/proxy/demo/x?y=1", &m, &p), 0);
    assert_string_equal(m.rest, "demo/x?y=1");
    route_fn fn;
    assert_int_equal(router_match(test_routes(), "/v1/actions", &m, &p), 0);
    assert_int_equal(router_method(&m, "DELETE", &fn, &p), -1);
    assert_string_equal(p.header, "Allow");
    assert_string_equal(p.header_value, "GET, POST");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_accepts_paths),
        cmocka_unit_test(test_target_refuses_other_hosts),
        cmocka_unit_test(test_target_refuses_dot_segments),
        cmocka_unit_test(test_target_refuses_malformed),
        cmocka_unit_test(test_target_refuses_dot_segments_behind_params),
        cmocka_unit_test(test_target_ambiguous),
        cmocka_unit_test(test_target_canon),
        cmocka_unit_test(test_target_url),
        cmocka_unit_test(test_target_url_keeps_host),
        cmocka_unit_test(test_access_roles),
        cmocka_unit_test(test_access_open_without_tokens),
        cmocka_unit_test(test_access_browser),
        cmocka_unit_test(test_router),
        cmocka_unit_test(test_router_captures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
