/*
 * stream.h — relaying a streamed upstream answer (text/event-stream) to the
 * caller while it arrives: the outbound thread pushes bytes in, the
 * caller's connection reads them out through a libmicrohttpd callback
 * response, suspended while there is nothing to send and resumed by the
 * next push. No thread waits on the caller.
 *
 * Bounded: while the caller is slower than the upstream, unsent bytes pile
 * up to STREAM_WINDOW; past it stream_push says "full" and the outbound
 * thread pauses the transfer until the caller has read half of it
 * (stream_push's resume callback). A caller that has gone stops counting:
 * its bytes are dropped and the upstream is read on to the end, so the
 * answer is recorded whole for the retry.
 *
 * Ends: clean (the last chunk, with an Once-Outcome trailer) or cut (the
 * connection is closed without the last chunk: the caller sees an abrupt
 * end, never a made-up one).
 */
#ifndef ONCE_SERVER_STREAM_H
#define ONCE_SERVER_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

typedef struct server server;
typedef struct stream stream;

#define STREAM_WINDOW (1u << 20) /* unsent bytes held for a slow caller */

/* Called (from the caller's connection thread) when a full stream has
 * drained enough to take more. */
typedef void (*stream_resume_fn)(void *ctx);

/* A stream for conn, counted by srv as a connection that must be resumed
 * before the daemons stop (until it ends). *resp gets the callback
 * response to answer with. NULL when out of memory. */
stream *stream_open(server *srv, struct MHD_Connection *conn, stream_resume_fn resume, void *ctx,
                    struct MHD_Response **resp);

typedef enum stream_push_result {
    STREAM_TAKEN = 0, /* the bytes are the stream's */
    STREAM_FULL = 1,  /* nothing taken: pause, and wait for the resume callback */
    STREAM_ERROR = -1 /* out of memory: nothing taken */
} stream_push_result;

/* Adds bytes for the caller. Producer thread only. */
stream_push_result stream_push(stream *s, const uint8_t *p, size_t n);

/* Ends the stream: clean sends the last chunk with "Once-Outcome: outcome"
 * as a trailer after what is still unsent; otherwise the connection is cut
 * after it. Then lets go of the producer's hold. Producer thread only, once. */
void stream_end(stream *s, int clean, const char *outcome);

/* A stream with no end of its own (an MCP server's standing GET stream):
 * the drain at shutdown does not wait for it; stopping the outbound client
 * ends it, before the daemons stop. Producer thread, before stream_end. */
void stream_no_drain(stream *s);

/* Has the caller gone (its connection closed)? */
int stream_caller_gone(stream *s);

#endif
