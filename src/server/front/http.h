/*
 * http.h — starting an HTTP listener of the gateway.
 */
#ifndef ONCE_SERVER_HTTP_H
#define ONCE_SERVER_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/core/services.h"
#include "server/front/req.h"
#include "server/front/router.h"

/* What a listener serves: the whole API, or (up set) one upstream; over
 * HTTPS when tls_cert is set. Must outlive the daemon. */
typedef struct http_listener {
    server *srv;
    const upstream_cfg *up;
    const route *route;     /* with up: the route every target takes (the proxy's, from server.c) */
    const char *tls_cert;   /* PEM file paths, or NULL */
    const char *tls_key;
    const char *addr;       /* "host:port", for messages */
    int fd;                 /* the bound socket until a daemon takes it; -1 */
    int ipv6;
    int tls;                /* set by http_listen */
    char *tls_mem_cert;     /* what libmicrohttpd reads them from; freed by http_listener_close */
    char *tls_mem_key;
} http_listener;

/* Binds and listens on addr ("host:port") first of all, so that a busy port
 * stops `once serve` before it opens a store: 0, or -1 with "cannot listen
 * on ADDR (in use)" (or why) in err. */
int http_bind_listener(http_listener *l, const char *addr, char *err, size_t errlen);

/* Starts a daemon on the bound listener with its own thread pool, guarded
 * by the server's guard. NULL and a message in err on failure. */
struct MHD_Daemon *http_listen(http_listener *l, int threads, unsigned max_conn, char *err, size_t errlen);

/* After its daemon stopped (or when none started): closes what is left. */
void http_listener_close(http_listener *l);

/* The daemons' idle timeout, for the guard. */
int64_t http_idle_ms(void);

#endif
