/*
 * batchq.h — the queue behind group commit.
 *
 * Callers submit an item and sleep on it; a writer takes everything queued
 * (up to a cap) as one batch, makes it durable in one transaction and wakes
 * each caller. A writer never waits on a timer: a lone item is taken at once,
 * and items that arrive during a commit form the next batch.
 */
#ifndef ONCE_STORE_BATCHQ_H
#define ONCE_STORE_BATCHQ_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>

#include "common/fifo.h"

typedef struct bq_item {
    fifo_link link; /* first: the queue links items */
    /* Set for an asynchronous item: called (on the writer thread, outside
     * the queue's lock) instead of waking a sleeping caller. */
    void (*on_done)(struct bq_item *item);
    /* A sleeping caller waits on its own semaphore, posted without the
     * queue's lock: waking 64 callers must not make them queue for it. */
    sem_t done;
} bq_item;

typedef struct batchq {
    pthread_mutex_t mu;
    pthread_cond_t nonempty;
    fifo items;
    size_t len;
    int closed;
} batchq;

int bq_init(batchq *q);
void bq_destroy(batchq *q);

/* Queues item and waits until a writer has finished it. ONCE_ECLOSED (and
 * nothing queued) once the queue is closed. */
int bq_submit_wait(batchq *q, bq_item *item);

/* Queues an asynchronous item (on_done set) without waiting. ONCE_ECLOSED
 * once the queue is closed. */
int bq_submit(batchq *q, bq_item *item);

/* Blocks until items are queued, then moves up to max of them into out.
 * Returns 0 only when the queue is closed and drained. */
size_t bq_take(batchq *q, bq_item **out, size_t max);

/* Marks the n items done and wakes their callers. */
void bq_finish(batchq *q, bq_item **items, size_t n);

/* Refuses new items; writers drain what is queued, then bq_take returns 0. */
void bq_close(batchq *q);

#endif
