/*
 * validate.c — what the ledger accepts as keys, scopes, tokens and states.
 *
 * Keys and scopes come straight from agents over HTTP; every rule here is
 * checked before anything touches a store, so stores never see bad input.
 */
#include <string.h>

#include "ledger/store.h"
#include "ledger/validate.h"

int once_key_validate(const char *key)
{
    if (!key)
        return once_fail(ONCE_EINVAL, "key: missing");
    size_t n = strnlen(key, ONCE_KEY_MAX + 1);
    if (n == 0)
        return once_fail(ONCE_EINVAL, "key: empty");
    if (n > ONCE_KEY_MAX)
        return once_fail(ONCE_EINVAL, "key: longer than %d bytes", ONCE_KEY_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c > 0x7e)
            return once_fail(ONCE_EINVAL, "key: byte %zu (0x%02x) is not printable ASCII", i, c);
    }
    return ONCE_OK;
}

int once_scope_validate(const char *scope)
{
    if (!scope)
        return once_fail(ONCE_EINVAL, "scope: missing");
    size_t n = strnlen(scope, ONCE_SCOPE_MAX + 1);
    if (n == 0)
        return once_fail(ONCE_EINVAL, "scope: empty");
    if (n > ONCE_SCOPE_MAX)
        return once_fail(ONCE_EINVAL, "scope: longer than %d bytes", ONCE_SCOPE_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)scope[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        if (!ok)
            return once_fail(ONCE_EINVAL, "scope: byte %zu (0x%02x) is not one of [A-Za-z0-9._-]", i, c);
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
    if (printable) {
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c > 0x7e)
                return once_fail(ONCE_EINVAL, "%s: byte %zu is not printable ASCII", what, i);
        }
    }
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
    }
    return NULL;
}
