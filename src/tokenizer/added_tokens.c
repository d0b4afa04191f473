/* added_tokens.c -- finding added tokens (<|im_start|>, <think>, ...) in text the way HF's
 * AddedVocabulary does: an Aho-Corasick LeftmostLongest scan, here a first-byte index with the
 * candidates longest first, then the per-token options (single_word, lstrip, rstrip). Tokens with
 * normalized: false are found in the raw text, the others in the normalizer's output. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/core.h"

static int cmp_pattern(const void *pa, const void *pb) {
    const tk_pattern *a = pa, *b = pb;
    uint8_t fa = (uint8_t)a->s[0], fb = (uint8_t)b->s[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    return a->tok->id < b->tok->id ? -1 : a->tok->id > b->tok->id;
}

static int build(tn_tokenizer *t, tk_matcher *m, int normalized) {
    m->pat = tn_xcalloc((size_t)t->n_added + 1, sizeof *m->pat);
    for (int i = 0; i < t->n_added; i++) {
        const tk_added *a = &t->added[i];
        if (a->normalized != normalized) continue;
        tk_pattern *p = &m->pat[m->n++];
        *p = (tk_pattern){a->content, a->len, a, 0};
        if (normalized && t->nfc) {  /* HF matches these against normalized text: normalize them too */
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)a->content, (utf8proc_ssize_t)a->len, &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r <= 0) {
                free(nfc);
                return tn_err("%s: added_tokens id %d: content is not valid UTF-8 (%s)", t->path, a->id,
                              r < 0 ? utf8proc_errmsg(r) : "empty after NFC");
            }
            *p = (tk_pattern){(const char *)nfc, (size_t)r, a, 1};
        }
    }
    qsort(m->pat, (size_t)m->n, sizeof *m->pat, cmp_pattern);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < m->n && (uint8_t)m->pat[k].s[0] < b) k++;
        m->start[b] = k;
    }
    return 0;
}

int tk_matchers_build(tn_tokenizer *t) {
    if (build(t, &t->raw_match, 0) != 0) return -1;
    return build(t, &t->norm_match, 1);
}

void tk_matchers_free(tn_tokenizer *t) {
    tk_matcher *ms[2] = {&t->raw_match, &t->norm_match};
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < ms[j]->n; i++)
            if (ms[j]->pat[i].owned) free((void *)ms[j]->pat[i].s);
        free(ms[j]->pat);
        ms[j]->pat = NULL;
        ms[j]->n = 0;
    }
}

/* Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners. Alphabetic is
 * taken as the letter categories + Nl + the circled letters (its Other_Alphabetic outside marks). */
static int is_word(uint32_t cp) {
    if (cp == 0x200c || cp == 0x200d || (cp >= 0x24b6 && cp <= 0x24e9)) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* The Unicode White_Space property (Rust regex's \s). */
static int is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* The character that ends at s[end) / starts at s[at]; the text is valid UTF-8. */
static uint32_t char_before(const char *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && ((uint8_t)s[i] & 0xc0) == 0x80) i--;
    *start = i;
    return tk_utf8_decode((const uint8_t *)s + i, end - i);
}

static uint32_t char_at(const char *s, size_t n, size_t at, size_t *len) {
    size_t bad;
    *len = tk_utf8_next((const uint8_t *)s + at, n - at, &bad);
    if (!*len) *len = 1;  /* unreachable for valid text; keeps the scan moving */
    return tk_utf8_decode((const uint8_t *)s + at, *len);
}

int tk_match_next(const tk_matcher *m, const char *s, size_t n, size_t *pos, size_t floor, int parse_special,
                  size_t *ms, size_t *me, int32_t *id) {
    if (m->n == 0) {
        *pos = n;
        return 0;
    }
    const uint8_t *u = (const uint8_t *)s;
    size_t p = *pos;
    while (p < n) {
        int lo = m->start[u[p]], hi = m->start[u[p] + 1];
        const tk_pattern *hit = NULL;
        for (int k = lo; k < hi; k++)
            if (m->pat[k].n <= n - p && memcmp(s + p, m->pat[k].s, m->pat[k].n) == 0) {
                hit = &m->pat[k];
                break;
            }
        if (!hit) {
            p++;
            continue;
        }
        size_t start = p, stop = p + hit->n, len, cs;
        p = stop;
        const tk_added *a = hit->tok;
        if (a->special && !parse_special) continue;
        if (a->single_word && ((start > 0 && is_word(char_before(s, start, &cs))) || (stop < n && is_word(char_at(s, n, stop, &len)))))
            continue;
        if (a->lstrip) {
            while (start > floor && is_space(char_before(s, start, &cs))) start = cs;
        }
        if (a->rstrip) {
            while (stop < n && is_space(char_at(s, n, stop, &len))) stop += len;
        }
        *pos = stop;
        *ms = start, *me = stop, *id = a->id;
        return 1;
    }
    *pos = n;
    return 0;
}
