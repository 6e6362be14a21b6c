/*
 * sqlite_store.c — the SQLite store: one writer thread doing group commit,
 * a syncer that makes each batch durable, a pool of read connections, and a
 * checkpointer.
 *
 * SQLite lets one writer commit at a time and each commit costs an fsync, so
 * a second writer thread adds nothing; batching does. Callers queue their
 * operation and sleep; the writer runs everything queued in one transaction
 * and commits it. The fsync is not the writer's: it commits with
 * synchronous=NORMAL (in WAL mode: commits unsynced, checkpoints synced) and
 * hands the batch to the syncer, which fdatasyncs the WAL and only then wakes
 * the batch's callers, while the writer already runs the next batch. Reads
 * never queue: they run on a pooled connection in the caller's thread, and
 * wait, before they answer, until what they saw is durable too. An in-memory
 * store has a single connection, so there reads queue, and nothing syncs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fault.h"
#include "store/sqlite_ops.h"
#include "store/sqlite_schema.h"
#include "store/stores.h"

#define BATCH_MAX 512
#define POOL_MAX 64
#define CHECKPOINT_PAGES 1000 /* about 4 MiB of WAL */
#define WAL_LIMIT_DEFAULT ((int64_t)64 << 20)
#define SYNC_DEPTH 4 /* batches committed and not yet durable, at most */

/* A batch between the writer and the syncer. */
typedef struct sq_batch {
    bq_item *items[BATCH_MAX];
    size_t n;
    double t0; /* when its transaction began: the commit hook's duration runs to durable */
} sq_batch;

typedef struct sq_store {
    store_head head; /* first: the ledger sees a once_store, op.c the queue */
    char *path;
    int memory;
    sq_conn writer;
    pthread_t writer_thread;
    int writer_started;

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    sq_conn *pool_free[POOL_MAX];
    size_t pool_nfree;
    size_t pool_nopen;

    pthread_mutex_t ckpt_mu;
    pthread_mutex_t ckpt_run_mu; /* held while a checkpoint runs: the writer's and the checkpointer's take turns */
    pthread_cond_t ckpt_cv;
    int ckpt_stop;
    int ckpt_wanted;
    pthread_t ckpt_thread;
    int ckpt_started;
    int64_t wal_limit;      /* past this, a checkpoint restarts and truncates the WAL (under ckpt_mu) */
    int64_t frame_bytes;    /* one WAL frame: the page size + its 24-byte header (set at open) */
    int lock_fd;            /* PATH.lock, held by the one gateway serving the file; -1 */
    int trunc_wanted;       /* writer thread only: the WAL passed its bound, truncate after this commit */

    /* Durability (a file store). Batch number k (from 1) sits in
     * ring[(k - 1) % SYNC_DEPTH] from its take until the syncer finishes it;
     * visible is the newest batch whose commit readers may already see,
     * synced the newest known durable (every batch up to it is). */
    sq_batch ring[SYNC_DEPTH];
    pthread_mutex_t sync_mu;
    pthread_cond_t sync_cv;  /* the syncer: a batch committed, or stop */
    pthread_cond_t slot_cv;  /* the writer: a ring slot came free */
    pthread_cond_t durable_cv; /* readers: synced moved */
    uint64_t taken;          /* batches taken by the writer (its ring position; writer thread only) */
    uint64_t committed;      /* batches handed to the syncer (under sync_mu) */
    _Atomic uint64_t visible;
    _Atomic uint64_t synced;
    int sync_stop;
    _Atomic int sync_failed; /* sticky: an fdatasync failed; nothing is acknowledged after it */
    char sync_why[160];
    int wal_fd;              /* the syncer's own descriptor of PATH-wal; -1 */
    pthread_t sync_thread;
    int sync_started;
} sq_store;

/* ---- group commit ------------------------------------------------------ */

static void wal_truncate(sq_store *s);

static int tx_exec(sqlite3 *db, const char *sql, int *sqlrc)
{
    *sqlrc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    return *sqlrc == SQLITE_OK ? 0 : -1;
}

static int code_of(int sqlrc)
{
    switch (sqlrc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ONCE_EBUSY;
    case SQLITE_NOMEM: return ONCE_ENOMEM;
    default: return ONCE_ESTORE;
    }
}

/* Fails the ops that had succeeded: their transaction did not commit, so
 * nothing they reported is true. */
static void batch_void(store_op **ops, size_t n, int code, const char *why, const char *msg)
{
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->rc >= 0 || ops[i]->rc == ONCE_ESTORE)
            store_op_void(ops[i], code, "%s: %s", why, msg);
    }
}

static void batch_run(sq_store *s, store_op **ops, size_t n)
{
    sqlite3 *db = s->writer.db;
    int sqlrc;
    for (size_t i = 0; i < n; i++)
        ops[i]->rc = ONCE_ESTORE;
    if (tx_exec(db, "BEGIN IMMEDIATE", &sqlrc) < 0) {
        batch_void(ops, n, code_of(sqlrc), "begin", sqlite3_errmsg(db));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sq_op_run(&s->writer, ops[i]);
        /* Some errors (disk full, I/O) roll the whole transaction back:
         * then no operation of this batch happened. */
        if (ops[i]->rc < 0 && sqlite3_get_autocommit(db)) {
            char msg[ONCE_DETAIL_MAX];
            memcpy(msg, ops[i]->detail, sizeof msg);
            int code = ops[i]->rc;
            for (size_t j = 0; j < n; j++)
                store_op_void(ops[j], code, "the transaction was rolled back: %s", msg);
            return;
        }
    }
    FAULT_POINT("before_commit");
    if (tx_exec(db, "COMMIT", &sqlrc) < 0) {
        char msg[ONCE_DETAIL_MAX];
        snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(db));
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        batch_void(ops, n, code_of(sqlrc), "commit", msg);
        return;
    }
    FAULT_POINT("after_commit");
    if (s->trunc_wanted)
        wal_truncate(s);
}

/* The commit hook gets each batch's time from BEGIN to durable. */
static void batch_hook(sq_store *s, const sq_batch *b)
{
    once_commit_hook hook = s->head.base.commit_hook;
    if (hook)
        hook(s->head.base.commit_hook_ctx, b->n, clock_mono_seconds() - b->t0);
}

/* The ring slot for the next batch, once the syncer has freed it: at most
 * SYNC_DEPTH batches wait for their fdatasync, so a stalled disk stops the
 * writer instead of piling up callers nobody can answer. */
static sq_batch *writer_slot(sq_store *s)
{
    pthread_mutex_lock(&s->sync_mu);
    while (s->taken - atomic_load(&s->synced) >= SYNC_DEPTH)
        pthread_cond_wait(&s->slot_cv, &s->sync_mu);
    pthread_mutex_unlock(&s->sync_mu);
    return &s->ring[s->taken % SYNC_DEPTH];
}

static void *writer_main(void *arg)
{
    sq_store *s = arg;
    for (;;) {
        sq_batch *b = writer_slot(s);
        b->n = bq_take(&s->head.queue, b->items, BATCH_MAX);
        if (b->n == 0)
            break;
        b->t0 = clock_mono_seconds();
        s->taken++;
        if (s->wal_fd < 0) { /* in memory: nothing to sync */
            batch_run(s, (store_op **)b->items, b->n);
            batch_hook(s, b);
            bq_finish(&s->head.queue, b->items, b->n);
            atomic_store(&s->synced, s->taken);
            continue;
        }
        int failed = atomic_load(&s->sync_failed);
        /* Readers may see this batch from inside its COMMIT on. */
        atomic_store(&s->visible, s->taken);
        if (failed)
            batch_void((store_op **)b->items, b->n, ONCE_ESTORE, "store", s->sync_why);
        else
            batch_run(s, (store_op **)b->items, b->n);
        pthread_mutex_lock(&s->sync_mu);
        s->committed = s->taken;
        pthread_cond_signal(&s->sync_cv);
        pthread_mutex_unlock(&s->sync_mu);
    }
    return NULL;
}

/* ---- durability: the syncer -------------------------------------------- */

/* fdatasync of the WAL through the syncer's own descriptor: the pages the
 * writer wrote are the inode's, whichever descriptor flushes them. SQLite
 * never deletes the WAL while a connection of ours is open (each holds a
 * shared lock on the database); should the file be gone all the same, the
 * frames the descriptor sees are no longer the WAL, and that is a failure,
 * never a success. */
static int sync_wal(sq_store *s, char *why, size_t whylen)
{
    struct stat st;
    FAULT_POINT("before_sync");
    FAULT_DELAY("before_sync");
    int err = FAULT_FAILS("before_sync") ? EIO : fdatasync(s->wal_fd) == 0 ? 0 : errno;
    if (err) {
        snprintf(why, whylen, "fdatasync of the WAL failed: %s; restart once", strerror(err));
        return ONCE_ESTORE;
    }
    if (fstat(s->wal_fd, &st) != 0 || st.st_nlink == 0) {
        snprintf(why, whylen, "the WAL file was removed under the store; restart once");
        return ONCE_ESTORE;
    }
    return ONCE_OK;
}

/* Takes every committed batch, makes them durable with one fdatasync, and
 * only then finishes their operations (wakes the callers, runs the
 * callbacks). A failed fdatasync leaves the page cache in a state nobody
 * can know (the kernel may have dropped the dirty pages), so it fails those
 * operations and, sticky, every later one: the store must be reopened. */
static void *sync_main(void *arg)
{
    sq_store *s = arg;
    pthread_mutex_lock(&s->sync_mu);
    for (;;) {
        uint64_t done = atomic_load(&s->synced);
        if (s->committed == done) {
            if (s->sync_stop)
                break;
            pthread_cond_wait(&s->sync_cv, &s->sync_mu);
            continue;
        }
        uint64_t end = s->committed;
        pthread_mutex_unlock(&s->sync_mu);

        char why[sizeof s->sync_why] = "";
        int failed = atomic_load(&s->sync_failed);
        if (!failed && sync_wal(s, why, sizeof why) < 0) {
            /* sync_why is written once, before the flag that publishes it */
            memcpy(s->sync_why, why, sizeof why);
            atomic_store(&s->sync_failed, 1);
            failed = 1;
        }
        for (uint64_t k = done + 1; k <= end; k++) {
            sq_batch *b = &s->ring[(k - 1) % SYNC_DEPTH];
            if (failed)
                batch_void((store_op **)b->items, b->n, ONCE_ESTORE, "store", s->sync_why);
            else
                batch_hook(s, b);
            bq_finish(&s->head.queue, b->items, b->n);
        }
        pthread_mutex_lock(&s->sync_mu);
        atomic_store(&s->synced, end);
        pthread_cond_broadcast(&s->durable_cv);
        pthread_cond_signal(&s->slot_cv);
    }
    pthread_mutex_unlock(&s->sync_mu);
    return NULL;
}

/* Called by a read that will answer a caller, after it read: waits until
 * every commit it may have seen is durable, so that nobody is told an
 * outcome (a replay, a duplicate webhook) that a power cut could still
 * take back. Without writes in flight it costs two atomic loads. */
static int read_durable(sq_store *s)
{
    if (s->wal_fd < 0)
        return ONCE_OK;
    uint64_t seen = atomic_load(&s->visible);
    if (atomic_load(&s->synced) < seen) {
        pthread_mutex_lock(&s->sync_mu);
        while (atomic_load(&s->synced) < seen && !atomic_load(&s->sync_failed))
            pthread_cond_wait(&s->durable_cv, &s->sync_mu);
        pthread_mutex_unlock(&s->sync_mu);
    }
    if (atomic_load(&s->sync_failed))
        return once_fail(ONCE_ESTORE, "store: %s", s->sync_why);
    return ONCE_OK;
}

/* ---- checkpoints ------------------------------------------------------- */

/* Runs on the writer thread after each commit, pages being the frames now
 * in the WAL. Past the bound (wal_max) the writer itself truncates it
 * (wal_truncate), between two transactions: it is the one connection a
 * TRUNCATE checkpoint would otherwise wait for, and under a sustained load
 * it never stops writing, so a checkpointer thread waiting for it let the
 * WAL overshoot (a 5-minute soak peaked at 234 MB with a 64 MiB bound). The
 * file never grows past the bound by more than one batch. Below the bound
 * the checkpointer copies frames back (PASSIVE) off the commit path. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    sq_store *s = arg;
    (void)db;
    (void)name;
    pthread_mutex_lock(&s->ckpt_mu);
    int64_t limit = s->wal_limit;
    pthread_mutex_unlock(&s->ckpt_mu);
    if (s->frame_bytes > 0 && (int64_t)pages * s->frame_bytes > limit) {
        s->trunc_wanted = 1;
        return SQLITE_OK;
    }
    if (pages >= CHECKPOINT_PAGES) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_wanted = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
    }
    return SQLITE_OK;
}

/* The writer's TRUNCATE checkpoint, after the COMMIT that passed the bound
 * returned. synchronous=NORMAL makes SQLite sync the WAL before copying and
 * the database after, so the batches the syncer has not reached yet are
 * durable by the time their frames go. A checkpoint already running (the
 * checkpointer's) would make this one fail at once, and the WAL grow on:
 * wait for it. Then wait (the busy timeout) for readers of old frames,
 * which are short; if one outlasts it, the next commit tries again. */
static void wal_truncate(sq_store *s)
{
    s->trunc_wanted = 0;
    pthread_mutex_lock(&s->ckpt_run_mu);
    sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    pthread_mutex_unlock(&s->ckpt_run_mu);
}

/* The size of the WAL file (0 when there is none). */
static int sq_wal_bytes(const sq_store *s, int64_t *out)
{
    char wal[4096];
    struct stat st;
    *out = 0;
    if (snprintf(wal, sizeof wal, "%s-wal", s->path) >= (int)sizeof wal)
        return once_fail(ONCE_EINVAL, "store: path too long");
    if (stat(wal, &st) == 0)
        *out = (int64_t)st.st_size;
    else if (errno != ENOENT)
        return once_fail(ONCE_ESTORE, "store: cannot stat %s: %s", wal, strerror(errno));
    return ONCE_OK;
}

static void *ckpt_main(void *arg)
{
    sq_store *s = arg;
    sq_conn c;
    if (sq_conn_open(&c, s->path) < 0)
        return NULL; /* the WAL then grows until the next open checkpoints it */
    /* A connection learns that the file is in WAL mode only when it first
     * reads it; until then a checkpoint silently does nothing. */
    if (sqlite3_exec(c.db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
        sq_conn_close(&c);
        return NULL;
    }
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        if (!s->ckpt_wanted) {
            clock_cond_wait_ms(&s->ckpt_cv, &s->ckpt_mu, 1000);
            if (s->ckpt_stop)
                break;
        }
        s->ckpt_wanted = 0;
        int64_t limit = s->wal_limit;
        pthread_mutex_unlock(&s->ckpt_mu);
        /* PASSIVE never waits for readers or the writer: it copies what it
         * can and leaves the rest for the next round; the writer's hook
         * truncates past the bound. A WAL left over the bound while idle
         * (a bound lowered, or a file from before) is truncated here: with
         * no commits there is no writer to wait for. */
        int64_t wal = 0;
        int mode = sq_wal_bytes(s, &wal) == ONCE_OK && wal > limit ? SQLITE_CHECKPOINT_TRUNCATE
                                                                     : SQLITE_CHECKPOINT_PASSIVE;
        pthread_mutex_lock(&s->ckpt_run_mu);
        sqlite3_wal_checkpoint_v2(c.db, NULL, mode, NULL, NULL);
        pthread_mutex_unlock(&s->ckpt_run_mu);
        pthread_mutex_lock(&s->ckpt_mu);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    sq_conn_close(&c);
    return NULL;
}

/* ---- read connections -------------------------------------------------- */

static int pool_get(sq_store *s, sq_conn **out)
{
    pthread_mutex_lock(&s->pool_mu);
    for (;;) {
        if (s->pool_nfree > 0) {
            *out = s->pool_free[--s->pool_nfree];
            pthread_mutex_unlock(&s->pool_mu);
            return ONCE_OK;
        }
        if (s->pool_nopen < POOL_MAX)
            break;
        pthread_cond_wait(&s->pool_cv, &s->pool_mu);
    }
    s->pool_nopen++;
    pthread_mutex_unlock(&s->pool_mu);

    sq_conn *c = malloc(sizeof *c);
    int rc = c ? sq_conn_open(c, s->path) : once_fail(ONCE_ENOMEM, "read connection: out of memory");
    if (rc == ONCE_OK && sqlite3_exec(c->db, "PRAGMA query_only = 1", NULL, NULL, NULL) != SQLITE_OK) {
        rc = once_fail(ONCE_ESTORE, "read connection: %s", sqlite3_errmsg(c->db));
        sq_conn_close(c);
    }
    if (rc < 0) {
        free(c);
        pthread_mutex_lock(&s->pool_mu);
        s->pool_nopen--;
        pthread_cond_signal(&s->pool_cv);
        pthread_mutex_unlock(&s->pool_mu);
        return rc;
    }
    *out = c;
    return ONCE_OK;
}

static void pool_put(sq_store *s, sq_conn *c)
{
    pthread_mutex_lock(&s->pool_mu);
    s->pool_free[s->pool_nfree++] = c;
    pthread_cond_signal(&s->pool_cv);
    pthread_mutex_unlock(&s->pool_mu);
}

/* ---- running operations ------------------------------------------------ */

/* A read runs on a pooled connection in the caller's thread, against the last
 * committed snapshot; an in-memory store has only the writer's connection,
 * so there a read queues like a write. */
static int run_read(sq_store *s, store_op *op)
{
    if (s->memory)
        return store_queue_op(&s->head.base, op, NULL, NULL);
    sq_conn *c;
    int rc = pool_get(s, &c);
    if (rc < 0)
        return rc;
    sq_op_run(c, op);
    pool_put(s, c);
    if (op->rc >= 0 && (rc = read_durable(s)) < 0)
        store_op_void(op, rc, "%s", once_errdetail());
    return store_op_result(op);
}

void sqlite_store_global_init(void)
{
    /* SQLITE_MISUSE when SQLite has already started: then nothing changes. */
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static sq_store *sq(once_store *s)
{
    return (sq_store *)s;
}

static int sqs_reserve(once_store *st, const once_reserve_req *req, int64_t now, once_reservation *out, once_cb cb,
                       void *ctx)
{
    sq_store *s = sq(st);
    once_reserve_req rq = *req; /* request_fn is resolved into it below */
    store_op op = {.kind = OP_RESERVE, .now = now, .scope = req->scope, .key = req->key, .rreq = &rq, .res = out};
    /* A replay or a conflict is decided by one indexed read, without the
     * writer and without an fsync. */
    if (!s->memory) {
        sq_conn *c;
        int rc = pool_get(s, &c);
        if (rc < 0)
            return rc;
        op.rc = ONCE_ESTORE;
        op.detail[0] = '\0';
        int answered = sq_reserve_read(c, &op);
        pool_put(s, c);
        if (answered) {
            if (op.rc >= 0 && (rc = read_durable(s)) < 0) {
                once_reservation_free(out);
                return rc;
            }
            rc = store_op_result(&op);
            return cb && rc == ONCE_OK ? 1 : rc;
        }
        once_reservation_free(out);
    }
    return store_queue_reserve(st, &op, &rq, cb, ctx);
}

static int sqs_get(once_store *st, const char *scope, const char *key, once_action *out)
{
    return run_read(sq(st), &(store_op){.kind = OP_GET, .scope = scope, .key = key, .action = out});
}

/* The oldest undecided action's created_at: a read like a get. */
static int sqs_approval_oldest(once_store *st, int64_t *created_at)
{
    return run_read(sq(st), &(store_op){.kind = OP_APPROVAL_OLDEST, .oldest = created_at});
}

static int sqs_list(once_store *st, const once_list_req *req, int64_t after_id, once_action_list *out)
{
    return run_read(sq(st), &(store_op){.kind = OP_LIST, .lreq = req, .after_id = after_id, .list = out});
}

/* ---- webhook events ---------------------------------------------------- */

static int sqs_event_insert(once_store *st, const once_event_in *ev, int64_t now, int *inserted, once_cb cb,
                            void *ctx)
{
    sq_store *s = sq(st);
    store_op op = {.kind = OP_EV_INSERT, .now = now, .ev_in = ev, .inserted = inserted};
    /* A redelivered event is found by one indexed read: no write, no fsync. */
    if (!s->memory) {
        sq_conn *c;
        int rc = pool_get(s, &c);
        if (rc < 0)
            return rc;
        int found = sq_event_exists(c, &op, ev);
        pool_put(s, c);
        if (found < 0)
            return store_op_result(&op);
        if (found && (rc = read_durable(s)) < 0)
            return rc;
        if (found) {
            *inserted = 0;
            return cb ? 1 : ONCE_OK;
        }
    }
    return store_queue_op(st, &op, cb, ctx);
}

static int sqs_event_get(once_store *st, const char *source, const char *event_id, once_event *out)
{
    return run_read(sq(st), &(store_op){.kind = OP_EV_GET, .scope = source, .event_id = event_id, .event = out});
}

static int sqs_event_list(once_store *st, const once_event_list_req *req, int64_t after_id, once_event_list *out)
{
    return run_read(sq(st), &(store_op){.kind = OP_EV_LIST, .ev_lreq = req, .after_id = after_id, .ev_list = out});
}

/* ---- open and close ---------------------------------------------------- */

/* The syncer's end: it finishes every batch the writer committed, then
 * returns (the writer has stopped). */
static void sync_stop(sq_store *s)
{
    if (!s->sync_started)
        return;
    pthread_mutex_lock(&s->sync_mu);
    s->sync_stop = 1;
    pthread_cond_signal(&s->sync_cv);
    pthread_mutex_unlock(&s->sync_mu);
    pthread_join(s->sync_thread, NULL);
    s->sync_started = 0;
}

static void sqs_close(once_store *st)
{
    sq_store *s = sq(st);
    if (s->writer_started) {
        bq_close(&s->head.queue);
        pthread_join(s->writer_thread, NULL);
    }
    sync_stop(s);
    if (s->ckpt_started) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt_thread, NULL);
    }
    for (size_t i = 0; i < s->pool_nfree; i++) {
        sq_conn_close(s->pool_free[i]);
        free(s->pool_free[i]);
    }
    /* The last connection to close checkpoints the WAL and deletes it;
     * with synchronous=NORMAL that checkpoint syncs the database first. */
    if (s->writer.db)
        sq_conn_close(&s->writer);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    bq_destroy(&s->head.queue);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* after every connection: the lock outlives the serving */
    pthread_cond_destroy(&s->durable_cv);
    pthread_cond_destroy(&s->slot_cv);
    pthread_cond_destroy(&s->sync_cv);
    pthread_mutex_destroy(&s->sync_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->ckpt_run_mu);
    pthread_cond_destroy(&s->pool_cv);
    pthread_mutex_destroy(&s->pool_mu);
    free(s->path);
    free(s);
}

static int sqs_set_wal_limit(once_store *st, int64_t bytes)
{
    sq_store *s = sq(st);
    pthread_mutex_lock(&s->ckpt_mu);
    s->wal_limit = bytes;
    pthread_mutex_unlock(&s->ckpt_mu);
    return ONCE_OK;
}

static int sqs_wal_bytes(once_store *st, int64_t *out)
{
    sq_store *s = sq(st);
    if (s->memory) {
        *out = 0;
        return ONCE_OK;
    }
    return sq_wal_bytes(s, out);
}

/* One gateway per file: a second `once serve` on it would split the
 * traffic between two processes whose in-process state (the replay cache,
 * waiters, leases) each believes is the only one. An advisory lock on
 * PATH.lock (never on the database file: closing another descriptor of
 * that file would drop SQLite's own locks) holds for the process's life;
 * the CLI does not take it. */
static int sqs_lock(once_store *st)
{
    sq_store *s = sq(st);
    if (s->memory || s->lock_fd >= 0)
        return ONCE_OK;
    /* The file's real name: a symlink or another spelling of the path must
     * meet the same lock (a hard link would not; nobody serves one by
     * accident). */
    char *real = realpath(s->path, NULL);
    if (!real)
        return once_fail(ONCE_ESTORE, "cannot resolve %s: %s", s->path, strerror(errno));
    char path[4096];
    int plen = snprintf(path, sizeof path, "%s.lock", real);
    free(real);
    if (plen < 0 || plen >= (int)sizeof path)
        return once_fail(ONCE_EINVAL, "store: path too long");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return once_fail(ONCE_ESTORE, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t got = pread(fd, pid, sizeof pid - 1, 0);
        pid[got > 0 ? got : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        return once_fail(ONCE_EBUSY, "%s is served by another once serve%s%s%s", s->path, pid[0] ? " (pid " : "",
                         pid, pid[0] ? ")" : "");
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        /* The lock holds without its note: nothing depends on it. */
    }
    s->lock_fd = fd;
    return ONCE_OK;
}

static const store_vtable sqlite_vtable = {
    .name = "sqlite",
    STORE_QUEUE_ENTRIES,
    /* the writes a read may answer first; the reads; the WAL and the lock */
    .reserve = sqs_reserve, .event_insert = sqs_event_insert,
    .get = sqs_get, .list = sqs_list, .event_get = sqs_event_get, .event_list = sqs_event_list,
    .approval_oldest = sqs_approval_oldest,
    .set_wal_limit = sqs_set_wal_limit, .wal_bytes = sqs_wal_bytes, .lock = sqs_lock,
    .close = sqs_close,
};

/* The syncer of a file store: its own descriptor of the WAL (which the
 * writer's schema step has created), and the writer switched from FULL to
 * NORMAL only once something will sync what it commits. */
static int sync_start(sq_store *s)
{
    char wal[4096];
    if (snprintf(wal, sizeof wal, "%s-wal", s->path) >= (int)sizeof wal)
        return once_fail(ONCE_EINVAL, "store: path too long");
    s->wal_fd = open(wal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (s->wal_fd < 0)
        return once_fail(ONCE_ESTORE, "store: cannot open %s: %s", wal, strerror(errno));
    if (pthread_create(&s->sync_thread, NULL, sync_main, s) != 0)
        return once_fail(ONCE_ENOMEM, "store: cannot start the syncer thread");
    s->sync_started = 1;
    if (sqlite3_exec(s->writer.db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL) != SQLITE_OK)
        return once_fail(ONCE_ESTORE, "store: %s", sqlite3_errmsg(s->writer.db));
    return ONCE_OK;
}

int sqlite_store_open(const char *path, once_store **out)
{
    sq_store *s = calloc(1, sizeof *s);
    if (!s)
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    s->head.base.vt = &sqlite_vtable;
    s->memory = strcmp(path, ":memory:") == 0;
    s->wal_limit = WAL_LIMIT_DEFAULT;
    s->lock_fd = -1;
    s->wal_fd = -1;
    s->path = once_memdup0(path, strlen(path));
    if (!s->path || bq_init(&s->head.queue) < 0) {
        free(s->path);
        free(s);
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    }
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->ckpt_run_mu, NULL);
    clock_cond_init(&s->ckpt_cv);
    pthread_mutex_init(&s->sync_mu, NULL);
    pthread_cond_init(&s->sync_cv, NULL);
    pthread_cond_init(&s->slot_cv, NULL);
    pthread_cond_init(&s->durable_cv, NULL);

    int rc = sq_conn_open(&s->writer, path);
    if (rc == ONCE_OK)
        rc = sqlite_schema_prepare(s->writer.db, s->memory);
    if (rc == ONCE_OK && !s->memory) {
        sqlite3_stmt *ps = NULL;
        if (sqlite3_prepare_v2(s->writer.db, "PRAGMA page_size", -1, &ps, NULL) == SQLITE_OK &&
            sqlite3_step(ps) == SQLITE_ROW)
            s->frame_bytes = sqlite3_column_int64(ps, 0) + 24;
        sqlite3_finalize(ps);
        sqlite3_wal_hook(s->writer.db, wal_hook, s);
        if (pthread_create(&s->ckpt_thread, NULL, ckpt_main, s) != 0)
            rc = once_fail(ONCE_ENOMEM, "store: cannot start the checkpointer thread");
        else
            s->ckpt_started = 1;
        if (rc == ONCE_OK)
            rc = sync_start(s);
    }
    if (rc == ONCE_OK) {
        if (pthread_create(&s->writer_thread, NULL, writer_main, s) != 0)
            rc = once_fail(ONCE_ENOMEM, "store: cannot start the writer thread");
        else
            s->writer_started = 1;
    }
    return store_finish_open(&s->head.base, rc, out);
}
