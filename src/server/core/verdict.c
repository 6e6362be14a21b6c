/*
 * verdict.c — a verdict recorded in the ledger (see verdict.h).
 */
#include "server/core/verdict.h"

int verdict_record(once_store *st, metrics *m, const char *scope, const char *key, const char *token,
                   const verdict *v, once_cb cb, void *ctx)
{
    switch (v->kind) {
    case VERDICT_COMPLETED:
        return cb ? once_complete_async(st, scope, key, token, &v->resp, NULL, cb, ctx)
                  : once_complete(st, scope, key, token, &v->resp, NULL);
    case VERDICT_RELEASED:
        metrics_action(m, scope, MO_RELEASED);
        return cb ? once_release_async(st, scope, key, token, v->why, cb, ctx)
                  : once_release(st, scope, key, token, v->why);
    case VERDICT_UNKNOWN: break;
    }
    /* Not knowing is unknown: never a resend. */
    metrics_action(m, scope, MO_UNKNOWN);
    return cb ? once_mark_unknown_async(st, scope, key, token, v->why, cb, ctx)
              : once_mark_unknown(st, scope, key, token, v->why);
}

const char *verdict_name(verdict_kind k)
{
    switch (k) {
    case VERDICT_COMPLETED: return "completed";
    case VERDICT_RELEASED: return "released";
    case VERDICT_UNKNOWN: break;
    }
    return "unknown";
}
