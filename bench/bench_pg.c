/*
 * bench_pg — durable reserve + complete cycles per second on PostgreSQL.
 *
 *   bench_pg --url postgres://... [--threads 1,8,64] [--seconds 5] [--body 100] [--only group|naive]
 *
 * For each thread count, two runs, each in a schema of its own (dropped
 * afterwards) of the database the URL names:
 *
 *  group   libonce: once_store_open("postgres://...?once_schema=..."); N
 *          threads each loop once_reserve (new key, 30 s lease, fingerprint)
 *          + once_complete (status 200, short headers, a body, a provider
 *          id). The store's writer connections (4 per process) commit what is
 *          queued as one transaction: group commit. The commit hook counts
 *          commits and operations.
 *  naive   libpq directly, one connection per thread, a table like once's
 *          (same columns, unique (scope, key), same indexes), and each
 *          operation its own transaction (autocommit INSERT ... ON CONFLICT
 *          DO NOTHING, then autocommit UPDATE fenced by the token): one
 *          commit per operation. PostgreSQL's own WAL flush still merges
 *          commits that arrive together, so this baseline is stronger than
 *          SQLite's one-fsync-per-commit.
 *
 * Prints a table and the goal line at 64 threads (or the largest count
 * given). Exit 0 when the runs completed (goals met or not), 1 on a failed
 * call, 2 on a usage error. See bench/README.md.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "once/once.h"

#define MAX_COUNTS 16
#define MAX_THREADS 1024
#define LAT_CAP 200000
#define SCOPE "bench"
#define FINGERPRINT "5f0c2e8d6a1b4c3e9f7a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e"
#define HEADERS "[[\"content-type\",\"application/json\"]]"
#define LEASE_MS 30000
#define RETENTION_MS (24LL * 3600 * 1000)

static struct {
    const char *url;
    int threads[MAX_COUNTS];
    int nthreads;
    double seconds;
    size_t body_len;
    const char *only;
} opt = {.threads = {1, 8, 64}, .nthreads = 3, .seconds = 5, .body_len = 100};

static char *g_body;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- a run: N threads until the deadline ------------------------------------ */

typedef struct run {
    double deadline;
    atomic_int failed;
    char err[512];
    pthread_mutex_t mu;
    once_store *store; /* group */
    char schema[64];   /* naive */
    char run_id[32];
} run;

typedef struct worker {
    run *r;
    int id;
    pthread_t th;
    size_t cycles;
    double *lat;
    size_t nlat;
    PGconn *conn;
} worker;

static void run_fail(run *r, const char *what, const char *a, const char *b)
{
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->failed))
        snprintf(r->err, sizeof r->err, "%s %s: %s", what, a, b);
    atomic_store(&r->failed, 1);
    pthread_mutex_unlock(&r->mu);
}

static void lat_add(worker *w, double s)
{
    if (w->nlat < LAT_CAP)
        w->lat[w->nlat++] = s;
}

typedef struct commits {
    atomic_ulong n;
    atomic_ulong ops;
} commits;

static void commit_hook(void *ctx, size_t batch, double seconds)
{
    (void)seconds;
    commits *c = ctx;
    atomic_fetch_add(&c->n, 1);
    atomic_fetch_add(&c->ops, batch);
}

static void *group_worker(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    char key[96], provider[64];
    while (!atomic_load(&r->failed) && now_s() < r->deadline) {
        snprintf(key, sizeof key, "%s-%d-%zu", r->run_id, w->id, w->cycles);
        double t0 = now_s();
        once_reserve_req req = {.scope = SCOPE, .key = key, .fingerprint = FINGERPRINT, .lease_ms = LEASE_MS,
                                .retention_ms = RETENTION_MS};
        once_reservation res;
        memset(&res, 0, sizeof res);
        int rc = once_reserve(r->store, &req, &res);
        if (rc != ONCE_OK || res.status != ONCE_RESERVED) {
            run_fail(r, "once_reserve", key, rc != ONCE_OK ? once_errdetail() : "not reserved");
            if (rc == ONCE_OK)
                once_reservation_free(&res);
            break;
        }
        char token[ONCE_TOKEN_LEN + 1];
        memcpy(token, res.token, sizeof token);
        token[ONCE_TOKEN_LEN] = '\0';
        once_reservation_free(&res);
        snprintf(provider, sizeof provider, "prov_%d_%zu", w->id, w->cycles);
        once_response resp = {.status = 200, .headers = HEADERS, .headers_len = sizeof HEADERS - 1,
                              .body = (uint8_t *)g_body, .body_len = opt.body_len};
        rc = once_complete(r->store, SCOPE, key, token, &resp, provider);
        if (rc != ONCE_OK) {
            run_fail(r, "once_complete", key, once_errdetail());
            break;
        }
        lat_add(w, now_s() - t0);
        w->cycles++;
    }
    return NULL;
}

/* ---- the naive side: libpq, one transaction per operation ------------------ */

/* Mirrors migration 1 of src/store/pg_schema.c (the actions table and its
 * indexes), so that each commit touches the same pages. Keep it in step. */
static const char NAIVE_SCHEMA[] =
    "CREATE TABLE actions ("
    "  id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','completed','released','unknown','held')),"
    "  attempt BIGINT NOT NULL, token TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,"
    "  lease_expires_at BIGINT NOT NULL, expires_at BIGINT NOT NULL DEFAULT 0, retention_ms BIGINT NOT NULL,"
    "  fingerprint TEXT, request BYTEA, has_response BOOLEAN NOT NULL DEFAULT false, resp_status INTEGER,"
    "  resp_headers TEXT, resp_body BYTEA, provider_id TEXT, error TEXT, note TEXT, UNIQUE (scope, key));"
    "CREATE INDEX actions_pending_lease ON actions (lease_expires_at) WHERE state = 'pending';"
    "CREATE INDEX actions_unknown ON actions (scope) WHERE state = 'unknown';"
    "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released');"
    "CREATE INDEX actions_state ON actions (state, id);";

static const char NAIVE_INSERT[] =
    "INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    " expires_at, retention_ms, fingerprint) VALUES ($1, $2, 'pending', 1, $3, $5, $5, $5::bigint + $6::bigint, 0, $7, $4)"
    " ON CONFLICT (scope, key) DO NOTHING";
static const char NAIVE_UPDATE[] =
    "UPDATE actions SET state = 'completed', has_response = true, resp_status = $4, resp_headers = $5,"
    " resp_body = $6, provider_id = $7, updated_at = $8, expires_at = $8::bigint + retention_ms"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'pending'";

static PGconn *pg_open(const char *schema, char *err, size_t errlen)
{
    PGconn *c = PQconnectdb(opt.url);
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(err, errlen, "connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    if (schema) {
        char sql[160];
        snprintf(sql, sizeof sql, "SET search_path TO \"%s\"", schema);
        PGresult *res = PQexec(c, sql);
        int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            snprintf(err, errlen, "%s", PQresultErrorMessage(res));
        PQclear(res);
        if (!ok) {
            PQfinish(c);
            return NULL;
        }
    }
    return c;
}

static int pg_exec(const char *sql, char *err, size_t errlen)
{
    PGconn *c = pg_open(NULL, err, errlen);
    if (!c)
        return -1;
    PQclear(PQexec(c, "SET client_min_messages TO warning"));
    PGresult *res = PQexec(c, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        snprintf(err, errlen, "%s", PQresultErrorMessage(res));
    PQclear(res);
    PQfinish(c);
    return ok ? 0 : -1;
}

static void *naive_worker(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    char key[96], provider[64], token[40], now[24], lease[24], ret[24], status[8];
    snprintf(lease, sizeof lease, "%d", LEASE_MS);
    snprintf(ret, sizeof ret, "%lld", (long long)RETENTION_MS);
    snprintf(status, sizeof status, "200");
    while (!atomic_load(&r->failed) && now_s() < r->deadline) {
        snprintf(key, sizeof key, "%s-%d-%zu", r->run_id, w->id, w->cycles);
        snprintf(token, sizeof token, "tok%08x%08x", (unsigned)w->id, (unsigned)w->cycles);
        snprintf(provider, sizeof provider, "prov_%d_%zu", w->id, w->cycles);
        double t0 = now_s();
        snprintf(now, sizeof now, "%lld", (long long)wall_ms());
        const char *iv[7] = {SCOPE, key, token, FINGERPRINT, now, lease, ret};
        PGresult *res = PQexecPrepared(w->conn, "ins", 7, iv, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK || strcmp(PQcmdTuples(res), "1") != 0) {
            run_fail(r, "naive insert", key, PQresultErrorMessage(res));
            PQclear(res);
            break;
        }
        PQclear(res);
        snprintf(now, sizeof now, "%lld", (long long)wall_ms());
        const char *uv[8] = {SCOPE, key, token, status, HEADERS, g_body, provider, now};
        int ul[8] = {0, 0, 0, 0, 0, (int)opt.body_len, 0, 0};
        int uf[8] = {0, 0, 0, 0, 0, 1, 0, 0};
        res = PQexecPrepared(w->conn, "upd", 8, uv, ul, uf, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK || strcmp(PQcmdTuples(res), "1") != 0) {
            run_fail(r, "naive update", key, PQresultErrorMessage(res));
            PQclear(res);
            break;
        }
        PQclear(res);
        lat_add(w, now_s() - t0);
        w->cycles++;
    }
    return NULL;
}

/* ---- running and reporting ----------------------------------------------------- */

typedef struct result {
    int ok;
    double rate, p50, p99, commits_s, batch;
    size_t cycles;
} result;

static int run_side(int group, int nthreads, result *out)
{
    memset(out, 0, sizeof *out);
    run r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    snprintf(r.run_id, sizeof r.run_id, "r%ld-%d", (long)getpid(), nthreads);
    snprintf(r.schema, sizeof r.schema, "bench_%s_%ld_%d", group ? "group" : "naive", (long)getpid(), nthreads);
    char err[512] = "";
    char sql[256];
    commits cm;
    atomic_init(&cm.n, 0);
    atomic_init(&cm.ops, 0);
    worker *w = calloc((size_t)nthreads, sizeof *w);
    int rc = -1, started = 0;
    if (!w)
        goto done;
    if (group) {
        char url[1024];
        snprintf(url, sizeof url, "%s%sonce_schema=%s", opt.url, strchr(opt.url, '?') ? "&" : "?", r.schema);
        if (once_store_open(url, &r.store) != ONCE_OK) {
            snprintf(err, sizeof err, "once_store_open: %s", once_errdetail());
            r.store = NULL;
            goto done;
        }
        once_store_set_commit_hook(r.store, commit_hook, &cm);
    } else {
        snprintf(sql, sizeof sql, "CREATE SCHEMA \"%s\"", r.schema);
        if (pg_exec(sql, err, sizeof err) < 0)
            goto done;
        PGconn *c = pg_open(r.schema, err, sizeof err);
        if (!c)
            goto done;
        PGresult *res = PQexec(c, NAIVE_SCHEMA);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            snprintf(err, sizeof err, "%s", PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(c);
        if (err[0])
            goto done;
    }
    for (int i = 0; i < nthreads; i++) {
        w[i].r = &r;
        w[i].id = i;
        w[i].lat = malloc(LAT_CAP * sizeof(double));
        if (!w[i].lat) {
            snprintf(err, sizeof err, "out of memory");
            goto done;
        }
        if (!group) {
            if (!(w[i].conn = pg_open(r.schema, err, sizeof err)))
                goto done;
            PGresult *a = PQprepare(w[i].conn, "ins", NAIVE_INSERT, 0, NULL);
            PGresult *b = PQprepare(w[i].conn, "upd", NAIVE_UPDATE, 0, NULL);
            int ok = PQresultStatus(a) == PGRES_COMMAND_OK && PQresultStatus(b) == PGRES_COMMAND_OK;
            if (!ok)
                snprintf(err, sizeof err, "prepare: %s%s", PQresultErrorMessage(a), PQresultErrorMessage(b));
            PQclear(a);
            PQclear(b);
            if (!ok)
                goto done;
        }
    }
    double t0 = now_s();
    r.deadline = t0 + opt.seconds;
    for (; started < nthreads; started++) {
        if (pthread_create(&w[started].th, NULL, group ? group_worker : naive_worker, &w[started]) != 0) {
            snprintf(err, sizeof err, "pthread_create failed");
            atomic_store(&r.failed, 1);
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(w[i].th, NULL);
    double elapsed = now_s() - t0;
    if (atomic_load(&r.failed)) {
        if (!err[0])
            snprintf(err, sizeof err, "%s", r.err);
        goto done;
    }
    size_t total = 0, nlat = 0;
    for (int i = 0; i < nthreads; i++) {
        total += w[i].cycles;
        nlat += w[i].nlat;
    }
    double *all = malloc((nlat ? nlat : 1) * sizeof *all);
    if (!all) {
        snprintf(err, sizeof err, "out of memory");
        goto done;
    }
    size_t k = 0;
    for (int i = 0; i < nthreads; i++)
        for (size_t j = 0; j < w[i].nlat; j++)
            all[k++] = w[i].lat[j];
    qsort(all, nlat, sizeof *all, cmp_d);
    out->cycles = total;
    out->rate = (double)total / elapsed;
    out->p50 = nlat ? 1000 * all[nlat / 2] : 0;
    out->p99 = nlat ? 1000 * all[(size_t)((double)(nlat - 1) * 0.99)] : 0;
    free(all);
    if (group) {
        unsigned long n = atomic_load(&cm.n);
        out->commits_s = (double)n / elapsed;
        out->batch = n ? (double)atomic_load(&cm.ops) / (double)n : 0;
    } else {
        out->commits_s = 2.0 * (double)total / elapsed; /* one commit per operation */
        out->batch = 1;
    }
    out->ok = 1;
    rc = 0;
done:
    if (err[0])
        fprintf(stderr, "bench_pg: %s, %d threads: %s\n", group ? "group" : "naive", nthreads, err);
    if (r.store)
        once_store_close(r.store);
    for (int i = 0; w && i < nthreads; i++) {
        free(w[i].lat);
        PQfinish(w[i].conn);
    }
    free(w);
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS \"%s\" CASCADE", r.schema);
    char derr[256];
    if (pg_exec(sql, derr, sizeof derr) < 0)
        fprintf(stderr, "bench_pg: cleanup: %s\n", derr);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_pg --url postgres://... [--threads 1,8,64] [--seconds S] [--body BYTES] "
               "[--only group|naive]\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"url", required_argument, NULL, 'u'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"seconds", required_argument, NULL, 's'},
                                       {"body", required_argument, NULL, 'b'},
                                       {"only", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'u': opt.url = optarg; break;
        case 's': opt.seconds = atof(optarg); break;
        case 'b': opt.body_len = (size_t)strtoul(optarg, NULL, 10); break;
        case 'o': opt.only = optarg; break;
        case 't': {
            opt.nthreads = 0;
            char *save = NULL, *copy = strdup(optarg);
            for (char *p = strtok_r(copy, ",", &save); p && opt.nthreads < MAX_COUNTS; p = strtok_r(NULL, ",", &save)) {
                int n = atoi(p);
                if (n < 1 || n > MAX_THREADS) {
                    fprintf(stderr, "bench_pg: --threads: 1..%d\n", MAX_THREADS);
                    return 2;
                }
                opt.threads[opt.nthreads++] = n;
            }
            free(copy);
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!opt.url || strncmp(opt.url, "postgres", 8) != 0 || opt.nthreads == 0 || opt.seconds <= 0 ||
        (opt.only && strcmp(opt.only, "group") != 0 && strcmp(opt.only, "naive") != 0)) {
        usage(stderr);
        return 2;
    }
    g_body = malloc(opt.body_len + 1);
    if (!g_body)
        return 1;
    memset(g_body, 'x', opt.body_len);
    g_body[opt.body_len] = '\0';

    printf("# bench_pg: durable reserve+complete cycles/s on PostgreSQL, %.0f s per run, body %zu bytes\n",
           opt.seconds, opt.body_len);
    printf("%7s | %11s | %11s | %6s | %9s | %10s | %12s | %12s | %12s\n", "threads", "group cyc/s", "naive cyc/s",
           "ratio", "commits/s", "mean batch", "group p50 ms", "group p99 ms", "naive p99 ms");
    int failed = 0;
    result last_g = {0}, last_n = {0};
    int last_t = 0;
    for (int i = 0; i < opt.nthreads; i++) {
        int t = opt.threads[i];
        result g = {0}, n = {0};
        if (!opt.only || strcmp(opt.only, "group") == 0)
            failed |= run_side(1, t, &g) != 0;
        if (!opt.only || strcmp(opt.only, "naive") == 0)
            failed |= run_side(0, t, &n) != 0;
        printf("%7d | %11.0f | %11.0f | %6.2f | %9.0f | %10.1f | %12.2f | %12.2f | %12.2f\n", t, g.rate, n.rate,
               n.rate > 0 ? g.rate / n.rate : 0, g.commits_s, g.batch, g.p50, g.p99, n.p99);
        fflush(stdout);
        if (t == 64 || i == opt.nthreads - 1) {
            if (!last_t || last_t != 64) {
                last_g = g;
                last_n = n;
                last_t = t;
            }
        }
    }
    if (last_g.ok && last_n.ok) {
        double ratio = last_g.rate / last_n.rate;
        printf("goal: durable cycles/s >= 10x one-commit-per-operation (%d threads, PostgreSQL): %s (%.0f vs %.0f "
               "cycles/s, ratio %.2f)\n",
               last_t, ratio >= 10 ? "yes" : "no", last_g.rate, last_n.rate, ratio);
    }
    free(g_body);
    return failed ? 1 : 0;
}
