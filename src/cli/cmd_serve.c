/*
 * cmd_serve.c — `once serve`: load the configuration, apply the command
 * line over it, and run the gateway until SIGTERM.
 *
 * Precedence, most specific first: --listen/--store flags, then ONCE_LISTEN /
 * ONCE_STORE (applied by config_load), then the file.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/config/config.h"
#include "server/server.h"

/* Replaces *slot (owned by the config) with a copy of value. */
static int serve_override(char **slot, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -1;
    free(*slot);
    *slot = copy;
    return 0;
}

/* The options of its own on the command line (--config FILE, -c FILE is
 * the global option, in ctx: `once --config FILE serve` reads it too). */
typedef struct serve_flags {
    const char *listen; /* --listen ADDR */
} serve_flags;

/* What a running gateway does with its output and its signals: said here,
 * next to the code that starts it. */
const char cli_serve_help[] =
    "Logs one JSON line per request on stderr. SIGTERM or SIGINT: stop accepting,\n"
    "let in-flight calls finish within shutdown_grace, exit 0.\n";

/* The flags over the file, checked, then the gateway until it stops. */
int cli_serve_run(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        CLI_LONGOPTS_COMMON,
    };
    serve_flags f = {0};
    /* -c (--config) and --listen (-l): a later one replaces an earlier one. */
    cli_text_option texts[] = {{'c', &ctx->config_path}, {'l', &f.listen}, {0, NULL}};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS "c:l:", opts, cli_take_text, texts) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind < argc)
        return cli_fail_usage(ctx->cmd, "unexpected argument '%s'", argv[optind]);
    if (!ctx->config_path)
        return cli_fail_usage(ctx->cmd, "--config FILE is required");
    once_config cfg;
    char err[512];
    if (config_load(ctx->config_path, &cfg, err, sizeof err) < 0) {
        cli_print_error("%s", err);
        return CLI_EXIT_USAGE;
    }
    if ((f.listen && serve_override(&cfg.listen, f.listen) < 0) ||
        (ctx->store_given && serve_override(&cfg.store, ctx->store_url) < 0)) {
        cli_print_error("out of memory");
        config_free(&cfg);
        return CLI_EXIT_STORE;
    }
    /* Checked after the flags: --listen may be what exposes it. */
    if (config_check_exposure(&cfg, err, sizeof err) < 0) {
        cli_print_error("%s", err);
        config_free(&cfg);
        return CLI_EXIT_STORE; /* 2: refusing to start, as for a store that cannot open */
    }
    int status = server_run(&cfg);
    config_free(&cfg);
    return status;
}
