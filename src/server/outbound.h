/*
 * outbound.h — upstream HTTP calls on libcurl's multi interface.
 *
 * One thread owns the CURLM handle and drives every transfer, so hundreds of
 * 30-second LLM calls in flight cost sockets, not threads. Other threads hand
 * calls over through a queue and wake the owner with curl_multi_wakeup.
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
    out_done_fn done;
    void *ctx;
    /* out: filled before done runs; free with out_call_clear */
    out_kind kind;
    long status;
    buf resp_headers;   /* JSON array of [name, value] pairs, end-to-end headers only */
    buf resp_body;
    char error[256];
    double seconds;
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

/* Frees what the call's out part owns. */
void out_call_clear(out_call *call);

/* Number of calls in flight (for metrics and shutdown). */
size_t outbound_in_flight(outbound *ob);

#endif
