/*
 * http.h — starting an HTTP listener of the gateway.
 */
#ifndef ONCE_SERVER_HTTP_H
#define ONCE_SERVER_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/server.h"

/* What a listener serves: the whole API, or (up set) one upstream; over
 * HTTPS when tls_cert is set. Must outlive the daemon. */
typedef struct http_listener {
    server *srv;
    const upstream_cfg *up;
    const char *tls_cert;   /* PEM file paths, or NULL */
    const char *tls_key;
    int tls;                /* set by http_listen */
    char *tls_mem_cert;     /* what libmicrohttpd reads them from; freed by the owner after the daemon */
    char *tls_mem_key;
} http_listener;

/* Starts a daemon on addr ("host:port") with its own thread pool, guarded
 * by the server's guard. NULL and a message in err on failure. */
struct MHD_Daemon *http_listen(http_listener *l, const char *addr, int threads, unsigned max_conn, char *err,
                               size_t errlen);

/* The daemons' idle timeout, for the guard. */
int64_t http_idle_ms(void);

#endif
