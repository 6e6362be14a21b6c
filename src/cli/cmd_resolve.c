/*
 * cmd_resolve.c — `once resolve SCOPE KEY --completed|--released`: a human
 * settles an action the ledger cannot settle alone (unknown or held), after
 * checking with the provider whether it happened.
 */
#include "cli/cli.h"

enum { RESOLVE_OPT_PROVIDER_ID = 2200, RESOLVE_OPT_NOTE };

/* One resolution: the action, the outcome and the options. */
typedef struct resolve_req {
    cli_action_ref a;
    once_outcome outcome;
    const char *provider_id;
    const char *note;
} resolve_req;

/* Settles the action on the open store and says so. */
static int resolve_apply(once_store *store, void *arg)
{
    const resolve_req *r = arg;
    const cli_action_ref *a = &r->a;
    int rc = once_resolve(store, a->scope, a->key, r->outcome, r->provider_id, r->note);
    if (rc != ONCE_OK)
        return cli_fail_once_about(rc, "cannot resolve action", a->scope, a->key);
    printf("resolved %s %s: %s\n", a->qs, a->qk,
           r->outcome == ONCE_OUTCOME_COMPLETED ? "completed" : "released");
    return CLI_EXIT_OK;
}

/* The options resolve_run takes, as `once help resolve` describes them. */
const char cli_resolve_help[] =
    "Options:\n"
    "  --completed        it happened (the provider has it); it will not be retried\n"
    "  --provider-id ID   with --completed: the provider's id for it\n"
    "  --released         it certainly did not happen; the key is free again\n"
    "  --note TEXT        why, for whoever looks next\n";

/* Checks the options against each other and the operands before the store
 * is opened, then settles the action. */
int cli_resolve_run(cli_ctx *ctx, int argc, char **argv)
{
    int completed = 0;
    int released = 0;
    const struct option opts[] = {
        {"completed", no_argument, &completed, 1},
        {"released", no_argument, &released, 1},
        {"provider-id", required_argument, NULL, RESOLVE_OPT_PROVIDER_ID},
        {"note", required_argument, NULL, RESOLVE_OPT_NOTE},
        CLI_LONGOPTS_COMMON,
    };
    const cli_command *cmd = ctx->cmd;
    resolve_req r = {0};
    /* --provider-id and --note are checked against the rest once all are
     * read. */
    cli_text_option texts[] = {{RESOLVE_OPT_PROVIDER_ID, &r.provider_id}, {RESOLVE_OPT_NOTE, &r.note}, {0, NULL}};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, opts, cli_take_text, texts) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    int code = cli_take_operand_pair(cmd, argc, argv, "SCOPE", "KEY", &r.a.scope, &r.a.key);
    if (code != CLI_EXIT_OK)
        return code;
    if (completed == released)
        return cli_fail_usage(cmd, "give exactly one of --completed and --released");
    if (released && r.provider_id != NULL)
        return cli_fail_usage(cmd, "--provider-id goes with --completed only");
    r.outcome = completed ? ONCE_OUTCOME_COMPLETED : ONCE_OUTCOME_RELEASED;
    return cli_change_action(ctx, &r.a, resolve_apply, &r);
}
