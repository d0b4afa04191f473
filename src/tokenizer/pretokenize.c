/* pretokenize.c -- one piece of text between raw added tokens -> ids: the normalizer (NFC through
 * utf8proc), normalized added tokens, the Split regexes (PCRE2, Isolated: matches and the gaps between
 * them are both pre-tokens), ByteLevel (optional prefix space, optional GPT-2 split), then BPE. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/core.h"

/* Every code point below U+0300 is NFC-stable with combining class 0, so text whose bytes are all
 * below 0xCC (the lead byte of U+0300) is already NFC: the common case skips utf8proc. */
static int maybe_not_nfc(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0xcc) return 1;
    return 0;
}

static int regex_error(const tk_enc *c, int rc) {
    PCRE2_UCHAR msg[128];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return tn_err("%s: pre-tokenizer regex failed on the input: %s", c->t->path, (char *)msg);
}

static int run_regex(tk_enc *c, const tk_regex *r, const char *s, size_t n, size_t from) {
    if (!r->jit) return pcre2_match(r->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    int rc = pcre2_jit_match(r->re, (PCRE2_SPTR)s, n, from, 0, c->md, c->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->jit_stack) {  /* rare: grow the stack once, retry */
        c->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
        if (!c->jit_stack) return rc;
        pcre2_jit_stack_assign(c->mctx, NULL, c->jit_stack);
        rc = pcre2_jit_match(r->re, (PCRE2_SPTR)s, n, from, 0, c->md, c->mctx);
    }
    return rc;
}

static int pipeline(tk_enc *c, int step, const char *s, size_t n);

/* Split with behavior Isolated: each match and each gap between matches goes on to step `next`. */
static int isolate(tk_enc *c, const tk_regex *r, int next, const char *s, size_t n) {
    size_t at = 0, prev = 0;
    while (at < n) {
        int rc = run_regex(c, r, s, n, at);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return regex_error(c, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {  /* empty match: nothing to cut, step over one character */
            size_t bad, k = tk_utf8_next((const uint8_t *)s + ms, n - ms, &bad);
            at = ms + (k ? k : 1);
            continue;
        }
        if (ms > prev && pipeline(c, next, s + prev, ms - prev) != 0) return -1;
        if (pipeline(c, next, s + ms, me - ms) != 0) return -1;
        prev = at = me;
    }
    return prev < n ? pipeline(c, next, s + prev, n - prev) : 0;
}

/* Steps 0..n_splits-1 are the Splits, n_splits is ByteLevel, n_splits+1 is BPE. Empty pieces are
 * dropped, as HF does. */
static int pipeline(tk_enc *c, int step, const char *s, size_t n) {
    const tn_tokenizer *t = c->t;
    if (n == 0) return 0;
    if (step < t->n_splits) return isolate(c, &t->split[step], step + 1, s, n);
    if (step == t->n_splits) {
        if (t->bl_prefix_space && s[0] != ' ') {  /* HF prepends it to every piece reaching ByteLevel */
            if (n + 1 > c->pcap) {
                c->pcap = 2 * (n + 1);
                c->pbuf = tn_xrealloc(c->pbuf, c->pcap);
            }
            c->pbuf[0] = ' ';
            memcpy(c->pbuf + 1, s, n);
            s = c->pbuf, n++;
        }
        if (t->bl_re.re) return isolate(c, &t->bl_re, step + 1, s, n);
    }
    return tk_bpe_word(c, (const uint8_t *)s, n);
}

/* After the normalizer: split out normalized added tokens, pre-tokenize the rest. */
static int normalized_piece(tk_enc *c, const char *s, size_t n) {
    const tk_matcher *m = &c->t->norm_match;
    size_t pos = 0, done = 0, ms, me;
    int32_t id;
    while (tk_match_next(m, s, n, &pos, done, c->parse_special, &ms, &me, &id)) {
        if (ms > done && pipeline(c, 0, s + done, ms - done) != 0) return -1;
        if (tn_ids_push(c->out, id) != 0) return -1;
        done = me;
    }
    return done < n ? pipeline(c, 0, s + done, n - done) : 0;
}

int tk_encode_piece(tk_enc *c, const char *s, size_t n) {
    if (n == 0) return 0;
    if (!c->t->nfc || !maybe_not_nfc((const uint8_t *)s, n)) return normalized_piece(c, s, n);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) {
        free(nfc);
        return tn_err("%s: NFC normalization failed: %s", c->t->path, utf8proc_errmsg(r));
    }
    int rc = normalized_piece(c, (const char *)nfc, (size_t)r);
    free(nfc);
    return rc;
}
