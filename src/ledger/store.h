/*
 * store.h — what the ledger asks of a store, and what it gives one: the
 * interface every store implements (SQLite, PostgreSQL), and the ledger's
 * helpers for errors, copies and tokens that stores use too. The ledger
 * validates arguments and reads the clock; a store only applies
 * already-checked operations atomically and durably.
 *
 * The ledger owns this interface: src/store includes it, and nothing here
 * names a store (src/store/open.c opens one by URL).
 */
#ifndef ONCE_LEDGER_STORE_H
#define ONCE_LEDGER_STORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "once/once.h"

#define ONCE_DETAIL_MAX 512

/* Records a printf-style detail for code on this thread and returns code, so
 * error paths read `return once_fail(ONCE_EINVAL, "key: empty");`. */
int once_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears this thread's detail at the start of a public call. */
void once_detail_clear(void);

/* Formats into a caller buffer, always NUL-terminated, truncating. */
void once_vformat(char *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Heap copy of n bytes plus a NUL; NULL on allocation failure. */
void *once_memdup0(const void *src, size_t n);

/* 16 random bytes as 32 lower-case hex characters and a NUL. */
int once_token_new(char out[ONCE_TOKEN_LEN + 1]);


typedef struct store_vtable {
    const char *name;
    /* Writes take an optional callback: NULL means block until durable;
     * otherwise copy what the caller's stack holds (req, token) and return 0
     * once queued, calling cb later (see once_reserve_async). */
    /* The store makes the fresh token (once_token_new) only when the
     * reservation may be RESERVED: a replay costs no random bytes. */
    int (*reserve)(once_store *s, const once_reserve_req *req, int64_t now, once_reservation *out, once_cb cb,
                   void *ctx);
    int (*complete)(once_store *s, const char *scope, const char *key, const char *token,
                    const once_response *resp, const char *provider_id, int64_t now, once_cb cb, void *ctx);
    /* to is ONCE_STATE_RELEASED or ONCE_STATE_UNKNOWN. */
    int (*settle)(once_store *s, const char *scope, const char *key, const char *token, once_state to,
                  const char *error, int64_t now, once_cb cb, void *ctx);
    /* lease_out (may be NULL) gets the new deadline before cb runs */
    int (*renew)(once_store *s, const char *scope, const char *key, const char *token, int64_t lease_ms,
                 int64_t *lease_out, int64_t now, once_cb cb, void *ctx);
    int (*get)(once_store *s, const char *scope, const char *key, once_action *out);
    /* after_id: the id decoded from the cursor (0 = from the start). */
    int (*list)(once_store *s, const once_list_req *req, int64_t after_id, once_action_list *out);
    int (*resolve)(once_store *s, const char *scope, const char *key, once_outcome outcome,
                   const char *provider_id, const char *note, int64_t now);
    int (*expire_leases)(once_store *s, int64_t now, size_t *count);
    int (*hold)(once_store *s, const char *scope, const char *key, const char *reason, int64_t now);
    /* sweep and event_sweep delete at most STORE_SWEEP_ROWS rows a call: the
     * ledger calls again while a call deleted that many */
    int (*sweep)(once_store *s, int64_t now, size_t *count);
    /* except: NULL, or scopes joined by ',' that are left alone */
    int (*hold_unknown)(once_store *s, const char *scope, const char *except, const char *reason, int64_t now,
                        size_t *count);
    /* reconciliation; step is the trail line, already stamped with the time */
    int (*reconcile_claim)(once_store *s, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                           int64_t now, once_action_list *out);
    int (*reconcile)(once_store *s, const char *scope, const char *key, once_outcome outcome,
                     const once_response *resp, const char *provider_id, const char *step, int64_t now);
    int (*reconcile_failed)(once_store *s, const char *scope, const char *key, int64_t delay_ms, int hold,
                            const char *step, int64_t now);
    /* approvals: a human's decision on an action awaiting approval (note:
     * a denial's note, NULL for an approval; who and decision_note: the
     * decider and the note as given (may be NULL), kept as the row's
     * decided_by and decision_note; step: the trail line, already
     * stamped), the denial of undecided actions past their deadline (of
     * scope, or of all when NULL; step likewise), a claim of an approved one (1 claimed, 0 none: *out as
     * once_approval_claim says) and the oldest undecided one's created_at
     * (0: none) */
    int (*decide)(once_store *s, const char *scope, const char *key, int approve, const char *note,
                  const char *who, const char *decision_note, const char *step, int64_t now);
    int (*expire_approvals)(once_store *s, const char *scope, int64_t now, const char *step, size_t *count);
    int (*approval_claim)(once_store *s, const char *scope, int64_t lease_ms, int64_t now, once_reservation *out);
    int (*approval_oldest)(once_store *s, int64_t *created_at);
    /* limits: the use of one budget at now (a read; once_limit_use) */
    int (*limit_use)(once_store *s, const char *limit, int64_t window_ms, int64_t now, double *used,
                     int64_t *retry_after_ms);
    int (*ping)(once_store *s);
    /* Optional (NULL: ONCE_ENOTSUP): the WAL's bound and size (SQLite),
     * and the one-gateway lock. */
    int (*set_wal_limit)(once_store *s, int64_t bytes);
    int (*wal_bytes)(once_store *s, int64_t *out);
    int (*lock)(once_store *s);
    /* webhook events */
    int (*event_insert)(once_store *s, const once_event_in *ev, int64_t now, int *inserted, once_cb cb, void *ctx);
    /* agent: the claimer kept as each event's claimed_by (NULL: none) */
    int (*event_claim)(once_store *s, const char *source, const char *agent, size_t max, int64_t lease_ms,
                       int64_t now, once_event_list *out);
    /* ack, or retry (pending after delay_ms, or dead) */
    int (*event_settle)(once_store *s, const char *source, const char *receipt, int ack, int64_t delay_ms, int dead,
                        const char *error, int64_t now);
    int (*event_get)(once_store *s, const char *source, const char *event_id, once_event *out);
    int (*event_list)(once_store *s, const once_event_list_req *req, int64_t after_id, once_event_list *out);
    int (*event_redeliver)(once_store *s, const char *source, const char *event_id, int64_t now);
    int (*event_sweep)(once_store *s, int64_t now, size_t *count);
    void (*close)(once_store *s);
} store_vtable;

/* The note of an action denied because nobody decided on it in time
 * (once_expire_approvals), in both stores' SQL. */
#define LEDGER_APPROVAL_EXPIRED "approval expired (nobody decided within approve_ttl)"

/* Whether the action state machine (docs/architecture.md) has an arrow from -> to.
 * Stores assert their transitions with it. */
int ledger_transition_allowed(once_state from, once_state to);

/* The state an outcome (resolve, reconcile) settles an action in. */
once_state ledger_outcome_state(once_outcome outcome);

/* Whether an existing row answers a reservation by itself, without a
 * write: a completed outcome still retained, a lease still live, an unknown
 * or held action that must not be resent (retry_unknown off), an action
 * awaiting approval, or a denial still retained. 1 with *status set, or 0
 * when the reservation must be written. */
int ledger_decide_reservation(once_state state, int64_t lease_expires_at, int64_t expires_at, int64_t now,
                              int retry_unknown, once_reserve_status *status);

/* Fills *out, whose action already holds the row that answered, with status:
 * the row's attempt, its lease when in flight, and when completed whether
 * fingerprint (the new request's, may be NULL) differs from the row's. */
void ledger_answer_reservation(once_reservation *out, once_reserve_status status, const char *fingerprint);

/* Called by the opener once a store is open: the ledger hangs what it keeps
 * per store on it (the replay cache). 0, or an error after closing it. */
int ledger_store_attach(once_store *store);

/* At most this many expired rows go in one sweep's transaction: a day's
 * worth of rows deleted in one commit made every caller queued behind it
 * wait (issue 30); in pieces, other operations commit between them. The
 * stores' SQL holds it as text (STORE_SWEEP_ROWS_SQL, from the number). */
#define STORE_SWEEP_ROWS 1000
#define STORE_SWEEP_TEXT(n) #n
#define STORE_SWEEP_ROWS_TEXT(n) STORE_SWEEP_TEXT(n)
#define STORE_SWEEP_ROWS_SQL STORE_SWEEP_ROWS_TEXT(STORE_SWEEP_ROWS)

/* The common head of every store; implementations embed it first. */
struct once_store {
    const store_vtable *vt;
    once_commit_hook commit_hook;
    void *commit_hook_ctx;
    once_checkpoint_hook checkpoint_hook;
    void *checkpoint_hook_ctx;
    struct replay_cache *replay; /* the ledger's (ledger/replay_cache.h); NULL until open returns */
};

#endif
