/*
 * verdict.h — how a call ended, as the ledger records it: completed with
 * the answer, released (nothing was done: the key may be tried again), or
 * unknown (it may have acted: never resent, reconciled), and the one
 * switch from a verdict to the ledger's complete / release / mark-unknown.
 */
#ifndef ONCE_SERVER_CORE_VERDICT_H
#define ONCE_SERVER_CORE_VERDICT_H

#include "once/once.h"
#include "server/core/metrics.h"

typedef enum verdict_kind { VERDICT_COMPLETED, VERDICT_RELEASED, VERDICT_UNKNOWN } verdict_kind;

typedef struct verdict {
    verdict_kind kind;
    once_response resp; /* COMPLETED: the answer to store (borrowed) */
    char why[300];      /* RELEASED, UNKNOWN: the reason kept with the action */
} verdict;

/* Records v for (scope, key) under the attempt's token, and counts a
 * release or an unknown in m (NULL: the caller counts). Without cb,
 * synchronously: the store's status (0, or a negative ONCE_E* with
 * once_errdetail). With cb, asynchronously (once.h: v, its strings and
 * resp must stay valid until cb runs): 0 queued, or the negative status
 * of a refusal (cb will not run). The one switch from a verdict to the
 * ledger, for the pipeline (pipeline/rcall.c) and the approvals thread. */
int verdict_record(once_store *st, metrics *m, const char *scope, const char *key, const char *token,
                   const verdict *v, once_cb cb, void *ctx);

/* "completed", "released" or "unknown". */
const char *verdict_name(verdict_kind k);

#endif
