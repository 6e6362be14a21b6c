/*
 * cli.h — what the `once` subcommands share: the global context (which store
 * to open, which command runs), the exit-code policy, error reporting,
 * option and operand parsing, running on an open store, output helpers, and
 * the listing and one-record views. Each subcommand's code lives in its own
 * cmd_*.c (cli_X_run); main.c's table lists them, one row each.
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

struct cli_command;

typedef struct cli_ctx {
    const char *store_url;         /* --store, else $ONCE_STORE, else the default */
    int store_given;               /* --store was on the command line (serve: it beats the file) */
    const char *config_path;       /* --config FILE: without --store, the store is the file's */
    int exit_code;                 /* when option parsing answered CLI_GETOPT_DONE: the exit code */
    const struct cli_command *cmd; /* the command running (cli_run_command): its usage and help */
} cli_ctx;

typedef int (*cli_run_fn)(cli_ctx *ctx, int argc, char **argv);

/* One row of a command table (main.c's; cmd_hooks.c's for its
 * subcommands). argv[0] of run is the command's name; options may come
 * anywhere after it, --store included. */
typedef struct cli_command {
    const char *name;
    cli_run_fn run;
    const char *usage;   /* "once ls [--status S] ..." */
    const char *summary; /* one line for `once help` */
    const char *help;    /* the rest of `once help CMD`; may be NULL */
    int no_store;        /* it opens no store: its help does not list --store */
    /* Prints the rest of `once help CMD` instead of help, for a text built
     * at run time from what libonce names (ls's states); may be NULL. */
    void (*print_help)(void);
} cli_command;

/* ---- the commands (cmd_*.c), listed in main.c's table ---- */

/* Each runs its command as cli_run_command starts it: ctx->cmd is its row,
 * argv[0] its name. Returns the exit code. */
int cli_serve_run(cli_ctx *ctx, int argc, char **argv);
int cli_check_config_run(cli_ctx *ctx, int argc, char **argv);
int cli_ls_run(cli_ctx *ctx, int argc, char **argv);
int cli_show_run(cli_ctx *ctx, int argc, char **argv);
int cli_resolve_run(cli_ctx *ctx, int argc, char **argv);
int cli_gc_run(cli_ctx *ctx, int argc, char **argv);
int cli_hooks_run(cli_ctx *ctx, int argc, char **argv);
int cli_token_run(cli_ctx *ctx, int argc, char **argv);
/* approve and deny: argv[0] (the row's name) says which. */
int cli_decide_run(cli_ctx *ctx, int argc, char **argv);

/* Their help texts, the rest of `once help CMD`, each kept next to the
 * code it describes (show's is cli_record_help; ls prints its own). */
extern const char cli_serve_help[];
extern const char cli_check_config_help[];
void cli_ls_print_help(void);
extern const char cli_resolve_help[];
extern const char cli_gc_help[];
extern const char cli_hooks_help[];
extern const char cli_decide_help[];
extern const char cli_token_help[];

/* Runs cmd on argv (argv[0] is its name): sets ctx->cmd to it, so every
 * message of its own and of the helpers carries its usage, and restarts
 * getopt. Returns cmd's exit code. */
int cli_run_command(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv);

/* ---- errors (cli_util.c) ---- */

/* Prints "once: <message>" as the single line of an error on stderr. */
void cli_print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "once: <message>; usage: <cmd->usage>" and returns CLI_EXIT_USAGE. */
int cli_fail_usage(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* cli_fail_once for a call about one record: what is "<doing> <first>
 * <second>", the two names escaped but whole, so they can be copied back
 * (a 64-hex-digit key included). */
int cli_fail_once_about(int rc, const char *doing, const char *first, const char *second);

/* Reports a failed libonce call: "once: <what>: <strerror>[: <detail>]".
 * Call it right after the failing call, before any other libonce call, so
 * the thread's error detail is still the right one. Returns the exit code
 * for rc (cli_exit_code). */
int cli_fail_once(int rc, const char *what);

/* CLI_EXIT_USAGE for the caller's mistakes (ENOTFOUND, ESTATE, ESTALE,
 * EINVAL), CLI_EXIT_STORE for anything else. */
int cli_exit_code(int rc);

/* ---- options and operands (cli_util.c) ---- */

/* The long options every subcommand accepts besides its own, with the value
 * getopt_long returns for each. */
#define CLI_OPT_STORE 1000
#define CLI_OPT_CONFIG 1003
#define CLI_OPT_HELP 'h'

/* The start of every subcommand's shortopts: ':' (to tell a missing value
 * from an unknown option) and -h. A command with short options of its own
 * appends them: CLI_SHORTOPTS "c:l:". */
#define CLI_SHORTOPTS ":h"

/* The last rows of every subcommand's long options: --store, --config,
 * --help and the zero row that ends the table, so no command can forget one
 * of them. */
#define CLI_LONGOPTS_COMMON                                                                        \
    {"store", required_argument, NULL, CLI_OPT_STORE},                                             \
    {"config", required_argument, NULL, CLI_OPT_CONFIG},                                           \
    {"help", no_argument, NULL, CLI_OPT_HELP},                                                     \
    {NULL, 0, NULL, 0}

/* What option parsing answers. */
#define CLI_GETOPT_END (-1)  /* no option left: the operands are argv[optind..argc) */
#define CLI_GETOPT_DONE (-2) /* the command is over (its help printed, or a usage error
                              * reported): it returns ctx->exit_code */

/* Takes one of a command's own options that getopt_long does not set by
 * itself: c is its value in the command's long options, value its argument
 * (NULL when it has none), cmd the running command (for its usage). Keeps it
 * in arg, the command's own context, and returns CLI_EXIT_OK, or reports a
 * bad value and returns CLI_EXIT_USAGE. */
typedef int (*cli_option_fn)(const cli_command *cmd, void *arg, int c, const char *value);

/* Parses the running command's options (ctx->cmd) with getopt_long, errors
 * reported in our format with its usage (opterr is off). shortopts is
 * CLI_SHORTOPTS, then the command's own; longopts the command's own rows,
 * then CLI_LONGOPTS_COMMON. --store and --config update ctx (the global
 * option parser of main.c is cli_take_global); --help prints the command's
 * help and ends it; a row with a flag pointer is set by getopt_long; any
 * other option goes to take (NULL when the command has none). Returns
 * CLI_GETOPT_END, or CLI_GETOPT_DONE with ctx->exit_code set. */
int cli_parse_options(cli_ctx *ctx, int argc, char **argv, const char *shortopts,
                      const struct option *longopts, cli_option_fn take, void *arg);

/* An option whose value a command keeps as typed (--note TEXT): its value
 * in the command's long options, and where the value goes. */
typedef struct cli_text_option {
    int c;
    const char **slot;
} cli_text_option;

/* The cli_option_fn of a command whose own options are all kept as typed:
 * arg is its cli_text_option rows, ended by a row whose slot is NULL. A
 * later option replaces an earlier one. CLI_EXIT_OK, or CLI_EXIT_USAGE for
 * an option no row names. */
int cli_take_text(const cli_command *cmd, void *arg, int c, const char *value);

/* cli_parse_options for a command that has no options of its own and takes
 * at most max operands: more give "too many arguments". Returns
 * CLI_GETOPT_END or CLI_GETOPT_DONE as cli_parse_options. */
int cli_parse_operands(cli_ctx *ctx, int argc, char **argv, int max);

/* Takes the two operands of a command that needs exactly two, named first
 * and second in its messages ("missing SCOPE and KEY", "missing KEY", "too
 * many arguments"). CLI_EXIT_OK with *a and *b set, or CLI_EXIT_USAGE. */
int cli_take_operand_pair(const cli_command *cmd, int argc, char **argv, const char *first,
                          const char *second, const char **a, const char **b);

/* Reports "<what> '<value>'<tail>" with cmd's usage (the general usage for
 * NULL), value escaped and cut so the message stays one readable line.
 * Returns CLI_EXIT_USAGE. */
int cli_fail_quoted(const cli_command *cmd, const char *what, const char *value, const char *tail);

/* Parses a --limit value: strictly digits, 1..max. On a bad value reports
 * it with cmd's usage and returns CLI_EXIT_USAGE; else sets *out and
 * returns CLI_EXIT_OK. */
int cli_parse_limit(const cli_command *cmd, const char *s, size_t max, size_t *out);

/* Checks SCOPE and KEY operands before any store is opened; on failure
 * reports it (with libonce's detail) and returns CLI_EXIT_USAGE. */
int cli_check_scope_key(const char *scope, const char *key);

/* Checks an agent's NAME (1-64 of A-Z a-z 0-9 . _ -, as the tokens_file
 * and [agent.NAME] name agents): CLI_EXIT_OK, or the mistake reported with
 * cmd's usage and CLI_EXIT_USAGE. */
int cli_check_agent_name(const cli_command *cmd, const char *name);

/* `once help CMD` on stdout, as -h, --help and `once help CMD` answer it.
 * Returns the exit code (cli_finish_stdout). */
int cli_show_help(const cli_command *cmd);

/* The command called name among the n rows of table, or NULL. */
const cli_command *cli_find_command(const cli_command *table, size_t n, const char *name);

/* Takes one of the options main.c reads before the command: --store URL,
 * --config FILE, either as "--NAME VALUE" (VALUE is next, the argument
 * after arg, NULL when none) or "--NAME=VALUE". Returns the number of
 * arguments taken (1 or 2), 0 when arg is neither option, or -1 with the
 * mistake reported (an empty or missing value). */
int cli_take_global(cli_ctx *ctx, const char *arg, const char *next);

/* ---- stores (cli_util.c) ---- */

/* A command's work on an open store: it reports its own errors and returns
 * the exit code. arg is the command's own context. */
typedef int (*cli_store_fn)(once_store *store, void *arg);

/* Opens ctx's store, runs fn on it and closes it, so that no path of any
 * command leaves a store open. The store is --store's URL, else the store
 * key of --config's file (loaded as `once serve --config` loads it, so
 * $ONCE_STORE is over the file and a relative sqlite: path is relative to
 * the working directory, as for serve), else $ONCE_STORE, else the default.
 * Returns fn's exit code, or the opening's when the store cannot be opened
 * (fn is not run then; a config that does not load is CLI_EXIT_USAGE, as for
 * check-config). stdout is not flushed: the caller may print more and ends
 * with cli_finish_stdout. */
int cli_run_on_store(const cli_ctx *ctx, cli_store_fn fn, void *arg);

/* The action a command changes (resolve, approve, deny): SCOPE and KEY as
 * typed, and the two escaped (never cut: a person copies them back) for
 * its messages (set by cli_change_action, NULL otherwise). */
typedef struct cli_action_ref {
    const char *scope;
    const char *key;
    char *qs;
    char *qk;
} cli_action_ref;

/* Checks ref's scope and key (cli_check_scope_key), escapes them into
 * ref->qs and ref->qk, runs fn on ctx's store (cli_run_on_store) and frees
 * the escapes. Returns the exit code, stdout flushed (cli_finish_stdout). */
int cli_change_action(const cli_ctx *ctx, cli_action_ref *ref, cli_store_fn fn, void *arg);

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

/* The values of the options every listing takes, --limit N and --json. */
#define CLI_LIST_OPT_LIMIT 1001
#define CLI_LIST_OPT_JSON 1002

/* The last rows of a listing's long options: --limit, --json, and
 * CLI_LONGOPTS_COMMON. Its filters come before them. */
#define CLI_LIST_LONGOPTS                                                                          \
    {"limit", required_argument, NULL, CLI_LIST_OPT_LIMIT},                                        \
    {"json", no_argument, NULL, CLI_LIST_OPT_JSON},                                                \
    CLI_LONGOPTS_COMMON

/* What `once ls` and `once hooks ls` differ in: their filters, and how to
 * read a page and show a row; the options they share, the paging, the
 * limit, the table and the JSON array are cli_list_run's. Each callback gets
 * the caller's own context (its filters and the page it holds). */
typedef struct cli_lister {
    const char *what;        /* plural noun for the messages: "actions" */
    size_t ncols;            /* columns of the table */
    const char *const *head; /* its header row */
    size_t page_max;         /* rows asked for per fetch */
    /* The long options: the filters, then CLI_LIST_LONGOPTS. */
    const struct option *longopts;
    /* Takes a filter into the context (the rows of longopts before
     * CLI_LIST_LONGOPTS). */
    cli_option_fn filter;
    /* Checks the filters once all are read, before the store is opened:
     * CLI_EXIT_OK, or the exit code of a reported mistake. */
    int (*check)(void *list);
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

/* The page of a once_*_list (items, count, next) as a lister's fetch hands
 * it on. */
#define CLI_PAGE_OF(list) ((cli_page){(list).items, (list).count, sizeof *(list).items, (list).next})

/* Adds the row both listings show, one record a line: its two names, its
 * state, its attempt, the time that matters most to it and one more text
 * (escaped and cut to last_max when last_max > 0). 0 or ONCE_ENOMEM. */
int cli_list_row(cli_table *t, const char *first, const char *second, const char *state, int64_t attempt,
                 int64_t time_ms, const char *last, size_t last_max);

/* Runs a listing command: parses its options (the filters, --limit N,
 * 1..100000, default 100, and --json) into list, a zeroed context, refuses
 * operands, then opens ctx's store and prints up to limit rows, page by
 * page, as a table or as a JSON array streamed out; errors are reported.
 * Returns the exit code, stdout flushed (cli_finish_stdout). */
int cli_list_run(cli_ctx *ctx, const cli_lister *l, void *list, int argc, char **argv);

/* ---- one record (cli_record.c) ---- */

/* Prints the field: value lines of rec for people: 0 or a libonce error. */
typedef int (*cli_text_fn)(const void *rec);

/* What `once show` and `once hooks show` differ in: the kind of record and
 * the two operands that name one; the options, the store and the printing
 * are cli_record_run's. */
typedef struct cli_record_kind {
    const char *what;   /* noun for the messages: "action" */
    const char *first;  /* the operands' names in the messages: "SCOPE" */
    const char *second; /* ... and "KEY" */
    /* Checks the operands before the store is opened: CLI_EXIT_OK, or the
     * exit code of a reported mistake. */
    int (*check)(const char *first, const char *second);
    /* Reads the record the operands name into rec: CLI_EXIT_OK, or the
     * failure reported and its exit code. */
    int (*read)(once_store *store, const char *first, const char *second, void *rec);
    cli_json_fn to_json; /* its --json record */
    cli_text_fn to_text; /* its field: value lines */
    /* Frees what read put in rec. */
    void (*free_record)(void *rec);
} cli_record_kind;

/* Runs a one-record command: parses its options (--json), takes and
 * checks its two operands, reads the record into rec (the caller's, zeroed)
 * with ctx's store open, then prints it with the store closed. Returns the
 * exit code, stdout flushed (cli_finish_stdout) once something is printed. */
int cli_record_run(cli_ctx *ctx, const cli_record_kind *k, void *rec, int argc, char **argv);

/* The help text of a one-record command: the options cli_record_run takes. */
extern const char cli_record_help[];

/* Flushes stdout. A failed write (full disk, closed pipe) must not pass for
 * success: it is reported and gives CLI_EXIT_STORE, the code for failures
 * outside the caller's control. Otherwise returns code unchanged. */
int cli_finish_stdout(int code);

#endif
