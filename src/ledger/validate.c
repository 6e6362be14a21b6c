/*
 * validate.c — what the ledger accepts as keys, scopes, tokens and states.
 *
 * Keys and scopes come straight from agents over HTTP; every rule here is
 * checked before anything touches a store, so stores never see bad input.
 */
#include <math.h>
#include <string.h>

#include "common/utf8.h"
#include "ledger/store.h"
#include "ledger/validate.h"

/* Whether a byte may stand in a key, or in any text the ledger asks to be
 * printable: ASCII from space to tilde. */
static int byte_printable(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e;
}

/* Whether a byte may stand in a scope: scopes name files, metrics and URL
 * segments, so they keep to [A-Za-z0-9._-]. */
static int byte_scope(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* The rules keys and scopes share, said once: present, 1 to max bytes, every
 * byte allowed (allowed names the set in the detail). */
static int validate_name(const char *what, const char *s, size_t max, int (*byte_ok)(unsigned char),
                         const char *allowed)
{
    if (!s)
        return once_fail(ONCE_EINVAL, "%s: missing", what);
    size_t n = strnlen(s, max + 1);
    if (n == 0)
        return once_fail(ONCE_EINVAL, "%s: empty", what);
    if (n > max)
        return once_fail(ONCE_EINVAL, "%s: longer than %zu bytes", what, max);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!byte_ok(c))
            return once_fail(ONCE_EINVAL, "%s: byte %zu (0x%02x) is not %s", what, i, c, allowed);
    }
    return ONCE_OK;
}

/* Keys come from agents: any printable ASCII. */
int once_key_validate(const char *key)
{
    return validate_name("key", key, ONCE_KEY_MAX, byte_printable, "printable ASCII");
}

/* Scopes name files, metrics and URL segments: a narrow set. */
int once_scope_validate(const char *scope)
{
    return validate_name("scope", scope, ONCE_SCOPE_MAX, byte_scope, "one of [A-Za-z0-9._-]");
}

/* Agents name who asks in records, listings and metrics: the scopes' set. */
int validate_agent(const char *agent)
{
    return agent ? validate_name("agent", agent, ONCE_AGENT_MAX, byte_scope, "one of [A-Za-z0-9._-]") : ONCE_OK;
}

/* A limit is stored as text in both stores (PostgreSQL's text holds
 * UTF-8 only), so its identity must be UTF-8 to round-trip. */
int validate_limit(const char *limit, int64_t window_ms)
{
    if (!limit || !limit[0])
        return once_fail(ONCE_EINVAL, "limit: missing or empty");
    size_t n = strnlen(limit, ONCE_LIMIT_NAME_MAX + 1);
    if (n > ONCE_LIMIT_NAME_MAX)
        return once_fail(ONCE_EINVAL, "limit: longer than %d bytes", ONCE_LIMIT_NAME_MAX);
    if (!utf8_valid((const uint8_t *)limit, n))
        return once_fail(ONCE_EINVAL, "limit: not UTF-8");
    if (window_ms < ONCE_LIMIT_WINDOW_MIN_MS || window_ms > ONCE_LIMIT_WINDOW_MAX_MS)
        return once_fail(ONCE_EINVAL, "limit: the window must be between 1 s and 30 days");
    return ONCE_OK;
}

/* Every charge is checked before a store sees it: the stores' arithmetic
 * (buckets, sums, the JSON they keep) assumes finite positive numbers. */
int validate_charges(const once_limit_charge *charges, size_t n)
{
    if (n > ONCE_LIMIT_CHARGES_MAX || (n && !charges))
        return once_fail(ONCE_EINVAL, "charges: at most %d, and NULL only with none", ONCE_LIMIT_CHARGES_MAX);
    for (size_t i = 0; i < n; i++) {
        const once_limit_charge *c = &charges[i];
        int rc = validate_limit(c->limit, c->window_ms);
        if (rc < 0)
            return once_fail(rc, "charge %zu: %s", i, once_errdetail());
        if (!isfinite(c->max) || !(c->max > 0) || !isfinite(c->amount) || !(c->amount > 0))
            return once_fail(ONCE_EINVAL, "charge %zu: max and amount must be finite and > 0", i);
    }
    return ONCE_OK;
}

int validate_hex(const char *what, const char *s, size_t len)
{
    if (!s)
        return once_fail(ONCE_EINVAL, "%s: missing", what);
    size_t n = strnlen(s, len + 1);
    if (n != len)
        return once_fail(ONCE_EINVAL, "%s: must be %zu hex characters", what, len);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return once_fail(ONCE_EINVAL, "%s: must be %zu lower-case hex characters", what, len);
    }
    return ONCE_OK;
}

int validate_token(const char *token)
{
    return validate_hex("token", token, ONCE_TOKEN_LEN);
}

int validate_text(const char *what, const char *s, size_t max, int printable)
{
    if (!s)
        return ONCE_OK;
    size_t n = strnlen(s, max + 1);
    if (n > max)
        return once_fail(ONCE_EINVAL, "%s: longer than %zu bytes", what, max);
    for (size_t i = 0; printable && i < n; i++) {
        if (!byte_printable((unsigned char)s[i]))
            return once_fail(ONCE_EINVAL, "%s: byte %zu is not printable ASCII", what, i);
    }
    return ONCE_OK;
}

/* Cursors are the decimal id of the last row returned; ids only grow, so
 * paging by id never skips or repeats a row when others are inserted. */
int validate_cursor(const char *cursor, int64_t *after)
{
    *after = 0;
    if (!cursor || !*cursor)
        return ONCE_OK;
    size_t n = strnlen(cursor, ONCE_CURSOR_MAX);
    /* 18 digits always fit an int64_t; ids never come near that. */
    if (n > 18)
        return once_fail(ONCE_EINVAL, "cursor: malformed");
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (cursor[i] < '0' || cursor[i] > '9')
            return once_fail(ONCE_EINVAL, "cursor: malformed");
        v = v * 10 + (cursor[i] - '0');
    }
    *after = v;
    return ONCE_OK;
}

const char *once_reserve_status_name(once_reserve_status s)
{
    switch (s) {
    case ONCE_RESERVED: return "reserved";
    case ONCE_COMPLETED: return "completed";
    case ONCE_IN_FLIGHT: return "in_flight";
    case ONCE_UNKNOWN: return "unknown";
    case ONCE_HELD: return "held";
    case ONCE_AWAITING_APPROVAL: return "awaiting_approval";
    case ONCE_DENIED: return "denied";
    case ONCE_OVER_LIMIT: return "over_limit";
    }
    return NULL;
}
