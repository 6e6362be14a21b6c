/*
 * hex.c — hexadecimal digits (see hex.h).
 */
#include "common/hex.h"

char hex_digit(unsigned nibble, int upper)
{
    return (upper ? "0123456789ABCDEF" : "0123456789abcdef")[nibble & 15];
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_digit(in[i] >> 4, 0);
        out[2 * i + 1] = hex_digit(in[i], 0);
    }
    out[2 * n] = '\0';
}

int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
