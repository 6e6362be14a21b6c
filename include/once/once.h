/*
 * once.h — the public API of libonce, the action ledger.
 *
 * An action is one external side effect, named by (scope, key). The ledger
 * keeps one row per action under a unique constraint and moves it through the
 * states of docs/architecture.md:
 *
 *   (none) --reserve--> pending --complete--> completed
 *                          |  \--mark_unknown / lease expired--> unknown --hold--> held
 *                          \--release--> released --reserve--> pending (attempt+1)
 *   unknown | held --resolve--> completed | released
 *
 * With an approval (once_reserve_req.approval_ttl_ms), nothing is sent
 * before a human says yes:
 *
 *   (none) --reserve--> awaiting_approval --approve, claim--> pending ...
 *                          \--deny / nobody decided in time--> denied
 *
 * Conventions (libuv/curl style):
 *  - Every function that can fail returns an int: 0 (ONCE_OK) on success or
 *    a negative ONCE_E* code. once_strerror() names a code; once_errdetail()
 *    gives a human-readable detail of the last error returned to the
 *    calling thread. The others cannot fail and say what they return: the
 *    *_free and *_close functions (void), the names of codes and states
 *    (const char *), once_store_set_commit_hook (void) and once_now_ms
 *    (int64_t).
 *  - Results are written through out-parameters. Structs passed in are owned
 *    by the caller; what libonce allocates inside them is released with the
 *    type's single *_free function (which frees the members, not the struct,
 *    and leaves it zeroed so a second call is harmless).
 *  - Strings are NUL-terminated UTF-8/ASCII unless a length is given.
 *  - Times are milliseconds since the Unix epoch (wall clock), 0 meaning
 *    "not set".
 *  - Thread-safety: a once_store may be used by any number of threads at
 *    once; every function below is thread-safe unless it says otherwise.
 *    once_store_close() must not race with other calls on the same store.
 */
#ifndef ONCE_ONCE_H
#define ONCE_ONCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ONCE_VERSION "0.1.0"

/* What libonce.so exports: these declarations and nothing else (it is
 * built with hidden visibility). */
#if defined(__GNUC__) && defined(ONCE_BUILDING_LIBRARY)
#define ONCE_API __attribute__((visibility("default")))
#else
#define ONCE_API
#endif

/* ---- errors ------------------------------------------------------------ */

enum once_error {
    ONCE_OK = 0,
    ONCE_EINVAL = -1,    /* an argument is invalid (scope, key, size, URL) */
    ONCE_ENOMEM = -2,    /* an allocation failed */
    ONCE_ESTORE = -3,    /* the store failed (I/O, disk full, SQL error) */
    ONCE_ENOTFOUND = -4, /* no such action */
    ONCE_ESTALE = -5,    /* the token is not the current attempt's: row unchanged */
    ONCE_ESTATE = -6,    /* the transition is not allowed from the row's state */
    ONCE_ESCHEMA = -7,   /* the store was written by a newer schema version */
    ONCE_ENOTDB = -8,    /* the file is not a once database (or not SQLite) */
    ONCE_ENOTSUP = -9,   /* the store kind is not supported by this build */
    ONCE_ECLOSED = -10,  /* the store is shutting down */
    ONCE_EBUSY = -11     /* the store stayed locked by another process too long */
};

/* The name of an error code ("invalid argument", ...); never NULL. */
ONCE_API const char *once_strerror(int code);

/* A detail of the last error a libonce call returned to this thread, e.g.
 * "key: byte 3 is not printable ASCII". The string belongs to the thread and
 * is valid until its next libonce call. Never NULL (empty when none). */
ONCE_API const char *once_errdetail(void);

/* ---- limits ------------------------------------------------------------ */

#define ONCE_KEY_MAX 255                 /* bytes, printable ASCII 0x20..0x7e */
#define ONCE_SCOPE_MAX 64                /* bytes of [A-Za-z0-9._-] */
#define ONCE_FINGERPRINT_MAX 128         /* bytes of printable ASCII */
#define ONCE_PROVIDER_ID_MAX 255         /* bytes of printable ASCII */
#define ONCE_TEXT_MAX 4096               /* error, note, reason: bytes */
#define ONCE_REQUEST_MAX (16u << 20)     /* request metadata blob */
#define ONCE_HEADERS_MAX (1u << 20)      /* stored response headers blob */
#define ONCE_BODY_MAX (64u << 20)        /* stored response body */
#define ONCE_LEASE_MAX_MS (7LL * 24 * 3600 * 1000)
#define ONCE_RETENTION_MAX_MS (3650LL * 24 * 3600 * 1000) /* of a reservation's outcome */
#define ONCE_TOKEN_LEN 32                /* hex characters of a token */
#define ONCE_CURSOR_MAX 32               /* bytes of a list cursor, with NUL */
#define ONCE_PAGE_BYTES (8u << 20)       /* a list page or a claim stops once its stored bodies pass
                                            this many bytes (it holds one row at least) */

/* Checks a key / scope; 0 or ONCE_EINVAL (with a detail). */
ONCE_API int once_key_validate(const char *key);
ONCE_API int once_scope_validate(const char *scope);

/* ---- states ------------------------------------------------------------ */

typedef enum once_state {
    ONCE_STATE_PENDING = 1,
    ONCE_STATE_COMPLETED = 2,
    ONCE_STATE_RELEASED = 3,
    ONCE_STATE_UNKNOWN = 4,
    ONCE_STATE_HELD = 5,
    ONCE_STATE_AWAITING_APPROVAL = 6, /* stored; nothing sent until a human approves (once_approve) */
    ONCE_STATE_DENIED = 7             /* a human said no, or nobody decided in time: final */
} once_state;

/* "pending", "completed", ... ; NULL for a value outside the enum. */
ONCE_API const char *once_state_name(once_state s);
/* Parses a state name; 0 or ONCE_EINVAL. */
ONCE_API int once_state_parse(const char *name, once_state *out);

/* ---- the action record ------------------------------------------------- */

/* A stored response: what the upstream (or the agent, via complete) said.
 * headers is an opaque blob chosen by the caller (the server stores a JSON
 * array of [name, value] pairs); body is raw bytes. */
typedef struct once_response {
    int status;          /* e.g. an HTTP status; 0 when there is no response */
    char *headers;       /* NUL-terminated, may be NULL */
    size_t headers_len;
    uint8_t *body;       /* may be NULL; also NUL-terminated for convenience */
    size_t body_len;
    int64_t body_not_stored; /* > 0: the body (this many bytes) was delivered when the action
                                completed but is not stored (it was larger than the caller keeps,
                                say a long streamed answer); body is then NULL. 0 otherwise. */
} once_response;

/* Everything the ledger knows about one action. Returned by once_get,
 * once_list and (for answers other than RESERVED) once_reserve. */
typedef struct once_action {
    char *scope;
    char *key;
    once_state state;
    int64_t attempt;          /* 1 for the first reservation */
    int64_t created_at;
    int64_t updated_at;
    int64_t lease_expires_at; /* of the current attempt; AWAITING_APPROVAL: the decision deadline */
    int64_t expires_at;       /* completed/released/denied rows are swept after this; 0 otherwise */
    int64_t retention_ms;     /* how long a completed/released row is kept */
    char *fingerprint;        /* of the current attempt's request; may be NULL */
    uint8_t *request;         /* request metadata of the current attempt; may be NULL */
    size_t request_len;
    int has_response;         /* response is meaningful */
    once_response response;
    char *provider_id;        /* may be NULL */
    char *error;              /* last error (release/unknown/expiry reason); may be NULL */
    char *note;               /* resolution note, late completion note; may be NULL */
    int64_t lookups;          /* provider lookups tried for this unknown action */
    char *trail;              /* reconciliation steps and approval decisions, one per line, oldest
                                 first; may be NULL */
    int64_t approved_at;      /* AWAITING_APPROVAL: when a human approved it, waiting to be sent
                                 (0: not decided); kept after it is sent */
    char *decided_by;         /* who approved or denied it (once_approve / once_deny's who: an
                                 operator token's name, "operator", "cli"); NULL while undecided,
                                 and for a denial because nobody decided within the deadline
                                 (once_expire_approvals). Kept after it is sent; a new attempt
                                 (reserve again) forgets it */
    char *decision_note;      /* the note of that decision, as given (NULL: none); a denial's is
                                 also its note above. Forgotten with decided_by */
    char *agent;              /* who asked for the current attempt (once_reserve_req.agent); NULL:
                                 nobody named. A new attempt replaces it */
    int waits_for_limit;      /* the attempt awaited (or awaits) approval because it was past a
                                 limit (once_reserve_req.over_limit_approve); nothing was drawn */
} once_action;

/* Frees the members of *a (not a itself) and zeroes it. NULL is fine. */
ONCE_API void once_action_free(once_action *a);

/* ---- the store --------------------------------------------------------- */

typedef struct once_store once_store;

/* Optional process-wide set-up, for a program to call before any of its
 * threads uses SQLite (at the top of main): turns off SQLite's memory
 * statistics, whose process-wide mutex every SQLite allocation takes; with
 * several threads answering from read connections it was the gateway's
 * busiest lock. libonce does not read those statistics. Skipping it is
 * safe; called after SQLite has started it changes nothing. Returns ONCE_OK. */
ONCE_API int once_global_init(void);

/* Opens (creating if needed, migrating forward) the store named by url:
 *   sqlite:PATH       a file; WAL, synchronous=FULL, group commit
 *   sqlite::memory:   a private in-memory database (tests)
 *   postgres://...    a libpq URL (postgresql:// too); ?once_schema=NAME keeps
 *                     the tables in that schema ([a-z0-9_]{1,63}, created);
 *                     group commit over pipelined batches
 * On success *out is a new store, to be closed with once_store_close.
 * Errors: ONCE_EINVAL (bad URL), ONCE_ESTORE (cannot open or reach,
 * missing directory, unreadable), ONCE_ENOTDB (not SQLite), ONCE_ESCHEMA
 * (newer schema; the file is left untouched), ONCE_ENOMEM. */
ONCE_API int once_store_open(const char *url, once_store **out);

/* The store URL as it may be printed or logged: the password of a
 * postgres:// URL (in its user:password@ part or a password= parameter)
 * becomes "***". Writes at most cap bytes with the NUL into out (cutting a
 * longer URL). 0, or ONCE_EINVAL when out is NULL or cap is 0. */
ONCE_API int once_store_url_redact(const char *url, char *out, size_t cap);

/* Waits for queued operations to finish, stops the store's threads and
 * frees it. NULL is fine. Not thread-safe against other calls on store. */
ONCE_API void once_store_close(once_store *store);

/* 0 if a write would commit now (a no-op transaction through the store's
 * writers, whose broken connections are replaced first), else an error. */
ONCE_API int once_store_ping(once_store *store);

/* SQLite: the WAL is checkpointed and truncated once it passes bytes
 * (default 64 MiB; at least 1 MiB), so a sustained load cannot grow it
 * without bound. Other stores: nothing to bound, 0. */
ONCE_API int once_store_set_wal_limit(once_store *store, int64_t bytes);
/* SQLite: the WAL file's size now. ONCE_ENOTSUP for a store without one. */
ONCE_API int once_store_wal_bytes(once_store *store, int64_t *bytes);

/* Claims the store for one serving process: a SQLite file may be served by
 * one gateway at a time (ONCE_EBUSY, naming the holder, for a second);
 * PostgreSQL is shared by any number of nodes (always 0). Held until
 * once_store_close. Readers and the CLI need no claim. */
ONCE_API int once_store_lock(once_store *store);

/* Called by the store's writer after each commit, on the writer thread:
 * batch is the number of operations in the transaction, seconds the time
 * from BEGIN to the end of the durable COMMIT. Keep it cheap. Set it before
 * other threads use the store; NULL removes it. */
typedef void (*once_commit_hook)(void *ctx, size_t batch, double seconds);
ONCE_API void once_store_set_commit_hook(once_store *store, once_commit_hook fn, void *ctx);

/* Called after each checkpoint of a SQLite store's WAL (never for
 * PostgreSQL): by_writer is 1 when the writer thread ran it, so every caller
 * queued behind the writer waited for it, 0 when the background
 * checkpointer did; seconds is its duration (a wait for the other's
 * checkpoint included), frames the WAL's frames and copied those now in the
 * database. Runs on the thread that checkpointed: keep it cheap. Set it
 * before other threads use the store; NULL removes it. */
typedef void (*once_checkpoint_hook)(void *ctx, int by_writer, double seconds, int frames, int copied);
ONCE_API void once_store_set_checkpoint_hook(once_store *store, once_checkpoint_hook fn, void *ctx);

/* ---- limits: budgets of new attempts ------------------------------------ */

/* One budget a new attempt draws from (docs/agents.md): never more than max
 * in any window of window_ms, across every node of one store. Counted in
 * buckets of width max(1, window_ms / 60) ms; the count covers the buckets
 * of the last ceil(window_ms / width) + 1 (61 when window_ms is a multiple
 * of 60), so a limit may refuse early by at most about a bucket or two,
 * never late. A limit's identity names one window: the same limit with two
 * windows would share its buckets. */
typedef struct once_limit_charge {
    const char *limit;  /* the budget's identity, 1..ONCE_LIMIT_NAME_MAX bytes of UTF-8 (the server uses
                           "AGENT\nLIMIT TEXT") */
    int64_t window_ms;  /* ONCE_LIMIT_WINDOW_MIN_MS .. ONCE_LIMIT_WINDOW_MAX_MS */
    double max;         /* > 0, finite */
    double amount;      /* > 0, finite: 1 for a count, the summed member's value for sum() */
} once_limit_charge;

#define ONCE_LIMIT_CHARGES_MAX 16
#define ONCE_LIMIT_NAME_MAX 512                        /* bytes of a limit's identity */
#define ONCE_LIMIT_WINDOW_MIN_MS 1000LL                /* 1 s */
#define ONCE_LIMIT_WINDOW_MAX_MS (30LL * 24 * 3600 * 1000) /* 30 d */
#define ONCE_AGENT_MAX 64                              /* bytes of [A-Za-z0-9._-] */

/* ---- reserve ----------------------------------------------------------- */

typedef struct once_reserve_req {
    const char *scope;        /* required */
    const char *key;          /* required */
    const char *fingerprint;  /* optional; compared with the completed one */
    int64_t lease_ms;         /* > 0, at most ONCE_LEASE_MAX_MS */
    int64_t retention_ms;     /* how long the outcome is replayed; 0 = 24 h */
    const uint8_t *request;   /* optional request metadata, stored with the row */
    size_t request_len;
    int retry_unknown;        /* the provider dedupes natively on this key: an UNKNOWN
                                 or HELD row is reserved again (attempt + 1), since
                                 resending with the same key cannot act twice */
    /* Optional, instead of request/request_len: describes the request only
     * when the reservation may be written. A replay answered from the
     * replay cache, or a replay or conflict answered by a read (PostgreSQL),
     * never calls it, so a server does not build the metadata of a request it
     * only replays. Called at most once per once_reserve(_async) call, on the
     * calling thread, before anything is queued; it points *data and *len at
     * the metadata (memory the caller keeps valid as it would `request`) and
     * returns 0, or a negative ONCE_E* that becomes the reserve's result
     * (nothing is written). The limits of `request` apply to what it gives. */
    int (*request_fn)(void *arg, const uint8_t **data, size_t *len);
    void *request_arg;
    /* > 0: where the answer would be RESERVED (a new row, or a new attempt
     * after a release or an ended retention), the row instead waits for a
     * human (AWAITING_APPROVAL, no token); nothing may be sent until a
     * gateway claims it approved (once_approval_claim). Undecided after
     * approval_ttl_ms (at most ONCE_APPROVAL_TTL_MAX_MS) it is denied
     * (once_expire_approvals). Rows in other states answer as always. */
    int64_t approval_ttl_ms;
    /* Who asks (NULL: nobody named): stored with a new attempt (the
     * action's agent), 1..ONCE_AGENT_MAX bytes of [A-Za-z0-9._-]. */
    const char *agent;
    /* The budgets a new attempt draws from (see once_limit_charge), at most
     * ONCE_LIMIT_CHARGES_MAX. Drawn only where a new attempt is written
     * (RESERVED, or AWAITING_APPROVAL by approval_ttl_ms), in the same
     * transaction; replays and conflicts never draw. Given back when the
     * attempt is RELEASED or DENIED; UNKNOWN, HELD and COMPLETED keep them.
     * What they point to must stay valid as req does. */
    const once_limit_charge *charges;
    size_t ncharges;
    /* Past a limit: instead of ONCE_OVER_LIMIT, the new attempt waits for a
     * person (AWAITING_APPROVAL with waits_for_limit = 1 and a decision
     * deadline of over_limit_ttl_ms, 1 ms..ONCE_APPROVAL_TTL_MAX_MS), and
     * nothing is drawn. */
    int over_limit_approve;
    int64_t over_limit_ttl_ms;
} once_reserve_req;

#define ONCE_APPROVAL_TTL_MAX_MS (30LL * 24 * 3600 * 1000)

typedef enum once_reserve_status {
    ONCE_RESERVED = 1,   /* go ahead: token, attempt and lease are yours */
    ONCE_COMPLETED = 2,  /* done before: replay action.response */
    ONCE_IN_FLIGHT = 3,  /* another attempt holds a live lease until lease_expires_at */
    ONCE_UNKNOWN = 4,    /* may have happened: never resend without reconciling */
    ONCE_HELD = 5,       /* waiting for a human (see action.error) */
    ONCE_AWAITING_APPROVAL = 6, /* stored (now, or before) and waiting for a human's approval;
                                   action is the row; nothing may be sent */
    ONCE_DENIED = 7,     /* a human denied it or nobody decided in time (action.note says which) */
    ONCE_OVER_LIMIT = 8  /* a charge would pass its limit: nothing was written or drawn (action is
                            empty); over_limit and retry_after_ms say which and when */
} once_reserve_status;

/* "reserved", "completed", ...; NULL outside the enum. */
ONCE_API const char *once_reserve_status_name(once_reserve_status s);

typedef struct once_reservation {
    once_reserve_status status;
    char token[ONCE_TOKEN_LEN + 1]; /* RESERVED only: the fencing token */
    int64_t attempt;                /* of the row's current attempt */
    int64_t lease_expires_at;       /* RESERVED / IN_FLIGHT: the lease deadline */
    int fingerprint_mismatch;       /* COMPLETED: the request differs from the first */
    once_action action;             /* every status but RESERVED and OVER_LIMIT: the row */
    size_t over_limit;              /* OVER_LIMIT (and AWAITING_APPROVAL because of a limit): index of
                                       the first charge that did not fit */
    int64_t retry_after_ms;         /* OVER_LIMIT (and AWAITING_APPROVAL because of a limit): in how
                                       many ms enough room comes back for that charge (> 0), or -1:
                                       never (its amount is more than its max) */
} once_reservation;

/* Frees what *r owns (its action) and zeroes it. */
ONCE_API void once_reservation_free(once_reservation *r);

/* Reserves (scope, key) for one attempt. Returns 0 and an answer in *out, or
 * an error. RESERVED (and a row that starts to await approval) is durable
 * (committed and synced) before this returns.
 * A RELEASED row, or a COMPLETED or DENIED one past its retention, is
 * reserved again with attempt + 1 (or waits for approval again, with
 * approval_ttl_ms; its approval is forgotten). A row AWAITING_APPROVAL
 * answers AWAITING_APPROVAL, a DENIED one within its retention DENIED,
 * whatever the request asks. A PENDING row whose lease has passed becomes UNKNOWN.
 * Where a new attempt would be written, req->charges are drawn in the same
 * transaction; the first that would pass its limit answers OVER_LIMIT
 * (nothing written), or with over_limit_approve the attempt waits for a
 * person undrawn. The unique constraint decides races between threads and
 * processes; the limits are serialized across them too. */
ONCE_API int once_reserve(once_store *store, const once_reserve_req *req, once_reservation *out);

/* ---- outcomes (fenced by the token) ------------------------------------ */

/* Fenced calls (complete, release, mark_unknown) check the token before the
 * state: a token that is not the current attempt's is ONCE_ESTALE whatever
 * the row's state; a malformed token (not 32 lower-case hex characters) is
 * ONCE_EINVAL. Negative retention, a NULL pointer with a non-zero length and
 * anything over the limits above are ONCE_EINVAL. */

/* PENDING -> COMPLETED with response (may be NULL) and provider_id (may be
 * NULL). With the current token, a row that is UNKNOWN or HELD is completed
 * too, noted as a late completion: it is the truth about the world. A
 * repeated complete of a COMPLETED row with its token is 0 and changes
 * nothing (the first result stays). Durable before it returns.
 * Errors: ONCE_ENOTFOUND, ONCE_ESTALE (not the current attempt's token; row
 * unchanged), ONCE_ESTATE (RELEASED), ONCE_EINVAL, ONCE_ESTORE. */
ONCE_API int once_complete(once_store *store, const char *scope, const char *key, const char *token,
                  const once_response *response, const char *provider_id);

/* PENDING -> RELEASED: the action was certainly not performed; the key is
 * free for the next attempt. error (may be NULL) is kept. Repeating it on a
 * RELEASED row with the same token is 0. Errors as once_complete; UNKNOWN and
 * HELD rows are ONCE_ESTATE (only reconciliation or a human settles them). */
ONCE_API int once_release(once_store *store, const char *scope, const char *key, const char *token,
                 const char *error);

/* PENDING -> UNKNOWN: the action may have been performed. Repeating it on an
 * UNKNOWN row with the same token is 0. Errors as once_release. */
ONCE_API int once_mark_unknown(once_store *store, const char *scope, const char *key, const char *token,
                      const char *error);

/* PENDING: the lease of the attempt holding token moves to now + lease_ms,
 * so a long call is not taken for a dead one (the owner renews every
 * lease/3 while it works). *lease_expires_at (may be NULL) gets the new
 * deadline. Durable before it returns. Errors: ONCE_ENOTFOUND, ONCE_ESTALE
 * (another attempt holds the key), ONCE_ESTATE (the row is no longer
 * pending: its lease ran out and it is unknown — the call's answer, when it
 * comes, is still recorded by once_complete as a late completion),
 * ONCE_EINVAL (lease_ms outside 1 ms..ONCE_LEASE_MAX_MS). */
ONCE_API int once_renew(once_store *store, const char *scope, const char *key, const char *token, int64_t lease_ms,
               int64_t *lease_expires_at);

/* ---- reads ------------------------------------------------------------- */

/* The whole record of (scope, key) into *out. ONCE_ENOTFOUND if absent. */
ONCE_API int once_get(once_store *store, const char *scope, const char *key, once_action *out);

typedef struct once_list_req {
    once_state state;      /* 0 = any state */
    const char *scope;     /* NULL = any scope */
    size_t limit;          /* 1..1000; 0 = 100 */
    const char *cursor;    /* NULL or "" = from the start; else a previous next */
    const char *agent;     /* NULL = any agent; else the actions whose current attempt it asked for */
} once_list_req;

typedef struct once_action_list {
    once_action *items;
    size_t count;
    char next[ONCE_CURSOR_MAX]; /* "" when there is no further page */
} once_action_list;

/* Frees the items of *l and zeroes it. */
ONCE_API void once_action_list_free(once_action_list *l);

/* One page of actions in creation order. Paging with next is stable under
 * concurrent inserts: rows are never skipped or repeated (new rows appear on
 * later pages). ONCE_EINVAL for a bad cursor, limit or scope. */
ONCE_API int once_list(once_store *store, const once_list_req *req, once_action_list *out);

/* The use of one budget now (for GET /v1/agents): *used, what the counted
 * buckets hold (see once_limit_charge), and *retry_after_ms, in how many ms
 * the oldest counted bucket that holds anything leaves the window (0 when
 * nothing is counted). limit and window_ms as in once_limit_charge. A read. */
ONCE_API int once_limit_use(once_store *store, const char *limit, int64_t window_ms, double *used,
                            int64_t *retry_after_ms);

/* ---- operator and background transitions ------------------------------- */

typedef enum once_outcome {
    ONCE_OUTCOME_COMPLETED = 1,
    ONCE_OUTCOME_RELEASED = 2
} once_outcome;

/* A human settles an UNKNOWN or HELD action: COMPLETED (with provider_id and
 * note, no stored response) or RELEASED. Anything else is ONCE_ESTATE. */
ONCE_API int once_resolve(once_store *store, const char *scope, const char *key, once_outcome outcome,
                 const char *provider_id, const char *note);

/* The error of an action that became UNKNOWN because its lease ran out
 * (its owner stopped renewing: it died, or lost the store). Its call may
 * still be running on a node cut off from the store. */
#define ONCE_REASON_LEASE_EXPIRED "lease expired"

/* Moves every PENDING row whose lease ended at or before now to UNKNOWN
 * (ONCE_REASON_LEASE_EXPIRED). *count (may be NULL) gets how many moved. */
ONCE_API int once_expire_leases(once_store *store, int64_t now, size_t *count);

/* UNKNOWN -> HELD with reason (may be NULL). Anything else is ONCE_ESTATE. */
ONCE_API int once_hold(once_store *store, const char *scope, const char *key, const char *reason);

/* Deletes COMPLETED, RELEASED and DENIED rows whose retention ended at or
 * before now. Never touches PENDING, UNKNOWN, HELD or AWAITING_APPROVAL. *count (may be NULL) gets how many. */
ONCE_API int once_sweep(once_store *store, int64_t now, size_t *count);

/* Moves every UNKNOWN row (of scope, or of every scope when scope is NULL)
 * to HELD with reason. *count (may be NULL) gets how many moved. */
ONCE_API int once_hold_unknown(once_store *store, const char *scope, const char *reason, size_t *count);

/* As once_hold_unknown for every scope except the nexcept listed (scopes
 * whose unknown actions a provider lookup settles instead). */
ONCE_API int once_hold_unknown_except(once_store *store, const char *const *except, size_t nexcept, const char *reason,
                             size_t *count);

/* ---- approvals: a human says yes before the effect ---------------------- */

/* A human's decision on an AWAITING_APPROVAL action. who names the decider
 * (an operator token's name, "operator", "cli"; printable ASCII, at most
 * 64 bytes) and note (may be NULL, at most ONCE_TEXT_MAX bytes)
 * why; both are kept as the action's decided_by and decision_note and go
 * into the trail ("approved by WHO: NOTE"), stamped with the time. Durable
 * before they return.
 *
 * once_approve marks the action approved: it stays AWAITING_APPROVAL until
 * a gateway claims it (once_approval_claim) and sends exactly the stored
 * request. Approving an approved action again is 0 and changes nothing,
 * whatever its state since (waiting for its sender, being sent, settled), so
 * two concurrent approvals send once. once_deny moves it to DENIED, with
 * note as the action's note; final (retries are refused) until its
 * retention ends. Errors: ONCE_ENOTFOUND; ONCE_ESTATE for any other state
 * (approve: of an action never approved), and for a deny of an approved
 * action (it is being sent); ONCE_EINVAL. */
ONCE_API int once_approve(once_store *store, const char *scope, const char *key, const char *who, const char *note);
ONCE_API int once_deny(once_store *store, const char *scope, const char *key, const char *who, const char *note);

/* Denies every undecided AWAITING_APPROVAL row (of scope, or of every scope
 * when scope is NULL) whose decision deadline (lease_expires_at) passed at
 * or before now: note "approval expired (nobody decided within
 * approve_ttl)", a trail line "expired: nobody decided within approve_ttl",
 * kept for its retention as a denial is. Approved rows wait for their
 * sender and never expire. *count (may be NULL) gets how many. */
ONCE_API int once_expire_approvals(once_store *store, const char *scope, int64_t now, size_t *count);

/* Takes one approved action of scope to send: AWAITING_APPROVAL (approved)
 * -> PENDING with a fresh token and a lease of lease_ms, fenced as a
 * reservation is (one claimer wins, across processes and nodes). Returns 1
 * with *out filled as a RESERVED reservation whose action is the row (its
 * stored request included), 0 when none is waiting (*out zeroed), or an
 * error. The claimer then sends, and records with complete / release /
 * mark_unknown under the token, as for any reservation. */
ONCE_API int once_approval_claim(once_store *store, const char *scope, int64_t lease_ms, once_reservation *out);

/* When the oldest undecided AWAITING_APPROVAL action (any scope) was
 * created, into *created_at (0 when none waits). */
ONCE_API int once_approval_oldest(once_store *store, int64_t *created_at);

/* ---- reconciliation: ask the provider, never resend --------------------- */

/* Claims up to max UNKNOWN actions of scope whose next lookup is due and
 * that have been unknown for at least settle_ms (a provider's lookup lags
 * its writes: asked too soon it says "absent" for a request it is still
 * processing): each is kept from other claimers (other nodes) for lease_ms. */
ONCE_API int once_reconcile_claim(once_store *store, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                         once_action_list *out);

/* The provider's lookup settled an UNKNOWN action: ONCE_OUTCOME_COMPLETED
 * stores response (may be NULL) and provider_id, so retries replay it;
 * ONCE_OUTCOME_RELEASED frees the key for the next attempt. step (may be
 * NULL) is appended to the trail. Anything but UNKNOWN is ONCE_ESTATE. */
ONCE_API int once_reconcile(once_store *store, const char *scope, const char *key, once_outcome outcome,
                   const once_response *response, const char *provider_id, const char *step);

/* A lookup gave no answer: counts it, appends step to the trail, and makes
 * the next lookup due after delay_ms — or, with hold set, moves the action
 * to HELD with step as the reason. Only from UNKNOWN (ONCE_ESTATE else). */
ONCE_API int once_reconcile_failed(once_store *store, const char *scope, const char *key, int64_t delay_ms, int hold,
                          const char *step);

/* Callback of the asynchronous calls (see "asynchronous variants"). */
typedef void (*once_cb)(void *ctx, int rc, const char *detail);

/* ---- webhook events ---------------------------------------------------- */

/* An inbound webhook event, deduplicated by (source, event_id) under a unique
 * constraint, then handed to the agent at least once: pushed by the gateway
 * or pulled through claims. A claim (attempt + 1) gets a receipt; only the
 * current receipt may ack or retry it, so a slow consumer cannot settle an
 * event that was claimed again after its lease. */

#define ONCE_EVENT_ID_MAX 255   /* bytes of printable ASCII */
#define ONCE_RECEIPT_MAX 64     /* bytes of a receipt, with NUL */

typedef enum once_event_state {
    ONCE_EVENT_PENDING = 1,   /* waiting for (re)delivery or claimed now */
    ONCE_EVENT_DELIVERED = 2, /* acknowledged by the agent */
    ONCE_EVENT_DEAD = 3       /* gave up after max attempts (redeliver revives it) */
} once_event_state;

ONCE_API const char *once_event_state_name(once_event_state s);
ONCE_API int once_event_state_parse(const char *name, once_event_state *out);

typedef struct once_event {
    char *source;
    char *event_id;
    once_event_state state;
    int64_t attempt;          /* claims so far; the current one's number while claimed */
    int64_t received_at;
    int64_t updated_at;
    int64_t next_at;          /* not claimed before this (backoff, nack delay) */
    int64_t claim_until;      /* the current claim's lease; 0 when unclaimed */
    int64_t delivered_at;
    int64_t expires_at;       /* delivered/dead rows are swept after this */
    char receipt[ONCE_RECEIPT_MAX]; /* once_event_claim only: the claim's receipt */
    char *content_type;       /* may be NULL */
    char *headers;            /* opaque blob (the server: JSON [[name, value], …]); may be NULL */
    size_t headers_len;
    uint8_t *body;            /* NUL-terminated for convenience; may be NULL */
    size_t body_len;
    char *error;              /* last delivery error; may be NULL */
    char *claimed_by;         /* the agent of the current or last claim (once_event_claim_as);
                                 NULL: none named */
} once_event;

ONCE_API void once_event_free(once_event *e);

typedef struct once_event_list {
    once_event *items;
    size_t count;
    char next[ONCE_CURSOR_MAX];
} once_event_list;

ONCE_API void once_event_list_free(once_event_list *l);

typedef struct once_event_in {
    const char *source;       /* 1–64 of [A-Za-z0-9._-] */
    const char *event_id;     /* 1–255 printable ASCII */
    const char *content_type; /* optional */
    const char *headers;      /* optional blob */
    size_t headers_len;
    const uint8_t *body;
    size_t body_len;
    int64_t retention_ms;     /* the dedupe window after delivery; 0 = 7 days */
    const char *digest;       /* optional second dedupe key (64 lower-case hex, the body's digest) for a
                                 source whose event id the signature does not cover; NULL = none */
} once_event_in;

/* Inserts the event unless (source, event_id) exists — or, when digest is
 * given, (source, digest); durable before it returns. *inserted = 1 for a
 * new event, 0 for a duplicate (nothing changed). */
ONCE_API int once_event_insert(once_store *store, const once_event_in *ev, int *inserted);
/* As once_event_insert, answering through cb once durable (see the
 * asynchronous variants below); *inserted is set before cb runs. Returns 1
 * when a read already found the event (a duplicate: *inserted = 0, cb will
 * not run): redeliveries then cost no write and no fsync. */
ONCE_API int once_event_insert_async(once_store *store, const once_event_in *ev, int *inserted, once_cb cb, void *ctx);

/* Claims up to max pending events of source that are due (next_at <= now)
 * and not held by a live claim, oldest first: each gets attempt + 1, a new
 * receipt and claim_until = now + lease_ms. Two claimers never get the same
 * event while its claim lives. */
ONCE_API int once_event_claim(once_store *store, const char *source, size_t max, int64_t lease_ms, once_event_list *out);
/* As once_event_claim, naming the claimer: agent (NULL: none; else
 * 1..ONCE_AGENT_MAX bytes of [A-Za-z0-9._-]) is kept on each claimed
 * event as its claimed_by. once_event_claim is this with agent NULL. */
ONCE_API int once_event_claim_as(once_store *store, const char *source, const char *agent, size_t max,
                                 int64_t lease_ms, once_event_list *out);

/* Settles the claim with receipt: delivered. ONCE_ESTALE when the receipt is
 * not the event's current one (it was claimed again); ONCE_ENOTFOUND when
 * the event is gone. Repeating an ack of a delivered event is 0. */
ONCE_API int once_event_ack(once_store *store, const char *source, const char *receipt);

/* Ends the claim with receipt without delivery: pending again after
 * delay_ms, or dead when dead is set; error (may be NULL) is kept. Errors as
 * once_event_ack. */
ONCE_API int once_event_retry(once_store *store, const char *source, const char *receipt, int64_t delay_ms, int dead,
                     const char *error);

/* One event, or ONCE_ENOTFOUND. */
ONCE_API int once_event_get(once_store *store, const char *source, const char *event_id, once_event *out);

typedef struct once_event_list_req {
    const char *source;       /* NULL = any */
    once_event_state state;   /* 0 = any */
    size_t limit;             /* 1..1000; 0 = 100 */
    const char *cursor;
} once_event_list_req;

/* A page of events in arrival order (bodies included), stable under inserts. */
ONCE_API int once_list_events(once_store *store, const once_event_list_req *req, once_event_list *out);

/* Makes the event pending and due now, whatever its state (a delivered or
 * dead event is delivered again); its attempt count goes on. */
ONCE_API int once_event_redeliver(once_store *store, const char *source, const char *event_id);

/* Deletes delivered and dead events whose retention ended at or before now. */
ONCE_API int once_event_sweep(once_store *store, int64_t now, size_t *count);

/* ---- asynchronous variants --------------------------------------------- */

/* For servers that must not block a thread on an fsync (docs/architecture.md): the
 * operation joins the next group commit and cb runs once it is durable (or
 * failed), on a store thread, with rc and a detail (never NULL). cb must be
 * quick and must not call the blocking functions above. Everything the
 * arguments point to (strings, req, response, out) must stay valid until cb
 * has run. Return: 0 queued (cb will run exactly once); a negative code when
 * the arguments are refused (cb will not run). */

/* As once_reserve. Returns 1 when the answer needed no write: a completed
 * outcome from the ledger's replay cache, or (PostgreSQL) one indexed read
 * (COMPLETED, IN_FLIGHT, UNKNOWN, HELD); *out is filled and cb will not run.
 * 0 when queued: *out is filled before cb runs. SQLite stores queue every
 * reservation the replay cache does not answer, and their writer answers
 * (docs/ledger.md); a COMPLETED answer it gives is cached for the next. */
ONCE_API int once_reserve_async(once_store *store, const once_reserve_req *req, once_reservation *out, once_cb cb,
                       void *ctx);
ONCE_API int once_complete_async(once_store *store, const char *scope, const char *key, const char *token,
                        const once_response *response, const char *provider_id, once_cb cb, void *ctx);
ONCE_API int once_release_async(once_store *store, const char *scope, const char *key, const char *token,
                       const char *error, once_cb cb, void *ctx);
ONCE_API int once_mark_unknown_async(once_store *store, const char *scope, const char *key, const char *token,
                            const char *error, once_cb cb, void *ctx);
/* As once_renew; *lease_expires_at is set before cb runs. Renewals queued
 * together share one group commit. */
ONCE_API int once_renew_async(once_store *store, const char *scope, const char *key, const char *token, int64_t lease_ms,
                     int64_t *lease_expires_at, once_cb cb, void *ctx);

/* ---- helpers ----------------------------------------------------------- */

/* Milliseconds since the epoch, wall clock. */
ONCE_API int64_t once_now_ms(void);

/* SHA-256 over the canonical request (method, path, body), as 64 lower-case
 * hex characters and a NUL in out. Fields are length-prefixed, so no two
 * different requests share the canonical form. 0 or ONCE_EINVAL/ONCE_ENOMEM. */
ONCE_API int once_fingerprint(const char *method, const char *path, const uint8_t *body, size_t body_len,
                     char out[65]);

#ifdef __cplusplus
}
#endif
#endif
