/*
 * batchq.c — the queue behind group commit (see batchq.h).
 */
#include "store/batchq.h"

#include "once/once.h"

int bq_init(batchq *q)
{
    q->head = q->tail = NULL;
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
    item->next = NULL;
    if (q->tail)
        q->tail->next = item;
    else
        q->head = item;
    q->tail = item;
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
    item->done = 0;
    if (pthread_cond_init(&item->done_cond, NULL) != 0)
        return ONCE_ENOMEM;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        pthread_cond_destroy(&item->done_cond);
        return ONCE_ECLOSED;
    }
    bq_push(q, item);
    while (!item->done)
        pthread_cond_wait(&item->done_cond, &q->mu);
    pthread_mutex_unlock(&q->mu);
    pthread_cond_destroy(&item->done_cond);
    return ONCE_OK;
}

size_t bq_take(batchq *q, bq_item **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closed)
        pthread_cond_wait(&q->nonempty, &q->mu);
    while (q->head && n < max) {
        bq_item *it = q->head;
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        q->len--;
        out[n++] = it;
    }
    /* Another writer (PostgreSQL runs several) may take what is left. */
    if (q->head)
        pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void bq_finish(batchq *q, bq_item **items, size_t n)
{
    /* Asynchronous items first: a sleeping caller may free its item as soon
     * as it is woken, so nothing is read from those after the signal. */
    for (size_t i = 0; i < n; i++) {
        bq_item *it = items[i];
        if (it->on_done) {
            items[i] = NULL;
            it->on_done(it);
        }
    }
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < n; i++) {
        if (!items[i])
            continue;
        items[i]->done = 1;
        pthread_cond_signal(&items[i]->done_cond);
    }
    pthread_mutex_unlock(&q->mu);
}

void bq_close(batchq *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
}
