/*
 * req.h — one HTTP request as every route sees it: what arrived, what the
 * header phase decided, and the one way to answer.
 *
 * Ownership (docs/architecture.md): the HTTP front (http.c) makes the request and
 * runs its route on an HTTP thread; whatever must wait (a group commit, an
 * upstream call) is handed to another thread with the connection parked;
 * whoever finishes attaches the answer with req_reply — exactly once, from
 * any thread — which resumes the connection so the HTTP thread sends it.
 * After req_reply the request (and its state) may be freed at any moment:
 * read nothing from it afterwards. A client that leaves first orphans the
 * request, and then the answer frees it.
 */
#ifndef ONCE_SERVER_REQ_H
#define ONCE_SERVER_REQ_H

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "common/buf.h"
#include "once/once.h"
#include "server/config/config.h"
#include "server/core/problem.h"
#include "server/front/access.h"
#include "server/front/router.h"

typedef struct server server;
typedef struct source_rt source_rt;

/* Per-route state hung on a request, freed with it. */
typedef void (*req_state_free)(void *state);

#define REQ_EXTRA_HEADERS 6

struct req {
    server *srv;
    struct MHD_Connection *conn;
    const upstream_cfg *listen_up; /* a per-upstream listener: every path goes there */
    const route *listen_route;     /* and by this route */
    int tls;                       /* the listener serves HTTPS (for the own-origin check) */
    char *uri;                     /* raw request target, query included */
    const char *method;            /* MHD's, valid for the request */
    buf body;
    double t0;                     /* clock_mono_seconds() when it arrived */

    /* decided from the headers, before the body (router.h) */
    route_match match;
    route_fn handler;
    struct access_set *acl;        /* the tokens and agents this request is decided with (held) */
    const auth_token *who;         /* the caller's token (in acl, or ident's); NULL when none was needed or none is set */
    access_ident ident;            /* a JWT caller's identity ([auth]): who points here then */
    const upstream_cfg *up;        /* proxy: the upstream */
    const char *target;            /* proxy: path and query after the upstream's prefix (into uri) */
    source_rt *src;                /* hooks, inbox: the webhook source */
    char verb[8];                  /* inbox: claim, ack or nack */

    /* the HTTP front's progress */
    int started;
    int too_large;
    int dispatched;

    /* the answer, under mu: it may come from any thread */
    pthread_mutex_t mu;
    int parked;
    int ready;
    int orphaned;
    unsigned status;
    struct MHD_Response *resp;

    /* for the log line */
    const char *route;
    char scope[ONCE_SCOPE_MAX + 1];
    char key_hash[17];
    const char *outcome;
    double upstream_ms;

    void *state;
    req_state_free state_free;

    /* headers to add to whatever answer is sent (Retry-After, Allow, …) */
    char extra_name[REQ_EXTRA_HEADERS][24];
    char extra_value[REQ_EXTRA_HEADERS][384]; /* WWW-Authenticate names a URL ([auth]) */
    int nextra;
};

/* A new request for uri on a listener of srv (listen_up: an upstream's own
 * listener, whose requests all take listen_route; or NULL). NULL when out
 * of memory. HTTP thread. */
req *req_new(server *srv, const upstream_cfg *listen_up, const route *listen_route, int tls, const char *uri);

/* The HTTP front is done with r (sent, or the client left): frees it, or,
 * when a route still works on it, leaves it to its answer to free. */
void req_release(req *r);

/* After the route ran: 1 when its answer is ready to send, else 0 and the
 * connection is parked until req_reply resumes it. HTTP thread. */
int req_park(req *r);

/* Whether the answer is there (a resumed connection asks). */
int req_ready(req *r);

/* Takes the answer to send (status and response; NULL response: out of
 * memory) for the HTTP front. */
struct MHD_Response *req_take_answer(req *r, unsigned *status);

/* Attaches the answer and, if the request is parked, resumes it. Any
 * thread; exactly once per request (a second answer is a bug: an invariant).
 * Takes ownership of resp (NULL means the response could not be built: a
 * 500 is sent). */
void req_reply(req *r, unsigned status, struct MHD_Response *resp);

/* Answers with a problem+json body. extra (may be NULL) is merged into it
 * and consumed. Any thread. */
void req_problem(req *r, unsigned status, const char *code, const char *title, json_t *extra, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));

/* Answers with a problem decided before (problem.h). Any thread. */
void req_problem_from(req *r, const problem *p);

/* Answers a request whose work could not be started (a queue refused it;
 * nothing was done): 503 shutting_down while the gateway stops, else 500
 * internal with why. Any thread. */
void req_not_started(req *r, const char *why);

/* Answers 500 internal "out of memory". Any thread. */
void req_out_of_memory(req *r);

/* The route's state for r: size zeroed bytes, freed with free_fn(state)
 * when r is released. NULL (after answering 500) when out of memory. */
void *req_state_new(req *r, size_t size, req_state_free free_fn);

/* The config a request's access and grants are decided with: the start's,
 * with the tokens and agents of the generation it began under
 * (core/access_set.h; a reload replaces them for later requests). */
const once_config *req_access_cfg(const req *r);

/* Answers with a JSON body (consumed). Any thread. */
void req_json(req *r, unsigned status, json_t *body);

/* Adds a header to the answer this request will get. Call before the
 * answer, from the thread that will give it; at most REQ_EXTRA_HEADERS. */
void req_set_header(req *r, const char *name, const char *value);

/* Header of the request (case-insensitive), or NULL. HTTP thread only. */
const char *req_header(req *r, const char *name);

/* Records scope and a hash of the key for the log line (never the key:
 * keys may hold personal data). */
void req_note_key(req *r, const char *scope, const char *key);

/* Builds a response from bytes (copied). NULL when out of memory. */
struct MHD_Response *resp_bytes(const void *data, size_t len, const char *content_type);

/* Finds name=value in a raw query string (the route match's query),
 * percent-decoded into out (cap bytes, NUL included). 1 found, 0 absent,
 * -1 malformed or too long (answered 400 invalid_request). */
int req_query_param(req *r, const char *query, const char *name, char *out, size_t cap);

/* The query's limit=N of a listing, 1..1000, into *limit (untouched when
 * absent). 1 given, 0 absent, -1 bad (answered 400 invalid_request). */
int req_query_limit(req *r, const char *query, size_t *limit);

/* The paging of a listing's query: limit=N into *limit (req_query_limit),
 * then after=CURSOR percent-decoded into after (cap bytes) and *cursor
 * pointed at it; each untouched when absent. 0, or -1 (answered 400
 * invalid_request). */
int req_query_page(req *r, const char *query, size_t *limit, char *after, size_t cap, const char **cursor);

/* Answers a listing's page: 200 {"items": items, "next": next, or null
 * when it is NULL or ""}. items is consumed; NULL (it could not be
 * rendered) answers 500 out of memory. Any thread. */
void req_json_page(req *r, json_t *items, const char *next);

/* The two {} segments of the route's path, each percent-decoded on its own
 * (so an encoded '/' stays inside its segment) into a (acap bytes) and b
 * (bcap). 0, or -1 answered 400 bad_request: "malformed percent-encoding,
 * or WHAT that is too long" (what names both: "a scope or key"). */
int req_path_pair(req *r, char *a, size_t acap, char *b, size_t bcap, const char *what);

/* The longest path of a route that names a record by its segments: two
 * escaped ones (a scope or source, a key or event id) and the route's own. */
#define REQ_NAMED_PATH_MAX 2048

/* A route's admit (router.h) for such routes: a path of REQ_NAMED_PATH_MAX
 * bytes or more names nothing, and is refused (414) before the body is
 * read. */
int req_admit_named_path(req *r, problem *p);

#endif
