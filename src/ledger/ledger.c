/*
 * ledger.c — the public entry points of libonce.
 *
 * Each function checks its arguments completely, reads the clock once and
 * hands the operation to the store through its vtable. Keeping validation
 * here means every store gets the same contract and none can forget a check.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/timefmt.h"
#include "ledger/entry.h"
#include "ledger/replay_cache.h"
#include "ledger/store.h"
#include "ledger/validate.h"

#define DEFAULT_RETENTION_MS (24LL * 3600 * 1000)

int ledger_store_attach(once_store *store)
{
    if (replay_cache_new(&store->replay) < 0) {
        once_store_close(store);
        return once_fail(ONCE_ENOMEM, "store: out of memory");
    }
    return ONCE_OK;
}

void once_store_close(once_store *store)
{
    if (!store)
        return;
    replay_cache *replay = store->replay; /* close frees the store */
    store->vt->close(store);
    replay_cache_free(replay);
}

int once_store_set_wal_limit(once_store *store, int64_t bytes)
{
    once_detail_clear();
    if (!store || bytes < ((int64_t)1 << 20))
        return once_fail(ONCE_EINVAL, "store: a WAL limit is at least 1 MiB");
    if (!store->vt->set_wal_limit)
        return ONCE_OK; /* the store keeps no WAL of its own to bound */
    return store->vt->set_wal_limit(store, bytes);
}

int once_store_wal_bytes(once_store *store, int64_t *bytes)
{
    once_detail_clear();
    if (!store || !bytes)
        return once_fail(ONCE_EINVAL, "store: store and bytes are required");
    if (!store->vt->wal_bytes)
        return once_fail(ONCE_ENOTSUP, "store: %s keeps no WAL of its own", store->vt->name);
    return store->vt->wal_bytes(store, bytes);
}

int once_store_lock(once_store *store)
{
    once_detail_clear();
    if (!store)
        return once_fail(ONCE_EINVAL, "store is NULL");
    return store->vt->lock ? store->vt->lock(store) : ONCE_OK;
}

int once_store_ping(once_store *store)
{
    once_detail_clear();
    if (!store)
        return once_fail(ONCE_EINVAL, "store: NULL");
    return store->vt->ping(store);
}

void once_store_set_commit_hook(once_store *store, once_commit_hook fn, void *ctx)
{
    if (!store)
        return;
    store->commit_hook_ctx = ctx;
    store->commit_hook = fn;
}

void once_store_set_checkpoint_hook(once_store *store, once_checkpoint_hook fn, void *ctx)
{
    if (!store)
        return;
    store->checkpoint_hook_ctx = ctx;
    store->checkpoint_hook = fn;
}

/* The entry points that fill *out start so; one place keeps their contract: *out is
 * always zeroed before anything can fail past the arguments. */
int ledger_begin_out(int args_ok, void *out, size_t size, const char *missing)
{
    once_detail_clear();
    if (!args_ok)
        return once_fail(ONCE_EINVAL, "%s", missing);
    memset(out, 0, size);
    return ONCE_OK;
}

static int check_name(const char *scope, const char *key)
{
    int rc = once_scope_validate(scope);
    return rc < 0 ? rc : once_key_validate(key);
}

/* How every entry point that names one action starts, said once: this
 * thread's detail cleared, a store (no_store is the detail without one), a
 * valid scope and key. */
static int begin_named(once_store *store, const char *no_store, const char *scope, const char *key)
{
    once_detail_clear();
    if (!store)
        return once_fail(ONCE_EINVAL, "%s", no_store);
    return check_name(scope, key);
}

/* begin_named for the calls of the attempt that holds the key, which bring
 * its token (complete, release, mark unknown, renew). */
static int begin_fenced(once_store *store, const char *no_store, const char *scope, const char *key,
                        const char *token)
{
    int rc = begin_named(store, no_store, scope, key);
    return rc < 0 ? rc : validate_token(token);
}

/* What resolve and reconcile both settle with: an outcome, the provider's id
 * and a free text (text_name: the note, the step); what names the call. */
static int check_outcome(const char *what, once_outcome outcome, const char *provider_id, const char *text_name,
                         const char *text)
{
    if (outcome != ONCE_OUTCOME_COMPLETED && outcome != ONCE_OUTCOME_RELEASED)
        return once_fail(ONCE_EINVAL, "%s: outcome must be completed or released", what);
    int rc = validate_text("provider_id", provider_id, ONCE_PROVIDER_ID_MAX, 1);
    return rc < 0 ? rc : validate_text(text_name, text, ONCE_TEXT_MAX, 0);
}

static int reserve(once_store *store, const once_reserve_req *req, once_reservation *out, once_cb cb,
                   void *ctx)
{
    int rc = ledger_begin_out(store && req && out, out, sizeof *out, "reserve: store, req and out are required");
    if (rc < 0 || (rc = check_name(req->scope, req->key)) < 0)
        return rc;
    if ((rc = validate_text("fingerprint", req->fingerprint, ONCE_FINGERPRINT_MAX, 1)) < 0)
        return rc;
    if (req->lease_ms <= 0 || req->lease_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "lease: must be between 1 ms and 7 days");
    if (req->retention_ms < 0 || req->retention_ms > ONCE_RETENTION_MAX_MS)
        return once_fail(ONCE_EINVAL, "retention: must be between 0 (default) and 10 years");
    if (req->request_len > ONCE_REQUEST_MAX || (!req->request && req->request_len))
        return once_fail(ONCE_EINVAL, "request: larger than %u bytes or NULL with a length", ONCE_REQUEST_MAX);
    if (req->approval_ttl_ms < 0 || req->approval_ttl_ms > ONCE_APPROVAL_TTL_MAX_MS)
        return once_fail(ONCE_EINVAL, "approval_ttl: must be between 0 (no approval) and 30 days");
    if ((rc = validate_agent(req->agent)) < 0 || (rc = validate_charges(req->charges, req->ncharges)) < 0)
        return rc;
    if (req->over_limit_approve &&
        (req->over_limit_ttl_ms <= 0 || req->over_limit_ttl_ms > ONCE_APPROVAL_TTL_MAX_MS))
        return once_fail(ONCE_EINVAL, "over_limit_ttl: must be between 1 ms and 30 days with over_limit_approve");
    once_reserve_req r = *req;
    if (r.retention_ms == 0)
        r.retention_ms = DEFAULT_RETENTION_MS;
    int64_t now = once_now_ms();
    /* A completed outcome never changes until its retention ends: replay it
     * from memory when it is there (ledger/replay_cache.c). */
    if (store->replay) {
        rc = replay_cache_get(store->replay, r.scope, r.key, now, &out->action);
        if (rc < 0)
            return once_fail(rc, "reserve: out of memory");
        if (rc == 1) {
            ledger_answer_reservation(out, ONCE_COMPLETED, r.fingerprint);
            return cb ? 1 : ONCE_OK;
        }
    }
    rc = store->vt->reserve(store, &r, now, out, cb, ctx);
    if (rc < 0)
        once_reservation_free(out);
    else if (store->replay && (rc == 1 || !cb) && out->status == ONCE_COMPLETED)
        replay_cache_put(store->replay, &out->action); /* an answer a callback brings, store/op.c caches */
    return rc;
}

int once_reserve(once_store *store, const once_reserve_req *req, once_reservation *out)
{
    return reserve(store, req, out, NULL, NULL);
}

int once_reserve_async(once_store *store, const once_reserve_req *req, once_reservation *out, once_cb cb,
                       void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "reserve: callback is NULL");
    return reserve(store, req, out, cb, ctx);
}

static int complete(once_store *store, const char *scope, const char *key, const char *token,
                    const once_response *response, const char *provider_id, once_cb cb, void *ctx)
{
    int rc = begin_fenced(store, "complete: store is NULL", scope, key, token);
    if (rc < 0 || (rc = validate_text("provider_id", provider_id, ONCE_PROVIDER_ID_MAX, 1)) < 0)
        return rc;
    if (response) {
        if (response->headers_len > ONCE_HEADERS_MAX || (!response->headers && response->headers_len))
            return once_fail(ONCE_EINVAL, "response: headers larger than %u bytes", ONCE_HEADERS_MAX);
        if (response->body_len > ONCE_BODY_MAX || (!response->body && response->body_len))
            return once_fail(ONCE_EINVAL, "response: body larger than %u bytes", ONCE_BODY_MAX);
        if (response->status < 0 || response->status > 999)
            return once_fail(ONCE_EINVAL, "response: status %d out of range", response->status);
        if (response->body_not_stored < 0 || (response->body_not_stored > 0 && response->body_len))
            return once_fail(ONCE_EINVAL, "response: body_not_stored must be 0, or > 0 with no body");
    }
    return store->vt->complete(store, scope, key, token, response, provider_id, once_now_ms(), cb, ctx);
}

int once_complete(once_store *store, const char *scope, const char *key, const char *token,
                  const once_response *response, const char *provider_id)
{
    return complete(store, scope, key, token, response, provider_id, NULL, NULL);
}

int once_complete_async(once_store *store, const char *scope, const char *key, const char *token,
                        const once_response *response, const char *provider_id, once_cb cb, void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "complete: callback is NULL");
    return complete(store, scope, key, token, response, provider_id, cb, ctx);
}

static int settle(once_store *store, const char *scope, const char *key, const char *token, once_state to,
                  const char *error, once_cb cb, void *ctx)
{
    int rc = begin_fenced(store, "store is NULL", scope, key, token);
    if (rc < 0 || (rc = validate_text("error", error, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    return store->vt->settle(store, scope, key, token, to, error, once_now_ms(), cb, ctx);
}

int once_release(once_store *store, const char *scope, const char *key, const char *token, const char *error)
{
    return settle(store, scope, key, token, ONCE_STATE_RELEASED, error, NULL, NULL);
}

int once_mark_unknown(once_store *store, const char *scope, const char *key, const char *token,
                      const char *error)
{
    return settle(store, scope, key, token, ONCE_STATE_UNKNOWN, error, NULL, NULL);
}

static int renew(once_store *store, const char *scope, const char *key, const char *token, int64_t lease_ms,
                 int64_t *lease_expires_at, once_cb cb, void *ctx)
{
    int rc = begin_fenced(store, "store is NULL", scope, key, token);
    if (rc < 0)
        return rc;
    if (lease_ms <= 0 || lease_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "renew: lease must be between 1 ms and 7 days");
    return store->vt->renew(store, scope, key, token, lease_ms, lease_expires_at, once_now_ms(), cb, ctx);
}

int once_renew(once_store *store, const char *scope, const char *key, const char *token, int64_t lease_ms,
               int64_t *lease_expires_at)
{
    return renew(store, scope, key, token, lease_ms, lease_expires_at, NULL, NULL);
}

int once_renew_async(once_store *store, const char *scope, const char *key, const char *token, int64_t lease_ms,
                     int64_t *lease_expires_at, once_cb cb, void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "renew: callback is NULL");
    return renew(store, scope, key, token, lease_ms, lease_expires_at, cb, ctx);
}

int once_release_async(once_store *store, const char *scope, const char *key, const char *token,
                       const char *error, once_cb cb, void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "release: callback is NULL");
    return settle(store, scope, key, token, ONCE_STATE_RELEASED, error, cb, ctx);
}

int once_mark_unknown_async(once_store *store, const char *scope, const char *key, const char *token,
                            const char *error, once_cb cb, void *ctx)
{
    if (!cb)
        return once_fail(ONCE_EINVAL, "mark_unknown: callback is NULL");
    return settle(store, scope, key, token, ONCE_STATE_UNKNOWN, error, cb, ctx);
}

int once_get(once_store *store, const char *scope, const char *key, once_action *out)
{
    int rc = ledger_begin_out(store && out, out, sizeof *out, "get: store and out are required");
    if (rc < 0 || (rc = check_name(scope, key)) < 0)
        return rc;
    rc = store->vt->get(store, scope, key, out);
    if (rc < 0)
        once_action_free(out);
    return rc;
}

/* Both list entry points (actions, events) page alike. */
int ledger_check_page(const char *what, size_t limit, const char *cursor, size_t *limit_out, int64_t *after_id)
{
    if (limit > LEDGER_LIST_MAX)
        return once_fail(ONCE_EINVAL, "%s: limit must be between 1 and %d", what, LEDGER_LIST_MAX);
    int rc = validate_cursor(cursor, after_id);
    if (rc < 0)
        return rc;
    *limit_out = limit ? limit : LEDGER_LIST_DEFAULT;
    return ONCE_OK;
}

int once_list(once_store *store, const once_list_req *req, once_action_list *out)
{
    int rc = ledger_begin_out(store && req && out, out, sizeof *out, "list: store, req and out are required");
    if (rc < 0)
        return rc;
    if (req->state && !once_state_name(req->state))
        return once_fail(ONCE_EINVAL, "list: unknown state %d", (int)req->state);
    if ((req->scope && (rc = once_scope_validate(req->scope)) < 0) || (rc = validate_agent(req->agent)) < 0)
        return rc;
    once_list_req r = *req;
    int64_t after;
    if ((rc = ledger_check_page("list", req->limit, req->cursor, &r.limit, &after)) < 0)
        return rc;
    rc = store->vt->list(store, &r, after, out);
    if (rc < 0)
        once_action_list_free(out);
    return rc;
}

int once_limit_use(once_store *store, const char *limit, int64_t window_ms, double *used, int64_t *retry_after_ms)
{
    once_detail_clear();
    if (!store || !used || !retry_after_ms)
        return once_fail(ONCE_EINVAL, "limit_use: store, used and retry_after_ms are required");
    *used = 0;
    *retry_after_ms = 0;
    int rc = validate_limit(limit, window_ms);
    if (rc < 0)
        return rc;
    double u = 0;
    int64_t retry = 0;
    rc = store->vt->limit_use(store, limit, window_ms, once_now_ms(), &u, &retry);
    if (rc == ONCE_OK) {
        *used = u;
        *retry_after_ms = retry;
    }
    return rc;
}

int once_resolve(once_store *store, const char *scope, const char *key, once_outcome outcome,
                 const char *provider_id, const char *note)
{
    int rc = begin_named(store, "resolve: store is NULL", scope, key);
    if (rc < 0 || (rc = check_outcome("resolve", outcome, provider_id, "note", note)) < 0)
        return rc;
    return store->vt->resolve(store, scope, key, outcome, provider_id, note, once_now_ms());
}

/* The three sweeps check and count alike. */
int ledger_sweep(once_store *store, ledger_sweep_fn fn, int64_t now, size_t *count, const char *what)
{
    once_detail_clear();
    if (count)
        *count = 0;
    if (!store || now < 0)
        return once_fail(ONCE_EINVAL, "%s: store is NULL or now is negative", what);
    size_t n = 0;
    int rc = fn(store, now, &n);
    if (rc == ONCE_OK && count)
        *count = n;
    return rc;
}

int ledger_sweep_all(once_store *store, ledger_sweep_fn fn, int64_t now, size_t *count, const char *what)
{
    size_t total = 0, n = 0;
    int rc;
    do {
        rc = ledger_sweep(store, fn, now, &n, what);
        total += n;
    } while (rc == ONCE_OK && n >= STORE_SWEEP_ROWS);
    if (count)
        *count = total;
    return rc;
}

/* The sweeps below are ledger_sweep on the store's function. */
int once_expire_leases(once_store *store, int64_t now, size_t *count)
{
    return ledger_sweep(store, store ? store->vt->expire_leases : NULL, now, count, "expire_leases");
}

int once_hold(once_store *store, const char *scope, const char *key, const char *reason)
{
    int rc = begin_named(store, "hold: store is NULL", scope, key);
    if (rc < 0 || (rc = validate_text("reason", reason, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    return store->vt->hold(store, scope, key, reason, once_now_ms());
}

/* Both hold_unknown entry points end here, their arguments checked: the
 * unknown actions of scope (NULL: of every scope not in except, joined by
 * ','), with *count (may be NULL) set when the store succeeds. */
static int hold_unknown(once_store *store, const char *scope, const char *except, const char *reason,
                        size_t *count)
{
    size_t n = 0;
    int rc = store->vt->hold_unknown(store, scope, except, reason, once_now_ms(), &n);
    if (rc == ONCE_OK && count)
        *count = n;
    return rc;
}

int once_hold_unknown(once_store *store, const char *scope, const char *reason, size_t *count)
{
    once_detail_clear();
    if (count)
        *count = 0;
    if (!store)
        return once_fail(ONCE_EINVAL, "hold_unknown: store is NULL");
    int rc;
    if (scope && (rc = once_scope_validate(scope)) < 0)
        return rc;
    if ((rc = validate_text("reason", reason, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    return hold_unknown(store, scope, NULL, reason, count);
}

int once_hold_unknown_except(once_store *store, const char *const *except, size_t nexcept, const char *reason,
                             size_t *count)
{
    once_detail_clear();
    if (count)
        *count = 0;
    if (!store || (nexcept && !except))
        return once_fail(ONCE_EINVAL, "hold_unknown_except: store and except are required");
    int rc;
    if ((rc = validate_text("reason", reason, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    /* Scopes never hold a ',', so a joined list is unambiguous. */
    size_t len = 1;
    for (size_t i = 0; i < nexcept; i++) {
        if ((rc = once_scope_validate(except[i])) < 0)
            return rc;
        len += strlen(except[i]) + 1;
    }
    char *joined = calloc(1, len);
    if (!joined)
        return once_fail(ONCE_ENOMEM, "hold_unknown_except: out of memory");
    for (size_t i = 0; i < nexcept; i++) {
        if (i)
            strcat(joined, ",");
        strcat(joined, except[i]);
    }
    rc = hold_unknown(store, NULL, nexcept ? joined : NULL, reason, count);
    free(joined);
    return rc;
}

int once_reconcile_claim(once_store *store, const char *scope, size_t max, int64_t lease_ms, int64_t settle_ms,
                         once_action_list *out)
{
    int rc = ledger_begin_out(store && out, out, sizeof *out, "reconcile_claim: store and out are required");
    if (rc < 0 || (rc = once_scope_validate(scope)) < 0)
        return rc;
    if (max < 1 || max > LEDGER_LIST_MAX || lease_ms <= 0 || lease_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "reconcile_claim: max 1..%d and a lease of 1 ms to 7 days", LEDGER_LIST_MAX);
    if (settle_ms < 0 || settle_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "reconcile_claim: settle must be between 0 and 7 days");
    rc = store->vt->reconcile_claim(store, scope, max, lease_ms, settle_ms, once_now_ms(), out);
    if (rc < 0)
        once_action_list_free(out);
    return rc;
}

/* "2026-11-30T07:39:48.123Z step": a trail line, stamped here so that every
 * store records the same text. The trail is split at newlines, so a step's
 * own line breaks become spaces: a note cannot forge a line. */
static int trail_line(const char *step, int64_t now, char *out, size_t len)
{
    if (!step)
        return 0;
    char t[TIMEFMT_LEN];
    if (timefmt_rfc3339(now, t, sizeof t) != 0)
        return once_fail(ONCE_EINVAL, "trail: bad clock");
    snprintf(out, len, "%s %s", t, step);
    for (char *p = out; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    return 1;
}

int once_reconcile(once_store *store, const char *scope, const char *key, once_outcome outcome,
                   const once_response *response, const char *provider_id, const char *step)
{
    int rc = begin_named(store, "reconcile: store is NULL", scope, key);
    if (rc < 0 || (rc = check_outcome("reconcile", outcome, provider_id, "step", step)) < 0)
        return rc;
    if (response && (response->body_len > ONCE_BODY_MAX || response->headers_len > ONCE_HEADERS_MAX ||
                     (!response->body && response->body_len) || (!response->headers && response->headers_len) ||
                     response->body_not_stored != 0))
        return once_fail(ONCE_EINVAL, "reconcile: response out of range");
    int64_t now = once_now_ms();
    char line[ONCE_TEXT_MAX + 64];
    if ((rc = trail_line(step, now, line, sizeof line)) < 0)
        return rc;
    return store->vt->reconcile(store, scope, key, outcome, response, provider_id, rc ? line : NULL, now);
}

int once_reconcile_failed(once_store *store, const char *scope, const char *key, int64_t delay_ms, int hold,
                          const char *step)
{
    int rc = begin_named(store, "reconcile_failed: store is NULL", scope, key);
    if (rc < 0)
        return rc;
    if (delay_ms < 0 || delay_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "reconcile_failed: delay must be between 0 and 7 days");
    if ((rc = validate_text("step", step, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    int64_t now = once_now_ms();
    char line[ONCE_TEXT_MAX + 64];
    if ((rc = trail_line(step, now, line, sizeof line)) < 0)
        return rc;
    return store->vt->reconcile_failed(store, scope, key, delay_ms, hold, rc ? line : NULL, now);
}

int once_sweep(once_store *store, int64_t now, size_t *count)
{
    return ledger_sweep_all(store, store ? store->vt->sweep : NULL, now, count, "sweep");
}

/* ---- approvals ----------------------------------------------------------- */

#define WHO_MAX 64 /* bytes of the name of who decides */

/* once_approve and once_deny: the decision's arguments checked (who and note
 * bounded: they are stored as decided_by and decision_note), its trail line
 * ("approved by WHO: NOTE") stamped, and the store asked. */
static int decide(once_store *store, const char *scope, const char *key, const char *who, const char *note,
                  int approve)
{
    const char *verb = approve ? "approve" : "deny";
    int rc = begin_named(store, approve ? "approve: store is NULL" : "deny: store is NULL", scope, key);
    if (rc < 0)
        return rc;
    if (!who || !who[0])
        return once_fail(ONCE_EINVAL, "%s: who is required", verb);
    if ((rc = validate_text("who", who, WHO_MAX, 1)) < 0 || (rc = validate_text("note", note, ONCE_TEXT_MAX, 0)) < 0)
        return rc;
    const char *done = approve ? "approved" : "denied";
    char step[ONCE_TEXT_MAX + WHO_MAX + 32];
    if (note)
        snprintf(step, sizeof step, "%s by %s: %s", done, who, note);
    else
        snprintf(step, sizeof step, "%s by %s", done, who);
    int64_t now = once_now_ms();
    char line[sizeof step + TIMEFMT_LEN + 2];
    if ((rc = trail_line(step, now, line, sizeof line)) < 0)
        return rc;
    /* A denial's note is what a retry is told; without one, who said no.
     * who and note themselves are kept as the decision's own columns, so
     * that nobody has to parse them back out of the trail. */
    char by[WHO_MAX + 16];
    snprintf(by, sizeof by, "denied by %s", who);
    return store->vt->decide(store, scope, key, approve, approve ? NULL : note ? note : by, who, note, line, now);
}

int once_approve(once_store *store, const char *scope, const char *key, const char *who, const char *note)
{
    return decide(store, scope, key, who, note, 1);
}

int once_deny(once_store *store, const char *scope, const char *key, const char *who, const char *note)
{
    return decide(store, scope, key, who, note, 0);
}

int once_expire_approvals(once_store *store, const char *scope, int64_t now, size_t *count)
{
    once_detail_clear();
    if (count)
        *count = 0;
    if (!store || now < 0)
        return once_fail(ONCE_EINVAL, "expire_approvals: store is NULL or now is negative");
    int rc;
    if (scope && (rc = once_scope_validate(scope)) < 0)
        return rc;
    char line[TIMEFMT_LEN + 64];
    if ((rc = trail_line("expired: nobody decided within approve_ttl", now, line, sizeof line)) < 0)
        return rc;
    size_t n = 0;
    rc = store->vt->expire_approvals(store, scope, now, line, &n);
    if (rc == ONCE_OK && count)
        *count = n;
    return rc;
}

int once_approval_claim(once_store *store, const char *scope, int64_t lease_ms, once_reservation *out)
{
    int rc = ledger_begin_out(store && out, out, sizeof *out, "approval_claim: store and out are required");
    if (rc < 0 || (rc = once_scope_validate(scope)) < 0)
        return rc;
    if (lease_ms <= 0 || lease_ms > ONCE_LEASE_MAX_MS)
        return once_fail(ONCE_EINVAL, "approval_claim: lease must be between 1 ms and 7 days");
    rc = store->vt->approval_claim(store, scope, lease_ms, once_now_ms(), out);
    if (rc <= 0)
        once_reservation_free(out); /* none, or failed: *out stays zeroed */
    return rc;
}

int once_approval_oldest(once_store *store, int64_t *created_at)
{
    once_detail_clear();
    if (!store || !created_at)
        return once_fail(ONCE_EINVAL, "approval_oldest: store and created_at are required");
    *created_at = 0;
    int64_t t = 0;
    int rc = store->vt->approval_oldest(store, &t);
    if (rc == ONCE_OK)
        *created_at = t;
    return rc;
}
