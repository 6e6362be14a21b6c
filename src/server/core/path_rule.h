/*
 * path_rule.h — "METHOD PATTERN" rules about an upstream's paths, matched
 * one way for every feature that has them: approve (a person says yes),
 * an agent's allow grants and its limits. A rule is matched against the
 * canonical target (target_canon) and against the path as a lenient router
 * reads it (";params" cut, a trailing '/' dropped), because a provider may
 * route either. Which way is careful depends on what a match does, so the
 * caller says it (path_rule_mode).
 */
#ifndef ONCE_SERVER_CORE_PATH_RULE_H
#define ONCE_SERVER_CORE_PATH_RULE_H

#include <stddef.h>

typedef enum path_rule_mode {
    /* A match asks a person or counts against a limit: letters compared
     * without case, and either reading of the path is enough. A false
     * match costs a question, never an effect. */
    PATH_RULE_WIDE,
    /* A match grants access: letters compared with case, and every reading
     * of the path must match. A false match would widen an agent's reach. */
    PATH_RULE_NARROW
} path_rule_mode;

/* Does a request (method, target: the canonical path and query after the
 * upstream's prefix) match one of rules[0..n), each "METHOD PATTERN"
 * ("*" any method; '*' in PATTERN any characters, slashes too; PATTERN "*"
 * every target, an empty one included)? The query is not part of the match.
 * Out of memory, PATH_RULE_WIDE answers 1 and PATH_RULE_NARROW 0: the
 * careful answer of each. */
int path_rule_any(char *const *rules, size_t n, const char *method, const char *target, path_rule_mode mode);

/* Does s[0..n) match pattern, where '*' matches any run of characters;
 * letters compared without case when nocase? For the names rules hold
 * besides paths (tools, scopes, sources). */
int path_rule_glob(const char *pattern, const char *s, size_t n, int nocase);

#endif
