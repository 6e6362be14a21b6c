/*
 * bench_load — an HTTP load generator that reports latency per 5-second
 * window (issue 30: a store's housekeeping stalls show as bad windows, which
 * a whole-run p99 such as wrk's averages away).
 *
 *   bench_load --mode hooks --url http://127.0.0.1:PORT --source gh --secret S --rate 10000 --seconds 60
 *   bench_load --mode proxy --url http://127.0.0.1:PORT --upstream bench --connections 64 --seconds 60
 *
 * Modes:
 *  hooks  POST /v1/hooks/SOURCE, GitHub-style (github_event.h): every event
 *         its own ~1 KB push body and its own X-GitHub-Delivery id,
 *         X-GitHub-Event: push, X-Hub-Signature-256: sha256=HMAC(secret, body).
 *         The answer must be 200 {"status":"accepted"}.
 *  proxy  POST /v1/proxy/UPSTREAM/ with a new Idempotency-Key per request and
 *         a 1 KB JSON body. The answer must be 2xx with Once-Outcome: completed.
 * With --rate R the main stream is an open loop: request i is due at
 * t0 + i / R, whatever happened to the ones before, and its latency runs from
 * that due time (so a stall that holds every connection shows in full rather
 * than as fewer requests: no coordinated omission). Requests that find no free
 * connection wait, late, and their lateness counts. Without --rate it is a
 * closed loop (as wrk -cC): each of the C connections sends its next request
 * when the answer is in, latency from the send.
 * The side stream (--dup-rate R2) is paced at R2/s on its own connections and
 * measured apart: hooks re-send an event already accepted (same delivery id,
 * same body and signature: the answer must be {"status":"duplicate"}), proxy
 * re-sends a completed key (Once-Outcome: replayed). Before the clock starts a
 * few events (keys) are sent and checked, so the side stream has something to
 * repeat from its first request; later it repeats recent ones.
 *
 * Output: one row per window (requests assigned to the window in which their
 * answer came), with what /metrics said over it when --metrics is given
 * (commits/s and their mean time, the largest WAL seen, checkpoints by the
 * writer and in the background: count and summed seconds); totals; the
 * answers that were not right, by status. --csv FILE gets the same rows.
 * --ids FILE gets every --ids-every'th accepted event id (key), for the
 * caller to check they are stored. Bounded: --seconds (at most 3600), a
 * grace period for answers still due, --max-requests. 127.0.0.1 only: the
 * URL's host must be a loopback address. Exit 0 when the run completed
 * (answers right or not: see the errors column), 1 on a setup failure, 2 on
 * a usage error, 130 when interrupted.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bench_common.h"
#include "github_event.h"

#define CONN_MAX 4096
#define RESP_KEEP 256
#define RING 4096      /* recent accepted events (keys) the side stream repeats */
#define SEEDS 8        /* sent before the clock starts */
#define STATUS_MAX 600
#define METRICS_MAX (4u << 20)

typedef enum { MODE_HOOKS = 1, MODE_PROXY } load_mode;

static struct {
    load_mode mode;
    const char *url, *source, *upstream, *secret, *prefix, *csv, *ids;
    double rate, dup_rate, seconds, window, grace, timeout;
    size_t conns, dup_conns, body, ids_every;
    uint64_t max_requests;
    const char *metrics;
    struct curl_slist *extra; /* --header */
} opt = {
    .source = "gh",
    .upstream = "bench",
    .secret = "bench-secret",
    .seconds = 10,
    .window = 5,
    .grace = 10,
    .timeout = 30,
    .conns = 64,
    .dup_conns = 4,
    .body = 1024,
    .ids_every = 100,
    .max_requests = 50000000,
};

/* ---- latencies -------------------------------------------------------- */

typedef struct {
    double *v; /* ms */
    size_t n, cap;
} lats;

static void lats_add(lats *l, double ms) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        double *v = realloc(l->v, cap * sizeof *v);
        if (!v) die("out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = ms;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double p50, p99, max;
} pcts;

/* Nearest-rank percentiles; sorts in place. NaN when empty. */
static pcts lats_pcts(lats *l) {
    pcts p = {NAN, NAN, NAN};
    if (!l->n) return p;
    qsort(l->v, l->n, sizeof *l->v, cmp_double);
    p.p50 = l->v[(l->n * 50 + 99) / 100 - 1];
    p.p99 = l->v[(l->n * 99 + 99) / 100 - 1];
    p.max = l->v[l->n - 1];
    return p;
}

/* ---- the two streams and their transfers -------------------------------- */

typedef struct stream stream;

typedef struct {
    CURL *e;
    stream *s;
    double t_due;
    uint64_t seq; /* of the event (key) sent */
    char id[128];
    char *body;
    size_t body_len;
    struct curl_slist *hdrs;
    char resp[RESP_KEEP + 1];
    size_t resp_len;
    char outcome[32]; /* Once-Outcome */
} xfer;

typedef struct {
    uint64_t sent, done, errors;
    lats l;
} win_stats;

struct stream {
    int side;
    double rate;   /* 0: closed loop */
    size_t nconn;
    xfer *x;
    size_t *freel, nfree;
    uint64_t due;  /* requests due so far (open loop) */
    double t_next; /* when the next is due */
    win_stats w;   /* this window */
    win_stats tot; /* the whole run */
    uint64_t status[STATUS_MAX], transport, wrong;
    char wrong_example[160];
};

static CURLM *g_multi;
static stream g_main = {.side = 0}, g_side = {.side = 1};
static uint64_t g_next_seq; /* next new event (key) */
static uint64_t g_ring[RING];
static size_t g_ring_n, g_ring_head;
static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;
static char g_target[512];
static FILE *g_ids;
static uint64_t g_accepted;

static uint64_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void ring_push(uint64_t seq) {
    g_ring[(g_ring_head + g_ring_n) % RING] = seq;
    if (g_ring_n < RING)
        g_ring_n++;
    else
        g_ring_head = (g_ring_head + 1) % RING;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = sz * n, keep = RESP_KEEP - x->resp_len;
    if (keep > len) keep = len;
    memcpy(x->resp + x->resp_len, p, keep);
    x->resp_len += keep;
    x->resp[x->resp_len] = '\0';
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = sz * n;
    static const char name[] = "once-outcome:";
    if (len > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        size_t i = sizeof name - 1, j = 0;
        while (i < len && p[i] == ' ') i++;
        while (i < len && p[i] != '\r' && p[i] != '\n' && j + 1 < sizeof x->outcome) x->outcome[j++] = p[i++];
        x->outcome[j] = '\0';
    }
    return len;
}

/* The request for event (key) seq: id, body, headers. */
static void xfer_build(xfer *x, uint64_t seq) {
    x->seq = seq;
    if (opt.mode == MODE_HOOKS)
        snprintf(x->id, sizeof x->id, "%s-%s-%" PRIu64, opt.prefix, opt.source, seq);
    else
        snprintf(x->id, sizeof x->id, "%s-%s-%" PRIu64, opt.prefix, opt.upstream, seq);
    x->body_len = gh_event_body(x->body, opt.body + 1, opt.body, x->id, seq);
    if (!x->body_len) die("cannot build the body of %s", x->id);
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    char line[256];
    struct curl_slist *h = NULL;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        snprintf(line, sizeof line, __VA_ARGS__);                                                                      \
        struct curl_slist *t = curl_slist_append(h, line);                                                             \
        if (!t) die("out of memory");                                                                                  \
        h = t;                                                                                                         \
    } while (0)
    ADD("Content-Type: application/json");
    ADD("Expect:"); /* no 100-continue round trip for a 1 KB body */
    if (opt.mode == MODE_HOOKS) {
        char sig[72];
        if (gh_event_sign(opt.secret, x->body, x->body_len, sig) < 0) die("HMAC failed");
        ADD("User-Agent: GitHub-Hookshot/bench");
        ADD("X-GitHub-Delivery: %s", x->id);
        ADD("X-GitHub-Event: push");
        ADD("X-Hub-Signature-256: %s", sig);
    } else {
        ADD("Idempotency-Key: %s", x->id);
    }
    for (struct curl_slist *e = opt.extra; e; e = e->next) ADD("%s", e->data);
#undef ADD
    x->hdrs = h;
    x->resp_len = 0;
    x->resp[0] = '\0';
    x->outcome[0] = '\0';
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->e, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->e, CURLOPT_POSTFIELDSIZE, (long)x->body_len);
}

static void xfer_init(xfer *x, stream *s) {
    x->s = s;
    x->e = curl_easy_init();
    x->body = malloc(opt.body + 1);
    if (!x->e || !x->body) die("out of memory");
    curl_easy_setopt(x->e, CURLOPT_URL, g_target);
    curl_easy_setopt(x->e, CURLOPT_POST, 1L);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, (long)(opt.timeout * 1000));
    curl_easy_setopt(x->e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(x->e, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(x->e, CURLOPT_PROXY, ""); /* never an environment's proxy */
}

static void stream_init(stream *s, size_t nconn, double rate) {
    s->nconn = nconn;
    s->rate = rate;
    s->x = calloc(nconn, sizeof *s->x);
    s->freel = calloc(nconn, sizeof *s->freel);
    if (!s->x || !s->freel) die("out of memory");
    for (size_t i = 0; i < nconn; i++) {
        xfer_init(&s->x[i], s);
        s->freel[i] = nconn - 1 - i;
    }
    s->nfree = nconn;
}

static void stream_start(stream *s, double t_due) {
    xfer *x = &s->x[s->freel[--s->nfree]];
    if (s->side)
        xfer_build(x, g_ring[(g_ring_head + rng_next() % g_ring_n) % RING]);
    else
        xfer_build(x, g_next_seq++);
    x->t_due = t_due;
    CURLMcode mc = curl_multi_add_handle(g_multi, x->e);
    if (mc != CURLM_OK) die("curl_multi_add_handle: %s", curl_multi_strerror(mc));
    s->w.sent++;
    s->tot.sent++;
}

/* Is the answer the one this request must get? */
static int answer_right(const xfer *x, long status) {
    if (status < 200 || status > 299) return 0;
    if (opt.mode == MODE_HOOKS)
        return strstr(x->resp, x->s->side ? "\"duplicate\"" : "\"accepted\"") != NULL;
    return strcmp(x->outcome, x->s->side ? "replayed" : "completed") == 0;
}

static void on_done(CURL *e, CURLcode cc, double t) {
    xfer *x = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
    curl_multi_remove_handle(g_multi, e);
    stream *s = x->s;
    double ms = 1000 * (t - x->t_due);
    long status = 0;
    int bad = 0;
    if (cc != CURLE_OK) {
        s->transport++;
        bad = 1;
        if (!s->wrong_example[0]) snprintf(s->wrong_example, sizeof s->wrong_example, "%s", curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 0 && status < STATUS_MAX) s->status[status]++;
        if (status >= 200 && status <= 299 && !answer_right(x, status)) {
            s->wrong++;
            if (!s->wrong_example[0])
                snprintf(s->wrong_example, sizeof s->wrong_example, "%ld outcome '%s' body %.80s", status, x->outcome,
                         x->resp);
        }
        bad = !answer_right(x, status);
    }
    s->w.done++;
    s->tot.done++;
    lats_add(&s->w.l, ms);
    lats_add(&s->tot.l, ms);
    if (bad) {
        s->w.errors++;
        s->tot.errors++;
    } else if (!s->side) {
        ring_push(x->seq);
        if (g_ids && g_accepted % opt.ids_every == 0) fprintf(g_ids, "%s\n", x->id);
        g_accepted++;
    }
    s->freel[s->nfree++] = (size_t)(x - s->x);
}

/* ---- /metrics, sampled every second -------------------------------------- */

typedef struct {
    int have, has_wal;
    double commit_n, commit_sum, wal;
    int has_ckpt;
    double ckw_n, ckw_sum, ckb_n, ckb_sum;
} msample;

static struct {
    CURL *e;
    int busy;
    char *buf;
    size_t len;
    double next;
    msample last;  /* the newest sample */
    msample begin; /* at the window's start */
    double wal_max;
    int failures;
} g_m;

static size_t on_metrics(char *p, size_t sz, size_t n, void *ud) {
    (void)ud;
    size_t len = sz * n;
    if (g_m.len + len > METRICS_MAX) return 0;
    memcpy(g_m.buf + g_m.len, p, len);
    g_m.len += len;
    g_m.buf[g_m.len] = '\0';
    return len;
}

static void metrics_parse(void) {
    msample m = {.have = 1};
    char *save = NULL;
    for (char *line = strtok_r(g_m.buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strrchr(line, ' ');
        if (!sp || line[0] == '#') continue;
        *sp = '\0';
        double v = strtod(sp + 1, NULL);
        if (!strcmp(line, "once_store_commit_seconds_count")) m.commit_n = v;
        else if (!strcmp(line, "once_store_commit_seconds_sum")) m.commit_sum = v;
        else if (!strcmp(line, "once_store_wal_bytes")) m.wal = v, m.has_wal = 1;
        else if (!strcmp(line, "once_store_checkpoint_seconds_count{by=\"writer\"}")) m.ckw_n = v, m.has_ckpt = 1;
        else if (!strcmp(line, "once_store_checkpoint_seconds_sum{by=\"writer\"}")) m.ckw_sum = v, m.has_ckpt = 1;
        else if (!strcmp(line, "once_store_checkpoint_seconds_count{by=\"background\"}")) m.ckb_n = v, m.has_ckpt = 1;
        else if (!strcmp(line, "once_store_checkpoint_seconds_sum{by=\"background\"}")) m.ckb_sum = v, m.has_ckpt = 1;
    }
    g_m.last = m;
    if (m.wal > g_m.wal_max) g_m.wal_max = m.wal;
    if (!g_m.begin.have) g_m.begin = m;
}

static void metrics_start(double t) {
    g_m.len = 0;
    g_m.buf[0] = '\0';
    g_m.busy = 1;
    g_m.next = t + 1.0;
    CURLMcode mc = curl_multi_add_handle(g_multi, g_m.e);
    if (mc != CURLM_OK) die("curl_multi_add_handle: %s", curl_multi_strerror(mc));
}

static void metrics_done(CURLcode cc) {
    curl_multi_remove_handle(g_multi, g_m.e);
    g_m.busy = 0;
    long status = 0;
    curl_easy_getinfo(g_m.e, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK || status != 200) {
        g_m.failures++;
        return;
    }
    metrics_parse();
}

/* ---- the table ----------------------------------------------------------- */

static FILE *g_csv;

static void fmt_ms(char *out, size_t cap, double v) {
    if (isnan(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.2f", v);
}

static void table_head(void) {
    printf("%6s %7s %7s %8s %8s %8s %9s %6s | %7s %8s %8s %5s", "t_s", "sent", "done", "rate/s", "p50_ms", "p99_ms",
           "max_ms", "errors", "side_n", "side_p99", "side_max", "s_err");
    if (opt.metrics) printf(" | %8s %9s %8s %11s %11s", "commit/s", "commit_ms", "wal_MB", "ckpt_w n/ms", "ckpt_bg n/ms");
    printf("\n");
    if (g_csv) {
        fprintf(g_csv, "t_s,seconds,sent,done,rate,p50_ms,p99_ms,max_ms,errors,side_sent,side_done,side_p50_ms,"
                       "side_p99_ms,side_max_ms,side_errors,commits_per_s,commit_mean_ms,wal_max_bytes,"
                       "ckpt_writer_n,ckpt_writer_ms,ckpt_bg_n,ckpt_bg_ms\n");
    }
}

/* One window's row; resets the window. The last, partial one (the answers
 * that came after the end) is marked "+". */
static void table_row(double t_rel, double secs, int partial) {
    pcts m = lats_pcts(&g_main.w.l), s = lats_pcts(&g_side.w.l);
    char a[32], b[32], c[32], d[32], e[32];
    fmt_ms(a, sizeof a, m.p50);
    fmt_ms(b, sizeof b, m.p99);
    fmt_ms(c, sizeof c, m.max);
    fmt_ms(d, sizeof d, s.p99);
    fmt_ms(e, sizeof e, s.max);
    char tw[32];
    snprintf(tw, sizeof tw, partial ? "%.0f+" : "%.0f", t_rel);
    printf("%6s %7" PRIu64 " %7" PRIu64 " %8.0f %8s %8s %9s %6" PRIu64 " | %7" PRIu64 " %8s %8s %5" PRIu64, tw,
           g_main.w.sent, g_main.w.done, (double)g_main.w.done / secs, a, b, c, g_main.w.errors, g_side.w.done, d, e,
           g_side.w.errors);
    double cps = NAN, cms = NAN, walmb = NAN, kwn = NAN, kwms = NAN, kbn = NAN, kbms = NAN;
    if (opt.metrics && g_m.begin.have && g_m.last.have) {
        msample x = g_m.begin, y = g_m.last;
        double dn = y.commit_n - x.commit_n;
        cps = dn / secs;
        cms = dn > 0 ? 1000 * (y.commit_sum - x.commit_sum) / dn : NAN;
        walmb = y.has_wal ? g_m.wal_max / 1048576 : NAN; /* PostgreSQL: no WAL of ours */
        if (y.has_ckpt) {
            kwn = y.ckw_n - x.ckw_n;
            kwms = 1000 * (y.ckw_sum - x.ckw_sum);
            kbn = y.ckb_n - x.ckb_n;
            kbms = 1000 * (y.ckb_sum - x.ckb_sum);
        }
    }
    if (opt.metrics) {
        char k1[32] = "absent", k2[32] = "absent";
        if (!isnan(kwn)) snprintf(k1, sizeof k1, "%.0f/%.0f", kwn, kwms);
        if (!isnan(kbn)) snprintf(k2, sizeof k2, "%.0f/%.0f", kbn, kbms);
        char wb[32] = "-";
        if (!isnan(walmb)) snprintf(wb, sizeof wb, "%.1f", walmb);
        printf(" | %8.0f %9.2f %8s %11s %11s", cps, cms, wb, k1, k2);
    }
    printf("\n");
    fflush(stdout);
    if (g_csv) {
        fprintf(g_csv,
                "%.0f,%.3f,%" PRIu64 ",%" PRIu64 ",%.1f,%.3f,%.3f,%.3f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
                ",%.3f,%.3f,%.3f,%" PRIu64 ",%.1f,%.3f,%.0f,%.0f,%.1f,%.0f,%.1f\n",
                t_rel, secs, g_main.w.sent, g_main.w.done, (double)g_main.w.done / secs, m.p50, m.p99, m.max,
                g_main.w.errors, g_side.w.sent, g_side.w.done, s.p50, s.p99, s.max, g_side.w.errors, cps, cms,
                isnan(walmb) ? NAN : g_m.wal_max, kwn, kwms, kbn, kbms);
        fflush(g_csv);
    }
    g_main.w.sent = g_main.w.done = g_main.w.errors = g_main.w.l.n = 0;
    g_side.w.sent = g_side.w.done = g_side.w.errors = g_side.w.l.n = 0;
    g_m.begin = g_m.last;
    g_m.wal_max = g_m.last.wal;
}

static void stream_summary(const char *name, stream *s, double secs) {
    pcts p = lats_pcts(&s->tot.l);
    printf("%s: sent %" PRIu64 ", answered %" PRIu64 " (%.0f/s), p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
           "not right %" PRIu64,
           name, s->tot.sent, s->tot.done, (double)s->tot.done / secs, p.p50, p.p99, p.max, s->tot.errors);
    int any = 0;
    for (int i = 0; i < STATUS_MAX; i++) {
        if (!s->status[i] || (i >= 200 && i <= 299)) continue;
        printf("%s%d: %" PRIu64, any ? ", " : " (status ", i, s->status[i]);
        any = 1;
    }
    if (any) printf(")");
    if (s->transport) printf(" (no answer: %" PRIu64 ")", s->transport);
    if (s->wrong) printf(" (2xx but not %s: %" PRIu64 ")", opt.mode == MODE_HOOKS ? (s->side ? "duplicate" : "accepted")
                                                                                   : (s->side ? "replayed" : "completed"),
                         s->wrong);
    if (s->wrong_example[0]) printf("; first: %s", s->wrong_example);
    printf("\n");
}

/* ---- seeds: events (keys) the side stream can repeat from the start ------- */

static void seed(void) {
    stream tmp = {.side = 0};
    xfer x = {0};
    xfer_init(&x, &tmp);
    for (int i = 0; i < SEEDS; i++) {
        xfer_build(&x, g_next_seq++);
        CURLcode cc = curl_easy_perform(x.e);
        long status = 0;
        curl_easy_getinfo(x.e, CURLINFO_RESPONSE_CODE, &status);
        if (cc != CURLE_OK) die("the first request to %s failed: %s", g_target, curl_easy_strerror(cc));
        if (!answer_right(&x, status))
            die("the first new %s answered %ld, outcome '%s', body %.200s", opt.mode == MODE_HOOKS ? "event" : "key",
                status, x.outcome, x.resp);
        ring_push(x.seq);
        if (g_ids) fprintf(g_ids, "%s\n", x.id);
    }
    curl_slist_free_all(x.hdrs);
    curl_easy_cleanup(x.e);
    free(x.body);
}

/* ---- options ------------------------------------------------------------- */

static void usage(void) {
    puts("usage: bench_load --mode hooks|proxy --url http://127.0.0.1:PORT [options]\n"
         "  --source NAME        hooks: the source (POST /v1/hooks/NAME) [gh]\n"
         "  --secret S           hooks: its secret (X-Hub-Signature-256) [bench-secret]\n"
         "  --upstream NAME      proxy: the upstream (POST /v1/proxy/NAME/) [bench]\n"
         "  --rate R             new events (keys) per second, open loop; 0 = closed loop [0]\n"
         "  --connections C      keep-alive connections of the main stream [64]\n"
         "  --seconds S          length of the run (1..3600) [10]\n"
         "  --dup-rate R2        duplicates (hooks) or replays (proxy) per second, measured apart [0]\n"
         "  --dup-connections D  their connections [4]\n"
         "  --window W           seconds per row [5]\n"
         "  --metrics URL        GET it every second: commits, WAL, checkpoints per row\n"
         "  --csv FILE           the rows as CSV\n"
         "  --ids FILE           every Nth accepted event id (key), one a line, seeds included\n"
         "  --ids-every N        [100]\n"
         "  --prefix P           ids (keys) are P-NAME-SEQ [time and pid]\n"
         "  --body BYTES         request body size (320..65536) [1024]\n"
         "  --header 'N: V'      one more request header (repeatable), e.g. an Authorization\n"
         "  --grace S            after the run, how long answers still due are awaited [10]\n"
         "  --timeout S          one request's limit [30]\n"
         "  --max-requests N     main-stream requests at most [50000000]");
}

static double parse_num(const char *name, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) die_usage("%s must be a number in %g..%g", name, lo, hi);
    return x;
}

static int loopback_url(const char *url) {
    CURLU *u = curl_url();
    char *host = NULL, *scheme = NULL;
    int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK && strcmp(scheme, "http") == 0 &&
             (strncmp(host, "127.", 4) == 0 || strcmp(host, "[::1]") == 0 || strcmp(host, "localhost") == 0);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return ok;
}

int main(int argc, char **argv) {
    bench_prog = "bench_load";
    static const struct option longopts[] = {
        {"mode", required_argument, 0, 'm'},       {"url", required_argument, 0, 'u'},
        {"source", required_argument, 0, 's'},     {"secret", required_argument, 0, 'k'},
        {"upstream", required_argument, 0, 'U'},   {"rate", required_argument, 0, 'r'},
        {"connections", required_argument, 0, 'c'}, {"seconds", required_argument, 0, 'd'},
        {"dup-rate", required_argument, 0, 'R'},   {"dup-connections", required_argument, 0, 'C'},
        {"window", required_argument, 0, 'w'},     {"metrics", required_argument, 0, 'M'},
        {"csv", required_argument, 0, 'o'},        {"ids", required_argument, 0, 'i'},
        {"ids-every", required_argument, 0, 'I'},  {"prefix", required_argument, 0, 'p'},
        {"body", required_argument, 0, 'b'},       {"header", required_argument, 0, 'H'},
        {"grace", required_argument, 0, 'g'},      {"timeout", required_argument, 0, 't'},
        {"max-requests", required_argument, 0, 'n'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (!strcmp(optarg, "hooks")) opt.mode = MODE_HOOKS;
            else if (!strcmp(optarg, "proxy")) opt.mode = MODE_PROXY;
            else die_usage("--mode is hooks or proxy");
            break;
        case 'u': opt.url = optarg; break;
        case 's': opt.source = optarg; break;
        case 'k': opt.secret = optarg; break;
        case 'U': opt.upstream = optarg; break;
        case 'r': opt.rate = parse_num("--rate", optarg, 0, 1e6); break;
        case 'c': opt.conns = (size_t)parse_num("--connections", optarg, 1, CONN_MAX); break;
        case 'd': opt.seconds = parse_num("--seconds", optarg, 1, 3600); break;
        case 'R': opt.dup_rate = parse_num("--dup-rate", optarg, 0, 1e6); break;
        case 'C': opt.dup_conns = (size_t)parse_num("--dup-connections", optarg, 1, CONN_MAX); break;
        case 'w': opt.window = parse_num("--window", optarg, 0.1, 3600); break;
        case 'M': opt.metrics = optarg; break;
        case 'o': opt.csv = optarg; break;
        case 'i': opt.ids = optarg; break;
        case 'I': opt.ids_every = (size_t)parse_num("--ids-every", optarg, 1, 1e9); break;
        case 'p': opt.prefix = optarg; break;
        case 'b': opt.body = (size_t)parse_num("--body", optarg, GH_EVENT_BODY_MIN, 65536); break;
        case 'H': {
            struct curl_slist *t = curl_slist_append(opt.extra, optarg);
            if (!t || !strchr(optarg, ':')) die_usage("--header wants 'Name: value'");
            opt.extra = t;
            break;
        }
        case 'g': opt.grace = parse_num("--grace", optarg, 0, 600); break;
        case 't': opt.timeout = parse_num("--timeout", optarg, 0.1, 600); break;
        case 'n': opt.max_requests = (uint64_t)parse_num("--max-requests", optarg, 1, 1e9); break;
        case 'h': usage(); return 0;
        default: die_usage("unknown option");
        }
    }
    if (optind < argc) die_usage("unexpected argument '%s'", argv[optind]);
    if (!opt.mode) die_usage("--mode is required");
    if (!opt.url) die_usage("--url is required");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) die("curl_global_init failed");
    if (!loopback_url(opt.url)) die_usage("--url must be http:// on a loopback address (127.0.0.1)");
    if (opt.metrics && !loopback_url(opt.metrics)) die_usage("--metrics must be http:// on a loopback address");
    const char *name = opt.mode == MODE_HOOKS ? opt.source : opt.upstream;
    if (!*name || strlen(name) > 64 || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(name))
        die_usage("--source / --upstream: 1-64 of [A-Za-z0-9._-]");
    char prefix[64];
    if (!opt.prefix) {
        snprintf(prefix, sizeof prefix, "L%lx-%ld", (long)time(NULL), (long)getpid());
        opt.prefix = prefix;
    }
    if (strlen(opt.prefix) > 48 || strspn(opt.prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
                                       strlen(opt.prefix))
        die_usage("--prefix: at most 48 of [A-Za-z0-9._-]");
    size_t ul = strlen(opt.url);
    while (ul > 0 && opt.url[ul - 1] == '/') ul--; /* no double slash */
    int tl = snprintf(g_target, sizeof g_target, "%.*s/v1/%s/%s%s", (int)ul, opt.url,
                      opt.mode == MODE_HOOKS ? "hooks" : "proxy", name, opt.mode == MODE_PROXY ? "/" : "");
    if (tl < 0 || (size_t)tl >= sizeof g_target) die_usage("--url is too long");

    bench_catch_signals();
    signal(SIGPIPE, SIG_IGN);

    if (opt.csv && !(g_csv = fopen(opt.csv, "w"))) die("cannot write %s: %s", opt.csv, strerror(errno));
    if (opt.ids && !(g_ids = fopen(opt.ids, "w"))) die("cannot write %s: %s", opt.ids, strerror(errno));

    g_multi = curl_multi_init();
    if (!g_multi) die("curl_multi_init failed");
    size_t total_conns = opt.conns + (opt.dup_rate > 0 ? opt.dup_conns : 0) + 1;
    curl_multi_setopt(g_multi, CURLMOPT_MAXCONNECTS, (long)total_conns);
    curl_multi_setopt(g_multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)total_conns);

    seed();
    stream_init(&g_main, opt.conns, opt.rate);
    if (opt.dup_rate > 0) stream_init(&g_side, opt.dup_conns, opt.dup_rate);

    if (opt.metrics) {
        g_m.e = curl_easy_init();
        g_m.buf = malloc(METRICS_MAX + 1);
        if (!g_m.e || !g_m.buf) die("out of memory");
        curl_easy_setopt(g_m.e, CURLOPT_URL, opt.metrics);
        curl_easy_setopt(g_m.e, CURLOPT_WRITEFUNCTION, on_metrics);
        curl_easy_setopt(g_m.e, CURLOPT_TIMEOUT_MS, 5000L);
        curl_easy_setopt(g_m.e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(g_m.e, CURLOPT_PROXY, "");
        /* The window's first sample, before the clock starts. */
        if (curl_easy_perform(g_m.e) != CURLE_OK) die("GET %s failed", opt.metrics);
        metrics_parse();
        g_m.wal_max = g_m.last.wal;
    }

    /* A timer for the next due request, finer than the poll's milliseconds. */
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tfd < 0) die("timerfd_create: %s", strerror(errno));

    printf("# bench_load %s -> %s: %s, %zu connections, %.0f s, windows of %.0f s; side stream %.0f/s on %zu "
           "connections; prefix %s\n",
           opt.mode == MODE_HOOKS ? "hooks" : "proxy", g_target,
           opt.rate > 0 ? "open loop" : "closed loop", opt.conns, opt.seconds, opt.window, opt.dup_rate,
           opt.dup_rate > 0 ? opt.dup_conns : 0, opt.prefix);
    if (opt.rate > 0) printf("# main stream paced at %.0f/s; latency from each request's due time\n", opt.rate);
    table_head();

    double t0 = bench_now(), t_end = t0 + opt.seconds, t_hard = t_end + opt.grace;
    double t_win = t0, last_t = t0;
    g_main.t_next = t0;
    g_side.t_next = t0;
    if (opt.metrics) g_m.next = t0 + 1.0;
    int running = 0;
    for (;;) {
        double t = bench_now();
        last_t = t;
        if (bench_interrupted) break;
        /* Start what is due. */
        if (t < t_end) {
            if (g_main.rate > 0) {
                while (g_main.nfree > 0 && g_main.t_next <= t && g_main.tot.sent < opt.max_requests) {
                    stream_start(&g_main, g_main.t_next);
                    g_main.t_next = t0 + (double)(++g_main.due) / g_main.rate;
                }
            } else {
                while (g_main.nfree > 0 && g_main.tot.sent < opt.max_requests) stream_start(&g_main, t);
            }
            if (g_side.rate > 0) {
                while (g_side.nfree > 0 && g_side.t_next <= t) {
                    stream_start(&g_side, g_side.t_next);
                    g_side.t_next = t0 + (double)(++g_side.due) / g_side.rate;
                }
            }
        } else if (g_main.rate > 0) {
            /* Requests due before the end but still waiting for a connection. */
            while (g_main.nfree > 0 && g_main.t_next < t_end && g_main.tot.sent < opt.max_requests) {
                stream_start(&g_main, g_main.t_next);
                g_main.t_next = t0 + (double)(++g_main.due) / g_main.rate;
            }
        }
        if (opt.metrics && !g_m.busy && t >= g_m.next) metrics_start(t);
        CURLMcode mc = curl_multi_perform(g_multi, &running);
        if (mc != CURLM_OK) die("curl_multi_perform: %s", curl_multi_strerror(mc));
        CURLMsg *msg;
        int left;
        double td = bench_now();
        while ((msg = curl_multi_info_read(g_multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            if (msg->easy_handle == g_m.e)
                metrics_done(msg->data.result);
            else
                on_done(msg->easy_handle, msg->data.result, td);
        }
        t = bench_now();
        /* A window ends: its row. */
        while (t >= t_win + opt.window && t_win + opt.window <= t_end + 1e-9) {
            table_row(t_win - t0, opt.window, 0);
            t_win += opt.window;
        }
        int busy = g_main.nfree < g_main.nconn || (g_side.nconn && g_side.nfree < g_side.nconn);
        int more_due = g_main.rate > 0 && g_main.t_next < t_end && g_main.tot.sent < opt.max_requests;
        if (t >= t_end && !busy && !more_due) break;
        if (t >= t_hard) break;
        /* Sleep until the next due request, the next sample, the window's end or curl's timeout. */
        double wake = t_win + opt.window;
        if (t < t_end) {
            if (g_main.rate > 0 && g_main.nfree > 0 && g_main.t_next < wake) wake = g_main.t_next;
            if (g_side.rate > 0 && g_side.nfree > 0 && g_side.t_next < wake) wake = g_side.t_next;
        }
        if (opt.metrics && !g_m.busy && g_m.next < wake) wake = g_m.next;
        if (t_hard < wake) wake = t_hard;
        long ctmo = -1;
        curl_multi_timeout(g_multi, &ctmo);
        double dt = wake - t;
        if (ctmo >= 0 && ctmo / 1000.0 < dt) dt = ctmo / 1000.0;
        if (dt <= 0) continue;
        struct itimerspec its = {0};
        double when = t + dt;
        its.it_value.tv_sec = (time_t)when;
        its.it_value.tv_nsec = (long)((when - (double)(time_t)when) * 1e9);
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        struct curl_waitfd wfd = {.fd = tfd, .events = CURL_WAIT_POLLIN};
        int nfds = 0;
        mc = curl_multi_poll(g_multi, &wfd, 1, (int)(dt * 1000) + 2, &nfds);
        if (mc != CURLM_OK) die("curl_multi_poll: %s", curl_multi_strerror(mc));
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN) die("timerfd read: %s", strerror(errno));
    }
    /* The last, partial window (answers that came after the end). */
    double tail = last_t - t_win;
    if (g_main.w.done || g_side.w.done || g_main.w.sent) table_row(t_win - t0, tail > 0.001 ? tail : 0.001, 1);
    /* What never got an answer within the grace period counts as not right. */
    uint64_t unanswered = g_main.tot.sent - g_main.tot.done;
    uint64_t side_unanswered = g_side.tot.sent - g_side.tot.done;
    g_main.tot.errors += unanswered;
    g_side.tot.errors += side_unanswered;
    uint64_t unsent = 0;
    if (g_main.rate > 0) {
        uint64_t want = (uint64_t)(opt.seconds * g_main.rate);
        if (want > opt.max_requests) want = opt.max_requests;
        unsent = want > g_main.tot.sent ? want - g_main.tot.sent : 0;
    }
    double secs = (last_t < t_end ? last_t : t_end) - t0;
    printf("\n");
    stream_summary(opt.mode == MODE_HOOKS ? "new events" : "new keys", &g_main, secs);
    if (opt.dup_rate > 0) stream_summary(opt.mode == MODE_HOOKS ? "duplicates" : "replays", &g_side, secs);
    if (opt.rate > 0)
        printf("pacing: %" PRIu64 " due at %.0f/s, %" PRIu64 " sent, %" PRIu64 " never sent (no free connection in time)\n",
               (uint64_t)(opt.seconds * opt.rate), opt.rate, g_main.tot.sent, unsent);
    if (unanswered || side_unanswered)
        printf("unanswered after the %.0f s grace: %" PRIu64 " new, %" PRIu64 " side (counted as not right)\n",
               opt.grace, unanswered, side_unanswered);
    printf("accepted: %" PRIu64 " new %s in the run (+%d seeds before it)\n", g_accepted,
           opt.mode == MODE_HOOKS ? "events" : "keys", SEEDS);
    if (opt.metrics && g_m.failures) printf("metrics: %d samples failed\n", g_m.failures);
    /* Its own CPU: on a small machine the load generator competes with the server. */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                     (double)ru.ru_stime.tv_usec * 1e-6;
        printf("bench_load cpu: %.1f s (%.0f%% of one core over %.0f s)\n", cpu, 100 * cpu / (last_t - t0), last_t - t0);
    }
    if (bench_interrupted) printf("interrupted\n");
    if (g_csv) fclose(g_csv);
    if (g_ids) fclose(g_ids);
    /* The process ends here: the kernel closes the connections; the transfers
     * still in flight (after the grace) are abandoned, not freed one by one. */
    close(tfd);
    return bench_interrupted ? 130 : 0;
}
