/*
 * pg_schema.c — the PostgreSQL schema of once and its forward migrations.
 *
 * The state machine of an action is written here a second time, as
 * PL/pgSQL functions, so that every ledger operation is one statement: a
 * batch of them then travels in one pipeline, inside one transaction, in one
 * round trip, and one commit serves every caller in it (group commit). The
 * functions never raise for an expected outcome (a duplicate, a stale token):
 * they return it, so one refused operation does not abort its batch.
 *
 * Migrations run under a transaction-level advisory lock, so N gateways
 * starting at once migrate once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/store.h"
#include "store/pg_schema.h"
#include "store/schema_steps.h"

#define SCHEMA_LOCK_KEY 0x4f4e4345 /* "ONCE" */

/* Pieces of the functions of the action state machine below, said once.
 * They are part of shipped migrations: never edit them (a new step writes
 * its own text).
 *
 * PG_LOCK_ACTION starts a function on one action: its row locked, or the
 * answer 'notfound'. */
#define PG_LOCK_ACTION                                                                                  \
    " DECLARE r actions%ROWTYPE;"                                                                       \
    " BEGIN"                                                                                            \
    "  SELECT * INTO r FROM actions WHERE scope = p_scope AND key = p_key FOR UPDATE;"                  \
    "  IF NOT FOUND THEN RETURN 'notfound'; END IF;"
/* PG_FENCE: only the token of the action's current attempt may go on. */
#define PG_FENCE "  IF r.token <> p_token THEN RETURN 'stale:' || r.attempt; END IF;"
/* PG_ANSWER_OK ends a function whose update went through. */
#define PG_ANSWER_OK                                                                                    \
    "  RETURN 'ok';"                                                                                    \
    " END $$;"

/* Migration N takes a database from version N-1 to N. Never edit a shipped
 * step; append a new one. */
static const char *const migrations[] = {
    /* 1: actions, events, and the functions of the state machine. */
    "CREATE TABLE actions ("
    "  id BIGSERIAL PRIMARY KEY,"
    "  scope TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','completed','released','unknown','held')),"
    "  attempt BIGINT NOT NULL,"
    "  token TEXT NOT NULL,"
    "  created_at BIGINT NOT NULL,"
    "  updated_at BIGINT NOT NULL,"
    "  lease_expires_at BIGINT NOT NULL,"
    "  expires_at BIGINT NOT NULL DEFAULT 0,"
    "  retention_ms BIGINT NOT NULL,"
    "  fingerprint TEXT,"
    "  request BYTEA,"
    "  has_response BOOLEAN NOT NULL DEFAULT false,"
    "  resp_status INTEGER,"
    "  resp_headers TEXT,"
    "  resp_body BYTEA,"
    "  provider_id TEXT,"
    "  error TEXT,"
    "  note TEXT,"
    "  UNIQUE (scope, key)"
    ");"
    "CREATE INDEX actions_pending_lease ON actions (lease_expires_at) WHERE state = 'pending';"
    "CREATE INDEX actions_unknown ON actions (scope) WHERE state = 'unknown';"
    "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released');"
    "CREATE INDEX actions_state ON actions (state, id);"
    "CREATE TABLE events ("
    "  id BIGSERIAL PRIMARY KEY,"
    "  source TEXT NOT NULL,"
    "  event_id TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending','delivered','dead')),"
    "  attempt BIGINT NOT NULL DEFAULT 0,"
    "  received_at BIGINT NOT NULL,"
    "  updated_at BIGINT NOT NULL,"
    "  next_at BIGINT NOT NULL,"
    "  claim_until BIGINT NOT NULL DEFAULT 0,"
    "  receipt TEXT,"
    "  delivered_at BIGINT NOT NULL DEFAULT 0,"
    "  expires_at BIGINT NOT NULL DEFAULT 0,"
    "  retention_ms BIGINT NOT NULL,"
    "  content_type TEXT,"
    "  headers TEXT,"
    "  body BYTEA,"
    "  error TEXT,"
    "  UNIQUE (source, event_id)"
    ");"
    "CREATE INDEX events_due ON events (source, next_at) WHERE state = 'pending';"
    "CREATE INDEX events_expiry ON events (expires_at) WHERE state IN ('delivered','dead');"

    /* reserve: the answer ('reserved', 'completed', 'in_flight', 'unknown',
     * 'held') followed by the row as it now is (the same columns, in the
     * same order, as the table). */
    "CREATE TYPE once_reserved AS (answer text, id bigint, scope text, key text, state text, attempt bigint,"
    "  token text, created_at bigint, updated_at bigint, lease_expires_at bigint, expires_at bigint,"
    "  retention_ms bigint, fingerprint text, request bytea, has_response boolean, resp_status integer,"
    "  resp_headers text, resp_body bytea, provider_id text, error text, note text);"
    "CREATE FUNCTION once_reserve(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint,"
    "  p_retention bigint, p_fp text, p_request bytea, p_retry_unknown boolean)"
    " RETURNS SETOF once_reserved LANGUAGE plpgsql AS $$"
    " DECLARE r actions%ROWTYPE; ans text;"
    " BEGIN"
    "  LOOP"
    "   INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
    "     expires_at, retention_ms, fingerprint, request)"
    "   VALUES (p_scope, p_key, 'pending', 1, p_token, p_now, p_now, p_now + p_lease, 0, p_retention, p_fp,"
    "     p_request)"
    "   ON CONFLICT (scope, key) DO NOTHING RETURNING * INTO r;"
    "   IF FOUND THEN RETURN QUERY SELECT 'reserved'::text, a.* FROM actions a WHERE a.id = r.id; RETURN; END IF;"
    /* The unique constraint decided; lock the winner's row (a fresh
     * snapshot per statement sees it once its transaction committed). */
    "   SELECT * INTO r FROM actions WHERE scope = p_scope AND key = p_key FOR UPDATE;"
    "   EXIT WHEN FOUND;"
    "  END LOOP;"
    "  IF r.state = 'completed' AND r.expires_at > p_now THEN ans := 'completed';"
    "  ELSIF r.state = 'pending' AND r.lease_expires_at > p_now THEN ans := 'in_flight';"
    "  ELSIF r.state IN ('unknown', 'held') AND NOT p_retry_unknown THEN ans := r.state;"
    "  ELSIF r.state = 'pending' AND NOT p_retry_unknown THEN"
    /* The lease ran out unnoticed: the attempt may have acted. */
    "   UPDATE actions SET state = 'unknown', error = 'lease expired', updated_at = p_now WHERE id = r.id;"
    "   ans := 'unknown';"
    "  ELSE"
    "   UPDATE actions SET state = 'pending', attempt = attempt + 1, token = p_token, updated_at = p_now,"
    "    lease_expires_at = p_now + p_lease, expires_at = 0, retention_ms = p_retention, fingerprint = p_fp,"
    "    request = p_request, has_response = false, resp_status = NULL, resp_headers = NULL,"
    "    resp_body = NULL, provider_id = NULL, error = NULL, note = NULL WHERE id = r.id;"
    "   ans := 'reserved';"
    "  END IF;"
    "  RETURN QUERY SELECT ans, a.* FROM actions a WHERE a.id = r.id;"
    " END $$;"

    /* complete: 'ok', 'notfound', 'stale:<attempt>', 'state:<state>'. */
    "CREATE FUNCTION once_complete(p_scope text, p_key text, p_token text, p_now bigint, p_has boolean,"
    "  p_status integer, p_headers text, p_body bytea, p_provider text)"
    " RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    PG_FENCE
    "  IF r.state = 'completed' THEN RETURN 'ok'; END IF;"
    "  IF r.state = 'released' THEN RETURN 'state:released'; END IF;"
    "  UPDATE actions SET state = 'completed', has_response = p_has, resp_status = p_status,"
    "   resp_headers = p_headers, resp_body = p_body, provider_id = p_provider,"
    "   note = COALESCE(note, CASE r.state WHEN 'unknown' THEN 'late completion (the action was unknown)'"
    "     WHEN 'held' THEN 'late completion (the action was held)' END),"
    "   updated_at = p_now, expires_at = p_now + retention_ms WHERE id = r.id;"
    PG_ANSWER_OK

    /* release / mark unknown. */
    "CREATE FUNCTION once_settle(p_scope text, p_key text, p_token text, p_to text, p_error text, p_now bigint)"
    " RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    PG_FENCE
    "  IF r.state = p_to THEN RETURN 'ok'; END IF;"
    "  IF r.state <> 'pending' THEN RETURN 'state:' || r.state; END IF;"
    "  UPDATE actions SET state = p_to, error = COALESCE(p_error, error), updated_at = p_now,"
    "   expires_at = CASE WHEN p_to = 'released' THEN p_now + retention_ms ELSE 0 END WHERE id = r.id;"
    PG_ANSWER_OK

    "CREATE FUNCTION once_resolve(p_scope text, p_key text, p_outcome text, p_provider text, p_note text,"
    "  p_now bigint) RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    "  IF r.state NOT IN ('unknown', 'held') THEN RETURN 'state:' || r.state; END IF;"
    "  UPDATE actions SET state = p_outcome, provider_id = p_provider, note = p_note, has_response = false,"
    "   resp_status = NULL, resp_headers = NULL, resp_body = NULL, updated_at = p_now,"
    "   expires_at = p_now + retention_ms WHERE id = r.id;"
    PG_ANSWER_OK

    "CREATE FUNCTION once_hold(p_scope text, p_key text, p_reason text, p_now bigint)"
    " RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    "  IF r.state <> 'unknown' THEN RETURN 'state:' || r.state; END IF;"
    "  UPDATE actions SET state = 'held', updated_at = p_now, error = CASE WHEN p_reason IS NULL THEN error"
    "   WHEN error IS NULL THEN p_reason ELSE p_reason || ' (after: ' || error || ')' END WHERE id = r.id;"
    PG_ANSWER_OK

    /* ack / retry of a claim: 'ok', 'notfound', 'stale', 'state:<state>'. */
    "CREATE FUNCTION once_event_settle(p_source text, p_id bigint, p_receipt text, p_ack boolean,"
    "  p_delay bigint, p_dead boolean, p_error text, p_now bigint)"
    " RETURNS text LANGUAGE plpgsql AS $$"
    " DECLARE e events%ROWTYPE;"
    " BEGIN"
    "  SELECT * INTO e FROM events WHERE id = p_id FOR UPDATE;"
    "  IF NOT FOUND OR e.source <> p_source THEN RETURN 'notfound'; END IF;"
    "  IF e.receipt IS DISTINCT FROM p_receipt THEN RETURN 'stale'; END IF;"
    "  IF e.state <> 'pending' THEN"
    "   IF p_ack AND e.state = 'delivered' THEN RETURN 'ok'; END IF;"
    "   RETURN 'state:' || e.state; END IF;"
    "  UPDATE events SET"
    "   state = CASE WHEN p_ack THEN 'delivered' WHEN p_dead THEN 'dead' ELSE 'pending' END,"
    "   claim_until = 0, updated_at = p_now,"
    "   next_at = CASE WHEN p_ack OR p_dead THEN p_now ELSE p_now + p_delay END,"
    "   receipt = CASE WHEN p_ack OR p_dead THEN receipt ELSE NULL END,"
    "   delivered_at = CASE WHEN p_ack THEN p_now ELSE delivered_at END,"
    "   expires_at = CASE WHEN p_ack OR p_dead THEN p_now + retention_ms ELSE 0 END,"
    "   error = COALESCE(p_error, error) WHERE id = p_id;"
    PG_ANSWER_OK,

    /* 2: reconciliation — lookups tried, when the next is due, the trail. */
    "ALTER TABLE actions ADD COLUMN lookups BIGINT NOT NULL DEFAULT 0,"
    "  ADD COLUMN lookup_next_at BIGINT NOT NULL DEFAULT 0, ADD COLUMN trail TEXT;"
    "ALTER TYPE once_reserved ADD ATTRIBUTE lookups bigint, ADD ATTRIBUTE lookup_next_at bigint,"
    "  ADD ATTRIBUTE trail text;"
    "DROP INDEX actions_unknown;"
    "CREATE INDEX actions_unknown ON actions (scope, lookup_next_at) WHERE state = 'unknown';"
    /* A new attempt starts with no lookups behind it. */
    "CREATE OR REPLACE FUNCTION once_reserve_rearm_reset() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN"
    "  IF NEW.attempt > OLD.attempt THEN NEW.lookups := 0; NEW.lookup_next_at := 0; END IF;"
    "  RETURN NEW;"
    " END $$;"
    "CREATE TRIGGER actions_rearm BEFORE UPDATE OF attempt ON actions"
    "  FOR EACH ROW EXECUTE FUNCTION once_reserve_rearm_reset();"
    "CREATE FUNCTION once_reconcile(p_scope text, p_key text, p_outcome text, p_has boolean, p_status integer,"
    "  p_headers text, p_body bytea, p_provider text, p_step text, p_now bigint)"
    " RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    "  IF r.state <> 'unknown' THEN RETURN 'state:' || r.state; END IF;"
    "  UPDATE actions SET state = p_outcome, has_response = p_has, resp_status = p_status,"
    "   resp_headers = p_headers, resp_body = p_body, provider_id = p_provider, updated_at = p_now,"
    "   expires_at = p_now + retention_ms, note = COALESCE(note, 'reconciled by a provider lookup'),"
    "   lookups = lookups + 1,"
    "   trail = CASE WHEN p_step IS NULL THEN trail WHEN trail IS NULL THEN p_step"
    "     ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
    PG_ANSWER_OK
    "CREATE FUNCTION once_reconcile_failed(p_scope text, p_key text, p_delay bigint, p_hold boolean,"
    "  p_step text, p_now bigint) RETURNS text LANGUAGE plpgsql AS $$"
    PG_LOCK_ACTION
    "  IF r.state <> 'unknown' THEN RETURN 'state:' || r.state; END IF;"
    "  UPDATE actions SET lookups = lookups + 1, lookup_next_at = p_now + p_delay, updated_at = p_now,"
    "   state = CASE WHEN p_hold THEN 'held' ELSE state END,"
    "   error = CASE WHEN p_hold AND p_step IS NOT NULL THEN p_step ELSE error END,"
    "   trail = CASE WHEN p_step IS NULL THEN trail WHEN trail IS NULL THEN p_step"
    "     ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
    PG_ANSWER_OK,

    /* 3: a second dedupe key for events whose id the signature does not
     * cover (GitHub's delivery id): the body's digest, unique per source. */
    ("ALTER TABLE events ADD COLUMN digest TEXT;"
     "CREATE UNIQUE INDEX events_digest ON events (source, digest) WHERE digest IS NOT NULL;"),

    /* 4: lease renewal by the attempt that holds the key. */
    ("CREATE FUNCTION once_renew(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint)"
     " RETURNS text LANGUAGE plpgsql AS $$"
     PG_LOCK_ACTION
     PG_FENCE
     "  IF r.state <> 'pending' THEN RETURN 'state:' || r.state; END IF;"
     "  UPDATE actions SET lease_expires_at = p_now + p_lease WHERE id = r.id;"
     PG_ANSWER_OK),

    /* 5: a completed action whose answer was delivered but not stored (a
     * stream longer than max_response): its length. A new once_complete
     * takes it; the old one stays for gateways not yet upgraded. */
    ("ALTER TABLE actions ADD COLUMN resp_not_stored BIGINT NOT NULL DEFAULT 0;"
     "ALTER TYPE once_reserved ADD ATTRIBUTE resp_not_stored bigint;"
     "CREATE OR REPLACE FUNCTION once_reserve_rearm_reset() RETURNS trigger LANGUAGE plpgsql AS $$"
     " BEGIN"
     "  IF NEW.attempt > OLD.attempt THEN NEW.lookups := 0; NEW.lookup_next_at := 0; NEW.resp_not_stored := 0;"
     "  END IF;"
     "  RETURN NEW;"
     " END $$;"
     "CREATE FUNCTION once_complete(p_scope text, p_key text, p_token text, p_now bigint, p_has boolean,"
     "  p_status integer, p_headers text, p_body bytea, p_provider text, p_not_stored bigint)"
     " RETURNS text LANGUAGE plpgsql AS $$"
     PG_LOCK_ACTION
     PG_FENCE
     "  IF r.state = 'completed' THEN RETURN 'ok'; END IF;"
     "  IF r.state = 'released' THEN RETURN 'state:released'; END IF;"
     "  UPDATE actions SET state = 'completed', has_response = p_has, resp_status = p_status,"
     "   resp_headers = p_headers, resp_body = p_body, resp_not_stored = p_not_stored, provider_id = p_provider,"
     "   note = COALESCE(note, CASE r.state WHEN 'unknown' THEN 'late completion (the action was unknown)'"
     "     WHEN 'held' THEN 'late completion (the action was held)' END),"
     "   updated_at = p_now, expires_at = p_now + retention_ms WHERE id = r.id;"
     PG_ANSWER_OK),

    /* 6: approvals — two states (awaiting_approval, denied) and when a
     * human approved. A new once_reserve takes the approval's deadline
     * (approval_ttl); the old one, still called by gateways not yet
     * upgraded, becomes the new one without it, so that no node re-arms a
     * row that waits for a human or was denied. */
    ("DO $$ DECLARE c text; BEGIN"
     "  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'actions'::regclass AND contype = 'c'"
     "   AND pg_get_constraintdef(oid) LIKE '%state%' LOOP"
     "   EXECUTE format('ALTER TABLE actions DROP CONSTRAINT %I', c);"
     "  END LOOP;"
     " END $$;"
     "ALTER TABLE actions ADD CONSTRAINT actions_state_check CHECK (state IN ('pending','completed','released',"
     "  'unknown','held','awaiting_approval','denied')), ADD COLUMN approved_at BIGINT NOT NULL DEFAULT 0;"
     "ALTER TYPE once_reserved ADD ATTRIBUTE approved_at bigint;"
     "DROP INDEX actions_expiry;"
     "CREATE INDEX actions_expiry ON actions (expires_at) WHERE state IN ('completed','released','denied');"
     "CREATE INDEX actions_awaiting ON actions (scope, approved_at) WHERE state = 'awaiting_approval';"
     /* reserve: as in 1, and where a new attempt would start, one that
      * needs approval (p_approval_ttl > 0) waits for it instead: no token,
      * the decision's deadline in lease_expires_at. Answers also
      * 'awaiting_approval' and 'denied'. */
     "CREATE FUNCTION once_reserve(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint,"
     "  p_retention bigint, p_fp text, p_request bytea, p_retry_unknown boolean, p_approval_ttl bigint)"
     " RETURNS SETOF once_reserved LANGUAGE plpgsql AS $$"
     " DECLARE r actions%ROWTYPE; ans text; st text := 'pending'; tok text := p_token;"
     "  lease bigint := p_now + p_lease;"
     " BEGIN"
     "  IF p_approval_ttl > 0 THEN st := 'awaiting_approval'; tok := ''; lease := p_now + p_approval_ttl; END IF;"
     "  LOOP"
     "   INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
     "     expires_at, retention_ms, fingerprint, request)"
     "   VALUES (p_scope, p_key, st, 1, tok, p_now, p_now, lease, 0, p_retention, p_fp, p_request)"
     "   ON CONFLICT (scope, key) DO NOTHING RETURNING * INTO r;"
     "   IF FOUND THEN"
     "    RETURN QUERY SELECT CASE WHEN st = 'pending' THEN 'reserved' ELSE st END, a.* FROM actions a"
     "     WHERE a.id = r.id;"
     "    RETURN;"
     "   END IF;"
     "   SELECT * INTO r FROM actions WHERE scope = p_scope AND key = p_key FOR UPDATE;"
     "   EXIT WHEN FOUND;"
     "  END LOOP;"
     "  IF r.state = 'completed' AND r.expires_at > p_now THEN ans := 'completed';"
     "  ELSIF r.state = 'pending' AND r.lease_expires_at > p_now THEN ans := 'in_flight';"
     "  ELSIF r.state = 'awaiting_approval' THEN ans := 'awaiting_approval';"
     "  ELSIF r.state = 'denied' AND r.expires_at > p_now THEN ans := 'denied';"
     "  ELSIF r.state IN ('unknown', 'held') AND NOT p_retry_unknown THEN ans := r.state;"
     "  ELSIF r.state = 'pending' AND NOT p_retry_unknown THEN"
     "   UPDATE actions SET state = 'unknown', error = 'lease expired', updated_at = p_now WHERE id = r.id;"
     "   ans := 'unknown';"
     "  ELSE"
     "   UPDATE actions SET state = st, attempt = attempt + 1, token = tok, updated_at = p_now,"
     "    lease_expires_at = lease, expires_at = 0, retention_ms = p_retention, fingerprint = p_fp,"
     "    request = p_request, has_response = false, resp_status = NULL, resp_headers = NULL,"
     "    resp_body = NULL, provider_id = NULL, error = NULL, note = NULL, approved_at = 0 WHERE id = r.id;"
     "   ans := CASE WHEN st = 'pending' THEN 'reserved' ELSE st END;"
     "  END IF;"
     "  RETURN QUERY SELECT ans, a.* FROM actions a WHERE a.id = r.id;"
     " END $$;"
     "CREATE OR REPLACE FUNCTION once_reserve(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint,"
     "  p_retention bigint, p_fp text, p_request bytea, p_retry_unknown boolean)"
     " RETURNS SETOF once_reserved LANGUAGE plpgsql AS $$"
     " BEGIN"
     "  RETURN QUERY SELECT * FROM once_reserve(p_scope, p_key, p_token, p_now, p_lease, p_retention, p_fp,"
     "   p_request, p_retry_unknown, 0::bigint);"
     " END $$;"
     /* approve / deny: 'ok', 'notfound', 'state:<state>', or 'approved'
      * for a denial of an approved action (it is being sent). */
     "CREATE FUNCTION once_decide(p_scope text, p_key text, p_approve boolean, p_note text, p_step text,"
     "  p_now bigint) RETURNS text LANGUAGE plpgsql AS $$"
     PG_LOCK_ACTION
     "  IF p_approve AND r.approved_at > 0 THEN RETURN 'ok'; END IF;"
     "  IF r.state <> 'awaiting_approval' THEN RETURN 'state:' || r.state; END IF;"
     "  IF r.approved_at > 0 THEN"
     "   IF p_approve THEN RETURN 'ok'; END IF;"
     "   RETURN 'approved';"
     "  END IF;"
     "  IF p_approve THEN"
     "   UPDATE actions SET approved_at = p_now, updated_at = p_now,"
     "    trail = CASE WHEN trail IS NULL THEN p_step ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
     "  ELSE"
     "   UPDATE actions SET state = 'denied', note = p_note, updated_at = p_now, expires_at = p_now + retention_ms,"
     "    trail = CASE WHEN trail IS NULL THEN p_step ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
     "  END IF;"
     PG_ANSWER_OK),

    /* 7: who decided on an action awaiting approval, and the note they
     * gave, as columns of their own (they were text in the trail only);
     * NULL for decisions taken before (their trail names the decider) and
     * for those of gateways not yet upgraded, whose once_decide stays. A
     * new once_decide takes them. A new attempt forgets them, whichever
     * once_reserve re-arms the row: the trigger that resets an attempt's
     * lookups does, but not for the claim of an approved action (from
     * awaiting_approval), which is the same decision being carried out. */
    ("ALTER TABLE actions ADD COLUMN decided_by TEXT, ADD COLUMN decision_note TEXT;"
     "ALTER TYPE once_reserved ADD ATTRIBUTE decided_by text, ADD ATTRIBUTE decision_note text;"
     "CREATE OR REPLACE FUNCTION once_reserve_rearm_reset() RETURNS trigger LANGUAGE plpgsql AS $$"
     " BEGIN"
     "  IF NEW.attempt > OLD.attempt THEN NEW.lookups := 0; NEW.lookup_next_at := 0; NEW.resp_not_stored := 0;"
     "   IF OLD.state <> 'awaiting_approval' THEN NEW.decided_by := NULL; NEW.decision_note := NULL; END IF;"
     "  END IF;"
     "  RETURN NEW;"
     " END $$;"
     /* approve / deny: as in 6, with the decider and their note kept. */
     "CREATE FUNCTION once_decide(p_scope text, p_key text, p_approve boolean, p_note text, p_step text,"
     "  p_now bigint, p_by text, p_decision_note text) RETURNS text LANGUAGE plpgsql AS $$"
     PG_LOCK_ACTION
     "  IF p_approve AND r.approved_at > 0 THEN RETURN 'ok'; END IF;"
     "  IF r.state <> 'awaiting_approval' THEN RETURN 'state:' || r.state; END IF;"
     "  IF r.approved_at > 0 THEN"
     "   IF p_approve THEN RETURN 'ok'; END IF;"
     "   RETURN 'approved';"
     "  END IF;"
     "  IF p_approve THEN"
     "   UPDATE actions SET approved_at = p_now, updated_at = p_now, decided_by = p_by,"
     "    decision_note = p_decision_note,"
     "    trail = CASE WHEN trail IS NULL THEN p_step ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
     "  ELSE"
     "   UPDATE actions SET state = 'denied', note = p_note, updated_at = p_now, expires_at = p_now + retention_ms,"
     "    decided_by = p_by, decision_note = p_decision_note,"
     "    trail = CASE WHEN trail IS NULL THEN p_step ELSE trail || E'\\n' || p_step END WHERE id = r.id;"
     "  END IF;"
     PG_ANSWER_OK),

    /* 8: agents and limits (issue 28). Who asked for an action's current
     * attempt, the charges it drew (JSON [[limit, bucket, amount], ...],
     * NULL when none), whether it waits for a person because it was past a
     * limit; the buckets of every limit (limit_use); who claimed an event
     * last. */
    ("ALTER TABLE actions ADD COLUMN agent TEXT, ADD COLUMN charges TEXT,"
     "  ADD COLUMN waits_for_limit BOOLEAN NOT NULL DEFAULT false;"
     "ALTER TYPE once_reserved ADD ATTRIBUTE agent text, ADD ATTRIBUTE charges text,"
     "  ADD ATTRIBUTE waits_for_limit boolean;"
     "ALTER TABLE events ADD COLUMN claimed_by TEXT;"
     "CREATE TABLE limit_use (lim TEXT NOT NULL, bucket BIGINT NOT NULL, used FLOAT8 NOT NULL,"
     "  PRIMARY KEY (lim, bucket));"
     /* An attempt that becomes released or denied gives its charges back,
      * whichever statement moved it (release, resolve, reconcile, deny,
      * the expiry of approvals, a gateway not yet upgraded): one trigger.
      * The buckets' rows are locked in one order (lim, bucket). */
     "CREATE FUNCTION once_give_back() RETURNS trigger LANGUAGE plpgsql AS $$"
     " DECLARE g record;"
     " BEGIN"
     "  IF NEW.state IN ('released', 'denied') AND NEW.state IS DISTINCT FROM OLD.state"
     "   AND NEW.charges IS NOT NULL THEN"
     "   FOR g IN SELECT c->>0 AS lim, (c->>1)::bigint AS bucket, sum((c->>2)::float8) AS amount"
     "    FROM json_array_elements(NEW.charges::json) c GROUP BY 1, 2 ORDER BY 1, 2 LOOP"
     "    UPDATE limit_use SET used = used - g.amount WHERE lim = g.lim AND bucket = g.bucket;"
     "   END LOOP;"
     "   NEW.charges := NULL;"
     "  END IF;"
     "  RETURN NEW;"
     " END $$;"
     "CREATE TRIGGER actions_give_back BEFORE UPDATE OF state ON actions"
     "  FOR EACH ROW EXECUTE FUNCTION once_give_back();"
     /* The limits of a new attempt (p_charges: [[limit, window_ms, max,
      * amount], ...]): each limit's advisory lock (once_limits_lock, in
      * the order of the locks' keys, so that no two transactions wait on
      * each other's; a batch takes those of all its reservations first),
      * so that two transactions on any nodes never both fit under one;
      * then each charge in order, as src/store/limits.c counts (buckets of
      * max(1, window / 60) ms, back = ceil(window / width) of them before
      * now's). NULL when all fit, else 'INDEX:RETRY_AFTER_MS' of the first
      * that does not (-1: larger than its limit). */
     "CREATE FUNCTION once_limits_lock(p_charges json) RETURNS void LANGUAGE plpgsql AS $$"
     " DECLARE h bigint;"
     " BEGIN"
     "  FOR h IN SELECT DISTINCT hashtextextended(x->>0, 0) FROM json_array_elements(p_charges) x ORDER BY 1 LOOP"
     "   PERFORM pg_advisory_xact_lock(h);"
     "  END LOOP;"
     " END $$;"
     "CREATE FUNCTION once_limits_check(p_charges json, p_now bigint) RETURNS text LANGUAGE plpgsql AS $$"
     " DECLARE c record; b record; width bigint; back bigint; now_b bigint; used float8;"
     " BEGIN"
     "  IF p_charges IS NULL THEN RETURN NULL; END IF;"
     "  PERFORM once_limits_lock(p_charges);"
     "  FOR c IN SELECT x->>0 AS lim, (x->>1)::bigint AS w, (x->>2)::float8 AS mx, (x->>3)::float8 AS amt,"
     "    o - 1 AS i FROM json_array_elements(p_charges) WITH ORDINALITY AS t(x, o) ORDER BY o LOOP"
     "   width := greatest(1, c.w / 60); back := (c.w + width - 1) / width; now_b := p_now / width;"
     "   SELECT coalesce(sum(u.used), 0) INTO used FROM limit_use u WHERE u.lim = c.lim"
     "    AND u.bucket >= now_b - back;"
     "   CONTINUE WHEN used + c.amt <= c.mx + c.mx * 1e-9;"
     "   IF c.amt > c.mx + c.mx * 1e-9 THEN RETURN c.i || ':-1'; END IF;"
     "   FOR b IN SELECT u.bucket, u.used FROM limit_use u WHERE u.lim = c.lim AND u.bucket >= now_b - back"
     "    ORDER BY u.bucket LOOP"
     "    used := used - b.used;"
     "    IF used + c.amt <= c.mx + c.mx * 1e-9 THEN"
     "     RETURN c.i || ':' || ((b.bucket + back + 1) * width - p_now);"
     "    END IF;"
     "   END LOOP;"
     "   RETURN c.i || ':' || ((now_b + back + 1) * width - p_now);"
     "  END LOOP;"
     "  RETURN NULL;"
     " END $$;"
     /* Draws the charges of a new attempt from their buckets now (a
      * limit's buckets that left its window go first), in the order of
      * (limit, bucket) as the give-back locks them; returns what the row
      * keeps of them. The caller holds the limits' locks
      * (once_limits_check). */
     "CREATE FUNCTION once_limits_draw(p_charges json, p_now bigint) RETURNS text LANGUAGE plpgsql AS $$"
     " DECLARE c record; width bigint; back bigint; now_b bigint; drawn json[] := '{}';"
     " BEGIN"
     "  IF p_charges IS NULL THEN RETURN NULL; END IF;"
     "  FOR c IN SELECT x->>0 AS lim, (x->>1)::bigint AS w, x->3 AS amt FROM json_array_elements(p_charges)"
     "    WITH ORDINALITY AS t(x, o) ORDER BY x->>0, o LOOP"
     "   width := greatest(1, c.w / 60); back := (c.w + width - 1) / width; now_b := p_now / width;"
     "   DELETE FROM limit_use WHERE lim = c.lim AND bucket < now_b - back;"
     "   INSERT INTO limit_use (lim, bucket, used) VALUES (c.lim, now_b, (c.amt::text)::float8)"
     "    ON CONFLICT (lim, bucket) DO UPDATE SET used = limit_use.used + EXCLUDED.used;"
     "   drawn := drawn || json_build_array(c.lim, now_b, c.amt);"
     "  END LOOP;"
     "  RETURN array_to_json(drawn)::text;"
     " END $$;"
     /* reserve: as in 6, with the attempt's agent and its charges. Where a
      * new attempt would be written, its limits are checked first: past
      * one, 'over_limit:INDEX:RETRY' and no row (nothing written), or
      * with p_over_approve an attempt that waits for a person
      * ('awaiting_approval:INDEX:RETRY', waits_for_limit, the deadline
      * p_over_ttl), nothing drawn; else the attempt is written and its
      * charges drawn and kept on the row. The old signatures become this
      * one without agent or charges. */
     "CREATE FUNCTION once_reserve(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint,"
     "  p_retention bigint, p_fp text, p_request bytea, p_retry_unknown boolean, p_approval_ttl bigint,"
     "  p_agent text, p_charges json, p_over_approve boolean, p_over_ttl bigint)"
     " RETURNS SETOF once_reserved LANGUAGE plpgsql AS $$"
     " DECLARE r actions%ROWTYPE; found_row boolean; ans text; st text := 'pending'; tok text := p_token;"
     "  lease bigint := p_now + p_lease; lim_over text; waits boolean := false; o once_reserved;"
     " BEGIN"
     "  IF p_approval_ttl > 0 THEN st := 'awaiting_approval'; tok := ''; lease := p_now + p_approval_ttl; END IF;"
     "  LOOP"
     "   SELECT * INTO r FROM actions WHERE scope = p_scope AND key = p_key FOR UPDATE;"
     "   found_row := FOUND;"
     "   IF found_row THEN"
     "    IF r.state = 'completed' AND r.expires_at > p_now THEN ans := 'completed';"
     "    ELSIF r.state = 'pending' AND r.lease_expires_at > p_now THEN ans := 'in_flight';"
     "    ELSIF r.state = 'awaiting_approval' THEN ans := 'awaiting_approval';"
     "    ELSIF r.state = 'denied' AND r.expires_at > p_now THEN ans := 'denied';"
     "    ELSIF r.state IN ('unknown', 'held') AND NOT p_retry_unknown THEN ans := r.state;"
     "    ELSIF r.state = 'pending' AND NOT p_retry_unknown THEN"
     "     UPDATE actions SET state = 'unknown', error = 'lease expired', updated_at = p_now WHERE id = r.id;"
     "     ans := 'unknown';"
     "    END IF;"
     "    IF ans IS NOT NULL THEN"
     "     RETURN QUERY SELECT ans, a.* FROM actions a WHERE a.id = r.id;"
     "     RETURN;"
     "    END IF;"
     "   END IF;"
     "   IF lim_over IS NULL THEN"
     "    lim_over := once_limits_check(p_charges, p_now);"
     "    IF lim_over IS NOT NULL AND NOT p_over_approve THEN"
     "     o.answer := 'over_limit:' || lim_over;"
     "     RETURN NEXT o;"
     "     RETURN;"
     "    END IF;"
     "    IF lim_over IS NOT NULL THEN"
     "     waits := true; st := 'awaiting_approval'; tok := ''; lease := p_now + p_over_ttl;"
     "    END IF;"
     "   END IF;"
     "   IF found_row THEN"
     "    UPDATE actions SET state = st, attempt = attempt + 1, token = tok, updated_at = p_now,"
     "     lease_expires_at = lease, expires_at = 0, retention_ms = p_retention, fingerprint = p_fp,"
     "     request = p_request, has_response = false, resp_status = NULL, resp_headers = NULL,"
     "     resp_body = NULL, provider_id = NULL, error = NULL, note = NULL, approved_at = 0, agent = p_agent,"
     "     charges = NULL, waits_for_limit = waits WHERE id = r.id;"
     "    EXIT;"
     "   END IF;"
     "   INSERT INTO actions (scope, key, state, attempt, token, created_at, updated_at, lease_expires_at,"
     "     expires_at, retention_ms, fingerprint, request, agent, waits_for_limit)"
     "   VALUES (p_scope, p_key, st, 1, tok, p_now, p_now, lease, 0, p_retention, p_fp, p_request, p_agent, waits)"
     "   ON CONFLICT (scope, key) DO NOTHING RETURNING * INTO r;"
     /* Lost the race for a new key: the winner's row answers (a fresh
      * snapshot per statement sees it once its transaction committed). */
     "   EXIT WHEN FOUND;"
     "  END LOOP;"
     "  IF NOT waits AND p_charges IS NOT NULL THEN"
     "   UPDATE actions SET charges = once_limits_draw(p_charges, p_now) WHERE id = r.id;"
     "  END IF;"
     "  ans := CASE WHEN st = 'pending' THEN 'reserved' WHEN waits THEN st || ':' || lim_over ELSE st END;"
     "  RETURN QUERY SELECT ans, a.* FROM actions a WHERE a.id = r.id;"
     " END $$;"
     "CREATE OR REPLACE FUNCTION once_reserve(p_scope text, p_key text, p_token text, p_now bigint, p_lease bigint,"
     "  p_retention bigint, p_fp text, p_request bytea, p_retry_unknown boolean, p_approval_ttl bigint)"
     " RETURNS SETOF once_reserved LANGUAGE plpgsql AS $$"
     " BEGIN"
     "  RETURN QUERY SELECT * FROM once_reserve(p_scope, p_key, p_token, p_now, p_lease, p_retention, p_fp,"
     "   p_request, p_retry_unknown, p_approval_ttl, NULL::text, NULL::json, false, 0::bigint);"
     " END $$;"),
};

#define LATEST SCHEMA_STEPS_COUNT(migrations)

SCHEMA_STEPS_DEFINE(pg_schema_latest, pg_schema_step, migrations)

static int exec_ok(PGconn *c, const char *sql, char *err, size_t errlen)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        snprintf(err, errlen, "%s", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

int pg_schema_prepare(PGconn *c, const char *schema)
{
    char err[512], sql[256];
    if (exec_ok(c, "BEGIN", err, sizeof err) < 0)
        return once_fail(ONCE_ESTORE, "schema: %s", err);
    snprintf(sql, sizeof sql, "SELECT pg_advisory_xact_lock(%d)", SCHEMA_LOCK_KEY);
    if (exec_ok(c, sql, err, sizeof err) < 0)
        goto fail;
    if (schema) {
        snprintf(sql, sizeof sql, "CREATE SCHEMA IF NOT EXISTS \"%s\"", schema);
        if (exec_ok(c, sql, err, sizeof err) < 0)
            goto fail;
    }
    if (exec_ok(c, "CREATE TABLE IF NOT EXISTS once_schema (version INTEGER NOT NULL)", err, sizeof err) < 0)
        goto fail;
    PGresult *res = PQexec(c, "SELECT max(version) FROM once_schema");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, sizeof err, "%s", PQresultErrorMessage(res));
        PQclear(res);
        goto fail;
    }
    int version = PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (version > LATEST) {
        PQclear(PQexec(c, "ROLLBACK"));
        return once_fail(ONCE_ESCHEMA,
                         "the store has schema version %d but this once knows only up to %d: upgrade once "
                         "(the database was left untouched)",
                         version, LATEST);
    }
    for (int step = version; step < LATEST; step++) {
        if (exec_ok(c, migrations[step], err, sizeof err) < 0)
            goto fail;
    }
    if (version < LATEST) {
        snprintf(sql, sizeof sql, "DELETE FROM once_schema; INSERT INTO once_schema VALUES (%d)", LATEST);
        if (exec_ok(c, sql, err, sizeof err) < 0)
            goto fail;
    }
    if (exec_ok(c, "COMMIT", err, sizeof err) < 0)
        return once_fail(ONCE_ESTORE, "schema: %s", err);
    return ONCE_OK;
fail:
    PQclear(PQexec(c, "ROLLBACK"));
    /* Keep the first line: libpq messages end with newlines and context. */
    err[strcspn(err, "\n")] = '\0';
    return once_fail(ONCE_ESTORE, "schema: %s", err);
}
