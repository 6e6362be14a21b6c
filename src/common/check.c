/*
 * check.c — what a broken invariant does (see check.h).
 */
#include "common/check.h"

#ifndef NDEBUG
#include <stdio.h>
#include <stdlib.h>

void check_failed(const char *cond, const char *file, int line)
{
    fprintf(stderr, "%s:%d: invariant failed: %s\n", file, line, cond);
    abort();
}
#endif
