/*
 * cmd_show.c — `once show SCOPE KEY`: everything the ledger knows about one
 * action, as `field: value` lines for people or as the JSON record.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/utf8.h"
#include "cli/cli.h"
#include "json/action_json.h"

/* A body can be megabytes; a person needs its start to recognise it. */
#define SHOW_PREVIEW_MAX 200

static int show_print_response(const once_action *a)
{
    if (!a->has_response) {
        fputs("response: -\n", stdout);
        return ONCE_OK;
    }
    const once_response *r = &a->response;
    if (r->body_not_stored > 0)
        printf("response: status %d, body of %lld bytes delivered but not stored (over max_response)\n",
               r->status, (long long)r->body_not_stored);
    else if (r->body != NULL)
        printf("response: status %d, body %zu bytes\n", r->status, r->body_len);
    else
        printf("response: status %d, no body\n", r->status);
    int rc = ONCE_OK;
    if (r->headers != NULL)
        rc = cli_print_field("headers", r->headers, r->headers_len, SHOW_PREVIEW_MAX);
    if (rc != ONCE_OK || r->body == NULL)
        return rc;
    if (utf8_valid(r->body, r->body_len))
        return cli_print_field("body", (const char *)r->body, r->body_len, SHOW_PREVIEW_MAX);
    fputs("body: (binary; see --json for body_base64)\n", stdout);
    return ONCE_OK;
}

/* An MCP tool call (docs/mcp.md) says which tool and with what
 * arguments before the raw stored request: what a person deciding or
 * resolving it looks for. Other requests print nothing here. */
static int show_print_tool(const once_action *a)
{
    json_t *meta = json_loadb((const char *)a->request, a->request_len, 0, NULL);
    const char *kind = json_string_value(json_object_get(meta, "mcp"));
    const char *tool = json_string_value(json_object_get(meta, "tool"));
    int rc = ONCE_OK;
    if (kind && tool && strcmp(kind, "tools/call") == 0) {
        char *args = json_dumps(json_object_get(meta, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
        rc = cli_print_text("tool", tool);
        if (rc == ONCE_OK)
            rc = args ? cli_print_field("arguments", args, strlen(args), SHOW_PREVIEW_MAX) : ONCE_ENOMEM;
        free(args);
    }
    json_decref(meta);
    return rc;
}

/* The field: value lines of the action at rec, for people. */
static int show_print_action(const void *rec)
{
    const once_action *a = rec;
    char attempt[24];
    snprintf(attempt, sizeof attempt, "%lld", (long long)a->attempt);
    int rc = cli_print_text("scope", a->scope);
    if (rc == ONCE_OK)
        rc = cli_print_text("key", a->key);
    if (rc != ONCE_OK)
        return rc;
    const char *state = once_state_name(a->state);
    printf("state: %s\n", state != NULL ? state : "?");
    printf("attempt: %s\n", attempt);
    /* Who asked for this attempt: the name `once ls --agent` filters on. */
    rc = cli_print_text("agent", a->agent);
    if (rc != ONCE_OK)
        return rc;
    cli_print_time("created_at", a->created_at);
    cli_print_time("updated_at", a->updated_at);
    /* Waiting for a human, the lease column is the decision's deadline. */
    if (a->state == ONCE_STATE_AWAITING_APPROVAL) {
        cli_print_time("decide_by", a->lease_expires_at);
        cli_print_time("approved_at", a->approved_at);
    } else {
        cli_print_time("lease_expires_at", a->lease_expires_at);
    }
    cli_print_time("expires_at", a->expires_at);
    rc = cli_print_text("fingerprint", a->fingerprint);
    if (rc == ONCE_OK && a->request)
        rc = show_print_tool(a);
    if (rc == ONCE_OK && a->request)
        rc = cli_print_field("request", (const char *)a->request, a->request_len, SHOW_PREVIEW_MAX);
    if (rc == ONCE_OK)
        rc = cli_print_text("provider_id", a->provider_id);
    /* A settled action keeps the error that made it unknown (or held):
     * history, which the line says, not its state. */
    int settled = a->state == ONCE_STATE_COMPLETED || a->state == ONCE_STATE_RELEASED;
    if (rc == ONCE_OK && settled && a->error) {
        char *e = cli_escape_dup(a->error, strlen(a->error), 0);
        if (!e)
            return ONCE_ENOMEM;
        printf("error: %s (before it was %s)\n", e, once_state_name(a->state));
        free(e);
    } else if (rc == ONCE_OK) {
        rc = cli_print_text("error", a->error);
    }
    if (rc == ONCE_OK)
        rc = cli_print_text("note", a->note);
    /* Who decided on an approval, and why: shown whenever an action has
     * (or had) a decision to take; "-" while undecided, or when nobody
     * decided in time. */
    int decision = a->decided_by || a->state == ONCE_STATE_AWAITING_APPROVAL || a->state == ONCE_STATE_DENIED;
    if (rc == ONCE_OK && decision)
        rc = cli_print_text("decided_by", a->decided_by);
    if (rc == ONCE_OK && decision)
        rc = cli_print_text("decision_note", a->decision_note);
    if (rc == ONCE_OK && a->lookups)
        printf("lookups: %lld\n", (long long)a->lookups);
    /* The reconciliation trail, one step per line, as the operator needs it
     * to decide on a held action. */
    for (const char *p = a->trail; rc == ONCE_OK && p && *p;) {
        size_t len = strcspn(p, "\n");
        char *line = cli_escape_dup(p, len, 0);
        printf("trail: %s\n", line ? line : "?");
        free(line);
        p += len;
        if (*p == '\n')
            p++;
    }
    if (rc == ONCE_OK)
        rc = show_print_response(a);
    return rc;
}

/* action_json_from as a cli_json_fn. */
static int show_to_json(const void *a, json_t **out)
{
    return action_json_from(a, out);
}

/* Reads the action on the open store; a failure is reported naming it. */
static int show_read(once_store *store, const char *scope, const char *key, void *rec)
{
    int rc = once_get(store, scope, key, rec);
    if (rc == ONCE_OK)
        return CLI_EXIT_OK;
    return cli_fail_once_about(rc, "action", scope, key);
}

/* once_action_free for the record view. */
static void show_free(void *rec)
{
    once_action_free(rec);
}

static const cli_record_kind show_kind = {
    .what = "action",
    .first = "SCOPE",
    .second = "KEY",
    .check = cli_check_scope_key,
    .read = show_read,
    .to_json = show_to_json,
    .to_text = show_print_action,
    .free_record = show_free,
};

/* The one-record view (cli_record.c) of an action. */
int cli_show_run(cli_ctx *ctx, int argc, char **argv)
{
    once_action a = {0};
    return cli_record_run(ctx, &show_kind, &a, argc, argv);
}
