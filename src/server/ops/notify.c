/*
 * notify.c — what systemd hears from once under once.service's
 * Type=notify: READY=1 once the gateway listens and /readyz would answer
 * 200, STOPPING=1 when a SIGTERM starts the drain (server.c says when).
 * Without NOTIFY_SOCKET, outside systemd, sd_notify does nothing. The
 * variable is left to the children: the unit's NotifyAccess=main makes
 * systemd ignore what a stdio MCP server might send.
 */
#include "server/ops/ops.h"

#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "server/core/log.h"

void ops_notify(const char *state, const char *status)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s\nSTATUS=%s", state, status);
    if (n < 0 || (size_t)n >= sizeof msg)
        n = snprintf(msg, sizeof msg, "%s", state);
    int rc = sd_notify(0, msg);
    if (rc < 0)
        log_event("warn", "cannot tell systemd %s: %s", state, strerror(-rc));
}
