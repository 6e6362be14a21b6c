/*
 * http.c — the HTTP front on libmicrohttpd: request contexts, body
 * collection with a cap, parking and resuming, auth, problem+json, routing,
 * and the operations routes (/healthz, /readyz, /metrics).
 *
 * MHD calls the access handler several times per request: once with the
 * headers, once per body chunk, once at the end, and once more after a
 * parked (suspended) connection is resumed. The req context carries the
 * request across those calls; its `ready` flag, under its own mutex, settles
 * the race between a route finishing on another thread and the HTTP thread
 * parking the connection.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include "ledger/internal.h"
#include "server/http.h"
#include "server/hooks.h"
#include "server/log.h"
#include "server/pct.h"
#include "server/server.h"

double req_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct MHD_Response *resp_bytes(const void *data, size_t len, const char *content_type)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)(len ? data : ""),
                                                                MHD_RESPMEM_MUST_COPY);
    if (resp && content_type && MHD_add_response_header(resp, "Content-Type", content_type) != MHD_YES) {
        MHD_destroy_response(resp);
        return NULL;
    }
    return resp;
}

static void req_free(req *r);

void req_reply(req *r, unsigned status, struct MHD_Response *resp)
{
    pthread_mutex_lock(&r->mu);
    if (r->ready) {
        /* A second answer is a bug in a route; keep the first. */
        pthread_mutex_unlock(&r->mu);
        if (resp)
            MHD_destroy_response(resp);
        return;
    }
    r->status = status;
    r->resp = resp;
    r->ready = 1;
    if (r->orphaned) {
        /* The client is gone and MHD has let go: the answer has nowhere to
         * go, and this was the last hand holding the request. */
        pthread_mutex_unlock(&r->mu);
        req_free(r);
        return;
    }
    if (r->parked) {
        r->parked = 0;
        MHD_resume_connection(r->conn);
        server *srv = r->srv;
        pthread_mutex_lock(&srv->mu);
        srv->parked--;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_mutex_unlock(&r->mu);
}

void req_json(req *r, unsigned status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    struct MHD_Response *resp = s ? resp_bytes(s, strlen(s), "application/json") : NULL;
    free(s);
    req_reply(r, status, resp);
}

static struct MHD_Response *problem_response(unsigned status, const char *code, const char *title, json_t *extra,
                                             const char *detail)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s}", "type", "about:blank", "title", title, "status", (int)status,
                          "code", code, "detail", detail);
    if (o && extra)
        json_object_update(o, extra);
    json_decref(extra);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    struct MHD_Response *resp = s ? resp_bytes(s, strlen(s), "application/problem+json") : NULL;
    free(s);
    return resp;
}

void req_problem(req *r, unsigned status, const char *code, const char *title, json_t *extra, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    once_vformat(detail, sizeof detail, fmt, ap);
    va_end(ap);
    req_reply(r, status, problem_response(status, code, title, extra, detail));
}

void req_not_started(req *r, const char *why)
{
    if (__atomic_load_n(&r->srv->stopping, __ATOMIC_ACQUIRE))
        req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping; nothing was done");
    else
        req_problem(r, 500, "internal", "Internal error", NULL, "%s; nothing was done", why);
}

void req_set_header(req *r, const char *name, const char *value)
{
    if (r->nextra >= 3)
        return;
    snprintf(r->extra_name[r->nextra], sizeof r->extra_name[0], "%s", name);
    snprintf(r->extra_value[r->nextra], sizeof r->extra_value[0], "%s", value);
    r->nextra++;
}

const char *req_header(req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

void req_note_key(req *r, const char *scope, const char *key)
{
    snprintf(r->scope, sizeof r->scope, "%s", scope ? scope : "");
    char fp[65];
    if (key && once_fingerprint("key", scope ? scope : "", (const uint8_t *)key, strlen(key), fp) == ONCE_OK)
        snprintf(r->key_hash, sizeof r->key_hash, "%.16s", fp);
}

/* ---- auth ---------------------------------------------------------------- */

/* Compares the bearer token with every configured one in constant time per
 * token, so timing tells nothing about how much of a token matched. */
static int auth_ok(req *r)
{
    const once_config *cfg = r->srv->cfg;
    if (cfg->ntokens == 0)
        return 1;
    const char *h = req_header(r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *tok = h + 7;
    size_t n = strlen(tok);
    int ok = 0;
    for (size_t i = 0; i < cfg->ntokens; i++) {
        size_t tn = strlen(cfg->tokens[i]);
        if (tn == n && CRYPTO_memcmp(tok, cfg->tokens[i], n) == 0)
            ok = 1;
    }
    return ok;
}

/* ---- operations routes ------------------------------------------------- */

static void ops_metrics(req *r)
{
    buf b = {0};
    if (metrics_render(r->srv->metrics, &b) < 0) {
        buf_free(&b);
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot render metrics");
        return;
    }
    char extra[128];
    snprintf(extra, sizeof extra,
             "# HELP once_upstream_in_flight Upstream calls running now.\n"
             "# TYPE once_upstream_in_flight gauge\nonce_upstream_in_flight %zu\n",
             outbound_in_flight(r->srv->ob));
    buf_append_str(&b, extra, (size_t)1 << 30);
    struct MHD_Response *resp = resp_bytes(b.data, b.len, "text/plain; version=0.0.4");
    buf_free(&b);
    req_reply(r, 200, resp);
}

static void route(req *r)
{
    const char *uri = r->uri;
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    const char *m = r->method;
    if (r->listen_up) {
        r->route = "proxy";
        if (!auth_ok(r))
            goto unauthorized;
        proxy_handle(r, r->listen_up, uri);
        return;
    }
#define PATH_IS(lit) (plen == sizeof(lit) - 1 && strncmp(uri, lit, plen) == 0)
    if (PATH_IS("/healthz") || PATH_IS("/readyz") || PATH_IS("/metrics")) {
        r->route = uri[1] == 'h' ? "healthz" : uri[1] == 'r' ? "readyz" : "metrics";
        if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
            req_set_header(r, "Allow", "GET, HEAD");
            req_problem(r, 405, "method_not_allowed", "Method not allowed", NULL, "use GET");
            return;
        }
        if (uri[1] == 'h') {
            req_json(r, 200, json_pack("{s:s}", "status", "ok"));
        } else if (uri[1] == 'r') {
            if (__atomic_load_n(&r->srv->stopping, __ATOMIC_ACQUIRE))
                req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping");
            else if (once_store_ping(r->srv->store) == ONCE_OK)
                req_json(r, 200, json_pack("{s:s}", "status", "ready"));
            else
                req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "%s", once_errdetail());
        } else {
            ops_metrics(r);
        }
        return;
    }
    if (plen >= 10 && strncmp(uri, "/v1/proxy/", 10) == 0) {
        r->route = "proxy";
        if (!auth_ok(r))
            goto unauthorized;
        if (!pct_valid(uri)) {
            req_problem(r, 400, "bad_request", "Bad request", NULL, "malformed percent-encoding in the path");
            return;
        }
        const char *name = uri + 10;
        const char *slash = memchr(name, '/', plen - 10);
        size_t nlen = slash ? (size_t)(slash - name) : plen - 10;
        char upname[ONCE_SCOPE_MAX + 1];
        if (nlen == 0 || nlen > ONCE_SCOPE_MAX) {
            req_problem(r, 404, "unknown_upstream", "Unknown upstream", NULL, "no upstream in the path");
            return;
        }
        memcpy(upname, name, nlen);
        upname[nlen] = '\0';
        const upstream_cfg *up = config_upstream(r->srv->cfg, upname);
        if (!up) {
            req_problem(r, 404, "unknown_upstream", "Unknown upstream", NULL, "no upstream named '%s'", upname);
            return;
        }
        /* The target keeps the slash: /v1/proxy/demo/x?y -> /x?y */
        const char *target = slash ? slash : name + nlen;
        proxy_handle(r, up, target);
        return;
    }
    if (PATH_IS("/v1/actions") || (plen > 11 && strncmp(uri, "/v1/actions/", 12) == 0)) {
        r->route = "actions";
        if (!auth_ok(r))
            goto unauthorized;
        char path[2048];
        if (plen >= sizeof path) {
            req_problem(r, 414, "bad_request", "URI too long", NULL, "the path is too long");
            return;
        }
        memcpy(path, uri, plen);
        path[plen] = '\0';
        actions_handle(r, path, q ? q + 1 : "");
        return;
    }
    if (plen > 10 && strncmp(uri, "/v1/hooks/", 10) == 0) {
        /* No bearer token: a webhook is authenticated by its signature. */
        r->route = "hooks";
        char source[ONCE_SCOPE_MAX + 2];
        if (pct_decode(uri + 10, plen - 10, source, sizeof source) < 0 || strchr(source, '/')) {
            req_problem(r, 404, "unknown_source", "Unknown source", NULL, "no such webhook source");
            return;
        }
        hooks_ingest(r, source);
        return;
    }
    if (plen > 10 && strncmp(uri, "/v1/inbox/", 10) == 0) {
        r->route = "inbox";
        if (!auth_ok(r))
            goto unauthorized;
        const char *name = uri + 10;
        const char *slash = memchr(name, '/', plen - 10);
        char source[ONCE_SCOPE_MAX + 2];
        const char *verb = slash ? slash + 1 : "";
        size_t vlen = slash ? plen - (size_t)(verb - uri) : 0;
        if (!slash || pct_decode(name, (size_t)(slash - name), source, sizeof source) < 0 ||
            !((vlen == 5 && strncmp(verb, "claim", 5) == 0) || (vlen == 3 && strncmp(verb, "ack", 3) == 0) ||
              (vlen == 4 && strncmp(verb, "nack", 4) == 0))) {
            req_problem(r, 404, "not_found", "Not found", NULL, "use /v1/inbox/{source}/claim, ack or nack");
            return;
        }
        char v[8];
        snprintf(v, sizeof v, "%.*s", (int)vlen, verb);
        inbox_handle(r, source, v);
        return;
    }
#undef PATH_IS
    r->route = "none";
    req_problem(r, 404, "not_found", "Not found", NULL, "no route for %.200s", uri);
    return;
unauthorized:
    req_set_header(r, "WWW-Authenticate", "Bearer");
    req_problem(r, 401, "unauthorized", "Unauthorized", NULL, "a valid 'Authorization: Bearer' token is required");
}

/* ---- MHD callbacks ------------------------------------------------------ */

/* Called first for every request with the raw target (query included),
 * which the access handler no longer sees; it becomes the request context. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)conn;
    http_listener *l = cls;
    req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->srv = l->srv;
    r->listen_up = l->up;
    r->uri = strdup(uri ? uri : "/");
    r->upstream_ms = -1;
    r->t0 = req_clock_ms();
    pthread_mutex_init(&r->mu, NULL);
    if (!r->uri) {
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

static void req_free(req *r)
{
    if (r->state_free)
        r->state_free(r->state);
    if (r->resp)
        MHD_destroy_response(r->resp);
    buf_free(&r->body);
    free(r->uri);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    req *r = *req_cls;
    *req_cls = NULL;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    if (r->dispatched && !r->ready) {
        /* A route still works on it on another thread (MHD closes a
         * connection whose client left, even one it was asked to suspend):
         * the answer, when it comes, frees it. */
        r->orphaned = 1;
        if (r->parked) {
            r->parked = 0;
            pthread_mutex_lock(&r->srv->mu);
            r->srv->parked--;
            pthread_cond_broadcast(&r->srv->cv);
            pthread_mutex_unlock(&r->srv->mu);
        }
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    req_free(r);
}

static enum MHD_Result send_ready(req *r)
{
    struct MHD_Response *resp = r->resp;
    unsigned status = r->status;
    r->resp = NULL;
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
    for (int i = 0; i < r->nextra; i++)
        MHD_add_response_header(resp, r->extra_name[i], r->extra_value[i]);
    enum MHD_Result ok = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    metrics_http(r->srv->metrics, status);
    log_request(r->method, r->route, r->scope[0] ? r->scope : NULL, r->key_hash[0] ? r->key_hash : NULL, status,
                r->outcome, r->upstream_ms, req_clock_ms() - r->t0);
    return ok;
}

typedef struct framing {
    int content_length;
    const char *first_cl;
    int cl_differ;
    int transfer_encoding;
} framing;

static enum MHD_Result framing_scan(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (strcasecmp(name, "Content-Length") == 0) {
        if (f->content_length++ && (!value || !f->first_cl || strcmp(value, f->first_cl) != 0))
            f->cl_differ = 1;
        if (!f->first_cl)
            f->first_cl = value;
    } else if (strcasecmp(name, "Transfer-Encoding") == 0) {
        f->transfer_encoding = 1;
    }
    return MHD_YES;
}

/* Requests whose length is ambiguous (two different Content-Lengths, or a
 * Content-Length beside Transfer-Encoding) are how requests get smuggled
 * past proxies: RFC 9112 6.3 says reject them. */
static int framing_ambiguous(struct MHD_Connection *conn)
{
    framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_scan, &f);
    return f.cl_differ || (f.content_length && f.transfer_encoding);
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
        if (framing_ambiguous(conn)) {
            r->dispatched = 1;
            r->route = "any";
            req_problem(r, 400, "bad_request", "Bad request", NULL,
                        "ambiguous message length (Content-Length repeated or beside Transfer-Encoding)");
            return send_ready(r);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > r->srv->cfg->max_body) {
            /* Answer before the body arrives: MHD then closes the
             * connection instead of reading megabytes it will drop. */
            r->too_large = 1;
            r->dispatched = 1;
            r->route = "any";
            req_problem(r, 413, "body_too_large", "Body too large", NULL, "the body exceeds max_body (%zu bytes)",
                        r->srv->cfg->max_body);
            return send_ready(r);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_large &&
            buf_append(&r->body, upload_data, *upload_data_size, r->srv->cfg->max_body) < 0)
            r->too_large = 1;
        *upload_data_size = 0; /* consumed (or dropped past the cap) */
        return MHD_YES;
    }
    pthread_mutex_lock(&r->mu);
    int ready = r->ready;
    pthread_mutex_unlock(&r->mu);
    if (ready)
        return send_ready(r);
    if (r->dispatched)
        return MHD_YES; /* resumed spuriously; the answer is not there yet */
    r->dispatched = 1;
    if (__atomic_load_n(&r->srv->stopping, __ATOMIC_ACQUIRE)) {
        /* A kept-alive connection sent one more: nothing new starts now. */
        r->route = "any";
        req_set_header(r, "Connection", "close");
        req_problem(r, 503, "shutting_down", "Shutting down", NULL, "the gateway is stopping; retry elsewhere");
    } else if (r->too_large) {
        r->route = "any";
        req_problem(r, 413, "body_too_large", "Body too large", NULL, "the body exceeds max_body (%zu bytes)",
                    r->srv->cfg->max_body);
    } else {
        route(r);
    }
    /* Park unless the route has answered already. */
    pthread_mutex_lock(&r->mu);
    ready = r->ready;
    if (!ready) {
        MHD_suspend_connection(conn);
        r->parked = 1;
        server *srv = r->srv;
        pthread_mutex_lock(&srv->mu);
        srv->parked++;
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return ready ? send_ready(r) : MHD_YES;
}

struct MHD_Daemon *http_listen(http_listener *l, const char *addr, int threads, unsigned max_conn, char *err,
                               size_t errlen)
{
    char host[256];
    unsigned port;
    if (config_parse_listen(addr, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "bad listen address '%s'", addr);
        return NULL;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const char *h = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (inet_pton(AF_INET, h, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, h, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "listen address '%s' is not an IP literal", addr);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, l, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_CONNECTION_LIMIT, max_conn,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)15, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32 * 1024,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, l, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        /* Reject what HTTP/1.1 forbids (a missing Host, say) rather than guess. */
        MHD_OPTION_STRICT_FOR_CLIENT, (int)1, MHD_OPTION_END);
    if (!d)
        snprintf(err, errlen, "cannot listen on %s (in use, or not permitted)", addr);
    return d;
}
