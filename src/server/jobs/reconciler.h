/*
 * reconciler.h — settling unknown actions with provider lookups.
 */
#ifndef ONCE_SERVER_RECONCILER_H
#define ONCE_SERVER_RECONCILER_H

#include "common/looper.h"
#include "server/core/services.h"

/* Starts the reconciler, a looper_job, when an upstream has a lookup (*out
 * stays NULL otherwise). 0 or -1. Stopping: looper_job_quiesce (stops
 * claiming) before outbound_stop; looper_job_stop after it (settles what the
 * stopped calls reported: only real answers count); then looper_job_free. */
int reconciler_start(server *srv, looper_job **out);

#endif
