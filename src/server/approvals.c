/*
 * approvals.c — sending what a human approved, exactly once.
 *
 * An approval is a decision in the store (once_approve, from the API or the
 * CLI); nothing is sent by it. Each round this thread takes approved
 * actions of the upstreams with approve rules (once_approval_claim: fenced
 * like a reservation, so of several gateways on one store exactly one takes
 * each), rebuilds the stored request — the exact request the human saw, with
 * the upstream's injected headers added now, as the proxy adds them — and
 * sends it under every rule of the proxy: the claim is durable before the
 * first byte, its lease is renewed while the call runs, and the outcome is
 * classified as the proxy classifies it and recorded with the claim's
 * token. The agent's next retry gets the recorded answer replayed. An MCP
 * server's approved tool call goes over once's own session with it
 * (mcp_session.c), waited for on this thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "common/looper.h"
#include "server/approvals.h"
#include "server/leases.h"
#include "server/log.h"
#include "server/mcp.h"
#include "server/target.h"
#include "server/upstream_rules.h"

#define CLAIM_MAX 16 /* per upstream and round: a round stays short */

typedef struct approved_send {
    looper_item item; /* first: posted back by the outbound thread */
    struct approvals *ap;
    const upstream_cfg *up;
    once_reservation res; /* the claim: its token and the stored request */
    char *method;
    char *url;
    out_headers headers;
    uint8_t *body;
    size_t body_len;
    lease_hold *hold;
    out_call call;
} approved_send;

/* running belongs to the loop thread. */
struct approvals {
    server *srv;
    looper loop;
    size_t running; /* sends handed to the outbound client */
};

static void send_free(approved_send *s)
{
    leases_drop(s->ap->srv->leases, s->hold);
    once_reservation_free(&s->res);
    free(s->method);
    free(s->url);
    out_headers_clear(&s->headers);
    free(s->body);
    out_call_clear(&s->call);
    free(s);
}

/* ---- the stored request, rebuilt ------------------------------------------- */

/* The body of the stored request: "body" (UTF-8 text, as the client sent
 * it) or "body_base64" (any other bytes). 0, or -1 with why. */
static int stored_body(json_t *meta, approved_send *s, char *why, size_t whylen)
{
    json_t *text = json_object_get(meta, "body");
    const char *b64 = json_string_value(json_object_get(meta, "body_base64"));
    if (json_is_string(text)) {
        s->body_len = json_string_length(text);
        s->body = malloc(s->body_len + 1);
        if (!s->body)
            goto oom;
        memcpy(s->body, json_string_value(text), s->body_len);
        return 0;
    }
    if (!b64)
        return 0; /* no body */
    size_t n = strlen(b64);
    if (n % 4 != 0 || n > (size_t)INT32_MAX) {
        snprintf(why, whylen, "the stored body is not base64");
        return -1;
    }
    s->body = malloc(n / 4 * 3 + 1);
    if (!s->body)
        goto oom;
    int len = EVP_DecodeBlock(s->body, (const unsigned char *)b64, (int)n);
    if (len < 0) {
        snprintf(why, whylen, "the stored body is not base64");
        return -1;
    }
    /* EVP_DecodeBlock counts each '=' of padding as a zero byte. */
    for (size_t i = n; i > 0 && b64[i - 1] == '=' && len > 0; i--)
        len--;
    s->body_len = (size_t)len;
    return 0;
oom:
    snprintf(why, whylen, "out of memory");
    return -1;
}

/* The request as the proxy stored it ({method, target, headers, body}),
 * ready to send: the URL built on the upstream's base with the URL API
 * (target.h: nothing stored can change where it goes), the client's stored
 * headers, then the upstream's injected ones and the key when the upstream
 * forwards it. 0, or -1 with why. */
static int send_build(approved_send *s, char *why, size_t whylen)
{
    const upstream_cfg *up = s->up;
    const once_action *a = &s->res.action;
    json_t *meta = a->request ? json_loadb((const char *)a->request, a->request_len, 0, NULL) : NULL;
    const char *method = json_string_value(json_object_get(meta, "method"));
    const char *target = json_string_value(json_object_get(meta, "target"));
    int rc = -1;
    if (!method || !target) {
        snprintf(why, whylen, "the stored request has no method or target (not stored by the proxy)");
        goto out;
    }
    if (target_url(up->url, target, &s->url, why, whylen) < 0 || stored_body(meta, s, why, whylen) < 0)
        goto out;
    if (!(s->method = strdup(method)))
        goto oom;
    size_t i;
    json_t *pair;
    json_array_foreach(json_object_get(meta, "headers"), i, pair)
    {
        const char *n = json_string_value(json_array_get(pair, 0));
        const char *v = json_string_value(json_array_get(pair, 1));
        /* The proxy's own filter again, not the stored set trusted: a
         * header the upstream injects now (the config may have changed
         * since) or one never forwarded is dropped, so nothing stored can
         * stand in for the operator's credentials. */
        if (!n || !v || upstream_header_dropped(up, s->ap->srv->cfg->ntokens > 0, NULL, n))
            continue;
        if (out_headers_add(&s->headers, n, v) < 0)
            goto oom;
    }
    for (i = 0; i < up->nheaders; i++)
        if (out_headers_add(&s->headers, up->headers[i], NULL) < 0)
            goto oom;
    if (up->forward_key_as && out_headers_add(&s->headers, up->forward_key_as, a->key) < 0)
        goto oom;
    rc = 0;
    goto out;
oom:
    snprintf(why, whylen, "out of memory");
out:
    json_decref(meta);
    return rc;
}

/* ---- the outcome --------------------------------------------------------------- */

/* On the approvals thread: records what the call did, as the proxy would
 * have, under the claim's token. A record that fails leaves the row
 * pending: its lease runs out and it is held, never sent again. */
static void send_record(approvals *ap, approved_send *s)
{
    server *srv = ap->srv;
    const upstream_cfg *up = s->up;
    out_call *c = &s->call;
    const char *key = s->res.action.key;
    metrics_upstream(srv->metrics, up->name, c->seconds);
    upstream_outcome o = upstream_classify(up, c->kind, c->status, c->error, sizeof c->error);
    int rc;
    switch (upstream_outcome_state(o)) {
    case ONCE_STATE_COMPLETED: {
        once_response resp = {.status = (int)c->status,
                              .headers = (char *)c->resp_headers.data,
                              .headers_len = c->resp_headers.len,
                              .body = c->resp_body.data,
                              .body_len = c->resp_body.len};
        rc = once_complete(srv->store, up->name, key, s->res.token, &resp, NULL);
        break;
    }
    case ONCE_STATE_RELEASED:
        rc = once_release(srv->store, up->name, key, s->res.token, c->error);
        metrics_action(srv->metrics, up->name, MO_RELEASED);
        break;
    default:
        rc = once_mark_unknown(srv->store, up->name, key, s->res.token, c->error);
        metrics_action(srv->metrics, up->name, MO_UNKNOWN);
        break;
    }
    if (rc < 0)
        log_event("error", "scope %s: the outcome of an approved call could not be recorded (the action is held "
                  "once its lease runs out): %s", up->name, once_errdetail());
    else
        log_event("info", "scope %s: approved action sent: %s%s%s", up->name,
                  once_state_name(upstream_outcome_state(o)), o == UPSTREAM_COMPLETED ? "" : ": ",
                  o == UPSTREAM_COMPLETED ? "" : c->error);
}

/* Runs on the outbound thread: the answer goes to the approvals thread. */
static void on_send_done(out_call *c)
{
    approved_send *s = c->ctx;
    leases_drop(s->ap->srv->leases, s->hold);
    s->hold = NULL;
    looper_post(&s->ap->loop, &s->item, 1);
}

/* An approved MCP tool call: made over once's own session with the server
 * (mcp_session.c), waited for here, and recorded as mcp_call.c records. */
static void send_mcp(approvals *ap, const upstream_cfg *up, once_reservation *res)
{
    server *srv = ap->srv;
    const once_action *a = &res->action;
    json_t *meta = a->request ? json_loadb((const char *)a->request, a->request_len, 0, NULL) : NULL;
    const char *tool = json_string_value(json_object_get(meta, "tool"));
    json_t *final = NULL;
    int sent = 0, rc;
    char why[300] = "", logged[300] = "";
    mcp_verdict v = MCP_RELEASED;
    if (!tool) {
        snprintf(why, sizeof why, "the stored request names no tool: nothing was sent");
    } else {
        lease_hold *hold = leases_hold(srv->leases, up->name, a->key, res->token, up->lease_ms);
        metrics_approval(srv->metrics, up->name, MA_APPROVED, 1);
        rc = mcp_session_call(mcp_runtime(srv, up), tool, json_object_get(meta, "arguments"), &final, &sent, why,
                              sizeof why);
        leases_drop(srv->leases, hold);
        v = rc == 0 ? mcp_classify(final, why, sizeof why) : sent ? MCP_UNKNOWN : MCP_RELEASED;
    }
    char *result = v == MCP_COMPLETED ? json_dumps(json_object_get(final, "result"), JSON_COMPACT) : NULL;
    if (v == MCP_COMPLETED && !result) {
        v = MCP_UNKNOWN;
        snprintf(why, sizeof why, "out of memory while recording the result");
    }
    if (v == MCP_COMPLETED) {
        once_response resp = {.status = 200, .body = (uint8_t *)result, .body_len = strlen(result)};
        rc = once_complete(srv->store, up->name, a->key, res->token, &resp, NULL);
    } else if (v == MCP_RELEASED) {
        rc = once_release(srv->store, up->name, a->key, res->token, why);
    } else {
        rc = once_mark_unknown(srv->store, up->name, a->key, res->token, why);
    }
    if (v != MCP_COMPLETED)
        metrics_action(srv->metrics, up->name, v == MCP_RELEASED ? MO_RELEASED : MO_UNKNOWN);
    if (rc < 0)
        log_event("error", "mcp %s: the outcome of an approved call could not be recorded (the action is held once "
                  "its lease runs out): %s", up->name, once_errdetail());
    else
        mcp_why_for_log(final, why, logged, sizeof logged);
    if (rc >= 0)
        log_event("info", "mcp %s: approved call of tool %s made: %s%s%s", up->name, tool ? tool : "?",
                  v == MCP_COMPLETED ? "completed" : v == MCP_RELEASED ? "released" : "unknown",
                  v == MCP_COMPLETED ? "" : ": ", v == MCP_COMPLETED ? "" : logged);
    free(result);
    json_decref(final);
    json_decref(meta);
    once_reservation_free(res);
}

/* Sends one claimed action; a request that cannot be rebuilt is released
 * (nothing was sent; the reason is kept with it). */
static void send_start(approvals *ap, const upstream_cfg *up, once_reservation *res)
{
    server *srv = ap->srv;
    if (up->mcp) {
        send_mcp(ap, up, res);
        return;
    }
    approved_send *s = calloc(1, sizeof *s);
    if (!s) {
        /* The claim's lease runs out and the action is held: never lost,
         * never sent twice. */
        once_reservation_free(res);
        return;
    }
    s->ap = ap;
    s->up = up;
    s->res = *res;
    memset(res, 0, sizeof *res);
    char why[300] = "";
    if (send_build(s, why, sizeof why) < 0) {
        char reason[400];
        snprintf(reason, sizeof reason, "the approved request could not be rebuilt, nothing was sent: %s", why);
        if (once_release(srv->store, up->name, s->res.action.key, s->res.token, reason) < 0)
            log_event("error", "scope %s: cannot release an approved action: %s", up->name, once_errdetail());
        send_free(s);
        return;
    }
    s->hold = leases_hold(srv->leases, up->name, s->res.action.key, s->res.token, up->lease_ms);
    out_call *c = &s->call;
    c->method = s->method;
    c->url = s->url;
    c->headers = (const char *const *)s->headers.lines;
    c->nheaders = s->headers.count;
    c->body = s->body;
    c->body_len = s->body_len;
    c->timeout_ms = up->timeout_ms;
    c->max_response = up->max_response;
    c->ca_file = up->ca_file;
    c->tls_cert = up->tls_cert;
    c->tls_key = up->tls_key;
    c->done = on_send_done;
    c->ctx = s;
    if (outbound_submit(srv->ob, c) < 0) {
        snprintf(why, sizeof why, "the gateway is stopping, or out of memory: nothing was sent");
        if (once_release(srv->store, up->name, s->res.action.key, s->res.token, why) < 0)
            log_event("error", "scope %s: cannot release an approved action: %s", up->name, once_errdetail());
        send_free(s);
        return;
    }
    metrics_approval(srv->metrics, up->name, MA_APPROVED, 1);
    ap->running++;
}

/* Takes up to CLAIM_MAX approved actions of each upstream with rules. */
static void claim_approved(approvals *ap)
{
    server *srv = ap->srv;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++) {
        const upstream_cfg *up = &srv->cfg->upstreams[i];
        for (int n = 0; (up->napprove > 0 || up->approve_destructive) && n < CLAIM_MAX; n++) {
            once_reservation res;
            int rc = once_approval_claim(srv->store, up->name, up->lease_ms, &res);
            if (rc < 0)
                log_event("error", "scope %s: cannot take approved actions: %s", up->name, once_errdetail());
            if (rc != 1)
                break;
            send_start(ap, up, &res);
        }
    }
}

/* One round: records the sends that finished (while stopping too: a call
 * the stop cut is released or unknown as the proxy's are), then (unless
 * quiesced) takes the approved actions. */
static int64_t approvals_round(void *arg, looper_phase phase, looper_item *posted)
{
    approvals *ap = arg;
    for (looper_item *i = posted, *next; i; i = next) {
        next = i->next;
        approved_send *s = (approved_send *)i;
        send_record(ap, s);
        ap->running--;
        send_free(s);
    }
    if (phase != LOOPER_RUNNING)
        return phase == LOOPER_STOPPING && ap->running == 0 ? LOOPER_DONE : LOOPER_IDLE;
    claim_approved(ap);
    return ap->srv->cfg->loop_interval_ms;
}

int approvals_start(server *srv, approvals **out)
{
    *out = NULL;
    int any = 0;
    for (size_t i = 0; i < srv->cfg->nupstreams; i++)
        any |= srv->cfg->upstreams[i].napprove > 0 || srv->cfg->upstreams[i].approve_destructive;
    if (!any)
        return 0;
    approvals *ap = calloc(1, sizeof *ap);
    if (!ap)
        return -1;
    ap->srv = srv;
    if (looper_start(&ap->loop, "once-approvals", approvals_round, ap) < 0) {
        free(ap);
        return -1;
    }
    *out = ap;
    return 0;
}

void approvals_kick(approvals *ap)
{
    if (ap)
        looper_kick(&ap->loop);
}

void approvals_quiesce(approvals *ap)
{
    if (ap)
        looper_quiesce(&ap->loop);
}

void approvals_stop(approvals *ap)
{
    if (!ap)
        return;
    looper_stop(&ap->loop);
    looper_close(&ap->loop);
    free(ap);
}
