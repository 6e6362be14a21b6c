/*
 * cli_util.c — error reporting, option parsing and store opening shared by
 * the subcommands, so every command fails the same way: one line on stderr
 * starting with "once: " and an exit code from one policy.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

/* Enough of a user-supplied string to recognise it in a message. */
#define CLI_QUOTE_MAX 80
/* Enough of a bad --limit value to recognise it. */
#define CLI_LIMIT_QUOTE_MAX 64
/* Enough of a libonce error detail; they are short sentences. */
#define CLI_DETAIL_MAX 512

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

int cli_getopt(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv,
               const char *shortopts, const struct option *longopts)
{
    char q[CLI_QUOTE_MAX];
    for (;;) {
        int c = getopt_long(argc, argv, shortopts, longopts, NULL);
        switch (c) {
        case CLI_OPT_STORE:
            if (optarg[0] == '\0') {
                cli_fail_usage(cmd, "option '--store' needs a value");
                return -2;
            }
            ctx->store_url = optarg;
            ctx->store_given = 1;
            continue;
        case '?':
            /* optind has moved past the offending argument; inside a
             * cluster of short options only optopt names the culprit. */
            if (optopt > 0 && optopt < 128 && optind > 0 && argv[optind - 1][0] == '-' &&
                argv[optind - 1][1] != '-') {
                char opt[3] = {'-', (char)optopt, '\0'};
                cli_fail_usage(cmd, "unknown option '%s'", cli_quote(opt, q, sizeof q));
            } else {
                cli_fail_usage(cmd, "unknown option '%s'",
                               cli_quote(optind > 0 ? argv[optind - 1] : "?", q, sizeof q));
            }
            return -2;
        case ':':
            cli_fail_usage(cmd, "option '%s' needs a value",
                           cli_quote(optind > 0 ? argv[optind - 1] : "?", q, sizeof q));
            return -2;
        default:
            return c;
        }
    }
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

void cli_print_command_help(const cli_command *cmd, FILE *out)
{
    fprintf(out, "usage: %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->help != NULL)
        fprintf(out, "\n%s", cmd->help);
    if (!cmd->no_store)
        fputs("\nGlobal option:\n"
              "  --store URL   the store: sqlite:PATH (default sqlite:once.db, or $ONCE_STORE) or postgres://...\n",
              out);
}

int cli_open_store(const cli_ctx *ctx, once_store **out)
{
    /* The CLI reads and settles what a gateway wrote; it never makes a
     * store: a typo in a path must not answer with an empty table. */
    const char *url = ctx->store_url;
    struct stat st;
    if (strncmp(url, "sqlite:", 7) == 0 && strcmp(url + 7, ":memory:") != 0 && url[7] != '\0' &&
        stat(url + 7, &st) != 0 && errno == ENOENT) {
        char q[CLI_QUOTE_MAX];
        cli_print_error("no store at %s (once serve creates it; --store or $ONCE_STORE names another)",
                        cli_quote(url + 7, q, sizeof q));
        return CLI_EXIT_STORE;
    }
    int rc = once_store_open(ctx->store_url, out);
    if (rc == ONCE_OK)
        return CLI_EXIT_OK;
    char q[CLI_QUOTE_MAX];
    char what[CLI_QUOTE_MAX + 32];
    char shown[CLI_QUOTE_MAX * 4];
    once_store_url_redact(ctx->store_url, shown, sizeof shown); /* never a password on a terminal */
    snprintf(what, sizeof what, "cannot open store '%s'", cli_quote(shown, q, sizeof q));
    cli_fail_once(rc, what);
    /* Even a malformed URL is a store problem, not a misuse of a command. */
    return CLI_EXIT_STORE;
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

int cli_finish_stdout(int code)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_print_error("cannot write output: %s", errno != 0 ? strerror(errno) : "I/O error");
        return CLI_EXIT_STORE;
    }
    return code;
}
