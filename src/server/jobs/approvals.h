/*
 * approvals.h — sending what a human approved (docs/approvals.md): the
 * gateway's thread that takes approved actions from the store, sends each
 * stored request once, and records its outcome.
 */
#ifndef ONCE_SERVER_APPROVALS_H
#define ONCE_SERVER_APPROVALS_H

#include "server/core/services.h"

typedef struct approvals approvals;

/* Starts the sender when an upstream has approve rules (*out stays NULL
 * otherwise). 0 or -1. */
int approvals_start(server *srv, approvals **out);
/* A decision was made here: look for approved actions now rather than at
 * the next round. NULL is fine. Any thread. */
void approvals_kick(approvals *a);
/* Stops taking approved actions; call before outbound_stop. */
void approvals_quiesce(approvals *a);
/* Records what the stopped calls reported (sent or not: released or
 * unknown, never silently dropped) and joins; after outbound_stop. NULL is
 * fine. */
void approvals_stop(approvals *a);

#endif
