/*
 * guard.c — connection caps per client address and request deadlines (see
 * guard.h).
 *
 * Each connection gets a record when libmicrohttpd starts it (the notify
 * callback) and loses it when libmicrohttpd closes it; the reaper only
 * touches sockets of records it holds under the lock, and the close
 * notification takes the same lock before libmicrohttpd closes the socket,
 * so a socket is never shut down after its descriptor was reused.
 *
 * The cap is counted on the notify callback (exact under any number of
 * accepting threads): a connection over its client's cap is shut down at
 * once. The accept policy refuses such clients earlier, without that being
 * the only line.
 */
#include "server/front/guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/looper.h"

#define GUARD_BUCKETS 1024
#define GUARD_TICK_MS 100

typedef struct client {
    struct client *next;
    unsigned char addr[16];
    int family;
    unsigned count;
} client;

typedef struct conn_rec {
    struct conn_rec *prev, *next;
    guard *g;
    MHD_socket fd;
    client *cl;          /* NULL when not counted (over the cap) */
    int64_t deadline;    /* monotonic ms; 0 while nothing is being received */
} conn_rec;

struct guard {
    unsigned per_client;
    unsigned per_loopback;
    int64_t request_ms;
    int64_t idle_ms;
    int refusing; /* atomic: set once by guard_refuse_all, never cleared */
    pthread_mutex_t mu;
    client *buckets[GUARD_BUCKETS];
    conn_rec *conns;
    looper reaper;
};

int guard_is_loopback(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 1; /* a local socket */
}

/* The address bytes that name a client (an IPv4-mapped IPv6 address is the
 * IPv4 client it maps). */
static int client_key(const struct sockaddr *addr, unsigned char out[16])
{
    memset(out, 0, 16);
    if (addr->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return AF_INET;
    }
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(out, a->s6_addr + 12, 4);
            return AF_INET;
        }
        memcpy(out, a->s6_addr, 16);
        return AF_INET6;
    }
    return 0;
}

static unsigned client_hash(const unsigned char k[16])
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ k[i]) * 16777619u;
    return h % GUARD_BUCKETS;
}

/* The client record of addr; created when create is set. Under g->mu. */
static client *client_find(guard *g, const struct sockaddr *addr, int create)
{
    unsigned char k[16];
    int family = client_key(addr, k);
    client **slot = &g->buckets[client_hash(k)];
    for (client *c = *slot; c; c = c->next)
        if (c->family == family && memcmp(c->addr, k, 16) == 0)
            return c;
    if (!create)
        return NULL;
    client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    memcpy(c->addr, k, 16);
    c->family = family;
    c->next = *slot;
    *slot = c;
    return c;
}

static void client_release(guard *g, client *cl)
{
    if (--cl->count > 0)
        return;
    client **slot = &g->buckets[client_hash(cl->addr)];
    while (*slot != cl)
        slot = &(*slot)->next;
    *slot = cl->next;
    free(cl);
}

static unsigned guard_cap(const guard *g, const struct sockaddr *addr)
{
    return guard_is_loopback(addr) ? g->per_loopback : g->per_client;
}

enum MHD_Result guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    guard *g = cls;
    if (__atomic_load_n(&g->refusing, __ATOMIC_ACQUIRE))
        return MHD_NO;
    unsigned cap = guard_cap(g, addr);
    if (cap == 0)
        return MHD_YES;
    pthread_mutex_lock(&g->mu);
    client *c = client_find(g, addr, 0);
    int over = c && c->count >= cap;
    pthread_mutex_unlock(&g->mu);
    return over ? MHD_NO : MHD_YES;
}

/* The drain's closed door. libmicrohttpd's own way, MHD_quiesce_daemon,
 * races its pool's threads on epoll (0.9.75, and upstream's code today): it
 * removes the listen socket from a worker's epoll set that the worker may
 * have just removed it from itself, and panics on ENOENT. So the daemons
 * keep their listen sockets until MHD_stop_daemon, and the accept policy
 * closes whatever comes. */
void guard_refuse_all(guard *g)
{
    __atomic_store_n(&g->refusing, 1, __ATOMIC_RELEASE);
}

static void guard_started(guard *g, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    conn_rec *rec = calloc(1, sizeof *rec);
    if (!rec || !fd || !ad) {
        /* Unaccountable: better refused than uncapped. */
        free(rec);
        if (fd)
            shutdown(fd->connect_fd, SHUT_RDWR);
        return;
    }
    rec->g = g;
    rec->fd = fd->connect_fd;
    rec->deadline = clock_mono_ms() + g->request_ms;
    unsigned cap = guard_cap(g, ad->client_addr);
    pthread_mutex_lock(&g->mu);
    client *cl = client_find(g, ad->client_addr, 1);
    int refuse = !cl || (cap && cl->count >= cap);
    if (!refuse) {
        cl->count++;
        rec->cl = cl;
    }
    rec->next = g->conns;
    if (g->conns)
        g->conns->prev = rec;
    g->conns = rec;
    if (refuse)
        shutdown(rec->fd, SHUT_RDWR);
    pthread_mutex_unlock(&g->mu);
    *socket_context = rec;
}

static void guard_closed(guard *g, conn_rec *rec)
{
    pthread_mutex_lock(&g->mu);
    if (rec->prev)
        rec->prev->next = rec->next;
    else
        g->conns = rec->next;
    if (rec->next)
        rec->next->prev = rec->prev;
    if (rec->cl)
        client_release(g, rec->cl);
    pthread_mutex_unlock(&g->mu);
    free(rec);
}

void guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                  enum MHD_ConnectionNotificationCode code)
{
    guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        guard_started(g, conn, socket_context);
    else if (*socket_context)
        guard_closed(g, *socket_context);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        *socket_context = NULL;
}

static conn_rec *guard_rec(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void guard_receiving(struct MHD_Connection *conn, guard_phase phase)
{
    conn_rec *rec = guard_rec(conn);
    if (!rec)
        return;
    guard *g = rec->g;
    /* On a kept-alive connection the next request may not come at all:
     * libmicrohttpd's idle timeout closes a silent one, and the deadline
     * must not cut it sooner while the client may just be sending. */
    int64_t span = phase == GUARD_NEXT && g->idle_ms > g->request_ms ? g->idle_ms : g->request_ms;
    pthread_mutex_lock(&g->mu);
    rec->deadline = phase == GUARD_DONE ? 0 : clock_mono_ms() + span;
    pthread_mutex_unlock(&rec->g->mu);
}

int guard_overdue(struct MHD_Connection *conn)
{
    conn_rec *rec = guard_rec(conn);
    if (!rec)
        return 0;
    pthread_mutex_lock(&rec->g->mu);
    int64_t d = rec->deadline;
    pthread_mutex_unlock(&rec->g->mu);
    return d && clock_mono_ms() > d;
}

/* Shuts down the sockets of requests that are overdue; libmicrohttpd then
 * sees the connection end and closes it. */
static int64_t guard_reap(void *arg, looper_phase phase, looper_item *posted)
{
    guard *g = arg;
    (void)posted;
    if (phase == LOOPER_STOPPING)
        return LOOPER_DONE;
    pthread_mutex_lock(&g->mu);
    int64_t now = clock_mono_ms();
    for (conn_rec *rec = g->conns; rec; rec = rec->next) {
        if (rec->deadline && now > rec->deadline) {
            shutdown(rec->fd, SHUT_RDWR);
            rec->deadline = 0;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return GUARD_TICK_MS;
}

int guard_start(unsigned per_client, unsigned per_loopback, int64_t request_ms, int64_t idle_ms, guard **out)
{
    guard *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->per_client = per_client;
    g->per_loopback = per_loopback;
    g->request_ms = request_ms;
    g->idle_ms = idle_ms;
    pthread_mutex_init(&g->mu, NULL);
    if (looper_start(&g->reaper, "once-reaper", guard_reap, g) < 0) {
        guard_free(g); /* no connection, no reaper: it only destroys and frees */
        return -1;
    }
    *out = g;
    return 0;
}

void guard_free(guard *g)
{
    if (!g)
        return;
    looper_stop(&g->reaper);
    looper_close(&g->reaper);
    for (size_t i = 0; i < GUARD_BUCKETS; i++) {
        while (g->buckets[i]) {
            client *c = g->buckets[i];
            g->buckets[i] = c->next;
            free(c);
        }
    }
    while (g->conns) {
        conn_rec *rec = g->conns;
        g->conns = rec->next;
        free(rec);
    }
    pthread_mutex_destroy(&g->mu);
    free(g);
}
