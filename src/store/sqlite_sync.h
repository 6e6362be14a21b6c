/*
 * sqlite_sync.h — the SQLite store's durability pipeline: batches the
 * writer committed without a sync wait here until an fdatasync of the WAL
 * covers them, and only then are their operations finished.
 *
 * The writer commits with synchronous=NORMAL (in WAL mode: commits
 * unsynced, checkpoints synced) and goes on with the next batch. The
 * syncer thread, with its own descriptor of PATH-wal, fdatasyncs it: one
 * sync covers every batch committed before it began, and the batches are
 * finished in the order they were committed. (Two syncers, a sync starting
 * while another waits on the disk, measured no faster on bench/proxy.sh.)
 */
#ifndef ONCE_STORE_SQLITE_SYNC_H
#define ONCE_STORE_SQLITE_SYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/batchq.h"

#define SQ_BATCH_MAX 512
/* Batches committed and not yet finished, at most: one being synced, one
 * committed behind it. A deeper pipeline let the writer commit smaller
 * batches more often (1,250-1,400 commits/s of ~10 operations at depth 8,
 * ~700 of ~19 at depth 2, bench/proxy.sh), each commit rewriting the same
 * shared pages into the WAL: more CPU per request for the same rate. */
#define SQ_SYNC_DEPTH 2

/* A batch between the writer and the syncer. */
typedef struct sq_batch {
    bq_item *items[SQ_BATCH_MAX];
    size_t n;
    double t0;        /* when its transaction began */
    int64_t event_id; /* the newest events row it committed; 0 none */
} sq_batch;

/* Finishes batch b once it is durable (failed: 0), or once it cannot be
 * (failed: 1, why says so): wakes its callers. Runs on the syncer thread. */
typedef void (*sq_finish_fn)(void *ctx, sq_batch *b, int failed, const char *why);

/* Batch number k (from 1) sits in ring[(k - 1) % SQ_SYNC_DEPTH] from the
 * writer's sq_sync_slot until it is finished. */
typedef struct sq_sync {
    sq_batch ring[SQ_SYNC_DEPTH];
    sq_finish_fn finish;
    void *finish_ctx;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;    /* the syncer: a batch committed, or stop */
    pthread_cond_t slot_cv;    /* the writer: a slot came free */
    pthread_cond_t durable_cv; /* readers: durable moved, or a failure */
    uint64_t taken;            /* batches given a slot (writer thread only) */
    uint64_t committed;        /* batches committed (under mu) */
    uint64_t finished;         /* batches finished (under mu) */
    _Atomic uint64_t visible;  /* the newest batch readers may see (its COMMIT has begun) */
    _Atomic uint64_t durable;  /* every batch up to this one is on disk */
    _Atomic int failed;        /* sticky: an fdatasync failed */
    char why[160];             /* written once, before failed is set */
    int stop;
    int ready;                 /* mu and the condition variables are initialised */
    int fd;                    /* the syncer's own descriptor of the WAL; -1 */
    pthread_t thread;
    int started;
} sq_sync;

/* Opens the syncer's descriptor of wal_path and starts it; finish is
 * called for each batch. 0, or a negative ONCE_E* (then sq_sync_close). */
int sq_sync_open(sq_sync *y, const char *wal_path, sq_finish_fn finish, void *ctx);

/* Finishes every batch committed (the writer has stopped), stops the
 * syncer, closes its descriptor. Safe on a half-open y. */
void sq_sync_close(sq_sync *y);

/* The writer: the slot for its next batch, once one is free (at most
 * SQ_SYNC_DEPTH batches wait, so a stalled disk stops the writer instead
 * of piling up callers nobody can answer). */
sq_batch *sq_sync_slot(sq_sync *y);

/* The writer, before COMMIT of the batch in the last slot: readers may see
 * it from now on. Returns 1 when the pipeline has failed: then the batch
 * must not be run (sq_sync_commit it all the same; it will be failed). */
int sq_sync_begin(sq_sync *y);

/* The writer, after COMMIT (or its failure): the batch goes to the syncer. */
void sq_sync_commit(sq_sync *y);

/* A read that will answer a caller, after it read: waits until every
 * commit it may have seen is durable. 0, or ONCE_ESTORE when the pipeline
 * failed. Without writes in flight it costs two atomic loads. */
int sq_sync_wait_read(sq_sync *y);

/* Without waiting: 1 when every commit a read may have seen is durable
 * (or the pipeline failed: sq_sync_wait_read then says so at once). */
int sq_sync_settled(sq_sync *y);

/* Another thread's durability failure (the checkpointer's sync of the
 * database): sticky as the syncer's own, so every later batch fails and the
 * store must be reopened. The first failure's text is kept. */
void sq_sync_fail(sq_sync *y, const char *why);

/* 1 once the pipeline has failed. */
int sq_sync_failed(sq_sync *y);

/* The failure's text ("" when none). */
const char *sq_sync_why(sq_sync *y);

#endif
