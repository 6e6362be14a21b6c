/*
 * ledger_demo.c — a tour of libonce: an agent's "send reply" step retried the
 * way webhooks and queues retry it, and the ledger turning that into one
 * effect. `make run` runs it, then shows the rows with the `once` CLI.
 *
 *   usage: ledger_demo STORE-URL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <once/once.h>

static int effects; /* what the "provider" actually did */

static void die(const char *what, int rc)
{
    fprintf(stderr, "ledger_demo: %s: %s (%s)\n", what, once_strerror(rc), once_errdetail());
    exit(2);
}

/* One attempt of the agent's step: reserve, call the provider only when
 * told to, record the outcome. The key comes from the intent (the inbound
 * message and the step), never from the attempt. */
static void attempt(once_store *st, const char *key, const char *payload, int provider_fails)
{
    char fp[65];
    int rc = once_fingerprint("POST", "/v1/messages", (const uint8_t *)payload, strlen(payload), fp);
    if (rc < 0)
        die("fingerprint", rc);
    once_reserve_req req = {.scope = "mailer", .key = key, .fingerprint = fp, .lease_ms = 30000};
    once_reservation r;
    if ((rc = once_reserve(st, &req, &r)) < 0)
        die("reserve", rc);
    printf("  %-28s payload=%-22s -> %s", key, payload, once_reserve_status_name(r.status));
    switch (r.status) {
    case ONCE_RESERVED:
        printf(" (attempt %lld)", (long long)r.attempt);
        if (provider_fails) {
            /* The connection dropped after the request went out: the
             * provider may have sent it. Ambiguous is not failed. */
            effects++;
            printf(" -> provider call timed out -> unknown\n");
            if ((rc = once_mark_unknown(st, "mailer", key, r.token, "timeout after send")) < 0)
                die("mark_unknown", rc);
        } else {
            effects++;
            char body[128];
            snprintf(body, sizeof body, "{\"id\":\"msg_%d\",\"text\":\"%s\"}", effects, payload);
            once_response resp = {.status = 200, .body = (uint8_t *)body, .body_len = strlen(body)};
            char pid[32];
            snprintf(pid, sizeof pid, "msg_%d", effects);
            if ((rc = once_complete(st, "mailer", key, r.token, &resp, pid)) < 0)
                die("complete", rc);
            printf(" -> sent, recorded as %s\n", pid);
        }
        break;
    case ONCE_COMPLETED:
        printf(" -> replayed %.*s%s\n", (int)r.action.response.body_len, (const char *)r.action.response.body,
               r.fingerprint_mismatch ? " (payload differs from the first: not sent again)" : "");
        break;
    default: printf(" -> not sent (%s)\n", r.action.error ? r.action.error : "see `once show`"); break;
    }
    once_reservation_free(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ledger_demo STORE-URL\n");
        return 1;
    }
    once_store *st;
    int rc = once_store_open(argv[1], &st);
    if (rc < 0)
        die("open", rc);

    printf("An inbound message is delivered three times; the model writes a different reply each time:\n");
    attempt(st, "inbound-msg-7731:reply", "ships Tuesday", 0);
    attempt(st, "inbound-msg-7731:reply", "ships tomorrow", 0);
    attempt(st, "inbound-msg-7731:reply", "ships Tuesday", 0);

    printf("\nA second message; the provider call times out after sending, then the agent retries:\n");
    attempt(st, "inbound-msg-7732:reply", "your refund is on its way", 1);
    attempt(st, "inbound-msg-7732:reply", "your refund is on its way", 0);

    printf("\n%d intents, %d provider effects.\n", 2, effects);
    once_store_close(st);
    return 0;
}
