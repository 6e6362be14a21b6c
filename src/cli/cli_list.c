/*
 * cli_list.c — the paged listing behind `once ls` and `once hooks ls`. The
 * ledger hands out pages; a listing follows them itself, so --limit is the
 * number of records, not of pages. The caller says how to read a page and
 * show a row; the loop, the limit, the table, the JSON array and the
 * messages are here, so both listings behave alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"

/* --limit N: 1..LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT when not given; both
 * listings' help says so. */
#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 100000

/* One listing in progress. */
typedef struct list_run {
    const cli_lister *l;
    void *list;       /* the caller's context */
    int json;         /* a JSON array, not a table */
    cli_table *table; /* the table, once made; NULL for JSON */
    size_t left;      /* rows still wanted */
    size_t shown;     /* rows printed or tabled so far */
    int opened;       /* the JSON array's "[" is out */
} list_run;

/* A row of the streamed array: every row on its own line, so a long
 * listing reads (and greps) line by line. */
static int list_json_row(const list_run *r, const void *row)
{
    return cli_print_json(row, r->l->to_json, r->shown == 0 ? "\n  " : ",\n  ", JSON_COMPACT);
}

/* Shows the rows of one page, up to the limit. 0 or the first row's error. */
static int list_rows(list_run *r, const cli_page *page)
{
    int rc = ONCE_OK;
    for (size_t i = 0; i < page->count && r->left > 0 && rc == ONCE_OK; i++, r->left--) {
        const void *row = (const char *)page->rows + i * page->size;
        if (r->json)
            rc = list_json_row(r, row);
        else
            rc = r->l->table_add(r->table, row);
        r->shown++;
    }
    return rc;
}

/* Reads and shows one page. Returns the exit code so far and sets *more
 * when another page should be read (its cursor in cursor). */
static int list_page(list_run *r, once_store *store, char cursor[ONCE_CURSOR_MAX], int *more)
{
    const cli_lister *l = r->l;
    cli_page page = {0};
    *more = 0;
    int rc = l->fetch(store, r->list, cursor, r->left < l->page_max ? r->left : l->page_max, &page);
    if (rc != ONCE_OK) {
        char what[64];
        snprintf(what, sizeof what, "cannot list %s", l->what);
        return cli_fail_once(rc, what);
    }
    /* The JSON array streams out page by page. The opening bracket waits
     * for the first page to have been read, so a store error there leaves
     * no half array (nor a "[]" that would read as "none"); after a later
     * page's error the array is closed and the exit code says it is short. */
    if (r->json && !r->opened) {
        fputs("[", stdout);
        r->opened = 1;
    }
    rc = list_rows(r, &page);
    if (rc != ONCE_OK) {
        l->free_page(r->list);
        cli_print_error("cannot format %s: %s", l->what, once_strerror(rc));
        return CLI_EXIT_STORE;
    }
    /* An empty page with a cursor would loop forever: treat as the end. */
    *more = page.next[0] != '\0' && page.count > 0;
    snprintf(cursor, ONCE_CURSOR_MAX, "%s", page.next);
    l->free_page(r->list);
    return CLI_EXIT_OK;
}

/* The pages, on the open store. The table is made before the first page so
 * that running out of memory is found before the store is read. */
static int list_pages(once_store *store, void *arg)
{
    list_run *r = arg;
    if (!r->json) {
        r->table = cli_table_new(r->l->ncols);
        if (r->table == NULL || cli_table_add_row(r->table, r->l->head) != ONCE_OK) {
            cli_print_error("out of memory");
            return CLI_EXIT_STORE;
        }
    }
    char cursor[ONCE_CURSOR_MAX] = "";
    int code = CLI_EXIT_OK;
    int more = 1;
    while (code == CLI_EXIT_OK && more && r->left > 0)
        code = list_page(r, store, cursor, &more);
    return code;
}

/* The store is closed before the table (or the end of the JSON array) is
 * printed. */
static int list_print(const cli_ctx *ctx, list_run *r)
{
    int code = cli_run_on_store(ctx, list_pages, r);
    if (r->json) {
        if (r->opened)
            fputs(r->shown > 0 ? "\n]\n" : "]\n", stdout);
    } else {
        if (code == CLI_EXIT_OK)
            cli_table_print(r->table, stdout);
        cli_table_free(r->table);
    }
    return cli_finish_stdout(code);
}

/* Takes --limit and --json, and hands the filters to the lister. */
static int list_option(const cli_command *cmd, void *arg, int c, const char *value)
{
    list_run *r = arg;
    switch (c) {
    case CLI_LIST_OPT_LIMIT:
        return cli_parse_limit(cmd, value, LIST_LIMIT_MAX, &r->left);
    case CLI_LIST_OPT_JSON:
        r->json = 1;
        return CLI_EXIT_OK;
    default:
        return r->l->filter(cmd, r->list, c, value);
    }
}

/* Both listings show a record as one line of the same six columns; the
 * last is cut only when last_max says so (an event's error). */
int cli_list_row(cli_table *t, const char *first, const char *second, const char *state, int64_t attempt,
                 int64_t time_ms, const char *last, size_t last_max)
{
    char n[24];
    char when[32];
    snprintf(n, sizeof n, "%lld", (long long)attempt);
    char *cut = NULL;
    if (last != NULL && last_max > 0) {
        cut = cli_escape_dup(last, strlen(last), last_max);
        if (cut == NULL)
            return ONCE_ENOMEM;
    }
    const char *cells[6] = {first, second, state, n, cli_format_time(time_ms, when, sizeof when), cut ? cut : last};
    int rc = cli_table_add_row(t, cells);
    free(cut);
    return rc;
}

/* Everything is checked before the store is opened. */
int cli_list_run(cli_ctx *ctx, const cli_lister *l, void *list, int argc, char **argv)
{
    list_run r = {.l = l, .list = list, .left = LIST_LIMIT_DEFAULT};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, l->longopts, list_option, &r) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind < argc)
        return cli_fail_quoted(ctx->cmd, "unexpected argument", argv[optind], "");
    int code = l->check(list);
    if (code != CLI_EXIT_OK)
        return code;
    return list_print(ctx, &r);
}
