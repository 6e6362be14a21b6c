/*
 * fuzz_sse.c — libFuzzer target for the event-stream reader
 * (src/common/sse.c), which sees an upstream's raw bytes while they are
 * relayed. The same input is fed whole and in pieces (cut where the input's
 * first bytes say): the events must be the same either way, each bounded,
 * and the watcher must not crash on any of them.
 */
#include "common/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Events are folded into a running hash and a count, so two runs compare
 * without keeping them. */
typedef struct seen {
    uint64_t hash;
    size_t count;
} seen;

static uint64_t fold(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static void on_event(void *ctx, const char *name, const char *d, size_t len, int truncated)
{
    seen *s = ctx;
    /* A name may hold a NUL (the stream's bytes are kept as they came):
     * it is bounded either way. */
    size_t nlen = strnlen(name, SSE_NAME_MAX + 1);
    if (nlen > SSE_NAME_MAX || len > SSE_DATA_MAX || d[len] != '\0' || (truncated && len != SSE_DATA_MAX))
        abort();
    if (memchr(name, '\n', nlen) || memchr(name, '\r', nlen) || memchr(d, '\r', len))
        abort();
    s->hash = fold(s->hash, name, nlen + 1);
    s->hash = fold(s->hash, d, len);
    s->hash = fold(s->hash, &truncated, sizeof truncated);
    s->count++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    data++;
    size--;

    seen whole = {0xcbf29ce484222325ULL, 0}, pieces = whole;
    sse_parser p;
    sse_parser_init(&p, on_event, &whole);
    if (sse_parser_feed(&p, data, size) < 0)
        abort();
    sse_parser_free(&p);

    sse_parser_init(&p, on_event, &pieces);
    for (size_t off = 0; off < size; off += step)
        if (sse_parser_feed(&p, data + off, size - off < step ? size - off : step) < 0)
            abort();
    sse_parser_free(&p);
    if (whole.hash != pieces.hash || whole.count != pieces.count)
        abort();

    sse_watch w;
    sse_watch_init(&w);
    if (sse_watch_feed(&w, data, size) < 0)
        abort();
    (void)sse_watch_complete(&w);
    (void)sse_watch_tokens(&w);
    sse_watch_free(&w);
    return 0;
}
