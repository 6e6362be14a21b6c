/*
 * log.c — one JSON object per line on stderr.
 *
 * Lines are built with jansson (so every string is escaped) and written with
 * one write(2) each, so lines from different threads never interleave.
 */
#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

static void log_time(char *out, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03ldZ", base, ts.tv_nsec / 1000000);
}

static void log_write(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps left room: the NUL becomes the newline */
    ssize_t w = write(STDERR_FILENO, s, n + 1);
    (void)w;
    free(s);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

void log_request(const char *method, const char *route, const char *scope, const char *key_hash, unsigned status,
                 const char *outcome, double upstream_ms, double ms)
{
    char t[40];
    log_time(t, sizeof t);
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "time", json_string(t));
    json_object_set_new(o, "method", str_or_null(method));
    json_object_set_new(o, "route", str_or_null(route));
    json_object_set_new(o, "scope", str_or_null(scope));
    json_object_set_new(o, "key_hash", str_or_null(key_hash));
    json_object_set_new(o, "status", json_integer(status));
    json_object_set_new(o, "outcome", str_or_null(outcome));
    json_object_set_new(o, "upstream_ms", upstream_ms >= 0 ? json_real(upstream_ms) : json_null());
    json_object_set_new(o, "ms", json_real(ms));
    log_write(o);
}

void log_event(const char *level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    char t[40];
    log_time(t, sizeof t);
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "time", json_string(t));
    json_object_set_new(o, "level", json_string(level));
    json_object_set_new(o, "msg", json_string(msg));
    log_write(o);
}
