/*
 * http.c — the HTTP front on libmicrohttpd: the listeners, the header phase
 * (every check that needs no body: framing, browsers, route, access,
 * admission, size — docs/security.md, decide before reading), body collection
 * with a cap and a deadline, and handing the request to its route.
 *
 * MHD calls the access handler several times per request: once with the
 * headers, once per body chunk, once at the end, and once more after a
 * parked (suspended) connection is resumed. The request object (req.c)
 * carries the request across those calls and owns its answer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pct.h"
#include "server/front/access.h"
#include "server/front/guard.h"
#include "server/front/http.h"
#include "server/core/log.h"
#include "server/front/req.h"
#include "server/core/services.h"
#include "server/front/lot.h"

/* libmicrohttpd's idle timeout: a connection silent this long is closed. */
#define HTTP_IDLE_SECONDS 15

/* ---- MHD callbacks ------------------------------------------------------ */

/* Called first for every request with the raw target (query included),
 * which the access handler no longer sees; it becomes the request context. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)conn;
    http_listener *l = cls;
    return req_new(l->srv, l->up, l->route, l->tls, uri);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    req *r = *req_cls;
    *req_cls = NULL;
    guard_receiving(conn, GUARD_NEXT);
    if (r)
        req_release(r);
}

static enum MHD_Result send_ready(req *r)
{
    unsigned status;
    struct MHD_Response *resp = req_take_answer(r, &status);
    if (!resp) {
        static const char oom[] = "{\"type\":\"about:blank\",\"title\":\"Internal error\",\"status\":500,"
                                  "\"code\":\"internal\",\"detail\":\"out of memory\"}";
        resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        status = 500;
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "application/problem+json");
    }
    if (r->outcome)
        MHD_add_response_header(resp, "Once-Outcome", r->outcome);
    if (r->match.rt && r->match.rt->relays) {
        /* An upstream's answer is not the gateway's page: rendered in an
         * operator's browser on the console's origin, its script must run
         * nowhere (API clients ignore both). */
        MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    }
    for (int i = 0; i < r->nextra; i++)
        MHD_add_response_header(resp, r->extra_name[i], r->extra_value[i]);
    enum MHD_Result ok = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    metrics_http(r->srv->metrics, status);
    if (r->who && r->outcome)
        metrics_agent_action(r->srv->metrics, r->who->name, r->outcome);
    log_request(r->method, r->route, r->who ? r->who->name : NULL, r->scope[0] ? r->scope : NULL,
                r->key_hash[0] ? r->key_hash : NULL, status, r->outcome, r->upstream_ms,
                (clock_mono_seconds() - r->t0) * 1e3);
    return ok;
}

/* What the header phase learns from the header fields in one pass. */
typedef struct head_scan {
    int content_length;
    const char *first_cl;
    int cl_differ;
    int transfer_encoding;
    int hosts;
    int bad_field; /* a name that is not a token, or a value with a CR or LF */
} head_scan;

/* Whether name is an RFC 9110 token (tchar+): a folded line or a bare CR
 * that libmicrohttpd let through shows up as a name with ':' or a space. */
static int field_name_valid(const char *name)
{
    if (!name || !*name)
        return 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (!(pct_unreserved(*c) || (*c > 0x20 && *c < 0x7f && strchr("!#$%&'*+^`|", *c))))
            return 0;
    return 1;
}

/* Whether value holds no CR or LF: a bare CR is a line end to some
 * providers, which would then read the header fields once promises to drop
 * (RFC 9112 2.2: reject, never forward). Other control characters end no
 * line anywhere; the routes judge them (an Idempotency-Key with one is 400
 * invalid_key). */
static int field_value_valid(const char *value)
{
    return !value || strpbrk(value, "\r\n") == NULL;
}

static enum MHD_Result head_scan_field(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
    (void)kind;
    head_scan *f = cls;
    if (!field_name_valid(name) || !field_value_valid(value))
        f->bad_field = 1;
    if (!name)
        return MHD_YES;
    if (strcasecmp(name, "Content-Length") == 0) {
        if (f->content_length++ && (!value || !f->first_cl || strcmp(value, f->first_cl) != 0))
            f->cl_differ = 1;
        if (!f->first_cl)
            f->first_cl = value;
    } else if (strcasecmp(name, "Transfer-Encoding") == 0) {
        f->transfer_encoding = 1;
    } else if (strcasecmp(name, "Host") == 0) {
        f->hosts++;
    }
    return MHD_YES;
}

/* The checks of the header fields themselves, before any is believed:
 * fields that are not HTTP (a bare CR, a folded line), a length
 * that is ambiguous (two different Content-Lengths, or one beside
 * Transfer-Encoding: how requests get smuggled past proxies, RFC 9112 6.3),
 * and a Host that names no one host. 0, or -1 with p. */
static int front_fields(req *r, problem *p)
{
    head_scan f = {0};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, head_scan_field, &f);
    if (f.bad_field)
        return problem_set(p, 400, "bad_request", "Bad request",
                           "a header field with a bare CR or LF in its value, or a folded line "
                           "(RFC 9112 2.2, 5.2); nothing was sent");
    if (f.cl_differ || (f.content_length && f.transfer_encoding))
        return problem_set(p, 400, "bad_request", "Bad request",
                           "ambiguous message length (Content-Length repeated or beside Transfer-Encoding)");
    const char *host = req_header(r, "Host");
    if (f.hosts > 1 || (host && !access_host_valid(host)))
        return problem_set(p, 400, "bad_request", "Bad request",
                           f.hosts > 1 ? "more than one Host header" : "Host must be host[:port] (RFC 3986)");
    return 0;
}

/* TRACE would echo the request, credentials once injected included, back
 * to the agent; CONNECT would make once a tunnel. Neither is served, on any
 * route, before anything is stored or sent. */
static int front_method(req *r, problem *p)
{
    if (strcmp(r->method, "TRACE") != 0 && strcmp(r->method, "CONNECT") != 0)
        return 0;
    problem_set(p, 405, "method_not_allowed", "Method not allowed", "once serves neither TRACE nor CONNECT");
    p->header = "Allow";
    snprintf(p->header_value, sizeof p->header_value, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
    return -1;
}

/* The header phase: everything that can be decided before a body byte is
 * read. 0 with r->handler set, or -1 with p. */
static int front_decide(req *r, problem *p)
{
    server *srv = r->srv;
    const once_config *cfg = srv->cfg;
    r->route = "any";
    if (front_fields(r, p) < 0 || front_method(r, p) < 0)
        return -1;
    if (lot_stopping(srv->lot)) {
        /* A kept-alive connection sent one more: nothing new starts now. */
        req_set_header(r, "Connection", "close");
        return problem_set(p, 503, "shutting_down", "Shutting down", "the gateway is stopping; retry elsewhere");
    }
    if (access_browser(cfg, r->tls, req_header(r, "Host"), req_header(r, "Origin"), req_header(r, "Sec-Fetch-Site"),
                       p) < 0)
        return -1;
    if (r->listen_up) {
        r->match = (route_match){.rt = r->listen_route, .rest = r->uri, .query = ""};
        r->up = r->listen_up;
    } else if (router_match(srv->router, r->uri, &r->match, p) < 0) {
        r->route = "none";
        return -1;
    }
    const route *rt = r->match.rt;
    r->route = rt->name;
    char rpath[ONCE_SCOPE_MAX + 16] = "";
    if (strcmp(rt->name, "mcp") == 0 && r->match.seglen[0] <= ONCE_SCOPE_MAX)
        snprintf(rpath, sizeof rpath, "/v1/mcp/%.*s", (int)r->match.seglen[0], r->match.seg[0]);
    const access_in in = {.cfg = req_access_cfg(r),
                          .keys = srv->jwks,
                          .authorization = req_header(r, "Authorization"),
                          .resource_path = rpath,
                          .query = strchr(r->uri, '?'),
                          .now = once_now_ms() / 1000};
    int arc = access_decide(&in, rt->access, &r->ident, &r->who, p);
    if (r->ident.jwt)
        metrics_jwt(srv->metrics, r->ident.result);
    if (arc < 0)
        return -1;
    if (rt->admit && rt->admit(r, p) < 0)
        return -1;
    if (router_method(&r->match, r->method, &r->handler, p) < 0)
        return -1;
    const char *cl = req_header(r, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > cfg->max_body) {
        /* Answered before the body arrives: MHD then closes the connection
         * instead of reading megabytes it would drop. */
        r->too_large = 1;
        return problem_set(p, 413, "body_too_large", "Body too large", "the body exceeds max_body (%zu bytes)",
                           cfg->max_body);
    }
    return 0;
}

/* The body is complete: run the route (or refuse what came up since). */
static void dispatch(req *r)
{
    server *srv = r->srv;
    guard_receiving(r->conn, GUARD_DONE);
    if (lot_stopping(srv->lot)) {
        req_set_header(r, "Connection", "close");
        req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping; retry elsewhere");
    } else if (r->too_large) {
        req_problem(r, 413, "body_too_large", "Body too large", NULL, "the body exceeds max_body (%zu bytes)",
                    srv->cfg->max_body);
    } else {
        r->handler(r);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)cls;
    (void)url;
    (void)version;
    req *r = *req_cls;
    if (!r)
        return MHD_NO; /* out of memory in on_uri: drop the connection */
    if (!r->started) {
        r->started = 1;
        r->conn = conn;
        r->method = method;
        problem p;
        if (front_decide(r, &p) < 0) {
            r->dispatched = 1;
            guard_receiving(conn, GUARD_DONE);
            req_problem_from(r, &p);
            return send_ready(r);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* A body that trickles in past the deadline is cut off here; the
         * guard's reaper catches one that stops coming at all. */
        if (guard_overdue(conn))
            return MHD_NO;
        if (!r->too_large &&
            buf_append(&r->body, upload_data, *upload_data_size, r->srv->cfg->max_body) < 0)
            r->too_large = 1;
        *upload_data_size = 0; /* consumed (or dropped past the cap) */
        return MHD_YES;
    }
    if (req_ready(r))
        return send_ready(r);
    if (r->dispatched)
        return MHD_YES; /* resumed spuriously; the answer is not there yet */
    r->dispatched = 1;
    dispatch(r);
    /* Park unless the route has answered already. */
    return req_park(r) ? send_ready(r) : MHD_YES;
}

/* Reads a PEM file whole, for libmicrohttpd's in-memory TLS options. */
static char *http_read_pem(const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "re");
    char *data = NULL;
    size_t len = 0, cap = 0;
    if (!fp) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t want = cap ? cap * 2 : 8192;
            char *grown = want <= (1u << 20) ? realloc(data, want) : NULL;
            if (!grown) {
                snprintf(err, errlen, "%s: too large, or out of memory", path);
                free(data);
                fclose(fp);
                return NULL;
            }
            data = grown;
            cap = want;
        }
        size_t n = fread(data + len, 1, cap - len - 1, fp);
        len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        snprintf(err, errlen, "cannot read %s", path);
        free(data);
        return NULL;
    }
    data[len] = '\0';
    return data;
}

/* The listening socket, bound here rather than by libmicrohttpd so that a
 * busy port is an error that says so (no SO_REUSEPORT: two gateways on one
 * port would split its traffic between them). -1 with err. */
static int http_bind(const struct sockaddr *sa, socklen_t len, const char *addr, char *err, size_t errlen)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int on = 1;
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
        return -1;
    }
    /* REUSEADDR: a restart may bind while old connections sit in TIME_WAIT. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        (sa->sa_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0) ||
        bind(fd, sa, len) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on %s (%s)", addr,
                 e == EADDRINUSE ? "in use" : e == EACCES ? "not permitted" : strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

int http_bind_listener(http_listener *l, const char *addr, char *err, size_t errlen)
{
    char host[256];
    unsigned port;
    l->fd = -1;
    l->addr = addr;
    if (config_parse_listen(addr, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "bad listen address '%s'", addr);
        return -1;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const char *h = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    socklen_t sslen;
    if (inet_pton(AF_INET, h, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        sslen = sizeof *in4;
    } else if (inet_pton(AF_INET6, h, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        sslen = sizeof *in6;
        l->ipv6 = 1;
    } else {
        snprintf(err, errlen, "listen address '%s' is not an IP literal", addr);
        return -1;
    }
    l->fd = http_bind((struct sockaddr *)&ss, sslen, addr, err, errlen);
    return l->fd < 0 ? -1 : 0;
}

struct MHD_Daemon *http_listen(http_listener *l, int threads, unsigned max_conn, char *err, size_t errlen)
{
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | (l->ipv6 ? MHD_USE_IPv6 : 0);
    char *cert = NULL, *key = NULL;
    if (l->tls_cert) {
        if (!(cert = http_read_pem(l->tls_cert, err, errlen)) || !(key = http_read_pem(l->tls_key, err, errlen))) {
            free(cert);
            return NULL;
        }
        flags |= MHD_USE_TLS;
    }
    l->tls = cert != NULL;
    guard *g = l->srv->guard;
    /* GnuTLS's secure defaults, TLS 1.2 and 1.3 only: 1.0 and 1.1 are
     * deprecated (RFC 8996). */
    static const char tls_priorities[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
    struct MHD_OptionItem tls_opts[] = {
        {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)tls_priorities},
        {MHD_OPTION_END, 0, NULL},
    };
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, guard_accept, g, on_request, l, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l->fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_CONNECTION_LIMIT, max_conn,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_SECONDS, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)32 * 1024, MHD_OPTION_URI_LOG_CALLBACK, on_uri, l, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, guard_notify, g,
        /* Reject what HTTP/1.1 forbids (a missing Host, say) rather than guess. */
        MHD_OPTION_STRICT_FOR_CLIENT, (int)1, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    /* MHD copied neither: they must outlive the daemon, which owns l. */
    l->tls_mem_cert = cert;
    l->tls_mem_key = key;
    if (d)
        l->fd = -1; /* the daemon's now */
    else
        snprintf(err, errlen, "cannot serve on %s (a bad TLS certificate or key, or out of resources)", l->addr);
    return d;
}

void http_listener_close(http_listener *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    free(l->tls_mem_cert);
    free(l->tls_mem_key);
    l->tls_mem_cert = l->tls_mem_key = NULL;
}

int64_t http_idle_ms(void)
{
    return HTTP_IDLE_SECONDS * 1000LL;
}
