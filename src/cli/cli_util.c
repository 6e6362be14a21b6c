/*
 * cli_util.c — error reporting, option and operand parsing, help, and
 * running on an open store, shared by the subcommands, so every command
 * parses and fails the same way: one line on stderr starting with "once: "
 * and an exit code from one policy.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "server/config/config.h"

/* Enough of a user-supplied string to recognise it in a message. */
#define CLI_QUOTE_MAX 80
/* Enough of an operand or an option's value to recognise it. */
#define CLI_OPERAND_QUOTE_MAX 64
/* Enough of a bad --limit value to recognise it. */
#define CLI_LIMIT_QUOTE_MAX 64
/* Enough of a libonce error detail; they are short sentences. */
#define CLI_DETAIL_MAX 512
/* Room for "file:line: what" with a quoted value or two (check-config's). */
#define CLI_CONFIG_ERR_MAX 1024

/* Escapes s into buf so a message stays one printable line whatever the
 * user typed. */
static const char *cli_quote(const char *s, char *buf, size_t cap)
{
    char *e = cli_escape_dup(s, strlen(s), cap - 1);
    if (e == NULL) {
        snprintf(buf, cap, "?");
        return buf;
    }
    snprintf(buf, cap, "%s", e);
    free(e);
    return buf;
}

void cli_print_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("once: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_fail_usage(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("once: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd != NULL)
        fprintf(stderr, "; usage: %s\n", cmd->usage);
    else
        fputs("; usage: once <command> [options] (see 'once help')\n", stderr);
    return CLI_EXIT_USAGE;
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case ONCE_OK:
        return CLI_EXIT_OK;
    case ONCE_ENOTFOUND:
    case ONCE_ESTATE:
    case ONCE_ESTALE:
    case ONCE_EINVAL:
        return CLI_EXIT_USAGE;
    default:
        return CLI_EXIT_STORE;
    }
}

int cli_fail_once(int rc, const char *what)
{
    /* Copy the detail before anything else can touch the thread's slot. */
    char detail[CLI_DETAIL_MAX];
    const char *d = once_errdetail();
    if (d != NULL && d[0] != '\0')
        cli_quote(d, detail, sizeof detail);
    else
        detail[0] = '\0';
    const char *name = once_strerror(rc);
    if (detail[0] != '\0')
        cli_print_error("%s: %s: %s", what, name, detail);
    else
        cli_print_error("%s: %s", what, name);
    return cli_exit_code(rc);
}

/* The names are the ones a person typed, so they go out whole: a key cut
 * with "..." cannot be pasted back into the next command. */
int cli_fail_once_about(int rc, const char *doing, const char *first, const char *second)
{
    /* Nothing here calls libonce before cli_fail_once reads the detail. */
    char *qf = cli_escape_dup(first, strlen(first), 0);
    char *qs = cli_escape_dup(second, strlen(second), 0);
    size_t n = strlen(doing) + (qf != NULL ? strlen(qf) : 1) + (qs != NULL ? strlen(qs) : 1) + 3;
    char *what = malloc(n);
    if (what != NULL)
        snprintf(what, n, "%s %s %s", doing, qf != NULL ? qf : "?", qs != NULL ? qs : "?");
    int code = cli_fail_once(rc, what != NULL ? what : doing);
    free(what);
    free(qf);
    free(qs);
    return code;
}

/* Ends a command from inside option parsing: the code goes in ctx, for the
 * command to return when cli_getopt answers CLI_GETOPT_DONE. */
static int cli_getopt_done(cli_ctx *ctx, int code)
{
    ctx->exit_code = code;
    return CLI_GETOPT_DONE;
}

/* Reports the option getopt_long did not know. optind has moved past the
 * offending argument; inside a cluster of short options only optopt names
 * the culprit. */
static int cli_fail_unknown_option(const cli_command *cmd, char **argv)
{
    char q[CLI_QUOTE_MAX];
    if (optopt > 0 && optopt < 128 && optind > 0 && argv[optind - 1][0] == '-' &&
        argv[optind - 1][1] != '-') {
        char opt[3] = {'-', (char)optopt, '\0'};
        return cli_fail_usage(cmd, "unknown option '%s'", cli_quote(opt, q, sizeof q));
    }
    return cli_fail_usage(cmd, "unknown option '%s'",
                          cli_quote(optind > 0 ? argv[optind - 1] : "?", q, sizeof q));
}

/* Keeps --store's or --config's value (c says which) in ctx, wherever it
 * was typed, so main.c and every command read the two alike. An empty or
 * missing value is reported with cmd's usage (the general one for NULL). */
static int cli_set_global(cli_ctx *ctx, const cli_command *cmd, int c, const char *value)
{
    if (value == NULL || value[0] == '\0')
        return cli_fail_usage(cmd, "option '%s' needs a value", c == CLI_OPT_STORE ? "--store" : "--config");
    if (c == CLI_OPT_STORE) {
        ctx->store_url = value;
        ctx->store_given = 1;
    } else {
        ctx->config_path = value;
    }
    return CLI_EXIT_OK;
}

/* main.c reads its options by hand (the first word that is not one is the
 * command); the values go through cli_set_global as the commands' do. */
int cli_take_global(cli_ctx *ctx, const char *arg, const char *next)
{
    static const struct {
        const char *name;
        int c;
    } globals[] = {{"--store", CLI_OPT_STORE}, {"--config", CLI_OPT_CONFIG}};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++) {
        size_t n = strlen(globals[i].name);
        if (strncmp(arg, globals[i].name, n) != 0 || (arg[n] != '\0' && arg[n] != '='))
            continue;
        const char *value = arg[n] == '=' ? arg + n + 1 : next;
        if (cli_set_global(ctx, NULL, globals[i].c, value) != CLI_EXIT_OK)
            return -1;
        return arg[n] == '=' ? 1 : 2;
    }
    return 0;
}

/* One step of getopt_long: --store, --config and --help are handled here;
 * returns the value of any other option, CLI_GETOPT_END, or
 * CLI_GETOPT_DONE. */
static int cli_getopt(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv,
                      const char *shortopts, const struct option *longopts)
{
    char q[CLI_QUOTE_MAX];
    for (;;) {
        int c = getopt_long(argc, argv, shortopts, longopts, NULL);
        switch (c) {
        case CLI_OPT_STORE:
        case CLI_OPT_CONFIG:
            if (cli_set_global(ctx, cmd, c, optarg) != CLI_EXIT_OK)
                return cli_getopt_done(ctx, CLI_EXIT_USAGE);
            continue;
        case CLI_OPT_HELP:
            return cli_getopt_done(ctx, cli_show_help(cmd));
        case '?':
            return cli_getopt_done(ctx, cli_fail_unknown_option(cmd, argv));
        case ':':
            return cli_getopt_done(
                ctx, cli_fail_usage(cmd, "option '%s' needs a value",
                                    cli_quote(optind > 0 ? argv[optind - 1] : "?", q, sizeof q)));
        default:
            return c;
        }
    }
}

/* The one loop over the options of every subcommand. getopt_long answers 0
 * for a row with a flag pointer, which it has set. Without take, any other
 * value would be a bug: reported as an unexpected option. */
int cli_parse_options(cli_ctx *ctx, int argc, char **argv, const char *shortopts,
                      const struct option *longopts, cli_option_fn take, void *arg)
{
    const cli_command *cmd = ctx->cmd;
    int c;
    while ((c = cli_getopt(ctx, cmd, argc, argv, shortopts, longopts)) != CLI_GETOPT_END) {
        if (c == CLI_GETOPT_DONE)
            return c;
        if (c == 0)
            continue;
        int code = take != NULL ? take(cmd, arg, c, optarg) : cli_fail_usage(cmd, "unexpected option");
        if (code != CLI_EXIT_OK)
            return cli_getopt_done(ctx, code);
    }
    return CLI_GETOPT_END;
}

/* Notes, ids and paths are kept as typed: one rule for every command that
 * takes only such options. */
int cli_take_text(const cli_command *cmd, void *arg, int c, const char *value)
{
    for (const cli_text_option *o = arg; o->slot != NULL; o++) {
        if (o->c == c) {
            *o->slot = value;
            return CLI_EXIT_OK;
        }
    }
    return cli_fail_usage(cmd, "unexpected option");
}

/* The long options of a command that has none of its own. */
static const struct option cli_longopts_common[] = {CLI_LONGOPTS_COMMON};

/* The same message for every such command that is given too many. */
int cli_parse_operands(cli_ctx *ctx, int argc, char **argv, int max)
{
    int c = cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, cli_longopts_common, NULL, NULL);
    if (c == CLI_GETOPT_END && argc - optind > max)
        return cli_getopt_done(ctx, cli_fail_usage(ctx->cmd, "too many arguments"));
    return c;
}

/* SCOPE KEY and SOURCE ID: the messages say which is missing. */
int cli_take_operand_pair(const cli_command *cmd, int argc, char **argv, const char *first,
                          const char *second, const char **a, const char **b)
{
    int n = argc - optind;
    if (n == 0)
        return cli_fail_usage(cmd, "missing %s and %s", first, second);
    if (n == 1)
        return cli_fail_usage(cmd, "missing %s", second);
    if (n > 2)
        return cli_fail_usage(cmd, "too many arguments");
    *a = argv[optind];
    *b = argv[optind + 1];
    return CLI_EXIT_OK;
}

/* A value the user typed (an operand, an option's value) goes into a
 * message escaped and cut, so that the message stays one readable line. */
int cli_fail_quoted(const cli_command *cmd, const char *what, const char *value, const char *tail)
{
    char *q = cli_escape_dup(value, strlen(value), CLI_OPERAND_QUOTE_MAX);
    cli_fail_usage(cmd, "%s '%s'%s", what, q != NULL ? q : "?", tail);
    free(q);
    return CLI_EXIT_USAGE;
}

/* Strictly digits, in range: "10x", "+5", " 5" and "1e3" are all mistakes
 * worth reporting rather than guessing at. No more characters than max has
 * digits, so the value cannot overflow (leading zeros within that count). */
int cli_parse_limit(const cli_command *cmd, const char *s, size_t max, size_t *out)
{
    size_t digits = 1;
    for (size_t m = max; m >= 10; m /= 10)
        digits++;
    size_t v = 0;
    int ok = s[0] != '\0' && strlen(s) <= digits;
    for (const char *p = s; ok && *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            ok = 0;
        else
            v = v * 10 + (size_t)(*p - '0');
    }
    if (ok && v >= 1 && v <= max) {
        *out = v;
        return CLI_EXIT_OK;
    }
    char q[CLI_LIMIT_QUOTE_MAX + 1];
    return cli_fail_usage(cmd, "--limit must be an integer from 1 to %zu, not '%s'", max,
                          cli_quote(s, q, sizeof q));
}

/* The help of one command on stdout: its usage, summary and help text, and
 * --store and --config unless it opens no store. Exit 0, unless writing it
 * failed. */
int cli_show_help(const cli_command *cmd)
{
    printf("usage: %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->print_help != NULL) {
        fputc('\n', stdout);
        cmd->print_help();
    } else if (cmd->help != NULL) {
        printf("\n%s", cmd->help);
    }
    if (!cmd->no_store)
        fputs("\nGlobal options:\n"
              "  --store URL     the store: sqlite:PATH or postgres://...\n"
              "  --config FILE   the gateway's config: its store, as 'once serve' opens it\n"
              "                  (--store beats it; else $ONCE_STORE, else sqlite:once.db)\n",
              stdout);
    return cli_finish_stdout(CLI_EXIT_OK);
}

/* Names are unique in a table, so the first match is the one. */
const cli_command *cli_find_command(const cli_command *table, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    }
    return NULL;
}

/* The one way into a command, for main and for `once hooks`: whatever the
 * command and the helpers report carries the usage of the command that runs,
 * and 0 makes glibc's getopt start afresh at argv[1], with its argument
 * permutation, so options may follow operands. */
int cli_run_command(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
    ctx->cmd = cmd;
    optind = 0;
    opterr = 0;
    return cmd->run(ctx, argc, argv);
}

/* The store key of the gateway's config at path, loaded as `once serve
 * --config` loads it (so $ONCE_STORE is over the file, as for serve): a
 * copy in *out. CLI_EXIT_OK, or the file's first problem reported and
 * CLI_EXIT_USAGE, as check-config reports it. */
static int cli_config_store(const char *path, char **out)
{
    once_config cfg;
    char err[CLI_CONFIG_ERR_MAX];
    if (config_load(path, &cfg, err, sizeof err) != 0) {
        cli_print_error("%s", err);
        return CLI_EXIT_USAGE;
    }
    *out = strdup(cfg.store);
    config_free(&cfg);
    if (*out != NULL)
        return CLI_EXIT_OK;
    cli_print_error("out of memory");
    return CLI_EXIT_STORE;
}

/* The CLI reads and settles what a gateway wrote; it never makes a store: a
 * typo in a path must not answer with an empty table. An SQLite file that
 * is not there is reported, saying how to name the gateway's store (config
 * is the --config file the URL came from, NULL otherwise). */
static int cli_check_sqlite_exists(const char *url, const char *config)
{
    struct stat st;
    if (strncmp(url, "sqlite:", 7) != 0 || strcmp(url + 7, ":memory:") == 0 || url[7] == '\0' ||
        stat(url + 7, &st) == 0 || errno != ENOENT)
        return CLI_EXIT_OK;
    char q[CLI_QUOTE_MAX];
    char qc[CLI_QUOTE_MAX];
    if (config != NULL)
        cli_print_error("no store at %s, the store of --config %s (a relative path is from the working "
                        "directory, as for once serve, which creates it)",
                        cli_quote(url + 7, q, sizeof q), cli_quote(config, qc, sizeof qc));
    else
        cli_print_error("no store at %s (once serve creates it; pass --store URL or --config FILE, "
                        "the gateway's config, to name another)",
                        cli_quote(url + 7, q, sizeof q));
    return CLI_EXIT_STORE;
}

/* Opens the store at url; on failure reports it, password redacted. */
static int cli_open_url(const char *url, once_store **out)
{
    int rc = once_store_open(url, out);
    if (rc == ONCE_OK)
        return CLI_EXIT_OK;
    char q[CLI_QUOTE_MAX];
    char what[CLI_QUOTE_MAX + 32];
    char shown[CLI_QUOTE_MAX * 4];
    once_store_url_redact(url, shown, sizeof shown); /* never a password on a terminal */
    snprintf(what, sizeof what, "cannot open store '%s'", cli_quote(shown, q, sizeof q));
    cli_fail_once(rc, what);
    /* Even a malformed URL is a store problem, not a misuse of a command. */
    return CLI_EXIT_STORE;
}

/* Opens ctx's store (--store, else --config's, else $ONCE_STORE or the
 * default); on failure reports it and returns the exit code. */
static int cli_open_store(const cli_ctx *ctx, once_store **out)
{
    char *from_config = NULL;
    if (!ctx->store_given && ctx->config_path != NULL) {
        int code = cli_config_store(ctx->config_path, &from_config);
        if (code != CLI_EXIT_OK)
            return code;
    }
    const char *url = from_config != NULL ? from_config : ctx->store_url;
    int code = cli_check_sqlite_exists(url, from_config != NULL ? ctx->config_path : NULL);
    if (code == CLI_EXIT_OK)
        code = cli_open_url(url, out);
    free(from_config);
    return code;
}

/* The store is closed on every path, whatever fn returned. */
int cli_run_on_store(const cli_ctx *ctx, cli_store_fn fn, void *arg)
{
    once_store *store = NULL;
    int code = cli_open_store(ctx, &store);
    if (code != CLI_EXIT_OK)
        return code;
    code = fn(store, arg);
    once_store_close(store);
    return code;
}

/* Resolve, approve and deny name the action in every line they print: the
 * operands are escaped once, whole (a person copies the key from there),
 * and freed on every path. */
int cli_change_action(const cli_ctx *ctx, cli_action_ref *ref, cli_store_fn fn, void *arg)
{
    int code = cli_check_scope_key(ref->scope, ref->key);
    if (code != CLI_EXIT_OK)
        return code;
    ref->qs = cli_escape_dup(ref->scope, strlen(ref->scope), 0);
    ref->qk = cli_escape_dup(ref->key, strlen(ref->key), 0);
    if (ref->qs == NULL || ref->qk == NULL) {
        cli_print_error("out of memory");
        code = CLI_EXIT_STORE;
    } else {
        code = cli_finish_stdout(cli_run_on_store(ctx, fn, arg));
    }
    free(ref->qs);
    free(ref->qk);
    ref->qs = NULL;
    ref->qk = NULL;
    return code;
}

int cli_check_scope_key(const char *scope, const char *key)
{
    char q[CLI_QUOTE_MAX];
    int rc = once_scope_validate(scope);
    if (rc != ONCE_OK) {
        char what[CLI_QUOTE_MAX + 32];
        snprintf(what, sizeof what, "invalid scope '%s'", cli_quote(scope, q, sizeof q));
        cli_fail_once(rc, what);
        return CLI_EXIT_USAGE;
    }
    rc = once_key_validate(key);
    if (rc != ONCE_OK) {
        char what[CLI_QUOTE_MAX + 32];
        snprintf(what, sizeof what, "invalid key '%s'", cli_quote(key, q, sizeof q));
        cli_fail_once(rc, what);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* Agents are named as scopes are (the same set of bytes and length), so
 * libonce's check of a scope is the one rule; the message names NAME. */
int cli_check_agent_name(const cli_command *cmd, const char *name)
{
    if (once_scope_validate(name) == ONCE_OK)
        return CLI_EXIT_OK;
    return cli_fail_quoted(cmd, "invalid agent name", name, " (1-64 of A-Z a-z 0-9 . _ -)");
}

int cli_finish_stdout(int code)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_print_error("cannot write output: %s", errno != 0 ? strerror(errno) : "I/O error");
        return CLI_EXIT_STORE;
    }
    return code;
}
