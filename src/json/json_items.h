/*
 * json_items.h — a JSON array of records rendered one by one (the page of
 * actions GET /v1/actions answers, the events of GET /v1/events and of an
 * inbox claim), so that building it, and giving up whole when one record
 * cannot be rendered, is written once whatever the record.
 */
#ifndef ONCE_JSON_JSON_ITEMS_H
#define ONCE_JSON_JSON_ITEMS_H

#include <stddef.h>

#include <jansson.h>

/* Renders item i of what ctx holds into *out (a new reference): 0, or
 * negative when it cannot (out of memory, an unnamed state). */
typedef int (*json_item_fn)(const void *ctx, size_t i, json_t **out);

/* A new array of the n items of ctx, rendered by item in order; NULL when
 * one could not be rendered or memory ran out (nothing half-built is
 * returned). */
json_t *json_items(size_t n, json_item_fn item, const void *ctx);

#endif
