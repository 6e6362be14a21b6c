/*
 * cli.h — what the `once` subcommands share: the global context (which store
 * to open), the exit-code policy, error reporting and output helpers. Each
 * subcommand lives in its own cmd_*.c and is listed in main.c's table.
 */
#ifndef ONCE_CLI_CLI_H
#define ONCE_CLI_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "once/once.h"

/* Exit codes are part of the interface: scripts tell "you asked for
 * something wrong or impossible" from "the store is broken". */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_USAGE = 1, /* bad usage, missing action, refused transition */
    CLI_EXIT_STORE = 2  /* the store could not be opened or failed */
};

#define CLI_DEFAULT_STORE "sqlite:once.db"

typedef struct cli_ctx {
    const char *store_url; /* --store, else $ONCE_STORE, else the default */
    int store_given;       /* --store was on the command line (serve: it beats the file) */
} cli_ctx;

typedef int (*cli_run_fn)(cli_ctx *ctx, int argc, char **argv);

/* One subcommand. argv[0] of run is the command's name; options may come
 * anywhere after it, --store included. */
typedef struct cli_command {
    const char *name;
    cli_run_fn run;
    const char *usage;   /* "once ls [--status S] ..." */
    const char *summary; /* one line for `once help` */
    const char *help;    /* the rest of `once help CMD`; may be NULL */
    int no_store;        /* it opens no store: its help does not list --store */
} cli_command;

extern const cli_command cli_cmd_ls;
extern const cli_command cli_cmd_show;
extern const cli_command cli_cmd_resolve;
extern const cli_command cli_cmd_gc;
extern const cli_command cli_cmd_serve;
extern const cli_command cli_cmd_check_config;
extern const cli_command cli_cmd_hooks;

/* ---- errors (cli_util.c) ---- */

/* Prints "once: <message>" as the single line of an error on stderr. */
void cli_print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "once: <message>; usage: <cmd->usage>" and returns CLI_EXIT_USAGE. */
int cli_fail_usage(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports a failed libonce call: "once: <what>: <strerror>[: <detail>]".
 * Call it right after the failing call, before any other libonce call, so
 * the thread's error detail is still the right one. Returns the exit code
 * for rc (cli_exit_code). */
int cli_fail_once(int rc, const char *what);

/* CLI_EXIT_USAGE for the caller's mistakes (ENOTFOUND, ESTATE, ESTALE,
 * EINVAL), CLI_EXIT_STORE for anything else. */
int cli_exit_code(int rc);

/* ---- options (cli_util.c) ---- */

/* The long option every subcommand accepts besides its own, with the value
 * getopt_long returns for it. */
#define CLI_OPT_STORE 1000
#define CLI_OPT_HELP 'h'

/* getopt_long over a subcommand's argv with errors reported in our format
 * (opterr is off). shortopts starts with ':' (to tell a missing value from an
 * unknown option) and holds 'h'; longopts has "store" -> CLI_OPT_STORE and
 * "help" -> CLI_OPT_HELP. Returns the option's value, -1 at the end, or -2
 * after having printed a usage error. --store is consumed here (it updates
 * ctx). Operands are left in argv[optind..argc). */
int cli_getopt(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv,
               const char *shortopts, const struct option *longopts);

/* Prints `once help CMD` to out. */
void cli_print_command_help(const cli_command *cmd, FILE *out);

/* Opens ctx's store; on failure reports it and returns the exit code. */
int cli_open_store(const cli_ctx *ctx, once_store **out);

/* Checks SCOPE and KEY operands before any store is opened; on failure
 * reports it (with libonce's detail) and returns CLI_EXIT_USAGE. */
int cli_check_scope_key(const char *scope, const char *key);

/* ---- output (cli_table.c) ---- */

/* A copy of s[0..len) that is safe to put on a terminal and on one line:
 * control characters (C0, DEL, C1) and bytes that are not well-formed UTF-8
 * become \n, \t, \r, \xNN or \u00NN escapes. When max > 0 and the result
 * would be longer, it is cut at a character boundary and ends in "...".
 * NULL when out of memory. */
char *cli_escape_dup(const char *s, size_t len, size_t max);

/* Formats a time for people: RFC 3339, or "-" for 0. buf needs 32 bytes. */
const char *cli_format_time(int64_t ms, char *buf, size_t len);

/* A text table: cells are copied (escaped) in, widths computed at the end. */
typedef struct cli_table cli_table;

cli_table *cli_table_new(size_t ncols);
/* Adds a row of ncols cells (NULL cells print as "-"). 0 or ONCE_ENOMEM. */
int cli_table_add_row(cli_table *t, const char *const *cells);
/* Prints the rows with columns padded to their widest cell; 0 or -1 on an
 * output error. */
int cli_table_print(const cli_table *t, FILE *out);
void cli_table_free(cli_table *t);

/* Flushes stdout. A failed write (full disk, closed pipe) must not pass for
 * success: it is reported and gives CLI_EXIT_STORE, the code for failures
 * outside the caller's control. Otherwise returns code unchanged. */
int cli_finish_stdout(int code);

#endif
