/*
 * cmd_ls.c — `once ls`: lists actions in creation order, optionally only
 * those of one state or scope, as a table or as a JSON array. It follows the
 * ledger's pages itself (cli_list.c), so --limit is the number of records,
 * not of pages.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "json/action_json.h"

#define LS_LIMIT_DEFAULT 100
#define LS_LIMIT_MAX 100000
/* Records asked for per once_list call: small pages keep memory flat while
 * the JSON form streams out. */
#define LS_PAGE 100

enum { LS_OPT_STATUS = 2000, LS_OPT_SCOPE, LS_OPT_LIMIT, LS_OPT_JSON };

static int ls_run(cli_ctx *ctx, int argc, char **argv);

const cli_command cli_cmd_ls = {
    .name = "ls",
    .run = ls_run,
    .usage = "once ls [--status S] [--scope S] [--limit N] [--json]",
    .summary = "List actions, oldest first.",
    .help = "Options:\n"
            "  --status S   only actions in state S: pending, completed, released, unknown, held\n"
            "  --scope S    only actions of scope S\n"
            "  --limit N    at most N actions, 1..100000 (default 100)\n"
            "  --json       a JSON array of records instead of a table\n",
};

/* What ls reads: its filters and the page in hand. */
typedef struct ls_list {
    once_state state;
    const char *scope;
    once_action_list page;
} ls_list;

/* A page of actions after cursor, with the command's filters. */
static int ls_fetch(once_store *store, void *list, const char *cursor, size_t limit, cli_page *page)
{
    ls_list *ls = list;
    once_list_req req = {
        .state = ls->state,
        .scope = ls->scope,
        .limit = limit,
        .cursor = cursor,
    };
    ls->page = (once_action_list){0};
    int rc = once_list(store, &req, &ls->page);
    if (rc == ONCE_OK)
        *page = (cli_page){ls->page.items, ls->page.count, sizeof *ls->page.items, ls->page.next};
    return rc;
}

/* The lister frees each page once its rows are out. */
static void ls_free_page(void *list)
{
    once_action_list_free(&((ls_list *)list)->page);
}

/* One row: the columns an operator scans for; the rest is in `once show`. */
static int ls_table_add(cli_table *t, const void *row)
{
    const once_action *a = row;
    char attempt[24];
    char updated[32];
    snprintf(attempt, sizeof attempt, "%lld", (long long)a->attempt);
    const char *cells[6] = {
        a->scope,
        a->key,
        once_state_name(a->state),
        attempt,
        cli_format_time(a->updated_at, updated, sizeof updated),
        a->provider_id,
    };
    return cli_table_add_row(t, cells);
}

/* The JSON row is the record `once show --json` prints. */
static int ls_to_json(const void *row, json_t **out)
{
    return action_json_from(row, out);
}

static const char *const ls_head[6] = {"SCOPE", "KEY", "STATE", "ATTEMPT", "UPDATED", "PROVIDER_ID"};

static const cli_lister ls_lister = {
    .what = "actions",
    .ncols = 6,
    .head = ls_head,
    .page_max = LS_PAGE,
    .fetch = ls_fetch,
    .table_add = ls_table_add,
    .to_json = ls_to_json,
    .free_page = ls_free_page,
};

static int ls_run(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"status", required_argument, NULL, LS_OPT_STATUS},
        {"scope", required_argument, NULL, LS_OPT_SCOPE},
        {"limit", required_argument, NULL, LS_OPT_LIMIT},
        {"json", no_argument, NULL, LS_OPT_JSON},
        {"store", required_argument, NULL, CLI_OPT_STORE},
        {"help", no_argument, NULL, CLI_OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    ls_list list = {0};
    size_t limit = LS_LIMIT_DEFAULT;
    int json = 0;
    int c;
    while ((c = cli_getopt(ctx, &cli_cmd_ls, argc, argv, ":h", opts)) != -1) {
        switch (c) {
        case -2:
            return CLI_EXIT_USAGE;
        case CLI_OPT_HELP:
            cli_print_command_help(&cli_cmd_ls, stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        case LS_OPT_STATUS:
            if (once_state_parse(optarg, &list.state) != ONCE_OK) {
                char *q = cli_escape_dup(optarg, strlen(optarg), 64);
                cli_fail_usage(&cli_cmd_ls,
                               "unknown status '%s' (expected pending, completed, released, "
                               "unknown or held)",
                               q != NULL ? q : "?");
                free(q);
                return CLI_EXIT_USAGE;
            }
            break;
        case LS_OPT_SCOPE:
            list.scope = optarg;
            break;
        case LS_OPT_LIMIT:
            if (cli_parse_limit(&cli_cmd_ls, optarg, LS_LIMIT_MAX, &limit) != CLI_EXIT_OK)
                return CLI_EXIT_USAGE;
            break;
        case LS_OPT_JSON:
            json = 1;
            break;
        default:
            return cli_fail_usage(&cli_cmd_ls, "unexpected option");
        }
    }
    if (optind < argc) {
        char *q = cli_escape_dup(argv[optind], strlen(argv[optind]), 64);
        cli_fail_usage(&cli_cmd_ls, "unexpected argument '%s'", q != NULL ? q : "?");
        free(q);
        return CLI_EXIT_USAGE;
    }
    if (list.scope != NULL && once_scope_validate(list.scope) != ONCE_OK) {
        char *q = cli_escape_dup(list.scope, strlen(list.scope), 64);
        char what[96];
        snprintf(what, sizeof what, "invalid scope '%s'", q != NULL ? q : "?");
        free(q);
        cli_fail_once(ONCE_EINVAL, what);
        return CLI_EXIT_USAGE;
    }

    return cli_list_run(ctx, &ls_lister, &list, limit, json);
}
