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

/* Records asked for per once_list call: small pages keep memory flat while
 * the JSON form streams out. */
#define LS_PAGE 100

enum { LS_OPT_STATUS = 2000, LS_OPT_SCOPE, LS_OPT_AGENT };

/* Room for every state's name in one line (they are about 80 bytes). */
#define LS_STATE_NAMES_MAX 256
/* Help lines stay within a terminal's 80 columns. */
#define LS_HELP_WIDTH 79

/* What ls reads: its filters and the page in hand. */
typedef struct ls_list {
    once_state state;
    const char *scope;
    const char *agent;
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
        .agent = ls->agent,
    };
    ls->page = (once_action_list){0};
    int rc = once_list(store, &req, &ls->page);
    if (rc == ONCE_OK)
        *page = CLI_PAGE_OF(ls->page);
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
    return cli_list_row(t, a->scope, a->key, once_state_name(a->state), a->attempt, a->updated_at, a->provider_id, 0);
}

/* The JSON row is the record `once show --json` prints. */
static int ls_to_json(const void *row, json_t **out)
{
    return action_json_from(row, out);
}

/* Every state libonce names, in the enum's order, "a, b, ... or z" into
 * buf: read from libonce (once_state_name answers NULL past the last), so
 * the message and the help cannot leave out a state the ledger has. */
static char *ls_state_names(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int s = ONCE_STATE_PENDING; once_state_name((once_state)s) != NULL && at < cap; s++) {
        const char *sep = s == ONCE_STATE_PENDING ? "" : once_state_name((once_state)(s + 1)) ? ", " : " or ";
        int n = snprintf(buf + at, cap - at, "%s%s", sep, once_state_name((once_state)s));
        at += n > 0 ? (size_t)n : 0;
    }
    return buf;
}

/* Takes --status, --agent (both checked here), and --scope as typed
 * (ls_check checks it). */
static int ls_filter(const cli_command *cmd, void *list, int c, const char *value)
{
    ls_list *ls = list;
    if (c == LS_OPT_AGENT) {
        ls->agent = value;
        return cli_check_agent_name(cmd, value);
    }
    if (c != LS_OPT_STATUS)
        return cli_take_text(cmd, (cli_text_option[]){{LS_OPT_SCOPE, &ls->scope}, {0, NULL}}, c, value);
    if (once_state_parse(value, &ls->state) == ONCE_OK)
        return CLI_EXIT_OK;
    char names[LS_STATE_NAMES_MAX];
    char tail[LS_STATE_NAMES_MAX + 16];
    snprintf(tail, sizeof tail, " (expected %s)", ls_state_names(names, sizeof names));
    return cli_fail_quoted(cmd, "unknown status", value, tail);
}

/* A scope is checked as the ledger would, with its words for what is
 * wrong. */
static int ls_check(void *list)
{
    const ls_list *ls = list;
    if (ls->scope == NULL || once_scope_validate(ls->scope) == ONCE_OK)
        return CLI_EXIT_OK;
    char *q = cli_escape_dup(ls->scope, strlen(ls->scope), 64);
    char what[96];
    snprintf(what, sizeof what, "invalid scope '%s'", q != NULL ? q : "?");
    free(q);
    cli_fail_once(ONCE_EINVAL, what);
    return CLI_EXIT_USAGE;
}

static const char *const ls_head[6] = {"SCOPE", "KEY", "STATE", "ATTEMPT", "UPDATED", "PROVIDER_ID"};

/* The options below, as `once help ls` describes them: the states are
 * libonce's (ls_state_names), wrapped under the option's text. */
void cli_ls_print_help(void)
{
    char names[LS_STATE_NAMES_MAX];
    static const char lead[] = "  --status S   only actions in state S:";
    fputs("Options:\n", stdout);
    fputs(lead, stdout);
    size_t col = sizeof lead - 1;
    char *save = NULL;
    for (char *w = strtok_r(ls_state_names(names, sizeof names), " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save)) {
        if (col + 1 + strlen(w) > LS_HELP_WIDTH) {
            fputs("\n              ", stdout);
            col = 14;
        }
        printf(" %s", w);
        col += 1 + strlen(w);
    }
    fputs("\n"
          "  --scope S    only actions of scope S\n"
          "  --agent NAME only actions whose current attempt the agent NAME asked for\n"
          "               (its tokens_file name; `once show` and --json show it)\n"
          "  --limit N    at most N actions, 1..100000 (default 100)\n"
          "  --json       a JSON array of records instead of a table\n",
          stdout);
}

static const struct option ls_longopts[] = {
    {"status", required_argument, NULL, LS_OPT_STATUS},
    {"scope", required_argument, NULL, LS_OPT_SCOPE},
    {"agent", required_argument, NULL, LS_OPT_AGENT},
    CLI_LIST_LONGOPTS,
};

static const cli_lister ls_lister = {
    .what = "actions",
    .ncols = 6,
    .head = ls_head,
    .page_max = LS_PAGE,
    .longopts = ls_longopts,
    .filter = ls_filter,
    .check = ls_check,
    .fetch = ls_fetch,
    .table_add = ls_table_add,
    .to_json = ls_to_json,
    .free_page = ls_free_page,
};

/* The paged listing (cli_list.c) of actions. */
int cli_ls_run(cli_ctx *ctx, int argc, char **argv)
{
    ls_list list = {0};
    return cli_list_run(ctx, &ls_lister, &list, argc, argv);
}
