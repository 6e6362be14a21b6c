/*
 * server.c — `once serve`: wires the store, the outbound client, the HTTP
 * listeners and the background loop together, and takes them down in the
 * order that loses nothing on SIGTERM.
 *
 * Shutdown: stop accepting; let parked requests finish within the grace
 * period; then end the upstream calls still running (each is recorded as
 * released or unknown, never silently dropped) so that every suspended
 * connection is resumed before its daemon stops.
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/looper.h"
#include "server/actions/actions.h"
#include "server/core/access_set.h"
#include "server/core/jwks.h"
#include "server/core/leases.h"
#include "server/core/log.h"
#include "server/core/services.h"
#include "server/core/waiters.h"
#include "server/core/worker.h"
#include "server/front/guard.h"
#include "server/front/http.h"
#include "server/front/lot.h"
#include "server/hooks/hooks.h"
#include "server/jobs/approvals.h"
#include "server/jobs/reconciler.h"
#include "server/mcp/mcp.h"
#include "server/ops/ops.h"
#include "server/proxy/proxy.h"
#include "server/server.h"

#define HELD_REASON "held: no provider lookup is configured; resolve with `once resolve`"
#define SWEEP_EVERY 60 /* loop ticks */

typedef struct loop {
    server *srv;
    char **lookup_scopes; /* upstreams whose unknown actions a lookup settles */
    size_t nlookup_scopes;
    unsigned tick;
    looper thread;
} loop;

/* Approvals nobody decided within approve_ttl are denied (the deadline is
 * in each row), counted per upstream; then any left in scopes no upstream
 * names any more. A round with nothing waiting costs one read: the age of
 * the oldest waiting, which /metrics shows. */
static int approvals_expire(server *srv)
{
    int64_t oldest = 0;
    int rc = once_approval_oldest(srv->store, &oldest);
    if (rc == ONCE_OK)
        metrics_approval_oldest(srv->metrics, (long long)oldest);
    if (rc < 0 || oldest == 0)
        return rc;
    size_t total = 0, n = 0;
    for (size_t i = 0; rc == ONCE_OK && i < srv->cfg->nupstreams; i++) {
        const char *scope = srv->cfg->upstreams[i].name;
        rc = once_expire_approvals(srv->store, scope, once_now_ms(), &n);
        metrics_approval(srv->metrics, scope, MA_EXPIRED, rc == ONCE_OK ? n : 0);
        total += rc == ONCE_OK ? n : 0;
    }
    if (rc == ONCE_OK && (rc = once_expire_approvals(srv->store, NULL, once_now_ms(), &n)) == ONCE_OK)
        total += n;
    if (total)
        log_event("info", "approvals expired (nobody decided within approve_ttl): %zu", total);
    return rc;
}

/* One round of the background loop: leases that ran out become unknown,
 * unknown actions are held for a human (unless a provider lookup settles
 * them), and old outcomes are swept after their retention. Each step is one
 * statement under the store's own locking, so N gateways on one store may
 * run it at once. */
static int64_t loop_round(void *arg, looper_phase phase, looper_item *posted)
{
    loop *l = arg;
    server *srv = l->srv;
    (void)posted;
    if (phase == LOOPER_STOPPING)
        return LOOPER_DONE;
    size_t expired = 0, held = 0, swept = 0;
    int rc = once_expire_leases(srv->store, once_now_ms(), &expired);
    /* Unknown actions of upstreams with a lookup wait for it (the
     * reconciler holds them after lookup_attempts); the rest are held
     * for a human now. */
    if (rc == ONCE_OK)
        rc = once_hold_unknown_except(srv->store, (const char *const *)l->lookup_scopes, l->nlookup_scopes,
                                      HELD_REASON, &held);
    if (rc == ONCE_OK && l->tick++ % SWEEP_EVERY == 0) {
        size_t events = 0;
        rc = once_sweep(srv->store, once_now_ms(), &swept);
        if (rc == ONCE_OK)
            rc = once_event_sweep(srv->store, once_now_ms(), &events);
        swept += events;
    }
    if (rc == ONCE_OK)
        rc = approvals_expire(srv);
    if (rc < 0)
        log_event("error", "background loop: %s: %s", once_strerror(rc), once_errdetail());
    if (expired || held)
        metrics_lease(srv->metrics, expired, held);
    if (expired || held || swept)
        log_event("info", "leases expired: %zu, actions held: %zu, rows swept: %zu", expired, held, swept);
    return srv->cfg->loop_interval_ms;
}

int server_routes(router *rt)
{
    const route *const tables[] = {ops_routes,    proxy_routes,   actions_routes, hooks_routes,
                                   events_routes, console_routes, mcp_routes,     agents_routes, resource_meta_routes};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (router_add(rt, tables[i]) < 0)
            return -1;
    return 0;
}

/* What the rooms hand each other through the services, never by naming
 * one another: the routes, the sender of each kind of scope (approvals
 * call it without knowing which), and the readiness checks beyond the
 * store's. */
static int server_wire(server *srv, router *rt)
{
    if (server_routes(rt) < 0)
        return -1;
    srv->router = rt;
    srv->senders[SCOPE_HTTP] = &proxy_sender;
    srv->senders[SCOPE_MCP] = &mcp_sender;
    srv->ready[srv->nready++] = mcp_ready;
    return 0;
}

/* Each request in flight holds a client socket and an upstream socket, and
 * suspended connections count against the limit: the default soft limit of
 * 1024 descriptors would cap the gateway near 500 slow calls. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_event("warn", "cannot raise the open-file limit: %s", strerror(errno));
    }
}

/* Warns when a file that holds secrets may be read by group or others. */
static void warn_if_readable(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)))
        log_event("warn", "%s %s but is readable by %s (mode %03o): chmod 600 it", path, what,
                  (st.st_mode & S_IRWXO) ? "others" : "its group", (unsigned)(st.st_mode & 0777));
}

/* Said at every start, so nobody forgets: files with secrets that others
 * may read (tokens, injected headers, signing and TLS keys; the config
 * itself when it holds some; a SQLite store, which holds request and
 * response bodies), and bearer tokens that would travel in clear. */
static void warn_exposed_secrets(const once_config *cfg)
{
    for (size_t i = 0; i < cfg->nsecret_files; i++)
        warn_if_readable(cfg->secret_files[i], "holds secrets");
    if (cfg->inline_secrets && cfg->path)
        warn_if_readable(cfg->path, "holds secrets (metrics_token, secret or header)");
    if (strncmp(cfg->store, "sqlite:", 7) == 0 && strcmp(cfg->store + 7, ":memory:") != 0)
        warn_if_readable(cfg->store + 7, "is the store (request and response bodies)");
    if (config_auth_on(cfg) && !cfg->tls_cert && !config_listen_is_loopback(cfg->listen))
        log_event("warn", "listening on %s over plain HTTP: bearer tokens cross the network in clear "
                  "(set tls_cert and tls_key)", cfg->listen);
}

/* glibc gives a thread arena's free top back to the kernel (madvise) as
 * soon as it passes 128 KiB, and SQLite's statement journal, allocated and
 * freed around most writes, crossed that on nearly every statement of the
 * store's writer thread: under load 16% of once's CPU went to madvise and
 * the TLB shootdowns it sends every core (issue 30, perf). A fixed
 * threshold keeps up to 32 MiB free per arena; blocks of 4 MiB and more
 * are still mapped and unmapped on their own. The gateway's choice, not
 * libonce's: a library leaves the process's allocator alone. */
static void server_tune_malloc(void)
{
    /* Only a cost when refused: an allocator that is not glibc's (the
     * sanitizers' replaces it and refuses every mallopt) keeps its own
     * policy, and nothing depends on this one. */
    (void)mallopt(M_TRIM_THRESHOLD, 32 << 20);
    (void)mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

/* Until /readyz would answer 200 (a stdio MCP server still starting, a
 * store that does not answer yet), the signals are looked at every 100 ms:
 * SIGHUP reloads, SIGTERM or SIGINT stops the wait. 0 once ready (the
 * moment for READY=1), or the signal that stopped it. A store that does
 * not answer is logged once: it is why systemd hears nothing. */
static int server_await_ready(server *srv, const sigset_t *sigs)
{
    int told = 0;
    for (;;) {
        problem p;
        int store_rc;
        if (ops_ready(srv, &p, &store_rc) == 0)
            return 0;
        if (store_rc != ONCE_OK && !told) {
            log_event("warn", "not ready: the store does not answer: %s: %s", once_strerror(store_rc),
                      once_errdetail());
            told = 1;
        }
        const struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig == SIGHUP)
            ops_reload(srv);
        else if (sig > 0)
            return sig;
    }
}

int server_run(once_config *cfg)
{
    log_set_text(cfg->log_text);
    server srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg = cfg;
    server_tune_malloc();
    lot parking;
    router routes = {0};
    struct MHD_Daemon **daemons = NULL;
    size_t ndaemons = 0;
    if (lot_init(&parking) < 0) {
        log_event("error", "cannot start: out of resources");
        return 1;
    }
    srv.lot = &parking;

    /* Every thread started from here on inherits the mask; only sigwait
     * below sees SIGTERM/SIGINT. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP); /* a reload of tokens and agents (ops/reload.c) */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();

    int status = 1;
    loop lp = {.srv = &srv};
    http_listener *listeners = NULL;
    size_t nl = 0;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_event("error", "cannot initialise libcurl");
        goto out;
    }
    /* The ports first: a busy one stops the start before a store is opened
     * or made. */
    char err[256];
    nl = 1;
    for (size_t i = 0; i < cfg->nupstreams; i++)
        nl += cfg->upstreams[i].listen != NULL;
    listeners = calloc(nl, sizeof *listeners);
    daemons = calloc(nl, sizeof *daemons);
    srv.config_text = cfg->path ? reload_read_text(cfg->path) : NULL;
    if (!listeners || !daemons || access_sets_init(&srv.access, cfg) < 0 || server_wire(&srv, &routes) < 0) {
        log_event("error", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nl; i++)
        listeners[i].fd = -1;
    for (size_t i = 0, j = 0; i < nl; i++) {
        listeners[i].srv = &srv;
        const char *addr = cfg->listen;
        listeners[i].tls_cert = cfg->tls_cert;
        listeners[i].tls_key = cfg->tls_key;
        if (i > 0) {
            while (!cfg->upstreams[j].listen)
                j++;
            listeners[i].up = &cfg->upstreams[j];
            listeners[i].route = &proxy_listen_route;
            listeners[i].tls_cert = cfg->upstreams[j].listen_tls_cert;
            listeners[i].tls_key = cfg->upstreams[j].listen_tls_key;
            addr = cfg->upstreams[j++].listen;
        }
        if (http_bind_listener(&listeners[i], addr, err, sizeof err) < 0) {
            log_event("error", "%s", err);
            status = 2;
            goto out;
        }
    }
    char store_shown[512];
    once_store_url_redact(cfg->store, store_shown, sizeof store_shown);
    warn_exposed_secrets(cfg);
    int rc = once_store_open(cfg->store, &srv.store);
    if (rc < 0) {
        log_event("error", "cannot open store '%s': %s: %s", store_shown, once_strerror(rc), once_errdetail());
        status = 2;
        goto out;
    }
    if ((rc = once_store_lock(srv.store)) < 0) {
        log_event("error", "cannot serve store '%s': %s", store_shown, once_errdetail());
        status = 2;
        goto out;
    }
    once_store_set_wal_limit(srv.store, (int64_t)cfg->wal_max);
    if (metrics_init(&srv.metrics) < 0 || outbound_start(&srv.ob) < 0 || waiters_start(&srv, &srv.waiters) < 0 ||
        worker_start(&srv.worker) < 0 || leases_start(srv.store, &srv.leases) < 0 ||
        guard_start(cfg->max_conn_per_client, cfg->max_conn_per_loopback, cfg->request_timeout_ms, http_idle_ms(),
                    &srv.guard) < 0) {
        log_event("error", "cannot start the gateway's threads");
        goto out;
    }
    once_store_set_commit_hook(srv.store, metrics_commit, srv.metrics);
    once_store_set_checkpoint_hook(srv.store, metrics_checkpoint, srv.metrics);
    if (cfg->auth.issuer && jwks_start(&srv.jwks, &cfg->auth, srv.ob) < 0) {
        log_event("error", "cannot start fetching the [auth] issuer's keys");
        goto out;
    }
    if (hooks_start(&srv) < 0)
        goto out;
    int pushes = 0;
    for (size_t i = 0; i < cfg->nsources; i++)
        pushes |= cfg->sources[i].deliver_to != NULL;
    if (pushes && delivery_start(&srv) < 0) {
        log_event("error", "cannot start the delivery thread");
        goto out;
    }
    if (reconciler_start(&srv, &srv.reconciler) < 0) {
        log_event("error", "cannot start the reconciler thread");
        goto out;
    }
    if (approvals_start(&srv, &srv.approvals) < 0) {
        log_event("error", "cannot start the approvals thread");
        goto out;
    }
    if (mcp_start(&srv) < 0) {
        log_event("error", "cannot start the MCP servers");
        goto out;
    }

    for (size_t i = 0; i < nl; i++) {
        daemons[i] = http_listen(&listeners[i], cfg->threads, cfg->max_connections, err, sizeof err);
        if (!daemons[i]) {
            log_event("error", "%s", err);
            status = 2;
            goto out;
        }
        ndaemons++;
        log_event("info", "listening on %s%s%s%s", listeners[i].addr, listeners[i].tls ? " (https)" : "",
                  listeners[i].up ? " for upstream " : "", listeners[i].up ? listeners[i].up->name : "");
    }
    lp.lookup_scopes = calloc(cfg->nupstreams + 1, sizeof *lp.lookup_scopes);
    for (size_t i = 0; lp.lookup_scopes && i < cfg->nupstreams; i++)
        if (cfg->upstreams[i].lookup_method)
            lp.lookup_scopes[lp.nlookup_scopes++] = cfg->upstreams[i].name;
    if (!lp.lookup_scopes || looper_start(&lp.thread, "once-loop", loop_round, &lp) < 0) {
        log_event("error", "cannot start the background loop");
        goto out;
    }
    char summary[160];
    config_summary(cfg, summary, sizeof summary);
    log_event("info", "once %s serving with store %s: %s", ONCE_VERSION, store_shown, summary);

    /* Outside systemd no one hears READY=1, so nothing waits for it: the
     * readiness check pings the store, and a ping nobody needs is one more
     * commit (the chaos suite counts commits to its kill points). */
    int sig = getenv("NOTIFY_SOCKET") ? server_await_ready(&srv, &sigs) : 0;
    if (sig == 0) {
        ops_notify("READY=1", summary);
        while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
            ops_reload(&srv);
    }
    ops_notify("STOPPING=1", "draining");
    log_event("info", "signal %d: draining (grace %lld ms)", sig, (long long)cfg->grace_ms);
    status = 0;

out:
    lot_stop(&parking);
    /* Not MHD_quiesce_daemon: it races the daemons' own threads and can
     * abort the process (guard.c says how). The listen sockets stay open
     * until MHD_stop_daemon; what connects meanwhile is closed unanswered. */
    if (srv.guard)
        guard_refuse_all(srv.guard);
    if (ndaemons)
        lot_drain(&parking, cfg->grace_ms);
    waiters_stop(srv.waiters);
    looper_job_quiesce(srv.delivery);
    looper_job_quiesce(srv.reconciler);
    looper_job_quiesce(srv.approvals);
    outbound_stop(srv.ob); /* what still runs is recorded as released or unknown */
    mcp_stop(&srv);        /* and what runs on a stdio MCP server */
    looper_job_stop(srv.delivery); /* settles the deliveries the stop aborted */
    looper_job_stop(srv.reconciler);
    looper_job_stop(srv.approvals); /* records what the stop cut */
    worker_stop(srv.worker);
    leases_free(srv.leases); /* every call has ended: nothing is held any more */
    srv.leases = NULL;
    size_t left = ndaemons ? lot_drain(&parking, 30000) : 0;
    if (left)
        log_event("error", "%zu requests still parked at exit", left);
    for (size_t i = 0; i < ndaemons; i++)
        MHD_stop_daemon(daemons[i]);
    /* Only now can no request reach these. */
    outbound_free(srv.ob);
    jwks_free(srv.jwks);
    mcp_free(&srv);
    waiters_free(srv.waiters);
    worker_free(srv.worker);
    looper_job_free(srv.delivery);
    looper_job_free(srv.reconciler);
    looper_job_free(srv.approvals);
    looper_stop(&lp.thread);
    looper_close(&lp.thread);
    hooks_stop(&srv);
    once_store_close(srv.store);
    metrics_free(srv.metrics);
    free(daemons);
    for (size_t i = 0; listeners && i < nl; i++)
        http_listener_close(&listeners[i]);
    free(listeners);
    guard_free(srv.guard);
    access_sets_free(srv.access); /* every request has ended: none holds a generation */
    free(srv.config_text);
    curl_global_cleanup();
    free(lp.lookup_scopes);
    lot_close(&parking);
    if (status == 0)
        log_event("info", "stopped");
    return status;
}
