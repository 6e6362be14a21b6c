/*
 * console_assets.h — the operator console's files, embedded in the binary
 * at build time (cmake/embed.cmake generates the table from
 * src/server/ops/console/).
 */
#ifndef ONCE_SERVER_CONSOLE_ASSETS_H
#define ONCE_SERVER_CONSOLE_ASSETS_H

#include <stddef.h>

typedef struct console_asset {
    const char *name; /* file name: "index.html", "console.js", ... */
    const char *type; /* its Content-Type */
    const unsigned char *data;
    size_t len;
} console_asset;

/* Every file, then a row whose name is NULL. */
extern const console_asset console_assets[];

#endif
