/*
 * ops.h — the operations room: /healthz, /readyz, /metrics and the
 * console's page and files.
 */
#ifndef ONCE_SERVER_OPS_H
#define ONCE_SERVER_OPS_H

#include "server/front/router.h"

extern const route ops_routes[];
extern const route console_routes[];

#endif
