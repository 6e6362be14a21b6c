/*
 * cmd_decide.c — `once approve SCOPE KEY` and `once deny SCOPE KEY`: a
 * human's decision on an action waiting for approval, written to the store.
 * The CLI sends nothing: a gateway's background loop sends approved actions
 * within one loop interval (docs/approvals.md).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { DECIDE_OPT_NOTE = 2300 };

/* The trail names the decider: from the CLI, "cli". */
#define DECIDE_WHO "cli"

/* One decision: its operands and note, and the operands escaped for the
 * messages. */
typedef struct decide_req {
    int approve;
    const char *scope;
    const char *key;
    const char *note;
    char *qs; /* scope, escaped and cut */
    char *qk; /* key, escaped and cut */
} decide_req;

/* Writes the decision on the open store and says so. */
static int decide_apply(once_store *store, void *arg)
{
    const decide_req *d = arg;
    int rc = d->approve ? once_approve(store, d->scope, d->key, DECIDE_WHO, d->note)
                        : once_deny(store, d->scope, d->key, DECIDE_WHO, d->note);
    if (rc != ONCE_OK) {
        char what[192];
        snprintf(what, sizeof what, "cannot %s action %s %s", d->approve ? "approve" : "deny", d->qs, d->qk);
        return cli_fail_once(rc, what);
    }
    if (d->approve)
        printf("approved %s %s: a running gateway sends it within one loop interval\n", d->qs, d->qk);
    else
        printf("denied %s %s: retries get 403 denied\n", d->qs, d->qk);
    return CLI_EXIT_OK;
}

/* Takes --note. */
static int decide_option(const cli_command *cmd, void *arg, int c, const char *value)
{
    decide_req *d = arg;
    if (c != DECIDE_OPT_NOTE)
        return cli_fail_usage(cmd, "unexpected option");
    d->note = value;
    return CLI_EXIT_OK;
}

/* The options approve and deny take, as `once help approve` describes them. */
const char cli_decide_help[] =
    "Options:\n"
    "  --note TEXT   why, kept in the action's trail (deny: the note retries are refused with)\n";

/* Both commands: argv[0] says which. */
int cli_decide_run(cli_ctx *ctx, int argc, char **argv)
{
    const struct option opts[] = {
        {"note", required_argument, NULL, DECIDE_OPT_NOTE},
        CLI_LONGOPTS_COMMON,
    };
    const cli_command *cmd = ctx->cmd;
    decide_req d = {.approve = strcmp(cmd->name, "approve") == 0};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, opts, decide_option, &d) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    int code = cli_take_operand_pair(cmd, argc, argv, "SCOPE", "KEY", &d.scope, &d.key);
    if (code != CLI_EXIT_OK)
        return code;
    code = cli_check_scope_key(d.scope, d.key);
    if (code != CLI_EXIT_OK)
        return code;
    d.qs = cli_escape_dup(d.scope, strlen(d.scope), 64);
    d.qk = cli_escape_dup(d.key, strlen(d.key), 64);
    if (d.qs == NULL || d.qk == NULL) {
        cli_print_error("out of memory");
        code = CLI_EXIT_STORE;
    } else {
        code = cli_finish_stdout(cli_run_on_store(ctx, decide_apply, &d));
    }
    free(d.qs);
    free(d.qk);
    return code;
}
