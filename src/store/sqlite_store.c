/*
 * sqlite_store.c — the SQLite store: one writer thread doing group commit,
 * the syncer that makes each batch durable, a pool of read connections, and a
 * checkpointer.
 *
 * SQLite lets one writer commit at a time and each commit costs an fsync, so
 * a second writer thread adds nothing; batching does. Callers queue their
 * operation and sleep; the writer runs everything queued in one transaction
 * and commits it. The fsync is not the writer's: it commits with
 * synchronous=NORMAL (in WAL mode: commits unsynced, checkpoints synced) and
 * hands the batch to the syncer (sqlite_sync.c), which fdatasyncs the WAL and
 * only then wakes the batch's callers, while the writer already runs the next
 * batch. Reads never queue: they run on a pooled connection in the caller's
 * thread and wait, before they answer, until what they saw is durable too (an
 * asynchronous caller's operation goes to the writer instead of waiting). An
 * in-memory store has a single connection, so there reads queue, and nothing
 * syncs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include "store/sqlite_sync.h"
#include "store/stores.h"

#define POOL_MAX 64
#define CHECKPOINT_PAGES 1000 /* about 4 MiB of WAL */
#define CKPT_PACE_MS 500      /* between two checkpoints under load */
#define CKPT_CONVERGE_PASSES 4 /* more passes, at most, before the writer finishes a round */
#define CKPT_TAIL_FRAMES 128  /* a tail this short is the writer's to copy: the WAL then starts over */
#define CKPT_TAIL_MAX 1024    /* a longer one is left to the checkpointer, whatever the writer was asked */
#define CKPT_IDLE_MS 1000     /* no commit for this long: the checkpointer may truncate the WAL */
#define WAL_LIMIT_DEFAULT ((int64_t)64 << 20)
#define WAL_HEADER_BYTES 32   /* the WAL file's own header, before its frames */

typedef struct sq_store {
    store_head head; /* first: the ledger sees a once_store, op.c the queue */
    char *path;
    char *wal_path; /* the WAL as SQLite names it (beside the file a symlink resolves to); NULL in memory */
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
    int ckpt_waiting;       /* the checkpointer waits for work, not out its pace (under ckpt_mu) */
    pthread_t ckpt_thread;
    int ckpt_started;
    int64_t wal_limit;      /* past this, a checkpoint restarts and truncates the WAL (under ckpt_mu) */
    int64_t frame_bytes;    /* one WAL frame: the page size + its 24-byte header (set at open) */
    int lock_fd;            /* PATH.lock, held by the one gateway serving the file; -1 */
    int trunc_wanted;       /* writer thread only: the WAL nears its bound, truncate after this commit */
    int last_frames;        /* writer thread only: frames in the WAL after the commit before */
    int batch_frames_max;   /* writer thread only: the most frames one commit added */
    _Atomic int restart_wanted; /* the checkpointer copied most of a long WAL: the writer finishes and restarts it */
    _Atomic int wal_frames;     /* frames in the WAL after the last commit (the WAL hook's count) */
    _Atomic int wal_copied;     /* of those, the frames the last checkpoint had copied */
    _Atomic int64_t commit_ms;  /* when the last commit ended (clock_mono_ms) */
    _Atomic int64_t durable_event_id; /* every events row up to this id is on disk */

    sq_sync sync; /* a file store's durability pipeline */
} sq_store;

/* ---- group commit ------------------------------------------------------ */

static void wal_checkpoint(sq_store *s, int mode);
static void wal_finish(sq_store *s);

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

/* Fails a batch that is not run: the store cannot make anything durable
 * any more (a failed fdatasync). */
static void batch_refuse(store_op **ops, size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++)
        store_op_fail(ops[i], ONCE_ESTORE, "store: %s", why);
}

/* 1 when the batch committed, 0 when nothing of it did. */
static int batch_run(sq_store *s, store_op **ops, size_t n)
{
    sqlite3 *db = s->writer.db;
    int sqlrc;
    for (size_t i = 0; i < n; i++)
        ops[i]->rc = ONCE_ESTORE;
    if (tx_exec(db, "BEGIN IMMEDIATE", &sqlrc) < 0) {
        batch_void(ops, n, code_of(sqlrc), "begin", sqlite3_errmsg(db));
        return 0;
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
            return 0;
        }
    }
    FAULT_POINT("before_commit");
    if (tx_exec(db, "COMMIT", &sqlrc) < 0) {
        char msg[ONCE_DETAIL_MAX];
        snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(db));
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        batch_void(ops, n, code_of(sqlrc), "commit", msg);
        return 0;
    }
    FAULT_POINT("after_commit");
    if (s->trunc_wanted)
        wal_checkpoint(s, SQLITE_CHECKPOINT_TRUNCATE);
    else if (atomic_load(&s->restart_wanted))
        wal_finish(s);
    return 1;
}

/* The writer runs batch b; b->event_id is the newest events row it
 * committed, for duplicates that a read finds (sqs_event_insert). A batch
 * rolled back leaves the writer's count where it was: SQLite may give its
 * ids again. */
static void batch_commit(sq_store *s, sq_batch *b)
{
    int64_t before = s->writer.last_event_id;
    if (batch_run(s, (store_op **)b->items, b->n))
        b->event_id = s->writer.last_event_id > before ? s->writer.last_event_id : 0;
    else
        s->writer.last_event_id = before;
}

/* The commit hook gets each batch's time from BEGIN to durable. */
static void batch_hook(sq_store *s, const sq_batch *b)
{
    once_commit_hook hook = s->head.base.commit_hook;
    if (hook)
        hook(s->head.base.commit_hook_ctx, b->n, clock_mono_seconds() - b->t0);
}

/* sq_finish_fn: a batch is durable, or cannot be: its callers hear. */
static void batch_finish(void *ctx, sq_batch *b, int failed, const char *why)
{
    sq_store *s = ctx;
    if (failed) {
        batch_void((store_op **)b->items, b->n, ONCE_ESTORE, "store", why);
    } else {
        if (b->event_id > 0) /* batches finish in the order they committed */
            atomic_store(&s->durable_event_id, b->event_id);
        batch_hook(s, b);
    }
    bq_finish(&s->head.queue, b->items, b->n);
}

/* In memory there is nothing to sync: each batch is finished at once. */
static void writer_memory(sq_store *s)
{
    sq_batch b;
    while ((b.n = bq_take(&s->head.queue, b.items, SQ_BATCH_MAX)) > 0) {
        b.t0 = clock_mono_seconds();
        b.event_id = 0;
        batch_run(s, (store_op **)b.items, b.n);
        batch_finish(s, &b, 0, "");
    }
}

static void *writer_main(void *arg)
{
    sq_store *s = arg;
    pthread_setname_np(pthread_self(), "once-writer");
    if (s->memory) {
        writer_memory(s);
        return NULL;
    }
    for (;;) {
        sq_batch *b = sq_sync_slot(&s->sync);
        b->n = bq_take(&s->head.queue, b->items, SQ_BATCH_MAX);
        if (b->n == 0)
            break;
        b->t0 = clock_mono_seconds();
        b->event_id = 0;
        /* Readers may see the batch from inside its COMMIT on. */
        if (sq_sync_begin(&s->sync))
            batch_refuse((store_op **)b->items, b->n, sq_sync_why(&s->sync));
        else
            batch_commit(s, b);
        sq_sync_commit(&s->sync);
    }
    return NULL;
}

/* A read that will answer a caller waits until what it saw is durable. */
static int read_durable(sq_store *s)
{
    return s->memory ? ONCE_OK : sq_sync_wait_read(&s->sync);
}

/* An asynchronous caller (an HTTP thread) never waits on the disk: when
 * what its read saw is not durable yet, the operation goes to the writer
 * instead, whose answer comes after its batch's fdatasync. */
static int read_must_queue(sq_store *s, once_cb cb)
{
    return cb && !s->memory && !sq_sync_settled(&s->sync);
}

/* ---- checkpoints ------------------------------------------------------- */

/* Under a sustained load the checkpoints, not the commits, made the slow
 * seconds (issue 30): the writer copied tens of MB into the database when
 * the WAL passed its bound, waited for the checkpointer's pass to end
 * before its own, and the checkpointer's TRUNCATE took the write lock from
 * it. Now the copying is the checkpointer's: the writer's only part is the
 * last few frames of a round, after a commit, which the WAL needs to start
 * over from its beginning (SQLite restarts a WAL only when a writer begins
 * with every frame copied, and under load the writer is always about to
 * begin). It never waits for the checkpointer, and never copies a long
 * tail; the bound (wal_max) stays a hard one, kept by the writer only when
 * the checkpointer cannot keep up with the disk. */

/* Whether the commit after this one could take the WAL past its bound:
 * it is kept with room for the most frames one commit has added (what a
 * commit adds is known only once it is written), at most a quarter of the
 * bound. Only a commit larger than any before, or than that quarter, can
 * pass the bound, and only by its own frames. Without the cap, one commit
 * as large as the bound (a batch of large bodies) would have the writer
 * truncate after every commit from then on. More room (twice the largest)
 * made the writer truncate more often under a steady load, where the WAL
 * runs close to the bound, for commits that never came. */
static int wal_near_bound(sq_store *s, int pages)
{
    int added = pages >= s->last_frames ? pages - s->last_frames : pages; /* fewer: the WAL started over */
    s->last_frames = pages;
    if (added > s->batch_frames_max)
        s->batch_frames_max = added;
    if (s->frame_bytes <= 0)
        return 0;
    int64_t room = (int64_t)s->batch_frames_max * s->frame_bytes;
    if (room > s->wal_limit / 4)
        room = s->wal_limit / 4;
    return WAL_HEADER_BYTES + (int64_t)pages * s->frame_bytes + room > s->wal_limit;
}

/* Runs on the writer thread after each commit, pages being the frames now
 * in the WAL. Near the bound (wal_max) the writer itself truncates it
 * (wal_checkpoint), between two transactions: it is the one connection a
 * TRUNCATE checkpoint would otherwise wait for. Below it the checkpointer
 * copies frames back (PASSIVE) off the commit path. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    sq_store *s = arg;
    (void)db;
    (void)name;
    atomic_store(&s->wal_frames, pages);
    atomic_store(&s->commit_ms, clock_mono_ms());
    /* While the checkpointer sits out its pace, a wake-up would only send
     * it back to sleep: under load that was one futex call on the commit
     * path and one context switch per commit (~650/s). */
    pthread_mutex_lock(&s->ckpt_mu);
    if (wal_near_bound(s, pages)) {
        s->trunc_wanted = 1;
    } else if (pages >= CHECKPOINT_PAGES) {
        s->ckpt_wanted = 1;
        if (s->ckpt_waiting)
            pthread_cond_signal(&s->ckpt_cv);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    return SQLITE_OK;
}

/* The checkpointer syncs the database after each pass that copied frames.
 * SQLite syncs it only in a checkpoint that copies every frame there is,
 * and under load that is the writer's short last pass (wal_finish): its
 * sync then flushed every page the checkpointer's passes had copied since
 * the WAL last started over, some 40 MB, 7-92 ms on the commit path (strace
 * of the writer, issue 30). Synced here first, the writer's sync carries its
 * own few pages. SQLite's sync before the WAL starts over stays the guard
 * of durability: a pass this one skips costs time, never data. Through
 * SQLite's own file handle: the same descriptor and the same kind of sync
 * SQLite would use. A failure fails the store as a failed sync of the WAL
 * does: the kernel may have dropped those pages, and the WAL must then
 * never start over (no checkpoint runs after it, the writer's included). */
static int ckpt_sync_db(sq_store *s, sqlite3 *db)
{
    sqlite3_file *f = NULL;
    int rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc == SQLITE_OK && (!f || !f->pMethods))
        rc = SQLITE_MISUSE;
    if (rc == SQLITE_OK)
        rc = FAULT_FAILS("ckpt_sync") ? SQLITE_IOERR_FSYNC : f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
    if (rc != SQLITE_OK) {
        char why[160];
        snprintf(why, sizeof why, "the checkpointer's sync of the database failed: %s; restart once",
                 sqlite3_errstr(rc));
        sq_sync_fail(&s->sync, why);
    }
    return rc;
}

/* One checkpoint on db, the writer's or the checkpointer's connection:
 * they take turns (a second checkpoint while one runs fails at once).
 * Without wait, it returns 1 at once when the other's is under way. The
 * checkpoint hook hears of each, the wait for the other's turn and the
 * checkpointer's sync of the database included (that wait is the writer's
 * stall too). */
static int ckpt_pass(sq_store *s, sqlite3 *db, int by_writer, int wait, int mode, int *frames, int *copied)
{
    double t0 = clock_mono_seconds();
    if (wait)
        pthread_mutex_lock(&s->ckpt_run_mu);
    else if (pthread_mutex_trylock(&s->ckpt_run_mu) != 0)
        return 1;
    /* Nothing is copied or truncated after a failed sync: checked under
     * the turn, so no pass can slip in after the failure. */
    if (sq_sync_failed(&s->sync)) {
        pthread_mutex_unlock(&s->ckpt_run_mu);
        return SQLITE_IOERR;
    }
    int before = atomic_load(&s->wal_copied);
    int rc = sqlite3_wal_checkpoint_v2(db, NULL, mode, frames, copied);
    if (rc == SQLITE_OK && !by_writer && *copied > 0 && *copied != before)
        rc = ckpt_sync_db(s, db);
    pthread_mutex_unlock(&s->ckpt_run_mu);
    if (rc == SQLITE_OK && *copied >= 0)
        atomic_store(&s->wal_copied, *copied);
    once_checkpoint_hook hook = s->head.base.checkpoint_hook;
    if (hook)
        hook(s->head.base.checkpoint_hook_ctx, by_writer, clock_mono_seconds() - t0, *frames, *copied);
    return rc;
}

/* The writer's TRUNCATE past the bound, after the COMMIT that passed it:
 * it waits for the checkpointer's pass and (with the busy timeout) for
 * readers of old frames, which are short; if one outlasts it, the next
 * commit tries again. synchronous=NORMAL makes SQLite sync the WAL before
 * copying and the database after, so the batches the syncer has not
 * reached yet are durable by the time their frames go. */
static void wal_checkpoint(sq_store *s, int mode)
{
    s->trunc_wanted = 0;
    int frames = 0, copied = 0;
    ckpt_pass(s, s->writer.db, 1, 1, mode, &frames, &copied);
}

/* The writer finishes a round of the checkpointer's: the few frames the
 * commits added during its last pass are copied, and with none left the
 * writer's next transaction starts the WAL over from its beginning (the
 * file keeps its size and is written over, so the syncs that follow do not
 * grow it). Its stop is the sync of those frames, so a tail longer than
 * CKPT_TAIL_MAX goes back to the checkpointer, and while the checkpointer
 * copies, the writer does not wait: the next commit tries again. A reader
 * of an old snapshot may hold frames back; PASSIVE does not wait for it,
 * and the next commit tries again (copying nothing new costs no sync). */
static void wal_finish(sq_store *s)
{
    int tail = atomic_load(&s->wal_frames) - atomic_load(&s->wal_copied);
    if (tail > CKPT_TAIL_MAX) {
        atomic_store(&s->restart_wanted, 0);
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_wanted = 1;
        if (s->ckpt_waiting)
            pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        return;
    }
    int frames = 0, copied = 0;
    int rc = ckpt_pass(s, s->writer.db, 1, 0, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied);
    if (rc == SQLITE_OK && copied >= frames)
        atomic_store(&s->restart_wanted, 0);
}

/* The size of the WAL file (0 when there is none). */
static int sq_wal_bytes(const sq_store *s, int64_t *out)
{
    struct stat st;
    *out = 0;
    if (!s->wal_path)
        return ONCE_OK;
    if (stat(s->wal_path, &st) == 0)
        *out = (int64_t)st.st_size;
    else if (errno != ENOENT)
        return once_fail(ONCE_ESTORE, "store: cannot stat %s: %s", s->wal_path, strerror(errno));
    return ONCE_OK;
}

/* PASSIVE never waits for readers or the writer: it copies what it can and
 * leaves the rest for the next round. TRUNCATE takes the write lock, so
 * the writer would wait for the whole copy: it is used only for a WAL left
 * over the bound (a bound lowered, or a file from before) with no commit
 * for CKPT_IDLE_MS. */
static int ckpt_mode(sq_store *s, int64_t limit)
{
    int64_t wal = 0;
    int idle = clock_mono_ms() - atomic_load(&s->commit_ms) >= CKPT_IDLE_MS;
    return idle && sq_wal_bytes(s, &wal) == ONCE_OK && wal > limit ? SQLITE_CHECKPOINT_TRUNCATE
                                                                    : SQLITE_CHECKPOINT_PASSIVE;
}

/* One round of the checkpointer's. Under a steady load the WAL is never
 * all copied when the writer begins, so it never starts over: it would
 * grow to the bound and the writer would stop there for a long TRUNCATE.
 * Past a quarter of the bound, more passes copy what the commits added
 * during the last one, while that shrinks; when the tail is short the
 * writer is asked to finish (wal_finish). 1 when the round ended behind
 * (the tail still long): the next one starts without the pace. */
static int ckpt_round(sq_store *s, sqlite3 *db, int64_t limit)
{
    int mode = ckpt_mode(s, limit);
    int frames = 0, copied = 0;
    int rc = ckpt_pass(s, db, 0, 1, mode, &frames, &copied);
    if (rc != SQLITE_OK || mode != SQLITE_CHECKPOINT_PASSIVE || (int64_t)frames * s->frame_bytes <= limit / 4)
        return 0;
    int tail = atomic_load(&s->wal_frames) - copied;
    for (int pass = 0; pass < CKPT_CONVERGE_PASSES && tail > CKPT_TAIL_FRAMES; pass++) {
        if (ckpt_pass(s, db, 0, 1, mode, &frames, &copied) != SQLITE_OK)
            return 0;
        tail = atomic_load(&s->wal_frames) - copied;
    }
    if (tail > CKPT_TAIL_MAX)
        return 1;
    atomic_store(&s->restart_wanted, 1);
    return 0;
}

static void *ckpt_main(void *arg)
{
    sq_store *s = arg;
    pthread_setname_np(pthread_self(), "once-ckpt");
    sq_conn c;
    if (sq_conn_open(&c, s->path) < 0)
        return NULL; /* the WAL then grows until the next open checkpoints it */
    /* A connection learns that the file is in WAL mode only when it first
     * reads it; until then a checkpoint silently does nothing. */
    if (sqlite3_exec(c.db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
        sq_conn_close(&c);
        return NULL;
    }
    int behind = 0;
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        if (!s->ckpt_wanted && !behind) {
            s->ckpt_waiting = 1;
            clock_cond_wait_ms(&s->ckpt_cv, &s->ckpt_mu, 1000);
            s->ckpt_waiting = 0;
            if (s->ckpt_stop)
                break;
        }
        s->ckpt_wanted = 0;
        int64_t limit = s->wal_limit;
        pthread_mutex_unlock(&s->ckpt_mu);
        behind = ckpt_round(s, c.db, limit);
        /* Paced: a page changed by many commits is copied once per round,
         * not once per commit (each round costs a sync of the WAL and of
         * the database, and the copies compete with the commits' fsync). */
        pthread_mutex_lock(&s->ckpt_mu);
        double until = clock_mono_seconds() + (behind ? 0 : CKPT_PACE_MS / 1000.0);
        while (!s->ckpt_stop && clock_mono_seconds() < until)
            clock_cond_wait_ms(&s->ckpt_cv, &s->ckpt_mu, (int64_t)((until - clock_mono_seconds()) * 1000) + 1);
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

/* A reservation goes to the writer, never to a pooled read first: the
 * writer's insert finds an existing row through its own page cache, while a
 * pooled read took a WAL read lock (fcntl, and the VFS mutex another thread
 * often held) and read the index's newest pages back from the WAL, about
 * two syscalls and a read transaction per new key on an HTTP thread, to
 * answer the few that were not new. A replay is answered from the ledger's
 * replay cache from its second time on (op.c fills it); a conflict
 * is answered after the writer's batch. */
static int sqs_reserve(once_store *st, const once_reserve_req *req, int64_t now, once_reservation *out, once_cb cb,
                       void *ctx)
{
    once_reserve_req rq = *req; /* request_fn is resolved into it below */
    store_op op = {.kind = OP_RESERVE, .now = now, .scope = req->scope, .key = req->key, .rreq = &rq, .res = out};
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

/* The use of one budget: a read like a get. */
static int sqs_limit_use(once_store *st, const char *limit, int64_t window_ms, int64_t now, double *used,
                         int64_t *retry_after_ms)
{
    return run_read(sq(st), &(store_op){.kind = OP_LIMIT_USE, .now = now, .text = limit, .window_ms = window_ms,
                                         .used = used, .retry_out = retry_after_ms});
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
        int64_t id = 0;
        int found = sq_event_exists(c, &op, ev, &id);
        pool_put(s, c);
        if (found < 0)
            return store_op_result(&op);
        /* A row the syncer has covered is durable, whatever is committed
         * behind it: under a steady flow of new events the store is never
         * settled, and duplicates waited in the writer's queue behind them
         * (issue 30). */
        int durable = found && id <= atomic_load(&s->durable_event_id);
        if (durable || (found && !read_must_queue(s, cb))) {
            if (!durable && (rc = read_durable(s)) < 0)
                return rc;
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

static void sqs_close(once_store *st)
{
    sq_store *s = sq(st);
    if (s->writer_started) {
        bq_close(&s->head.queue);
        pthread_join(s->writer_thread, NULL);
    }
    if (s->ckpt_started) { /* before the syncer: a failed sync of the checkpointer's fails it */
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt_thread, NULL);
    }
    sq_sync_close(&s->sync); /* finishes every batch the writer committed */
    for (size_t i = 0; i < s->pool_nfree; i++) {
        sq_conn_close(s->pool_free[i]);
        free(s->pool_free[i]);
    }
    /* The last connection to close checkpoints the WAL and deletes it;
     * with synchronous=NORMAL that checkpoint syncs the database first.
     * Not after a failed sync: the page cache may no longer be what the
     * disk holds, and the WAL is left for the next open to recover. */
    if (s->writer.db && !s->memory && sq_sync_failed(&s->sync))
        sqlite3_db_config(s->writer.db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    if (s->writer.db)
        sq_conn_close(&s->writer);
    bq_destroy(&s->head.queue);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* after every connection: the lock outlives the serving */
    pthread_cond_destroy(&s->ckpt_cv);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->ckpt_run_mu);
    pthread_cond_destroy(&s->pool_cv);
    pthread_mutex_destroy(&s->pool_mu);
    free(s->wal_path);
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
    .approval_oldest = sqs_approval_oldest, .limit_use = sqs_limit_use,
    .set_wal_limit = sqs_set_wal_limit, .wal_bytes = sqs_wal_bytes, .lock = sqs_lock,
    .close = sqs_close,
};

/* The WAL's name as SQLite opens it: beside the file the path resolves
 * to, since SQLite follows a symlink, not beside the path as given (a
 * store opened through a symlink had its WAL synced and measured under a
 * name that did not exist). */
static int wal_path_find(sq_store *s)
{
    const char *db = sqlite3_db_filename(s->writer.db, "main");
    const char *wal = db ? sqlite3_filename_wal(db) : NULL;
    if (!wal || !*wal)
        return once_fail(ONCE_ESTORE, "store: SQLite names no WAL file for %s", s->path);
    s->wal_path = once_memdup0(wal, strlen(wal));
    return s->wal_path ? ONCE_OK : once_fail(ONCE_ENOMEM, "store: out of memory");
}

/* The events already in the file are as durable as it is: a duplicate of
 * one is answered by a read. */
static int events_durable_init(sq_store *s)
{
    sqlite3_stmt *st = NULL;
    int ok = sqlite3_prepare_v2(s->writer.db, "SELECT coalesce(max(id), 0) FROM events", -1, &st, NULL) == SQLITE_OK &&
             sqlite3_step(st) == SQLITE_ROW;
    if (ok) {
        s->writer.last_event_id = sqlite3_column_int64(st, 0);
        atomic_store(&s->durable_event_id, s->writer.last_event_id);
    }
    sqlite3_finalize(st);
    return ok ? ONCE_OK : once_fail(ONCE_ESTORE, "store: cannot read the newest event: %s", sqlite3_errmsg(s->writer.db));
}

/* The syncer of a file store, on the WAL the writer's schema step has
 * created; the writer switched from FULL to NORMAL only once something
 * will sync what it commits. */
static int sync_start(sq_store *s)
{
    int rc = sq_sync_open(&s->sync, s->wal_path, batch_finish, s);
    if (rc < 0)
        return rc;
    if (sqlite3_exec(s->writer.db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL) != SQLITE_OK)
        return once_fail(ONCE_ESTORE, "store: %s", sqlite3_errmsg(s->writer.db));
    return ONCE_OK;
}

int sqlite_store_open(const char *path, once_store **out)
{
    sq_store *s = store_head_new(sizeof *s, &sqlite_vtable);
    if (!s)
        return ONCE_ENOMEM;
    s->memory = strcmp(path, ":memory:") == 0;
    s->wal_limit = WAL_LIMIT_DEFAULT;
    s->lock_fd = -1;
    s->path = once_memdup0(path, strlen(path));
    if (!s->path) {
        store_head_free(&s->head);
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    }
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->ckpt_run_mu, NULL);
    clock_cond_init(&s->ckpt_cv);

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
        rc = events_durable_init(s);
        if (rc == ONCE_OK)
            rc = wal_path_find(s);
        if (rc == ONCE_OK && pthread_create(&s->ckpt_thread, NULL, ckpt_main, s) != 0)
            rc = once_fail(ONCE_ENOMEM, "store: cannot start the checkpointer thread");
        else if (rc == ONCE_OK)
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
