/*
 * log.c — one line per request or event on stderr: a JSON object, or with
 * log_format = text "LEVEL message" and "request name=value ..." for a
 * reader or the journal (which adds the time and the unit; under it,
 * JOURNAL_STREAM set, a text line starts with its syslog level, <3> to
 * <6>, so journalctl -p works).
 *
 * A request line is formatted by hand into a stack buffer (jansson per
 * request cost a tenth of a replay's CPU) and written with one write(2), so
 * lines from different threads never interleave. Every string goes through
 * the escaper, whatever its source.
 */
#include "common/timefmt.h"
#include "once/once.h"
#include "server/core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048

static int log_text;    /* log_format = text */
static int log_journal; /* stderr is the journal's (JOURNAL_STREAM) */

void log_set_text(int text)
{
    log_text = text;
    log_journal = getenv("JOURNAL_STREAM") != NULL;
}

typedef struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
} line;

/* Appends, truncating; the last two bytes stay free for "}\n". */
static void put(line *l, const char *s, size_t n)
{
    size_t cap = sizeof l->buf - 2;
    if (l->len >= cap)
        return;
    if (n > cap - l->len)
        n = cap - l->len;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void putf(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(line *l, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Text: v with every byte that could split or fake a line or a field
 * (controls, non-ASCII, '\\', '"', and spaces when space is set) as \xHH. */
static void put_text(line *l, const char *v, int space)
{
    for (const unsigned char *p = (const unsigned char *)v; *p && l->len < sizeof l->buf - 16; p++) {
        if (*p < 0x20 || *p >= 0x7f || *p == '\\' || *p == '"' || (space && *p == ' '))
            putf(l, "\\x%02x", *p);
        else
            put(l, (const char *)p, 1);
    }
}

/* "name":"value" with JSON escaping, or "name":null; in text, name=value
 * or name=-. */
static void put_str(line *l, const char *name, const char *v)
{
    if (log_text) {
        putf(l, " %s=", name);
        put_text(l, v ? v : "-", 1);
        return;
    }
    putf(l, ",\"%s\":", name);
    if (!v) {
        put(l, "null", 4);
        return;
    }
    put(l, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)v; *p && l->len < sizeof l->buf - 16; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(l, e, 2);
        } else if (*p < 0x20 || *p >= 0x7f) {
            putf(l, "\\u%04x", *p); /* bytes, not code points: logs stay valid JSON */
        } else {
            put(l, (const char *)p, 1);
        }
    }
    put(l, "\"", 1);
}

static void put_time(line *l)
{
    char t[TIMEFMT_LEN];
    if (timefmt_rfc3339(once_now_ms(), t, sizeof t) != 0)
        snprintf(t, sizeof t, "?");
    putf(l, "{\"time\":\"%s\"", t);
}

/* Text: the start of a line, the journal's level first. */
static void put_head(line *l, const char *level)
{
    if (log_journal) {
        char c = strcmp(level, "error") == 0 ? '3' : strcmp(level, "warn") == 0 ? '4' : '6';
        char pre[3] = {'<', c, '>'};
        put(l, pre, sizeof pre);
    }
    put(l, level, strlen(level));
}

static void emit(line *l)
{
    if (!log_text)
        l->buf[l->len++] = '}';
    l->buf[l->len++] = '\n';
    ssize_t w = write(STDERR_FILENO, l->buf, l->len);
    (void)w;
}

void log_request(const char *method, const char *route, const char *agent, const char *scope, const char *key_hash,
                 unsigned status, const char *outcome, double upstream_ms, double ms)
{
    line l = {.len = 0};
    if (log_text)
        put_head(&l, "request");
    else
        put_time(&l);
    put_str(&l, "method", method);
    put_str(&l, "route", route);
    put_str(&l, "agent", agent);
    put_str(&l, "scope", scope);
    put_str(&l, "key_hash", key_hash);
    putf(&l, log_text ? " status=%u" : ",\"status\":%u", status);
    put_str(&l, "outcome", outcome);
    if (upstream_ms >= 0)
        putf(&l, log_text ? " upstream_ms=%.3f" : ",\"upstream_ms\":%.3f", upstream_ms);
    else
        put_str(&l, "upstream_ms", NULL);
    putf(&l, log_text ? " ms=%.3f" : ",\"ms\":%.3f", ms);
    emit(&l);
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
    line l = {.len = 0};
    if (log_text) {
        put_head(&l, level);
        put(&l, " ", 1);
        put_text(&l, msg, 0);
    } else {
        put_time(&l);
        put_str(&l, "level", level);
        put_str(&l, "msg", msg);
    }
    emit(&l);
}
