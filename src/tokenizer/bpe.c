/* bpe.c -- one pre-token (raw bytes) -> ids by byte-level BPE, as HF's BPE model: start from one
 * symbol per byte, repeatedly merge the adjacent pair of lowest merge rank (leftmost on ties) until
 * no pair has a merge. With ignore_merges a pre-token that is itself in model.vocab is one token.
 *
 * Short words (almost all) use arrays with the pair ranks cached; long ones (a run of thousands of
 * letters) use a linked list and a binary heap, O(n log n), with the same order of merges. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define TK_SHORT_WORD 128

static void reserve(tk_enc *c, size_t n) {
    if (n <= c->symcap) return;
    size_t cap = c->symcap ? c->symcap : 64;
    while (cap < n) cap *= 2;
    c->sym = tn_xrealloc(c->sym, cap * sizeof *c->sym);
    c->rank = tn_xrealloc(c->rank, cap * sizeof *c->rank);
    c->merged = tn_xrealloc(c->merged, cap * sizeof *c->merged);
    c->prev = tn_xrealloc(c->prev, cap * sizeof *c->prev);
    c->next = tn_xrealloc(c->next, cap * sizeof *c->next);
    c->symcap = cap;
}

/* The initial symbols: one per byte (unknown bytes become unk, fused if fuse_unk). *m = their count,
 * *pure = 0 when unk was used (then sym is not one byte token per byte). */
static int initial_symbols(tk_enc *c, const uint8_t *w, size_t n, size_t *m, int *pure) {
    const tn_tokenizer *t = c->t;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) {
            if (t->unk_id < 0)
                return tn_err("%s: byte 0x%02X of the input has no token in model.vocab and there is no unk_token",
                              t->path, w[i]);
            *pure = 0;
            if (t->fuse_unk && k > 0 && c->sym[k - 1] == t->unk_id) continue;
            id = t->unk_id;
        }
        c->sym[k++] = id;
    }
    *m = k;
    return 0;
}

static inline void pair_rank(const tn_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    const tk_merge *mg = tk_mergemap_get(&t->merges, a, b);
    *rank = mg ? mg->rank : INT32_MAX;
    *merged = mg ? mg->id : -1;
}

/* Leaves the result in sym[0..m) and returns m. w: the word's bytes when sym is one token per byte. */
static size_t merge_short(tk_enc *c, size_t m, const uint8_t *w) {
    const tn_tokenizer *t = c->t;
    int32_t *sym = c->sym, *rank = c->rank, *merged = c->merged;
    for (size_t i = 0; i + 1 < m; i++) {
        if (w) {
            const tk_merge *mg = &t->byte_pair[w[i] << 8 | w[i + 1]];
            rank[i] = mg->rank, merged[i] = mg->id;
        } else {
            pair_rank(t, sym[i], sym[i + 1], &rank[i], &merged[i]);
        }
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = merged[best];
        size_t tail = m - best - 2;  /* drop symbol best+1 and pair best+1 */
        memmove(sym + best + 1, sym + best + 2, tail * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *merged);
        m--;
        if (best > 0) pair_rank(t, sym[best - 1], sym[best], &rank[best - 1], &merged[best - 1]);
        if (best + 1 < m) pair_rank(t, sym[best], sym[best + 1], &rank[best], &merged[best]);
    }
    return m;
}

/* Heap entries pack (rank, position): smaller = merge first. */
static void heap_push(tk_enc *c, size_t *hn, int64_t v) {
    if (*hn == c->heapcap) {
        c->heapcap = c->heapcap ? 2 * c->heapcap : 256;
        c->heap = tn_xrealloc(c->heap, c->heapcap * sizeof *c->heap);
    }
    size_t i = (*hn)++;
    while (i > 0 && c->heap[(i - 1) / 2] > v) {
        c->heap[i] = c->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    c->heap[i] = v;
}

static int64_t heap_pop(tk_enc *c, size_t *hn) {
    int64_t top = c->heap[0], v = c->heap[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t l = 2 * i + 1, s = i;
        int64_t sv = v;
        if (l < n && c->heap[l] < sv) s = l, sv = c->heap[l];
        if (l + 1 < n && c->heap[l + 1] < sv) s = l + 1, sv = c->heap[l + 1];
        if (s == i) break;
        c->heap[i] = c->heap[s];
        i = s;
    }
    if (n) c->heap[i] = v;
    return top;
}

static void push_pair(tk_enc *c, size_t *hn, int32_t pos) {
    int32_t nx = c->next[pos], r, mg;
    if (nx < 0) return;
    pair_rank(c->t, c->sym[pos], c->sym[nx], &r, &mg);
    if (r != INT32_MAX) heap_push(c, hn, (int64_t)r << 32 | (uint32_t)pos);
}

/* Leaves the result in sym[0..k) and returns k. */
static size_t merge_long(tk_enc *c, size_t m) {
    int32_t *sym = c->sym, *prev = c->prev, *next = c->next;
    for (size_t i = 0; i < m; i++) prev[i] = (int32_t)i - 1, next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < m; i++) push_pair(c, &hn, (int32_t)i);
    while (hn) {
        int64_t top = heap_pop(c, &hn);
        int32_t r = (int32_t)(top >> 32), pos = (int32_t)(uint32_t)top, nx = next[pos], cur, mg;
        if (sym[pos] < 0 || nx < 0) continue;  /* stale: symbol merged away or now last */
        pair_rank(c->t, sym[pos], sym[nx], &cur, &mg);
        if (cur != r) continue;                  /* stale: the pair at pos changed */
        sym[pos] = mg;
        sym[nx] = -1;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = pos;
        if (prev[pos] >= 0) push_pair(c, &hn, prev[pos]);
        push_pair(c, &hn, pos);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];  /* k <= i: compacting forward is safe */
    return k;
}

static int bpe_uncached(tk_enc *c, const uint8_t *w, size_t n) {
    const tn_tokenizer *t = c->t;
    if (t->ignore_merges) {  /* the whole pre-token, as its byte-level string, may be a token */
        if (2 * n > c->bcap) {
            c->bcap = 4 * n;
            c->bbuf = tn_xrealloc(c->bbuf, c->bcap);
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(c->bbuf + k, t->bl_utf8[w[i]], 2);
            k += t->bl_len[w[i]];
        }
        int32_t id = tk_strmap_get(t, c->bbuf, k);
        if (id >= 0 && (t->flags[id] & TK_VOCAB)) return tn_ids_push(c->out, id);
    }
    reserve(c, n);
    size_t m = 0;
    int pure = 1;
    if (initial_symbols(c, w, n, &m, &pure) != 0) return -1;
    size_t k = m == 1 ? 1 : m <= TK_SHORT_WORD ? merge_short(c, m, pure ? w : NULL) : merge_long(c, m);
    for (size_t i = 0; i < k; i++)
        if (tn_ids_push(c->out, c->sym[i]) != 0) return -1;
    return 0;
}

int tk_bpe_word(tk_enc *c, const uint8_t *w, size_t n) {
    if (n == 0) return 0;
    if (n > TK_CACHE_WORD) return bpe_uncached(c, w, n);
    uint64_t h = tk_hash(w, n);
    tk_cslot *s = &c->cache[h & (TK_CACHE_SLOTS - 1)];
    if (s->n == n && s->h == h && memcmp(s->w, w, n) == 0) {
        for (int i = 0; i < s->nids; i++)
            if (tn_ids_push(c->out, s->ids[i]) != 0) return -1;
        return 0;
    }
    size_t n0 = c->out->n;
    if (bpe_uncached(c, w, n) != 0) return -1;
    size_t k = c->out->n - n0;
    if (k <= TK_CACHE_IDS) {
        s->h = h, s->n = (uint8_t)n, s->nids = (uint8_t)k;
        memcpy(s->w, w, n);
        memcpy(s->ids, c->out->ids + n0, k * sizeof *s->ids);
    }
    return 0;
}
