/*
 * hex.h — hexadecimal digits, both ways: tokens, digests, percent escapes
 * and terminal escapes all spell bytes this way.
 */
#ifndef ONCE_COMMON_HEX_H
#define ONCE_COMMON_HEX_H

#include <stddef.h>
#include <stdint.h>

/* The digit of a nibble (0..15): lower case, or upper case when upper. */
char hex_digit(unsigned nibble, int upper);

/* n bytes as 2n lower-case hex digits and a NUL in out (2n + 1 bytes). */
void hex_encode(const uint8_t *in, size_t n, char *out);

/* The value of a hex digit (either case), or -1. */
int hex_value(char c);

#endif
