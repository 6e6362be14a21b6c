/*
 * http.h — starting an HTTP listener of the gateway.
 */
#ifndef ONCE_SERVER_HTTP_H
#define ONCE_SERVER_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/server.h"

/* What a listener serves: the whole API, or (up set) one upstream. Must
 * outlive the daemon. */
typedef struct http_listener {
    server *srv;
    const upstream_cfg *up;
} http_listener;

/* Starts a daemon on addr ("host:port") with its own thread pool. NULL and a
 * message in err on failure. */
struct MHD_Daemon *http_listen(http_listener *l, const char *addr, int threads, unsigned max_conn, char *err,
                               size_t errlen);

#endif
