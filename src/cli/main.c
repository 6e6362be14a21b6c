/*
 * main.c — the `once` binary: global options, the table of subcommands
 * (git-style: `once ls`, `once show`, ...), `once help` and `once version`.
 * A new subcommand is its cli_X_run in a cmd_*.c (declared in cli.h) and
 * one row in main_commands.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* The two commands main.c runs itself; the table below names them. */
static int main_run_help(cli_ctx *ctx, int argc, char **argv);
static int main_run_version(cli_ctx *ctx, int argc, char **argv);

/* Every command, one row each, in the order `once help` lists them: what
 * `once help` shows of all of them at once. The help texts, which say what
 * a command's options and operands do, sit next to the code that parses
 * them (cli_X_help, or cli_record_help for the one-record commands). */
static const cli_command main_commands[] = {
    /* name, run, usage,
     *   summary, help, no_store, print_help */
    {"serve", cli_serve_run, "once serve --config FILE [--listen ADDR] [--store URL]",
     "Run the gateway: the idempotent proxy and the actions API.", cli_serve_help, 0, NULL},
    {"check-config", cli_check_config_run, "once check-config FILE",
     "Check a gateway configuration file and exit.", cli_check_config_help, 1, NULL},
    {"ls", cli_ls_run, "once ls [--status S] [--scope S] [--agent NAME] [--limit N] [--json]",
     "List actions, oldest first.", NULL, 0, cli_ls_print_help},
    {"show", cli_show_run, "once show SCOPE KEY [--json]",
     "Show one action, with its stored response.", cli_record_help, 0, NULL},
    {"resolve", cli_resolve_run, "once resolve SCOPE KEY (--completed [--provider-id ID] | --released) [--note TEXT]",
     "Settle an unknown or held action by hand.", cli_resolve_help, 0, NULL},
    {"approve", cli_decide_run, "once approve SCOPE KEY [--note TEXT]",
     "Approve an action waiting for approval: a gateway sends it.", cli_decide_help, 0, NULL},
    {"deny", cli_decide_run, "once deny SCOPE KEY [--note TEXT]",
     "Deny an action waiting for approval: it is never sent.", cli_decide_help, 0, NULL},
    {"gc", cli_gc_run, "once gc",
     "Delete completed and released actions past their retention.", cli_gc_help, 0, NULL},
    {"hooks", cli_hooks_run, "once hooks ls|show|redeliver [ARGS] (see 'once help hooks')",
     "List, show or redeliver inbound webhook events.", cli_hooks_help, 0, NULL},
    {"token", cli_token_run, "once token [--operator] NAME",
     "Make a bearer token for the agent NAME, and its tokens_file line.", cli_token_help, 1, NULL},
    {"version", main_run_version, "once version",
     "Print the version of once.", NULL, 1, NULL},
    {"help", main_run_help, "once help [COMMAND]",
     "Show the list of commands, or how to use one.", NULL, 1, NULL},
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
    fputs("usage: once [--store URL | --config FILE] <command> [options]\n"
          "\n"
          "once keeps the ledger of actions that must happen exactly once.\n"
          "\n"
          "Commands:\n",
          stdout);
    for (size_t i = 0; i < MAIN_NCOMMANDS; i++)
        printf("  %-9s %s\n", main_commands[i].name, main_commands[i].summary);
    fputs("\n"
          "Options:\n"
          "  --store URL     the store, before or after the command: sqlite:PATH or\n"
          "                  postgres://... (default sqlite:once.db; $ONCE_STORE when set)\n"
          "  --config FILE   the gateway's config: the store is its store key, as\n"
          "                  'once serve --config FILE' opens it ($ONCE_STORE over it;\n"
          "                  a relative sqlite: path is from the working directory).\n"
          "                  --store beats it\n"
          "  -h, --help      show this help; 'once help COMMAND' for one command\n"
          "  --version       print the version\n"
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

/* `once help [COMMAND]`: the list, or one command's help. */
static int main_run_help(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, argc, argv, 1) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind == argc)
        return main_show_help();
    const cli_command *cmd = main_find_command(argv[optind]);
    if (cmd == NULL)
        return cli_fail_quoted(ctx->cmd, "unknown command", argv[optind], "");
    return cli_show_help(cmd);
}

/* `once version`: no operands, only the common options. */
static int main_run_version(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_parse_operands(ctx, argc, argv, 0) == CLI_GETOPT_DONE)
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
     * and --config again, so they may come after). Hand-parsed so that the
     * first word that is not an option ends them, as in git. */
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        int taken = cli_take_global(&ctx, a, i + 1 < argc ? argv[i + 1] : NULL);
        if (taken < 0)
            return CLI_EXIT_USAGE;
        if (taken > 0) {
            i += taken;
        } else if (strcmp(a, "--") == 0) {
            i++;
            break;
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
    return cli_run_command(&ctx, cmd, argc - i, argv + i);
}
