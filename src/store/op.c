/*
 * op.c — what every store does with an operation it could not carry out.
 */
#include "store/op.h"

void store_op_fail(store_op *op, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    once_vformat(op->detail, sizeof op->detail, fmt, ap);
    va_end(ap);
    op->rc = code;
}

