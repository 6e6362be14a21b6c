/*
 * reload.c — SIGHUP (docs/agents.md): the tokens_file and the
 * [agent.NAME] sections are read again and apply from the next request;
 * requests in flight finish under the set they began with
 * (core/access_set.h). A file with an error changes nothing: one log line
 * and once_config_reload_failures_total. Other sections changed on disk are
 * named in the log as taking effect after a restart: where requests go is
 * decided at start.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/access_set.h"
#include "server/core/log.h"
#include "server/core/services.h"
#include "server/ops/ops.h"

#define RELOAD_FILE_MAX ((long)1 << 20)

char *reload_read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char *text = malloc((size_t)RELOAD_FILE_MAX + 1);
    size_t n = text != NULL ? fread(text, 1, (size_t)RELOAD_FILE_MAX, f) : 0;
    fclose(f);
    if (text != NULL)
        text[n] = '\0';
    return text;
}

/* The next line of *p (trimmed, into line[0..cap)); 0 at the end. */
static int reload_line(const char **p, char *line, size_t cap)
{
    if (**p == '\0')
        return 0;
    size_t n = strcspn(*p, "\n");
    const char *b = *p, *e = *p + n;
    *p = *e ? e + 1 : e;
    while (b < e && isspace((unsigned char)*b))
        b++;
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    size_t len = (size_t)(e - b) < cap - 1 ? (size_t)(e - b) : cap - 1;
    memcpy(line, b, len);
    line[len] = '\0';
    return 1;
}

/* The lines of section name in text (comments and blanks left out; in
 * [server], the agents key, which a reload applies), joined; malloc'd. */
static char *reload_section(const char *text, const char *name)
{
    size_t cap = strlen(text) + 1, at = 0;
    char *out = calloc(1, cap);
    char line[1024];
    int in = 0;
    for (const char *p = text; out != NULL && reload_line(&p, line, sizeof line);) {
        if (line[0] == '[') {
            size_t n = strcspn(line + 1, "]");
            in = n == strlen(name) && strncmp(line + 1, name, n) == 0;
            continue;
        }
        int agents_key = strncmp(line, "agents", 6) == 0 && (line[6] == '=' || isspace((unsigned char)line[6]));
        if (!in || line[0] == '\0' || line[0] == ';' || line[0] == '#' || (agents_key && strcmp(name, "server") == 0))
            continue;
        at += (size_t)snprintf(out + at, cap - at, "%s\n", line);
    }
    return out;
}

/* Appends to names each section of a that b does not hold the same way. */
static void reload_diff(const char *a, const char *b, char *names, size_t cap)
{
    char line[1024];
    for (const char *p = a; reload_line(&p, line, sizeof line);) {
        if (line[0] != '[')
            continue;
        line[1 + strcspn(line + 1, "]")] = '\0';
        const char *name = line + 1;
        char tagged[1100];
        snprintf(tagged, sizeof tagged, "[%s]", name);
        if (strncmp(name, "agent.", 6) == 0 || strstr(names, tagged) != NULL)
            continue;
        char *sa = reload_section(a, name), *sb = reload_section(b, name);
        int found = strstr(b, tagged) != NULL;
        if (sa == NULL || sb == NULL || !found || strcmp(sa, sb) != 0) {
            size_t n = strlen(names);
            snprintf(names + n, cap - n, "%s%s", n ? ", " : "", tagged);
        }
        free(sa);
        free(sb);
    }
}

/* One failure: the log line and the counter; the running set stays. */
static void reload_failed(server *srv, const char *why)
{
    log_event("error", "reload: %s; the running tokens and agents stay", why);
    metrics_reload_failure(srv->metrics);
}

void ops_reload(server *srv)
{
    once_config *fresh = calloc(1, sizeof *fresh);
    char err[512];
    if (fresh == NULL) {
        reload_failed(srv, "out of memory");
        return;
    }
    if (config_load(srv->cfg->path, fresh, err, sizeof err) != 0) {
        free(fresh);
        reload_failed(srv, err);
        return;
    }
    if (config_auth_on(fresh) != config_auth_on(srv->cfg)) {
        config_free(fresh);
        free(fresh);
        reload_failed(srv, "the tokens_file turns bearer tokens on or off, which needs a restart");
        return;
    }
    char names[1024] = "";
    char *now = reload_read_text(srv->cfg->path);
    if (now != NULL && srv->config_text != NULL) {
        reload_diff(srv->config_text, now, names, sizeof names);
        reload_diff(now, srv->config_text, names, sizeof names);
    }
    free(now);
    size_t ntokens = fresh->ntokens, nagents = fresh->nagents;
    if (access_sets_swap(srv->access, fresh) < 0) {
        reload_failed(srv, "out of memory");
        return;
    }
    log_event("info", "reload: %zu token(s) and %zu agent section(s) apply from the next request", ntokens, nagents);
    if (names[0])
        log_event("warn", "reload: %s changed on disk and take(s) effect after a restart", names);
}
