/*
 * timefmt.c — RFC 3339 times (see timefmt.h).
 */
#include "common/timefmt.h"

#include <stdio.h>
#include <time.h>

int timefmt_rfc3339(int64_t ms, char *buf, size_t len)
{
    if (buf == NULL || len < TIMEFMT_LEN)
        return -1;
    /* Floor division, so times before 1970 still get a 0..999 fraction. */
    int64_t secs = ms / 1000;
    int64_t frac = ms % 1000;
    if (frac < 0) {
        frac += 1000;
        secs -= 1;
    }
    time_t t = (time_t)secs;
    if ((int64_t)t != secs)
        return -1;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL)
        return -1;
    long year = (long)tm.tm_year + 1900L;
    if (year < 0 || year > 9999)
        return -1;
    int n = snprintf(buf, len, "%04ld-%02d-%02dT%02d:%02d:%02d.%03dZ", year, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)frac);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
