/*
 * outbound.h — upstream HTTP calls on libcurl's multi interface.
 *
 * One thread owns the CURLM handle and drives every transfer, so hundreds of
 * 30-second LLM calls in flight cost sockets, not threads. Other threads hand
 * calls over through a queue and wake the owner through an eventfd it
 * waits on in epoll beside curl's sockets.
 */
#ifndef ONCE_SERVER_OUTBOUND_H
#define ONCE_SERVER_OUTBOUND_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

typedef struct outbound outbound;

/* What happened to one call. */
typedef enum out_kind {
    OUT_ANSWERED = 1,   /* the upstream answered a status (any) */
    OUT_NOT_SENT = 2,   /* nothing reached the upstream: connect, DNS or TLS failure */
    OUT_AMBIGUOUS = 3,  /* the request went out; no (complete) answer came back */
    OUT_TOO_LARGE = 4   /* answered, but the body exceeded max_response */
} out_kind;

typedef struct out_call out_call;

/* Runs on the outbound thread when the call ends; must be quick. The call
 * and everything it points to still belong to the caller. */
typedef void (*out_done_fn)(out_call *call);

/* A caller that relays event streams as they arrive. Both run on the
 * outbound thread and must be quick. */
typedef struct out_stream_hooks {
    /* At the first body byte of an answer whose Content-Type is
     * text/event-stream: status and resp_headers are set. 1 takes the
     * stream (the body then goes to data as it arrives), 0 leaves it an
     * ordinary answer, -1 fails the call (out of memory: it ends
     * OUT_AMBIGUOUS, the request was sent). */
    int (*start)(out_call *call);
    /* Each piece of a taken stream, in order: OUT_STREAM_TAKEN, or
     * OUT_STREAM_PAUSE to hold the transfer until outbound_resume (the same
     * bytes come again then), or OUT_STREAM_FAIL (out of memory: the call
     * ends OUT_AMBIGUOUS). resp_body records the bytes taken, up to
     * max_response. */
    int (*data)(out_call *call, const uint8_t *p, size_t n);
} out_stream_hooks;

enum { OUT_STREAM_TAKEN = 0, OUT_STREAM_PAUSE = 1, OUT_STREAM_FAIL = -1 };

struct out_call {
    /* in: owned by the caller, valid until done runs */
    const char *method;
    const char *url;
    const char *const *headers; /* "Name: value" lines */
    size_t nheaders;
    const uint8_t *body;
    size_t body_len;
    int64_t timeout_ms;
    size_t max_response;
    const char *ca_file;   /* PEM CA bundle trusted for this call instead of the system's, or NULL */
    const char *tls_cert;  /* client certificate and key for mutual TLS, or NULL */
    const char *tls_key;
    const out_stream_hooks *stream; /* NULL: answers are always buffered whole */
    out_done_fn done;
    void *ctx;
    /* out: filled before done runs; free with out_call_clear */
    out_kind kind;
    long status;
    buf resp_headers;   /* JSON array of [name, value] pairs, end-to-end headers only */
    buf resp_body;
    char error[256];
    double seconds;
    /* out, for a stream taken by stream->start: an answer longer than
     * max_response is relayed whole but not recorded (resp_body empty,
     * not_recorded set); stream_bytes counts what was relayed. */
    int streamed;
    int not_recorded;
    uint64_t stream_bytes;
    int resume;         /* outbound's: outbound_resume asked (under its lock) */
};

int outbound_start(outbound **out);
/* Aborts what is still running (each call ends OUT_AMBIGUOUS or
 * OUT_NOT_SENT, its done runs) and stops the thread; later submits are
 * refused (ONCE_ECLOSED). */
void outbound_stop(outbound *ob);
/* Frees a stopped client, once nothing can call it any more (after the
 * HTTP daemons stopped). */
void outbound_free(outbound *ob);

/* Hands call to the outbound thread. 0, or a negative ONCE_E* code (then
 * done will not run). */
int outbound_submit(outbound *ob, out_call *call);

/* Lets a stream paused by OUT_STREAM_PAUSE go on. Any thread, while the
 * call runs. */
void outbound_resume(outbound *ob, out_call *call);

/* Frees what the call's out part owns. */
void out_call_clear(out_call *call);

/* Header lines built for a call ("Name: value"), owned here: the proxy's
 * forwarded and injected headers, a delivery's Once-* headers. */
typedef struct out_headers {
    char **lines;
    size_t count;
} out_headers;

/* Appends "name: value" (value NULL: name is the whole line). 0 or -1 (out
 * of memory; nothing appended). */
int out_headers_add(out_headers *h, const char *name, const char *value);
void out_headers_clear(out_headers *h);

/* Number of calls in flight (for metrics and shutdown). */
size_t outbound_in_flight(outbound *ob);

#endif
