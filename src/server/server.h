/*
 * server.h — the gateway process: `once serve` wires the rooms together
 * here and only here (server.c): it makes the services every route reaches
 * (core/services.h), registers each room's routes, senders and readiness
 * checks, starts the listeners, and drains and stops them in order.
 */
#ifndef ONCE_SERVER_SERVER_H
#define ONCE_SERVER_SERVER_H

#include "server/config/config.h"
#include "server/front/router.h"

/* Runs the gateway with cfg until SIGTERM or SIGINT, then drains and
 * returns the process exit status (0 after a clean stop). */
int server_run(once_config *cfg);

/* Registers every room's route table in rt, in the order they are tried
 * (for server_run, and for tests of the router). 0, or -1. */
int server_routes(router *rt);

#endif
