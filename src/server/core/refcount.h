/*
 * refcount.h — who frees an object that two sides let go of in either
 * order, on any threads: the request (its state freed with it) and what
 * outlives the answer (a relayed stream, an outbound call still running).
 * Each side holds it; the last to let go frees it. One mechanism for the
 * pipeline's calls (pipeline/rcall.c), the MCP pass-through (mcp/mcp.c)
 * and a relayed stream (front/stream.c), so that the counting and its
 * memory ordering are written once.
 */
#ifndef ONCE_SERVER_CORE_REFCOUNT_H
#define ONCE_SERVER_CORE_REFCOUNT_H

typedef struct refcount {
    int holders;
} refcount;

/* Starts the count at holders (at least one: whoever made the object). */
void refcount_init(refcount *rc, int holders);

/* One more holder; the caller must be a holder already. Any thread. */
void refcount_hold(refcount *rc);

/* One holder lets go: 1 when it was the last (the caller frees the object
 * now, and nobody else may touch it), else 0. Any thread. */
int refcount_drop(refcount *rc);

#endif
