/*
 * sse.c — event streams read as they pass (see sse.h).
 */
#include "common/sse.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

enum { LINE_FIELD = 0, LINE_IGNORE, LINE_DATA, LINE_EVENT };

/* A stream tells its shape in its first events (OpenAI's first chunk,
 * Anthropic's message_start); later ones are not parsed to find it. */
#define SSE_SHAPE_EVENTS 8

static const uint8_t BOM[3] = {0xEF, 0xBB, 0xBF};

void sse_parser_init(sse_parser *p, sse_event_fn on_event, void *ctx)
{
    memset(p, 0, sizeof *p);
    p->on_event = on_event;
    p->ctx = ctx;
}

void sse_parser_free(sse_parser *p)
{
    buf_free(&p->data);
}

/* Appends to the event's data, cut at SSE_DATA_MAX (the caller's copy of
 * the stream is whole; only the watcher's view is cut). */
static int data_put(sse_parser *p, const uint8_t *s, size_t n)
{
    size_t room = SSE_DATA_MAX - p->data.len;
    if (n > room) {
        n = room;
        p->truncated = 1;
    }
    return n ? buf_append(&p->data, s, n, SSE_DATA_MAX) : 0;
}

/* The field name is complete (at its colon, or at the end of a line that
 * has none): decide what the value feeds. */
static int field_resolve(sse_parser *p)
{
    p->line_kind = LINE_IGNORE;
    if (p->field_overflow)
        return 0;
    if (p->field_len == 4 && memcmp(p->field, "data", 4) == 0) {
        p->line_kind = LINE_DATA;
        if (p->data_lines++ > 0)
            return data_put(p, (const uint8_t *)"\n", 1);
    } else if (p->field_len == 5 && memcmp(p->field, "event", 5) == 0) {
        p->line_kind = LINE_EVENT;
        p->name_len = 0; /* the last event line wins */
    }
    return 0;
}

static void event_dispatch(sse_parser *p)
{
    if (p->data_lines > 0) {
        p->name[p->name_len] = '\0';
        p->on_event(p->ctx, p->name_len ? p->name : "message", p->data.data ? (const char *)p->data.data : "",
                    p->data.len, p->truncated);
    }
    p->data.len = 0;
    if (p->data.data)
        p->data.data[0] = '\0';
    p->data_lines = 0;
    p->name_len = 0;
    p->truncated = 0;
}

/* A line ended (CR, LF or CRLF). */
static int line_end(sse_parser *p)
{
    int rc = 0;
    if (!p->in_value) {
        if (p->field_len == 0 && !p->field_overflow)
            event_dispatch(p); /* a blank line */
        else
            rc = field_resolve(p); /* "data" alone is an empty data line */
    }
    p->field_len = 0;
    p->field_overflow = 0;
    p->in_value = 0;
    p->value_started = 0;
    p->line_kind = LINE_FIELD;
    return rc;
}

/* Bytes of a value, up to (not including) the end of its line. */
static int value_put(sse_parser *p, const uint8_t *s, size_t n)
{
    if (n && !p->value_started) {
        p->value_started = 1;
        if (s[0] == ' ') {
            s++;
            n--;
        }
    }
    if (p->line_kind == LINE_DATA)
        return data_put(p, s, n);
    if (p->line_kind == LINE_EVENT) {
        size_t room = SSE_NAME_MAX - p->name_len;
        memcpy(p->name + p->name_len, s, n < room ? n : room);
        p->name_len += n < room ? n : room;
    }
    return 0;
}

/* Skips a byte-order mark at the very start, even split across feeds. */
static size_t bom_skip(sse_parser *p, const uint8_t *b, size_t n)
{
    size_t i = 0;
    while (!p->bom_checked && i < n) {
        if (b[i] != BOM[p->bom_seen]) {
            p->bom_checked = 1;
            if (p->bom_seen) {
                /* A partial mark was stream content after all. */
                size_t seen = p->bom_seen;
                p->bom_seen = 0;
                if (sse_parser_feed(p, BOM, seen) < 0)
                    return (size_t)-1;
            }
            break;
        }
        i++;
        if (++p->bom_seen == sizeof BOM)
            p->bom_checked = 1;
    }
    return i;
}

int sse_parser_feed(sse_parser *p, const uint8_t *b, size_t n)
{
    size_t i = bom_skip(p, b, n);
    if (i == (size_t)-1)
        return -1;
    while (i < n) {
        uint8_t c = b[i];
        if (p->after_cr) {
            p->after_cr = 0;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            p->after_cr = c == '\r';
            if (line_end(p) < 0)
                return -1;
            i++;
            continue;
        }
        if (p->in_value) {
            /* A run of value bytes at once, up to the line's end. */
            size_t j = i;
            while (j < n && b[j] != '\r' && b[j] != '\n')
                j++;
            if (value_put(p, b + i, j - i) < 0)
                return -1;
            i = j;
            continue;
        }
        if (c == ':') {
            p->in_value = 1;
            if (p->field_len == 0 && !p->field_overflow)
                p->line_kind = LINE_IGNORE; /* a comment */
            else if (field_resolve(p) < 0)
                return -1;
        } else if (p->field_len < sizeof p->field) {
            p->field[p->field_len++] = (char)c;
        } else {
            p->field_overflow = 1;
        }
        i++;
    }
    return 0;
}

/* ---- the watcher --------------------------------------------------------- */

static int64_t json_count(json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* The type of an event: its name, or (when unnamed) the "type" member of
 * its JSON data (OpenAI and Anthropic send both). */
static const char *event_type(const char *name, json_t *doc)
{
    if (strcmp(name, "message") != 0)
        return name;
    json_t *t = json_object_get(doc, "type");
    return json_is_string(t) ? json_string_value(t) : "";
}

static void watch_usage(sse_watch *w, const char *type, json_t *doc)
{
    if (w->shape == SSE_SHAPE_ANTHROPIC) {
        json_t *u = strcmp(type, "message_start") == 0 ? json_object_get(json_object_get(doc, "message"), "usage")
                                                         : json_object_get(doc, "usage");
        int64_t in = json_count(json_object_get(u, "input_tokens"));
        int64_t out = json_count(json_object_get(u, "output_tokens"));
        if (in >= 0)
            w->input_tokens = in;
        if (out >= 0)
            w->output_tokens = out; /* message_delta's count is cumulative */
        return;
    }
    json_t *u = json_object_get(doc, "usage");
    if (w->shape == SSE_SHAPE_OPENAI_RESPONSES)
        u = json_object_get(json_object_get(doc, "response"), "usage");
    int64_t total = json_count(json_object_get(u, "total_tokens"));
    if (total >= 0)
        w->total_tokens = total;
}

static void watch_event(void *ctx, const char *name, const char *data, size_t len, int truncated)
{
    sse_watch *w = ctx;
    w->events++;
    if (strcmp(data, "[DONE]") == 0) {
        if (w->shape == SSE_SHAPE_UNKNOWN)
            w->shape = SSE_SHAPE_OPENAI_CHAT;
        if (w->shape == SSE_SHAPE_OPENAI_CHAT)
            w->final_seen = 1;
        return;
    }
    /* Only frames that can say something are parsed: until the shape is
     * known, and then those that report usage. The rest are deltas, and
     * their names (or [DONE]) say what they are. */
    json_t *doc = NULL;
    int worth = (w->shape == SSE_SHAPE_UNKNOWN && w->events <= SSE_SHAPE_EVENTS) ||
                memmem(data, len, "\"usage\"", 7) != NULL;
    if (worth && !truncated && len && data[0] == '{')
        doc = json_loadb(data, len, 0, NULL);
    const char *type = event_type(name, doc);
    if (w->shape == SSE_SHAPE_UNKNOWN) {
        json_t *object = json_object_get(doc, "object");
        if (strcmp(type, "message_start") == 0)
            w->shape = SSE_SHAPE_ANTHROPIC;
        else if (strncmp(type, "response.", 9) == 0)
            w->shape = SSE_SHAPE_OPENAI_RESPONSES;
        else if (json_is_string(object) && strcmp(json_string_value(object), "chat.completion.chunk") == 0)
            w->shape = SSE_SHAPE_OPENAI_CHAT;
    }
    switch (w->shape) {
    case SSE_SHAPE_ANTHROPIC:
        if (strcmp(type, "message_stop") == 0)
            w->final_seen = 1;
        break;
    case SSE_SHAPE_OPENAI_RESPONSES:
        if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.failed") == 0 ||
            strcmp(type, "response.incomplete") == 0)
            w->final_seen = 1;
        break;
    default: break;
    }
    if (doc)
        watch_usage(w, type, doc);
    json_decref(doc);
}

void sse_watch_init(sse_watch *w)
{
    memset(w, 0, sizeof *w);
    w->total_tokens = w->input_tokens = w->output_tokens = -1;
    sse_parser_init(&w->parser, watch_event, w);
}

int sse_watch_feed(sse_watch *w, const uint8_t *bytes, size_t n)
{
    return sse_parser_feed(&w->parser, bytes, n);
}

int sse_watch_complete(const sse_watch *w)
{
    return w->shape == SSE_SHAPE_UNKNOWN || w->final_seen;
}

int64_t sse_watch_tokens(const sse_watch *w)
{
    if (w->shape == SSE_SHAPE_ANTHROPIC) {
        if (w->input_tokens < 0 && w->output_tokens < 0)
            return -1;
        return (w->input_tokens > 0 ? w->input_tokens : 0) + (w->output_tokens > 0 ? w->output_tokens : 0);
    }
    return w->total_tokens;
}

const char *sse_shape_name(sse_shape s)
{
    switch (s) {
    case SSE_SHAPE_OPENAI_CHAT: return "openai-chat";
    case SSE_SHAPE_OPENAI_RESPONSES: return "openai-responses";
    case SSE_SHAPE_ANTHROPIC: return "anthropic";
    default: return "event-stream";
    }
}

void sse_watch_free(sse_watch *w)
{
    sse_parser_free(&w->parser);
}

int sse_content_type(const char *value)
{
    static const char type[] = "text/event-stream";
    if (!value)
        return 0;
    while (*value == ' ' || *value == '\t')
        value++;
    if (strncasecmp(value, type, sizeof type - 1) != 0)
        return 0;
    char next = value[sizeof type - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}
