/*
 * key_template_int.h — the parsed form of a key template, shared by the
 * parser (key_template.c) and the evaluator (key_template_eval.c). Not for
 * anyone else.
 */
#ifndef ONCE_COMMON_KEY_TEMPLATE_INT_H
#define ONCE_COMMON_KEY_TEMPLATE_INT_H

#include <stddef.h>

#include "common/errbuf.h"
#include "common/key_template.h"

#define KT_TEXT_MAX 4096          /* bytes of template text */
#define KT_NODES_MAX 256          /* literals, fields and calls */
#define KT_DEPTH_MAX 16           /* nested calls */
#define KT_PATH_MAX 255           /* highest {path:N} */
#define KT_VALUE_MAX (1024 * 1024) /* bytes of any intermediate value */
#define KT_DOMAIN_MAX 253         /* a DNS name, without the trailing dot */

typedef enum { KT_LIT, KT_FIELD, KT_CALL } kt_type;
typedef enum { KT_HEADER, KT_JSON, KT_QUERY, KT_PATH } kt_kind;
typedef enum { KT_LOWER, KT_TRIM, KT_DIGITS, KT_DOMAIN, KT_SHA256 } kt_func;


/* One part of a template. Parts of one sequence are chained by next; a
 * call's argument is the sequence starting at child. -1 ends a chain. */
typedef struct kt_node {
    kt_type type;
    int what;    /* kt_kind of a field, kt_func of a call */
    int next;    /* the following part of the same sequence */
    int child;   /* a call: its argument's first part */
    int end;     /* a call: one past its argument's last part (parts are in text order) */
    char *s;     /* a literal: its text; a field: "kind:value" */
    size_t len;  /* strlen(s) */
    size_t vofs; /* a field: where its value starts in s */
    size_t n;    /* a path field: the segment index */
} kt_node;

struct key_template {
    int first; /* the top-level sequence */
    int nnodes;
    kt_node nodes[KT_NODES_MAX];
    char *arena; /* every node's s, NUL-terminated one after another */
};

extern const char *const kt_kind_names[];
extern const char *const kt_func_names[];


/* A letter, digit or '_'. */
int kt_is_ident(unsigned char c);

#endif
