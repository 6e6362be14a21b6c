/*
 * ops.h — the operations room: /healthz, /readyz, /metrics, the agents
 * operators see (/v1/agents), and the console's page and files.
 */
#ifndef ONCE_SERVER_OPS_H
#define ONCE_SERVER_OPS_H

#include "server/core/services.h"
#include "server/front/router.h"

extern const route ops_routes[];
extern const route console_routes[];
extern const route agents_routes[]; /* GET /v1/agents (agents.c) */
extern const route resource_meta_routes[]; /* RFC 9728 metadata ([auth], resource_meta.c) */

/* What /readyz answers 200 to: not stopping, every room ready (a stdio MCP
 * server has answered initialize) and the store answers. 0, or -1 with p
 * the 503 to answer; *store_rc is the store's error when it is the reason
 * (its words belong in the log only), else ONCE_OK. */
int ops_ready(server *srv, problem *p, int *store_rc);

/* (notify.c) A state for systemd's Type=notify ("READY=1", "STOPPING=1",
 * with a STATUS= line of its own); nothing without NOTIFY_SOCKET. */
void ops_notify(const char *state, const char *status);

/* (reload.c) SIGHUP: the tokens and [agent.NAME] sections read again,
 * applied from the next request; an error changes nothing. */
void ops_reload(server *srv);
/* The config file's text (at most 1 MiB), for telling later which sections
 * changed; malloc'd, NULL when it cannot be read. */
char *reload_read_text(const char *path);

#endif
