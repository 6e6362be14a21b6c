/*
 * reconciler.h — settling unknown actions with provider lookups.
 */
#ifndef ONCE_SERVER_RECONCILER_H
#define ONCE_SERVER_RECONCILER_H

#include "server/core/services.h"

typedef struct reconciler reconciler;

/* Starts the reconciler when an upstream has a lookup (*out stays NULL
 * otherwise). 0 or -1. */
int reconciler_start(server *srv, reconciler **out);
/* Stops claiming; call before outbound_stop. */
void reconciler_quiesce(reconciler *r);
/* Settles what the stopped calls reported (only real answers count) and
 * joins; after outbound_stop. NULL is fine. */
void reconciler_stop(reconciler *r);

#endif
