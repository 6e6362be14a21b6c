/*
 * test_looper.c — the background loop's promise (common/looper.h): an item
 * posted is taken by a round, whenever it is posted. The regression here is
 * a lazy post made while a round runs, by a round that then goes idle: the
 * post found the loop busy and did not wake it, and the idle wait slept on
 * it for ever (MCP duplicates parked on the waiters while a round answered
 * others were never answered).
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

typedef struct loop_case {
    looper loop;
    looper_item late;          /* posted during the first round */
    pthread_mutex_t mu;
    int rounds;
    int taken;                 /* items the rounds received */
} loop_case;

/* The first round posts an item lazily, as another thread would while the
 * round runs, and asks to sleep until something comes. */
static int64_t round_posting(void *arg, looper_phase phase, looper_item *posted)
{
    loop_case *c = arg;
    pthread_mutex_lock(&c->mu);
    int first = c->rounds++ == 0;
    for (looper_item *i = posted; i; i = i->next)
        c->taken++;
    pthread_mutex_unlock(&c->mu);
    if (phase == LOOPER_STOPPING)
        return LOOPER_DONE;
    if (first)
        looper_post(&c->loop, &c->late, 0);
    return LOOPER_IDLE;
}

static int taken(loop_case *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->taken;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static void test_post_during_a_round_that_goes_idle(void **state)
{
    (void)state;
    loop_case c = {.rounds = 0};
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(looper_start(&c.loop, "test-looper", round_posting, &c), 0);
    int64_t until = clock_mono_ms() + 5000;
    while (taken(&c) == 0 && clock_mono_ms() < until)
        usleep(1000);
    assert_int_equal(taken(&c), 1);
    looper_stop(&c.loop);
    looper_close(&c.loop);
    pthread_mutex_destroy(&c.mu);
}

/* An item posted to an idle loop wakes it (the case that always worked). */
static void test_post_to_an_idle_loop(void **state)
{
    (void)state;
    loop_case c = {.rounds = 1}; /* no post of its own */
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(looper_start(&c.loop, "test-looper", round_posting, &c), 0);
    usleep(20000); /* let it go idle */
    looper_item it;
    assert_int_equal(looper_post(&c.loop, &it, 0), 0);
    int64_t until = clock_mono_ms() + 5000;
    while (taken(&c) == 0 && clock_mono_ms() < until)
        usleep(1000);
    assert_int_equal(taken(&c), 1);
    looper_stop(&c.loop);
    looper_close(&c.loop);
    pthread_mutex_destroy(&c.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_during_a_round_that_goes_idle),
        cmocka_unit_test(test_post_to_an_idle_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
