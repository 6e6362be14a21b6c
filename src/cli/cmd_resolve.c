/*
 * cmd_resolve.c — `once resolve SCOPE KEY --completed|--released`: a human
 * settles an action the ledger cannot settle alone (unknown or held), after
 * checking with the provider whether it happened.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum {
    RESOLVE_OPT_COMPLETED = 2200,
    RESOLVE_OPT_RELEASED,
    RESOLVE_OPT_PROVIDER_ID,
    RESOLVE_OPT_NOTE
};

static int resolve_run(cli_ctx *ctx, int argc, char **argv);

const cli_command cli_cmd_resolve = {
    .name = "resolve",
    .run = resolve_run,
    .usage = "once resolve SCOPE KEY (--completed [--provider-id ID] | --released) [--note TEXT]",
    .summary = "Settle an unknown or held action by hand.",
    .help = "Options:\n"
            "  --completed        it happened (the provider has it); it will not be retried\n"
            "  --provider-id ID   with --completed: the provider's id for it\n"
            "  --released         it certainly did not happen; the key is free again\n"
            "  --note TEXT        why, for whoever looks next\n",
};

static int resolve_run(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"completed", no_argument, NULL, RESOLVE_OPT_COMPLETED},
        {"released", no_argument, NULL, RESOLVE_OPT_RELEASED},
        {"provider-id", required_argument, NULL, RESOLVE_OPT_PROVIDER_ID},
        {"note", required_argument, NULL, RESOLVE_OPT_NOTE},
        {"store", required_argument, NULL, CLI_OPT_STORE},
        {"help", no_argument, NULL, CLI_OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int completed = 0;
    int released = 0;
    const char *provider_id = NULL;
    const char *note = NULL;
    int c;
    while ((c = cli_getopt(ctx, &cli_cmd_resolve, argc, argv, ":h", opts)) != -1) {
        switch (c) {
        case -2:
            return CLI_EXIT_USAGE;
        case CLI_OPT_HELP:
            cli_print_command_help(&cli_cmd_resolve, stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        case RESOLVE_OPT_COMPLETED:
            completed = 1;
            break;
        case RESOLVE_OPT_RELEASED:
            released = 1;
            break;
        case RESOLVE_OPT_PROVIDER_ID:
            provider_id = optarg;
            break;
        case RESOLVE_OPT_NOTE:
            note = optarg;
            break;
        default:
            return cli_fail_usage(&cli_cmd_resolve, "unexpected option");
        }
    }
    if (argc - optind < 2)
        return cli_fail_usage(&cli_cmd_resolve, "missing %s",
                              argc - optind == 0 ? "SCOPE and KEY" : "KEY");
    if (argc - optind > 2)
        return cli_fail_usage(&cli_cmd_resolve, "too many arguments");
    if (completed == released)
        return cli_fail_usage(&cli_cmd_resolve, "give exactly one of --completed and --released");
    if (released && provider_id != NULL)
        return cli_fail_usage(&cli_cmd_resolve, "--provider-id goes with --completed only");
    const char *scope = argv[optind];
    const char *key = argv[optind + 1];
    int code = cli_check_scope_key(scope, key);
    if (code != CLI_EXIT_OK)
        return code;

    char *qs = cli_escape_dup(scope, strlen(scope), 64);
    char *qk = cli_escape_dup(key, strlen(key), 64);
    if (qs == NULL || qk == NULL) {
        free(qs);
        free(qk);
        cli_print_error("out of memory");
        return CLI_EXIT_STORE;
    }
    char what[192];
    snprintf(what, sizeof what, "cannot resolve action %s %s", qs, qk);

    once_store *store = NULL;
    code = cli_open_store(ctx, &store);
    if (code != CLI_EXIT_OK) {
        free(qs);
        free(qk);
        return code;
    }
    once_outcome outcome = completed ? ONCE_OUTCOME_COMPLETED : ONCE_OUTCOME_RELEASED;
    int rc = once_resolve(store, scope, key, outcome, provider_id, note);
    if (rc != ONCE_OK) {
        code = cli_fail_once(rc, what);
    } else {
        printf("resolved %s %s: %s\n", qs, qk, completed ? "completed" : "released");
        code = CLI_EXIT_OK;
    }
    once_store_close(store);
    free(qs);
    free(qk);
    return cli_finish_stdout(code);
}
