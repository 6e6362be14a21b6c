/*
 * bench_prefill — fills a store fast with webhook events and/or completed
 * actions, so that a sustained-load run (bench/sustained.sh, issue 30) can
 * start on a store that already holds millions of rows without ingesting
 * them over HTTP first.
 *
 *   bench_prefill --store URL [--events N --source NAME] [--actions N --scope NAME]
 *
 * The rows are the ones a real ingest leaves:
 *  events   what the gateway's webhook path (src/server/hooks/hooks.c) stores
 *           for a GitHub source: a pending event, its id the X-GitHub-Delivery
 *           header, its own ~1 KB push body (github_event.h), the request's
 *           headers as the JSON [[name, value], …] the gateway keeps (the
 *           signature included: it is not a secret), content type, the
 *           source's retention, and the body's digest as the second dedupe key
 *           (once_fingerprint("webhook", source, body), as the gateway makes it
 *           for an id the signature does not cover).
 *  actions  what the proxy leaves for a new key answered 200: reserve (the
 *           request's fingerprint, the stored request as the gateway writes it,
 *           lease, retention) then complete with the upstream's small answer.
 * Both go through the asynchronous API with at most --window operations in
 * flight, so the store's writer batches them into group commits (one fsync
 * per batch) while the number of buffers stays bounded. Prints progress every
 * 5 s and the rate at the end. Exit 0 when every row was written, 1 on a
 * failed call, 2 on a usage error, 130 when interrupted.
 *
 * Rates on a shared 2-core VM: ~10,000 events/s and ~18,000 actions/s
 * (1 KB bodies), bound by the store's single writer, so 5 million take
 * minutes; bench/sustained.sh keeps the result as a template.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "once/once.h"

#include "bench_common.h"
#include "github_event.h"

#define WINDOW_MAX 65536
#define COUNT_MAX 100000000ULL
#define ID_MAX 96
#define HDRS_MAX 640
#define REQ_META_EXTRA 512 /* the stored request's JSON around the body */
#define UPSTREAM_BODY "{\"ok\":true}"
#define UPSTREAM_HEADERS "[[\"Server\",\"nginx\"],[\"Content-Type\",\"application/json\"],[\"Connection\",\"keep-alive\"]]"

static struct {
    const char *store;
    uint64_t events, actions;
    const char *source, *scope, *secret, *prefix;
    size_t body, window;
    int64_t retention_ms, lease_ms;
} opt = {
    .source = "gh",
    .scope = "bench",
    .secret = "bench-secret",
    .prefix = "prefill",
    .body = 1024,
    .window = 4096,
    .retention_ms = 7LL * 24 * 3600 * 1000,
    .lease_ms = 10000,
};

/* ---- the window of operations in flight --------------------------------- */

typedef enum { OP_EVENT = 1, OP_RESERVE, OP_COMPLETE } op_kind;

/* One operation's buffers: they must live until its callback has run. */
typedef struct slot {
    op_kind kind;
    int rc;
    char detail[160];
    uint64_t seq;
    char id[ID_MAX];
    char *body; /* opt.body + 1 bytes */
    size_t body_len;
    char hdrs[HDRS_MAX];
    char digest[65];
    int inserted;
    once_event_in in;
    /* actions */
    char fp[65];
    char *meta; /* the stored request */
    once_reserve_req rq;
    once_reservation res;
    once_response resp;
} slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *done; /* ring of finished slots, written by callbacks */
    size_t head, count, cap;
} done_ring;

static done_ring g_ring = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static slot *g_slots;

/* On a store thread: quick, no blocking call (once.h). */
static void on_done(void *ctx, int rc, const char *detail) {
    slot *s = ctx;
    s->rc = rc;
    if (rc < 0) snprintf(s->detail, sizeof s->detail, "%s", detail ? detail : "");
    pthread_mutex_lock(&g_ring.mu);
    g_ring.done[(g_ring.head + g_ring.count) % g_ring.cap] = (size_t)(s - g_slots);
    g_ring.count++;
    pthread_cond_signal(&g_ring.cv);
    pthread_mutex_unlock(&g_ring.mu);
}

/* ---- the rows ------------------------------------------------------------ */

static int event_submit(once_store *st, slot *s, uint64_t seq) {
    s->kind = OP_EVENT;
    s->seq = seq;
    snprintf(s->id, sizeof s->id, "%s-%s-%" PRIu64, opt.prefix, opt.source, seq);
    s->body_len = gh_event_body(s->body, opt.body + 1, opt.body, s->id, seq);
    char sig[72];
    if (!s->body_len || gh_event_sign(opt.secret, s->body, s->body_len, sig) < 0) {
        fprintf(stderr, "bench_prefill: cannot build event %" PRIu64 "\n", seq);
        return -1;
    }
    /* As hooks.c keeps them: the request's headers, in order, without
     * hop-by-hop ones (Host, Content-Length, Expect). */
    int n = snprintf(s->hdrs, sizeof s->hdrs,
                     "[[\"Accept\",\"*/*\"],[\"Content-Type\",\"application/json\"],"
                     "[\"User-Agent\",\"GitHub-Hookshot/bench\"],[\"X-GitHub-Delivery\",\"%s\"],"
                     "[\"X-GitHub-Event\",\"push\"],[\"X-Hub-Signature-256\",\"%s\"]]",
                     s->id, sig);
    if (n < 0 || (size_t)n >= sizeof s->hdrs) return -1;
    if (once_fingerprint("webhook", opt.source, (const uint8_t *)s->body, s->body_len, s->digest) < 0) return -1;
    s->in = (once_event_in){.source = opt.source,
                            .event_id = s->id,
                            .content_type = "application/json",
                            .headers = s->hdrs,
                            .headers_len = (size_t)n,
                            .body = (const uint8_t *)s->body,
                            .body_len = s->body_len,
                            .retention_ms = opt.retention_ms,
                            .digest = s->digest};
    int rc = once_event_insert_async(st, &s->in, &s->inserted, on_done, s);
    if (rc == 1) { /* found by a read: this id is in the store already */
        s->inserted = 0;
        on_done(s, ONCE_OK, "");
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "bench_prefill: event %s: %s (%s)\n", s->id, once_strerror(rc), once_errdetail());
        return -1;
    }
    return 0;
}

static int action_submit(once_store *st, slot *s, uint64_t seq) {
    s->kind = OP_RESERVE;
    s->seq = seq;
    snprintf(s->id, sizeof s->id, "%s-%s-%" PRIu64, opt.prefix, opt.scope, seq);
    /* The client's body: JSON, its own per key (as an agent's calls are). */
    s->body_len = gh_event_body(s->body, opt.body + 1, opt.body, s->id, seq);
    if (!s->body_len) return -1;
    if (once_fingerprint("POST", "/", (const uint8_t *)s->body, s->body_len, s->fp) < 0) return -1;
    /* The stored request as stored_request_encode writes it (compact JSON;
     * the body is UTF-8, so it is kept as text). */
    int n = snprintf(s->meta, opt.body + REQ_META_EXTRA,
                     "{\"method\":\"POST\",\"target\":\"/\",\"headers\":[[\"Accept\",\"*/*\"],"
                     "[\"Content-Type\",\"application/json\"],[\"Idempotency-Key\",\"%s\"]],\"body\":\"",
                     s->id);
    size_t len = (size_t)n;
    for (size_t i = 0; i < s->body_len && len + 3 < opt.body + REQ_META_EXTRA; i++) {
        char c = s->body[i];
        if (c == '"' || c == '\\') s->meta[len++] = '\\';
        s->meta[len++] = c;
    }
    if (len + 3 >= opt.body + REQ_META_EXTRA) return -1;
    memcpy(s->meta + len, "\"}", 3);
    len += 2;
    memset(&s->res, 0, sizeof s->res);
    s->rq = (once_reserve_req){.scope = opt.scope,
                               .key = s->id,
                               .fingerprint = s->fp,
                               .lease_ms = opt.lease_ms,
                               .retention_ms = opt.retention_ms,
                               .request = (const uint8_t *)s->meta,
                               .request_len = len};
    int rc = once_reserve_async(st, &s->rq, &s->res, on_done, s);
    if (rc == 1) { /* answered without a write: the key exists */
        once_reservation_free(&s->res);
        s->kind = OP_COMPLETE;
        on_done(s, ONCE_OK, "");
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "bench_prefill: reserve %s: %s (%s)\n", s->id, once_strerror(rc), once_errdetail());
        return -1;
    }
    return 0;
}

static int action_complete(once_store *st, slot *s) {
    if (s->res.status != ONCE_RESERVED) { /* the key was there already: nothing to complete */
        once_reservation_free(&s->res);
        s->kind = OP_COMPLETE;
        on_done(s, ONCE_OK, "");
        return 0;
    }
    s->kind = OP_COMPLETE;
    s->resp = (once_response){.status = 200,
                              .headers = UPSTREAM_HEADERS,
                              .headers_len = strlen(UPSTREAM_HEADERS),
                              .body = (uint8_t *)UPSTREAM_BODY,
                              .body_len = strlen(UPSTREAM_BODY)};
    int rc = once_complete_async(st, opt.scope, s->id, s->res.token, &s->resp, NULL, on_done, s);
    if (rc < 0) {
        fprintf(stderr, "bench_prefill: complete %s: %s (%s)\n", s->id, once_strerror(rc), once_errdetail());
        return -1;
    }
    return 0;
}

/* ---- one fill: N rows of a kind through the window ----------------------- */

typedef struct {
    uint64_t written, existed;
    double seconds;
    size_t commits, ops;
    double commit_s, commit_max;
} fill_stats;

static fill_stats g_stats; /* the commit hook's part is written on the writer thread */
static pthread_mutex_t g_stats_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_commit(void *ctx, size_t batch, double seconds) {
    (void)ctx;
    pthread_mutex_lock(&g_stats_mu);
    g_stats.commits++;
    g_stats.ops += batch;
    g_stats.commit_s += seconds;
    if (seconds > g_stats.commit_max) g_stats.commit_max = seconds;
    pthread_mutex_unlock(&g_stats_mu);
}

/* Returns 0 when all n were written (or found), -1 on an error or interrupt. */
static int fill(once_store *st, int actions, uint64_t n) {
    const char *what = actions ? "actions" : "events";
    size_t window = opt.window;
    size_t *free_list = calloc(window, sizeof *free_list);
    if (!free_list) return -1;
    size_t nfree = window;
    for (size_t i = 0; i < window; i++) free_list[i] = window - 1 - i;
    uint64_t next = 0, finished = 0;
    int failed = 0;
    pthread_mutex_lock(&g_stats_mu);
    memset(&g_stats, 0, sizeof g_stats);
    pthread_mutex_unlock(&g_stats_mu);
    double t0 = bench_now(), last = t0;
    uint64_t last_done = 0;
    size_t *batch = calloc(window, sizeof *batch);
    if (!batch) {
        free(free_list);
        return -1;
    }
    while (finished < n && !failed) {
        /* Fill the window. */
        while (nfree > 0 && next < n && !failed && !bench_interrupted) {
            slot *s = &g_slots[free_list[--nfree]];
            if ((actions ? action_submit(st, s, next) : event_submit(st, s, next)) < 0) failed = 1;
            next++;
        }
        if (failed || bench_interrupted) break;
        /* Take what finished. */
        size_t got = 0;
        pthread_mutex_lock(&g_ring.mu);
        while (g_ring.count == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&g_ring.cv, &g_ring.mu, &ts);
            if (bench_interrupted) break;
        }
        while (g_ring.count > 0) {
            batch[got++] = g_ring.done[g_ring.head];
            g_ring.head = (g_ring.head + 1) % g_ring.cap;
            g_ring.count--;
        }
        pthread_mutex_unlock(&g_ring.mu);
        for (size_t i = 0; i < got && !failed; i++) {
            slot *s = &g_slots[batch[i]];
            if (s->rc < 0) {
                fprintf(stderr, "bench_prefill: %s %s failed: %s (%s)\n", what, s->id, once_strerror(s->rc),
                        s->detail);
                failed = 1;
                break;
            }
            if (s->kind == OP_RESERVE) {
                if (action_complete(st, s) < 0) failed = 1;
                continue;
            }
            if (s->kind == OP_EVENT && !s->inserted) g_stats.existed++;
            if (s->kind == OP_COMPLETE) once_reservation_free(&s->res);
            finished++;
            free_list[nfree++] = batch[i];
        }
        double t = bench_now();
        if (t - last >= 5.0) {
            fprintf(stderr, "bench_prefill: %s %" PRIu64 "/%" PRIu64 " (%.0f/s over the last %.0f s)\n", what,
                    finished, n, (double)(finished - last_done) / (t - last), t - last);
            last = t;
            last_done = finished;
        }
    }
    /* Whatever is still in flight finishes before the store closes. */
    pthread_mutex_lock(&g_stats_mu);
    g_stats.seconds = bench_now() - t0;
    g_stats.written = finished - g_stats.existed;
    pthread_mutex_unlock(&g_stats_mu);
    free(batch);
    free(free_list);
    if (bench_interrupted) return -1;
    return failed ? -1 : 0;
}

static void usage(void) {
    puts("usage: bench_prefill --store URL [--events N] [--source NAME] [--actions N] [--scope NAME]\n"
         "  --store URL       sqlite:FILE or a postgres:// URL (required)\n"
         "  --events N        webhook events for --source (GitHub-style: delivery ids, signed bodies, digests)\n"
         "  --source NAME     the webhook source [gh]\n"
         "  --secret S        the source's secret, for the stored signature header [bench-secret]\n"
         "  --actions N       completed actions for --scope (reserve + complete, as the proxy leaves them)\n"
         "  --scope NAME      the upstream / scope [bench]\n"
         "  --body BYTES      size of each event body and each action's request body [1024]\n"
         "  --prefix P        ids and keys are P-NAME-SEQ [prefill]\n"
         "  --window N        operations in flight at once [4096]\n"
         "  --retention D     retention in seconds of events and actions [604800]\n"
         "  --wal-max BYTES   the SQLite store's WAL bound during the fill [library default]\n"
         "Prints progress every 5 s on stderr and the rates at the end.");
}

static uint64_t parse_u64(const char *name, const char *v, uint64_t lo, uint64_t hi) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi || v[0] == '-')
        die_usage("%s must be a whole number in %" PRIu64 "..%" PRIu64, name, lo, hi);
    return x;
}

int main(int argc, char **argv) {
    bench_prog = "bench_prefill";
    once_global_init();
    /* glibc trims a thread's heap (madvise, then a TLB shootdown on every
     * core) whenever a free leaves more than the trim threshold on top; the
     * store's writer frees SQLite's statement journal after each complete,
     * and on a VM that cost 40x in fill rate. The fill is not what is
     * measured, so the heap is kept. */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    int64_t wal_max = 0;
    static const struct option longopts[] = {
        {"store", required_argument, 0, 'S'},  {"events", required_argument, 0, 'e'},
        {"source", required_argument, 0, 's'}, {"secret", required_argument, 0, 'k'},
        {"actions", required_argument, 0, 'a'}, {"scope", required_argument, 0, 'c'},
        {"body", required_argument, 0, 'b'},   {"prefix", required_argument, 0, 'p'},
        {"window", required_argument, 0, 'w'}, {"retention", required_argument, 0, 'r'},
        {"wal-max", required_argument, 0, 'W'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'S': opt.store = optarg; break;
        case 'e': opt.events = parse_u64("--events", optarg, 0, COUNT_MAX); break;
        case 's': opt.source = optarg; break;
        case 'k': opt.secret = optarg; break;
        case 'a': opt.actions = parse_u64("--actions", optarg, 0, COUNT_MAX); break;
        case 'c': opt.scope = optarg; break;
        case 'b': opt.body = parse_u64("--body", optarg, GH_EVENT_BODY_MIN, 65536); break;
        case 'p': opt.prefix = optarg; break;
        case 'w': opt.window = parse_u64("--window", optarg, 1, WINDOW_MAX); break;
        case 'r': opt.retention_ms = (int64_t)parse_u64("--retention", optarg, 1, 3650ULL * 24 * 3600) * 1000; break;
        case 'W': wal_max = (int64_t)parse_u64("--wal-max", optarg, 1 << 20, 1ULL << 40); break;
        case 'h': usage(); return 0;
        default: die_usage("unknown option");
        }
    }
    if (optind < argc) die_usage("unexpected argument '%s'", argv[optind]);
    if (!opt.store) die_usage("--store is required");
    if (!opt.events && !opt.actions) die_usage("nothing to do: give --events N and/or --actions N");
    if (once_scope_validate(opt.source) < 0) die_usage("--source: %s", once_errdetail());
    if (once_scope_validate(opt.scope) < 0) die_usage("--scope: %s", once_errdetail());
    if (strlen(opt.prefix) > 32 || once_key_validate(opt.prefix) < 0 || strchr(opt.prefix, ' '))
        die_usage("--prefix: at most 32 visible ASCII characters");
    if (!*opt.secret || strlen(opt.secret) > 4096) die_usage("--secret: 1..4096 bytes");

    bench_catch_signals();

    g_slots = calloc(opt.window, sizeof *g_slots);
    g_ring.cap = opt.window;
    g_ring.done = calloc(opt.window, sizeof *g_ring.done);
    if (!g_slots || !g_ring.done) {
        die("out of memory");
    }
    for (size_t i = 0; i < opt.window; i++) {
        g_slots[i].body = malloc(opt.body + 1);
        g_slots[i].meta = malloc(opt.body + REQ_META_EXTRA);
        if (!g_slots[i].body || !g_slots[i].meta) {
            die("out of memory");
        }
    }

    char shown[512];
    once_store_url_redact(opt.store, shown, sizeof shown);
    once_store *st = NULL;
    int rc = once_store_open(opt.store, &st);
    if (rc < 0) {
        fprintf(stderr, "bench_prefill: cannot open %s: %s (%s)\n", shown, once_strerror(rc), once_errdetail());
        return 1;
    }
    if (wal_max > 0) {
        rc = once_store_set_wal_limit(st, wal_max);
        if (rc < 0) fprintf(stderr, "bench_prefill: --wal-max ignored: %s\n", once_strerror(rc));
    }
    once_store_set_commit_hook(st, on_commit, NULL);

    int failed = 0;
    for (int pass = 0; pass < 2 && !failed; pass++) {
        uint64_t n = pass ? opt.actions : opt.events;
        if (!n) continue;
        const char *what = pass ? "actions" : "events";
        int r = fill(st, pass, n);
        /* Commits of the last operations may still come: a snapshot. */
        pthread_mutex_lock(&g_stats_mu);
        fill_stats s = g_stats;
        pthread_mutex_unlock(&g_stats_mu);
        printf("bench_prefill: %s: %" PRIu64 " written, %" PRIu64 " already there, in %.1f s: %.0f/s; "
               "%zu commits, mean batch %.0f ops, mean commit %.1f ms, slowest %.0f ms (%s %s%s)\n",
               what, s.written, s.existed, s.seconds, (double)(s.written + s.existed) / (s.seconds > 0 ? s.seconds : 1),
               s.commits, s.commits ? (double)s.ops / (double)s.commits : 0.0,
               s.commits ? 1000 * s.commit_s / (double)s.commits : 0.0, 1000 * s.commit_max, pass ? "scope" : "source",
               pass ? opt.scope : opt.source, r < 0 ? "; STOPPED" : "");
        fflush(stdout);
        if (r < 0) failed = 1;
    }
    int64_t wal = 0;
    if (once_store_wal_bytes(st, &wal) == 0) printf("bench_prefill: WAL %.1f MB before close\n", (double)wal / 1048576);
    once_store_close(st); /* waits for what is still queued */
    for (size_t i = 0; i < opt.window; i++) {
        once_reservation_free(&g_slots[i].res);
        free(g_slots[i].body);
        free(g_slots[i].meta);
    }
    free(g_slots);
    free(g_ring.done);
    if (bench_interrupted) return 130;
    return failed ? 1 : 0;
}
