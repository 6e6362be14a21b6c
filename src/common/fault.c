/*
 * fault.c — the crash, delay and failure points of the tests (see fault.h). Compiled to
 * an empty unit unless ONCE_FAULT_INJECTION is defined.
 */
#include "common/fault.h"

#ifdef ONCE_FAULT_INJECTION
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_long passages;

/* "name" or "name:..." in the variable var: the text after the colon, or
 * "" when there is none; NULL when var names another point. */
static const char *fault_named(const char *var, const char *name)
{
    const char *want = getenv(var);
    size_t n = strlen(name);
    if (!want || strncmp(want, name, n) != 0 || (want[n] != '\0' && want[n] != ':'))
        return NULL;
    return want[n] == ':' ? want + n + 1 : want + n;
}

void fault_point(const char *name)
{
    const char *at = fault_named("ONCE_FAULT", name);
    if (!at)
        return;
    long nth = *at ? strtol(at, NULL, 10) : 1;
    if (atomic_fetch_add(&passages, 1) + 1 >= nth) {
        /* A line on stderr first, so the test knows where it died. */
        static const char msg[] = "{\"level\":\"fault\",\"msg\":\"ONCE_FAULT: SIGKILL\"}\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        raise(SIGKILL);
    }
}

void fault_delay(const char *name)
{
    const char *ms = fault_named("ONCE_FAULT_DELAY", name);
    long v = ms ? strtol(ms, NULL, 10) : 0;
    if (v <= 0 || v > 60000)
        return;
    struct timespec ts = {.tv_sec = v / 1000, .tv_nsec = (v % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int fault_fails(const char *name)
{
    return fault_named("ONCE_FAULT_FAIL", name) != NULL;
}
#else
typedef int fault_unused; /* ISO C wants a declaration in every unit */
#endif
