/*
 * stream.c — a streamed answer relayed to its caller (see stream.h).
 *
 * Two holders share a stream: the producer (the proxy, until stream_end)
 * and libmicrohttpd (the response, until it is destroyed: the caller left
 * or everything was sent). The last one frees it (core/refcount.h: the
 * count is atomic). Everything else below is under the stream's mutex,
 * including the calls that suspend or resume the connection and the
 * producer's resume callback, so that neither can run against a holder
 * that has let go.
 */
#include "server/front/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/check.h"
#include "server/core/refcount.h"
#include "server/core/services.h"
#include "server/front/req.h"
#include "server/front/lot.h"

#define STREAM_BLOCK (16u * 1024) /* what libmicrohttpd asks for at a time */

struct stream {
    pthread_mutex_t mu;
    server *srv;
    struct MHD_Connection *conn;
    struct MHD_Response *resp;
    buf unsent;      /* pushed, not yet read by the connection, from off */
    size_t off;
    int full;        /* the producer was told STREAM_FULL and waits */
    int suspended;   /* the reader suspended the connection: a push resumes it */
    int ended;
    int clean;
    int gone;        /* libmicrohttpd let go of the response */
    refcount holders; /* the producer and libmicrohttpd (core/refcount.h) */
    int drained;     /* not waited for by the drain at shutdown (stream_no_drain) */
    stream_resume_fn resume;
    void *ctx;
};

/* One of the two holders lets go; the last frees the stream. */
static void stream_unhold(stream *s)
{
    if (!refcount_drop(&s->holders))
        return;
    buf_free(&s->unsent);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Under s->mu: a producer told FULL gets going again once half the window
 * is free (or nothing will ever be read). */
static void stream_maybe_resume(stream *s)
{
    if (s->full && (s->gone || s->unsent.len - s->off <= STREAM_WINDOW / 2)) {
        s->full = 0;
        s->resume(s->ctx);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    stream *s = cls;
    pthread_mutex_lock(&s->mu);
    size_t avail = s->unsent.len - s->off;
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(out, s->unsent.data + s->off, n);
        s->off += n;
        if (s->off == s->unsent.len)
            s->unsent.len = s->off = 0;
        stream_maybe_resume(s);
        pthread_mutex_unlock(&s->mu);
        return (ssize_t)n;
    }
    if (s->ended) {
        int clean = s->clean;
        pthread_mutex_unlock(&s->mu);
        /* A cut stream is cut for the caller too: no last chunk. */
        return clean ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    /* Nothing yet: park the connection until the next push or the end. */
    MHD_suspend_connection(s->conn);
    s->suspended = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* libmicrohttpd destroyed the response: the caller is gone, or was sent
 * everything. */
static void stream_response_freed(void *cls)
{
    stream *s = cls;
    pthread_mutex_lock(&s->mu);
    s->gone = 1;
    s->resp = NULL;
    buf_free(&s->unsent);
    s->off = 0;
    stream_maybe_resume(s);
    pthread_mutex_unlock(&s->mu);
    stream_unhold(s);
}

stream *stream_open(server *srv, struct MHD_Connection *conn, stream_resume_fn resume, void *ctx,
                    struct MHD_Response **resp)
{
    stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->srv = srv;
    s->conn = conn;
    s->resume = resume;
    s->ctx = ctx;
    refcount_init(&s->holders, 2);
    pthread_mutex_init(&s->mu, NULL);
    s->resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, s,
                                                stream_response_freed);
    if (!s->resp) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    lot_park(srv->lot); /* until stream_end: the connection may be suspended */
    *resp = s->resp;
    return s;
}

/* Makes room at the front before appending: the read part is dropped. */
static void unsent_compact(stream *s)
{
    if (s->off == 0)
        return;
    size_t left = s->unsent.len - s->off;
    memmove(s->unsent.data, s->unsent.data + s->off, left);
    s->unsent.len = left;
    s->off = 0;
}

stream_push_result stream_push(stream *s, const uint8_t *p, size_t n)
{
    pthread_mutex_lock(&s->mu);
    ONCE_ASSERT(!s->ended);
    if (s->gone) {
        pthread_mutex_unlock(&s->mu);
        return STREAM_TAKEN; /* nobody to send to: the record is all that counts */
    }
    if (s->unsent.len - s->off >= STREAM_WINDOW) {
        s->full = 1;
        pthread_mutex_unlock(&s->mu);
        return STREAM_FULL;
    }
    unsent_compact(s);
    if (buf_append(&s->unsent, p, n, SIZE_MAX - 1) < 0) {
        pthread_mutex_unlock(&s->mu);
        return STREAM_ERROR;
    }
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
    pthread_mutex_unlock(&s->mu);
    return STREAM_TAKEN;
}

void stream_end(stream *s, int clean, const char *outcome)
{
    pthread_mutex_lock(&s->mu);
    ONCE_ASSERT(!s->ended);
    s->ended = 1;
    s->clean = clean;
    s->full = 0; /* the producer is done: nothing to resume any more */
    if (!s->gone && clean && outcome)
        MHD_add_response_footer(s->resp, "Once-Outcome", outcome);
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
    int drained = s->drained;
    pthread_mutex_unlock(&s->mu);
    if (!drained)
        lot_unpark(s->srv->lot);
    stream_unhold(s);
}

void stream_no_drain(stream *s)
{
    pthread_mutex_lock(&s->mu);
    int was = s->drained;
    s->drained = 1;
    pthread_mutex_unlock(&s->mu);
    if (!was)
        lot_unpark(s->srv->lot);
}

int stream_caller_gone(stream *s)
{
    pthread_mutex_lock(&s->mu);
    int gone = s->gone;
    pthread_mutex_unlock(&s->mu);
    return gone;
}
