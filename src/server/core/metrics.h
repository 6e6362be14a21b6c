/*
 * metrics.h — the gateway's counters and histograms, rendered in the
 * Prometheus text format for GET /metrics.
 */
#ifndef ONCE_SERVER_METRICS_H
#define ONCE_SERVER_METRICS_H

#include <stddef.h>

#include "common/buf.h"
#include "server/core/jwt.h"

typedef enum metric_outcome {
    MO_NEW,
    MO_REPLAYED,
    MO_IN_FLIGHT,
    MO_MISMATCH,
    MO_RELEASED,
    MO_UNKNOWN,
    MO_HELD,
    MO_AWAITING,
    MO_DENIED,
    MO_COUNT
} metric_outcome;

typedef enum metric_webhook { MW_ACCEPTED, MW_DUPLICATE, MW_BAD_SIGNATURE, MW_NO_EVENT_ID, MW_COUNT } metric_webhook;
typedef enum metric_delivery { MD_DELIVERED, MD_RETRIED, MD_DEAD, MD_COUNT } metric_delivery;
typedef enum metric_reconcile { MR_FOUND, MR_ABSENT, MR_ERROR, MR_HELD, MR_COUNT } metric_reconcile;
/* A decision on an approval: approved counts when a gateway takes the
 * approved action to send it (whoever approved it, API or CLI); denied
 * when this gateway's API denies; expired when its loop expires one. */
typedef enum metric_approval { MA_APPROVED, MA_DENIED, MA_EXPIRED, MA_COUNT } metric_approval;

typedef struct metrics metrics;

int metrics_init(metrics **out);
void metrics_free(metrics *m);

/* Scopes are labels; past a fixed number of distinct scopes (agents choose
 * them in the actions API) further ones are counted under "_other" so a
 * client cannot grow the registry without bound. */
void metrics_action(metrics *m, const char *scope, metric_outcome o);
void metrics_upstream(metrics *m, const char *scope, double seconds);
void metrics_http(metrics *m, unsigned status);
/* Fits once_commit_hook: counts a group commit. */
void metrics_commit(void *m, size_t batch, double seconds);
/* Fits once_checkpoint_hook: times a checkpoint of the SQLite WAL. */
void metrics_checkpoint(void *m, int by_writer, double seconds, int frames, int copied);
void metrics_lease(metrics *m, size_t expired, size_t held);
void metrics_webhook(metrics *m, const char *source, metric_webhook w);
void metrics_delivery(metrics *m, const char *source, metric_delivery d);
void metrics_reconcile(metrics *m, const char *scope, metric_reconcile r);
/* A replayed LLM answer: the tokens a second generation would have cost. */
void metrics_tokens_saved(metrics *m, const char *scope, long long tokens);
void metrics_approval(metrics *m, const char *scope, metric_approval a, size_t n);
/* When the oldest undecided approval was requested (0: none waits), as the
 * background loop last read it from the store. */
void metrics_approval_oldest(metrics *m, long long created_at_ms);
/* Time from a webhook's arrival to its durable acknowledgement. */
void metrics_webhook_ack(metrics *m, double seconds);

/* An MCP tools/call answered with outcome (a fixed string: completed,
 * replayed, readonly, ...). Past a fixed number of (server, tool, outcome)
 * series, tools count as "_other": agents name the tools. */
void metrics_mcp_call(metrics *m, const char *server, const char *tool, const char *outcome);

/* An answer about an action (outcome: replayed, completed, ... as the
 * request log says it) to a request of agent (a token's name, from the
 * config: bounded). */
void metrics_agent_action(metrics *m, const char *agent, const char *outcome);
/* A problem answer (code: a fixed string of the gateway's) to agent. */
void metrics_refusal(metrics *m, const char *agent, const char *code);

/* A reload (SIGHUP) that changed nothing because of an error. */
void metrics_reload_failure(metrics *m);
/* One bearer JWT checked ([auth]): once_jwt_verifications_total{outcome}. */
void metrics_jwt(metrics *m, jwt_result r);

/* Appends the whole registry to out. 0 or -1 (out of memory). */
int metrics_render(metrics *m, buf *out);

#endif
