/*
 * cmd_decide.c — `once approve SCOPE KEY` and `once deny SCOPE KEY`: a
 * human's decision on an action waiting for approval, written to the store.
 * The CLI sends nothing: a gateway's background loop sends approved actions
 * within one loop interval (docs/approvals.md).
 */
#include <string.h>

#include "cli/cli.h"

enum { DECIDE_OPT_NOTE = 2300 };

/* The trail names the decider: from the CLI, "cli". */
#define DECIDE_WHO "cli"

/* One decision: the action and the note. */
typedef struct decide_req {
    int approve;
    cli_action_ref a;
    const char *note;
} decide_req;

/* Writes the decision on the open store and says so. */
static int decide_apply(once_store *store, void *arg)
{
    const decide_req *d = arg;
    const cli_action_ref *a = &d->a;
    int rc = d->approve ? once_approve(store, a->scope, a->key, DECIDE_WHO, d->note)
                        : once_deny(store, a->scope, a->key, DECIDE_WHO, d->note);
    if (rc != ONCE_OK)
        return cli_fail_once_about(rc, d->approve ? "cannot approve action" : "cannot deny action", a->scope, a->key);
    if (d->approve)
        printf("approved %s %s: a running gateway sends it within one loop interval\n", a->qs, a->qk);
    else
        printf("denied %s %s: retries get 403 denied\n", a->qs, a->qk);
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
    cli_text_option texts[] = {{DECIDE_OPT_NOTE, &d.note}, {0, NULL}};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, opts, cli_take_text, texts) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    int code = cli_take_operand_pair(cmd, argc, argv, "SCOPE", "KEY", &d.a.scope, &d.a.key);
    if (code != CLI_EXIT_OK)
        return code;
    return cli_change_action(ctx, &d.a, decide_apply, &d);
}
