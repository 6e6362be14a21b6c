/*
 * metrics.c — counters and fixed-bucket histograms.
 *
 * The counters every request touches (outcomes per scope, webhook results,
 * HTTP status classes) are relaxed atomics and a registered scope is found
 * without a lock: with four HTTP threads on two cores, one mutex taken twice
 * per replay was contended often enough to cost a futex call per request.
 * Histograms and the rarer counters stay behind the mutex. The registry is
 * small and bounded (MAX_SCOPES), so rendering walks plain arrays.
 */
#include "server/core/metrics.h"

#include "once/once.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SCOPES 256
#define OTHER_SCOPE "_other"

static const char *const outcome_names[MO_COUNT] = {"new", "replayed", "in_flight", "mismatch",
                                                    "released", "unknown", "held", "awaiting_approval",
                                                    "denied"};

static const double seconds_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,   0.5,   1,      2.5,   5,    10,   30,    60};
#define NSEC (sizeof seconds_buckets / sizeof seconds_buckets[0])
static const double batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
#define NBATCH (sizeof batch_buckets / sizeof batch_buckets[0])

typedef struct histogram {
    unsigned long long counts[NSEC + 1]; /* per bucket, last is +Inf */
    unsigned long long n;
    double sum;
} histogram;

/* Per scope (upstream or actions API) or per webhook source. */
typedef struct scope_stats {
    char name[65]; /* written once, before nscopes publishes the entry */
    _Atomic unsigned long long outcomes[MO_COUNT];
    histogram upstream;
    _Atomic unsigned long long webhooks[MW_COUNT];
    unsigned long long deliveries[MD_COUNT];
    unsigned long long reconciles[MR_COUNT];
    unsigned long long approvals[MA_COUNT];
    unsigned long long tokens_saved;
} scope_stats;

static const char *const reconcile_names[MR_COUNT] = {"found", "absent", "error", "held"};
static const char *const approval_names[MA_COUNT] = {"approved", "denied", "expired"};

static const char *const webhook_names[MW_COUNT] = {"accepted", "duplicate", "bad_signature", "no_event_id"};
static const char *const delivery_names[MD_COUNT] = {"delivered", "retried", "dead"};

#define MAX_MCP_SERIES 512

/* A counter of a family with up to three labels of bounded values: MCP
 * calls (server, tool, outcome), an agent's actions (agent, outcome) and
 * refusals (agent, code). */
typedef enum series_family { SF_MCP, SF_AGENT_ACTIONS, SF_REFUSALS, SF_COUNT } series_family;

/* How a family is written on the page: its name, its help, and the names
 * of its labels (tool NULL: the agent families have none). */
static const struct series_kind {
    const char *name, *help, *server, *tool, *outcome;
} series_names[SF_COUNT] = {
    [SF_MCP] = {"once_mcp_calls_total", "MCP tool calls by server, tool and outcome.", "server", "tool", "outcome"},
    [SF_AGENT_ACTIONS] = {"once_agent_actions_total", "Answers about actions, by the agent that asked and outcome.",
                          "agent", NULL, "outcome"},
    [SF_REFUSALS] = {"once_refusals_total", "Problem answers, by the agent that asked and code.", "agent", NULL,
                     "code"},
};

typedef struct mcp_series {
    series_family family;
    char server[65];     /* the MCP server, or the agent */
    char tool[129];      /* the tool; "" for the agent families */
    const char *outcome; /* a string literal of the gateway's: an outcome or a problem code */
    unsigned long long n;
} mcp_series;

struct metrics {
    pthread_mutex_t mu;
    mcp_series *mcp; /* under mu */
    size_t nmcp;
    scope_stats *scopes;
    _Atomic size_t nscopes; /* entries [0, nscopes) are complete; added under mu */
    histogram commit;
    histogram checkpoint[2]; /* [0] the background checkpointer's, [1] the writer's */
    histogram batch;
    histogram webhook_ack;
    _Atomic unsigned long long http[6]; /* 1xx..5xx by class, [0] unused */
    unsigned long long lease_expired;
    unsigned long long auto_held;
    _Atomic unsigned long long reload_failures;
    _Atomic unsigned long long jwt[JWT_NRESULTS]; /* bearer JWT checks by outcome ([auth]) */
    long long approval_oldest_ms; /* created_at of the oldest undecided approval; 0 none */
};

int metrics_init(metrics **out)
{
    metrics *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->scopes = calloc(MAX_SCOPES + 1, sizeof *m->scopes);
    if (!m->scopes) {
        free(m);
        return -1;
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return 0;
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->mcp);
    free(m->scopes);
    free(m);
}

/* Caller holds m->mu. */
static scope_stats *scope_find(metrics *m, const char *scope)
{
    size_t n = atomic_load_explicit(&m->nscopes, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->scopes[i].name, scope) == 0)
            return &m->scopes[i];
    if (n < MAX_SCOPES) {
        scope_stats *s = &m->scopes[n];
        snprintf(s->name, sizeof s->name, "%s", scope);
        atomic_store_explicit(&m->nscopes, n + 1, memory_order_release);
        return s;
    }
    scope_stats *other = &m->scopes[MAX_SCOPES];
    if (!other->name[0])
        snprintf(other->name, sizeof other->name, "%s", OTHER_SCOPE);
    return other;
}

/* Without the mutex when the scope is registered (every request after a
 * scope's first); otherwise registers it under the mutex. */
static scope_stats *scope_get(metrics *m, const char *scope)
{
    size_t n = atomic_load_explicit(&m->nscopes, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->scopes[i].name, scope) == 0)
            return &m->scopes[i];
    pthread_mutex_lock(&m->mu);
    scope_stats *s = scope_find(m, scope);
    pthread_mutex_unlock(&m->mu);
    return s;
}

static void count(_Atomic unsigned long long *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static unsigned long long value(_Atomic unsigned long long *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void observe(histogram *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i]++;
    h->n++;
    h->sum += v;
}

void metrics_action(metrics *m, const char *scope, metric_outcome o)
{
    if (!m || o >= MO_COUNT)
        return;
    count(&scope_get(m, scope ? scope : OTHER_SCOPE)->outcomes[o]);
}

/* Caller holds m->mu. The series, or NULL. */
static mcp_series *mcp_find(metrics *m, series_family f, const char *server, const char *tool, const char *outcome)
{
    for (size_t i = 0; i < m->nmcp; i++) {
        mcp_series *s = &m->mcp[i];
        if (s->family == f && strcmp(s->outcome, outcome) == 0 && strcmp(s->tool, tool) == 0 &&
            strcmp(s->server, server) == 0)
            return s;
    }
    return NULL;
}

/* One more of a series, made on first use. */
static void series_count(metrics *m, series_family f, const char *server, const char *tool, const char *outcome)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    mcp_series *s = mcp_find(m, f, server, tool, outcome);
    /* The last series are kept for "_other", so it always has room. */
    if (!s && m->nmcp >= MAX_MCP_SERIES - 64) {
        tool = f == SF_MCP ? OTHER_SCOPE : "";
        server = f == SF_MCP ? server : OTHER_SCOPE;
        s = mcp_find(m, f, server, tool, outcome);
    }
    if (!s && m->nmcp < MAX_MCP_SERIES && (m->mcp || (m->mcp = calloc(MAX_MCP_SERIES, sizeof *m->mcp)))) {
        s = &m->mcp[m->nmcp++];
        s->family = f;
        snprintf(s->server, sizeof s->server, "%s", server);
        snprintf(s->tool, sizeof s->tool, "%s", tool);
        s->outcome = outcome;
    }
    if (s)
        s->n++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_mcp_call(metrics *m, const char *server, const char *tool, const char *outcome)
{
    series_count(m, SF_MCP, server, tool, outcome);
}

void metrics_agent_action(metrics *m, const char *agent, const char *outcome)
{
    series_count(m, SF_AGENT_ACTIONS, agent, "", outcome);
}

void metrics_refusal(metrics *m, const char *agent, const char *code)
{
    series_count(m, SF_REFUSALS, agent, "", code);
}

void metrics_upstream(metrics *m, const char *scope, double seconds)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    observe(&scope_find(m, scope)->upstream, seconds_buckets, NSEC, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_jwt(metrics *m, jwt_result r)
{
    if (m && r < JWT_NRESULTS)
        m->jwt[r]++;
}

void metrics_reload_failure(metrics *m)
{
    if (m)
        m->reload_failures++;
}

void metrics_http(metrics *m, unsigned status)
{
    if (!m || status < 100 || status > 599)
        return;
    count(&m->http[status / 100]);
}

void metrics_commit(void *arg, size_t batch, double seconds)
{
    metrics *m = arg;
    pthread_mutex_lock(&m->mu);
    observe(&m->commit, seconds_buckets, NSEC, seconds);
    observe(&m->batch, batch_buckets, NBATCH, (double)batch);
    pthread_mutex_unlock(&m->mu);
}

void metrics_checkpoint(void *arg, int by_writer, double seconds, int frames, int copied)
{
    metrics *m = arg;
    (void)frames;
    (void)copied;
    pthread_mutex_lock(&m->mu);
    observe(&m->checkpoint[by_writer ? 1 : 0], seconds_buckets, NSEC, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_webhook(metrics *m, const char *source, metric_webhook w)
{
    if (!m || w >= MW_COUNT)
        return;
    count(&scope_get(m, source)->webhooks[w]);
}

/* Adds n to counter i (of count) of the array at offset field of a
 * scope's stats: the rarer per-scope counters, kept under the mutex. */
static void scope_add(metrics *m, const char *scope, size_t field, size_t i, size_t count, unsigned long long n)
{
    if (!m || i >= count || n == 0)
        return;
    pthread_mutex_lock(&m->mu);
    unsigned long long *counters = (unsigned long long *)((char *)scope_find(m, scope) + field);
    counters[i] += n;
    pthread_mutex_unlock(&m->mu);
}

void metrics_delivery(metrics *m, const char *source, metric_delivery d)
{
    scope_add(m, source, offsetof(scope_stats, deliveries), d, MD_COUNT, 1);
}

void metrics_reconcile(metrics *m, const char *scope, metric_reconcile r)
{
    scope_add(m, scope, offsetof(scope_stats, reconciles), r, MR_COUNT, 1);
}

void metrics_approval(metrics *m, const char *scope, metric_approval a, size_t n)
{
    scope_add(m, scope, offsetof(scope_stats, approvals), a, MA_COUNT, n);
}

void metrics_approval_oldest(metrics *m, long long created_at_ms)
{
    pthread_mutex_lock(&m->mu);
    m->approval_oldest_ms = created_at_ms;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens_saved(metrics *m, const char *scope, long long tokens)
{
    if (tokens > 0)
        scope_add(m, scope, offsetof(scope_stats, tokens_saved), 0, 1, (unsigned long long)tokens);
}

void metrics_webhook_ack(metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->webhook_ack, seconds_buckets, NSEC, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_lease(metrics *m, size_t expired, size_t held)
{
    pthread_mutex_lock(&m->mu);
    m->lease_expired += expired;
    m->auto_held += held;
    pthread_mutex_unlock(&m->mu);
}

/* The page is a few KiB per source and upstream; 1 GiB is "never". */
#define METRICS_PAGE_MAX ((size_t)1 << 30)
#define out(b, ...) buf_printf((b), METRICS_PAGE_MAX, __VA_ARGS__)

static int render_hist(buf *b, const char *name, const char *labels, const histogram *h, const double *bounds,
                       size_t nb)
{
    unsigned long long cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (size_t i = 0; i < nb; i++) {
        cum += h->counts[i];
        if (out(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i], cum) < 0)
            return -1;
    }
    cum += h->counts[nb];
    if (out(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, cum) < 0)
        return -1;
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    if (out(b, "%s_sum%s%s%s %.9g\n", name, open, labels, close, h->sum) < 0 ||
        out(b, "%s_count%s%s%s %llu\n", name, open, labels, close, h->n) < 0)
        return -1;
    return 0;
}

/* One scope's lines of a family of counters by result (label="scope",
 * result="name"), none while all are zero: a webhook source has no
 * lookups, an upstream no deliveries. */
static int render_results(buf *b, const char *family, const char *label, const scope_stats *s,
                          const char *const *names, const unsigned long long *counts, size_t n)
{
    unsigned long long any = 0;
    for (size_t i = 0; i < n; i++)
        any |= counts[i];
    int rc = 0;
    for (size_t i = 0; any && i < n; i++)
        rc |= out(b, "%s{%s=\"%s\",result=\"%s\"} %llu\n", family, label, s->name, names[i], counts[i]);
    return rc;
}

/* One family of the series table, its header and each of its series:
 * the three families share the table, so they are written by one loop.
 * Caller holds m->mu. */
static int render_series(buf *b, const metrics *m, series_family f)
{
    const struct series_kind *k = &series_names[f];
    int rc = out(b, "# HELP %s %s\n# TYPE %s counter\n", k->name, k->help, k->name);
    for (size_t i = 0; i < m->nmcp; i++) {
        const mcp_series *s = &m->mcp[i];
        if (s->family != f)
            continue;
        if (k->tool)
            rc |= out(b, "%s{%s=\"%s\",%s=\"%s\",%s=\"%s\"} %llu\n", k->name, k->server, s->server, k->tool, s->tool,
                      k->outcome, s->outcome, s->n);
        else
            rc |= out(b, "%s{%s=\"%s\",%s=\"%s\"} %llu\n", k->name, k->server, s->server, k->outcome, s->outcome,
                      s->n);
    }
    return rc;
}

int metrics_render(metrics *m, buf *b)
{
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    size_t nreg = atomic_load_explicit(&m->nscopes, memory_order_relaxed);
    size_t n = nreg + (m->scopes[MAX_SCOPES].name[0] ? 1 : 0);
    rc |= out(b, "# HELP once_actions_total Ledger answers by scope and outcome.\n"
                 "# TYPE once_actions_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        for (int o = 0; o < MO_COUNT; o++)
            rc |= out(b, "once_actions_total{scope=\"%s\",outcome=\"%s\"} %llu\n", s->name, outcome_names[o],
                      value(&s->outcomes[o]));
    }
    rc |= out(b, "# HELP once_upstream_seconds Time of upstream calls.\n# TYPE once_upstream_seconds histogram\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        if (!s->upstream.n)
            continue;
        char labels[96];
        snprintf(labels, sizeof labels, "scope=\"%s\"", s->name);
        rc |= render_hist(b, "once_upstream_seconds", labels, &s->upstream, seconds_buckets, NSEC);
    }
    rc |= out(b, "# HELP once_webhooks_total Webhook requests by source and result.\n"
                 "# TYPE once_webhooks_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        unsigned long long counts[MW_COUNT];
        for (int w = 0; w < MW_COUNT; w++)
            counts[w] = value(&s->webhooks[w]);
        rc |= render_results(b, "once_webhooks_total", "source", s, webhook_names, counts, MW_COUNT);
    }
    rc |= out(b, "# HELP once_deliveries_total Push deliveries to the agent by source and result.\n"
                 "# TYPE once_deliveries_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        rc |= render_results(b, "once_deliveries_total", "source", s, delivery_names, s->deliveries, MD_COUNT);
    }
    rc |= out(b, "# HELP once_reconcile_total Provider lookups of unknown actions by scope and result.\n"
                 "# TYPE once_reconcile_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        rc |= render_results(b, "once_reconcile_total", "scope", s, reconcile_names, s->reconciles, MR_COUNT);
    }
    rc |= out(b, "# HELP once_approvals_total Decisions on approvals by scope (approved: taken to be sent).\n"
                 "# TYPE once_approvals_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        unsigned long long any = 0;
        for (int a = 0; a < MA_COUNT; a++)
            any |= s->approvals[a];
        for (int a = 0; any && a < MA_COUNT; a++)
            rc |= out(b, "once_approvals_total{scope=\"%s\",decision=\"%s\"} %llu\n", s->name, approval_names[a],
                      s->approvals[a]);
    }
    long long oldest = m->approval_oldest_ms, age = oldest > 0 ? (long long)once_now_ms() - oldest : 0;
    rc |= out(b, "# HELP once_approval_oldest_waiting_seconds Age of the oldest action waiting for a decision.\n"
                 "# TYPE once_approval_oldest_waiting_seconds gauge\nonce_approval_oldest_waiting_seconds %.3f\n",
              age > 0 ? (double)age / 1e3 : 0.0);
    rc |= out(b, "# HELP once_llm_tokens_saved_total Tokens of LLM answers replayed instead of generated again.\n"
                 "# TYPE once_llm_tokens_saved_total counter\n");
    for (size_t i = 0; i < n; i++) {
        scope_stats *s = i < nreg ? &m->scopes[i] : &m->scopes[MAX_SCOPES];
        if (s->tokens_saved)
            rc |= out(b, "once_llm_tokens_saved_total{scope=\"%s\"} %llu\n", s->name, s->tokens_saved);
    }
    for (int f = SF_MCP; f < SF_COUNT; f++)
        rc |= render_series(b, m, (series_family)f);
    rc |= out(b, "# HELP once_webhook_ack_seconds From a webhook's arrival to its durable acknowledgement.\n"
                 "# TYPE once_webhook_ack_seconds histogram\n");
    rc |= render_hist(b, "once_webhook_ack_seconds", "", &m->webhook_ack, seconds_buckets, NSEC);
    rc |= out(b, "# HELP once_store_commit_seconds Durable group commits, BEGIN to synced COMMIT.\n"
                 "# TYPE once_store_commit_seconds histogram\n");
    rc |= render_hist(b, "once_store_commit_seconds", "", &m->commit, seconds_buckets, NSEC);
    rc |= out(b, "# HELP once_store_checkpoint_seconds Checkpoints of the SQLite WAL: by the writer (commits "
                 "waited) or in the background.\n# TYPE once_store_checkpoint_seconds histogram\n");
    rc |= render_hist(b, "once_store_checkpoint_seconds", "by=\"background\"", &m->checkpoint[0], seconds_buckets,
                      NSEC);
    rc |= render_hist(b, "once_store_checkpoint_seconds", "by=\"writer\"", &m->checkpoint[1], seconds_buckets, NSEC);
    rc |= out(b, "# HELP once_group_commit_batch_size Operations per durable commit.\n"
                 "# TYPE once_group_commit_batch_size histogram\n");
    rc |= render_hist(b, "once_group_commit_batch_size", "", &m->batch, batch_buckets, NBATCH);
    rc |= out(b, "# HELP once_http_requests_total HTTP answers by status class.\n"
                 "# TYPE once_http_requests_total counter\n");
    for (int c = 1; c <= 5; c++)
        rc |= out(b, "once_http_requests_total{code=\"%dxx\"} %llu\n", c, value(&m->http[c]));
    rc |= out(b, "# HELP once_jwt_verifications_total Bearer JWTs checked ([auth]), by outcome.\n"
                 "# TYPE once_jwt_verifications_total counter\n");
    for (int r = 0; r < JWT_NRESULTS; r++)
        rc |= out(b, "once_jwt_verifications_total{outcome=\"%s\"} %llu\n", jwt_result_name((jwt_result)r),
                  (unsigned long long)m->jwt[r]);
    rc |= out(b, "# HELP once_config_reload_failures_total Reloads (SIGHUP) that changed nothing because of an "
                 "error.\n# TYPE once_config_reload_failures_total counter\nonce_config_reload_failures_total %llu\n",
              (unsigned long long)m->reload_failures);
    rc |= out(b, "# HELP once_lease_expired_total Pending actions whose lease ran out (now unknown).\n"
                 "# TYPE once_lease_expired_total counter\nonce_lease_expired_total %llu\n",
              m->lease_expired);
    rc |= out(b, "# HELP once_held_total Unknown actions held for a human.\n"
                 "# TYPE once_held_total counter\nonce_held_total %llu\n",
              m->auto_held);
    pthread_mutex_unlock(&m->mu);
    return rc ? -1 : 0;
}
