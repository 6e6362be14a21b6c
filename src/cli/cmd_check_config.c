/*
 * cmd_check_config.c — `once check-config FILE`: loads the gateway's
 * configuration exactly as `once serve --config FILE` would (environment
 * overrides included) and says whether it is usable, so a bad retry policy
 * is caught before a deploy rather than by a double charge.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/config/config.h"

/* Room for "file:line: what" with a quoted value or two. */
#define CHECK_CONFIG_ERR_MAX 1024

/* Loads the file and reports; separate from the option parsing so the
 * check itself reads in one place. */
static int check_config_file(const char *path)
{
    once_config cfg;
    char err[CHECK_CONFIG_ERR_MAX];
    if (config_load(path, &cfg, err, sizeof err) != 0) {
        cli_print_error("%s", err);
        return CLI_EXIT_USAGE;
    }
    /* Escaped: a file name can hold anything, and this is one line. */
    char *q = cli_escape_dup(path, strlen(path), 0);
    char why[CHECK_CONFIG_ERR_MAX];
    if (config_check_exposure(&cfg, why, sizeof why) < 0) {
        cli_print_error("%s: %s", q != NULL ? q : path, why);
        free(q);
        config_free(&cfg);
        return CLI_EXIT_USAGE;
    }
    char summary[160];
    config_summary(&cfg, summary, sizeof summary);
    printf("%s: ok (%s)\n", q != NULL ? q : path, summary);
    free(q);
    config_free(&cfg);
    return cli_finish_stdout(CLI_EXIT_OK);
}

/* What the check does and prints, next to the code that does it. */
const char cli_check_config_help[] =
    "Loads FILE as 'once serve --config FILE' would, with $ONCE_LISTEN and\n"
    "$ONCE_STORE applied, and prints \"FILE: ok (N upstreams, M MCP servers,\n"
    "K webhook sources, J agent sections)\".\n"
    "On the first problem it prints \"once: FILE:LINE: what was wrong\" and exits 1;\n"
    "a listen address off loopback without a tokens_file is such a problem.\n"
    "Nothing is opened but FILE and the files its keys name.\n";

/* One operand, the file; no options of its own. */
int cli_check_config_run(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, argc, argv, 1) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind == argc)
        return cli_fail_usage(ctx->cmd, "no configuration file given");
    return check_config_file(argv[optind]);
}
