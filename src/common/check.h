/*
 * check.h — invariants written down as code (SQLite's habit). ONCE_ASSERT
 * is on in debug and test builds (NDEBUG unset) and compiles to nothing in
 * a release build: a broken invariant aborts a test with its file and line
 * instead of going on quietly.
 */
#ifndef ONCE_COMMON_CHECK_H
#define ONCE_COMMON_CHECK_H

#ifndef NDEBUG
/* Prints "file:line: invariant failed: cond" on stderr and aborts. */
void check_failed(const char *cond, const char *file, int line) __attribute__((noreturn));
#define ONCE_ASSERT(cond) ((cond) ? (void)0 : check_failed(#cond, __FILE__, __LINE__))
#else
#define ONCE_ASSERT(cond) ((void)0)
#endif

/* The calling thread is t: the pthread_t that pthread_create stored for the
 * thread that owns what is touched (glibc stores it before the new thread
 * runs, so that thread may test itself from its first line). For a file that
 * includes <pthread.h>; like ONCE_ASSERT, nothing of it is left under NDEBUG. */
#define ONCE_ASSERT_THREAD(t) ONCE_ASSERT(pthread_equal(pthread_self(), (t)))

#endif
