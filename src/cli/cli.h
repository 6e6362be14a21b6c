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

/* Parses a --limit value: strictly digits, 1..max. On a bad value reports
 * it with cmd's usage and returns CLI_EXIT_USAGE; else sets *out and
 * returns CLI_EXIT_OK. */
int cli_parse_limit(const cli_command *cmd, const char *s, size_t max, size_t *out);

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

/* Prints the "name: value" line of a record shown to people: value escaped
 * (and cut when max > 0), "-" for NULL. 0 or ONCE_ENOMEM. */
int cli_print_field(const char *name, const char *value, size_t len, size_t max);
/* cli_print_field for a string, never cut. */
int cli_print_text(const char *name, const char *value);
/* Prints "name: TIME" as cli_format_time writes it. */
void cli_print_time(const char *name, int64_t ms);

/* Builds the JSON record of rec (a once_action, a once_event, ...): 0 or a
 * libonce error. json_t is jansson's. */
struct json_t;
typedef int (*cli_json_fn)(const void *rec, struct json_t **out);

/* Builds rec's record with build, then prints lead and the record on stdout,
 * dumped with jansson's flags (nothing at all when building fails). 0, the
 * builder's error, or ONCE_ENOMEM when the dump fails. */
int cli_print_json(const void *rec, cli_json_fn build, const char *lead, size_t flags);
/* The --json form of one record (show, hooks show): indented by two, then a
 * newline. 0 or an error as cli_print_json. */
int cli_print_json_record(const void *rec, cli_json_fn build);

/* A text table: cells are copied (escaped) in, widths computed at the end. */
typedef struct cli_table cli_table;

cli_table *cli_table_new(size_t ncols);
/* Adds a row of ncols cells (NULL cells print as "-"). 0 or ONCE_ENOMEM. */
int cli_table_add_row(cli_table *t, const char *const *cells);
/* Prints the rows with columns padded to their widest cell; 0 or -1 on an
 * output error. */
int cli_table_print(const cli_table *t, FILE *out);
void cli_table_free(cli_table *t);

/* ---- paged listings (cli_list.c) ---- */

/* The page a lister's fetch has read, as the lister sees it: count rows of
 * size bytes each at rows, and the cursor of the next page ("" at the end). */
typedef struct cli_page {
    const void *rows;
    size_t count;
    size_t size;
    const char *next;
} cli_page;

/* What `once ls` and `once hooks ls` differ in; the paging, the limit, the
 * table and the JSON array are cli_list_run's. Each callback gets the
 * caller's own context (its filters and the page it holds). */
typedef struct cli_lister {
    const char *what;        /* plural noun for the messages: "actions" */
    size_t ncols;            /* columns of the table */
    const char *const *head; /* its header row */
    size_t page_max;         /* rows asked for per fetch */
    /* Reads up to limit rows after cursor ("" for the first page) into the
     * context and describes them in *page. 0 or a libonce error, reported
     * by the lister. */
    int (*fetch)(once_store *store, void *list, const char *cursor, size_t limit, cli_page *page);
    /* Adds one row to the table: 0 or ONCE_ENOMEM. */
    int (*table_add)(cli_table *t, const void *row);
    cli_json_fn to_json; /* one row's JSON record */
    /* Frees the page fetch read into the context. */
    void (*free_page)(void *list);
} cli_lister;

/* Opens ctx's store and prints up to limit rows, page by page, as a table
 * or (json set) as a JSON array streamed out; errors are reported. Returns
 * the exit code, stdout flushed (cli_finish_stdout). */
int cli_list_run(const cli_ctx *ctx, const cli_lister *l, void *list, size_t limit, int json);

/* Flushes stdout. A failed write (full disk, closed pipe) must not pass for
 * success: it is reported and gives CLI_EXIT_STORE, the code for failures
 * outside the caller's control. Otherwise returns code unchanged. */
int cli_finish_stdout(int code);

#endif
