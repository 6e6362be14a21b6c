/*
 * action.c — ownership of the records libonce hands out, and the answer a
 * reservation gets from an existing row.
 */
#include <stdlib.h>
#include <string.h>

#include "ledger/entry.h"
#include "ledger/store.h"

void once_action_free(once_action *a)
{
    if (!a)
        return;
    free(a->scope);
    free(a->key);
    free(a->fingerprint);
    free(a->request);
    free(a->response.headers);
    free(a->response.body);
    free(a->provider_id);
    free(a->error);
    free(a->note);
    free(a->trail);
    free(a->decided_by);
    free(a->decision_note);
    free(a->agent);
    memset(a, 0, sizeof *a);
}

void once_reservation_free(once_reservation *r)
{
    if (!r)
        return;
    once_action_free(&r->action);
    memset(r, 0, sizeof *r);
}

LEDGER_LIST_FREE(once_action_list_free, once_action_list, once_action_free)

/* The ledger's replay cache and both stores answer a reservation from a row
 * they found; this is the one place that says what such an answer holds. */
void ledger_answer_reservation(once_reservation *out, once_reserve_status status, const char *fingerprint)
{
    const once_action *a = &out->action;
    out->status = status;
    out->attempt = a->attempt;
    if (status == ONCE_IN_FLIGHT)
        out->lease_expires_at = a->lease_expires_at;
    if (status == ONCE_COMPLETED)
        out->fingerprint_mismatch = fingerprint && a->fingerprint && strcmp(fingerprint, a->fingerprint) != 0;
}
