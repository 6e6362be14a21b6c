/*
 * target.h — the request target of a proxied call: what an agent may put
 * after /v1/proxy/{upstream} (or send to an upstream's own listener), and
 * the upstream URL built from it (docs/security.md: the upstream is fixed by
 * config; nothing an agent sends may choose another host or escape the
 * configured base path).
 */
#ifndef ONCE_SERVER_TARGET_H
#define ONCE_SERVER_TARGET_H

#include <stddef.h>

typedef enum target_verdict {
    TARGET_OK = 0,
    TARGET_MALFORMED = -1, /* a broken percent escape or a byte outside visible ASCII */
    TARGET_INVALID = -2,   /* not a path: it does not start with '/' or '?', has a dot segment, or a '#' */
    TARGET_AMBIGUOUS = -3  /* on an upstream with path rules: a path providers read in more than one way */
} target_verdict;

/* Checks a raw request target (path and query, still percent-encoded).
 * Accepted: empty, or starting with '/' or '?', without '#', with no path
 * segment that is "." or ".." — raw, percent-encoded, inside a segment
 * whose decoded form splits on '/' or '\' into such a part, or before a
 * ';' or an encoded NUL ("..;x", "..%00": servlet containers and C
 * servers cut there). why (may be NULL) gets a one-line reason on refusal. */
target_verdict target_check(const char *target, char *why, size_t whylen);

/* The stricter check of an upstream that has path rules (approvals): a
 * target whose path a provider could read as another path than the one a
 * rule matched is refused — an encoded '/', '\' or NUL, a raw '\', an
 * encoded '%' before two hex digits (decoded twice by some), an empty
 * segment ("//"), or a segment that is "." or ".." once its ";params" are
 * cut. TARGET_OK or TARGET_AMBIGUOUS with why. */
target_verdict target_ambiguous(const char *target, char *why, size_t whylen);

/* Rewrites a target that passed target_check to its canonical form, in
 * place: the path's escapes normalised (pct_normalize: unreserved
 * characters decoded, the others upper-case), the query kept as sent. Path
 * rules match this form and it is what is forwarded, so what was matched
 * is what is sent. Idempotent. */
void target_canon(char *target);

/* Builds the URL of a call to the upstream whose base URL is base (as
 * configured: scheme, host, optional port and path, no query) for a target
 * that passed target_check, with libcurl's URL API: the scheme, host and
 * port are set from base and never parsed out of the target. The result is
 * parsed again and must name the same scheme, host and port, and a path
 * under base's. 0 and a malloc'd *out (free() it), or -1 with why. */
int target_url(const char *base, const char *target, char **out, char *why, size_t whylen);

#endif
