/*
 * fuzz_validate.c — libFuzzer target for what the ledger accepts from
 * agents: once_key_validate, once_scope_validate, once_state_parse, a list
 * cursor given to once_list, and once_reserve with a fuzzed scope, key and
 * fingerprint, on one in-memory store opened on the first input.
 *
 * Every answer is checked against an independent model of the rules in
 * once.h (a mismatch traps), and every error must come with a detail.
 *
 * libonce is built with -fsanitize=fuzzer-no-link in a fuzz build, so
 * libFuzzer's coverage sees inside the validators.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <once/once.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESERVE_MAX_INPUT 1024 /* reserve only on short inputs */
#define SWEEP_EVERY 512        /* keep the in-memory store small */

static once_store *g_store;
static unsigned g_reserves;

static once_store *store(void)
{
    if (!g_store) {
        if (once_store_open("sqlite::memory:", &g_store) != 0)
            __builtin_trap();
        /* A few rows, so that cursors page over something. */
        static const char *const keys[] = {"a", "b", "c", "d", "e"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            once_reserve_req req = {.scope = "seed", .key = keys[i], .lease_ms = 60000};
            once_reservation r;
            if (once_reserve(g_store, &req, &r) != 0)
                __builtin_trap();
            once_reservation_free(&r);
        }
    }
    return g_store;
}

static void need_detail(int rc)
{
    if (rc < 0 && once_errdetail()[0] == '\0')
        __builtin_trap();
}

/* The model of the rules in once.h. */
static int model_key_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > ONCE_KEY_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

static int model_scope_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > ONCE_SCOPE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int model_fp_ok(const char *s)
{
    size_t n = strlen(s);
    if (n > ONCE_FINGERPRINT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

static void check_validators(const char *s)
{
    int rc = once_key_validate(s);
    if (rc != 0 && rc != ONCE_EINVAL)
        __builtin_trap();
    if ((rc == 0) != model_key_ok(s))
        __builtin_trap();
    need_detail(rc);

    rc = once_scope_validate(s);
    if (rc != 0 && rc != ONCE_EINVAL)
        __builtin_trap();
    if ((rc == 0) != model_scope_ok(s))
        __builtin_trap();
    need_detail(rc);

    once_state st = 0;
    rc = once_state_parse(s, &st);
    if (rc == 0) {
        const char *name = once_state_name(st);
        if (!name || strcmp(name, s) != 0)
            __builtin_trap();
    } else if (rc != ONCE_EINVAL) {
        __builtin_trap();
    }
    need_detail(rc);
}

/* A list page with s as its cursor. */
static void check_cursor(const char *s, unsigned char pick)
{
    once_list_req lr = {.cursor = s, .limit = (size_t)(pick % 4), .state = (once_state)(pick >> 5)};
    once_action_list l;
    int rc = once_list(store(), &lr, &l);
    if (rc == 0) {
        size_t limit = lr.limit ? lr.limit : 100;
        if (l.count > limit || (l.count && !l.items))
            __builtin_trap();
        size_t nl = strnlen(l.next, sizeof l.next);
        if (nl == sizeof l.next)
            __builtin_trap();
        for (size_t i = 0; i < nl; i++)
            if (l.next[i] < '0' || l.next[i] > '9')
                __builtin_trap();
        for (size_t i = 0; i < l.count; i++)
            if (!l.items[i].scope || !l.items[i].key || !once_state_name(l.items[i].state) ||
                (lr.state && l.items[i].state != lr.state))
                __builtin_trap();
    } else if (rc != ONCE_EINVAL) {
        __builtin_trap();
    }
    need_detail(rc);
    once_action_list_free(&l);
    if (l.items || l.count)
        __builtin_trap();
}

/* Reserves (scope, key) with fingerprint; settles a RESERVED answer at once
 * (complete or release) so that rows can be swept. */
static void check_reserve(const char *scope, const char *key, const char *fp, const uint8_t *req_blob,
                          size_t req_len, unsigned char pick)
{
    once_store *st = store();
    once_reserve_req req = {.scope = scope, .key = key, .fingerprint = (pick & 1) ? fp : NULL,
                            .lease_ms = 60000, .request = req_blob, .request_len = req_len,
                            .retry_unknown = (pick >> 1) & 1};
    once_reservation r;
    int rc = once_reserve(st, &req, &r);
    int valid = model_scope_ok(scope) && model_key_ok(key) && (!(pick & 1) || model_fp_ok(fp));
    if (rc < 0) {
        if (rc != ONCE_EINVAL || valid)
            __builtin_trap();
        need_detail(rc);
        return;
    }
    if (rc != 0 || !valid)
        __builtin_trap();
    if (r.status == ONCE_RESERVED) {
        if (strnlen(r.token, sizeof r.token) != ONCE_TOKEN_LEN || r.attempt < 1)
            __builtin_trap();
        once_action a;
        if (once_get(st, scope, key, &a) != 0 || a.state != ONCE_STATE_PENDING || a.attempt != r.attempt ||
            strcmp(a.scope, scope) != 0 || strcmp(a.key, key) != 0 || a.request_len != req_len ||
            (req_len && memcmp(a.request, req_blob, req_len) != 0))
            __builtin_trap();
        if ((pick & 1) ? (!a.fingerprint || strcmp(a.fingerprint, fp) != 0) : a.fingerprint != NULL)
            __builtin_trap();
        once_action_free(&a);
        int src = (pick & 4) ? once_release(st, scope, key, r.token, key)
                             : once_complete(st, scope, key, r.token, NULL, fp[0] && model_fp_ok(fp) ? fp : NULL);
        if (src != 0)
            __builtin_trap();
    } else {
        /* Another input used the same name: an answer from the row. */
        if (!once_reserve_status_name(r.status) || !r.action.key || strcmp(r.action.key, key) != 0 ||
            strcmp(r.action.scope, scope) != 0)
            __builtin_trap();
    }
    once_reservation_free(&r);
    if (++g_reserves % SWEEP_EVERY == 0) {
        size_t n;
        if (once_sweep(st, once_now_ms() + 3650LL * 24 * 3600 * 1000, &n) != 0)
            __builtin_trap();
    }
}

/* Splits data at the first two 0x00 bytes into up to three NUL-terminated
 * strings (missing parts are ""); the rest after the third is the request
 * blob. */
static void split3(const uint8_t *data, size_t size, char *buf, const char *parts[3], const uint8_t **rest,
                   size_t *rest_len)
{
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t pos = 0;
    for (int p = 0; p < 3; p++) {
        if (pos > size) {
            parts[p] = "";
            continue;
        }
        parts[p] = buf + pos;
        pos += strlen(buf + pos) + 1;
    }
    *rest = pos < size ? data + pos : NULL;
    *rest_len = pos < size ? size - pos : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';

    check_validators(s);
    check_cursor(s, size ? data[0] : 0);
    /* Cursors are decimal row ids: also try the input mapped to digits, so
     * that long numbers (overflow, out of range ids) come up quickly. */
    if (size > 1) {
        size_t n = size - 1 < 40 ? size - 1 : 40;
        char digits[41];
        for (size_t i = 0; i < n; i++)
            digits[i] = (char)('0' + data[1 + i] % 10);
        digits[n] = '\0';
        check_cursor(digits, data[0]);
    }

    if (size > 0 && size <= RESERVE_MAX_INPUT) {
        char *buf = malloc(size);
        if (buf) {
            const char *parts[3];
            const uint8_t *rest;
            size_t rest_len;
            /* The first byte picks options; the rest is scope\0key\0fp\0blob. */
            split3(data + 1, size - 1, buf, parts, &rest, &rest_len);
            check_reserve(parts[0], parts[1], parts[2], rest, rest_len, data[0]);
            free(buf);
        }
    }
    free(s);
    return 0;
}
