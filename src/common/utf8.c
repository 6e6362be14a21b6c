/*
 * utf8.c — well-formed UTF-8 (see utf8.h).
 */
#include "common/utf8.h"

size_t utf8_seq_len(const uint8_t *p, size_t n)
{
    uint8_t b0 = p[0];
    if (b0 < 0x80)
        return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (b0 >= 0xc2 && b0 <= 0xdf) {
        need = 2;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        need = 3;
        if (b0 == 0xe0)
            lo = 0xa0; /* overlong */
        else if (b0 == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        need = 4;
        if (b0 == 0xf0)
            lo = 0x90; /* overlong */
        else if (b0 == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0; /* continuation byte, 0xc0/0xc1 overlongs, 0xf5.. */
    }
    if (n < need)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    }
    return need;
}

int utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l == 0)
            return 0;
        i += l;
    }
    return 1;
}
