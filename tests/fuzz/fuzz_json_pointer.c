/*
 * fuzz_json_pointer.c — libFuzzer target for RFC 6901 JSON Pointers
 * (json_pointer.c).
 *
 * Input layout: the pointer up to the first '\n', then a JSON document
 * (any value; \u0000 allowed in strings, as the gateway's bodies may hold).
 * Checked whatever the input: a pointer json_pointer_check refuses finds
 * nothing; json_pointer_text either writes a NUL-terminated string that fits
 * or leaves "" and returns -1; and for the document's own members (down to a
 * bounded depth), the escaped pointer built from each key path finds exactly
 * that value.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_pointer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_DEPTH 6
#define FZ_MAX_NODES 256

/* Checks json_pointer_text's contract for one pointer and capacity. */
static void fz_text(json_t *doc, const char *ptr, size_t cap)
{
    char out[300];
    memset(out, 'x', sizeof out);
    int rc = json_pointer_text(doc, ptr, out, cap);
    if (rc != 0 && rc != -1)
        __builtin_trap();
    if (cap == 0) {
        if (rc != -1 || out[0] != 'x')
            __builtin_trap();
        return;
    }
    if (memchr(out, '\0', cap) == NULL)
        __builtin_trap();
    if (rc == -1 && out[0] != '\0')
        __builtin_trap();
    if (rc == 0 && json_pointer_get(doc, ptr) == NULL)
        __builtin_trap();
}

/* Appends "/" + the escaped token to the pointer in buf (length *len, cap
 * bytes); 0, or -1 when it would not fit (that path is then skipped). */
static int fz_push(char *buf, size_t *len, size_t cap, const char *tok, size_t n)
{
    size_t need = 1;
    for (size_t i = 0; i < n; i++)
        need += (tok[i] == '~' || tok[i] == '/') ? 2 : 1;
    if (*len + need + 1 > cap)
        return -1;
    buf[(*len)++] = '/';
    for (size_t i = 0; i < n; i++) {
        if (tok[i] == '~') {
            buf[(*len)++] = '~';
            buf[(*len)++] = '0';
        } else if (tok[i] == '/') {
            buf[(*len)++] = '~';
            buf[(*len)++] = '1';
        } else {
            buf[(*len)++] = tok[i];
        }
    }
    buf[*len] = '\0';
    return 0;
}

/* Walks the document, checking that the pointer to each visited value
 * (keys escaped, indexes in decimal) finds that very value. */
static void fz_walk(json_t *root, json_t *cur, char *buf, size_t len, size_t cap, int depth, int *budget)
{
    if (--*budget < 0)
        return;
    buf[len] = '\0';
    if (json_pointer_check(buf) != 0 || json_pointer_get(root, buf) != cur)
        __builtin_trap();
    if (depth >= FZ_MAX_DEPTH)
        return;
    if (json_is_object(cur)) {
        const char *key;
        size_t klen;
        json_t *val;
        void *tmp;
        json_object_keylen_foreach_safe(cur, tmp, key, klen, val)
        {
            if (memchr(key, '\0', klen) != NULL)
                continue; /* a pointer is a C string: such a key has none */
            size_t l = len;
            if (fz_push(buf, &l, cap, key, klen) == 0)
                fz_walk(root, val, buf, l, cap, depth + 1, budget);
            buf[len] = '\0';
        }
    } else if (json_is_array(cur)) {
        for (size_t i = 0; i < json_array_size(cur); i++) {
            char idx[24];
            int n = snprintf(idx, sizeof idx, "%zu", i);
            size_t l = len;
            if (n > 0 && fz_push(buf, &l, cap, idx, (size_t)n) == 0)
                fz_walk(root, json_array_get(cur, i), buf, l, cap, depth + 1, budget);
            buf[len] = '\0';
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t plen = nl != NULL ? (size_t)(nl - data) : size;
    char *ptr = malloc(plen + 1);
    if (ptr == NULL)
        return 0;
    if (plen > 0)
        memcpy(ptr, data, plen);
    ptr[plen] = '\0';
    const char *doctext = nl != NULL ? (const char *)nl + 1 : "";
    size_t doclen = nl != NULL ? size - plen - 1 : 0;

    json_error_t jerr;
    json_t *doc = json_loadb(doctext, doclen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    int ok = json_pointer_check(ptr);
    if (ok != 0 && ok != -1)
        __builtin_trap();
    if (doc != NULL) {
        json_t *v = json_pointer_get(doc, ptr);
        if (ok != 0 && v != NULL)
            __builtin_trap();
        if (ptr[0] == '\0' && v != doc)
            __builtin_trap();
        static const size_t caps[] = {0, 1, 2, 8, 21, 300};
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
            fz_text(doc, ptr, caps[i]);
        size_t cap = 4096;
        char *buf = malloc(cap);
        if (buf != NULL) {
            int budget = FZ_MAX_NODES;
            fz_walk(doc, doc, buf, 0, cap, 0, &budget);
            free(buf);
        }
        json_decref(doc);
    } else if (json_pointer_get(NULL, ptr) != NULL) {
        __builtin_trap();
    }
    free(ptr);
    return 0;
}
