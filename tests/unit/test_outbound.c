/*
 * test_outbound.c — the hand-offs of src/server/core/outbound.c against a
 * real HTTP server on loopback (started here, on a thread of its own): a
 * submitted call is the outbound thread's until its done callback, which
 * runs exactly once per call, on that thread (not the submitter's); a call
 * submitted after outbound_stop is refused and nothing is sent; a stop with
 * calls in flight ends each of them exactly once, never as answered
 * (docs/guarantees.md: what may have been sent is ambiguous, never resent).
 */
#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "common/clock.h"
#include "server/core/outbound.h"

#define WAIT_MS 10000 /* the longest any wait here takes before the test fails */

/* ---- a loopback HTTP/1.1 server --------------------------------------------------- */

#define SRV_CONNS 64

typedef struct srv_conn {
    int fd; /* -1: free */
    char buf[8192];
    size_t len;
    int hung; /* asked /hang: answered never */
} srv_conn;

/* One thread, poll over the listener and its connections. GET or POST
 * /ok answers 200 "ok" (keep-alive); /hang is read and never answered. */
typedef struct tsrv {
    int lfd;
    int port;
    int stop[2];
    pthread_t thread;
    atomic_int requests; /* requests read whole */
    atomic_int hangs;    /* of which /hang */
    srv_conn conns[SRV_CONNS];
} tsrv;

static void conn_close(srv_conn *c)
{
    close(c->fd);
    c->fd = -1;
    c->len = 0;
    c->hung = 0;
}

/* Answers each whole request in c->buf. 0, or -1 to close. */
static int conn_serve(tsrv *s, srv_conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end)
            return c->len < sizeof c->buf ? 0 : -1;
        size_t head = (size_t)(end - c->buf) + 4;
        size_t body = 0;
        char *cl = memmem(c->buf, head, "Content-Length:", 15);
        if (cl)
            body = (size_t)strtoul(cl + 15, NULL, 10);
        if (head + body > sizeof c->buf)
            return -1;
        if (c->len < head + body)
            return 0;
        int hang = memmem(c->buf, head, " /hang ", 7) != NULL;
        memmove(c->buf, c->buf + head + body, c->len - head - body);
        c->len -= head + body;
        atomic_fetch_add(&s->requests, 1);
        if (hang) {
            atomic_fetch_add(&s->hangs, 1);
            c->hung = 1;
            continue;
        }
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
        if (write(c->fd, ok, sizeof ok - 1) != (ssize_t)(sizeof ok - 1))
            return -1;
    }
}

static void *tsrv_main(void *arg)
{
    tsrv *s = arg;
    struct pollfd pf[SRV_CONNS + 2];
    for (;;) {
        pf[0] = (struct pollfd){s->stop[0], POLLIN, 0};
        pf[1] = (struct pollfd){s->lfd, POLLIN, 0};
        for (int i = 0; i < SRV_CONNS; i++)
            pf[i + 2] = (struct pollfd){s->conns[i].fd, POLLIN, 0};
        if (poll(pf, SRV_CONNS + 2, 1000) < 0 && errno != EINTR)
            break;
        if (pf[0].revents)
            break;
        if (pf[1].revents & POLLIN) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            int placed = 0;
            for (int i = 0; fd >= 0 && i < SRV_CONNS && !placed; i++)
                if (s->conns[i].fd < 0) {
                    s->conns[i].fd = fd;
                    placed = 1;
                }
            if (fd >= 0 && !placed)
                close(fd);
        }
        for (int i = 0; i < SRV_CONNS; i++) {
            srv_conn *c = &s->conns[i];
            if (c->fd < 0 || !(pf[i + 2].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
            if (n <= 0) {
                conn_close(c);
                continue;
            }
            c->len += (size_t)n;
            if (conn_serve(s, c) < 0)
                conn_close(c);
        }
    }
    for (int i = 0; i < SRV_CONNS; i++)
        if (s->conns[i].fd >= 0)
            conn_close(&s->conns[i]);
    return NULL;
}

static tsrv *tsrv_start(void)
{
    tsrv *s = calloc(1, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < SRV_CONNS; i++)
        s->conns[i].fd = -1;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->lfd, 64), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
    assert_int_equal(pthread_create(&s->thread, NULL, tsrv_main, s), 0);
    return s;
}

static void tsrv_free(tsrv *s)
{
    assert_int_equal(write(s->stop[1], "x", 1), 1);
    pthread_join(s->thread, NULL);
    close(s->stop[0]);
    close(s->stop[1]);
    close(s->lfd);
    free(s);
}

/* A loopback port nothing listens on (bound, then closed). */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- calls and what their done saw ------------------------------------------------ */

#define NCALLS 24

typedef struct call_rec {
    out_call call;
    char url[128];
    atomic_int dones;     /* times done ran */
    pthread_t done_thread;
    char done_name[16];   /* the name of the thread done ran on */
} call_rec;

typedef struct calls {
    outbound *ob;
    call_rec rec[NCALLS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ended;   /* dones run, all calls */
    int stopped; /* outbound_stop ran (it runs once) */
} calls;

static calls *g; /* the done callback's way back (ctx is the call_rec) */

static void on_done(out_call *c)
{
    call_rec *r = c->ctx;
    r->done_thread = pthread_self();
    pthread_getname_np(pthread_self(), r->done_name, sizeof r->done_name);
    atomic_fetch_add(&r->dones, 1);
    pthread_mutex_lock(&g->mu);
    g->ended++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void call_init(call_rec *r, const char *method, int port, const char *path, int64_t timeout_ms)
{
    memset(&r->call, 0, sizeof r->call);
    snprintf(r->url, sizeof r->url, "http://127.0.0.1:%d%s", port, path);
    r->call.method = method;
    r->call.url = r->url;
    r->call.timeout_ms = timeout_ms;
    r->call.max_response = 1 << 20;
    r->call.done = on_done;
    r->call.ctx = r;
    if (strcmp(method, "POST") == 0) {
        static const uint8_t body[] = "{\"n\":1}";
        r->call.body = body;
        r->call.body_len = sizeof body - 1;
    }
}

/* Waits (bounded) until n dones ran in all; 1 if they did. */
static int wait_ended(int n)
{
    int64_t deadline = clock_mono_ms() + WAIT_MS;
    pthread_mutex_lock(&g->mu);
    while (g->ended < n && clock_mono_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    int ok = g->ended >= n;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* Waits (bounded) until *v reaches n. */
static int wait_atomic(atomic_int *v, int n)
{
    int64_t deadline = clock_mono_ms() + WAIT_MS;
    while (atomic_load(v) < n && clock_mono_ms() < deadline)
        th_sleep_ms(5);
    return atomic_load(v) >= n;
}

static void stop(calls *c)
{
    outbound_stop(c->ob);
    c->stopped = 1;
}

static int setup(void **state)
{
    calls *c = calloc(1, sizeof *c);
    assert_non_null(c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    assert_int_equal(outbound_start(&c->ob), ONCE_OK);
    g = c;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    calls *c = *state;
    if (!c->stopped)
        outbound_stop(c->ob);
    outbound_free(c->ob);
    for (int i = 0; i < NCALLS; i++)
        out_call_clear(&c->rec[i].call);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    g = NULL;
    return 0;
}

/* Every call submitted ends once, answered, on the outbound thread; the
 * server saw each request once. */
static void test_done_once_on_outbound_thread(void **state)
{
    calls *c = *state;
    tsrv *s = tsrv_start();
    for (int i = 0; i < NCALLS; i++) {
        call_init(&c->rec[i], i % 2 ? "POST" : "GET", s->port, "/ok", 5000);
        th_assert_rc(outbound_submit(c->ob, &c->rec[i].call), ONCE_OK);
    }
    if (!wait_ended(NCALLS))
        fail_msg("%d of %d calls ended within %d ms", g->ended, NCALLS, WAIT_MS);
    pthread_t first = c->rec[0].done_thread;
    for (int i = 0; i < NCALLS; i++) {
        call_rec *r = &c->rec[i];
        assert_int_equal(atomic_load(&r->dones), 1);
        if (r->call.kind != OUT_ANSWERED)
            fail_msg("call %d: kind %d (%s), want answered", i, r->call.kind, r->call.error);
        assert_int_equal(r->call.status, 200);
        assert_true(th_mem_eq(r->call.resp_body.data, r->call.resp_body.len, "ok", 2));
        /* On the outbound thread: not this one, the same for every call. */
        assert_false(pthread_equal(r->done_thread, pthread_self()));
        assert_true(pthread_equal(r->done_thread, first));
        th_assert_str(r->done_name, "once-outbound");
    }
    assert_int_equal(atomic_load(&s->requests), NCALLS);
    assert_int_equal(outbound_in_flight(c->ob), 0);
    /* The stop ends nothing a second time. */
    stop(c);
    for (int i = 0; i < NCALLS; i++)
        assert_int_equal(atomic_load(&c->rec[i].dones), 1);
    assert_int_equal(g->ended, NCALLS);
    tsrv_free(s);
}

/* After outbound_stop, a submit is refused (ONCE_ECLOSED): its done never
 * runs, and nothing reaches the upstream. */
static void test_submit_after_stop_refused(void **state)
{
    calls *c = *state;
    tsrv *s = tsrv_start();
    /* One call before the stop shows the path works. */
    call_init(&c->rec[0], "GET", s->port, "/ok", 5000);
    th_assert_rc(outbound_submit(c->ob, &c->rec[0].call), ONCE_OK);
    assert_true(wait_ended(1));
    assert_int_equal(c->rec[0].call.kind, OUT_ANSWERED);
    stop(c);
    for (int i = 1; i < NCALLS; i++) {
        call_init(&c->rec[i], "POST", s->port, "/ok", 5000);
        th_assert_rc(outbound_submit(c->ob, &c->rec[i].call), ONCE_ECLOSED);
    }
    assert_int_equal(outbound_in_flight(c->ob), 0);
    th_sleep_ms(300); /* what would have been sent had time to arrive */
    for (int i = 1; i < NCALLS; i++)
        assert_int_equal(atomic_load(&c->rec[i].dones), 0);
    assert_int_equal(g->ended, 1);
    assert_int_equal(atomic_load(&s->requests), 1);
    tsrv_free(s);
}

/* A stop with calls in flight (sent, unanswered) ends each of them once,
 * on the outbound thread, as ambiguous: never answered. */
static void test_stop_ends_calls_in_flight(void **state)
{
    calls *c = *state;
    tsrv *s = tsrv_start();
    enum { HUNG = 8 };
    for (int i = 0; i < HUNG; i++) {
        call_init(&c->rec[i], i % 2 ? "POST" : "GET", s->port, "/hang", 60000);
        th_assert_rc(outbound_submit(c->ob, &c->rec[i].call), ONCE_OK);
    }
    /* All of them reached the server: they are sent, and no answer comes. */
    if (!wait_atomic(&s->hangs, HUNG))
        fail_msg("the server saw %d of %d requests within %d ms", atomic_load(&s->hangs), HUNG, WAIT_MS);
    assert_int_equal(outbound_in_flight(c->ob), HUNG);
    assert_int_equal(g->ended, 0);
    int64_t t0 = clock_mono_ms();
    stop(c);
    assert_true(clock_mono_ms() - t0 < WAIT_MS); /* the stop does not wait for the 60 s timeouts */
    /* outbound_stop returned: every done has run. */
    assert_int_equal(g->ended, HUNG);
    for (int i = 0; i < HUNG; i++) {
        call_rec *r = &c->rec[i];
        assert_int_equal(atomic_load(&r->dones), 1);
        if (r->call.kind == OUT_ANSWERED || r->call.kind == OUT_TOO_LARGE)
            fail_msg("call %d ended kind %d after the stop, want not answered", i, r->call.kind);
        /* It was sent: ambiguous, never "not sent" (that would be released, and retried). */
        assert_int_equal(r->call.kind, OUT_AMBIGUOUS);
        assert_true(strlen(r->call.error) > 0);
        th_assert_str(r->done_name, "once-outbound");
    }
    assert_int_equal(outbound_in_flight(c->ob), 0);
    th_sleep_ms(100);
    assert_int_equal(g->ended, HUNG); /* and nothing ends twice later */
    assert_int_equal(atomic_load(&s->requests), HUNG); /* nothing was resent */
    tsrv_free(s);
}

/* A call whose upstream refuses the connection ends once, not sent. */
static void test_refused_not_sent(void **state)
{
    calls *c = *state;
    call_init(&c->rec[0], "POST", closed_port(), "/ok", 5000);
    th_assert_rc(outbound_submit(c->ob, &c->rec[0].call), ONCE_OK);
    assert_true(wait_ended(1));
    assert_int_equal(atomic_load(&c->rec[0].dones), 1);
    assert_int_equal(c->rec[0].call.kind, OUT_NOT_SENT);
    th_assert_str(c->rec[0].done_name, "once-outbound");
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    /* Loopback only: a proxy from the environment would take the calls. */
    static const char *const proxies[] = {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                                          "ALL_PROXY"};
    for (size_t i = 0; i < sizeof proxies / sizeof proxies[0]; i++)
        unsetenv(proxies[i]);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_done_once_on_outbound_thread),
        T(test_submit_after_stop_refused),
        T(test_stop_ends_calls_in_flight),
        T(test_refused_not_sent),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
