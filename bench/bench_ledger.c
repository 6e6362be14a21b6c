/*
 * bench_ledger — durable reserve + complete cycles per second (issue 2).
 *
 * For each thread count (default 1, 8, 64, 256) two runs, each on a fresh
 * file in a private temporary directory, with synchronous=FULL:
 *
 *  group   libonce: once_store_open("sqlite:FILE"); every thread loops
 *          once_reserve (unique key, 30 s lease) + once_complete (status
 *          200, small headers, ~100-byte body). The store's writer batches
 *          queued operations into one transaction; the commit hook records
 *          each commit's duration and batch size.
 *  naive   raw SQLite, WAL, synchronous=FULL, busy_timeout, one connection
 *          per thread, a table like libonce's; the same cycle as two separate
 *          transactions (BEGIN IMMEDIATE; INSERT; COMMIT, then BEGIN
 *          IMMEDIATE; UPDATE; COMMIT): one transaction and one fsync per
 *          operation, which is what a straightforward implementation does.
 *
 * A run stops at whichever comes first: --cycles cycles or --seconds
 * seconds (a cycle under way at the deadline is finished, its latency kept,
 * but it is not counted in the rate). Prints a table, details and the issue's
 * goals at 64 threads. Exits 0 whether or not the goals are met (it is a
 * benchmark, not a test); 1 on a real error (any failed call), 2 on a usage
 * error, 130 when interrupted. See bench/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "once/once.h"

#define MAX_THREAD_COUNTS 16
#define MAX_THREADS 4096
#define MAX_CYCLES 2000000
#define MAX_HOOK_RECORDS (4u << 20)
#define THREAD_STACK (1u << 20)
#define GRACE_SECONDS 30.0 /* how long past the deadline a blocked run may take */
#define SCOPE "bench"
#define FINGERPRINT "5f0c2e8d6a1b4c3e9f7a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e"
#define HEADERS "[[\"content-type\",\"application/json\"]]"
#define LEASE_MS 30000
#define RETENTION_MS (24LL * 3600 * 1000)

/* ---- options and global state ------------------------------------------ */

static struct {
    int threads[MAX_THREAD_COUNTS];
    size_t nthreads;
    size_t cycles;
    double seconds;
    size_t body_len;
    const char *dir;
    int do_group;
    int do_naive;
} opt = {
    .threads = {1, 8, 64, 256},
    .nthreads = 4,
    .cycles = 20000,
    .seconds = 5.0,
    .body_len = 100,
    .dir = NULL,
    .do_group = 1,
    .do_naive = 1,
};

static volatile sig_atomic_t g_interrupted;
static char g_tmpdir[1024]; /* short enough that every path below fits PATH_MAX */
static uint8_t *g_body; /* opt.body_len bytes of JSON, shared read-only */

static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_ledger: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see --help)\n", stderr);
    va_end(ap);
    exit(2);
}

/* ---- statistics ---------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    size_t n;
    double p50, p99, max;
} lat_stats;

/* Sorts v in place; nearest-rank percentiles, in seconds. */
static lat_stats lat_summarise(double *v, size_t n) {
    lat_stats s = {.n = n};
    if (n == 0) return s;
    qsort(v, n, sizeof *v, cmp_double);
    /* rank = ceil(p * n), in integers (no libm: the build links none) */
    size_t i50 = (n * 50 + 99) / 100, i99 = (n * 99 + 99) / 100;
    s.p50 = v[i50 - 1];
    s.p99 = v[i99 - 1];
    s.max = v[n - 1];
    return s;
}

/* ---- one run: shared bookkeeping ---------------------------------------- */

typedef struct run run;

typedef struct {
    run *r;
    int id;
    pthread_t th;
    int started;
    sqlite3 *db; /* naive */
    sqlite3_stmt *begin, *commit, *rollback, *insert, *update;
    uint64_t rng;
    uint64_t busy_retries;
} worker;

struct run {
    /* set before the gate opens */
    size_t cycles;
    double deadline, hard_deadline;
    once_store *store; /* group */
    double t0;         /* when the gate opened */
    double *cycle_lat; /* [cycles], indexed by the claimed cycle number */
    double *done_at;   /* [cycles], when that cycle finished (monotonic seconds) */
    double *tx_lat;    /* naive: [2 * cycles], lock held: BEGIN done .. COMMIT done */
    /* start gate */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
    /* shared while running */
    atomic_size_t next; /* next cycle number to claim */
    atomic_int stop;
    atomic_int failed;
    char err[512]; /* the first error; written under mu */
};

static void run_fail(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_fail(run *r, const char *fmt, ...) {
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
        atomic_store(&r->failed, 1);
    }
    atomic_store(&r->stop, 1);
    pthread_mutex_unlock(&r->mu);
}

static void gate_wait(run *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->go) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static void gate_open(run *r) {
    pthread_mutex_lock(&r->mu);
    r->go = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Claims the next cycle number, or returns 0 when the run is over. */
static int claim(run *r, size_t *idx) {
    if (g_interrupted) atomic_store(&r->stop, 1);
    if (atomic_load_explicit(&r->stop, memory_order_relaxed)) return 0;
    if (now_s() >= r->deadline) return 0;
    size_t i = atomic_fetch_add(&r->next, 1);
    if (i >= r->cycles) return 0;
    *idx = i;
    return 1;
}

/* Number of cycles claimed (and therefore, unless the run failed, done). */
static size_t run_done(run *r) {
    size_t n = atomic_load(&r->next);
    return n < r->cycles ? n : r->cycles;
}

/* Throughput over the measured window: from the gate opening to the last
 * cycle's end if every cycle ended by the deadline, else to the deadline,
 * counting only the cycles that ended inside it. Cycles still under way at the
 * deadline are finished (and their latencies kept) but not counted, so a run
 * whose threads sit in a lock wait at the deadline does not stretch the
 * window. */
static double run_rate(const run *r, size_t done, size_t *counted, double *window) {
    double last = r->t0;
    for (size_t i = 0; i < done; i++)
        if (r->done_at[i] > last) last = r->done_at[i];
    size_t n = done;
    double end = last;
    if (last > r->deadline) {
        end = r->deadline;
        n = 0;
        for (size_t i = 0; i < done; i++)
            if (r->done_at[i] <= end) n++;
    }
    *counted = n;
    *window = end - r->t0;
    return *window > 0 ? (double)n / *window : 0.0;
}

typedef struct {
    int threads;
    int ok;           /* measured */
    size_t cycles;    /* done (including those finished after the deadline) */
    double elapsed;   /* seconds, gate open .. last thread joined */
    size_t counted;   /* cycles that ended inside the window */
    double window;    /* seconds */
    double rate;      /* counted / window */
    lat_stats cycle;  /* per-cycle latency */
    /* group */
    size_t commits, hook_dropped;
    double ops;       /* sum of batch sizes */
    lat_stats commit; /* commit hook seconds */
    size_t max_batch;
    /* naive */
    lat_stats tx;
    uint64_t busy_retries;
    double wal_mib; /* size of the WAL file when the run ended */
    double writer_busy; /* group: share of the run the writer spent inside transactions */
} result;

/* Starts n workers on fn, opens the gate, joins. Returns 0, or -1 if not
 * every thread could be started (the started ones are stopped and joined). */
static int run_threads(run *r, worker *w, int n, void *(*fn)(void *), double *elapsed) {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return -1;
    if (pthread_attr_setstacksize(&attr, THREAD_STACK) != 0) {
        pthread_attr_destroy(&attr);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        int e = pthread_create(&w[i].th, &attr, fn, &w[i]);
        if (e != 0) {
            run_fail(r, "pthread_create (thread %d of %d): %s", i + 1, n, strerror(e));
            rc = -1;
            break;
        }
        w[i].started = 1;
    }
    pthread_attr_destroy(&attr);
    double t0 = now_s();
    r->t0 = t0;
    r->deadline = t0 + opt.seconds;
    r->hard_deadline = r->deadline + GRACE_SECONDS;
    gate_open(r); /* the mutex orders the deadline writes before the workers' reads */
    for (int i = 0; i < n; i++) {
        if (!w[i].started) continue;
        int e = pthread_join(w[i].th, NULL);
        if (e != 0) {
            run_fail(r, "pthread_join: %s", strerror(e));
            rc = -1;
        }
        w[i].started = 0;
    }
    *elapsed = now_s() - t0;
    return rc;
}

static int run_init(run *r, size_t cycles, size_t tx_per_cycle) {
    memset(r, 0, sizeof *r);
    r->cycles = cycles;
    r->deadline = r->hard_deadline = 1e300; /* set when the gate opens */
    atomic_init(&r->next, 0);
    atomic_init(&r->stop, 0);
    atomic_init(&r->failed, 0);
    if (pthread_mutex_init(&r->mu, NULL) != 0) return -1;
    if (pthread_cond_init(&r->cv, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    r->cycle_lat = calloc(cycles, sizeof *r->cycle_lat);
    r->done_at = calloc(cycles, sizeof *r->done_at);
    r->tx_lat = tx_per_cycle ? calloc(cycles * tx_per_cycle, sizeof *r->tx_lat) : NULL;
    if (!r->cycle_lat || !r->done_at || (tx_per_cycle && !r->tx_lat)) {
        free(r->cycle_lat);
        free(r->done_at);
        free(r->tx_lat);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    return 0;
}

static void run_destroy(run *r) {
    free(r->cycle_lat);
    free(r->done_at);
    free(r->tx_lat);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static double wal_mib(const char *path);

/* ---- the group-commit side (libonce) ------------------------------------ */

/* ": detail" of the last libonce error on this thread, or "" when it has none. */
static const char *detail(char *buf, size_t len) {
    const char *d = once_errdetail();
    if (!d || !*d) return "";
    snprintf(buf, len, ": %s", d);
    return buf;
}

typedef struct {
    double *sec;
    uint32_t *batch;
    size_t cap;
    atomic_size_t n;       /* commits seen (may exceed cap) */
    atomic_size_t ops;     /* sum of batch sizes */
    atomic_size_t max_batch;
} hook_rec;

static void commit_hook(void *ctx, size_t batch, double seconds) {
    hook_rec *h = ctx;
    size_t i = atomic_fetch_add_explicit(&h->n, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->ops, batch, memory_order_relaxed);
    size_t m = atomic_load_explicit(&h->max_batch, memory_order_relaxed);
    while (batch > m &&
           !atomic_compare_exchange_weak_explicit(&h->max_batch, &m, batch, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    if (i < h->cap) {
        h->sec[i] = seconds;
        h->batch[i] = batch > UINT32_MAX ? UINT32_MAX : (uint32_t)batch;
    }
}

static void *group_worker(void *arg) {
    worker *w = arg;
    run *r = w->r;
    gate_wait(r);
    char key[64], provider[64];
    size_t idx;
    while (claim(r, &idx)) {
        snprintf(key, sizeof key, "k-%zu", idx);
        snprintf(provider, sizeof provider, "prov_%zu", idx);
        double t0 = now_s();
        once_reserve_req req = {
            .scope = SCOPE,
            .key = key,
            .fingerprint = FINGERPRINT,
            .lease_ms = LEASE_MS,
            .retention_ms = RETENTION_MS,
        };
        once_reservation res;
        memset(&res, 0, sizeof res);
        int rc = once_reserve(r->store, &req, &res);
        if (rc != ONCE_OK) {
            char db[300];
            run_fail(r, "once_reserve(%s): %s%s", key, once_strerror(rc), detail(db, sizeof db));
            break;
        }
        if (res.status != ONCE_RESERVED) {
            const char *name = once_reserve_status_name(res.status);
            run_fail(r, "once_reserve(%s): fresh key answered %s, not reserved", key,
                     name ? name : "(invalid status)");
            once_reservation_free(&res);
            break;
        }
        char token[ONCE_TOKEN_LEN + 1];
        memcpy(token, res.token, sizeof token);
        token[ONCE_TOKEN_LEN] = '\0';
        once_reservation_free(&res);

        once_response resp = {
            .status = 200,
            .headers = HEADERS,
            .headers_len = sizeof HEADERS - 1,
            .body = g_body,
            .body_len = opt.body_len,
        };
        rc = once_complete(r->store, SCOPE, key, token, &resp, provider);
        if (rc != ONCE_OK) {
            char db[300];
            run_fail(r, "once_complete(%s): %s%s", key, once_strerror(rc), detail(db, sizeof db));
            break;
        }
        double t1 = now_s();
        r->cycle_lat[idx] = t1 - t0;
        r->done_at[idx] = t1;
    }
    return NULL;
}

static int run_group(int nthreads, const char *path, result *out) {
    int rc = -1;
    run r;
    hook_rec h;
    memset(&h, 0, sizeof h);
    atomic_init(&h.n, 0);
    atomic_init(&h.ops, 0);
    atomic_init(&h.max_batch, 0);
    worker *w = NULL;
    once_store *store = NULL;

    if (run_init(&r, opt.cycles, 0) != 0) {
        fprintf(stderr, "bench_ledger: out of memory\n");
        return -1;
    }
    h.cap = 2 * opt.cycles + 1024;
    if (h.cap > MAX_HOOK_RECORDS) h.cap = MAX_HOOK_RECORDS;
    h.sec = calloc(h.cap, sizeof *h.sec);
    h.batch = calloc(h.cap, sizeof *h.batch);
    w = calloc((size_t)nthreads, sizeof *w);
    if (!h.sec || !h.batch || !w) {
        fprintf(stderr, "bench_ledger: out of memory\n");
        goto done;
    }

    char url[PATH_MAX + 16];
    snprintf(url, sizeof url, "sqlite:%s", path);
    char db[300];
    int e = once_store_open(url, &store);
    if (e != ONCE_OK) {
        fprintf(stderr, "bench_ledger: once_store_open(%s): %s%s\n", url, once_strerror(e),
                detail(db, sizeof db));
        store = NULL;
        goto done;
    }
    e = once_store_ping(store);
    if (e != ONCE_OK) {
        fprintf(stderr, "bench_ledger: once_store_ping: %s%s\n", once_strerror(e),
                detail(db, sizeof db));
        goto done;
    }
    once_store_set_commit_hook(store, commit_hook, &h);
    r.store = store;
    for (int i = 0; i < nthreads; i++) {
        w[i].r = &r;
        w[i].id = i;
    }
    double elapsed = 0;
    int trc = run_threads(&r, w, nthreads, group_worker, &elapsed);
    double wal = wal_mib(path); /* before close, which checkpoints and removes it */
    /* Closing joins the writer: every hook call happens before it returns. */
    once_store_close(store);
    store = NULL;
    if (trc != 0 || atomic_load(&r.failed)) {
        fprintf(stderr, "bench_ledger: group, %d threads: %s\n", nthreads,
                r.err[0] ? r.err : "failed");
        goto done;
    }
    if (g_interrupted) goto done;

    out->threads = nthreads;
    out->cycles = run_done(&r);
    out->elapsed = elapsed;
    out->rate = run_rate(&r, out->cycles, &out->counted, &out->window);
    out->cycle = lat_summarise(r.cycle_lat, out->cycles);
    out->commits = atomic_load(&h.n);
    out->ops = (double)atomic_load(&h.ops);
    out->max_batch = atomic_load(&h.max_batch);
    size_t kept = out->commits < h.cap ? out->commits : h.cap;
    out->hook_dropped = out->commits - kept;
    double busy = 0;
    for (size_t i = 0; i < kept; i++) busy += h.sec[i];
    out->writer_busy = elapsed > 0 ? busy / elapsed : 0;
    out->commit = lat_summarise(h.sec, kept);
    out->wal_mib = wal;
    out->ok = 1;
    rc = 0;
done:
    if (store) once_store_close(store);
    free(h.sec);
    free(h.batch);
    free(w);
    run_destroy(&r);
    return rc;
}

/* ---- the naive side (raw SQLite, one transaction per operation) --------- */

/* The table mirrors the library's own (migration 1 of src/store/sqlite_schema.c:
 * the same columns, AUTOINCREMENT, the unique (scope, key) and the three
 * secondary indexes), so that each commit writes the same B-tree pages and the
 * ratio measures batching, not a leaner schema. Keep it in step. */
static const char NAIVE_SCHEMA[] =
    "CREATE TABLE actions ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  scope TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','completed','released','unknown','held')),"
    "  attempt INTEGER NOT NULL,"
    "  token TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  lease_expires_at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL DEFAULT 0,"
    "  retention_ms INTEGER NOT NULL,"
    "  fingerprint TEXT,"
    "  request BLOB,"
    "  has_response INTEGER NOT NULL DEFAULT 0,"
    "  resp_status INTEGER,"
    "  resp_headers TEXT,"
    "  resp_body BLOB,"
    "  provider_id TEXT,"
    "  error TEXT,"
    "  note TEXT,"
    "  UNIQUE (scope, key)"
    ");"
    "CREATE INDEX actions_pending_lease ON actions (lease_expires_at) WHERE state = 'pending';"
    "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released');"
    "CREATE INDEX actions_state ON actions (state, id);";

/* Reserve: one insert; the unique constraint decides. */
static const char NAIVE_INSERT[] =
    "INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at,"
    " lease_expires_at, expires_at, retention_ms, fingerprint)"
    " VALUES (?1, ?2, 'pending', 1, ?3, ?5, ?5, ?6, 0, ?7, ?4)"
    " ON CONFLICT (scope, key) DO NOTHING";

/* Complete: one update fenced by the token. */
static const char NAIVE_UPDATE[] =
    "UPDATE actions SET state = 'completed', has_response = 1, resp_status = ?4,"
    " resp_headers = ?5, resp_body = ?6, provider_id = ?7, updated_at = ?8,"
    " expires_at = ?8 + retention_ms"
    " WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = 'pending'";

static int naive_exec(sqlite3 *db, const char *sql, char *err, size_t errlen) {
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%.80s: %s", sql, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int naive_open(const char *path, sqlite3 **out, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "sqlite3_open_v2(%s): %s", path,
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    if (sqlite3_busy_timeout(db, 5000) != SQLITE_OK ||
        naive_exec(db, "PRAGMA synchronous=FULL", err, errlen) != 0) {
        if (!err[0]) snprintf(err, errlen, "busy_timeout: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

static void naive_worker_close(worker *w) {
    sqlite3_finalize(w->begin);
    sqlite3_finalize(w->commit);
    sqlite3_finalize(w->rollback);
    sqlite3_finalize(w->insert);
    sqlite3_finalize(w->update);
    w->begin = w->commit = w->rollback = w->insert = w->update = NULL;
    if (w->db && sqlite3_close(w->db) != SQLITE_OK)
        fprintf(stderr, "bench_ledger: sqlite3_close: %s\n", sqlite3_errmsg(w->db));
    w->db = NULL;
}

static int naive_worker_open(worker *w, const char *path, char *err, size_t errlen) {
    if (naive_open(path, &w->db, err, errlen) != 0) return -1;
    struct {
        sqlite3_stmt **st;
        const char *sql;
    } s[] = {
        {&w->begin, "BEGIN IMMEDIATE"}, {&w->commit, "COMMIT"}, {&w->rollback, "ROLLBACK"},
        {&w->insert, NAIVE_INSERT},     {&w->update, NAIVE_UPDATE},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (sqlite3_prepare_v2(w->db, s[i].sql, -1, s[i].st, NULL) != SQLITE_OK) {
            snprintf(err, errlen, "prepare %s: %s", s[i].sql, sqlite3_errmsg(w->db));
            naive_worker_close(w);
            return -1;
        }
    }
    return 0;
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Steps a statement that returns no row; retries SQLITE_BUSY until the hard
 * deadline (busy_timeout already waited up to 5 s each time). */
static int naive_step(worker *w, sqlite3_stmt *st, const char *what) {
    run *r = w->r;
    for (;;) {
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc == SQLITE_DONE) return 0;
        if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && now_s() < r->hard_deadline &&
            !g_interrupted) {
            w->busy_retries++;
            continue;
        }
        run_fail(r, "naive %s: %s", what, sqlite3_errmsg(w->db));
        return -1;
    }
}

/* One transaction holding one statement. *held gets BEGIN done .. COMMIT done. */
static int naive_tx(worker *w, sqlite3_stmt *st, const char *what, double *held) {
    if (naive_step(w, w->begin, "BEGIN IMMEDIATE") != 0) return -1;
    double t0 = now_s();
    int rc = sqlite3_step(st);
    int changes = sqlite3_changes(w->db);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE || changes != 1) {
        if (rc != SQLITE_DONE)
            run_fail(w->r, "naive %s: %s", what, sqlite3_errmsg(w->db));
        else
            run_fail(w->r, "naive %s: changed %d rows, expected 1", what, changes);
        if (!sqlite3_get_autocommit(w->db)) {
            sqlite3_step(w->rollback);
            sqlite3_reset(w->rollback);
        }
        return -1;
    }
    if (naive_step(w, w->commit, "COMMIT") != 0) {
        if (!sqlite3_get_autocommit(w->db)) {
            sqlite3_step(w->rollback);
            sqlite3_reset(w->rollback);
        }
        return -1;
    }
    *held = now_s() - t0;
    return 0;
}

static void *naive_worker(void *arg) {
    worker *w = arg;
    run *r = w->r;
    gate_wait(r);
    char key[64], provider[64], token[ONCE_TOKEN_LEN + 1];
    size_t idx;
    while (claim(r, &idx)) {
        snprintf(key, sizeof key, "k-%zu", idx);
        snprintf(provider, sizeof provider, "prov_%zu", idx);
        uint64_t a = xorshift(&w->rng), b = xorshift(&w->rng);
        snprintf(token, sizeof token, "%016" PRIx64 "%016" PRIx64, a, b);
        double t0 = now_s();
        int64_t now = wall_ms();

        sqlite3_stmt *ins = w->insert;
        if (sqlite3_bind_text(ins, 1, SCOPE, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(ins, 2, key, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(ins, 3, token, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(ins, 4, FINGERPRINT, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(ins, 5, now) != SQLITE_OK ||
            sqlite3_bind_int64(ins, 6, now + LEASE_MS) != SQLITE_OK ||
            sqlite3_bind_int64(ins, 7, RETENTION_MS) != SQLITE_OK) {
            run_fail(r, "naive bind insert: %s", sqlite3_errmsg(w->db));
            break;
        }
        if (naive_tx(w, ins, "INSERT", &r->tx_lat[2 * idx]) != 0) break;

        sqlite3_stmt *up = w->update;
        now = wall_ms();
        if (sqlite3_bind_text(up, 1, SCOPE, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(up, 2, key, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(up, 3, token, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int(up, 4, 200) != SQLITE_OK ||
            sqlite3_bind_text(up, 5, HEADERS, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_blob(up, 6, g_body, (int)opt.body_len, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(up, 7, provider, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(up, 8, now) != SQLITE_OK) {
            run_fail(r, "naive bind update: %s", sqlite3_errmsg(w->db));
            break;
        }
        if (naive_tx(w, up, "UPDATE", &r->tx_lat[2 * idx + 1]) != 0) break;
        double t1 = now_s();
        r->cycle_lat[idx] = t1 - t0;
        r->done_at[idx] = t1;
    }
    return NULL;
}

static int run_naive(int nthreads, const char *path, result *out) {
    int rc = -1;
    run r;
    char err[512] = "";
    worker *w = NULL;
    if (run_init(&r, opt.cycles, 2) != 0) {
        fprintf(stderr, "bench_ledger: out of memory\n");
        return -1;
    }
    w = calloc((size_t)nthreads, sizeof *w);
    if (!w) {
        fprintf(stderr, "bench_ledger: out of memory\n");
        goto done;
    }
    /* Schema and WAL mode from one setup connection. */
    sqlite3 *setup = NULL;
    if (naive_open(path, &setup, err, sizeof err) != 0) goto fail;
    if (naive_exec(setup, "PRAGMA journal_mode=WAL", err, sizeof err) != 0 ||
        naive_exec(setup, NAIVE_SCHEMA, err, sizeof err) != 0) {
        sqlite3_close(setup);
        goto fail;
    }
    sqlite3_stmt *jm = NULL;
    if (sqlite3_prepare_v2(setup, "PRAGMA journal_mode", -1, &jm, NULL) != SQLITE_OK ||
        sqlite3_step(jm) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(jm, 0), "wal") != 0) {
        snprintf(err, sizeof err, "journal_mode is not wal");
        sqlite3_finalize(jm);
        sqlite3_close(setup);
        goto fail;
    }
    sqlite3_finalize(jm);
    if (sqlite3_close(setup) != SQLITE_OK) {
        snprintf(err, sizeof err, "sqlite3_close(setup): %s", sqlite3_errmsg(setup));
        goto fail;
    }

    for (int i = 0; i < nthreads; i++) {
        w[i].r = &r;
        w[i].id = i;
        w[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) ^ (uint64_t)wall_ms();
        if (!w[i].rng) w[i].rng = 1;
        if (naive_worker_open(&w[i], path, err, sizeof err) != 0) goto fail;
    }
    double elapsed = 0;
    int trc = run_threads(&r, w, nthreads, naive_worker, &elapsed);
    double wal = wal_mib(path);
    if (trc != 0 || atomic_load(&r.failed)) {
        fprintf(stderr, "bench_ledger: naive, %d threads: %s\n", nthreads,
                r.err[0] ? r.err : "failed");
        goto done;
    }
    if (g_interrupted) goto done;
    out->threads = nthreads;
    out->cycles = run_done(&r);
    out->elapsed = elapsed;
    out->rate = run_rate(&r, out->cycles, &out->counted, &out->window);
    out->cycle = lat_summarise(r.cycle_lat, out->cycles);
    out->tx = lat_summarise(r.tx_lat, 2 * out->cycles);
    for (int i = 0; i < nthreads; i++) out->busy_retries += w[i].busy_retries;
    out->wal_mib = wal;
    out->ok = 1;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "bench_ledger: naive, %d threads: %s\n", nthreads, err);
done:
    if (w)
        for (int i = 0; i < nthreads; i++) naive_worker_close(&w[i]);
    free(w);
    run_destroy(&r);
    return rc;
}

/* ---- environment ---------------------------------------------------------- */

static const char *fs_name(const char *dir) {
    struct statfs sf;
    if (statfs(dir, &sf) != 0) return "unknown fs";
    switch ((unsigned long)sf.f_type) {
    case 0xEF53UL: return "ext4";
    case 0x58465342UL: return "xfs";
    case 0x9123683EUL: return "btrfs";
    case 0x01021994UL: return "tmpfs";
    case 0x794C7630UL: return "overlayfs";
    case 0x2FC12FC1UL: return "zfs";
    case 0x6969UL: return "nfs";
    default: return "other fs";
    }
}

/* 4 KiB writes + fdatasync, to show what one durable write costs here: first
 * appending (the file grows, so the file system also commits its size), then
 * overwriting the same blocks (what a WAL does once it restarts after a
 * checkpoint). p50 of each into app / ovw. */
static int measure_fsync(const char *dir, double *app, double *ovw) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/fsync-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench_ledger: open(%s): %s\n", path, strerror(errno));
        return -1;
    }
    enum { N = 200 };
    static char buf[4096];
    memset(buf, 'x', sizeof buf);
    double lat[N];
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (int i = 0; i < N; i++) {
            double t0 = now_s();
            if (pwrite(fd, buf, sizeof buf, (off_t)i * (off_t)sizeof buf) != (ssize_t)sizeof buf ||
                fdatasync(fd) != 0) {
                fprintf(stderr, "bench_ledger: write/fdatasync(%s): %s\n", path, strerror(errno));
                rc = -1;
                break;
            }
            lat[i] = now_s() - t0;
        }
        if (rc == 0) *(pass == 0 ? app : ovw) = lat_summarise(lat, N).p50;
    }
    if (close(fd) != 0 && rc == 0) {
        fprintf(stderr, "bench_ledger: close(%s): %s\n", path, strerror(errno));
        rc = -1;
    }
    if (unlink(path) != 0 && rc == 0) {
        fprintf(stderr, "bench_ledger: unlink(%s): %s\n", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Size of PATH-wal in MiB; -1 if it cannot be read. */
static double wal_mib(const char *path) {
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s-wal", path);
    struct stat st;
    if (stat(p, &st) != 0) return errno == ENOENT ? 0.0 : -1.0;
    return (double)st.st_size / (1024.0 * 1024.0);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0) fprintf(stderr, "bench_ledger: remove(%s): %s\n", path, strerror(errno));
    return 0;
}

/* Removes everything under the private directory made by mkdtemp. */
static void cleanup_tmpdir(void) {
    if (!g_tmpdir[0]) return;
    nftw(g_tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_tmpdir[0] = '\0';
}

static void remove_db(const char *path) {
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    char p[PATH_MAX + 16];
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            fprintf(stderr, "bench_ledger: unlink(%s): %s\n", p, strerror(errno));
    }
}

static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl); /* best effort: only naive at many threads needs it */
    }
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_ledger [options]\n"
            "  --threads LIST   comma-separated thread counts (default 1,8,64,256)\n"
            "  --cycles N       at most N reserve+complete cycles per run (default 20000)\n"
            "  --seconds S      at most S seconds per run (default 5)\n"
            "  --body BYTES     size of the stored response body (default 100)\n"
            "  --dir DIR        where to make the temporary directory\n"
            "                   (default $TMPDIR or /tmp; must be a real disk, not tmpfs)\n"
            "  --only group|naive   run one side only\n"
            "  --help\n"
            "Each run uses a fresh database file; all files are removed at the end.\n");
}

static long parse_long(const char *s, long lo, long hi, const char *what) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die_usage("%s: '%s' is not an integer in %ld..%ld", what, s, lo, hi);
    return v;
}

static void parse_threads(const char *arg) {
    char buf[256];
    if (strlen(arg) >= sizeof buf) die_usage("--threads: list too long");
    strcpy(buf, arg);
    opt.nthreads = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (opt.nthreads == MAX_THREAD_COUNTS) die_usage("--threads: at most %d values", MAX_THREAD_COUNTS);
        opt.threads[opt.nthreads++] = (int)parse_long(t, 1, MAX_THREADS, "--threads");
    }
    if (opt.nthreads == 0) die_usage("--threads: empty list");
}

static void parse_args(int argc, char **argv) {
    static const struct option lo[] = {
        {"threads", required_argument, NULL, 't'}, {"cycles", required_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 's'}, {"body", required_argument, NULL, 'b'},
        {"dir", required_argument, NULL, 'd'},     {"only", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "t:c:s:b:d:o:h", lo, NULL)) != -1) {
        switch (c) {
        case 't': parse_threads(optarg); break;
        case 'c': opt.cycles = (size_t)parse_long(optarg, 1, MAX_CYCLES, "--cycles"); break;
        case 's': {
            char *end = NULL;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(v >= 0.1 && v <= 600))
                die_usage("--seconds: '%s' is not a number in 0.1..600", optarg);
            opt.seconds = v;
            break;
        }
        case 'b': opt.body_len = (size_t)parse_long(optarg, 0, 1 << 20, "--body"); break;
        case 'd': opt.dir = optarg; break;
        case 'o':
            if (strcmp(optarg, "group") == 0)
                opt.do_naive = 0;
            else if (strcmp(optarg, "naive") == 0)
                opt.do_group = 0;
            else
                die_usage("--only: 'group' or 'naive'");
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc) die_usage("unexpected argument '%s'", argv[optind]);
}

/* A JSON-looking body of exactly opt.body_len bytes. */
static int make_body(void) {
    g_body = malloc(opt.body_len + 1);
    if (!g_body) return -1;
    static const char head[] = "{\"id\":\"msg_01HBENCH\",\"status\":\"sent\",\"note\":\"";
    static const char tail[] = "\"}";
    size_t n = opt.body_len;
    if (n < sizeof head + sizeof tail) {
        memset(g_body, 'x', n);
    } else {
        memcpy(g_body, head, sizeof head - 1);
        memset(g_body + sizeof head - 1, 'x', n - (sizeof head - 1) - (sizeof tail - 1));
        memcpy(g_body + n - (sizeof tail - 1), tail, sizeof tail - 1);
    }
    g_body[n] = '\0';
    return 0;
}

/* ---- main ------------------------------------------------------------------ */

static double ms(double s) { return s * 1e3; }

int main(int argc, char **argv) {
    parse_args(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    raise_nofile();
    if (make_body() != 0) {
        fprintf(stderr, "bench_ledger: out of memory\n");
        return 1;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* Stop cleanly (and remove the temporary files) on Ctrl-C, kill, a closed
     * terminal or a closed pipe (bench_ledger | head). */
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
        sigaction(SIGHUP, &sa, NULL) != 0 || sigaction(SIGPIPE, &sa, NULL) != 0) {
        perror("bench_ledger: sigaction");
        return 1;
    }

    const char *base = opt.dir ? opt.dir : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if ((size_t)snprintf(g_tmpdir, sizeof g_tmpdir, "%s/once-bench-XXXXXX", base) >= sizeof g_tmpdir - 64) {
        fprintf(stderr, "bench_ledger: --dir too long\n");
        return 2;
    }
    if (!mkdtemp(g_tmpdir)) {
        fprintf(stderr, "bench_ledger: mkdtemp(%s): %s\n", g_tmpdir, strerror(errno));
        g_tmpdir[0] = '\0';
        return 1;
    }

    int status = 0;
    const char *fs = fs_name(g_tmpdir);
    double fs50 = 0, fsovw = 0;
    if (measure_fsync(g_tmpdir, &fs50, &fsovw) != 0) {
        status = 1;
        goto out;
    }

    printf("once ledger benchmark: durable reserve + complete cycles, fresh file per run, "
           "synchronous=FULL\n");
    printf("libonce %s, SQLite %s; dir %s (%s)\n", ONCE_VERSION, sqlite3_libversion(), g_tmpdir, fs);
    printf("each run: at most %zu cycles or %.1f s; body %zu B; lease %d s; "
           "naive = 2 transactions per cycle\n",
           opt.cycles, opt.seconds, opt.body_len, LEASE_MS / 1000);
    printf("disk: 4 KiB write + fdatasync, p50: appending %.3f ms, overwriting %.3f ms\n", ms(fs50),
           ms(fsovw));
    {
        /* Others' work on the same cores or disk skews every figure: say how busy it was. */
        char la[128] = "";
        FILE *f = fopen("/proc/loadavg", "r");
        if (f) {
            if (!fgets(la, sizeof la, f)) la[0] = '\0';
            fclose(f);
        }
        la[strcspn(la, "\n")] = '\0';
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        printf("machine: %ld cores; /proc/loadavg at start: %s\n", ncpu, la[0] ? la : "?");
    }
    if (strcmp(fs, "tmpfs") == 0 || fs50 < 20e-6)
        printf("WARNING: fdatasync costs nothing here (tmpfs or a volatile cache): the figures "
               "below are not durable-disk figures; use --dir on a real disk\n");
    printf("\n");

    result g[MAX_THREAD_COUNTS], n[MAX_THREAD_COUNTS];
    memset(g, 0, sizeof g);
    memset(n, 0, sizeof n);

    printf("threads | group cyc/s | naive cyc/s |  ratio | commit p50 ms | commit p99 ms | "
           "mean batch | cycle p50 ms | cycle p99 ms\n");
    printf("--------+-------------+-------------+--------+---------------+---------------+-"
           "-----------+--------------+-------------\n");
    for (size_t i = 0; i < opt.nthreads && !g_interrupted; i++) {
        int t = opt.threads[i];
        char path[PATH_MAX];
        if (opt.do_group) {
            snprintf(path, sizeof path, "%s/group-%d.db", g_tmpdir, t);
            if (run_group(t, path, &g[i]) != 0) {
                status = 1;
                break;
            }
            remove_db(path);
        }
        if (opt.do_naive && !g_interrupted) {
            snprintf(path, sizeof path, "%s/naive-%d.db", g_tmpdir, t);
            if (run_naive(t, path, &n[i]) != 0) {
                status = 1;
                break;
            }
            remove_db(path);
        }
        if (g_interrupted) break;
        char gr[32] = "-", nr[32] = "-", ra[32] = "-", c50[32] = "-", c99[32] = "-", mb[32] = "-",
             y50[32] = "-", y99[32] = "-";
        if (g[i].ok) {
            snprintf(gr, sizeof gr, "%.0f", g[i].rate);
            snprintf(c50, sizeof c50, "%.3f", ms(g[i].commit.p50));
            snprintf(c99, sizeof c99, "%.3f", ms(g[i].commit.p99));
            snprintf(mb, sizeof mb, "%.1f", g[i].commits ? g[i].ops / (double)g[i].commits : 0.0);
            snprintf(y50, sizeof y50, "%.3f", ms(g[i].cycle.p50));
            snprintf(y99, sizeof y99, "%.3f", ms(g[i].cycle.p99));
        }
        if (n[i].ok) snprintf(nr, sizeof nr, "%.0f", n[i].rate);
        if (g[i].ok && n[i].ok && n[i].rate > 0) snprintf(ra, sizeof ra, "%.2fx", g[i].rate / n[i].rate);
        printf("%7d | %11s | %11s | %6s | %13s | %13s | %10s | %12s | %12s\n", t, gr, nr, ra, c50,
               c99, mb, y50, y99);
    }

    if (g_interrupted) {
        fprintf(stderr, "bench_ledger: interrupted\n");
        status = 130;
        goto out;
    }
    if (status != 0) goto out;

    printf("\ndetails: cycles = all done, in window = those that ended by the deadline (the rate's\n"
           "numerator), window = the rate's denominator in s; latencies in ms\n");
    if (opt.do_group)
        printf("side  threads  cycles in window window  commits commits/s ops/commit max batch"
               " commit max in tx | cycle p50 cycle p99 cycle max | WAL MiB\n");
    for (size_t i = 0; i < opt.nthreads; i++) {
        result *x = &g[i];
        if (!x->ok) continue;
        printf("group %7d %7zu %9zu %6.2f %8zu %9.0f %10.2f %9zu %10.3f %4.0f%% | %9.3f %9.3f %9.3f | %7.1f\n",
               x->threads, x->cycles, x->counted, x->window, x->commits,
               x->elapsed > 0 ? (double)x->commits / x->elapsed : 0.0,
               x->commits ? x->ops / (double)x->commits : 0.0, x->max_batch, ms(x->commit.max),
               100.0 * x->writer_busy,
               ms(x->cycle.p50), ms(x->cycle.p99), ms(x->cycle.max), x->wal_mib);
        if (x->hook_dropped)
            printf("      (latencies of %zu commits past the record's capacity not kept)\n",
                   x->hook_dropped);
    }
    if (opt.do_naive)
        printf("side  threads  cycles in window window  tx p50  tx p99  tx max busy retries |"
               " cycle p50 cycle p99 cycle max | WAL MiB\n");
    for (size_t i = 0; i < opt.nthreads; i++) {
        result *x = &n[i];
        if (!x->ok) continue;
        printf("naive %7d %7zu %9zu %6.2f %7.3f %7.3f %7.3f %12" PRIu64 " | %9.3f %9.3f %9.3f | %7.1f\n",
               x->threads, x->cycles, x->counted, x->window, ms(x->tx.p50), ms(x->tx.p99),
               ms(x->tx.max), x->busy_retries, ms(x->cycle.p50), ms(x->cycle.p99),
               ms(x->cycle.max), x->wal_mib);
    }
    printf("group 'commit': one transaction of the writer, BEGIN .. durable COMMIT (commit hook);\n"
           "group 'in tx': share of the run the writer spent inside transactions (the rest is\n"
           "  hand-off: waking callers, taking the next batch, waiting for work);\n"
           "naive 'tx': one transaction, from its write lock being taken to its durable COMMIT;\n"
           "'cycle': reserve + complete as the calling thread sees it, queueing and lock waits included;\n"
           "'WAL MiB': size of the -wal file at the end of the run (bounded when checkpoints work)\n");

    printf("\n");
    size_t at64 = opt.nthreads;
    for (size_t i = 0; i < opt.nthreads; i++)
        if (opt.threads[i] == 64) at64 = i;
    if (at64 == opt.nthreads || !g[at64].ok) {
        printf("goal: 64 threads: not measured (64 not in --threads, or the group side was not run)\n");
    } else {
        result *x = &g[at64], *y = &n[at64];
        if (y->ok && y->rate > 0) {
            double ratio = x->rate / y->rate;
            printf("goal: 64 threads group >= 6x naive: %s (ratio %.2f)\n", ratio >= 6.0 ? "yes" : "no",
                   ratio);
        } else {
            printf("goal: 64 threads group >= 6x naive: not measured (naive side not run)\n");
        }
        printf("goal: 64 threads group >= 15000 cycles/s: %s (%.0f)\n", x->rate >= 15000 ? "yes" : "no",
               x->rate);
        printf("goal: 64 threads commit p99 < 5 ms: %s (%.3f ms)\n", x->commit.p99 < 5e-3 ? "yes" : "no",
               ms(x->commit.p99));
    }

out:
    cleanup_tmpdir();
    free(g_body);
    return status;
}
