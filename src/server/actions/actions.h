/*
 * actions.h — the actions API's room: /v1/actions (reserve, complete,
 * release, unknown, list, show, resolve, approve, deny) for agents that
 * call providers themselves.
 */
#ifndef ONCE_SERVER_ACTIONS_H
#define ONCE_SERVER_ACTIONS_H

#include "server/front/router.h"

extern const route actions_routes[];

#endif
