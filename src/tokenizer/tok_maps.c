/* tok_maps.c -- the tokenizer's two hash tables: token string -> id, and merge pair -> (rank, id).
 * Both are open addressing with linear probing at load factor <= 1/2, sized once at load. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

uint64_t tk_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8, n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c <<= 1;
    return c;
}

int tk_strmap_init(tk_strmap *m, size_t n) {
    size_t cap = pow2_at_least(n);
    m->id = malloc(cap * sizeof *m->id);
    m->hash = malloc(cap * sizeof *m->hash);
    if (!m->id || !m->hash) {
        free(m->id), free(m->hash);
        m->id = NULL, m->hash = NULL;
        return tn_err("tokenizer: out of memory for a %zu-entry vocabulary map", n);
    }
    memset(m->id, 0xff, cap * sizeof *m->id);
    m->mask = cap - 1;
    return 0;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->id), free(m->hash);
    m->id = NULL, m->hash = NULL;
}

int32_t tk_strmap_get(const tn_tokenizer *t, const char *s, size_t n) {
    const tk_strmap *m = &t->map;
    uint64_t h = tk_hash(s, n);
    uint32_t h32 = (uint32_t)h;
    for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->id[i];
        if (id < 0) return -1;
        if (m->hash[i] == h32 && t->str_len[id] == n && memcmp(t->arena + t->str_off[id], s, n) == 0) return id;
    }
}

int32_t tk_strmap_put(tn_tokenizer *t, int32_t id) {
    tk_strmap *m = &t->map;
    const char *s = t->arena + t->str_off[id];
    size_t n = t->str_len[id];
    uint64_t h = tk_hash(s, n);
    uint32_t h32 = (uint32_t)h;
    for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        int32_t o = m->id[i];
        if (o < 0) {
            m->id[i] = id;
            m->hash[i] = h32;
            return -1;
        }
        if (m->hash[i] == h32 && t->str_len[o] == n && memcmp(t->arena + t->str_off[o], s, n) == 0) return o;
    }
}

int tk_mergemap_init(tk_mergemap *m, size_t n) {
    size_t cap = pow2_at_least(n);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return tn_err("tokenizer: out of memory for %zu merges", n);
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    m->mask = cap - 1;
    int bits = 0;
    while (((size_t)1 << bits) < cap) bits++;
    m->shift = 64 - bits;
    return 0;
}

void tk_mergemap_free(tk_mergemap *m) {
    free(m->slot);
    m->slot = NULL;
}

static inline size_t merge_slot(const tk_mergemap *m, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

void tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = merge_slot(m, key);; i = (i + 1) & m->mask) {
        if (m->slot[i].key == key || m->slot[i].key == ~0ull) {
            m->slot[i] = (tk_merge){key, rank, id};
            return;
        }
    }
}

const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = merge_slot(m, key);; i = (i + 1) & m->mask) {
        if (m->slot[i].key == key) return &m->slot[i];
        if (m->slot[i].key == ~0ull) return NULL;
    }
}
