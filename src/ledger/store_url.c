/*
 * store_url.c — store URLs as they may be shown: wherever a URL is printed
 * or logged (the gateway's start line, CLI errors), a PostgreSQL password
 * must not be (docs/security.md).
 */
#include <stdio.h>
#include <string.h>

#include "ledger/store.h"

/* Appends n bytes of s to out (cap with the NUL), cutting what does not fit. */
static void put(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len + 1 >= cap)
        return;
    size_t room = cap - 1 - *len;
    if (n > room)
        n = room;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = '\0';
}

/* Copies a query, replacing the value of every password= parameter. */
static void put_query(char *out, size_t cap, size_t *len, const char *q)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        if (n >= 9 && strncmp(q, "password=", 9) == 0) {
            put(out, cap, len, "password=***", 12);
        } else {
            put(out, cap, len, q, n);
        }
        q += n;
        if (*q == '&')
            put(out, cap, len, q++, 1);
    }
}

int once_store_url_redact(const char *url, char *out, size_t cap)
{
    if (!out || cap == 0)
        return once_fail(ONCE_EINVAL, "store URL: no room");
    out[0] = '\0';
    if (!url)
        return ONCE_OK;
    size_t len = 0;
    const char *sep = strstr(url, "://");
    if (!sep) {
        put(out, cap, &len, url, strlen(url)); /* sqlite:PATH holds no secret */
        return ONCE_OK;
    }
    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (const char *p = auth; p < auth + alen; p++)
        if (*p == '@')
            at = p; /* the last '@' ends the userinfo */
    put(out, cap, &len, url, (size_t)(auth - url));
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon) {
            put(out, cap, &len, auth, (size_t)(colon - auth));
            put(out, cap, &len, ":***", 4);
        } else {
            put(out, cap, &len, auth, (size_t)(at - auth));
        }
        auth = at;
        alen -= (size_t)(at - (sep + 3));
    }
    const char *rest = auth + alen;
    put(out, cap, &len, auth, alen);
    size_t plen = strcspn(rest, "?");
    put(out, cap, &len, rest, plen);
    if (rest[plen] == '?') {
        put(out, cap, &len, "?", 1);
        put_query(out, cap, &len, rest + plen + 1);
    }
    return ONCE_OK;
}
