/*
 * fifo.h — the one intrusive queue: items in the order they were pushed,
 * linked through a fifo_link embedded first in each, under the owner's lock.
 * A background loop's posts and the worker threads' jobs (looper.h) and the
 * operations waiting for a group commit (store/batchq.c) queue in it, so
 * the linking is written once. It is part of libonce (the store's queue
 * needs it) and allocates nothing.
 */
#ifndef ONCE_COMMON_FIFO_H
#define ONCE_COMMON_FIFO_H

/* Embedded first in whatever is queued. */
typedef struct fifo_link {
    struct fifo_link *next;
} fifo_link;

/* Empty when zeroed. */
typedef struct fifo {
    fifo_link *head, *tail;
} fifo;

/* Appends it. */
void fifo_push(fifo *q, fifo_link *it);
/* Takes the oldest item, or NULL when empty. */
fifo_link *fifo_pop(fifo *q);
/* Takes every item, oldest first (a list through next; NULL when empty). */
fifo_link *fifo_take(fifo *q);

#endif
