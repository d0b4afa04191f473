/* bytelevel.c -- GPT-2's byte <-> character map (ByteLevel pre-tokenizer and decoder) and the UTF-8
 * rules shared by encode (input check) and decode (lossy repair). */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes take
 * U+0100.. in byte order, so every byte becomes a visible character. */
void tk_bytelevel_init(tn_tokenizer *t) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        t->b2u[b] = (uint16_t)(keep ? b : 256 + n++);
    }
    memset(t->u2b, 0xff, sizeof t->u2b);
    for (int b = 0; b < 256; b++) {
        uint16_t u = t->b2u[b];
        t->u2b[u] = (int16_t)b;
        if (u < 0x80) {
            t->bl_utf8[b][0] = (char)u;
            t->bl_len[b] = 1;
        } else {
            t->bl_utf8[b][0] = (char)(0xc0 | (u >> 6));
            t->bl_utf8[b][1] = (char)(0x80 | (u & 0x3f));
            t->bl_len[b] = 2;
        }
    }
}

size_t tk_utf8_next(const uint8_t *s, size_t n, size_t *bad) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf;  /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) need = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0) lo = 0xa0;        /* no overlongs */
        else if (c == 0xed) hi = 0x9f;   /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0) lo = 0x90;
        else if (c == 0xf4) hi = 0x8f;   /* <= U+10FFFF */
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        uint8_t lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xbf;
        if (i >= n || s[i] < lo_i || s[i] > hi_i) {
            *bad = i;
            return 0;
        }
    }
    return need;
}

int tk_utf8_check(const uint8_t *s, size_t n, size_t *at) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {  /* ASCII runs, 8 bytes at a time */
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            while (i < n && s[i] < 0x80) i++;
            if (i == n) break;
        }
        size_t bad, k = tk_utf8_next(s + i, n - i, &bad);
        if (!k) {
            *at = i;
            return -1;
        }
        i += k;
    }
    return 0;
}

uint32_t tk_utf8_decode(const uint8_t *s, size_t len) {
    switch (len) {
    case 1: return s[0];
    case 2: return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    case 3: return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
    default: return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    }
}

static void append(char **buf, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        *buf = tn_xrealloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
}

void tk_bytelevel_token_bytes(const tn_tokenizer *t, const char *s, size_t n, char **buf, size_t *len, size_t *cap) {
    size_t start = *len;
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t bad, k = tk_utf8_next(u + i, n - i, &bad);
        uint32_t cp = k ? tk_utf8_decode(u + i, k) : TK_BL_NCP;
        if (cp >= TK_BL_NCP || t->u2b[cp] < 0) {  /* not a byte-level string: HF keeps its own bytes */
            *len = start;
            append(buf, len, cap, s, n);
            return;
        }
        char b = (char)t->u2b[cp];
        append(buf, len, cap, &b, 1);
        i += k;
    }
}

char *tk_utf8_lossy(const char *s, size_t n) {
    char *out = NULL;
    size_t len = 0, cap = 0;
    append(&out, &len, &cap, "", 0);
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        size_t run = i;  /* copy the valid stretch in one go */
        size_t bad = 0, k;
        while (i < n && (k = tk_utf8_next(u + i, n - i, &bad)) != 0) i += k;
        append(&out, &len, &cap, s + run, i - run);
        if (i < n) {
            append(&out, &len, &cap, "\xef\xbf\xbd", 3);
            i += bad;
        }
    }
    out[len] = '\0';
    return out;
}
