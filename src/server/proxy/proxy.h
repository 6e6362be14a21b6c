/*
 * proxy.h — the idempotent proxy's room: its routes (/v1/proxy/{upstream}
 * and an upstream's own listener) and the sender of an approved request to
 * an HTTP upstream (proxy_send.c), which server.c registers.
 */
#ifndef ONCE_SERVER_PROXY_H
#define ONCE_SERVER_PROXY_H

#include "server/core/sender.h"
#include "server/front/router.h"

extern const route proxy_routes[];
/* The route of an upstream's own listener: every target goes to it. */
extern const route proxy_listen_route;
/* Sends an approved action of an HTTP upstream. */
extern const sender proxy_sender;

#endif
