/*
 * problem.h — an answer decided before there is anything to answer with:
 * the header phase (routing, access, admission) settles a status, a stable
 * code and a detail, and the HTTP front turns it into problem+json
 * (RFC 9457). Kept apart from MHD so the decisions can be unit-tested and
 * fuzzed without a connection.
 */
#ifndef ONCE_SERVER_PROBLEM_H
#define ONCE_SERVER_PROBLEM_H

typedef struct problem {
    unsigned status;
    const char *code;   /* stable, e.g. "unknown_upstream" */
    const char *title;
    char detail[256];
    const char *header; /* one header the answer carries (Allow, WWW-Authenticate), or NULL */
    char header_value[384]; /* WWW-Authenticate names the metadata URL ([auth]) */
} problem;

/* Fills p; always returns -1, so a check can `return problem_set(...)`. */
int problem_set(problem *p, unsigned status, const char *code, const char *title, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
