/*
 * ops.c — the operations routes: /healthz (the process answers), /readyz
 * (the store takes a write, and every room that registered a readiness
 * check says ready) and /metrics (Prometheus text, with each agent limit's
 * use read from the store, so it is built on a worker).
 */
#include <stdio.h>

#include "server/core/leases.h"
#include "server/core/log.h"
#include "server/ops/ops.h"
#include "server/front/lot.h"
#include "server/core/services.h"
#include "server/core/worker.h"
#include "server/front/req.h"

static void ops_healthz(req *r)
{
    req_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

int ops_ready(server *srv, problem *p, int *store_rc)
{
    *store_rc = ONCE_OK;
    if (lot_stopping(srv->lot))
        return problem_set(p, 503, "shutting_down", "Shutting down", "the gateway is stopping");
    /* The rooms' own say (a stdio MCP server not started yet), registered
     * by server.c: this room names none of them. */
    for (size_t i = 0; i < srv->nready; i++)
        if (srv->ready[i](srv, p) < 0)
            return -1;
    int rc = once_store_ping(srv->store);
    if (rc != ONCE_OK) {
        *store_rc = rc;
        return problem_set(p, 503, "store_unavailable", "Store unavailable", "the store does not answer (see the log)");
    }
    return 0;
}

/* The store's own words stay in the log: an unauthenticated prober learns
 * that the store is down, not its address or error text. */
static void ops_readyz(req *r)
{
    problem p;
    int rc;
    if (ops_ready(r->srv, &p, &rc) == 0) {
        req_json(r, 200, json_pack("{s:s}", "status", "ready"));
        return;
    }
    if (rc != ONCE_OK)
        log_event("warn", "readyz: the store does not answer: %s: %s", once_strerror(rc), once_errdetail());
    req_problem_from(r, &p);
}

/* A Prometheus label value: '\\', '"' and newlines escaped. */
static void ops_label(buf *b, const char *v)
{
    for (; *v; v++) {
        const char *e = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        if (e)
            buf_append_str(b, e, (size_t)1 << 30);
        else
            buf_append(b, (const uint8_t *)v, 1, (size_t)1 << 30);
    }
}

/* once_limit_used: each agent limit's use now, read from the store (so
 * across every node), on the worker this route runs on. */
static void ops_limits(req *r, buf *b)
{
    const once_config *cfg = req_access_cfg(r);
    buf_append_str(b,
                   "# HELP once_limit_used What each agent limit's window holds now (count or sum).\n"
                   "# TYPE once_limit_used gauge\n",
                   (size_t)1 << 30);
    for (size_t i = 0; i < cfg->nagents; i++) {
        for (size_t l = 0; l < cfg->agents[i].nlimits; l++) {
            const agent_limit *lim = &cfg->agents[i].limits[l];
            double used;
            int64_t retry;
            if (once_limit_use(r->srv->store, lim->ledger_id, lim->window_ms, &used, &retry) != ONCE_OK)
                continue;
            char num[64];
            buf_append_str(b, "once_limit_used{agent=\"", (size_t)1 << 30);
            ops_label(b, cfg->agents[i].name);
            buf_append_str(b, "\",limit=\"", (size_t)1 << 30);
            ops_label(b, lim->text);
            snprintf(num, sizeof num, "\"} %.17g\n", used);
            buf_append_str(b, num, (size_t)1 << 30);
        }
    }
}

static void ops_metrics_job(void *arg)
{
    req *r = arg;
    buf b = {0};
    if (metrics_render(r->srv->metrics, &b) < 0) {
        buf_free(&b);
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot render metrics");
        return;
    }
    char extra[512];
    snprintf(extra, sizeof extra,
             "# HELP once_upstream_in_flight Upstream calls running now.\n"
             "# TYPE once_upstream_in_flight gauge\nonce_upstream_in_flight %zu\n"
             "# HELP once_leases_held Leases of calls in flight that this node renews.\n"
             "# TYPE once_leases_held gauge\nonce_leases_held %zu\n"
             "# HELP once_lease_renewal_failures_total Lease renewals that failed (retried, or taken over).\n"
             "# TYPE once_lease_renewal_failures_total counter\nonce_lease_renewal_failures_total %llu\n",
             outbound_in_flight(r->srv->ob), leases_held(r->srv->leases),
             (unsigned long long)leases_failures(r->srv->leases));
    buf_append_str(&b, extra, (size_t)1 << 30);
    int64_t wal;
    if (once_store_wal_bytes(r->srv->store, &wal) == ONCE_OK) {
        snprintf(extra, sizeof extra,
                 "# HELP once_store_wal_bytes Size of the SQLite store's write-ahead log.\n"
                 "# TYPE once_store_wal_bytes gauge\nonce_store_wal_bytes %lld\n",
                 (long long)wal);
        buf_append_str(&b, extra, (size_t)1 << 30);
    }
    ops_limits(r, &b);
    struct MHD_Response *resp = resp_bytes(b.data, b.len, "text/plain; version=0.0.4");
    buf_free(&b);
    req_reply(r, 200, resp);
}

/* On a worker: the limits' use is read from the store. */
static void ops_metrics(req *r)
{
    if (worker_run(r->srv->worker, ops_metrics_job, r) < 0)
        req_not_started(r, "the worker queue refused it");
}

const route ops_routes[] = {
    {.pattern = "/healthz", .name = "healthz", .access = ACCESS_OPEN,
     .methods = {{"GET", ops_healthz}, {"HEAD", ops_healthz}}},
    {.pattern = "/readyz", .name = "readyz", .access = ACCESS_OPEN,
     .methods = {{"GET", ops_readyz}, {"HEAD", ops_readyz}}},
    {.pattern = "/metrics", .name = "metrics", .access = ACCESS_METRICS,
     .methods = {{"GET", ops_metrics}, {"HEAD", ops_metrics}}},
    {.pattern = NULL},
};
