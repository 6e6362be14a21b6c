/*
 * worker.c — a few threads for the calls an HTTP thread must not make: a
 * human's resolve and inbox claims commit synchronously; lists and records
 * read (on PostgreSQL, over the network) and build answers of megabytes.
 * Jobs start in order (the queue is common/looper.h's); stop runs what is
 * queued, then joins.
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/looper.h"
#include "server/core/services.h"
#include "server/core/worker.h"

#define WORKER_THREADS 2

typedef struct job {
    looper_item item; /* first: queued */
    void (*fn)(void *);
    void *arg;
} job;

struct worker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    looper_fifo queue; /* of job */
    int stop;
    size_t nthreads;
    pthread_t threads[WORKER_THREADS];
};

/* One worker thread: runs the queued jobs in order until stopped and the
 * queue is empty. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_setname_np(pthread_self(), "once-worker");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->queue.head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        job *j = (job *)looper_fifo_pop(&w->queue);
        if (!j)
            break;
        pthread_mutex_unlock(&w->mu);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Stops the threads once the queue is empty (what is queued still runs)
 * and joins them; worker_run refuses from now on. */
static void worker_join(worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    w->nthreads = 0;
}

int worker_start(worker **out)
{
    worker *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (; w->nthreads < WORKER_THREADS; w->nthreads++) {
        if (pthread_create(&w->threads[w->nthreads], NULL, worker_main, w) != 0) {
            worker_join(w);
            worker_free(w);
            return -1;
        }
    }
    *out = w;
    return 0;
}

void worker_stop(worker *w)
{
    if (w)
        worker_join(w);
}

void worker_free(worker *w)
{
    if (!w)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int worker_run(worker *w, void (*fn)(void *), void *arg)
{
    job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    *j = (job){.fn = fn, .arg = arg};
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        free(j);
        return -1;
    }
    looper_fifo_push(&w->queue, &j->item);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}
