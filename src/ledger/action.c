/*
 * action.c — ownership of the records libonce hands out.
 */
#include <stdlib.h>
#include <string.h>

#include "once/once.h"

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
    memset(a, 0, sizeof *a);
}

void once_reservation_free(once_reservation *r)
{
    if (!r)
        return;
    once_action_free(&r->action);
    memset(r, 0, sizeof *r);
}

void once_action_list_free(once_action_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->count; i++)
        once_action_free(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}
