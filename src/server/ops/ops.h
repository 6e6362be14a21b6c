/*
 * ops.h — the operations room: /healthz, /readyz, /metrics, the agents
 * operators see (/v1/agents), and the console's page and files.
 */
#ifndef ONCE_SERVER_OPS_H
#define ONCE_SERVER_OPS_H

#include "server/front/router.h"

extern const route ops_routes[];
extern const route console_routes[];
extern const route agents_routes[]; /* GET /v1/agents (agents.c) */

#endif
