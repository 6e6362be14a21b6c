/*
 * errbuf.c — messages into optional buffers (see errbuf.h).
 */
#include "common/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

void errbuf_set(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}
