/*
 * fuzz_front.c — libFuzzer target for the HTTP front's header phase: the
 * route table (router.c) and the access checks (access.c) over a method, a
 * raw target and the headers that decide access, as a client sends them.
 *
 * The input is split at NUL bytes into method, target, Host, Origin,
 * Sec-Fetch-Site and Authorization. Invariants: every refusal carries a
 * status and a code; captures point inside the target; an operator route is
 * never granted to an agent token or to no token while tokens exist; a Host
 * accepted as host[:port] holds no userinfo, path, query or white space.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static auth_token tokens[] = {{.role = ROLE_AGENT, .name = "bot"}, {.role = ROLE_OPERATOR, .name = "alice"}};

/* The gateway keeps each token's SHA-256 only; the seeds send these tokens. */
static void tokens_digest(void)
{
    static const char *const secrets[] = {"agent-secret", "op-secret"};
    static int done;
    for (size_t i = 0; !done && i < 2; i++) {
        if (EVP_Digest(secrets[i], strlen(secrets[i]), tokens[i].digest, NULL, digest_sha256(), NULL) != 1)
            abort();
    }
    done = 1;
}

static void check_problem(int rc, const problem *p)
{
    if (rc < 0 && (p->status < 400 || p->status > 599 || !p->code || !p->title))
        abort();
}

static int inside(const char *p, size_t n, const char *t, size_t tn)
{
    return p >= t && p + n <= t + tn;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *part[6] = {"GET", "/", NULL, NULL, NULL, NULL};
    const char *p = buf;
    for (int i = 0; i < 6 && p <= buf + size; i++) {
        part[i] = p;
        p += strlen(p) + 1;
    }
    if (part[2] && access_host_valid(part[2]) && strpbrk(part[2], "@/?#\\ \t\r\n"))
        abort();
    tokens_digest();
    once_config open = {0}, closed = {.tokens = tokens, .ntokens = 2, .metrics_token = "m"};
    const once_config *cfgs[] = {&open, &closed};
    for (int c = 0; c < 2; c++) {
        const once_config *cfg = cfgs[c];
        problem pb;
        check_problem(access_browser(cfg, c, part[2], part[3], part[4], &pb), &pb);
        route_match m;
        int rc = router_match(test_routes(), part[1], &m, &pb);
        check_problem(rc, &pb);
        if (rc < 0)
            continue;
        size_t tn = strlen(part[1]);
        for (int s = 0; s < 2; s++)
            if (m.seg[s] && !inside(m.seg[s], m.seglen[s], part[1], tn))
                abort();
        if (m.rest && !inside(m.rest, strlen(m.rest), part[1], tn))
            abort();
        route_fn fn;
        check_problem(router_method(&m, part[0], &fn, &pb), &pb);
        const auth_token *who = NULL;
        rc = access_check(cfg, m.rt->access, part[5], &who, &pb);
        check_problem(rc, &pb);
        if (rc == 0 && cfg->ntokens && m.rt->access == ACCESS_OPERATOR && (!who || who->role != ROLE_OPERATOR))
            abort();
    }
    free(buf);
    return 0;
}
