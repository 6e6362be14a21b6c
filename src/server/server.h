/*
 * server.h — the gateway process: the pieces `once serve` wires together,
 * and the request context every route works on.
 *
 * Ownership of a request (DESIGN.md §5): an HTTP thread parses it and runs
 * the route; whatever must wait (a group commit, an upstream call) is handed
 * to the store or outbound thread with the connection parked (suspended);
 * whoever finishes attaches the response with req_reply, which resumes the
 * connection so the HTTP thread sends it. No HTTP thread waits for a disk
 * fsync or an upstream.
 */
#ifndef ONCE_SERVER_SERVER_H
#define ONCE_SERVER_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "once/once.h"
#include "server/buf.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/outbound.h"
#include "server/router.h"

typedef struct waiters waiters;
typedef struct worker worker;
typedef struct delivery delivery;
typedef struct reconciler reconciler;
typedef struct source_rt source_rt;
typedef struct guard guard;
typedef struct leases leases;

typedef struct server {
    once_config *cfg;
    once_store *store;
    outbound *ob;
    metrics *metrics;
    waiters *waiters;
    worker *worker;
    source_rt *sources;  /* one per cfg->sources */
    delivery *delivery;
    reconciler *reconciler;
    guard *guard;
    leases *leases;        /* the leases of this node's calls in flight, renewed */
    struct MHD_Daemon **daemons;
    size_t ndaemons;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t parked;  /* connections suspended, waiting for req_reply */
    int stopping;
} server;

typedef struct req req;
/* Per-route state hung on a request, freed with it. */
typedef void (*req_state_free)(void *state);

struct req {
    server *srv;
    struct MHD_Connection *conn;
    const upstream_cfg *listen_up; /* a per-upstream listener: every path goes there */
    int tls;                       /* the listener serves HTTPS (for the own-origin check) */
    char *uri;                     /* raw request target, query included */
    const char *method;            /* MHD's, valid for the request */
    buf body;

    /* decided from the headers, before the body (router.h) */
    route_match match;
    route_fn handler;
    const auth_token *who;         /* the caller's token; NULL when none was needed or none is set */
    const upstream_cfg *up;        /* proxy: the upstream */
    const char *target;            /* proxy: path and query after the upstream's prefix (into uri) */
    source_rt *src;                /* hooks, inbox: the webhook source */
    char verb[8];                  /* inbox: claim, ack or nack */

    int started;
    int too_large;
    int dispatched;
    double t0;           /* req_clock_ms() when it arrived */

    pthread_mutex_t mu;
    int parked;
    int ready;
    int orphaned; /* MHD ended the request before its answer: req_reply frees it */
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
    char extra_name[3][24];
    char extra_value[3][48];
    int nextra;
};

/* Runs the gateway with cfg until SIGTERM or SIGINT, then drains and
 * returns the process exit status (0 after a clean stop). */
int server_run(once_config *cfg);

/* Attaches the answer and, if the request is parked, resumes it. Any
 * thread; exactly once per request. Takes ownership of resp (NULL means the
 * response could not be built: a 500 is sent). Once it is called, the
 * request and its state may be freed by the HTTP thread at any moment:
 * read nothing from them afterwards. */
void req_reply(req *r, unsigned status, struct MHD_Response *resp);

/* Answers with a problem+json body. extra (may be NULL) is merged into it
 * and consumed. Any thread. */
void req_problem(req *r, unsigned status, const char *code, const char *title, json_t *extra, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));

/* Milliseconds on the monotonic clock: what r->t0 is measured in. */
double req_clock_ms(void);

/* Answers a request whose work could not be started (a queue refused it;
 * nothing was done): 503 shutting_down while the gateway stops, else 500
 * internal with why. Any thread. */
void req_not_started(req *r, const char *why);

/* Answers with a problem decided before (problem.h). Any thread. */
void req_problem_from(req *r, const problem *p);

/* Adds a header to the answer this request will get. Call before the
 * answer (req_reply and friends), from the thread that will give it. */
void req_set_header(req *r, const char *name, const char *value);

/* Answers with a JSON body (consumed). Any thread. */
void req_json(req *r, unsigned status, json_t *body);

/* Header of the request (case-insensitive), or NULL. HTTP thread only. */
const char *req_header(req *r, const char *name);

/* Records scope and a hash of the key for the log line (never the key:
 * keys may hold personal data). */
void req_note_key(req *r, const char *scope, const char *key);

/* Builds a response from bytes (copied). NULL when out of memory. */
struct MHD_Response *resp_bytes(const void *data, size_t len, const char *content_type);

/* The route of an upstream's own listener: every target goes to it. */
extern const route proxy_listen_route;


/* Prefer: wait — parked requests waiting for another attempt's outcome. */
int waiters_start(server *srv, waiters **out);
/* Answers everything still waiting (409) and stops; later adds fail. */
void waiters_stop(waiters *w);
/* Frees stopped waiters once no HTTP thread can reach them. */
void waiters_free(waiters *w);
/* Parks state until the action (scope, key) is no longer pending under a
 * live lease — then on_settled(state) — or until deadline (monotonic ms,
 * clock.h) passes — then on_timeout(state). Both run on the waiter thread;
 * waiters of one action share one store read per round. 0, or -1 (out of
 * memory, or stopping). */
typedef void (*waiter_fn)(void *state);
int waiters_add(waiters *w, const char *scope, const char *key, void *state, int64_t deadline,
                waiter_fn on_settled, waiter_fn on_timeout);

/* Worker threads for the calls an HTTP thread must not make: synchronous
 * commits (a human's resolve, inbox claims) and reads that build large
 * answers (lists, records). */
int worker_start(worker **out);
void worker_stop(worker *w); /* runs what is queued, then refuses new jobs */
void worker_free(worker *w); /* after the HTTP daemons stopped */
int worker_run(worker *w, void (*fn)(void *), void *arg);

#endif
