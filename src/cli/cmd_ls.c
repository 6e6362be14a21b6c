/*
 * cmd_ls.c — `once ls`: lists actions in creation order, optionally only
 * those of one state or scope, as a table or as a JSON array. It follows the
 * ledger's pages itself, so --limit is the number of records, not of pages.
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

/* Strictly digits, in range: "10x", "+5", " 5" and "1e3" are all mistakes
 * worth reporting rather than guessing at. */
static int ls_parse_limit(const char *s, size_t *out)
{
    if (s[0] == '\0' || strlen(s) > 6)
        return -1;
    size_t v = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (size_t)(*p - '0');
    }
    if (v < 1 || v > LS_LIMIT_MAX)
        return -1;
    *out = v;
    return 0;
}

static int ls_table_add(cli_table *t, const once_action *a)
{
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

static int ls_json_print(const once_action *a, int first)
{
    json_t *j = NULL;
    int rc = action_json_from(a, &j);
    if (rc != ONCE_OK)
        return rc;
    fputs(first ? "\n  " : ",\n  ", stdout);
    int w = json_dumpf(j, stdout, JSON_COMPACT);
    json_decref(j);
    return w == 0 ? ONCE_OK : ONCE_ENOMEM;
}

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
    once_state state = 0;
    const char *scope = NULL;
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
            if (once_state_parse(optarg, &state) != ONCE_OK) {
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
            scope = optarg;
            break;
        case LS_OPT_LIMIT:
            if (ls_parse_limit(optarg, &limit) != 0) {
                char *q = cli_escape_dup(optarg, strlen(optarg), 64);
                cli_fail_usage(&cli_cmd_ls, "--limit must be an integer from 1 to %d, not '%s'",
                               LS_LIMIT_MAX, q != NULL ? q : "?");
                free(q);
                return CLI_EXIT_USAGE;
            }
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
    if (scope != NULL && once_scope_validate(scope) != ONCE_OK) {
        char *q = cli_escape_dup(scope, strlen(scope), 64);
        char what[96];
        snprintf(what, sizeof what, "invalid scope '%s'", q != NULL ? q : "?");
        free(q);
        cli_fail_once(ONCE_EINVAL, what);
        return CLI_EXIT_USAGE;
    }

    once_store *store = NULL;
    int code = cli_open_store(ctx, &store);
    if (code != CLI_EXIT_OK)
        return code;

    cli_table *table = NULL;
    if (!json) {
        table = cli_table_new(6);
        static const char *const head[6] = {"SCOPE",   "KEY",     "STATE",
                                            "ATTEMPT", "UPDATED", "PROVIDER_ID"};
        if (table == NULL || cli_table_add_row(table, head) != ONCE_OK) {
            cli_print_error("out of memory");
            cli_table_free(table);
            once_store_close(store);
            return CLI_EXIT_STORE;
        }
    } else {
        fputs("[", stdout);
    }

    char cursor[ONCE_CURSOR_MAX] = "";
    size_t left = limit;
    size_t shown = 0;
    code = CLI_EXIT_OK;
    while (left > 0) {
        once_list_req req = {
            .state = state,
            .scope = scope,
            .limit = left < LS_PAGE ? left : LS_PAGE,
            .cursor = cursor,
        };
        once_action_list page = {0};
        int rc = once_list(store, &req, &page);
        if (rc != ONCE_OK) {
            code = cli_fail_once(rc, "cannot list actions");
            break;
        }
        for (size_t i = 0; i < page.count && left > 0 && rc == ONCE_OK; i++, left--) {
            if (json)
                rc = ls_json_print(&page.items[i], shown == 0);
            else
                rc = ls_table_add(table, &page.items[i]);
            shown++;
        }
        if (rc != ONCE_OK) {
            once_action_list_free(&page);
            cli_print_error("cannot format actions: %s", once_strerror(rc));
            code = CLI_EXIT_STORE;
            break;
        }
        /* An empty page with a cursor would loop forever: treat as the end. */
        int more = page.next[0] != '\0' && page.count > 0;
        snprintf(cursor, sizeof cursor, "%s", page.next);
        once_action_list_free(&page);
        if (!more)
            break;
    }
    once_store_close(store);

    if (json) {
        fputs(shown > 0 ? "\n]\n" : "]\n", stdout);
    } else {
        if (code == CLI_EXIT_OK)
            cli_table_print(table, stdout);
        cli_table_free(table);
    }
    return cli_finish_stdout(code);
}
