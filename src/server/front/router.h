/*
 * router.h — the route table: which handler answers a path and method,
 * with what access level, and what must be admitted from the headers
 * before a body byte is read (docs/security.md: decide before reading).
 *
 * Each module owns its routes (h2o's habit): ops.c, proxy.c, actions.c, hooks.c,
 * events_api.c, console.c and mcp.c each export a table; router.c only matches. A new route is a new
 * row, not a new branch.
 */
#ifndef ONCE_SERVER_ROUTER_H
#define ONCE_SERVER_ROUTER_H

#include <stddef.h>

#include "server/front/access.h"
#include "server/core/problem.h"

typedef struct req req;

/* Answers the request (now or later) with req_reply and friends. */
typedef void (*route_fn)(req *r);
/* Checks, from the path and headers only, what the route needs to exist
 * (an upstream, a source) and keeps it in the request. 0, or -1 with p. */
typedef int (*route_admit_fn)(req *r, problem *p);

#define ROUTE_METHODS 3

typedef struct route {
    const char *pattern;     /* "/v1/actions/{}/{}/resolve": "{}" is one non-empty segment, a final "{**}"
                                the rest of the target (possibly empty, query included) */
    const char *name;        /* for the log line */
    access_level access;
    route_admit_fn admit;    /* may be NULL */
    route_fn any;            /* every method, or NULL to use methods */
    int relays;              /* answers relay an upstream's bytes: sandboxed (http.c) */
    struct {
        const char *method;  /* "GET" also answers HEAD unless HEAD has its own row */
        route_fn handle;
    } methods[ROUTE_METHODS];
} route;

/* What a path matched: the route and its captures, pointers into the raw
 * target (not decoded, not NUL-terminated). */
typedef struct route_match {
    const route *rt;
    const char *seg[2];      /* "{}" captures */
    size_t seglen[2];
    const char *rest;        /* "{**}" capture: runs to the end of the target, query included */
    const char *query;       /* after '?', or "" */
} route_match;

#define ROUTER_TABLES 12

/* The route tables the rooms own, registered by server.c in the order they
 * are tried: the router names no handler. */
typedef struct router {
    const route *tables[ROUTER_TABLES]; /* each ends with a row whose pattern is NULL */
    size_t n;
} router;

/* Adds a table. 0, or -1 when ROUTER_TABLES are taken (a bug: an invariant). */
int router_add(router *rt, const route *table);

/* Finds the route whose pattern the path of target matches. 0, or -1 with
 * p (404 not_found). */
int router_match(const router *rt, const char *target, route_match *m, problem *p);

/* The handler of m's route for method. 0 and *fn, or -1 with p (405
 * method_not_allowed, with Allow). */
int router_method(const route_match *m, const char *method, route_fn *fn, problem *p);

#endif
