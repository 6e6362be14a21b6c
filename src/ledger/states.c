/*
 * states.c — the states of an action and of a webhook event, by name, and
 * the action state machine of docs/architecture.md as a table: every store asserts
 * its transitions against it (common/check.h), so a store that moved a row
 * where the machine has no arrow fails its tests instead of going on.
 */
#include <string.h>

#include "ledger/store.h"

static const char *const state_names[] = {
    [ONCE_STATE_PENDING] = "pending",   [ONCE_STATE_COMPLETED] = "completed",
    [ONCE_STATE_RELEASED] = "released", [ONCE_STATE_UNKNOWN] = "unknown",
    [ONCE_STATE_HELD] = "held",         [ONCE_STATE_AWAITING_APPROVAL] = "awaiting_approval",
    [ONCE_STATE_DENIED] = "denied",
};

#define STATE_LAST ONCE_STATE_DENIED

const char *once_state_name(once_state s)
{
    if ((int)s < ONCE_STATE_PENDING || (int)s > STATE_LAST)
        return NULL;
    return state_names[s];
}

int once_state_parse(const char *name, once_state *out)
{
    if (!name || !out)
        return once_fail(ONCE_EINVAL, "state: missing");
    for (int s = ONCE_STATE_PENDING; s <= STATE_LAST; s++) {
        if (strcmp(name, state_names[s]) == 0) {
            *out = (once_state)s;
            return ONCE_OK;
        }
    }
    return once_fail(ONCE_EINVAL, "state: '%.32s' is not pending, completed, released, unknown, held, "
                                  "awaiting_approval or denied",
                     name);
}

/* from -> to: the arrows of the machine. A row is (re)reserved from
 * released, from a completed row past its retention, and from unknown or
 * held when the upstream dedupes natively (forward_key_as). Wherever a
 * reservation starts an attempt (-> pending), one that needs a human's
 * approval starts to wait instead (-> awaiting_approval); an approved row
 * is claimed to be sent (-> pending), a denied or expired one is denied,
 * and a denied row past its retention is reserved again like a released
 * one. */
static const unsigned char allowed[STATE_LAST + 1][STATE_LAST + 1] = {
    [ONCE_STATE_PENDING] = {[ONCE_STATE_COMPLETED] = 1, [ONCE_STATE_RELEASED] = 1, [ONCE_STATE_UNKNOWN] = 1,
                            [ONCE_STATE_PENDING] = 1 /* a lease ran out, natively deduped: attempt + 1 */,
                            [ONCE_STATE_AWAITING_APPROVAL] = 1},
    [ONCE_STATE_UNKNOWN] = {[ONCE_STATE_HELD] = 1, [ONCE_STATE_COMPLETED] = 1, [ONCE_STATE_RELEASED] = 1,
                            [ONCE_STATE_PENDING] = 1, [ONCE_STATE_AWAITING_APPROVAL] = 1},
    [ONCE_STATE_HELD] = {[ONCE_STATE_COMPLETED] = 1, [ONCE_STATE_RELEASED] = 1, [ONCE_STATE_PENDING] = 1,
                         [ONCE_STATE_AWAITING_APPROVAL] = 1},
    [ONCE_STATE_RELEASED] = {[ONCE_STATE_PENDING] = 1, [ONCE_STATE_AWAITING_APPROVAL] = 1},
    [ONCE_STATE_COMPLETED] = {[ONCE_STATE_PENDING] = 1, [ONCE_STATE_AWAITING_APPROVAL] = 1},
    [ONCE_STATE_AWAITING_APPROVAL] = {[ONCE_STATE_PENDING] = 1 /* claimed, approved */,
                                      [ONCE_STATE_DENIED] = 1 /* denied, or nobody decided in time */},
    [ONCE_STATE_DENIED] = {[ONCE_STATE_PENDING] = 1, [ONCE_STATE_AWAITING_APPROVAL] = 1},
};

int ledger_transition_allowed(once_state from, once_state to)
{
    if ((int)from < ONCE_STATE_PENDING || (int)from > STATE_LAST || (int)to < ONCE_STATE_PENDING ||
        (int)to > STATE_LAST)
        return 0;
    return allowed[from][to];
}

/* Both the ledger's and the stores' reading of an outcome, so that a resolve
 * and a reconcile settle the same way everywhere. */
once_state ledger_outcome_state(once_outcome outcome)
{
    return outcome == ONCE_OUTCOME_COMPLETED ? ONCE_STATE_COMPLETED : ONCE_STATE_RELEASED;
}

/* The rule once_reserve applies to a row it finds (the PostgreSQL store's
 * once_reserve function says it again in SQL): one home for every answer
 * from an existing row, SQLite's writer's and PostgreSQL's read's. */
int ledger_decide_reservation(once_state state, int64_t lease_expires_at, int64_t expires_at, int64_t now,
                              int retry_unknown, once_reserve_status *status)
{
    switch (state) {
    case ONCE_STATE_COMPLETED:
        if (expires_at <= now)
            return 0; /* past its retention: a new attempt */
        *status = ONCE_COMPLETED;
        return 1;
    case ONCE_STATE_PENDING:
        if (lease_expires_at <= now)
            return 0; /* the lease ran out: the writer decides */
        *status = ONCE_IN_FLIGHT;
        return 1;
    case ONCE_STATE_AWAITING_APPROVAL:
        /* Stored and waiting for a human (approved or not): nothing is sent
         * for a retry, whatever it asks. */
        *status = ONCE_AWAITING_APPROVAL;
        return 1;
    case ONCE_STATE_DENIED:
        if (expires_at <= now)
            return 0; /* past its retention: a new attempt, as after a release */
        *status = ONCE_DENIED;
        return 1;
    case ONCE_STATE_UNKNOWN:
    case ONCE_STATE_HELD:
        /* A provider that dedupes on the key makes a resend harmless. */
        if (retry_unknown)
            return 0;
        *status = state == ONCE_STATE_UNKNOWN ? ONCE_UNKNOWN : ONCE_HELD;
        return 1;
    default: return 0;
    }
}

static const char *const event_state_names[] = {[ONCE_EVENT_PENDING] = "pending", [ONCE_EVENT_DELIVERED] = "delivered",
                                          [ONCE_EVENT_DEAD] = "dead"};

const char *once_event_state_name(once_event_state s)
{
    if ((int)s < ONCE_EVENT_PENDING || (int)s > ONCE_EVENT_DEAD)
        return NULL;
    return event_state_names[s];
}

int once_event_state_parse(const char *name, once_event_state *out)
{
    for (int s = ONCE_EVENT_PENDING; name && out && s <= ONCE_EVENT_DEAD; s++) {
        if (strcmp(name, event_state_names[s]) == 0) {
            *out = (once_event_state)s;
            return ONCE_OK;
        }
    }
    return once_fail(ONCE_EINVAL, "state: '%.32s' is not pending, delivered or dead", name ? name : "");
}

