/*
 * ops.c — the operations routes: /healthz (the process answers), /readyz
 * (the store takes a write, and every room that registered a readiness
 * check says ready) and /metrics (Prometheus text).
 */
#include <stdio.h>

#include "server/core/leases.h"
#include "server/core/log.h"
#include "server/ops/ops.h"
#include "server/front/lot.h"
#include "server/core/services.h"
#include "server/front/req.h"

static void ops_healthz(req *r)
{
    req_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* The store's own words stay in the log: an unauthenticated prober learns
 * that the store is down, not its address or error text. */
static void ops_readyz(req *r)
{
    if (lot_stopping(r->srv->lot)) {
        req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping");
        return;
    }
    /* The rooms' own say (a stdio MCP server not started yet), registered
     * by server.c: this room names none of them. */
    for (size_t i = 0; i < r->srv->nready; i++) {
        problem p;
        if (r->srv->ready[i](r->srv, &p) < 0) {
            req_problem_from(r, &p);
            return;
        }
    }
    int rc = once_store_ping(r->srv->store);
    if (rc == ONCE_OK) {
        req_json(r, 200, json_pack("{s:s}", "status", "ready"));
        return;
    }
    log_event("warn", "readyz: the store does not answer: %s: %s", once_strerror(rc), once_errdetail());
    req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "the store does not answer (see the log)");
}

static void ops_metrics(req *r)
{
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
    struct MHD_Response *resp = resp_bytes(b.data, b.len, "text/plain; version=0.0.4");
    buf_free(&b);
    req_reply(r, 200, resp);
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
