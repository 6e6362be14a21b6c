/*
 * test_sse.c — the event-stream reader (src/common/sse.c): events as the
 * WHATWG algorithm defines them, whatever the pieces the bytes arrive in,
 * and the watcher's verdicts on the LLM stream shapes (complete or cut, and
 * the tokens reported).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/sse.h"

typedef struct log {
    char text[4096]; /* "name=data|" per event, truncated events marked '!' */
    size_t len;
} log;

static void on_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    log *l = ctx;
    int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s=%.*s%s|", name, (int)len, data,
                     truncated ? "!" : "");
    if (n > 0)
        l->len += (size_t)n;
}

/* The events of s fed whole, and fed one byte at a time: the same. */
static const char *events_of(const char *s, log *l)
{
    log bytewise = {0};
    sse_parser p;
    memset(l, 0, sizeof *l);
    sse_parser_init(&p, on_event, l);
    assert_int_equal(sse_parser_feed(&p, (const uint8_t *)s, strlen(s)), 0);
    sse_parser_free(&p);
    sse_parser_init(&p, on_event, &bytewise);
    for (size_t i = 0; s[i]; i++)
        assert_int_equal(sse_parser_feed(&p, (const uint8_t *)s + i, 1), 0);
    sse_parser_free(&p);
    assert_string_equal(l->text, bytewise.text);
    return l->text;
}

static void test_events(void **state)
{
    (void)state;
    log l;
    assert_string_equal(events_of("data: a\n\n", &l), "message=a|");
    assert_string_equal(events_of("data:a\ndata: b\n\n", &l), "message=a\nb|");
    assert_string_equal(events_of("event: delta\ndata: {\"x\":1}\n\n", &l), "delta={\"x\":1}|");
    /* CR, LF and CRLF all end lines. */
    assert_string_equal(events_of("data: a\r\rdata: b\r\n\r\ndata: c\n\n", &l), "message=a|message=b|message=c|");
    /* Comments, unknown fields, id and retry feed nothing. */
    assert_string_equal(events_of(": ping\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n", &l), "message=x|");
    /* A field without a colon has an empty value; only one leading space goes. */
    assert_string_equal(events_of("data\ndata:  two\n\n", &l), "message=\n two|");
    /* No data, no event; the name does not leak into the next one. */
    assert_string_equal(events_of("event: lonely\n\ndata: y\n\n", &l), "message=y|");
    /* An event the stream did not finish with a blank line is not one. */
    assert_string_equal(events_of("data: done\n\ndata: half", &l), "message=done|");
    /* A byte-order mark is skipped at the start only. */
    assert_string_equal(events_of("\xEF\xBB\xBF" "data: bom\n\n", &l), "message=bom|");
    /* Half a mark is content: the field is then not "data". */
    assert_string_equal(events_of("\xEF\xBB" "data: z\n\n", &l), "");
    assert_string_equal(events_of("\xEF\xBB\n" "data: z\n\n", &l), "message=z|");
    /* The last event line wins; long names are cut, not overflowed. */
    assert_string_equal(events_of("event: a\nevent: b\ndata: 1\n\n", &l), "b=1|");
}

/* Records the length of the one event, plus one when it was cut. */
static void on_big(void *ctx, const char *name, const char *data, size_t len, int tr)
{
    (void)name;
    (void)data;
    *(size_t *)ctx = len + (tr ? 1 : 0);
}

static void test_long_data_is_cut_for_the_watcher(void **state)
{
    (void)state;
    static char big[SSE_DATA_MAX + 64];
    memcpy(big, "data: ", 6);
    memset(big + 6, 'x', SSE_DATA_MAX + 10);
    sse_parser p;
    size_t got = 0;
    sse_parser_init(&p, on_big, &got);
    assert_int_equal(sse_parser_feed(&p, (const uint8_t *)big, 6 + SSE_DATA_MAX + 10), 0);
    assert_int_equal(sse_parser_feed(&p, (const uint8_t *)"\n\n", 2), 0);
    sse_parser_free(&p);
    assert_int_equal(got, SSE_DATA_MAX + 1);
}

static sse_watch *watch(const char *s, sse_watch *w)
{
    sse_watch_init(w);
    assert_int_equal(sse_watch_feed(w, (const uint8_t *)s, strlen(s)), 0);
    return w;
}

#define CHAT_CHUNK "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"

static void test_openai_chat(void **state)
{
    (void)state;
    sse_watch w;
    watch(CHAT_CHUNK CHAT_CHUNK, &w);
    assert_int_equal(w.shape, SSE_SHAPE_OPENAI_CHAT);
    assert_false(sse_watch_complete(&w)); /* cut before [DONE] */
    assert_int_equal(sse_watch_tokens(&w), -1);
    sse_watch_free(&w);
    watch(CHAT_CHUNK "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
                     "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n"
                     "data: [DONE]\n\n",
          &w);
    assert_true(sse_watch_complete(&w));
    assert_int_equal(sse_watch_tokens(&w), 12);
    sse_watch_free(&w);
    /* [DONE] without its blank line has not arrived. */
    watch(CHAT_CHUNK "data: [DONE]\n", &w);
    assert_false(sse_watch_complete(&w));
    sse_watch_free(&w);
}

static void test_openai_responses(void **state)
{
    (void)state;
    sse_watch w;
    const char *start = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n"
                        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
                        "\"delta\":\"Hi\"}\n\n";
    watch(start, &w);
    assert_int_equal(w.shape, SSE_SHAPE_OPENAI_RESPONSES);
    assert_false(sse_watch_complete(&w));
    sse_watch_free(&w);
    char full[1024];
    snprintf(full, sizeof full, "%s%s", start,
             "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":"
             "{\"input_tokens\":5,\"output_tokens\":2,\"total_tokens\":7}}}\n\n");
    watch(full, &w);
    assert_true(sse_watch_complete(&w));
    assert_int_equal(sse_watch_tokens(&w), 7);
    sse_watch_free(&w);
}

static void test_anthropic(void **state)
{
    (void)state;
    sse_watch w;
    const char *body =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,"
        "\"output_tokens\":1}}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n";
    watch(body, &w);
    assert_int_equal(w.shape, SSE_SHAPE_ANTHROPIC);
    assert_false(sse_watch_complete(&w));
    assert_int_equal(sse_watch_tokens(&w), 40);
    sse_watch_free(&w);
    char full[1024];
    snprintf(full, sizeof full, "%sevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", body);
    watch(full, &w);
    assert_true(sse_watch_complete(&w));
    sse_watch_free(&w);
}

static void test_other_streams_end_with_their_transfer(void **state)
{
    (void)state;
    sse_watch w;
    watch("data: tick 1\n\ndata: tick 2\n\n", &w);
    assert_int_equal(w.shape, SSE_SHAPE_UNKNOWN);
    assert_true(sse_watch_complete(&w));
    assert_int_equal(sse_watch_tokens(&w), -1);
    sse_watch_free(&w);
}

static void test_content_type(void **state)
{
    (void)state;
    assert_true(sse_content_type("text/event-stream"));
    assert_true(sse_content_type("Text/Event-Stream; charset=utf-8"));
    assert_true(sse_content_type(" text/event-stream"));
    assert_false(sse_content_type("text/event-streams"));
    assert_false(sse_content_type("application/json"));
    assert_false(sse_content_type(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_long_data_is_cut_for_the_watcher),
        cmocka_unit_test(test_openai_chat),
        cmocka_unit_test(test_openai_responses),
        cmocka_unit_test(test_anthropic),
        cmocka_unit_test(test_other_streams_end_with_their_transfer),
        cmocka_unit_test(test_content_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
