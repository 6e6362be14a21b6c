/*
 * config_keys.c — prints every section and key the config loader knows,
 * from the loader's own tables (src/server/config), one tab-separated line
 * a key: SECTION KEY TYPE DEFAULT FLAGS. scripts/man-config merges it with
 * the meanings of docs/config.md into once.ini(5) at build time, so the
 * page lists exactly the keys the loader reads.
 */
#include <stdio.h>
#include <string.h>

#include "server/config/config_keys.h"

/* The value's type as once.ini(5) names it, from the key's setter; ""
 * for a section's own setter (its meaning says what it reads). */
static const char *keys_type(const config_key *k)
{
    static const struct {
        config_setter set;
        const char *name;
    } types[] = {
        {config_duration, "duration"}, {config_size, "size"},         {config_uint, "number"},
        {config_bool, "boolean"},      {config_listen, "host:port"},  {config_url, "URL"},
        {config_pem, "PEM file"},      {config_header_name, "header"},
    };
    if (k->set == config_word)
        return k->words;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].set == k->set)
            return types[i].name;
    return "";
}

static void keys_print(const char *section, const config_key *k)
{
    printf("%s\t%s\t%s\t%s\t%s%s%s%s\n", section, k->name, keys_type(k), k->default_value ? k->default_value : "",
           k->flags & CK_REPEAT ? "repeat " : "", k->flags & CK_SECRET ? "secret " : "",
           k->flags & CK_PATH ? "path " : "", k->flags & CK_PREFIX ? "prefix " : "");
}

static void keys_section(const config_section *s)
{
    char name[64];
    size_t pl = strlen(s->prefix);
    snprintf(name, sizeof name, "%s%s", s->prefix, pl > 0 && s->prefix[pl - 1] == '.' ? "NAME" : "");
    for (size_t i = 0; i < s->nkeys; i++)
        keys_print(name, &s->keys[i]);
    for (size_t i = 0; s->shared && i < s->shared->nkeys; i++)
        keys_print(name, &s->shared->keys[i]);
}

int main(void)
{
    size_t n;
    const config_section *const *named = config_named_sections(&n);
    keys_section(&config_server_section);
    keys_section(&config_auth_section);
    for (size_t i = 0; i < n; i++)
        keys_section(named[i]);
    return fflush(stdout) == 0 ? 0 : 1;
}
