/*
 * target.c — request targets checked, and upstream URLs built with
 * libcurl's URL API (see target.h).
 *
 * Two parsers reading one string differently is how a proxy gets turned:
 * "https://api.stripe.com" + "@evil.example/x" is a request to evil.example
 * for libcurl, carrying the operator's key. So the target is never glued to
 * the base and re-parsed for its host: the base's scheme, host and port are
 * kept in a CURLU handle and only its path and query are set from the
 * target. Then the URL is parsed once more, as libcurl will parse it, and
 * checked against the configured scheme, host, port and base path.
 */
#include "server/core/target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "common/check.h"
#include "common/hex.h"
#include "common/pct.h"

static void target_why(char *why, size_t whylen, const char *msg)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", msg);
}

/* The byte at s[*i] of a well-formed raw path (escapes decoded), moving
 * *i past it; -1 at n. */
static int path_byte(const char *s, size_t n, size_t *i)
{
    if (*i >= n)
        return -1;
    if (s[*i] == '%') {
        int c = hex_value(s[*i + 1]) * 16 + hex_value(s[*i + 2]);
        *i += 3;
        return c;
    }
    return (unsigned char)s[(*i)++];
}

/* Whether the n raw bytes of one path segment decode to something that
 * holds "." or ".." between '/' or '\' separators (or is one), what
 * follows a ';' or a NUL in a part not counted. Escapes were checked
 * well-formed by pct_valid. */
static int segment_has_dot_part(const char *s, size_t n)
{
    size_t part = 0, i = 0;
    int dots_only = 1, cut = 0;
    for (;;) {
        int c = path_byte(s, n, &i);
        if (c == -1 || c == '/' || c == '\\') {
            if (part >= 1 && part <= 2 && dots_only)
                return 1;
            if (c == -1)
                return 0;
            part = 0;
            dots_only = 1;
            cut = 0;
        } else if (c == ';' || c == 0) {
            cut = 1;
        } else if (!cut) {
            part++;
            dots_only &= c == '.';
        }
    }
}

target_verdict target_check(const char *target, char *why, size_t whylen)
{
    if (!pct_valid(target)) {
        target_why(why, whylen, "malformed percent-encoding, or a byte that is not visible ASCII, in the path");
        return TARGET_MALFORMED;
    }
    if (target[0] == '\0')
        return TARGET_OK;
    if (target[0] != '/' && target[0] != '?') {
        target_why(why, whylen, "the path must start with '/' or '?' (the upstream's host is fixed by config)");
        return TARGET_INVALID;
    }
    if (strchr(target, '#')) {
        target_why(why, whylen, "a fragment ('#') has no place in a request target");
        return TARGET_INVALID;
    }
    size_t plen = strcspn(target, "?");
    for (size_t i = 0; i < plen;) {
        size_t len = strcspn(target + i, "/?");
        if (i + len > plen)
            len = plen - i;
        if (segment_has_dot_part(target + i, len)) {
            target_why(why, whylen, "a path segment '.' or '..' (raw or percent-encoded) is not allowed");
            return TARGET_INVALID;
        }
        i += len + 1; /* past the '/' */
    }
    return TARGET_OK;
}

/* Whether the n raw bytes of one segment (between '/'s) could be read as
 * another path by some provider: see target_ambiguous. */
static const char *segment_ambiguity(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            return "a '\\' in the path";
        if (s[i] != '%')
            continue;
        int c = hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]);
        if (c == '/' || c == '\\' || c == 0)
            return "an encoded '/', '\\' or NUL in the path";
        if (c == '%') {
            /* decoded once, does an escape follow? (the digits may be escaped too) */
            size_t j = i + 3;
            int d1 = path_byte(s, n, &j), d2 = path_byte(s, n, &j);
            if (d1 >= 0 && d2 >= 0 && hex_value((char)d1) >= 0 && hex_value((char)d2) >= 0)
                return "a percent-encoded escape ('%25' before hex digits) in the path";
        }
        i += 2;
    }
    return NULL;
}

target_verdict target_ambiguous(const char *target, char *why, size_t whylen)
{
    if (!pct_valid(target))
        return target_check(target, why, whylen); /* malformed: its own verdict */
    size_t plen = strcspn(target, "?");
    for (size_t i = 0; i < plen;) {
        if (target[i] == '/')
            i++;
        size_t len = strcspn(target + i, "/?");
        if (i + len > plen)
            len = plen - i;
        const char *what = segment_ambiguity(target + i, len);
        if (!what && len == 0 && i < plen)
            what = "an empty path segment ('//')";
        if (!what && segment_has_dot_part(target + i, len))
            what = "a path segment that is '.' or '..' once its ';' parameters are cut";
        if (what) {
            if (why && whylen)
                snprintf(why, whylen, "%s, which providers read in more than one way, on an upstream with path "
                                      "rules (approve)", what);
            return TARGET_AMBIGUOUS;
        }
        i += len;
    }
    return TARGET_OK;
}

void target_canon(char *target)
{
    size_t plen = strcspn(target, "?");
    size_t nl = pct_normalize(target, plen);
    if (nl < plen)
        memmove(target + nl, target + plen, strlen(target + plen) + 1);
}

/* Gets a part of h into *out (curl_free it). 0 or -1. */
static int url_part(CURLU *h, CURLUPart what, char **out)
{
    *out = NULL;
    return curl_url_get(h, what, out, what == CURLUPART_PORT ? CURLU_DEFAULT_PORT : 0) == CURLUE_OK ? 0 : -1;
}

/* Whether checked names the same scheme, host and port as base, and a
 * path equal to base's or below it. */
static int url_same_origin(CURLU *base, CURLU *checked, const char *bpath, size_t bl)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
    int same = 1;
    for (size_t i = 0; same && i < sizeof parts / sizeof parts[0]; i++) {
        char *a = NULL, *b = NULL;
        same = url_part(base, parts[i], &a) == 0 && url_part(checked, parts[i], &b) == 0 && strcasecmp(a, b) == 0;
        curl_free(a);
        curl_free(b);
    }
    char *path = NULL;
    if (same)
        same = url_part(checked, CURLUPART_PATH, &path) == 0 && strncmp(path, bpath, bl) == 0 &&
               (path[bl] == '\0' || path[bl] == '/');
    curl_free(path);
    return same;
}

/* Whether chk's part what is exactly want (NULL: absent). */
static int url_part_is(CURLU *chk, CURLUPart what, const char *want)
{
    char *got = NULL;
    CURLUcode rc = curl_url_get(chk, what, &got, 0);
    int same = want ? rc == CURLUE_OK && strcmp(got, want) == 0 : rc != CURLUE_OK || got[0] == '\0';
    curl_free(got);
    return same;
}

int target_url(const char *base, const char *target, char **out, char *why, size_t whylen)
{
    int rc = -1;
    CURLU *h = curl_url(), *chk = curl_url();
    char *bpath = NULL, *path = NULL, *origin = NULL, *url = NULL;
    *out = NULL;
    if (!h || !chk) {
        target_why(why, whylen, "out of memory");
        goto out;
    }
    if (curl_url_set(h, CURLUPART_URL, base, 0) != CURLUE_OK || url_part(h, CURLUPART_PATH, &bpath) < 0) {
        target_why(why, whylen, "the upstream's url cannot be parsed");
        goto out;
    }
    size_t bl = strlen(bpath);
    while (bl > 0 && bpath[bl - 1] == '/')
        bl--;
    size_t plen = strcspn(target, "?");
    path = malloc(bl + plen + 2);
    if (!path) {
        target_why(why, whylen, "out of memory");
        goto out;
    }
    memcpy(path, bpath, bl);
    memcpy(path + bl, target, plen);
    path[bl + plen] = '\0';
    if (path[0] == '\0')
        memcpy(path, "/", 2);
    const char *query = target[plen] == '?' ? target + plen + 1 : NULL;
    /* The origin comes from base alone (scheme, host, port); setting the
     * path through the URL API would re-spell its escapes (libcurl lower-
     * cases them), and the path sent must be the canonical one the rules
     * matched. So the path is put after the origin, and the result parsed
     * again below: it must name base's origin and exactly this path. */
    if (curl_url_set(h, CURLUPART_PATH, "/", 0) != CURLUE_OK || curl_url_set(h, CURLUPART_QUERY, NULL, 0) ||
        url_part(h, CURLUPART_URL, &origin) < 0) {
        target_why(why, whylen, "the upstream URL cannot be built from this path");
        goto out;
    }
    size_t ol = strlen(origin);
    ONCE_ASSERT(ol > 0 && origin[ol - 1] == '/');
    if (asprintf(&url, "%.*s%s%s%s", (int)(ol - 1), origin, path, query ? "?" : "", query ? query : "") < 0) {
        url = NULL;
        target_why(why, whylen, "out of memory");
        goto out;
    }
    if (curl_url_set(chk, CURLUPART_URL, url, 0) != CURLUE_OK || !url_same_origin(h, chk, bpath, bl) ||
        !url_part_is(chk, CURLUPART_PATH, path) || !url_part_is(chk, CURLUPART_QUERY, query && *query ? query : NULL)) {
        target_why(why, whylen, "the path would lead away from the upstream's configured URL");
        goto out;
    }
    *out = url;
    url = NULL;
    rc = 0;
out:
    free(url);
    curl_free(origin);
    curl_free(bpath);
    free(path);
    curl_url_cleanup(chk);
    curl_url_cleanup(h);
    return rc;
}
