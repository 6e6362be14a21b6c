/*
 * sqlite_sync.c — the SQLite store's durability pipeline (see sqlite_sync.h):
 * the writer's batches, the syncer that fdatasyncs the WAL, and the wait of
 * a read for what it saw to be durable.
 */
#include "store/sqlite_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "ledger/store.h"

/* fdatasync of the WAL through a descriptor of our own: the pages the
 * writer wrote are the inode's, whichever descriptor flushes them. SQLite
 * never deletes the WAL while a connection of ours is open (each holds a
 * shared lock on the database); should the file be gone all the same, the
 * frames the descriptor sees are no longer the WAL, and that is a failure,
 * never a success. */
static int sync_wal(int fd, char *why, size_t whylen)
{
    struct stat st;
    FAULT_POINT("before_sync");
    FAULT_DELAY("before_sync");
    int err = FAULT_FAILS("before_sync") ? EIO : fdatasync(fd) == 0 ? 0 : errno;
    if (err) {
        snprintf(why, whylen, "fdatasync of the WAL failed: %s; restart once", strerror(err));
        return ONCE_ESTORE;
    }
    if (fstat(fd, &st) != 0 || st.st_nlink == 0) {
        snprintf(why, whylen, "the WAL file was removed under the store; restart once");
        return ONCE_ESTORE;
    }
    return ONCE_OK;
}

/* Marks the pipeline failed, under y->mu: the first failure's text is
 * kept (the syncer's or the checkpointer's, whichever came first), written
 * before the flag that publishes it. */
static void fail_locked(sq_sync *y, const char *why)
{
    if (atomic_load(&y->failed))
        return;
    snprintf(y->why, sizeof y->why, "%s", why);
    atomic_store(&y->failed, 1);
}

/* Takes every batch committed since the last round, makes them durable
 * with one fdatasync, then finishes them in commit order (readers may go
 * on as soon as durable moves, before the callbacks run). A failed
 * fdatasync leaves the page cache in a state nobody can know (the kernel
 * may have dropped the dirty pages, and a second fdatasync would not say
 * so), so it fails those batches and, sticky, every later one: the store
 * must be reopened. */
static void *syncer_main(void *arg)
{
    sq_sync *y = arg;
    pthread_setname_np(pthread_self(), "once-sync");
    pthread_mutex_lock(&y->mu);
    for (;;) {
        uint64_t from = atomic_load(&y->durable), to = y->committed;
        if (to == from) {
            if (y->stop)
                break;
            pthread_cond_wait(&y->work_cv, &y->mu);
            continue;
        }
        pthread_mutex_unlock(&y->mu);
        char why[sizeof y->why] = "";
        int rc = atomic_load(&y->failed) ? ONCE_OK : sync_wal(y->fd, why, sizeof why);
        pthread_mutex_lock(&y->mu);
        if (rc < 0)
            fail_locked(y, why);
        atomic_store(&y->durable, to);
        pthread_cond_broadcast(&y->durable_cv);
        int failed = atomic_load(&y->failed);
        pthread_mutex_unlock(&y->mu);
        for (uint64_t k = from + 1; k <= to; k++)
            y->finish(y->finish_ctx, &y->ring[(k - 1) % SQ_SYNC_DEPTH], failed, y->why);
        pthread_mutex_lock(&y->mu);
        y->finished = to;
        pthread_cond_signal(&y->slot_cv);
    }
    pthread_mutex_unlock(&y->mu);
    return NULL;
}

int sq_sync_open(sq_sync *y, const char *wal_path, sq_finish_fn finish, void *ctx)
{
    memset(y, 0, sizeof *y);
    y->finish = finish;
    y->finish_ctx = ctx;
    y->fd = -1;
    if (pthread_mutex_init(&y->mu, NULL) != 0)
        return once_fail(ONCE_ENOMEM, "store: cannot make the syncer's lock");
    pthread_cond_init(&y->work_cv, NULL);
    pthread_cond_init(&y->slot_cv, NULL);
    pthread_cond_init(&y->durable_cv, NULL);
    y->ready = 1;
    y->fd = open(wal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (y->fd < 0)
        return once_fail(ONCE_ESTORE, "store: cannot open %s: %s", wal_path, strerror(errno));
    if (pthread_create(&y->thread, NULL, syncer_main, y) != 0)
        return once_fail(ONCE_ENOMEM, "store: cannot start the syncer thread");
    y->started = 1;
    return ONCE_OK;
}

void sq_sync_close(sq_sync *y)
{
    if (!y->ready)
        return;
    pthread_mutex_lock(&y->mu);
    y->stop = 1;
    pthread_cond_broadcast(&y->work_cv);
    pthread_mutex_unlock(&y->mu);
    if (y->started)
        pthread_join(y->thread, NULL);
    if (y->fd >= 0)
        close(y->fd);
    y->started = 0;
    y->fd = -1;
    pthread_cond_destroy(&y->durable_cv);
    pthread_cond_destroy(&y->slot_cv);
    pthread_cond_destroy(&y->work_cv);
    pthread_mutex_destroy(&y->mu);
    y->ready = 0;
}

sq_batch *sq_sync_slot(sq_sync *y)
{
    pthread_mutex_lock(&y->mu);
    while (y->taken - y->finished >= SQ_SYNC_DEPTH)
        pthread_cond_wait(&y->slot_cv, &y->mu);
    pthread_mutex_unlock(&y->mu);
    return &y->ring[y->taken % SQ_SYNC_DEPTH];
}

int sq_sync_begin(sq_sync *y)
{
    y->taken++;
    atomic_store(&y->visible, y->taken);
    return atomic_load(&y->failed);
}

void sq_sync_commit(sq_sync *y)
{
    pthread_mutex_lock(&y->mu);
    y->committed = y->taken;
    pthread_cond_signal(&y->work_cv);
    pthread_mutex_unlock(&y->mu);
}

int sq_sync_wait_read(sq_sync *y)
{
    uint64_t seen = atomic_load(&y->visible);
    if (atomic_load(&y->durable) < seen) {
        pthread_mutex_lock(&y->mu);
        while (atomic_load(&y->durable) < seen && !atomic_load(&y->failed))
            pthread_cond_wait(&y->durable_cv, &y->mu);
        pthread_mutex_unlock(&y->mu);
    }
    if (atomic_load(&y->failed))
        return once_fail(ONCE_ESTORE, "store: %s", y->why);
    return ONCE_OK;
}

int sq_sync_settled(sq_sync *y)
{
    return atomic_load(&y->failed) || atomic_load(&y->durable) >= atomic_load(&y->visible);
}

void sq_sync_fail(sq_sync *y, const char *why)
{
    pthread_mutex_lock(&y->mu);
    fail_locked(y, why);
    pthread_cond_broadcast(&y->durable_cv);
    pthread_mutex_unlock(&y->mu);
}

int sq_sync_failed(sq_sync *y)
{
    return atomic_load(&y->failed);
}

const char *sq_sync_why(sq_sync *y)
{
    return atomic_load(&y->failed) ? y->why : "";
}
