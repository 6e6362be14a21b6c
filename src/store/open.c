/*
 * open.c — opening a store by its URL: sqlite:PATH or postgres://... The one
 * place that knows which stores exist; the ledger sees only the interface
 * (ledger/store.h).
 */
#include <string.h>

#include "store/stores.h"

int once_global_init(void)
{
    sqlite_store_global_init();
    return ONCE_OK;
}

static int store_open(const char *url, once_store **out)
{
    if (strncmp(url, "sqlite:", 7) == 0) {
        const char *path = url + 7;
        if (!*path)
            return once_fail(ONCE_EINVAL, "store: 'sqlite:' needs a path (sqlite:PATH or sqlite::memory:)");
        return sqlite_store_open(path, out);
    }
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0)
        return pg_store_open(url, out);
    char shown[96];
    once_store_url_redact(url, shown, sizeof shown);
    return once_fail(ONCE_EINVAL, "store: unknown URL scheme in '%.64s' (expected sqlite:PATH or postgres://...)",
                     shown);
}

int once_store_open(const char *url, once_store **out)
{
    once_detail_clear();
    if (!out)
        return once_fail(ONCE_EINVAL, "store: out is NULL");
    *out = NULL;
    if (!url || !*url)
        return once_fail(ONCE_EINVAL, "store: empty URL (try sqlite:once.db)");
    int rc = store_open(url, out);
    if (rc < 0)
        return rc;
    if ((rc = ledger_store_attach(*out)) < 0)
        *out = NULL;
    return rc;
}
