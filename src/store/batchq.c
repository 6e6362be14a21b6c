/*
 * batchq.c — the queue behind group commit (see batchq.h).
 */
#include "store/batchq.h"

#include <errno.h>

#include "once/once.h"

int bq_init(batchq *q)
{
    q->items = (fifo){0};
    q->len = 0;
    q->closed = 0;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return ONCE_ENOMEM;
    if (pthread_cond_init(&q->nonempty, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        return ONCE_ENOMEM;
    }
    return ONCE_OK;
}

void bq_destroy(batchq *q)
{
    pthread_cond_destroy(&q->nonempty);
    pthread_mutex_destroy(&q->mu);
}

/* Appends item; the caller holds q->mu and has checked closed. */
static void bq_push(batchq *q, bq_item *item)
{
    fifo_push(&q->items, &item->link);
    q->len++;
    pthread_cond_signal(&q->nonempty);
}

int bq_submit(batchq *q, bq_item *item)
{
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return ONCE_ECLOSED;
    }
    bq_push(q, item);
    pthread_mutex_unlock(&q->mu);
    return ONCE_OK;
}

int bq_submit_wait(batchq *q, bq_item *item)
{
    item->on_done = NULL;
    if (sem_init(&item->done, 0, 0) != 0)
        return ONCE_ENOMEM;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        sem_destroy(&item->done);
        return ONCE_ECLOSED;
    }
    bq_push(q, item);
    pthread_mutex_unlock(&q->mu);
    while (sem_wait(&item->done) != 0 && errno == EINTR)
        ;
    sem_destroy(&item->done);
    return ONCE_OK;
}

size_t bq_take(batchq *q, bq_item **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    while (!q->items.head && !q->closed)
        pthread_cond_wait(&q->nonempty, &q->mu);
    while (q->items.head && n < max) {
        out[n++] = (bq_item *)fifo_pop(&q->items); /* the link is first */
        q->len--;
    }
    /* Another writer (PostgreSQL runs several) may take what is left. */
    if (q->items.head)
        pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void bq_finish(batchq *q, bq_item **items, size_t n)
{
    (void)q;
    for (size_t i = 0; i < n; i++) {
        bq_item *it = items[i];
        /* Nothing is read from an item after it is handed back: a woken
         * caller frees its item at once. */
        if (it->on_done)
            it->on_done(it);
        else
            sem_post(&it->done);
    }
}

void bq_close(batchq *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
}
