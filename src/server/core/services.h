/*
 * services.h — what a route reaches through its request (r->srv): the
 * configuration, the store and the services `once serve` wires together
 * (server.c), each as an opaque pointer where its type lives in a room
 * above. It sits low so that every room can use it without including the
 * top (server.h), which alone knows how they are started and stopped.
 * No HTTP thread waits for a disk fsync or an upstream (docs/architecture.md).
 */
#ifndef ONCE_SERVER_CORE_SERVICES_H
#define ONCE_SERVER_CORE_SERVICES_H

#include <stddef.h>

#include "once/once.h"
#include "server/config/config.h"
#include "server/core/metrics.h"
#include "server/core/outbound.h"
#include "server/core/problem.h"
#include "server/core/sender.h"

typedef struct waiters waiters;
typedef struct worker worker;
typedef struct looper_job looper_job; /* common/looper.h */
typedef struct guard guard;
typedef struct leases leases;
typedef struct lot lot;
typedef struct router router;
typedef struct source_rt source_rt;
typedef struct server server;

/* A room's say in /readyz: 0 ready, or -1 with p (a 503 whose detail names
 * no more than a configured name). */
typedef int (*ready_fn)(server *srv, problem *p);

#define SERVER_READY_CHECKS 4

struct server {
    once_config *cfg;
    struct access_sets *access; /* the current tokens and agents, replaced by a reload (access_set.h) */
    char *config_text;          /* the config file as it was at start: a reload names what changed since */
    once_store *store;
    outbound *ob;
    struct jwks *jwks;          /* the [auth] issuer's keys (core/jwks.h); NULL without [auth] */
    metrics *metrics;
    waiters *waiters;
    worker *worker;
    source_rt *sources;  /* one per cfg->sources (hooks) */
    looper_job *delivery;   /* pushes webhook events (hooks/delivery.c); NULL without deliver_to */
    looper_job *reconciler; /* provider lookups (jobs/reconciler.c); NULL without a lookup */
    looper_job *approvals;  /* sends what humans approved; NULL without approve rules */
    guard *guard;
    leases *leases;        /* the leases of this node's calls in flight, renewed */
    struct mcp_rt *mcp;    /* MCP servers' runtimes, parallel to cfg->upstreams (mcp.h) */
    lot *lot;              /* parked connections and the stopping flag (front/lot.h) */
    const router *router;  /* the route tables the rooms registered (front/router.h) */
    const sender *senders[SCOPE_KINDS]; /* who sends an approved action of each kind of scope */
    ready_fn ready[SERVER_READY_CHECKS]; /* rooms' readiness beyond the store's */
    size_t nready;
};

#endif
