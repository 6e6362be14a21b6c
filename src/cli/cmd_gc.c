/*
 * cmd_gc.c — `once gc`: deletes completed and released actions whose
 * retention has ended (the same sweep the server runs in the background), so
 * a store can be kept small while the server is down.
 */
#include "cli/cli.h"

static int gc_run(cli_ctx *ctx, int argc, char **argv);

const cli_command cli_cmd_gc = {
    .name = "gc",
    .run = gc_run,
    .usage = "once gc",
    .summary = "Delete completed and released actions past their retention.",
    .help = "Pending, unknown and held actions are never deleted.\n",
};

static int gc_run(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, CLI_OPT_STORE},
        {"help", no_argument, NULL, CLI_OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = cli_getopt(ctx, &cli_cmd_gc, argc, argv, ":h", opts)) != -1) {
        if (c == -2)
            return CLI_EXIT_USAGE;
        if (c == CLI_OPT_HELP) {
            cli_print_command_help(&cli_cmd_gc, stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        }
        return cli_fail_usage(&cli_cmd_gc, "unexpected option");
    }
    if (optind < argc)
        return cli_fail_usage(&cli_cmd_gc, "too many arguments");

    once_store *store = NULL;
    int code = cli_open_store(ctx, &store);
    if (code != CLI_EXIT_OK)
        return code;
    size_t count = 0, events = 0;
    int rc = once_sweep(store, once_now_ms(), &count);
    if (rc != ONCE_OK) {
        code = cli_fail_once(rc, "cannot delete expired actions");
    } else if ((rc = once_event_sweep(store, once_now_ms(), &events)) != ONCE_OK) {
        code = cli_fail_once(rc, "cannot delete expired webhook events");
    } else {
        printf("deleted %zu expired action%s and %zu webhook event%s\n", count, count == 1 ? "" : "s", events,
               events == 1 ? "" : "s");
    }
    once_store_close(store);
    return cli_finish_stdout(code);
}
