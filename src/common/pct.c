/*
 * pct.c — percent-decoding of request paths and query values. Paths arrive
 * raw from clients; a malformed escape is a 400, never a guess.
 */
#include "common/pct.h"

#include "common/hex.h"

int pct_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

int pct_encode(buf *b, const char *s, size_t n, size_t max)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int keep = pct_unreserved(c);
        char e[3] = {(char)c, 0, 0};
        if (!keep) {
            e[0] = '%';
            e[1] = hex_digit(c >> 4, 1);
            e[2] = hex_digit(c, 1);
        }
        if (buf_append(b, e, keep ? 1 : 3, max) < 0)
            return -1;
    }
    return 0;
}

int pct_decode(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
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
            if (hex_value(p[1]) < 0 || hex_value(p[2]) < 0)
                return 0;
            p += 2;
        } else if (c <= 0x20 || c >= 0x7f) {
            return 0;
        }
    }
    return 1;
}

size_t pct_normalize(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n) {
            int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                unsigned char c = (unsigned char)(hi * 16 + lo);
                if (pct_unreserved(c)) {
                    s[o++] = (char)c;
                } else {
                    s[o++] = '%';
                    s[o++] = hex_digit((unsigned)hi, 1);
                    s[o++] = hex_digit((unsigned)lo, 1);
                }
                i += 2;
                continue;
            }
        }
        s[o++] = s[i];
    }
    if (o < n)
        s[o] = '\0';
    return o;
}
