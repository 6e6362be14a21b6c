/*
 * errors.c — error names and the per-thread error detail.
 *
 * A code alone ("invalid argument") rarely tells a caller what to fix, and
 * libonce has no handle to hang a message on before a store exists, so the
 * detail lives in thread-local storage, like errno with words.
 */
#include <stdio.h>
#include <string.h>

#include "ledger/store.h"

static _Thread_local char detail[ONCE_DETAIL_MAX];

const char *once_strerror(int code)
{
    switch (code) {
    case ONCE_OK: return "ok";
    case ONCE_EINVAL: return "invalid argument";
    case ONCE_ENOMEM: return "out of memory";
    case ONCE_ESTORE: return "store failure";
    case ONCE_ENOTFOUND: return "not found";
    case ONCE_ESTALE: return "stale token";
    case ONCE_ESTATE: return "transition not allowed";
    case ONCE_ESCHEMA: return "store written by a newer version";
    case ONCE_ENOTDB: return "not a once database";
    case ONCE_ENOTSUP: return "not supported";
    case ONCE_ECLOSED: return "store is closing";
    case ONCE_EBUSY: return "store busy";
    default: return "unknown error";
    }
}

const char *once_errdetail(void)
{
    return detail;
}

void once_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (len == 0)
        return;
    int n = vsnprintf(buf, len, fmt, ap);
    if (n < 0)
        buf[0] = '\0';
}

int once_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    once_vformat(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return code;
}

void once_detail_clear(void)
{
    detail[0] = '\0';
}
