/*
 * fuzz_target.c — libFuzzer target for the request-target check and the
 * upstream URL built from it (src/server/core/target.c): raw client bytes that
 * decide where a request carrying the operator's credentials goes.
 *
 * Invariants: a target the check accepts gives a URL whose scheme, host and
 * port are the base's, parsed again by libcurl as the outbound client will
 * parse it, and whose path is under the base's; a refused target comes with
 * a reason. The canonical form (target_canon) of an accepted target is
 * accepted again, by both checks where the original passed both, and is its
 * own canonical form; a target the stricter check of an upstream with path
 * rules refuses is refused however it is spelled after canonicalisation, so
 * it is never forwarded there.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "server/core/target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const bases[] = {"https://api.stripe.com", "http://127.0.0.1:7700/api/public",
                                    "http://[::1]:8080/v1/"};

static void check_same_host(const char *base, const char *url)
{
    CURLU *a = curl_url(), *b = curl_url();
    char *ha = NULL, *hb = NULL, *pa = NULL, *pb = NULL, *path = NULL, *bpath = NULL;
    if (!a || !b || curl_url_set(a, CURLUPART_URL, base, 0) != CURLUE_OK ||
        curl_url_set(b, CURLUPART_URL, url, 0) != CURLUE_OK)
        abort();
    if (curl_url_get(a, CURLUPART_HOST, &ha, 0) != CURLUE_OK || curl_url_get(b, CURLUPART_HOST, &hb, 0) ||
        curl_url_get(a, CURLUPART_PORT, &pa, CURLU_DEFAULT_PORT) ||
        curl_url_get(b, CURLUPART_PORT, &pb, CURLU_DEFAULT_PORT) || curl_url_get(a, CURLUPART_PATH, &bpath, 0) ||
        curl_url_get(b, CURLUPART_PATH, &path, 0))
        abort();
    if (strcmp(ha, hb) != 0 || strcmp(pa, pb) != 0) {
        fprintf(stderr, "%s led to %s:%s (%s)\n", base, hb, pb, url);
        abort();
    }
    size_t bl = strlen(bpath);
    while (bl > 0 && bpath[bl - 1] == '/')
        bl--;
    if (strncmp(path, bpath, bl) != 0)
        abort();
    curl_free(ha);
    curl_free(hb);
    curl_free(pa);
    curl_free(pb);
    curl_free(path);
    curl_free(bpath);
    curl_url_cleanup(a);
    curl_url_cleanup(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *t = malloc(size + 1);
    if (!t)
        return 0;
    memcpy(t, data, size);
    t[size] = '\0';
    char why[160] = "";
    target_verdict v = target_check(t, why, sizeof why);
    if (v != TARGET_OK && !why[0])
        abort();
    target_verdict strict = target_ambiguous(t, why, sizeof why);
    if (strict != TARGET_OK && !why[0])
        abort();
    if (v == TARGET_OK && strlen(t) == size) {
        char *c = strdup(t);
        if (!c)
            abort();
        target_canon(c);
        if (target_check(c, why, sizeof why) != TARGET_OK) {
            fprintf(stderr, "canonical '%s' of '%s' refused: %s\n", c, t, why);
            abort();
        }
        if ((strict == TARGET_OK) != (target_ambiguous(c, why, sizeof why) == TARGET_OK)) {
            fprintf(stderr, "'%s' and its canonical '%s' differ in ambiguity\n", t, c);
            abort();
        }
        char *again = strdup(c);
        if (!again)
            abort();
        target_canon(again);
        if (strcmp(again, c) != 0) {
            fprintf(stderr, "canonical form not idempotent: '%s' -> '%s'\n", c, again);
            abort();
        }
        for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
            char *url = NULL;
            if (target_url(bases[i], c, &url, why, sizeof why) == 0) {
                check_same_host(bases[i], url);
                free(url);
            }
        }
        free(again);
        free(c);
    }
    free(t);
    return 0;
}
