/*
 * redact.h — which request headers are secrets (docs/security.md): never kept
 * in a stored request or a stored webhook event, whoever sent them.
 */
#ifndef ONCE_SERVER_REDACT_H
#define ONCE_SERVER_REDACT_H

#include <stddef.h>

#include "server/config/config.h"

/* Whether the header name (n bytes) is one never stored: Authorization,
 * Proxy-Authorization, Cookie, X-Api-Key, Api-Key, or one of the
 * configuration's redact_headers. Case-insensitive. */
int redact_header(const once_config *cfg, const char *name, size_t n);

#endif
