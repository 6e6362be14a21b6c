/*
 * path_rule.c — "METHOD PATTERN" rules matched on an upstream's paths (see
 * path_rule.h).
 */
#include "server/core/path_rule.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Iterative, with one backtrack point: linear enough for the short
 * patterns of a config file. */
int path_rule_glob(const char *pattern, const char *s, size_t n, int nocase)
{
    const char *star = NULL;
    size_t i = 0, mark = 0;
    while (i < n) {
        int same = *pattern && (nocase ? tolower((unsigned char)*pattern) == tolower((unsigned char)s[i])
                                       : *pattern == s[i]);
        if (*pattern == '*') {
            star = pattern++;
            mark = i;
        } else if (same) {
            pattern++;
            i++;
        } else if (star) {
            pattern = star + 1;
            i = ++mark;
        } else {
            return 0;
        }
    }
    while (*pattern == '*')
        pattern++;
    return *pattern == '\0';
}

/* The path as a router that cuts ";params" from each segment and ignores a
 * trailing '/' (Spring, Tomcat, many frameworks) would route it: into out
 * (n + 1 bytes), its length returned. */
static size_t path_as_routed(const char *path, size_t n, char *out)
{
    size_t o = 0;
    int cut = 0;
    for (size_t i = 0; i < n; i++) {
        if (path[i] == '/')
            cut = 0;
        else if (path[i] == ';')
            cut = 1;
        if (!cut)
            out[o++] = path[i];
    }
    if (o > 1 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
    return o;
}

/* One rule against both readings of the path. */
static int path_rule_one(const char *rule, const char *method, const char *path, size_t plen, const char *routed,
                         size_t rlen, path_rule_mode mode)
{
    const char *sp = strchr(rule, ' ');
    if (!sp)
        return 0;
    size_t rl = (size_t)(sp - rule), mlen = strlen(method);
    int nocase = mode == PATH_RULE_WIDE;
    int method_ok = (rl == 1 && rule[0] == '*') ||
                    (rl == mlen && (nocase ? strncasecmp(rule, method, mlen) : strncmp(rule, method, mlen)) == 0);
    if (!method_ok)
        return 0;
    const char *pattern = sp + 1;
    if (strcmp(pattern, "*") == 0)
        return 1;
    int as_sent = path_rule_glob(pattern, path, plen, nocase);
    int as_routed = path_rule_glob(pattern, routed, rlen, nocase);
    return mode == PATH_RULE_WIDE ? as_sent || as_routed : as_sent && as_routed;
}

int path_rule_any(char *const *rules, size_t n, const char *method, const char *target, path_rule_mode mode)
{
    if (n == 0)
        return 0;
    size_t plen = strcspn(target, "?");
    char *routed = malloc(plen + 1);
    if (!routed)
        return mode == PATH_RULE_WIDE;
    size_t rlen = path_as_routed(target, plen, routed);
    int hit = 0;
    for (size_t i = 0; i < n && !hit; i++)
        hit = path_rule_one(rules[i], method, target, plen, routed, rlen, mode);
    free(routed);
    return hit;
}
