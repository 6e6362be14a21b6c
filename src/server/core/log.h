/*
 * log.h — one line per request or event on stderr: a JSON object, or
 * (log_format = text) words for the journal.
 */
#ifndef ONCE_SERVER_LOG_H
#define ONCE_SERVER_LOG_H

/* A request: route, agent (the name of the caller's token), scope and key
 * hash may be NULL; upstream_ms < 0 when no upstream call was made. */
void log_request(const char *method, const char *route, const char *agent, const char *scope, const char *key_hash,
                 unsigned status, const char *outcome, double upstream_ms, double ms);

/* log_format = text (1) or json (0, the default); set before the
 * gateway's threads start. */
void log_set_text(int text);

/* An event of the process (start, stop, a loop's failure). */
void log_event(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
