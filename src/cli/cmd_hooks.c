/*
 * cmd_hooks.c — `once hooks`: the inbound webhook events the gateway has
 * accepted. `ls` lists them (optionally one source or state), `show` prints
 * one with its body, `redeliver` makes one pending and due now so the
 * running gateway hands it to the agent again (a delivered or dead event
 * included). Like `once ls`, it follows the ledger's pages itself.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/utf8.h"
#include "cli/cli.h"
#include "json/action_json.h"
#include "json/event_json.h"

/* Events asked for per once_list_events call: they carry their bodies, so
 * small pages keep memory flat while the JSON form streams out. */
#define HOOKS_PAGE 100
/* Bodies and headers can be megabytes; a person needs the start. */
#define HOOKS_PREVIEW_MAX 200
/* The ERROR column is the last: long enough to recognise the failure, short
 * enough to keep a row on one screen line. */
#define HOOKS_ERROR_MAX 60
/* Enough of a user-supplied operand to recognise it in a message. */
#define HOOKS_QUOTE_MAX 64

enum { HOOKS_OPT_SOURCE = 2400, HOOKS_OPT_STATUS };

/* ---- operands ---------------------------------------------------------- */

/* "once: invalid WHAT 'VALUE': invalid argument: WHY", the shape
 * cli_fail_once gives scopes and keys. Returns CLI_EXIT_USAGE. */
static int hooks_fail_invalid(const char *what, const char *value, const char *why)
{
    char *q = cli_escape_dup(value, strlen(value), HOOKS_QUOTE_MAX);
    char *w = cli_escape_dup(why, strlen(why), 200);
    cli_print_error("invalid %s '%s': %s: %s", what, q != NULL ? q : "?", once_strerror(ONCE_EINVAL),
                    w != NULL ? w : "?");
    free(q);
    free(w);
    return CLI_EXIT_USAGE;
}

/* Sources follow the scope rules (1-64 of [A-Za-z0-9._-]). Checked before
 * the store is opened, so a typo neither creates a store file nor reads as
 * "no such event". libonce's detail names a scope; here it is a source. */
static int hooks_check_source(const char *source)
{
    if (once_scope_validate(source) == ONCE_OK)
        return CLI_EXIT_OK;
    const char *d = once_errdetail();
    if (d == NULL)
        d = "";
    if (strncmp(d, "scope: ", 7) == 0)
        d += 7;
    return hooks_fail_invalid("source", source, d);
}

/* Event ids are 1-255 bytes of printable ASCII (once.h); libonce checks
 * them too, but only once a store is open, so the CLI checks first for the
 * same reason as sources. */
static int hooks_check_event_id(const char *id)
{
    size_t n = strnlen(id, ONCE_EVENT_ID_MAX + 1);
    char why[64];
    if (n == 0)
        return hooks_fail_invalid("event id", id, "empty");
    if (n > ONCE_EVENT_ID_MAX) {
        snprintf(why, sizeof why, "longer than %d bytes", ONCE_EVENT_ID_MAX);
        return hooks_fail_invalid("event id", id, why);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x20 || c > 0x7e) {
            snprintf(why, sizeof why, "byte %zu is not printable ASCII", i);
            return hooks_fail_invalid("event id", id, why);
        }
    }
    return CLI_EXIT_OK;
}

/* The SOURCE ID operands of show and redeliver, checked before any store
 * is opened. */
static int hooks_check_source_id(const char *source, const char *id)
{
    int code = hooks_check_source(source);
    if (code == CLI_EXIT_OK)
        code = hooks_check_event_id(id);
    return code;
}

/* Reports a failed call about one event, its source and id whole (a
 * person copies them back). ENOTFOUND gets its own words: once_strerror
 * names it "no such action", which would mislead here. */
static int hooks_fail_event(int rc, const char *doing, const char *source, const char *id)
{
    if (rc != ONCE_ENOTFOUND)
        return cli_fail_once_about(rc, doing, source, id);
    char *qs = cli_escape_dup(source, strlen(source), 0);
    char *qi = cli_escape_dup(id, strlen(id), 0);
    cli_print_error("no such event %s %s", qs != NULL ? qs : "?", qi != NULL ? qi : "?");
    free(qs);
    free(qi);
    return CLI_EXIT_USAGE;
}

/* ---- hooks ls ---------------------------------------------------------- */

/* What hooks ls reads: its filters and the page in hand. */
typedef struct hooks_list {
    const char *source;
    once_event_state state;
    once_event_list page;
} hooks_list;

/* A page of events after cursor, with the command's filters. */
static int hooks_fetch(once_store *store, void *list, const char *cursor, size_t limit, cli_page *page)
{
    hooks_list *hl = list;
    once_event_list_req req = {
        .source = hl->source,
        .state = hl->state,
        .limit = limit,
        .cursor = cursor,
    };
    hl->page = (once_event_list){0};
    int rc = once_list_events(store, &req, &hl->page);
    if (rc == ONCE_OK)
        *page = CLI_PAGE_OF(hl->page);
    return rc;
}

/* Pages carry bodies: each is freed once its rows are out. */
static void hooks_free_page(void *list)
{
    once_event_list_free(&((hooks_list *)list)->page);
}

/* One row: no body, and the error cut so that the row stays one line. */
static int hooks_table_add(cli_table *t, const void *row)
{
    const once_event *e = row;
    const char *state = once_event_state_name(e->state);
    return cli_list_row(t, e->source, e->event_id, state != NULL ? state : "?", e->attempt, e->received_at, e->error,
                        HOOKS_ERROR_MAX);
}

/* The record of `hooks show --json`, used for its rows and for show. */
static int hooks_to_json(const void *row, json_t **out)
{
    return event_json_from(row, 0, out);
}

/* Takes --status, and --source as typed (hooks_check checks it). */
static int hooks_filter(const cli_command *cmd, void *list, int c, const char *value)
{
    hooks_list *hl = list;
    if (c != HOOKS_OPT_STATUS)
        return cli_take_text(cmd, (cli_text_option[]){{HOOKS_OPT_SOURCE, &hl->source}, {0, NULL}}, c, value);
    if (once_event_state_parse(value, &hl->state) != ONCE_OK)
        return cli_fail_quoted(cmd, "unknown status", value, " (expected pending, delivered or dead)");
    return CLI_EXIT_OK;
}

/* A source is checked as show and redeliver check it. */
static int hooks_check(void *list)
{
    const hooks_list *hl = list;
    if (hl->source != NULL && hooks_check_source(hl->source) != CLI_EXIT_OK)
        return CLI_EXIT_USAGE;
    return CLI_EXIT_OK;
}

static const char *const hooks_head[6] = {"SOURCE", "EVENT_ID", "STATE", "ATTEMPT", "RECEIVED", "ERROR"};

/* The options below, as `once help hooks` and `once hooks ls -h` describe
 * them. */
static const char hooks_ls_help[] =
    "Options:\n"
    "  --source S   only events of source S\n"
    "  --status S   only events in state S: pending, delivered or dead\n"
    "  --limit N    at most N events, 1..100000 (default 100)\n"
    "  --json       a JSON array of records instead of a table\n";

static const struct option hooks_longopts[] = {
    {"source", required_argument, NULL, HOOKS_OPT_SOURCE},
    {"status", required_argument, NULL, HOOKS_OPT_STATUS},
    CLI_LIST_LONGOPTS,
};

static const cli_lister hooks_lister = {
    .what = "events",
    .ncols = 6,
    .head = hooks_head,
    .page_max = HOOKS_PAGE,
    .longopts = hooks_longopts,
    .filter = hooks_filter,
    .check = hooks_check,
    .fetch = hooks_fetch,
    .table_add = hooks_table_add,
    .to_json = hooks_to_json,
    .free_page = hooks_free_page,
};

/* The paged listing (cli_list.c) of events. */
static int hooks_ls_run(cli_ctx *ctx, int argc, char **argv)
{
    hooks_list list = {0};
    return cli_list_run(ctx, &hooks_lister, &list, argc, argv);
}

/* ---- hooks show -------------------------------------------------------- */

/* The field: value form, for people: every time (claim_until too, which
 * tells whether a consumer holds the event right now), then a preview of
 * the headers and body. A binary body is not dumped onto a terminal. */
static int hooks_print_event(const void *rec)
{
    const once_event *e = rec;
    int rc = cli_print_text("source", e->source);
    if (rc == ONCE_OK)
        rc = cli_print_text("event_id", e->event_id);
    if (rc != ONCE_OK)
        return rc;
    const char *state = once_event_state_name(e->state);
    printf("state: %s\n", state != NULL ? state : "?");
    printf("attempt: %lld\n", (long long)e->attempt);
    cli_print_time("received_at", e->received_at);
    cli_print_time("updated_at", e->updated_at);
    cli_print_time("next_at", e->next_at);
    cli_print_time("claim_until", e->claim_until);
    cli_print_time("delivered_at", e->delivered_at);
    cli_print_time("expires_at", e->expires_at);
    rc = cli_print_text("content_type", e->content_type);
    if (rc == ONCE_OK)
        rc = cli_print_text("error", e->error);
    if (rc == ONCE_OK)
        rc = cli_print_field("headers", e->headers, e->headers_len, HOOKS_PREVIEW_MAX);
    if (rc != ONCE_OK)
        return rc;
    if (e->body == NULL) {
        fputs("body_bytes: 0\nbody: -\n", stdout);
        return ONCE_OK;
    }
    printf("body_bytes: %zu\n", e->body_len);
    if (utf8_valid(e->body, e->body_len))
        return cli_print_field("body", (const char *)e->body, e->body_len, HOOKS_PREVIEW_MAX);
    fputs("body: (binary; see --json for body_base64)\n", stdout);
    return ONCE_OK;
}

/* Reads the event on the open store; a failure is reported naming it. */
static int hooks_read_event(once_store *store, const char *source, const char *id, void *rec)
{
    int rc = once_event_get(store, source, id, rec);
    if (rc != ONCE_OK)
        return hooks_fail_event(rc, "cannot read event", source, id);
    return CLI_EXIT_OK;
}

/* once_event_free for the record view. */
static void hooks_free_event(void *rec)
{
    once_event_free(rec);
}

static const cli_record_kind hooks_event_kind = {
    .what = "event",
    .first = "SOURCE",
    .second = "ID",
    .check = hooks_check_source_id,
    .read = hooks_read_event,
    .to_json = hooks_to_json,
    .to_text = hooks_print_event,
    .free_record = hooks_free_event,
};

/* The one-record view (cli_record.c) of an event. */
static int hooks_show_run(cli_ctx *ctx, int argc, char **argv)
{
    once_event e = {0};
    return cli_record_run(ctx, &hooks_event_kind, &e, argc, argv);
}

/* ---- hooks redeliver --------------------------------------------------- */

/* The event redeliver names. */
typedef struct hooks_target {
    const char *source;
    const char *id;
} hooks_target;

/* Makes the event pending and due now on the open store, and says so. */
static int hooks_redeliver_event(once_store *store, void *arg)
{
    const hooks_target *t = arg;
    int rc = once_event_redeliver(store, t->source, t->id);
    if (rc != ONCE_OK)
        return hooks_fail_event(rc, "cannot redeliver event", t->source, t->id);
    /* Both operands passed the checks before: printable, one line. */
    printf("redelivering %s %s\n", t->source, t->id);
    return CLI_EXIT_OK;
}

/* SOURCE ID checked before the store is opened, then the redelivery. */
static int hooks_redeliver_run(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, argc, argv, 2) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    hooks_target t = {0};
    int code = cli_take_operand_pair(ctx->cmd, argc, argv, "SOURCE", "ID", &t.source, &t.id);
    if (code == CLI_EXIT_OK)
        code = hooks_check_source_id(t.source, t.id);
    if (code != CLI_EXIT_OK)
        return code;
    return cli_finish_stdout(cli_run_on_store(ctx, hooks_redeliver_event, &t));
}

/* ---- dispatch ---------------------------------------------------------- */

/* `once help hooks`: the subcommands with their options, in one page. */
const char cli_hooks_help[] =
    "Subcommands:\n"
    "  once hooks ls [--source S] [--status S] [--limit N] [--json]\n"
    "      List events in arrival order: SOURCE EVENT_ID STATE ATTEMPT RECEIVED ERROR.\n"
    "        --source S   only events of source S\n"
    "        --status S   only events in state S: pending, delivered or dead\n"
    "        --limit N    at most N events, 1..100000 (default 100)\n"
    "        --json       a JSON array of records instead of a table\n"
    "  once hooks show SOURCE ID [--json]\n"
    "      Show one event with its headers and body; --json for the JSON record\n"
    "      (a body that is not UTF-8 comes as body_base64).\n"
    "  once hooks redeliver SOURCE ID\n"
    "      Make the event pending and due now, whatever its state (delivered and\n"
    "      dead events included): the running gateway delivers it again. Its\n"
    "      attempt count goes on.\n"
    "\n"
    "Exit status: 0 success; 1 bad usage or no such event; 2 the store failed.\n";

/* The subcommands, one row each as in main.c's table: name, run, usage,
 * then summary, help, no_store, print_help. */
static const cli_command hooks_subcommands[] = {
    {"ls", hooks_ls_run, "once hooks ls [--source S] [--status S] [--limit N] [--json]",
     "List webhook events, oldest first.", hooks_ls_help, 0, NULL},
    {"show", hooks_show_run, "once hooks show SOURCE ID [--json]",
     "Show one webhook event, with its headers and body.", cli_record_help, 0, NULL},
    {"redeliver", hooks_redeliver_run, "once hooks redeliver SOURCE ID",
     "Make a webhook event pending and due now: the gateway delivers it again.", NULL, 0, NULL},
};

#define HOOKS_NSUB (sizeof hooks_subcommands / sizeof hooks_subcommands[0])

/* 1 when the long option word (after "--", without "=value") names, or
 * abbreviates as getopt_long allows, an option that takes a separate value
 * in any subcommand, so the word after it is that value. */
static int hooks_takes_value(const char *name)
{
    static const char *const with_value[] = {"store", "config", "source", "status", "limit"};
    size_t n = strlen(name);
    if (n == 0 || strchr(name, '=') != NULL)
        return 0;
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++) {
        if (strncmp(with_value[i], name, n) == 0)
            return 1;
    }
    return 0;
}

/* Options may come before the subcommand (`once hooks --store X ls`), so
 * the subcommand is the first word that is neither an option nor an
 * option's value. Its index, or -1; *help is set when -h or --help came
 * before it. */
static int hooks_find_subcommand(int argc, char **argv, int *help)
{
    *help = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return i + 1 < argc ? i + 1 : -1;
        if (a[0] != '-' || a[1] == '\0')
            return i;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            *help = 1;
        else if (a[1] == '-' && hooks_takes_value(a + 2))
            i++;
    }
    return -1;
}

/* Finds the subcommand and runs it on the words around it, so its own
 * getopt_long sees every option, wherever it was written, and reports
 * errors with the subcommand's usage. */
int cli_hooks_run(cli_ctx *ctx, int argc, char **argv)
{
    int help = 0;
    int at = hooks_find_subcommand(argc, argv, &help);
    if (at < 0) {
        if (help)
            return cli_show_help(ctx->cmd);
        return cli_fail_usage(ctx->cmd, "missing subcommand (ls, show or redeliver)");
    }
    const cli_command *sub = cli_find_command(hooks_subcommands, HOOKS_NSUB, argv[at]);
    if (sub == NULL)
        return cli_fail_quoted(ctx->cmd, "unknown subcommand", argv[at], " (expected ls, show or redeliver)");
    char **sub_argv = malloc((size_t)argc * sizeof *sub_argv);
    if (sub_argv == NULL) {
        cli_print_error("out of memory");
        return CLI_EXIT_STORE;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i != at)
            sub_argv[n++] = argv[i];
    }
    sub_argv[n] = NULL;
    int code = cli_run_command(ctx, sub, n, sub_argv);
    free(sub_argv);
    return code;
}
