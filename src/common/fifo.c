/*
 * fifo.c — the intrusive queue the loops and the group commit share (see
 * fifo.h).
 */
#include "common/fifo.h"

#include <stddef.h>

/* Links it after the tail: the order of pushes is the order of pops. */
void fifo_push(fifo *q, fifo_link *it)
{
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
}

/* Unlinks the head; the tail goes with the last item. */
fifo_link *fifo_pop(fifo *q)
{
    fifo_link *it = q->head;
    if (it) {
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
    }
    return it;
}

/* Hands over the whole list at once: a round takes all its posts under
 * the lock in one step. */
fifo_link *fifo_take(fifo *q)
{
    fifo_link *all = q->head;
    q->head = q->tail = NULL;
    return all;
}
