/*
 * key_template.h — keys derived from the intent: a template over request
 * fields, evaluated by the gateway when the client sends no key (or always,
 * with key_source = template), so a key never depends on the attempt.
 *
 * Grammar (parsed once, at config load):
 *   template := ( literal | '{' field '}' | call )*
 *   field    := 'header:' NAME | 'json:' POINTER | 'query:' NAME | 'path:' N
 *   call     := FUNC '(' template ')'     FUNC: lower trim digits domain sha256
 * Literal text is kept as is ("order:{json:/cart}:{header:X-Customer}");
 * calls nest ("sha256(lower({json:/to}))"). A literal '{', '}', '(' or ')'
 * or a function name followed by '(' that should be text is written with a
 * backslash: "\{". {path:N} counts path segments after the upstream prefix
 * from 0. domain() turns an e-mail address or a URL into its registrable
 * domain, lower-case, IDNs as A-labels ("Sales@www.Acme.co.uk" -> "acme.co.uk").
 */
#ifndef ONCE_LEDGER_KEY_TEMPLATE_H
#define ONCE_LEDGER_KEY_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>

typedef struct key_template key_template;

/* Parses text. 0, or -1 with "column C: what" in err (columns from 1). */
int key_template_parse(const char *text, key_template **out, char *err, size_t errlen);
void key_template_free(key_template *t);

/* Where field values come from. Any callback may be NULL (the field kind is
 * then unavailable: an error naming it). Values are borrowed. */
typedef struct key_source {
    const char *(*header)(void *ctx, const char *name); /* case-insensitive */
    const char *(*query)(void *ctx, const char *name);  /* decoded value */
    const char *(*path)(void *ctx, size_t n);           /* decoded segment n */
    json_t *json;                                       /* parsed body, or NULL */
    void *ctx;
} key_source;

/* Evaluates t into out (cap bytes with the NUL). 0; -1 with the missing
 * field named in err ("json:/to"), e.g. for a 400 key_field_missing; -2 when
 * a value cannot be used (domain() of something that is not a domain, a
 * result longer than cap - 1). */
int key_template_eval(const key_template *t, const key_source *src, char *out, size_t cap, char *err,
                      size_t errlen);

/* Names the fields of t that are not json: ones ("header:X-Step"), for
 * contexts where only JSON exists (the actions API): 0 when t uses only
 * json: fields, else -1 with the first such field in err. */
int key_template_json_only(const key_template *t, char *err, size_t errlen);
/* The same, with header: fields allowed too when headers (an MCP tool's
 * key: a call has JSON and the request's headers, no path or query). */
int key_template_json_header_only(const key_template *t, int headers, char *err, size_t errlen);

#endif
