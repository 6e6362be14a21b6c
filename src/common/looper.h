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
 */
#ifndef ONCE_COMMON_LOOPER_H
#define ONCE_COMMON_LOOPER_H

#include <pthread.h>
#include <stdint.h>

/* What a round returns instead of a wait in milliseconds. */
#define LOOPER_IDLE (-1) /* nothing to do until kicked or posted to */
#define LOOPER_DONE (-2) /* only while stopping: the thread may end */

/* The phase a round runs in. Quiesced: finish what is in flight, start
 * nothing new. Stopping: the same, and return LOOPER_DONE once nothing is
 * left (items posted later would have no reader). */
typedef enum looper_phase { LOOPER_RUNNING, LOOPER_QUIESCED, LOOPER_STOPPING } looper_phase;

/* Embedded first in whatever a thread posts to the loop. */
typedef struct looper_item {
    struct looper_item *next;
} looper_item;

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
    looper_item *head, *tail; /* posted, not yet taken by a round */
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

#endif
