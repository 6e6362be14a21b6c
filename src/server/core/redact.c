/*
 * redact.c — the headers that are never stored (see redact.h).
 */
#include "server/core/redact.h"

#include <string.h>
#include <strings.h>

int redact_header(const once_config *cfg, const char *name, size_t n)
{
    static const char *const secret[] = {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"};
    for (size_t i = 0; i < sizeof secret / sizeof secret[0]; i++)
        if (strlen(secret[i]) == n && strncasecmp(secret[i], name, n) == 0)
            return 1;
    for (size_t i = 0; i < cfg->nredact_headers; i++)
        if (strlen(cfg->redact_headers[i]) == n && strncasecmp(cfg->redact_headers[i], name, n) == 0)
            return 1;
    return 0;
}
