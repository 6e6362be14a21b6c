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

/* The sweep on the open store: actions first, then webhook events. */
static int gc_sweep(once_store *store, void *arg)
{
    (void)arg;
    size_t count = 0, events = 0;
    int rc = once_sweep(store, once_now_ms(), &count);
    if (rc != ONCE_OK)
        return cli_fail_once(rc, "cannot delete expired actions");
    rc = once_event_sweep(store, once_now_ms(), &events);
    if (rc != ONCE_OK)
        return cli_fail_once(rc, "cannot delete expired webhook events");
    printf("deleted %zu expired action%s and %zu webhook event%s\n", count, count == 1 ? "" : "s", events,
           events == 1 ? "" : "s");
    return CLI_EXIT_OK;
}

static int gc_run(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, &cli_cmd_gc, argc, argv, 0) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    return cli_finish_stdout(cli_run_on_store(ctx, gc_sweep, NULL));
}
