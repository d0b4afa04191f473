/* tokenizer.c -- the public calls: encode (UTF-8 check, raw added tokens, then pretokenize.c per
 * piece), decode (ByteLevel decoder + lossy UTF-8), id/token lookups, tn_ids. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int tn_ids_push(tn_ids *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 256;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return tn_err("tokenizer: out of memory for %zu ids", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

void tn_ids_free(tn_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

void tk_enc_free(tk_enc *c) {
    if (!c) return;
    pcre2_match_data_free(c->md);
    pcre2_match_context_free(c->mctx);
    pcre2_jit_stack_free(c->jit_stack);
    free(c->pbuf), free(c->bbuf);
    free(c->sym), free(c->rank), free(c->merged), free(c->prev), free(c->next), free(c->heap);
    free(c->cache);
    free(c);
}

/* A scratch state from the pool, or a new one. NULL + tn_err when PCRE2 cannot allocate. */
static tk_enc *enc_get(const tn_tokenizer *t) {
    tn_tokenizer *mt = (tn_tokenizer *)t;  /* the pool is the one mutable part, guarded by its lock */
    tk_enc *c = NULL;
    pthread_mutex_lock(&mt->pool_lock);
    if (mt->npool > 0) c = mt->pool[--mt->npool];
    pthread_mutex_unlock(&mt->pool_lock);
    if (c) return c;
    c = tn_xcalloc(1, sizeof *c);
    c->t = t;
    c->md = pcre2_match_data_create(t->max_pairs, NULL);
    c->mctx = pcre2_match_context_create(NULL);
    c->cache = tn_xcalloc(TK_CACHE_SLOTS, sizeof *c->cache);
    if (!c->md || !c->mctx) {
        tk_enc_free(c);
        tn_err("tokenizer: out of memory for regex match data");
        return NULL;
    }
    return c;
}

static void enc_put(const tn_tokenizer *t, tk_enc *c) {
    tn_tokenizer *mt = (tn_tokenizer *)t;
    c->out = NULL;
    pthread_mutex_lock(&mt->pool_lock);
    if (mt->npool == mt->pool_cap) {
        mt->pool_cap = mt->pool_cap ? 2 * mt->pool_cap : 4;
        mt->pool = tn_xrealloc(mt->pool, (size_t)mt->pool_cap * sizeof *mt->pool);
    }
    mt->pool[mt->npool++] = c;
    pthread_mutex_unlock(&mt->pool_lock);
}

int tn_tokenizer_encode(const tn_tokenizer *t, const char *text, size_t len, int parse_special, tn_ids *out) {
    if (len == 0) return 0;
    size_t bad;
    if (tk_utf8_check((const uint8_t *)text, len, &bad) != 0)
        return tn_err("%s: encode: input is not valid UTF-8 at byte %zu", t->path, bad);
    tk_enc *c = enc_get(t);
    if (!c) return -1;
    c->out = out;
    c->parse_special = parse_special;
    size_t n0 = out->n, pos = 0, done = 0, ms, me;
    int32_t id;
    int rc = 0;
    while (rc == 0 && tk_match_next(&t->raw_match, text, len, &pos, done, parse_special, &ms, &me, &id)) {
        if (ms > done) rc = tk_encode_piece(c, text + done, ms - done);
        if (rc == 0) rc = tn_ids_push(out, id);
        done = me;
    }
    if (rc == 0 && done < len) rc = tk_encode_piece(c, text + done, len - done);
    enc_put(t, c);
    if (rc != 0) out->n = n0;  /* all or nothing */
    return rc;
}

char *tn_tokenizer_decode(const tn_tokenizer *t, const int32_t *ids, size_t n, int skip_special) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size || !t->flags[id]) {
            free(buf);
            tn_err("%s: decode: id %d at position %zu has no token (vocabulary size %d)", t->path, id, i, t->vocab_size);
            return NULL;
        }
        if (skip_special && (t->flags[id] & TK_SPECIAL)) continue;
        tk_bytelevel_token_bytes(t, t->arena + t->str_off[id], t->str_len[id], &buf, &len, &cap);
    }
    char *s = tk_utf8_lossy(buf ? buf : "", len);
    free(buf);
    return s;
}

int32_t tn_tokenizer_token_to_id(const tn_tokenizer *t, const char *token) {
    return tk_strmap_get(t, token, strlen(token));
}

const char *tn_tokenizer_id_to_token(const tn_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size || !t->flags[id]) return NULL;
    return t->arena + t->str_off[id];
}

int32_t tn_tokenizer_vocab_size(const tn_tokenizer *t) { return t->vocab_size; }
