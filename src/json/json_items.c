/*
 * json_items.c — an array of records rendered one by one (see
 * json_items.h).
 */
#include "json/json_items.h"

/* All or nothing: a listing that left out a record it could not render
 * would look complete to its reader. */
json_t *json_items(size_t n, json_item_fn item, const void *ctx)
{
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++) {
        json_t *o = NULL;
        if (item(ctx, i, &o) < 0 || json_array_append_new(items, o) < 0) {
            json_decref(items);
            items = NULL;
        }
    }
    return items;
}
