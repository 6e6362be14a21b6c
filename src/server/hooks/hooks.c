/*
 * hooks.c — webhook ingress (POST /v1/hooks/{source}) and the pull inbox
 * (POST /v1/inbox/{source}/claim|ack|nack).
 *
 * Ingress does three things and nothing else before it answers: check the
 * signature on the raw bytes, take the event id, and insert (source,
 * event_id) durably under the unique constraint. The provider gets its 2xx
 * as soon as the row is on disk; no model, no agent, no downstream call runs
 * inline, so a slow agent never makes a provider retry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/clock.h"
#include "json/event_json.h"
#include "json/json_items.h"
#include "common/json_pointer.h"
#include "server/hooks/hooks.h"
#include "server/core/grants.h"
#include "server/core/worker.h"
#include "server/core/log.h"
#include "common/pct.h"
#include "server/core/redact.h"

#define INBOX_MAX 100
#define INBOX_LEASE_DEFAULT_MS 30000

/* ---- start / stop ------------------------------------------------------- */

static int verifier_for(const source_cfg *sc, sig_verifier **out, char *err, size_t errlen)
{
    sig_config c = {.scheme = (sig_scheme)sc->verify,
                    .secrets = (const char *const *)sc->secrets,
                    .nsecrets = sc->nsecrets,
                    .tolerance_ms = sc->tolerance_ms,
                    .header = sc->signature_header,
                    .base64 = sc->signature_base64,
                    .prefix = sc->signature_prefix};
    return sig_verifier_new(&c, out, err, errlen);
}

int hooks_start(server *srv)
{
    const once_config *cfg = srv->cfg;
    if (cfg->nsources == 0)
        return 0;
    srv->sources = calloc(cfg->nsources, sizeof *srv->sources);
    if (!srv->sources)
        return -1;
    char err[256];
    for (size_t i = 0; i < cfg->nsources; i++) {
        const source_cfg *sc = &cfg->sources[i];
        source_rt *rt = &srv->sources[i];
        rt->cfg = sc;
        if (sc->verify == SIG_NONE) {
            /* Said at every start, so nobody forgets it is on. */
            log_event("warn", "source %s: signatures are NOT verified (verify = none, insecure = yes)", sc->name);
        } else if (verifier_for(sc, &rt->verifier, err, sizeof err) < 0) {
            log_event("error", "source %s: %s", sc->name, err);
            return -1;
        }
        if (sc->deliver_secret) {
            const char *secrets[1] = {sc->deliver_secret};
            sig_config c = {.scheme = SIG_STANDARD, .secrets = secrets, .nsecrets = 1};
            if (sig_verifier_new(&c, &rt->signer, err, sizeof err) < 0) {
                log_event("error", "source %s: deliver_secret: %s", sc->name, err);
                return -1;
            }
        }
    }
    return 0;
}

void hooks_stop(server *srv)
{
    for (size_t i = 0; srv->sources && i < srv->cfg->nsources; i++) {
        sig_verifier_free(srv->sources[i].verifier);
        sig_verifier_free(srv->sources[i].signer);
    }
    free(srv->sources);
    srv->sources = NULL;
}

static source_rt *source_find(server *srv, const char *name)
{
    for (size_t i = 0; srv->sources && i < srv->cfg->nsources; i++)
        if (strcmp(srv->sources[i].cfg->name, name) == 0)
            return &srv->sources[i];
    return NULL;
}

/* ---- ingress ------------------------------------------------------------- */

typedef struct ingest {
    req *r;
    source_rt *src;
    char event_id[ONCE_EVENT_ID_MAX + 1];
    char digest[65];    /* the body's, when the signature does not cover the id */
    char *headers;
    char *content_type; /* a copy: MHD's string may go when the client does */
    once_event_in in;
    int inserted;
} ingest;

static void ingest_free(void *arg)
{
    ingest *g = arg;
    if (!g)
        return;
    free(g->headers);
    free(g->content_type);
    free(g);
}

static const char *header_of(void *ctx, const char *name)
{
    return req_header(ctx, name);
}

typedef struct collected {
    json_t *arr;
    const once_config *cfg;
} collected;

/* The headers stored with an event, for the agent: hop-by-hop ones and
 * secrets (redact.h) left out. */
static enum MHD_Result header_collect(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
    (void)kind;
    collected *c = cls;
    static const char *const skip[] = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                                       "host", "content-length", "expect"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcasecmp(name, skip[i]) == 0)
            return MHD_YES;
    if (redact_header(c->cfg, name, strlen(name)))
        return MHD_YES;
    json_t *pair = json_pack("[s?s?]", name, value);
    if (pair)
        json_array_append_new(c->arr, pair);
    return MHD_YES;
}

/* The event id per the source's event_id spec (or the scheme's default).
 * A Standard Webhooks id is the one the signature covered, never another
 * header a replayer could add. */
static int event_id_take(ingest *g, char *why, size_t whylen)
{
    req *r = g->r;
    const char *spec = g->src->cfg->event_id;
    if (g->src->verifier && g->src->cfg->verify == SIG_STANDARD) {
        const char *v = sig_signed_id(g->src->verifier, header_of, r);
        if (!v || !*v) {
            snprintf(why, whylen, "no webhook-id header");
            return -1;
        }
        if (strlen(v) > ONCE_EVENT_ID_MAX) {
            snprintf(why, whylen, "the webhook-id header is longer than %d bytes", ONCE_EVENT_ID_MAX);
            return -1;
        }
        snprintf(g->event_id, sizeof g->event_id, "%s", v);
    } else if (strncmp(spec, "header:", 7) == 0) {
        const char *v = req_header(r, spec + 7);
        /* Svix sends svix-* rather than webhook-* unless white-labelled. */
        if ((!v || !*v) && strcasecmp(spec + 7, "webhook-id") == 0)
            v = req_header(r, "svix-id");
        if (!v || !*v) {
            snprintf(why, whylen, "no %s header", spec + 7);
            return -1;
        }
        if (strlen(v) > ONCE_EVENT_ID_MAX) {
            snprintf(why, whylen, "the %s header is longer than %d bytes", spec + 7, ONCE_EVENT_ID_MAX);
            return -1;
        }
        snprintf(g->event_id, sizeof g->event_id, "%s", v);
    } else {
        const char *ptr = spec + 5; /* "json:" */
        /* Duplicate keys refused: two "id"s could dedupe on one while the
         * agent reads the other. */
        json_t *doc = json_loadb((const char *)(r->body.data ? r->body.data : (const uint8_t *)""), r->body.len,
                                 JSON_REJECT_DUPLICATES, NULL);
        if (!doc) {
            snprintf(why, whylen, "the body is not JSON, so it has no event id at %s", ptr);
            return -1;
        }
        int rc = json_pointer_text(doc, ptr, g->event_id, sizeof g->event_id);
        json_decref(doc);
        if (rc < 0) {
            snprintf(why, whylen, "no string or integer event id at %s in the body", ptr);
            return -1;
        }
    }
    if (!g->event_id[0]) {
        snprintf(why, whylen, "the event id is empty");
        return -1;
    }
    /* Visible ASCII only: the id travels on in headers (Once-Event-Id,
     * webhook-id) where spaces and controls would not survive. */
    for (const char *p = g->event_id; *p; p++) {
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p > 0x7e) {
            snprintf(why, whylen, "the event id is not visible ASCII (no spaces or control characters)");
            return -1;
        }
    }
    return 0;
}

static void on_inserted(void *ctx, int rc, const char *detail)
{
    ingest *g = ctx;
    req *r = g->r;
    server *srv = r->srv;
    if (rc < 0) {
        /* Not stored: a 5xx makes the provider retry later. */
        req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "the event was not stored: %s", detail);
        return;
    }
    int inserted = g->inserted, push = g->src->cfg->deliver_to != NULL;
    metrics_webhook(srv->metrics, g->src->cfg->name, inserted ? MW_ACCEPTED : MW_DUPLICATE);
    metrics_webhook_ack(srv->metrics, clock_mono_seconds() - r->t0);
    r->outcome = inserted ? "accepted" : "duplicate";
    /* After the reply the request (and g) may be freed at any moment. */
    req_json(r, 200, json_pack("{s:s}", "status", inserted ? "accepted" : "duplicate"));
    if (inserted && push)
        delivery_kick(srv);
}

static void hooks_ingest(req *r)
{
    server *srv = r->srv;
    source_rt *src = r->src;
    const char *source = src->cfg->name;
    char why[256];
    if (src->verifier && sig_verify(src->verifier, header_of, r, r->body.data, r->body.len, once_now_ms(), why,
                                    sizeof why) < 0) {
        metrics_webhook(srv->metrics, source, MW_BAD_SIGNATURE);
        req_problem(r, 401, "bad_signature", "Bad signature", NULL, "%s; nothing was stored", why);
        return;
    }
    ingest *g = req_state_new(r, sizeof *g, ingest_free);
    if (!g)
        return;
    g->r = r;
    g->src = src;
    if (event_id_take(g, why, sizeof why) < 0) {
        metrics_webhook(srv->metrics, source, MW_NO_EVENT_ID);
        req_problem(r, 400, "no_event_id", "No event id", NULL, "%s; nothing was stored", why);
        return;
    }
    req_note_key(r, source, g->event_id);
    json_t *hdrs = json_array();
    collected col = {.arr = hdrs, .cfg = srv->cfg};
    if (hdrs)
        MHD_get_connection_values(r->conn, MHD_HEADER_KIND, header_collect, &col);
    g->headers = hdrs ? json_dumps(hdrs, JSON_COMPACT) : NULL;
    json_decref(hdrs);
    if (!g->headers) {
        req_out_of_memory(r);
        return;
    }
    const char *ctype = req_header(r, "Content-Type");
    if (ctype && !(g->content_type = strdup(ctype))) {
        req_out_of_memory(r);
        return;
    }
    /* An id from a header the signature does not cover (GitHub's delivery
     * id) is the sender's word only: a captured delivery replayed under a
     * fresh id must still be a duplicate, so the body's digest is a second
     * key (docs/security.md). Without a signature there is nothing to
     * replay, and two events may carry the same body (a ping). */
    int unsigned_id = strncmp(src->cfg->event_id, "header:", 7) == 0 && src->cfg->verify != SIG_STANDARD &&
                      src->cfg->verify != SIG_NONE;
    if (unsigned_id && once_fingerprint("webhook", src->cfg->name, r->body.data, r->body.len, g->digest) < 0) {
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot digest the body");
        return;
    }
    g->in = (once_event_in){.source = src->cfg->name,
                            .event_id = g->event_id,
                            .content_type = g->content_type,
                            .headers = g->headers,
                            .headers_len = strlen(g->headers),
                            .body = r->body.data,
                            .body_len = r->body.len,
                            .retention_ms = src->cfg->retention_ms,
                            .digest = unsigned_id ? g->digest : NULL};
    int rc = once_event_insert_async(srv->store, &g->in, &g->inserted, on_inserted, g);
    if (rc == 1) {
        on_inserted(g, ONCE_OK, ""); /* a duplicate, answered by a read */
        return;
    }
    if (rc < 0) {
        if (rc == ONCE_EINVAL)
            req_problem(r, 400, "invalid_request", "Invalid request", NULL, "%s", once_errdetail());
        else
            req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "%s", once_errdetail());
    }
}

/* ---- the pull inbox (on the worker: claims and acks commit synchronously) -- */

typedef struct inbox {
    req *r;
    source_rt *src;
    json_t *body;
    char verb[8];
    size_t max;
    int64_t lease_ms;
    int64_t delay_ms;
} inbox;

static void inbox_free(void *arg)
{
    inbox *ib = arg;
    if (!ib)
        return;
    json_decref(ib->body);
    free(ib);
}

/* A claimed event with its receipt: the agent settles it with that. */
static int claimed_item(const void *ctx, size_t i, json_t **out)
{
    const once_event_list *l = ctx;
    return event_json_from(&l->items[i], 1, out);
}

static void inbox_claim(inbox *ib)
{
    req *r = ib->r;
    once_event_list l;
    int rc = once_event_claim_as(r->srv->store, ib->src->cfg->name, r->who ? r->who->name : NULL, ib->max,
                                 ib->lease_ms, &l);
    if (rc < 0) {
        req_problem(r, 503, "store_unavailable", "Store unavailable", NULL, "%s", once_errdetail());
        return;
    }
    json_t *events = json_items(l.count, claimed_item, &l);
    once_event_list_free(&l);
    if (!events) {
        /* The claims stand and expire after their lease: redelivered then. */
        req_problem(r, 500, "internal", "Internal error", NULL, "cannot render the events");
        return;
    }
    req_json(r, 200, json_pack("{s:o}", "events", events));
}

static void inbox_settle(inbox *ib)
{
    req *r = ib->r;
    json_t *receipts = json_object_get(ib->body, "receipts");
    int ack = strcmp(ib->verb, "ack") == 0;
    size_t done = 0, i;
    json_t *v, *failed = json_array();
    if (!failed) {
        req_out_of_memory(r);
        return;
    }
    json_array_foreach(receipts, i, v)
    {
        const char *rec = json_string_value(v);
        int rc = ack ? once_event_ack(r->srv->store, ib->src->cfg->name, rec)
                     : once_event_retry(r->srv->store, ib->src->cfg->name, rec, ib->delay_ms, 0, "nacked by the agent");
        if (rc == ONCE_OK) {
            done++;
            continue;
        }
        const char *code = rc == ONCE_ESTALE ? "stale_receipt" : rc == ONCE_ENOTFOUND ? "not_found"
                           : rc == ONCE_EINVAL ? "invalid_receipt" : rc == ONCE_ESTATE ? "invalid_transition"
                                                                     : "store_unavailable";
        json_array_append_new(failed, json_pack("{s:s?, s:s, s:s}", "receipt", rec, "code", code, "detail",
                                                once_errdetail()));
    }
    req_json(r, 200, json_pack("{s:I, s:o}", ack ? "acked" : "nacked", (json_int_t)done, "failed", failed));
}

static void inbox_job(void *arg)
{
    inbox *ib = arg;
    if (strcmp(ib->verb, "claim") == 0)
        inbox_claim(ib);
    else
        inbox_settle(ib);
}

/* An optional non-negative integer member; answers 400 when it is not one. */
static int member_int(req *r, json_t *body, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        req_problem(r, 400, "invalid_request", "Invalid request", NULL, "'%s' must be an integer from %lld to %lld",
                    name, (long long)lo, (long long)hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

static void inbox_handle(req *r)
{
    server *srv = r->srv;
    source_rt *src = r->src;
    const char *source = src->cfg->name;
    const char *verb = r->verb;
    if (src->cfg->deliver_to) {
        req_problem(r, 409, "push_source", "Source is pushed", NULL,
                    "source '%s' is delivered to %s; its inbox cannot be pulled", source, src->cfg->deliver_to);
        return;
    }
    inbox *ib = req_state_new(r, sizeof *ib, inbox_free);
    if (!ib)
        return;
    ib->r = r;
    ib->src = src;
    snprintf(ib->verb, sizeof ib->verb, "%s", verb);
    ib->body = r->body.len ? json_loadb((const char *)r->body.data, r->body.len, JSON_REJECT_DUPLICATES, NULL)
                           : json_object();
    if (!json_is_object(ib->body)) {
        req_problem(r, 400, "invalid_json", "Invalid JSON", NULL, "the body must be a JSON object");
        return;
    }
    int64_t max = 10, lease = INBOX_LEASE_DEFAULT_MS, delay = 0;
    if (strcmp(verb, "claim") == 0) {
        if (member_int(r, ib->body, "max", 1, INBOX_MAX, &max) < 0 ||
            member_int(r, ib->body, "lease_ms", 1, ONCE_LEASE_MAX_MS, &lease) < 0)
            return;
    } else {
        json_t *rec = json_object_get(ib->body, "receipts");
        size_t i;
        json_t *v;
        int ok = json_is_array(rec) && json_array_size(rec) <= 1000;
        json_array_foreach(rec, i, v) ok = ok && json_is_string(v);
        if (!ok) {
            req_problem(r, 400, "invalid_request", "Invalid request", NULL,
                        "'receipts' must be an array of at most 1000 strings");
            return;
        }
        if (strcmp(verb, "nack") == 0 && member_int(r, ib->body, "delay_ms", 0, ONCE_LEASE_MAX_MS, &delay) < 0)
            return;
    }
    ib->max = (size_t)max;
    ib->lease_ms = lease;
    ib->delay_ms = delay;
    if (worker_run(srv->worker, inbox_job, ib) < 0)
        req_not_started(r, "out of memory");
}

/* ---- routes ----------------------------------------------------------------- */

/* The source named by a raw path segment, or 404 unknown_source. */
static int admit_source(req *r, const char *raw, size_t n, problem *p)
{
    char source[ONCE_SCOPE_MAX + 2];
    if (pct_decode(raw, n, source, sizeof source) < 0 || strchr(source, '/'))
        return problem_set(p, 404, "unknown_source", "Unknown source", "no such webhook source");
    if (!(r->src = source_find(r->srv, source)))
        return problem_set(p, 404, "unknown_source", "Unknown source", "no webhook source named '%.64s'", source);
    snprintf(r->scope, sizeof r->scope, "%s", r->src->cfg->name);
    return 0;
}

/* /v1/hooks/{source} */
static int hooks_admit(req *r, problem *p)
{
    const char *rest = r->match.rest;
    return admit_source(r, rest, strcspn(rest, "?"), p);
}

/* /v1/inbox/{source}/claim|ack|nack */
static int inbox_admit(req *r, problem *p)
{
    const char *rest = r->match.rest;
    size_t n = strcspn(rest, "?");
    const char *slash = memchr(rest, '/', n);
    const char *verb = slash ? slash + 1 : "";
    size_t vlen = slash ? n - (size_t)(verb - rest) : 0;
    if (!slash || !((vlen == 5 && strncmp(verb, "claim", 5) == 0) || (vlen == 3 && strncmp(verb, "ack", 3) == 0) ||
                    (vlen == 4 && strncmp(verb, "nack", 4) == 0)))
        return problem_set(p, 404, "not_found", "Not found", "use /v1/inbox/{source}/claim, ack or nack");
    snprintf(r->verb, sizeof r->verb, "%.*s", (int)vlen, verb);
    if (admit_source(r, rest, (size_t)(slash - rest), p) < 0)
        return -1;
    const agent_cfg *ag = grants_agent(r->who);
    if (grants_source(ag, r->src->cfg->name))
        return 0;
    char what[ONCE_SCOPE_MAX + 32];
    snprintf(what, sizeof what, "the inbox of '%s'", r->src->cfg->name);
    return grants_refuse(p, ag, what);
}

const route hooks_routes[] = {
    /* No bearer token: a webhook is authenticated by its signature. */
    {.pattern = "/v1/hooks/{**}", .name = "hooks", .access = ACCESS_OPEN, .admit = hooks_admit,
     .methods = {{"POST", hooks_ingest}}},
    {.pattern = "/v1/inbox/{**}", .name = "inbox", .access = ACCESS_AGENT, .admit = inbox_admit,
     .methods = {{"POST", inbox_handle}}},
    {.pattern = NULL},
};
