/*
 * sender.h — sending an approved action, whatever kind of scope it is in.
 * The approvals thread (jobs/approvals.c) claims an approved action and
 * hands it to the sender of its scope's kind — an HTTP upstream's
 * (proxy/proxy_send.c) or an MCP server's (mcp/mcp_send.c), registered by
 * server.c — without knowing which it is. A sender never blocks the thread
 * that starts it; it fills the job's verdict and calls done, once, from
 * whichever thread the call ended on.
 */
#ifndef ONCE_SERVER_CORE_SENDER_H
#define ONCE_SERVER_CORE_SENDER_H

#include "once/once.h"
#include "server/config/config.h"
#include "server/core/verdict.h"

typedef struct server server;

typedef enum scope_kind {
    SCOPE_HTTP = 0, /* an [upstream.NAME] */
    SCOPE_MCP = 1,  /* an [mcp.NAME] server */
    SCOPE_KINDS
} scope_kind;

/* The kind of scope an upstream's actions live in. */
scope_kind scope_kind_of(const upstream_cfg *up);

typedef struct send_job send_job;
typedef void (*send_done_fn)(send_job *job);

struct send_job {
    /* set by the caller, unchanged until done */
    server *srv;
    const upstream_cfg *up;
    const once_reservation *res; /* the claim: its token and the stored request */
    send_done_fn done;
    void *ctx;
    /* set by the sender before done; v.resp stays valid until free_fn runs */
    verdict v;
    char what[96];               /* for the log line: "POST /v1/refunds", "tool charge" */
    char log_why[300];           /* what the log line may say of a release or an unknown */
    void *priv;                  /* the sender's */
    void (*free_fn)(send_job *job); /* the sender's cleanup, run by the caller after done; may be NULL */
};

typedef struct sender {
    /* Starts job. done runs exactly once, maybe before start returns (when
     * nothing could be sent: a RELEASED verdict with why). */
    void (*start)(send_job *job);
} sender;

#endif
