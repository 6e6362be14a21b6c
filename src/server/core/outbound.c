/*
 * outbound.c — upstream HTTP calls on libcurl's multi interface (see
 * outbound.h). The one rule that matters for exactly-once: a failure before
 * the request left is not the same as one after it. The first is released
 * (certainly not done); the second is ambiguous and must never be resent.
 *
 * The thread waits in epoll on the sockets curl names (the multi_socket
 * API): each wake-up costs what became ready, not a poll of every
 * connection and a pass over every transfer, which at a few thousand calls
 * a second was a quarter of the gateway's CPU.
 */
#include "json/action_json.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/sse.h"
#include "server/core/outbound.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "once/once.h"

#define HEADERS_MAX (256u * 1024)

/* Easy handles kept for reuse: curl_easy_init allocates and zeroes tens
 * of KB per handle (the handle and its 16 KiB receive buffer), once per call
 * before; a reset handle keeps them. Enough for the calls of a burst. */
#define OB_IDLE_MAX 128

/* Who owns a call: the submitter until outbound_submit queues it; from then
 * the outbound thread (ob->thread), until its done callback has run, once;
 * then the submitter again. in_flight counts the calls between the two
 * (queued or running), so it is never below the queue's length, and it is 0
 * once the thread has ended (nothing is queued after stop). */
struct outbound {
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t mu;
    out_call **queue;   /* submitted, not yet added to the multi handle */
    size_t nqueue;
    size_t capqueue;
    int stop;
    size_t in_flight;
    size_t resumes;          /* outbound_resume calls not yet acted on */
    struct transfer *active; /* running transfers; outbound thread only */
    int epfd;                /* curl's sockets and wakefd */
    int wakefd;              /* eventfd: a call queued, a stream to resume, the stop */
    long timer_ms;           /* curl's timer: -1 none (outbound thread only) */
    double timer_at;         /* when it is due, clock_mono_seconds */
    CURL *idle[OB_IDLE_MAX]; /* easy handles reset for the next call (outbound thread only) */
    size_t nidle;
};

/* Per-transfer state that only the outbound thread touches. */
typedef struct transfer {
    struct transfer *prev, *next;
    out_call *call;
    CURL *easy;
    struct curl_slist *slist;
    json_t *headers;
    int too_large;
    int stream_checked; /* the first body byte decided whether it is a stream */
    int stream_failed;  /* the stream hooks ran out of memory */
    int paused;         /* the stream hooks said OUT_STREAM_PAUSE */
    int sends;      /* times curl was about to send the request on a connection */
    double t0;
    char errbuf[CURL_ERROR_SIZE]; /* curl's detail of a failure */
} transfer;

/* Hop-by-hop headers belong to one connection, not to the answer. */
static int header_is_hop(const char *name, size_t n)
{
    static const char *const hop[] = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                                      "te", "trailer", "trailers", "transfer-encoding", "upgrade",
                                      "content-length"};
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (strlen(hop[i]) == n && strncasecmp(hop[i], name, n) == 0)
            return 1;
    return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    transfer *t = arg;
    size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new status line (after 100 Continue, say): start over. */
        json_array_clear(t->headers);
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    size_t nlen = (size_t)(colon - p);
    const char *v = colon + 1;
    const char *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (nlen == 0 || header_is_hop(p, nlen))
        return len;
    if (json_array_size(t->headers) >= 200)
        return len; /* enough; an upstream that sends more is misbehaving */
    json_t *pair = json_array();
    if (!pair || json_array_append_new(pair, json_new_lossy(p, nlen)) < 0 ||
        json_array_append_new(pair, json_new_lossy(v, (size_t)(end - v))) < 0 ||
        json_array_append_new(t->headers, pair) < 0)
        return 0; /* out of memory: abort the transfer */
    return len;
}

/* The answer's headers as the call keeps them: a JSON array of pairs
 * ("[]" when they cannot be written). */
static void headers_keep(transfer *t)
{
    out_call *c = t->call;
    c->resp_headers.len = 0;
    char *dump = json_dumps(t->headers, JSON_COMPACT);
    if (!dump || buf_append_str(&c->resp_headers, dump, HEADERS_MAX) < 0) {
        c->resp_headers.len = 0;
        buf_append_str(&c->resp_headers, "[]", HEADERS_MAX);
    }
    free(dump);
}

/* Does the answer say Content-Type: text/event-stream? */
static int answer_is_stream(const transfer *t)
{
    size_t i;
    json_t *pair;
    json_array_foreach(t->headers, i, pair)
    {
        const char *name = json_string_value(json_array_get(pair, 0));
        if (name && strcasecmp(name, "Content-Type") == 0)
            return sse_content_type(json_string_value(json_array_get(pair, 1)));
    }
    return 0;
}

/* At the first body byte: a caller with stream hooks may take an event
 * stream. */
static void stream_check(transfer *t)
{
    out_call *c = t->call;
    t->stream_checked = 1;
    if (!c->stream || !answer_is_stream(t))
        return;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &c->status);
    headers_keep(t);
    int taken = c->stream->start(c);
    if (taken < 0)
        t->stream_failed = 1;
    c->streamed = taken > 0;
}

/* A piece of a taken stream: relayed, and recorded while it fits. */
static size_t on_stream_body(transfer *t, const char *p, size_t len)
{
    out_call *c = t->call;
    int rc = c->stream->data(c, (const uint8_t *)p, len);
    if (rc == OUT_STREAM_PAUSE) {
        t->paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (rc != OUT_STREAM_TAKEN) {
        t->stream_failed = 1;
        return 0;
    }
    c->stream_bytes += len;
    if (!c->not_recorded && buf_append(&c->resp_body, p, len, c->max_response) < 0) {
        /* Relayed whole, recorded not at all: a part would replay as a
         * different answer. */
        c->not_recorded = 1;
        buf_free(&c->resp_body);
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    transfer *t = arg;
    size_t len = size * n;
    if (!t->stream_checked)
        stream_check(t);
    if (t->stream_failed)
        return 0;
    if (t->call->streamed)
        return on_stream_body(t, p, len);
    if (buf_append(&t->call->resp_body, p, len, t->call->max_response) < 0) {
        t->too_large = 1;
        return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
    }
    return len;
}

/* libcurl resends a request by itself when a reused connection turns out
 * dead before any answer byte: safe for a browser, a double charge for us.
 * The pre-request callback runs right before each send; the second one of a
 * transfer is that resend, and it is refused. The first tells us the request
 * may have reached the upstream. */
static int on_prereq(void *arg, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
                     int conn_local_port)
{
    (void)conn_primary_ip;
    (void)conn_local_ip;
    (void)conn_primary_port;
    (void)conn_local_port;
    transfer *t = arg;
    return t->sends++ == 0 ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

static int transfer_setup(transfer *t)
{
    out_call *c = t->call;
    CURL *e = t->easy;
    for (size_t i = 0; i < c->nheaders; i++) {
        struct curl_slist *s = curl_slist_append(t->slist, c->headers[i]);
        if (!s)
            return -1;
        t->slist = s;
    }
    /* No "Expect: 100-continue" round trip, and none of curl's defaults
     * (Accept, a form Content-Type) that the client did not send. */
    static const char *const quiet[] = {"Expect:", "Accept:", "Content-Type:"};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) {
        int given = 0;
        size_t ql = strlen(quiet[i]) - 1;
        for (size_t j = 0; j < c->nheaders; j++)
            if (strncasecmp(c->headers[j], quiet[i], ql) == 0 && c->headers[j][ql] == ':')
                given = 1;
        if (!given) {
            struct curl_slist *s = curl_slist_append(t->slist, quiet[i]);
            if (!s)
                return -1;
            t->slist = s;
        }
    }
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, c->url) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms) != CURLE_OK;
    long connect_ms = c->timeout_ms < 10000 ? (long)c->timeout_ms : 10000;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->slist) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, t) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PREREQDATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTP_TRANSFER_DECODING, 1L) != CURLE_OK;
    /* Peers are verified, always: a private CA is added, never a check
     * taken away. */
    bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK;
    /* A reused handle would otherwise resume a TLS session another
     * upstream's call (another client certificate) began on the same
     * host and port. */
    bad |= curl_easy_setopt(e, CURLOPT_SSL_SESSIONID_CACHE, 0L) != CURLE_OK;
    if (c->ca_file) {
        /* The upstream's CA, and only it: the system's CA directory is
         * left out too. */
        bad |= curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_CAPATH, NULL) != CURLE_OK;
    }
    if (c->tls_cert) {
        bad |= curl_easy_setopt(e, CURLOPT_SSLCERT, c->tls_cert) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_SSLKEY, c->tls_key) != CURLE_OK;
    }
    if (strcmp(c->method, "HEAD") == 0) {
        bad |= curl_easy_setopt(e, CURLOPT_NOBODY, 1L) != CURLE_OK;
    } else if (strcmp(c->method, "GET") == 0 && c->body_len == 0) {
        bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
    } else {
        if (c->body_len > 0 || strcmp(c->method, "POST") == 0 || strcmp(c->method, "PUT") == 0 ||
            strcmp(c->method, "PATCH") == 0) {
            bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len) != CURLE_OK;
            bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body ? (const char *)c->body : "") != CURLE_OK;
        }
        bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->method) != CURLE_OK;
    }
    return bad ? -1 : 0;
}

/* Was anything of the request handed to the upstream? Until curl is about
 * to send it on an established (TLS-complete) connection — DNS, connect and
 * TLS failures, a timeout while connecting — certainly not. From then on it
 * may have arrived, whatever the error says. */
static out_kind classify_failure(const transfer *t, CURLcode rc)
{
    (void)rc;
    return t->sends > 0 ? OUT_AMBIGUOUS : OUT_NOT_SENT;
}

/* A reset handle forgets every option of its last call (URL, headers,
 * client certificate, the pointers into t), so nothing of one call reaches
 * the next; what it keeps are allocations. */
static void transfer_free(outbound *ob, transfer *t)
{
    if (t->easy && ob->nidle < OB_IDLE_MAX) {
        curl_easy_reset(t->easy);
        ob->idle[ob->nidle++] = t->easy;
    } else if (t->easy) {
        curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->slist);
    json_decref(t->headers);
    free(t);
}

/* Fills the call's result, frees the transfer and runs done. aborted: the
 * gateway is stopping and ended the transfer itself. */
static void transfer_finish(outbound *ob, transfer *t, CURLcode rc, int aborted)
{
    out_call *c = t->call;
    ONCE_ASSERT_THREAD(ob->thread);
    /* Running: t is on the active list, and its call has not ended (kind
     * is set only here and in transfer_start's failure, right before done). */
    ONCE_ASSERT(t->prev ? t->prev->next == t : ob->active == t);
    ONCE_ASSERT(c->kind == 0);
    c->seconds = clock_mono_seconds() - t->t0;
    if (t->too_large) {
        c->kind = OUT_TOO_LARGE;
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &c->status);
        snprintf(c->error, sizeof c->error, "the response exceeded max_response (%zu bytes)", c->max_response);
    } else if (rc == CURLE_OK && !aborted) {
        c->kind = OUT_ANSWERED;
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &c->status);
        if (!c->streamed)
            headers_keep(t);
    } else {
        c->kind = classify_failure(t, rc);
        const char *why = aborted            ? "the gateway stopped during the call"
                          : t->stream_failed ? "the gateway ran out of memory relaying the stream"
                          : t->sends > 1     ? "the upstream closed the connection without answering"
                                             : curl_easy_strerror(rc);
        /* curl's own detail names the cause (a certificate problem, say). */
        int detail = !aborted && !t->stream_failed && t->sends <= 1 && t->errbuf[0];
        snprintf(c->error, sizeof c->error, "%.80s%s%.160s", why, detail ? ": " : "", detail ? t->errbuf : "");
        buf_free(&c->resp_body);
    }
    if (t->easy)
        curl_multi_remove_handle(ob->multi, t->easy);
    if (t->prev)
        t->prev->next = t->next;
    else if (ob->active == t)
        ob->active = t->next;
    if (t->next)
        t->next->prev = t->prev;
    transfer_free(ob, t);
    pthread_mutex_lock(&ob->mu);
    ONCE_ASSERT(ob->in_flight > ob->nqueue); /* c is counted, and is not queued */
    ob->in_flight--;
    pthread_mutex_unlock(&ob->mu);
    ONCE_ASSERT(c->kind != 0);
    c->done(c);
}

static void transfer_start(outbound *ob, out_call *c)
{
    ONCE_ASSERT_THREAD(ob->thread);
    ONCE_ASSERT(c->done != NULL && c->kind == 0);
    transfer *t = calloc(1, sizeof *t);
    if (t) {
        t->call = c;
        t->t0 = clock_mono_seconds();
        t->easy = ob->nidle ? ob->idle[--ob->nidle] : curl_easy_init();
        t->headers = json_array();
    }
    if (!t || !t->easy || !t->headers || transfer_setup(t) < 0 ||
        curl_multi_add_handle(ob->multi, t->easy) != CURLM_OK) {
        c->kind = OUT_NOT_SENT;
        snprintf(c->error, sizeof c->error, "cannot set up the upstream call (out of memory)");
        if (t)
            transfer_free(ob, t);
        pthread_mutex_lock(&ob->mu);
        ONCE_ASSERT(ob->in_flight > ob->nqueue);
        ob->in_flight--;
        pthread_mutex_unlock(&ob->mu);
        c->done(c);
        return;
    }
    t->next = ob->active;
    if (ob->active)
        ob->active->prev = t;
    ob->active = t;
}

/* Wakes the outbound thread out of epoll_wait. An eventfd write fails
 * only when the counter is saturated, and then the thread is awake anyway. */
static void outbound_wake(outbound *ob)
{
    uint64_t one = 1;
    ssize_t w = write(ob->wakefd, &one, sizeof one);
    (void)w;
}

void outbound_resume(outbound *ob, out_call *call)
{
    pthread_mutex_lock(&ob->mu);
    call->resume = 1;
    ob->resumes++;
    pthread_mutex_unlock(&ob->mu);
    outbound_wake(ob);
}

/* Unpauses the streams whose callers asked (outbound thread). Unpausing
 * may deliver the held bytes at once, and pause again. */
static void transfers_resume(outbound *ob)
{
    ONCE_ASSERT_THREAD(ob->thread);
    pthread_mutex_lock(&ob->mu);
    size_t asked = ob->resumes;
    ob->resumes = 0;
    pthread_mutex_unlock(&ob->mu);
    for (transfer *t = ob->active; asked && t; t = t->next) {
        pthread_mutex_lock(&ob->mu);
        int wanted = t->call->resume;
        t->call->resume = 0;
        pthread_mutex_unlock(&ob->mu);
        if (wanted && t->paused) {
            t->paused = 0;
            curl_easy_pause(t->easy, CURLPAUSE_CONT);
        }
    }
}

/* curl's CURLMOPT_SOCKETFUNCTION: a socket to watch, watch otherwise or
 * forget. The socket's curl-side pointer marks it as in the epoll set. */
static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    outbound *ob = userp;
    (void)e;
    /* curl calls back from inside the multi calls: on the outbound thread,
     * or in outbound_free's cleanup once that thread has ended. */
    ONCE_ASSERT(pthread_equal(pthread_self(), ob->thread) || ob->stop);
    if (what == CURL_POLL_REMOVE) {
        if (socketp) {
            epoll_ctl(ob->epfd, EPOLL_CTL_DEL, s, NULL); /* ENOENT: curl closed it already */
            curl_multi_assign(ob->multi, s, NULL);
        }
        return 0;
    }
    struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                             .data.fd = s};
    int op = socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(ob->epfd, op, s, &ev) != 0) {
        /* The number was reused behind a socket curl closed unannounced,
         * or is already there: the other operation. */
        int again = errno == EEXIST ? EPOLL_CTL_MOD : errno == ENOENT ? EPOLL_CTL_ADD : -1;
        if (again < 0 || epoll_ctl(ob->epfd, again, s, &ev) != 0)
            return -1; /* curl fails the transfer on that socket */
    }
    if (!socketp)
        curl_multi_assign(ob->multi, s, ob);
    return 0;
}

/* curl's CURLMOPT_TIMERFUNCTION: when to call it back with no socket
 * ready (timeouts, and 0 for "now": a transfer just added). */
static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    outbound *ob = userp;
    (void)m;
    ONCE_ASSERT(pthread_equal(pthread_self(), ob->thread) || ob->stop); /* as on_socket */
    ob->timer_ms = timeout_ms;
    ob->timer_at = timeout_ms >= 0 ? clock_mono_seconds() + (double)timeout_ms / 1000.0 : 0;
    return 0;
}

/* Hands every finished transfer its end. */
static void transfers_reap(outbound *ob)
{
    CURLMsg *msg;
    int left;
    ONCE_ASSERT_THREAD(ob->thread);
    while ((msg = curl_multi_info_read(ob->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        transfer *t = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        transfer_finish(ob, t, msg->data.result, 0);
    }
}

/* Runs curl's timer when it is due; the milliseconds epoll may wait. */
static int timer_run(outbound *ob)
{
    int running;
    if (ob->timer_ms >= 0 && clock_mono_seconds() >= ob->timer_at) {
        ob->timer_ms = -1; /* curl sets the next one from inside */
        curl_multi_socket_action(ob->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        transfers_reap(ob);
    }
    if (ob->timer_ms < 0)
        return 1000;
    double left = ob->timer_at - clock_mono_seconds();
    return left <= 0 ? 0 : left >= 1.0 ? 1000 : (int)(left * 1000.0) + 1;
}

static void *outbound_main(void *arg)
{
    outbound *ob = arg;
    pthread_setname_np(pthread_self(), "once-outbound");
    out_call *batch[256];
    struct epoll_event evs[64];
    for (;;) {
        pthread_mutex_lock(&ob->mu);
        ONCE_ASSERT(ob->nqueue <= ob->capqueue && ob->in_flight >= ob->nqueue);
        size_t n = ob->nqueue < 256 ? ob->nqueue : 256;
        if (n) {
            memcpy(batch, ob->queue, n * sizeof *batch);
            memmove(ob->queue, ob->queue + n, (ob->nqueue - n) * sizeof *batch);
            ob->nqueue -= n;
        }
        int stop = ob->stop && ob->nqueue == 0;
        int left = ob->nqueue > 0; /* more than one round takes: no wake is due for them */
        pthread_mutex_unlock(&ob->mu);
        for (size_t i = 0; i < n; i++)
            transfer_start(ob, batch[i]);
        transfers_resume(ob);
        int wait_ms = timer_run(ob);
        if (stop) {
            /* End what is left: each call learns whether it was sent. */
            while (ob->active)
                transfer_finish(ob, ob->active, CURLE_ABORTED_BY_CALLBACK, 1);
#ifndef NDEBUG
            /* Every call submitted has ended: submits are refused since
             * stop was set, and the queue was empty then. */
            pthread_mutex_lock(&ob->mu);
            ONCE_ASSERT(ob->nqueue == 0 && ob->in_flight == 0);
            pthread_mutex_unlock(&ob->mu);
#endif
            break;
        }
        int ready = epoll_wait(ob->epfd, evs, (int)(sizeof evs / sizeof evs[0]), left ? 0 : wait_ms);
        for (int i = 0; i < ready; i++) {
            if (evs[i].data.fd == ob->wakefd) {
                uint64_t v;
                ssize_t r = read(ob->wakefd, &v, sizeof v);
                (void)r;
                continue;
            }
            uint32_t e = evs[i].events;
            int flags = (e & EPOLLIN ? CURL_CSELECT_IN : 0) | (e & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (e & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            int running;
            curl_multi_socket_action(ob->multi, evs[i].data.fd, flags, &running);
        }
        transfers_reap(ob);
    }
    return NULL;
}

int outbound_start(outbound **out)
{
    outbound *ob = calloc(1, sizeof *ob);
    if (!ob)
        return ONCE_ENOMEM;
    ob->multi = curl_multi_init();
    if (!ob->multi) {
        free(ob);
        return ONCE_ENOMEM;
    }
    /* Reuse connections to each upstream; cap per host to stay polite. */
    curl_multi_setopt(ob->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    curl_multi_setopt(ob->multi, CURLMOPT_MAXCONNECTS, 512L);
    curl_multi_setopt(ob->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(ob->multi, CURLMOPT_SOCKETDATA, ob);
    curl_multi_setopt(ob->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(ob->multi, CURLMOPT_TIMERDATA, ob);
    ob->timer_ms = -1;
    ob->epfd = epoll_create1(EPOLL_CLOEXEC);
    ob->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event wev = {.events = EPOLLIN, .data.fd = ob->wakefd};
    pthread_mutex_init(&ob->mu, NULL);
    if (ob->epfd < 0 || ob->wakefd < 0 || epoll_ctl(ob->epfd, EPOLL_CTL_ADD, ob->wakefd, &wev) != 0 ||
        pthread_create(&ob->thread, NULL, outbound_main, ob) != 0) {
        if (ob->epfd >= 0)
            close(ob->epfd);
        if (ob->wakefd >= 0)
            close(ob->wakefd);
        curl_multi_cleanup(ob->multi);
        pthread_mutex_destroy(&ob->mu);
        free(ob);
        return ONCE_ENOMEM;
    }
    *out = ob;
    return ONCE_OK;
}

void outbound_stop(outbound *ob)
{
    if (!ob)
        return;
    pthread_mutex_lock(&ob->mu);
    ob->stop = 1;
    pthread_mutex_unlock(&ob->mu);
    outbound_wake(ob);
    pthread_join(ob->thread, NULL);
}

void outbound_free(outbound *ob)
{
    if (!ob)
        return;
    /* Stopped: no thread, nothing queued or running, no done left to run. */
    ONCE_ASSERT(ob->stop && ob->nqueue == 0 && ob->in_flight == 0 && !ob->active);
    while (ob->nidle)
        curl_easy_cleanup(ob->idle[--ob->nidle]);
    curl_multi_cleanup(ob->multi);
    close(ob->epfd);
    close(ob->wakefd);
    pthread_mutex_destroy(&ob->mu);
    free(ob->queue);
    free(ob);
}

#ifndef NDEBUG
/* Is call queued (under ob->mu)? For the assertions. */
static int queue_holds(const outbound *ob, const out_call *call)
{
    for (size_t i = 0; i < ob->nqueue; i++)
        if (ob->queue[i] == call)
            return 1;
    return 0;
}
#endif

int outbound_submit(outbound *ob, out_call *call)
{
    memset(&call->resp_headers, 0, sizeof call->resp_headers);
    memset(&call->resp_body, 0, sizeof call->resp_body);
    call->kind = 0;
    call->status = 0;
    call->error[0] = '\0';
    call->streamed = call->not_recorded = call->resume = 0;
    call->stream_bytes = 0;
    ONCE_ASSERT(call->done != NULL);
    pthread_mutex_lock(&ob->mu);
    if (ob->stop) {
        pthread_mutex_unlock(&ob->mu);
        return ONCE_ECLOSED;
    }
    /* A call is the thread's until its done: never queued twice. */
    ONCE_ASSERT(!queue_holds(ob, call));
    if (ob->nqueue == ob->capqueue) {
        size_t cap = ob->capqueue ? ob->capqueue * 2 : 64;
        out_call **q = realloc(ob->queue, cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&ob->mu);
            return ONCE_ENOMEM;
        }
        ob->queue = q;
        ob->capqueue = cap;
    }
    /* The thread takes the queue whole before it waits again, so only the
     * call that finds it empty need wake it: the syncer finishing a batch
     * of reservations makes one eventfd write, not one per call. */
    int wake = ob->nqueue == 0;
    ob->queue[ob->nqueue++] = call;
    ob->in_flight++;
    pthread_mutex_unlock(&ob->mu);
    if (wake)
        outbound_wake(ob);
    return ONCE_OK;
}

void out_call_clear(out_call *call)
{
    buf_free(&call->resp_headers);
    buf_free(&call->resp_body);
}

int out_headers_add(out_headers *h, const char *name, const char *value)
{
    char **lines = realloc(h->lines, (h->count + 1) * sizeof *lines);
    if (!lines)
        return -1;
    h->lines = lines;
    size_t n = strlen(name) + (value ? strlen(value) + 2 : 0) + 1;
    char *line = malloc(n);
    if (!line)
        return -1;
    snprintf(line, n, value ? "%s: %s" : "%s", name, value ? value : "");
    h->lines[h->count++] = line;
    return 0;
}

void out_headers_clear(out_headers *h)
{
    for (size_t i = 0; i < h->count; i++)
        free(h->lines[i]);
    free(h->lines);
    h->lines = NULL;
    h->count = 0;
}

size_t outbound_in_flight(outbound *ob)
{
    pthread_mutex_lock(&ob->mu);
    size_t n = ob->in_flight;
    pthread_mutex_unlock(&ob->mu);
    return n;
}
