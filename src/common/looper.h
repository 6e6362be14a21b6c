/*
 * looper.h — the one shape of the gateway's background threads: a thread
 * that runs a round of work, then waits as long as the round asked (or until
 * kicked or handed an item), until it is stopped. The lease expiry and hold
 * loop, lease renewal, the slow-client reaper, the Prefer: wait waiters,
 * webhook delivery and the reconciler are each a round function on a looper;
 * the locking, the monotonic waits and the stop protocol live here once.
 *
 * Items: other threads hand finished work to the loop (an outbound call that
 * completed, a parked request) with looper_post; the next round receives
 * them, in the order posted, without any lock of the owner's.
 *
 * Jobs (looper_job, below): the approvals sender, the reconciler and webhook
 * delivery share one shape on top of a looper — claim work, hand each piece
 * to another thread, settle what comes back on the loop's thread, and stop
 * only once every hand-off came back. That shape, the count of hand-offs in
 * flight and the job's life (start, kick, quiesce, stop, free) live here
 * once; a job gives only what it claims and how it settles.
 */
#ifndef ONCE_COMMON_LOOPER_H
#define ONCE_COMMON_LOOPER_H

#include <pthread.h>
#include <stdint.h>

#include "common/fifo.h"

/* What a round returns instead of a wait in milliseconds. */
#define LOOPER_IDLE (-1) /* nothing to do until kicked or posted to */
#define LOOPER_DONE (-2) /* only while stopping: the thread may end */

/* The phase a round runs in. Quiesced: finish what is in flight, start
 * nothing new. Stopping: the same, and return LOOPER_DONE once nothing is
 * left (items posted later would have no reader). */
typedef enum looper_phase { LOOPER_RUNNING, LOOPER_QUIESCED, LOOPER_STOPPING } looper_phase;

/* Embedded first in whatever a thread posts to the loop: a link of the
 * one queue (fifo.h). */
typedef fifo_link looper_item;

/* Items in the order they were pushed, under the owner's lock: what a loop
 * keeps of its posts, and the worker threads' queue (core/worker.c). */
typedef fifo looper_fifo;

/* The queue's operations under the names the loops' users call them by
 * (core/worker.c, the unit tests): the same functions. */
static inline void looper_fifo_push(looper_fifo *q, looper_item *it)
{
    fifo_push(q, it);
}
static inline looper_item *looper_fifo_pop(looper_fifo *q)
{
    return fifo_pop(q);
}
static inline looper_item *looper_fifo_take(looper_fifo *q)
{
    return fifo_take(q);
}

/* One round: posted is what was posted since the last round (oldest first;
 * the round owns it). Returns the milliseconds to wait before the next
 * round, LOOPER_IDLE or LOOPER_DONE. */
typedef int64_t (*looper_round_fn)(void *arg, looper_phase phase, looper_item *posted);

typedef struct looper {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    looper_phase phase;
    int kicked;
    int idle; /* the last round returned LOOPER_IDLE */
    int started;
    int joined;
    looper_fifo posted; /* not yet taken by a round */
    looper_round_fn round;
    void *arg;
    const char *name;
} looper;

/* Starts the thread, named name (at most 15 characters: what top -H and
 * the benchmarks show), whose first round runs now. 0, or -1 (nothing to
 * stop). */
int looper_start(looper *l, const char *name, looper_round_fn round, void *arg);

/* Runs a round soon. Any thread. */
void looper_kick(looper *l);

/* Hands it to the next round. urgent: run that round now; else it runs at
 * the loop's next wake, or now if the loop is idle. Any thread. 0, or -1
 * once the loop is stopping (it is not taken; the caller keeps it). */
int looper_post(looper *l, looper_item *it, int urgent);

/* From now on rounds run quiesced. Any thread. */
void looper_quiesce(looper *l);

/* Rounds run in the stopping phase until one returns LOOPER_DONE; then the
 * thread is joined. Posts keep being refused until looper_close, so other
 * threads may still try. Harmless on a looper that never started (zeroed)
 * and on a stopped one. */
void looper_stop(looper *l);

/* Frees what looper_start made, after looper_stop, once no other thread
 * can reach the looper. Harmless on a zeroed looper. */
void looper_close(looper *l);

/* ---- jobs: claim, hand off, settle ------------------------------------- */

typedef struct looper_job looper_job;

/* What a job does; the rest is looper_job's. */
typedef struct looper_job_ops {
    const char *name; /* the thread's (see looper_start) */
    /* Running rounds only: claims new work and hands each piece to another
     * thread (counted with looper_job_handed, posted back with
     * looper_job_back). Returns the milliseconds until the next round, or
     * LOOPER_IDLE. */
    int64_t (*claim)(looper_job *j);
    /* A hand-off came back: settle it and free it. phase is the round's:
     * LOOPER_STOPPING when the stop may have cut the work short. */
    void (*settle)(looper_job *j, looper_phase phase, looper_item *it);
} looper_job_ops;

/* Starts a job whose ops see arg (looper_job_arg). Each round settles what
 * came back, then claims (unless quiesced or stopping); stopping ends once
 * every hand-off came back. 0, or -1 (nothing to stop). */
int looper_job_start(const looper_job_ops *ops, void *arg, looper_job **out);
/* The arg looper_job_start was given. */
void *looper_job_arg(const looper_job *j);
/* The job's thread, inside claim: one piece of work was handed off; its
 * looper_job_back will come. */
void looper_job_handed(looper_job *j);
/* Any thread, once per hand-off: it is done; the next round (now) settles
 * it, stopping or not. */
void looper_job_back(looper_job *j, looper_item *it);
/* The job's thread, inside settle: the work settled falls due again in
 * delay_ms (a retry): the loop wakes for it however long claim would have
 * waited. */
void looper_job_due(looper_job *j, int64_t delay_ms);
/* Runs a round soon (new work may be there). NULL is fine. Any thread. */
void looper_job_kick(looper_job *j);
/* Claims no more; what is handed off still settles. NULL is fine. */
void looper_job_quiesce(looper_job *j);
/* Settles the rest (every hand-off must come back: stop what they run on
 * first) and joins. Kicks stay harmless until looper_job_free. NULL is
 * fine. */
void looper_job_stop(looper_job *j);
/* Frees a stopped job once no thread can kick it. NULL is fine. */
void looper_job_free(looper_job *j);

#endif
