/*
 * test_looper_job.c — the promise of a job (common/looper.h: looper_job),
 * the shape of the approvals sender, the reconciler and webhook delivery:
 * the stop ends only once every hand-off came back and was settled (a send
 * the stop cut is recorded, never dropped); a quiesced job claims nothing
 * new; a retry due (looper_job_due) wakes the loop however long the claim
 * asked to wait. And the queue under loops and workers keeps its order.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/looper.h"

#define NHAND 3

typedef struct job_case {
    pthread_mutex_t mu;
    looper_item items[NHAND];
    looper_job *job;
    int claims;           /* claim calls */
    int settled;          /* items settled */
    int settled_stopping; /* of which in the stopping phase */
    int64_t claim_at[8];  /* monotonic ms of each claim */
    int due_ms;           /* settle asks for a round this soon (0: not) */
    int back_at_once;     /* claim posts its hand-off back itself */
} job_case;

/* Another thread that finishes the hand-offs late: after the stop began. */
static void *finish_late(void *arg)
{
    job_case *c = arg;
    usleep(100000);
    for (int i = 0; i < NHAND; i++)
        looper_job_back(c->job, &c->items[i]);
    return NULL;
}

static int64_t case_claim(looper_job *j)
{
    job_case *c = looper_job_arg(j);
    pthread_mutex_lock(&c->mu);
    int n = c->claims++;
    if (n < 8)
        c->claim_at[n] = clock_mono_ms();
    pthread_mutex_unlock(&c->mu);
    if (n == 0 && c->back_at_once) {
        looper_job_handed(j);
        looper_job_back(j, &c->items[0]);
    } else if (n == 0) {
        for (int i = 0; i < NHAND; i++)
            looper_job_handed(j);
    }
    return 10000;
}

static void case_settle(looper_job *j, looper_phase phase, looper_item *it)
{
    job_case *c = looper_job_arg(j);
    (void)it;
    pthread_mutex_lock(&c->mu);
    c->settled++;
    c->settled_stopping += phase == LOOPER_STOPPING;
    pthread_mutex_unlock(&c->mu);
    if (c->due_ms)
        looper_job_due(j, c->due_ms);
}

static const looper_job_ops case_ops = {.name = "test-job", .claim = case_claim, .settle = case_settle};

static int claims(job_case *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->claims;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Quiesced, the job claims no more; the stop waits for the hand-offs the
 * first claim made, settles them while stopping, and only then joins. */
static void test_stop_settles_every_hand_off(void **state)
{
    (void)state;
    job_case c = {.claims = 0};
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(looper_job_start(&case_ops, &c, &c.job), 0);
    int64_t until = clock_mono_ms() + 5000;
    while (claims(&c) == 0 && clock_mono_ms() < until)
        usleep(1000);
    assert_int_equal(claims(&c), 1);
    looper_job_quiesce(c.job);
    looper_job_kick(c.job);
    usleep(20000);
    assert_int_equal(claims(&c), 1); /* quiesced: no claim */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, finish_late, &c), 0);
    looper_job_stop(c.job);
    assert_int_equal(c.settled, NHAND);
    assert_int_equal(c.settled_stopping, NHAND);
    pthread_join(th, NULL);
    looper_job_kick(c.job); /* harmless between stop and free */
    looper_job_free(c.job);
    pthread_mutex_destroy(&c.mu);
}

/* A settle that schedules a retry 30 ms out gets a round then, though the
 * claim asked for ten seconds. */
static void test_due_wakes_the_loop(void **state)
{
    (void)state;
    job_case c = {.due_ms = 30, .back_at_once = 1};
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(looper_job_start(&case_ops, &c, &c.job), 0);
    int64_t until = clock_mono_ms() + 5000;
    while (claims(&c) < 3 && clock_mono_ms() < until)
        usleep(1000);
    assert_true(claims(&c) >= 3);
    pthread_mutex_lock(&c.mu);
    int64_t gap = c.claim_at[2] - c.claim_at[1];
    pthread_mutex_unlock(&c.mu);
    assert_true(gap >= 20 && gap < 2000);
    looper_job_quiesce(c.job);
    looper_job_stop(c.job);
    looper_job_free(c.job);
    looper_job_free(NULL); /* as for a job that never started */
    pthread_mutex_destroy(&c.mu);
}

/* Pushed items come out oldest first, one by one or all at once. */
static void test_fifo_order(void **state)
{
    (void)state;
    looper_fifo q = {0};
    looper_item it[3];
    assert_null(looper_fifo_pop(&q));
    for (int i = 0; i < 3; i++)
        looper_fifo_push(&q, &it[i]);
    assert_ptr_equal(looper_fifo_pop(&q), &it[0]);
    looper_item *all = looper_fifo_take(&q);
    assert_ptr_equal(all, &it[1]);
    assert_ptr_equal(all->next, &it[2]);
    assert_null(all->next->next);
    assert_null(looper_fifo_take(&q));
    looper_fifo_push(&q, &it[0]);
    assert_ptr_equal(looper_fifo_pop(&q), &it[0]);
    assert_null(q.tail);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_settles_every_hand_off),
        cmocka_unit_test(test_due_wakes_the_loop),
        cmocka_unit_test(test_fifo_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
