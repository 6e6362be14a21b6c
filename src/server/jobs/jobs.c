/*
 * jobs.c — starting a background job only where an upstream needs it (see
 * jobs.h): without approve rules or lookups there is no thread at all.
 */
#include "server/jobs/jobs.h"

int jobs_start(server *srv, jobs_wants_fn wants, const looper_job_ops *ops, looper_job **out)
{
    *out = NULL;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++)
        if (wants(&srv->cfg->upstreams[i]))
            return looper_job_start(ops, srv, out);
    return 0;
}
