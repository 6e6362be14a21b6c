/*
 * cli_list.c — the paged listing behind `once ls` and `once hooks ls`. The
 * ledger hands out pages; a listing follows them itself, so --limit is the
 * number of records, not of pages. The caller says how to read a page and
 * show a row; the loop, the limit, the table, the JSON array and the
 * messages are here, so both listings behave alike.
 */
#include <stdio.h>

#include <jansson.h>

#include "cli/cli.h"

/* One listing in progress. */
typedef struct list_run {
    const cli_lister *l;
    void *list;       /* the caller's context */
    cli_table *table; /* NULL for JSON */
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
        if (r->table == NULL)
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
    if (r->table == NULL && !r->opened) {
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

/* The table is made before the first page so that running out of memory
 * is found before the store is read. */
int cli_list_run(const cli_ctx *ctx, const cli_lister *l, void *list, size_t limit, int json)
{
    once_store *store = NULL;
    int code = cli_open_store(ctx, &store);
    if (code != CLI_EXIT_OK)
        return code;

    list_run r = {.l = l, .list = list, .left = limit};
    if (!json) {
        r.table = cli_table_new(l->ncols);
        if (r.table == NULL || cli_table_add_row(r.table, l->head) != ONCE_OK) {
            cli_print_error("out of memory");
            cli_table_free(r.table);
            once_store_close(store);
            return CLI_EXIT_STORE;
        }
    }

    char cursor[ONCE_CURSOR_MAX] = "";
    int more = 1;
    while (code == CLI_EXIT_OK && more && r.left > 0)
        code = list_page(&r, store, cursor, &more);
    once_store_close(store);

    if (json) {
        if (r.opened)
            fputs(r.shown > 0 ? "\n]\n" : "]\n", stdout);
    } else {
        if (code == CLI_EXIT_OK)
            cli_table_print(r.table, stdout);
        cli_table_free(r.table);
    }
    return cli_finish_stdout(code);
}
