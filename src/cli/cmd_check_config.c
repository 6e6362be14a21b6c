/*
 * cmd_check_config.c — `once check-config FILE`: load a gateway
 * configuration exactly as `once serve` would, report the first problem as
 * FILE:LINE, and exit.
 */
#include <stdio.h>

#include "cli/cli.h"
#include "server/config.h"

static int check_config_run(cli_ctx *ctx, int argc, char **argv);

const cli_command cli_cmd_check_config = {
    .name = "check-config",
    .run = check_config_run,
    .usage = "once check-config FILE",
    .summary = "Validate a gateway configuration file and exit.",
    .help = "Exit status 0 when the file would start the gateway, 1 with FILE:LINE: what otherwise.\n",
};

static int check_config_run(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, CLI_OPT_STORE},
        {"help", no_argument, NULL, CLI_OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = cli_getopt(ctx, &cli_cmd_check_config, argc, argv, ":h", opts)) != -1) {
        if (c == -2)
            return CLI_EXIT_USAGE;
        if (c == CLI_OPT_HELP) {
            cli_print_command_help(&cli_cmd_check_config, stdout);
            return cli_finish_stdout(CLI_EXIT_OK);
        }
    }
    if (argc - optind != 1)
        return cli_fail_usage(&cli_cmd_check_config, "expected one FILE");
    const char *path = argv[optind];
    once_config cfg;
    char err[512];
    if (config_load(path, &cfg, err, sizeof err) < 0) {
        cli_print_error("%s", err);
        return CLI_EXIT_USAGE;
    }
    printf("%s: ok (%zu upstream%s)\n", path, cfg.nupstreams, cfg.nupstreams == 1 ? "" : "s");
    config_free(&cfg);
    return cli_finish_stdout(CLI_EXIT_OK);
}
