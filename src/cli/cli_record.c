/*
 * cli_record.c — the one-record view behind `once show` and `once hooks
 * show`. The caller says how to check the two operands that name a record,
 * read it and print it; the options, the store and the messages are here,
 * so both commands behave alike.
 */
#include <stdio.h>

#include "cli/cli.h"

/* One record being read: what the callbacks need on the open store. */
typedef struct record_read {
    const cli_record_kind *k;
    const char *first;
    const char *second;
    void *rec;
} record_read;

/* The read, as the store runner calls it. */
static int record_read_on(once_store *store, void *arg)
{
    const record_read *r = arg;
    return r->k->read(store, r->first, r->second, r->rec);
}

/* A record that cannot be formatted is the program's failure (memory), not
 * the caller's: CLI_EXIT_STORE, the code for what the caller cannot fix. */
static int record_print(const cli_record_kind *k, const void *rec, int json)
{
    int rc = json ? cli_print_json_record(rec, k->to_json) : k->to_text(rec);
    if (rc != ONCE_OK) {
        cli_print_error("cannot format the %s: %s", k->what, once_strerror(rc));
        return cli_finish_stdout(CLI_EXIT_STORE);
    }
    return cli_finish_stdout(CLI_EXIT_OK);
}

/* The options cli_record_run takes, as the help of every one-record
 * command describes them: said once, where they are parsed. */
const char cli_record_help[] = "Options:\n"
                               "  --json   the JSON record instead of field: value lines\n";

/* The operands are checked before the store is opened, and the store is
 * open only while the record is read. */
int cli_record_run(cli_ctx *ctx, const cli_record_kind *k, void *rec, int argc, char **argv)
{
    int json = 0;
    const struct option opts[] = {
        {"json", no_argument, &json, 1},
        CLI_LONGOPTS_COMMON,
    };
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, opts, NULL, NULL) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    record_read r = {.k = k, .rec = rec};
    int code = cli_take_operand_pair(ctx->cmd, argc, argv, k->first, k->second, &r.first, &r.second);
    if (code == CLI_EXIT_OK)
        code = k->check(r.first, r.second);
    if (code == CLI_EXIT_OK)
        code = cli_run_on_store(ctx, record_read_on, &r);
    if (code != CLI_EXIT_OK)
        return code;
    code = record_print(k, rec, json);
    k->free_record(rec);
    return code;
}
