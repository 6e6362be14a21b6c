/*
 * main.c — the `once` binary: global options, the table of subcommands
 * (git-style: `once ls`, `once show`, ...), `once help` and `once version`.
 * New subcommands (serve, check-config, ...) only need an entry in
 * main_commands.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int main_run_help(cli_ctx *ctx, int argc, char **argv);
static int main_run_version(cli_ctx *ctx, int argc, char **argv);

static const cli_command main_cmd_help = {
    .name = "help",
    .run = main_run_help,
    .usage = "once help [COMMAND]",
    .summary = "Show the list of commands, or how to use one.",
    .help = NULL,
    .no_store = 1,
};

static const cli_command main_cmd_version = {
    .name = "version",
    .run = main_run_version,
    .usage = "once version",
    .summary = "Print the version of once.",
    .help = NULL,
    .no_store = 1,
};

static const cli_command *const main_commands[] = {
    &cli_cmd_serve, &cli_cmd_check_config, &cli_cmd_ls,       &cli_cmd_show,
    &cli_cmd_resolve, &cli_cmd_gc,          &cli_cmd_hooks,    &main_cmd_version,
    &main_cmd_help,
};

#define MAIN_NCOMMANDS (sizeof main_commands / sizeof main_commands[0])

/* The subcommand called name, or NULL. */
static const cli_command *main_find_command(const char *name)
{
    return cli_find_command(main_commands, MAIN_NCOMMANDS, name);
}

/* `once help`, `once -h` and `once --help`: the list of commands. */
static int main_show_help(void)
{
    fputs("usage: once [--store URL] <command> [options]\n"
          "\n"
          "once keeps the ledger of actions that must happen exactly once.\n"
          "\n"
          "Commands:\n",
          stdout);
    for (size_t i = 0; i < MAIN_NCOMMANDS; i++)
        printf("  %-9s %s\n", main_commands[i]->name, main_commands[i]->summary);
    fputs("\n"
          "Options:\n"
          "  --store URL   the store, before or after the command: sqlite:PATH\n"
          "                (default sqlite:once.db; $ONCE_STORE when set)\n"
          "  -h, --help    show this help; 'once help COMMAND' for one command\n"
          "  --version     print the version\n"
          "\n"
          "Exit status: 0 success; 1 bad usage, no such action or a refused transition;\n"
          "2 the store could not be opened or failed.\n",
          stdout);
    return cli_finish_stdout(CLI_EXIT_OK);
}

/* `once version` and `once --version`. */
static int main_print_version(void)
{
    printf("once %s\n", ONCE_VERSION);
    return cli_finish_stdout(CLI_EXIT_OK);
}

static int main_run_help(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, &main_cmd_help, argc, argv, 1) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind == argc)
        return main_show_help();
    const cli_command *cmd = main_find_command(argv[optind]);
    if (cmd == NULL)
        return cli_fail_quoted(&main_cmd_help, "unknown command", argv[optind], "");
    return cli_show_help(cmd);
}

static int main_run_version(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, &main_cmd_version, argc, argv, 0) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    return main_print_version();
}

int main(int argc, char **argv)
{
    once_global_init(); /* before any thread exists */
    cli_ctx ctx = {0};
    const char *env = getenv("ONCE_STORE");
    ctx.store_url = env != NULL && env[0] != '\0' ? env : CLI_DEFAULT_STORE;

    /* Options before the command; the command parses its own (and --store
     * again, so it may come after). Hand-parsed so that the first word that
     * is not an option ends them, as in git. */
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "--store") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0')
                return cli_fail_usage(NULL, "option '--store' needs a value");
            ctx.store_url = argv[i + 1];
            ctx.store_given = 1;
            i += 2;
        } else if (strncmp(a, "--store=", 8) == 0) {
            if (a[8] == '\0')
                return cli_fail_usage(NULL, "option '--store' needs a value");
            ctx.store_url = a + 8;
            ctx.store_given = 1;
            i++;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            return main_show_help();
        } else if (strcmp(a, "--version") == 0) {
            return main_print_version();
        } else {
            return cli_fail_quoted(NULL, "unknown option", a, "");
        }
    }
    if (i >= argc)
        return cli_fail_usage(NULL, "no command given");

    const cli_command *cmd = main_find_command(argv[i]);
    if (cmd == NULL)
        return cli_fail_quoted(NULL, "unknown command", argv[i], "");
    /* 0 makes glibc's getopt start afresh at argv[1] of the command's argv,
     * with its argument permutation, so options may follow operands. */
    optind = 0;
    opterr = 0;
    return cmd->run(&ctx, argc - i, argv + i);
}
