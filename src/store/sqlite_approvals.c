/*
 * sqlite_approvals.c — the approval operations of the SQLite store: a
 * human's decision on an action awaiting approval, the denial of those
 * nobody decided on in time, the claim of an approved one by its sender and
 * the age of the oldest waiting one. A file of their own so that
 * sqlite_ops.c, the rest of the state machine, stays readable; they run on
 * the connections and in the transactions sqlite_ops.c describes.
 */
#include "common/check.h"
#include "store/sqlite_ops.h"

/* The trail gets a line: the first, or one more after a newline. */
#define TRAIL_APPEND(p) "trail = CASE WHEN trail IS NULL THEN " p " ELSE trail || char(10) || " p " END"

static const char *const ap_sql[AP_COUNT] = {
    [AP_APPROVE] = "UPDATE actions SET approved_at = ?2, updated_at = ?2, decided_by = ?4, decision_note = ?5, "
                   TRAIL_APPEND("?3") " WHERE id = ?1",
    [AP_DENY] = "UPDATE actions SET state = 'denied', note = ?3, updated_at = ?2, expires_at = ?2 + retention_ms, "
                "decided_by = ?5, decision_note = ?6, " TRAIL_APPEND("?4") " WHERE id = ?1",
    /* Approved rows wait for their sender: never expired. */
    [AP_EXPIRE] = "UPDATE actions SET state = 'denied', note = '" LEDGER_APPROVAL_EXPIRED "', updated_at = ?1, "
                  "expires_at = ?1 + retention_ms, " TRAIL_APPEND("?2") " WHERE state = 'awaiting_approval' "
                  "AND approved_at = 0 AND lease_expires_at <= ?1 AND (?3 IS NULL OR scope = ?3)",
    /* The first approved is the first sent. */
    [AP_DUE] = "SELECT id FROM actions WHERE state = 'awaiting_approval' AND scope = ?1 AND approved_at > 0 "
               "ORDER BY approved_at, id LIMIT 1",
    [AP_CLAIM] = "UPDATE actions SET state = 'pending', token = ?2, attempt = attempt + 1, "
                 "lease_expires_at = ?3 + ?4, updated_at = ?3 WHERE id = ?1",
    [AP_OLDEST] = "SELECT coalesce(min(created_at), 0) FROM actions WHERE state = 'awaiting_approval' "
                  "AND approved_at = 0",
};

/* The approval statement i, ready for binding (NULL: op failed). */
static sqlite3_stmt *ap_stmt(sq_conn *c, store_op *op, enum sq_ap_stmt i)
{
    return sq_prepare(c, op, &c->ap[i], ap_sql[i]);
}

/* A human's decision: an undecided action awaiting approval is approved
 * (it stays waiting for its sender) or denied, and who decided and why are
 * kept in the row (decided_by, decision_note). Approving an approved action
 * again changes nothing, whether it still waits for its sender, is being
 * sent or is done: operators who click twice, or two at once, get the same
 * answer. An approved one can no longer be denied. */
static void op_decide(sq_conn *c, store_op *op)
{
    sq_row_head h;
    if (sq_row_need(c, op, &h) < 0)
        return;
    const char *verb = op->approve ? "approved" : "denied";
    if (op->approve && h.approved_at > 0) {
        op->rc = ONCE_OK; /* approved before: it is sent once */
        return;
    }
    if (h.state != ONCE_STATE_AWAITING_APPROVAL) {
        store_op_fail(op, ONCE_ESTATE, "%s/%s is %s: only an action awaiting approval can be %s", op->scope, op->key,
                      once_state_name(h.state), verb);
        return;
    }
    if (h.approved_at > 0) {
        if (op->approve)
            op->rc = ONCE_OK; /* approved before: it is sent once */
        else
            store_op_fail(op, ONCE_ESTATE, "%s/%s was approved and is being sent: it can no longer be denied",
                          op->scope, op->key);
        return;
    }
    /* Both statements take the row and the time first; a denial then its
     * note (the one retries are refused with). */
    sqlite3_stmt *st;
    if (op->approve) {
        st = ap_stmt(c, op, AP_APPROVE);
    } else {
        ONCE_ASSERT(ledger_transition_allowed(h.state, ONCE_STATE_DENIED));
        st = sq_bind(ap_stmt(c, op, AP_DENY), 3, SQ_VALS(SQ_TEXT(op->text)));
    }
    sq_bind(st, 1, SQ_VALS(SQ_INT(h.id), SQ_INT(op->now)));
    sq_bind(st, op->approve ? 3 : 4, SQ_VALS(SQ_TEXT(op->step), SQ_TEXT(op->who), SQ_TEXT(op->decision_note)));
    sq_write_finish(c, op, st, verb);
}

/* Undecided actions past their deadline (of op->scope, or of all) are
 * denied, each with the step. */
static void op_expire(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st = sq_bind(ap_stmt(c, op, AP_EXPIRE), 2, SQ_VALS(SQ_TEXT(op->step), SQ_TEXT(op->scope)));
    sq_op_bulk(c, op, st, "expire approvals");
}

/* Takes the first approved action of the scope to send: pending under the
 * claim's token, with a lease. The single writer's transaction fences it:
 * no other claim sees the row still waiting. op->rc is 1 with op->res
 * filled, or 0 when none waits. */
static void op_claim(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st = ap_stmt(c, op, AP_DUE);
    int found = sq_find(c, op, st, "approval claim", SQ_VALS(SQ_TEXT(op->scope)));
    int64_t id = found == 1 ? sqlite3_column_int64(st, 0) : 0;
    sq_done(st);
    if (found <= 0) {
        if (found == 0)
            op->rc = 0;
        return;
    }
    ONCE_ASSERT(ledger_transition_allowed(ONCE_STATE_AWAITING_APPROVAL, ONCE_STATE_PENDING));
    st = sq_bind(ap_stmt(c, op, AP_CLAIM), 1,
                 SQ_VALS(SQ_INT(id), SQ_TEXT(op->token), SQ_INT(op->now), SQ_INT(op->lease_ms)));
    if (sq_write_step(c, op, st, "approval claim") < 0)
        return;
    if (sq_action_by_id(c, op, id, &op->res->action) == 0)
        store_op_claimed(op);
}

/* When the oldest undecided action was created (0: none waits). */
static void op_oldest(sq_conn *c, store_op *op)
{
    sqlite3_stmt *st = ap_stmt(c, op, AP_OLDEST);
    int found = sq_step_row(c, op, st, "approval oldest");
    if (found == 1) {
        *op->oldest = sqlite3_column_int64(st, 0);
        op->rc = ONCE_OK;
    }
    sq_done(st);
}

void sq_approval_run(sq_conn *c, store_op *op)
{
    switch (op->kind) {
    case OP_DECIDE: op_decide(c, op); break;
    case OP_EXPIRE_APPROVALS: op_expire(c, op); break;
    case OP_APPROVAL_CLAIM: op_claim(c, op); break;
    case OP_APPROVAL_OLDEST: op_oldest(c, op); break;
    default: store_op_fail(op, ONCE_EINVAL, "operation %d is not an approval", (int)op->kind); break;
    }
}
