/*
 * server.h — the gateway process: the services `once serve` wires together
 * (store, outbound client, waiters, workers, leases, metrics) that routes
 * reach through their request (req.h), and the process's start and stop.
 * No HTTP thread waits for a disk fsync or an upstream (docs/architecture.md).
 */
#ifndef ONCE_SERVER_SERVER_H
#define ONCE_SERVER_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "once/once.h"
#include "common/buf.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/outbound.h"
#include "server/req.h"
#include "server/router.h"

typedef struct waiters waiters;
typedef struct worker worker;
typedef struct delivery delivery;
typedef struct reconciler reconciler;
typedef struct approvals approvals;
typedef struct guard guard;
typedef struct leases leases;

typedef struct server {
    once_config *cfg;
    once_store *store;
    outbound *ob;
    metrics *metrics;
    waiters *waiters;
    worker *worker;
    source_rt *sources;  /* one per cfg->sources */
    delivery *delivery;
    reconciler *reconciler;
    approvals *approvals;  /* sends what humans approved; NULL without approve rules */
    guard *guard;
    leases *leases;        /* the leases of this node's calls in flight, renewed */
    struct mcp_rt *mcp;    /* MCP servers' runtimes, parallel to cfg->upstreams (mcp.h) */
    struct MHD_Daemon **daemons;
    size_t ndaemons;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t parked;  /* connections that must be resumed before the daemons stop:
                       waiting for req_reply, or streaming (server_park) */
    int stopping;
} server;

/* Counts a connection that may be suspended and must be resumed before the
 * daemons stop; the drain at shutdown waits for the count to reach 0. */
void server_park(server *srv);
void server_unpark(server *srv);

/* Runs the gateway with cfg until SIGTERM or SIGINT, then drains and
 * returns the process exit status (0 after a clean stop). */
int server_run(once_config *cfg);

/* The route of an upstream's own listener: every target goes to it. */
extern const route proxy_listen_route;


/* Prefer: wait — parked requests waiting for another attempt's outcome. */
int waiters_start(server *srv, waiters **out);
/* Answers everything still waiting (409) and stops; later adds fail. */
void waiters_stop(waiters *w);
/* Frees stopped waiters once no HTTP thread can reach them. */
void waiters_free(waiters *w);
/* Parks state until the action (scope, key) is no longer pending under a
 * live lease — then on_settled(state) — or until deadline (monotonic ms,
 * clock.h) passes — then on_timeout(state). Both run on the waiter thread;
 * waiters of one action share one store read per round. 0, or -1 (out of
 * memory, or stopping). */
typedef void (*waiter_fn)(void *state);
int waiters_add(waiters *w, const char *scope, const char *key, void *state, int64_t deadline,
                waiter_fn on_settled, waiter_fn on_timeout);

/* Worker threads for the calls an HTTP thread must not make: synchronous
 * commits (a human's resolve, inbox claims) and reads that build large
 * answers (lists, records). */
int worker_start(worker **out);
void worker_stop(worker *w); /* runs what is queued, then refuses new jobs */
void worker_free(worker *w); /* after the HTTP daemons stopped */
int worker_run(worker *w, void (*fn)(void *), void *arg);

#endif
