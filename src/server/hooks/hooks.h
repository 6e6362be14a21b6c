/*
 * hooks.h — webhook sources at run time: their verifiers, the ingress
 * route, the pull inbox and the push delivery loop.
 */
#ifndef ONCE_SERVER_HOOKS_H
#define ONCE_SERVER_HOOKS_H

#include "common/webhook_sig.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/front/router.h"

typedef struct source_rt {
    const source_cfg *cfg;
    sig_verifier *verifier; /* NULL with verify = none */
    sig_verifier *signer;   /* from deliver_secret; NULL when unset */
    size_t in_flight;       /* push deliveries running (delivery thread only) */
} source_rt;

/* POST /v1/hooks/{source} and the pull inbox; the events API. */
extern const route hooks_routes[];
extern const route events_routes[];

/* Builds a verifier (and signer) for every configured source; logs and
 * fails on a bad secret. 0 or -1. */
int hooks_start(server *srv);
void hooks_stop(server *srv);


/* The push loop: claims due events of every source with deliver_to and
 * POSTs them to the agent through the outbound client, with exponential
 * backoff and full jitter, until delivered or dead. It is srv->delivery, a
 * looper_job: looper_job_quiesce stops claiming (before outbound_stop),
 * looper_job_stop settles what the aborted calls reported and joins (after
 * it), looper_job_free frees it once no HTTP thread can kick it. 0 or -1. */
int delivery_start(server *srv);
/* Wakes the loop (a new event arrived). Any thread. */
void delivery_kick(server *srv);

#endif
