/*
 * approvals.h — sending what a human approved (docs/approvals.md): the
 * gateway's thread that takes approved actions from the store, sends each
 * stored request once, and records its outcome.
 */
#ifndef ONCE_SERVER_APPROVALS_H
#define ONCE_SERVER_APPROVALS_H

#include "common/looper.h"
#include "server/core/services.h"

/* Starts the sender, a looper_job, when an upstream has approve rules (*out
 * stays NULL otherwise). 0 or -1. Stopping: looper_job_quiesce (stops taking
 * approved actions) before outbound_stop; looper_job_stop after it (records
 * what the stopped calls reported, sent or not: released or unknown, never
 * silently dropped); looper_job_free once no HTTP thread can kick it. */
int approvals_start(server *srv, looper_job **out);
/* A decision was made here: look for approved actions now rather than at
 * the next round. NULL is fine. Any thread. */
void approvals_kick(looper_job *approvals);

#endif
