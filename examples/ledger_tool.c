/*
 * ledger_tool.c — a small command-line front to libonce's agent-side calls,
 * and an example of using the library from C.
 *
 * The pattern every caller follows:
 *
 *   once_store_open(url, &store);
 *   once_reserve(store, &req, &res);          // durable before it returns
 *   if (res.status == ONCE_RESERVED) {
 *       ...perform the side effect...
 *       once_complete(store, scope, key, res.token, &response, provider_id);
 *       // or once_release (certainly not done) / once_mark_unknown (maybe done)
 *   } else {
 *       ...replay res.action.response, or wait, or ask a human...
 *   }
 *   once_reservation_free(&res);
 *   once_store_close(store);
 *
 * Usage (options may appear anywhere after the subcommand):
 *   ledger_tool reserve STORE SCOPE KEY [--lease-ms N] [--retention-ms N] [--fingerprint F]
 *                       [--count N]
 *       prints "STATUS TOKEN ATTEMPT" (TOKEN is "-" unless STATUS is reserved);
 *       with --count, reserves KEY-00000 .. KEY-(N-1) in one process, a line each
 *   ledger_tool complete STORE SCOPE KEY TOKEN STATUS BODY [PROVIDER_ID] [--headers H]
 *   ledger_tool release  STORE SCOPE KEY TOKEN [ERROR]
 *   ledger_tool unknown  STORE SCOPE KEY TOKEN [ERROR]
 *   ledger_tool expire   STORE NOW_MS          prints how many leases expired
 *   ledger_tool hold     STORE SCOPE KEY REASON
 *
 * and the webhook events (deduplicated by SOURCE and EVENT_ID, handed out
 * through claims whose RECEIPT settles them):
 *   ledger_tool event-insert STORE SOURCE EVENT_ID BODY [--content-type T] [--headers H]
 *                            [--retention-ms N] [--count N]
 *       prints "accepted" or "duplicate"; with --count, inserts
 *       EVENT_ID-00000 .. EVENT_ID-(N-1), a line each
 *   ledger_tool event-claim  STORE SOURCE MAX LEASE_MS
 *       prints "EVENT_ID RECEIPT ATTEMPT" for each event claimed
 *   ledger_tool event-ack    STORE SOURCE RECEIPT
 *   ledger_tool event-retry  STORE SOURCE RECEIPT DELAY_MS [--dead] [ERROR]
 *
 * Exit status: 0 done, 1 refused by the ledger (or bad usage), 2 store error.
 * The integration tests of the `once` CLI use it to put rows in a store.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "once/once.h"

#define TOOL_MAX_ARGS 16

/* The arguments of one subcommand, split into operands and --name value
 * options. */
typedef struct tool_args {
    const char *pos[TOOL_MAX_ARGS];
    int npos;
    int64_t lease_ms;
    int64_t retention_ms;
    const char *fingerprint;
    const char *headers;
    const char *content_type;
    int dead; /* --dead, the one option without a value */
    int64_t count;
} tool_args;

static int tool_usage(const char *msg)
{
    fprintf(stderr,
            "ledger_tool: %s\n"
            "usage: ledger_tool reserve STORE SCOPE KEY [--lease-ms N] [--retention-ms N] "
            "[--fingerprint F] [--count N]\n"
            "       ledger_tool complete STORE SCOPE KEY TOKEN STATUS BODY [PROVIDER_ID] "
            "[--headers H]\n"
            "       ledger_tool release|unknown STORE SCOPE KEY TOKEN [ERROR]\n"
            "       ledger_tool expire STORE NOW_MS\n"
            "       ledger_tool hold STORE SCOPE KEY REASON\n"
            "       ledger_tool event-insert STORE SOURCE EVENT_ID BODY [--content-type T] "
            "[--headers H] [--retention-ms N] [--count N]\n"
            "       ledger_tool event-claim STORE SOURCE MAX LEASE_MS\n"
            "       ledger_tool event-ack STORE SOURCE RECEIPT\n"
            "       ledger_tool event-retry STORE SOURCE RECEIPT DELAY_MS [--dead] [ERROR]\n",
            msg);
    return 1;
}

/* 1 when the ledger refused (the caller's problem), 2 when the store
 * failed; the message carries libonce's own detail. */
static int tool_fail(const char *what, int rc)
{
    const char *detail = once_errdetail();
    fprintf(stderr, "ledger_tool: %s: %s%s%s\n", what, once_strerror(rc),
            detail[0] != '\0' ? ": " : "", detail);
    switch (rc) {
    case ONCE_ENOTFOUND:
    case ONCE_ESTALE:
    case ONCE_ESTATE:
    case ONCE_EINVAL:
        return 1;
    default:
        return 2;
    }
}

static int tool_parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int tool_parse_args(int argc, char **argv, tool_args *a)
{
    memset(a, 0, sizeof *a);
    a->lease_ms = 30000;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--dead") == 0) {
            a->dead = 1;
        } else if (strncmp(s, "--", 2) == 0 && s[2] != '\0') {
            if (i + 1 >= argc)
                return -1;
            const char *v = argv[++i];
            if (strcmp(s, "--lease-ms") == 0) {
                if (tool_parse_int(v, &a->lease_ms) != 0)
                    return -1;
            } else if (strcmp(s, "--retention-ms") == 0) {
                if (tool_parse_int(v, &a->retention_ms) != 0)
                    return -1;
            } else if (strcmp(s, "--count") == 0) {
                if (tool_parse_int(v, &a->count) != 0 || a->count < 1 || a->count > 99999)
                    return -1;
            } else if (strcmp(s, "--fingerprint") == 0) {
                a->fingerprint = v;
            } else if (strcmp(s, "--headers") == 0) {
                a->headers = v;
            } else if (strcmp(s, "--content-type") == 0) {
                a->content_type = v;
            } else {
                return -1;
            }
        } else {
            if (a->npos == TOOL_MAX_ARGS)
                return -1;
            a->pos[a->npos++] = s;
        }
    }
    return 0;
}

static int tool_reserve_one(once_store *store, const tool_args *a, const char *key)
{
    once_reserve_req req = {
        .scope = a->pos[1],
        .key = key,
        .fingerprint = a->fingerprint,
        .lease_ms = a->lease_ms,
        .retention_ms = a->retention_ms,
    };
    once_reservation res;
    memset(&res, 0, sizeof res);
    int rc = once_reserve(store, &req, &res);
    if (rc != ONCE_OK)
        return tool_fail("reserve", rc);
    const char *name = once_reserve_status_name(res.status);
    printf("%s %s %" PRId64 "\n", name != NULL ? name : "?",
           res.status == ONCE_RESERVED ? res.token : "-", res.attempt);
    once_reservation_free(&res);
    return 0;
}

static int tool_reserve(once_store *store, const tool_args *a)
{
    if (a->count == 0)
        return tool_reserve_one(store, a, a->pos[2]);
    /* Many rows in one process: tests need pages of them, quickly. */
    char key[ONCE_KEY_MAX + 1];
    for (int64_t i = 0; i < a->count; i++) {
        int n = snprintf(key, sizeof key, "%s-%05" PRId64, a->pos[2], i);
        if (n < 0 || (size_t)n >= sizeof key)
            return tool_usage("KEY is too long for --count");
        int code = tool_reserve_one(store, a, key);
        if (code != 0)
            return code;
    }
    return 0;
}

static int tool_complete(once_store *store, const tool_args *a)
{
    int64_t status;
    if (tool_parse_int(a->pos[4], &status) != 0 || status < 0 || status > 999)
        return tool_usage("STATUS must be a number from 0 to 999");
    /* once_complete copies what it stores; the argv strings stay ours. */
    once_response resp = {
        .status = (int)status,
        .headers = (char *)a->headers,
        .headers_len = a->headers != NULL ? strlen(a->headers) : 0,
        .body = (uint8_t *)a->pos[5],
        .body_len = strlen(a->pos[5]),
    };
    const char *provider_id = a->npos > 6 ? a->pos[6] : NULL;
    int rc = once_complete(store, a->pos[1], a->pos[2], a->pos[3], &resp, provider_id);
    return rc == ONCE_OK ? 0 : tool_fail("complete", rc);
}

static int tool_event_insert_one(once_store *store, const tool_args *a, const char *event_id)
{
    /* once_event_insert copies what it stores; the argv strings stay ours. */
    once_event_in ev = {
        .source = a->pos[1],
        .event_id = event_id,
        .content_type = a->content_type,
        .headers = a->headers,
        .headers_len = a->headers != NULL ? strlen(a->headers) : 0,
        .body = (const uint8_t *)a->pos[3],
        .body_len = strlen(a->pos[3]),
        .retention_ms = a->retention_ms,
    };
    int inserted = 0;
    int rc = once_event_insert(store, &ev, &inserted);
    if (rc != ONCE_OK)
        return tool_fail("event-insert", rc);
    printf("%s\n", inserted ? "accepted" : "duplicate");
    return 0;
}

static int tool_event_insert(once_store *store, const tool_args *a)
{
    if (a->count == 0)
        return tool_event_insert_one(store, a, a->pos[2]);
    /* Many events in one process: tests need pages of them, quickly. */
    char id[ONCE_EVENT_ID_MAX + 1];
    for (int64_t i = 0; i < a->count; i++) {
        int n = snprintf(id, sizeof id, "%s-%05" PRId64, a->pos[2], i);
        if (n < 0 || (size_t)n >= sizeof id)
            return tool_usage("EVENT_ID is too long for --count");
        int code = tool_event_insert_one(store, a, id);
        if (code != 0)
            return code;
    }
    return 0;
}

static int tool_event_claim(once_store *store, const tool_args *a)
{
    int64_t max, lease_ms;
    if (tool_parse_int(a->pos[2], &max) != 0 || max < 1)
        return tool_usage("MAX must be a positive number");
    if (tool_parse_int(a->pos[3], &lease_ms) != 0)
        return tool_usage("LEASE_MS must be a number");
    once_event_list claimed;
    memset(&claimed, 0, sizeof claimed);
    int rc = once_event_claim(store, a->pos[1], (size_t)max, lease_ms, &claimed);
    if (rc != ONCE_OK)
        return tool_fail("event-claim", rc);
    for (size_t i = 0; i < claimed.count; i++) {
        const once_event *e = &claimed.items[i];
        printf("%s %s %" PRId64 "\n", e->event_id, e->receipt, e->attempt);
    }
    once_event_list_free(&claimed);
    return 0;
}

static int tool_event_retry(once_store *store, const tool_args *a)
{
    int64_t delay_ms;
    if (tool_parse_int(a->pos[3], &delay_ms) != 0)
        return tool_usage("DELAY_MS must be a number");
    const char *err = a->npos > 4 ? a->pos[4] : NULL;
    int rc = once_event_retry(store, a->pos[1], a->pos[2], delay_ms, a->dead, err);
    return rc == ONCE_OK ? 0 : tool_fail("event-retry", rc);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return tool_usage("no subcommand");
    const char *cmd = argv[1];
    tool_args a;
    if (tool_parse_args(argc - 2, argv + 2, &a) != 0)
        return tool_usage("bad option");

    /* Operand counts (STORE included) per subcommand: min and max. */
    int lo, hi;
    if (strcmp(cmd, "reserve") == 0) {
        lo = 3, hi = 3;
    } else if (strcmp(cmd, "complete") == 0) {
        lo = 6, hi = 7;
    } else if (strcmp(cmd, "release") == 0 || strcmp(cmd, "unknown") == 0) {
        lo = 4, hi = 5;
    } else if (strcmp(cmd, "expire") == 0) {
        lo = 2, hi = 2;
    } else if (strcmp(cmd, "hold") == 0) {
        lo = 4, hi = 4;
    } else if (strcmp(cmd, "event-insert") == 0 || strcmp(cmd, "event-claim") == 0) {
        lo = 4, hi = 4;
    } else if (strcmp(cmd, "event-ack") == 0) {
        lo = 3, hi = 3;
    } else if (strcmp(cmd, "event-retry") == 0) {
        lo = 4, hi = 5;
    } else {
        return tool_usage("unknown subcommand");
    }
    if (a.npos < lo || a.npos > hi)
        return tool_usage("wrong number of arguments");
    if (a.dead && strcmp(cmd, "event-retry") != 0)
        return tool_usage("--dead goes with event-retry only");

    once_store *store = NULL;
    int rc = once_store_open(a.pos[0], &store);
    if (rc != ONCE_OK) {
        tool_fail("open", rc);
        return 2; /* whatever the reason, there is no store to act on */
    }

    int code;
    if (strcmp(cmd, "reserve") == 0) {
        code = tool_reserve(store, &a);
    } else if (strcmp(cmd, "complete") == 0) {
        code = tool_complete(store, &a);
    } else if (strcmp(cmd, "release") == 0) {
        const char *err = a.npos > 4 ? a.pos[4] : NULL;
        rc = once_release(store, a.pos[1], a.pos[2], a.pos[3], err);
        code = rc == ONCE_OK ? 0 : tool_fail("release", rc);
    } else if (strcmp(cmd, "unknown") == 0) {
        const char *err = a.npos > 4 ? a.pos[4] : NULL;
        rc = once_mark_unknown(store, a.pos[1], a.pos[2], a.pos[3], err);
        code = rc == ONCE_OK ? 0 : tool_fail("unknown", rc);
    } else if (strcmp(cmd, "expire") == 0) {
        int64_t now;
        size_t count = 0;
        if (tool_parse_int(a.pos[1], &now) != 0) {
            code = tool_usage("NOW_MS must be a number");
        } else {
            rc = once_expire_leases(store, now, &count);
            if (rc == ONCE_OK)
                printf("%zu\n", count);
            code = rc == ONCE_OK ? 0 : tool_fail("expire", rc);
        }
    } else if (strcmp(cmd, "hold") == 0) {
        rc = once_hold(store, a.pos[1], a.pos[2], a.pos[3]);
        code = rc == ONCE_OK ? 0 : tool_fail("hold", rc);
    } else if (strcmp(cmd, "event-insert") == 0) {
        code = tool_event_insert(store, &a);
    } else if (strcmp(cmd, "event-claim") == 0) {
        code = tool_event_claim(store, &a);
    } else if (strcmp(cmd, "event-ack") == 0) {
        rc = once_event_ack(store, a.pos[1], a.pos[2]);
        code = rc == ONCE_OK ? 0 : tool_fail("event-ack", rc);
    } else {
        code = tool_event_retry(store, &a);
    }
    once_store_close(store);
    if (fflush(stdout) != 0)
        return 2;
    return code;
}
