/*
 * bench_common.h — what bench_load and bench_prefill share besides the
 * webhook (github_event.h): the monotonic clock, Ctrl-C as a flag the loops
 * check, and the two ways to give up (a usage error, exit 2; a failure,
 * exit 1), each naming the program. Header-only: each bench program is built
 * alone. The program sets bench_prog first thing in main.
 */
#ifndef ONCE_BENCH_COMMON_H
#define ONCE_BENCH_COMMON_H

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *bench_prog = "bench";
static volatile sig_atomic_t bench_interrupted;

static inline void bench_on_signal(int sig) {
    (void)sig;
    bench_interrupted = 1;
}

/* SIGINT and SIGTERM set bench_interrupted; the program ends its run cleanly. */
static inline void bench_catch_signals(void) {
    struct sigaction sa = {.sa_handler = bench_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_vdie(int status, const char *tail, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0), noreturn));
static inline void bench_vdie(int status, const char *tail, const char *fmt, va_list ap) {
    fprintf(stderr, "%s: ", bench_prog);
    vfprintf(stderr, fmt, ap);
    fputs(tail, stderr);
    exit(status);
}

static inline void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bench_vdie(2, "\n(see --help)\n", fmt, ap);
}

static inline void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bench_vdie(1, "\n", fmt, ap);
}

#endif
