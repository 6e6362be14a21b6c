/*
 * guard.h — bounds on what one client can hold (docs/security.md): a cap on
 * connections per client address (loopback apart: one host may run many
 * agents), and a deadline on receiving each whole request, so a client that
 * trickles its headers or body is cut off however active it looks.
 *
 * It sits on libmicrohttpd's accept-policy and connection-notify callbacks;
 * a reaper thread shuts down the socket of a connection whose request is
 * overdue (libmicrohttpd's own timeout is an idle timeout, which a trickle
 * resets).
 */
#ifndef ONCE_SERVER_GUARD_H
#define ONCE_SERVER_GUARD_H

#include <stdint.h>
#include <sys/socket.h>

#include <microhttpd.h>

typedef struct guard guard;

/* per_client / per_loopback: connection caps per address (0: none);
 * request_ms: the whole-request deadline; idle_ms: the daemons' idle
 * timeout (a kept-alive connection's next request gets the longer of the
 * two). 0 or -1. */
int guard_start(unsigned per_client, unsigned per_loopback, int64_t request_ms, int64_t idle_ms, guard **out);
/* Stops the reaper; after every daemon using it has stopped. NULL is fine. */
void guard_free(guard *g);

/* For MHD_start_daemon: the accept policy (its cls is the guard) and
 * MHD_OPTION_NOTIFY_CONNECTION. */
enum MHD_Result guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                  enum MHD_ConnectionNotificationCode code);

/* From now on every new connection is closed as soon as it is accepted
 * (the drain at shutdown); those already open are not touched. Any thread. */
void guard_refuse_all(guard *g);

typedef enum guard_phase {
    GUARD_DONE = 0, /* the request has arrived whole (or was answered): no deadline */
    GUARD_NEXT = 1  /* the answer went out; a next request may come on this connection */
} guard_phase;

/* Moves the connection's deadline with its request. HTTP thread. */
void guard_receiving(struct MHD_Connection *conn, guard_phase phase);
/* Whether the connection's current request is past its deadline. */
int guard_overdue(struct MHD_Connection *conn);

/* Whether a client address is loopback (127.0.0.0/8, ::1, ::ffff:127.x). */
int guard_is_loopback(const struct sockaddr *addr);

#endif
