/*
 * pct.c — percent-decoding of request paths and query values. Paths arrive
 * raw from clients; a malformed escape is a 400, never a guess.
 */
#include "server/pct.h"

int pct_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int pct_decode(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = pct_hexval(in[i + 1]), lo = pct_hexval(in[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (unsigned char)(hi * 16 + lo);
            if (c == 0)
                return -1;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    if (o >= cap)
        return -1;
    out[o] = '\0';
    return 0;
}

int pct_valid(const char *s)
{
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '%') {
            if (pct_hexval(p[1]) < 0 || pct_hexval(p[2]) < 0)
                return 0;
            p += 2;
        } else if (c <= 0x20 || c >= 0x7f) {
            return 0;
        }
    }
    return 1;
}
