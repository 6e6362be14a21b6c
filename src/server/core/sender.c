/*
 * sender.c — the kind of scope an action lives in (see sender.h).
 */
#include "server/core/sender.h"

scope_kind scope_kind_of(const upstream_cfg *up)
{
    return up->mcp ? SCOPE_MCP : SCOPE_HTTP;
}
