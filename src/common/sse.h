/*
 * sse.h — reading a text/event-stream (server-sent events) as it passes
 * through, bytes in any pieces: the events it carries (WHATWG HTML,
 * "Parsing an event stream"), and what an LLM stream says about itself —
 * which provider's shape it has, whether its final event came, and the
 * tokens it reports. The gateway relays and records the bytes untouched;
 * this only watches them, so that a stream cut before its final event is
 * recorded as unknown, never as completed.
 *
 * Untrusted input: every line and event is bounded (longer ones are cut
 * for the watcher, never for the caller), and tests/fuzz/fuzz_sse.c feeds
 * it arbitrary bytes in arbitrary pieces.
 */
#ifndef ONCE_COMMON_SSE_H
#define ONCE_COMMON_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define SSE_NAME_MAX 64           /* an event name; longer ones are cut */
#define SSE_DATA_MAX (1u << 20)   /* an event's data kept for the watcher */

/* One event: name ("message" when the stream named none) and data (its
 * data lines joined by "\n", NUL-terminated; cut at SSE_DATA_MAX, then
 * truncated is set). */
typedef void (*sse_event_fn)(void *ctx, const char *name, const char *data, size_t len, int truncated);

typedef struct sse_parser {
    sse_event_fn on_event;
    void *ctx;
    int after_cr;                  /* the last byte was CR: an LF next belongs to it */
    int bom_checked;               /* a leading U+FEFF is skipped, once */
    size_t bom_seen;               /* bytes of it seen so far */
    char field[16];                /* the current line's field name (longer: ignored) */
    size_t field_len;
    int in_value;                  /* past the field's colon */
    int value_started;             /* the value's first byte is past (one leading space is dropped) */
    int field_overflow;
    char name[SSE_NAME_MAX + 1];   /* the event being built */
    size_t name_len;
    buf data;                      /* grows as needed, up to SSE_DATA_MAX */
    int data_lines;                /* data lines so far (0: no data, nothing dispatched) */
    int truncated;
    int line_kind;                 /* what the current line's value feeds (sse.c) */
} sse_parser;

/* Ready to read a stream from its first byte; on_event runs for each
 * complete event. */
void sse_parser_init(sse_parser *p, sse_event_fn on_event, void *ctx);

/* Reads n more bytes. 0, or -1 when out of memory (the parser is then
 * unusable; what it already dispatched stands). */
int sse_parser_feed(sse_parser *p, const uint8_t *bytes, size_t n);

void sse_parser_free(sse_parser *p);

/* The LLM stream shapes whose end is an event, not just the end of the
 * transfer. */
typedef enum sse_shape {
    SSE_SHAPE_UNKNOWN = 0,  /* any other event stream: its transfer's end is its end */
    SSE_SHAPE_OPENAI_CHAT,  /* chat.completion.chunk ... data: [DONE] */
    SSE_SHAPE_OPENAI_RESPONSES, /* response.created ... response.completed | .failed | .incomplete */
    SSE_SHAPE_ANTHROPIC     /* message_start ... message_stop */
} sse_shape;

typedef struct sse_watch {
    sse_parser parser;
    sse_shape shape;
    int final_seen;         /* the shape's final event arrived */
    int64_t total_tokens;   /* usage the stream reported; -1 when none */
    int64_t input_tokens;   /* Anthropic reports the two parts apart */
    int64_t output_tokens;
    uint64_t events;
} sse_watch;

void sse_watch_init(sse_watch *w);
/* Reads n more bytes of the stream. 0, or -1 out of memory. */
int sse_watch_feed(sse_watch *w, const uint8_t *bytes, size_t n);
/* Did the stream end as its shape ends? An unknown shape: yes (its
 * transfer's clean end is all there is to know). */
int sse_watch_complete(const sse_watch *w);
/* The tokens the stream reported in all, or -1 when it reported none. */
int64_t sse_watch_tokens(const sse_watch *w);
const char *sse_shape_name(sse_shape s);
void sse_watch_free(sse_watch *w);

/* Is this Content-Type value an event stream (text/event-stream, any case,
 * with or without parameters)? */
int sse_content_type(const char *value);

#endif
