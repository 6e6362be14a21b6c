/*
 * config_keys.h — what the loader's files share, and nothing the rest of
 * the gateway needs (it includes config.h): the loading context, the row of
 * a key table, the typed setters the rows name, and the sections.
 *
 * A key is data. One row says its name, how its value is read (a typed
 * setter from config_types.c, or the section's own for the few keys that
 * need one), where it goes (the offset of a field of once_config,
 * upstream_cfg or source_cfg), its bounds, its default (written as in a
 * file and read by the same setter when the section opens) and its flags.
 * Rows are written with named fields, so a row says what each value is.
 * What involves more than one key is checked once the whole file is in, by
 * the section's finish function beside its table (config_server.c,
 * config_upstream.c, config_mcp.c, config_source.c). The keys [upstream.NAME]
 * and [mcp.NAME] both have, since both configure an endpoint, are one table
 * and one finish that both sections use (config_endpoint.c).
 */
#ifndef ONCE_SERVER_CONFIG_KEYS_H
#define ONCE_SERVER_CONFIG_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "server/config/config.h"

#define CONFIG_QUOTE_MAX 64
#define CONFIG_MSG_MAX 512
#define CONFIG_HOST_MAX 64 /* an IPv6 literal or "localhost" */
#define CONFIG_MAX_KEYS 64 /* a section's seen keys fit one 64-bit mask */

typedef struct config_ctx config_ctx;
typedef struct config_key config_key;

/* Reads the (expanded) value v of key k into field, the key's place in the
 * current section; 0, or -1 after config_fail. */
typedef int (*config_setter)(config_ctx *c, const config_key *k, void *field, const char *v);

enum config_flag {
    CK_REPEAT = 1, /* may appear more than once in its section */
    CK_SECRET = 2, /* a secret: written inline, the config file holds one; a path, the file is one */
    CK_PATH = 4,   /* a file name: resolved against the config's directory before the setter */
    CK_BASE = 8,   /* a base URL: stored without trailing slashes */
    CK_PREFIX = 16, /* the name is a prefix ("key."): "key.TOOL" matches, c->suffix is "TOOL" */
    CK_NO_HASH = 32 /* a credential, a key or a URL: " #" in it is refused, since it reads as a comment
                       (only ';' starts one) and would silently become part of the value */
};

struct config_key {
    const char *name;
    config_setter set;
    size_t field;              /* where the value goes: offsetof the field in the section's struct */
    int64_t min, max;          /* numbers; durations in ms; sizes in bytes; max 0: none */
    const char *default_value; /* as a file would say it; NULL: zero, or what the finish decides */
    unsigned flags;            /* enum config_flag */
    const char *words;         /* config_word: the words, '|'-separated, for the values 0, 1, ... */
};

/* The rows of a table defined in one file and used by sections in others. */
typedef struct config_table {
    const config_key *keys;
    size_t nkeys;
} config_table;

/* How many rows a table has (an array defined in the same file). */
#define CONFIG_NKEYS(keys) (sizeof(keys) / sizeof *(keys))

/* The offset of an upstream_cfg field: where the rows of [upstream.NAME]
 * and [mcp.NAME] write (an MCP server is an upstream_cfg too). */
#define UP(f) offsetof(upstream_cfg, f)

/* [server] and [auth] have one instance each (the once_config, its auth);
 * the named kinds come after them. */
enum config_kind { CONFIG_SERVER, CONFIG_AUTH, CONFIG_UPSTREAM, CONFIG_SOURCE, CONFIG_AGENT, CONFIG_NKINDS };

/* A kind of section: its key tables, its instances' size, and its checks
 * ([server]'s one instance is the once_config itself). A key's index in
 * the section counts its own rows first, then the shared ones. */
typedef struct config_section {
    enum config_kind kind;                  /* where instances live: [mcp.NAME]'s are upstreams (one namespace) */
    const char *prefix;                     /* "server", "upstream.", "mcp.", "source." */
    const char *noun;                       /* "an upstream", "a source": for bad names */
    const config_key *keys;                 /* the section's own rows */
    size_t nkeys;
    const config_table *shared;             /* rows other sections have too, or NULL */
    size_t size;                            /* one instance */
    size_t line_field;                      /* offsetof its int line, the line of its [NAME] */
    int (*finish)(config_ctx *c, size_t i); /* cross-key checks of instance i */
} config_section;

/* A named section, [PREFIXNAME], whose instances are structs of type
 * (each with an int line: where its [NAME] stood): its kind, prefix and
 * noun, its own rows (an array defined in the same file), the rows it
 * shares with another section or NULL, and its finish. The size and the
 * line come from the type, the count from the array, so no section can
 * say them wrong. */
#define CONFIG_NAMED_SECTION(kind_, prefix_, noun_, type, keys_, shared_, finish_)                              \
    {                                                                                                            \
        .kind = (kind_), .prefix = (prefix_), .noun = (noun_), .keys = (keys_), .nkeys = CONFIG_NKEYS(keys_),   \
        .shared = (shared_), .size = sizeof(type), .line_field = offsetof(type, line), .finish = (finish_),     \
    }

extern const config_section config_server_section;
extern const config_section config_auth_section;
extern const config_section config_upstream_section;
extern const config_section config_source_section;
extern const config_section config_mcp_section;
extern const config_section config_agent_section;

/* (config_read.c) The named sections the loader knows, in the order it
 * tries their prefixes; [server] is config_server_section. The key
 * reference of once.ini(5) is generated from these (man/config_keys.c). */
const config_section *const *config_named_sections(size_t *n);

/* Which keys an instance of a section set, and on which line. */
typedef struct config_sec_state {
    const config_section *sec; /* the section the instance was read as */
    uint64_t seen;
    int line[CONFIG_MAX_KEYS]; /* by the key's index in the section */
} config_sec_state;

struct config_ctx {
    once_config *cfg;
    char qpath[CONFIG_QUOTE_MAX * 2]; /* the file name as messages show it */
    char *dir;                        /* the file's directory, or NULL for "." */
    FILE *fp;
    char *linebuf;
    size_t linecap;
    int lineno;
    const config_section *sec;           /* the current section; NULL before the first */
    size_t cur;                          /* the current instance of it */
    const char *secname;                 /* its NAME ("" for [server]) */
    config_sec_state *st[CONFIG_NKINDS]; /* parallel to each kind's instances */
    size_t cap[CONFIG_NKINDS];
    int server_line;
    const char *key; /* the key being set, for messages */
    const char *suffix; /* a CK_PREFIX key's rest ("TOOL" of "key.TOOL") */
    const char *raw; /* its value as written, for messages */
    int failed;
    int errline; /* line of the recorded error (0: none / not a line) */
    int code;    /* negative, once failed */
    char *err;
    size_t errlen;
};

/* Loads from an open stream; path names the file in messages and is the
 * base of relative *_file paths (config_read.c). */
int config_load_stream(FILE *fp, const char *path, once_config *cfg, char *err, size_t errlen);

/* ---- messages (config_read.c) ---- */
const char *config_quote(const char *s, char *buf, size_t cap);
/* s[0..n) quoted, for an item of a list or a file's line. */
const char *config_quote_n(const char *s, size_t n, char *buf, size_t cap);
__attribute__((format(printf, 3, 4))) int config_fail_at(config_ctx *c, int line, const char *fmt, ...);
#define config_fail(c, ...) config_fail_at((c), (c)->lineno, __VA_ARGS__)
int config_fail_oom(config_ctx *c);
/* Fails with "KEY: 'VALUE AS WRITTEN'" followed by what (which brings its
 * own leading space or colon). */
__attribute__((format(printf, 2, 3))) int config_fail_value(config_ctx *c, const char *fmt, ...);

/* ---- the loader's state (config_read.c) ---- */
/* The line where instance i of kind set the key name, or 0. */
int config_line(const config_ctx *c, enum config_kind kind, size_t i, const char *name);
/* Reads the *_file at path (a regular file of at most 1 MiB), handing each
 * non-blank, non-# line, trimmed, to fn. 0, or -1 after an error. */
typedef int (*config_line_fn)(config_ctx *c, const char *fname, int fline, const char *s, size_t n);
int config_read_file(config_ctx *c, const char *path, config_line_fn fn);
/* Calls fn on each sep-separated item of s[0..n), trimmed of blanks,
 * numbered from 1. 0, or -1 as soon as fn fails. */
typedef int (*config_item_fn)(config_ctx *c, void *arg, const char *s, size_t n, size_t nth);
int config_split(config_ctx *c, const char *s, size_t n, char sep, config_item_fn fn, void *arg);

/* ---- small checks and helpers (config_types.c) ---- */
int config_is_token(const char *s, size_t n); /* an RFC 9110 token: a header name */
int config_has_ctl(const char *s, size_t n, int allow_tab);
int config_pointer_ok(const char *p, size_t n); /* a JSON pointer without control characters */
const char *config_parse_digits(const char *s, uint64_t max, uint64_t *out);
int config_set_str(char **dst, const char *s);
int config_push_str(char ***arr, size_t *n, const char *s, size_t len);
/* (config.c) Frees a string array; "host:port" listeners that would
 * fight over a socket. */
void config_free_strs(char **v, size_t n);
int config_listen_clash(const char *x, const char *y);

/* One "METHOD PATTERN" rule about an upstream's paths (approve, an agent's
 * allow and limit lines), item nth of s[0..n): "all" (approve) is the
 * caller's; here METHOD is upper case or '*' and PATTERN '*' or a path
 * starting with '/', kept in the canonical form requests are matched in
 * (pct_normalize). *out is "METHOD PATTERN" (allocated). 0 or -1. */
int config_path_rule(config_ctx *c, const char *s, size_t n, size_t nth, char **out);

/* (config_auth.c) Frees what [auth] owns and zeroes it. */
void config_auth_free(auth_cfg *a);

/* (config_agent.c) Frees what an agent section owns. */
void config_agent_free(agent_cfg *a);

/* ---- typed setters (config_types.c) ---- */
int config_duration(config_ctx *c, const config_key *k, void *field, const char *v);    /* int64_t ms */
int config_size(config_ctx *c, const config_key *k, void *field, const char *v);        /* size_t */
int config_uint(config_ctx *c, const config_key *k, void *field, const char *v);        /* int or unsigned */
int config_bool(config_ctx *c, const config_key *k, void *field, const char *v);        /* int */
int config_word(config_ctx *c, const config_key *k, void *field, const char *v);        /* int: index in words */
int config_listen(config_ctx *c, const config_key *k, void *field, const char *v);      /* char *: host:port */
int config_url(config_ctx *c, const config_key *k, void *field, const char *v);         /* char *: http(s) */
int config_pem(config_ctx *c, const config_key *k, void *field, const char *v);         /* char *: a readable file */
int config_header_name(config_ctx *c, const config_key *k, void *field, const char *v); /* char * */

/* ---- the keys every endpoint has (config_endpoint.c) ---- */
/* The rows [upstream.NAME] and [mcp.NAME] share: header, header_file,
 * timeout, lease, retention, max_response, key_source, approve_ttl. */
extern const config_table config_endpoint_table;
/* The checks of those keys once the file is in, for upstream or MCP server
 * i: lease and retention are [server]'s unless set, max_response fits the
 * ledger. 0, or -1 after config_fail_at. */
int config_endpoint_finish(config_ctx *c, size_t i);
/* approve_ttl set on endpoint i while nothing of it waits for approval
 * (approves 0): an error at its line, "does nothing without approve =
 * RULE" (rule: how the section's approve is written). 0, or -1 after
 * config_fail_at. */
int config_endpoint_ttl_used(config_ctx *c, size_t i, int approves, const char *rule);

/* The count that follows an array field (int *list; size_t nlist;). */
#define CONFIG_COUNT(field, type) ((size_t *)(void *)((char *)(field) + sizeof(type)))

#endif
