/*
 * problem.c — filling a problem (see problem.h).
 */
#include "server/core/problem.h"

#include <stdarg.h>
#include <stdio.h>

int problem_set(problem *p, unsigned status, const char *code, const char *title, const char *fmt, ...)
{
    p->status = status;
    p->code = code;
    p->title = title;
    p->header = NULL;
    p->header_value[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
    return -1;
}
