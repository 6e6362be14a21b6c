/*
 * json_pointer.c — RFC 6901 JSON Pointers over jansson values.
 *
 * A pointer is "" (the whole document) or a sequence of "/token"; in a
 * token "~1" stands for '/' and "~0" for '~', and any other '~' makes the
 * pointer malformed. Against an object a token is a member name; against
 * an array it is a decimal index without leading zeros ("0", "17"), and
 * "-" (one past the end) never names a present value. The input is
 * untrusted: nothing here recurses, and each lookup does one allocation,
 * bounded by the pointer's length.
 */
#include "common/json_pointer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int json_pointer_check(const char *ptr)
{
    return ptr != NULL && json_pointer_valid(ptr, strlen(ptr)) ? 0 : -1;
}

/* Syntax check: "" or '/'-led, with every '~' followed by '0' or '1'. */
int json_pointer_valid(const char *p, size_t n)
{
    if (n > 0 && (p == NULL || p[0] != '/'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '~' && (i + 1 == n || (p[i + 1] != '0' && p[i + 1] != '1')))
            return 0;
    }
    return 1;
}

/* Parses an array index token: "0" or [1-9][0-9]*, and below size (a
 * larger number cannot name an element, so overflow is caught by bounding
 * against size as the digits accumulate). 0 with the index, or -1. */
static int jp_index(const char *tok, size_t n, size_t size, size_t *out)
{
    if (n == 0 || (n > 1 && tok[0] == '0'))
        return -1;
    size_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (tok[i] < '0' || tok[i] > '9')
            return -1;
        v = v * 10 + (size_t)(tok[i] - '0');
        if (v >= size)
            return -1;
    }
    *out = v;
    return 0;
}

/* Walks the pointer token by token, unescaping each into one buffer as
 * long as the pointer (no token is longer), so a member name is matched
 * by its exact bytes with json_object_getn. */
json_t *json_pointer_get(json_t *root, const char *ptr)
{
    if (root == NULL || json_pointer_check(ptr) != 0)
        return NULL;
    if (ptr[0] == '\0')
        return root;
    size_t plen = strlen(ptr);
    char *tok = malloc(plen + 1);
    if (tok == NULL)
        return NULL;
    json_t *cur = root;
    const char *p = ptr;
    while (cur != NULL && *p == '/') {
        p++;
        size_t n = 0;
        while (*p != '\0' && *p != '/') {
            if (*p == '~') {
                tok[n++] = p[1] == '1' ? '/' : '~'; /* json_pointer_check vouched for p[1] */
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, tok, n);
        } else if (json_is_array(cur)) {
            size_t idx;
            cur = jp_index(tok, n, json_array_size(cur), &idx) == 0 ? json_array_get(cur, idx) : NULL;
        } else {
            cur = NULL;
        }
    }
    free(tok);
    return cur;
}

/* Renders the value at ptr as an id or key: strings as they are (one with
 * an embedded NUL cannot be a C string, so it is refused rather than
 * silently cut), integers in decimal. On -1, out is "" when cap allows. */
int json_pointer_text(json_t *root, const char *ptr, char *out, size_t cap)
{
    if (out == NULL || cap == 0)
        return -1;
    out[0] = '\0';
    json_t *v = json_pointer_get(root, ptr);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (s == NULL || memchr(s, '\0', n) != NULL || n >= cap)
            return -1;
        memcpy(out, s, n);
        out[n] = '\0';
        return 0;
    }
    if (json_is_integer(v)) {
        int n = snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        if (n < 0 || (size_t)n >= cap) {
            out[0] = '\0';
            return -1;
        }
        return 0;
    }
    return -1;
}
