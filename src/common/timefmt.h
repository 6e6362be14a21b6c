/*
 * timefmt.h — times as people and JSON read them: RFC 3339 in UTC with
 * milliseconds ("2026-12-01T16:18:45.123Z"), the one format of records,
 * trails and log lines.
 */
#ifndef ONCE_COMMON_TIMEFMT_H
#define ONCE_COMMON_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

#define TIMEFMT_LEN 32 /* room for the text and its NUL */

/* Milliseconds since the epoch as RFC 3339 UTC with milliseconds. 0, or -1
 * when len < TIMEFMT_LEN or the time is outside years 0..9999. */
int timefmt_rfc3339(int64_t ms, char *buf, size_t len);

#endif
