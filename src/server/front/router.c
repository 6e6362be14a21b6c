/*
 * router.c — matching a target against the route tables (see router.h).
 */
#include "server/front/router.h"

#include <stdio.h>
#include <string.h>

#include "common/check.h"


/* Whether path (n bytes, no query) matches pattern; fills the captures.
 * target is the whole raw target, for the "{**}" capture. */
static int pattern_match(const char *pattern, const char *path, size_t n, const char *target, route_match *m)
{
    const char *p = pattern, *s = path, *end = path + n;
    int nseg = 0;
    while (*p) {
        if (strcmp(p, "{**}") == 0) {
            m->rest = target + (s - path);
            return 1;
        }
        if (strncmp(p, "{}", 2) == 0) {
            const char *slash = memchr(s, '/', (size_t)(end - s));
            size_t len = slash ? (size_t)(slash - s) : (size_t)(end - s);
            if (len == 0 || nseg >= 2)
                return 0;
            m->seg[nseg] = s;
            m->seglen[nseg++] = len;
            s += len;
            p += 2;
            continue;
        }
        /* a literal run up to the next capture */
        const char *cap = strchr(p, '{');
        size_t lit = cap ? (size_t)(cap - p) : strlen(p);
        if ((size_t)(end - s) < lit || strncmp(s, p, lit) != 0)
            return 0;
        s += lit;
        p += lit;
    }
    return s == end;
}

int router_add(router *rt, const route *table)
{
    ONCE_ASSERT(rt->n < ROUTER_TABLES);
    if (rt->n >= ROUTER_TABLES)
        return -1;
    rt->tables[rt->n++] = table;
    return 0;
}

int router_match(const router *routes, const char *target, route_match *m, problem *p)
{
    size_t n = strcspn(target, "?");
    memset(m, 0, sizeof *m);
    m->query = target[n] == '?' ? target + n + 1 : "";
    for (size_t t = 0; t < routes->n; t++) {
        for (const route *rt = routes->tables[t]; rt->pattern; rt++) {
            route_match cand = {.query = m->query};
            if (pattern_match(rt->pattern, target, n, target, &cand)) {
                *m = cand;
                m->rt = rt;
                return 0;
            }
        }
    }
    return problem_set(p, 404, "not_found", "Not found", "no route for %.200s", target);
}

int router_method(const route_match *m, const char *method, route_fn *fn, problem *p)
{
    const route *rt = m->rt;
    if (rt->any) {
        *fn = rt->any;
        return 0;
    }
    route_fn get = NULL;
    char allow[48] = "";
    for (int i = 0; i < ROUTE_METHODS && rt->methods[i].method; i++) {
        if (strcmp(rt->methods[i].method, method) == 0) {
            *fn = rt->methods[i].handle;
            return 0;
        }
        if (strcmp(rt->methods[i].method, "GET") == 0)
            get = rt->methods[i].handle;
        size_t l = strlen(allow);
        snprintf(allow + l, sizeof allow - l, "%s%s", l ? ", " : "", rt->methods[i].method);
    }
    if (get && strcmp(method, "HEAD") == 0) {
        *fn = get;
        return 0;
    }
    problem_set(p, 405, "method_not_allowed", "Method not allowed", "use %s", allow);
    p->header = "Allow";
    snprintf(p->header_value, sizeof p->header_value, "%s", allow);
    return -1;
}
