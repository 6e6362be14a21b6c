/*
 * fault.c — the crash points of the chaos suite (see fault.h). Compiled to
 * an empty unit unless ONCE_FAULT_INJECTION is defined.
 */
#include "common/fault.h"

#ifdef ONCE_FAULT_INJECTION
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long passages;

void fault_point(const char *name)
{
    const char *want = getenv("ONCE_FAULT");
    if (!want)
        return;
    size_t n = strlen(name);
    if (strncmp(want, name, n) != 0 || (want[n] != '\0' && want[n] != ':'))
        return;
    long nth = want[n] == ':' ? strtol(want + n + 1, NULL, 10) : 1;
    if (atomic_fetch_add(&passages, 1) + 1 >= nth) {
        /* A line on stderr first, so the test knows where it died. */
        static const char msg[] = "{\"level\":\"fault\",\"msg\":\"ONCE_FAULT: SIGKILL\"}\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        raise(SIGKILL);
    }
}
#else
typedef int fault_unused; /* ISO C wants a declaration in every unit */
#endif
