/*
 * jobs.h — what the room's background jobs share. The approvals sender and
 * the reconciler are each a looper_job (common/looper.h) over the server,
 * and each runs only when some upstream needs it (approve rules, a lookup):
 * that decision is made here, once.
 */
#ifndef ONCE_SERVER_JOBS_H
#define ONCE_SERVER_JOBS_H

#include "common/looper.h"
#include "server/core/services.h"

/* Whether an upstream needs a job. */
typedef int (*jobs_wants_fn)(const upstream_cfg *up);

/* Starts the job with ops, its arg srv, when wants holds for some
 * upstream; *out stays NULL otherwise (looper_job_* take NULL). 0 or -1. */
int jobs_start(server *srv, jobs_wants_fn wants, const looper_job_ops *ops, looper_job **out);

#endif
