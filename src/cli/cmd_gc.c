/*
 * cmd_gc.c — `once gc`: deletes completed and released actions whose
 * retention has ended (the same sweep the server runs in the background), so
 * a store can be kept small while the server is down.
 */
#include "cli/cli.h"

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

/* What the sweep spares, next to the sweep. */
const char cli_gc_help[] = "Pending, unknown and held actions are never deleted.\n";

/* No operands, no options of its own: the sweep and its one line. */
int cli_gc_run(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, argc, argv, 0) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    return cli_finish_stdout(cli_run_on_store(ctx, gc_sweep, NULL));
}
