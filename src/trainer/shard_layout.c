/* shard_layout.c -- see shard_layout.h. */
#include "trainer/shard_layout.h"

#include <stdlib.h>

#include "comm/comm.h"
#include "core/core.h"

struct tn_shard_layout {
    int size, balanced, n_units;
    size_t *bound; /* [n_units + 1] unit u = [bound[u], bound[u + 1]) */
};

static void push(tn_shard_layout *l, size_t *cap_units, size_t end) {
    if ((size_t)l->n_units + 1 >= *cap_units) {
        *cap_units *= 2;
        l->bound = tn_xrealloc(l->bound, *cap_units * sizeof *l->bound);
    }
    l->bound[++l->n_units] = end;
}

/* [lo, hi) as equal parts of at most cap floats. */
static void cut_even(tn_shard_layout *l, size_t *cap_units, size_t lo, size_t hi, size_t cap) {
    size_t parts = (hi - lo + cap - 1) / cap;
    for (size_t k = 0; k < parts; k++) {
        size_t off, len;
        tn_comm_slice(hi - lo, (int)parts, (int)k, &off, &len);
        push(l, cap_units, lo + off + len);
    }
}

/* The groups follow each other in slab order (model.h's frontiers), the last ending at n_trainable. Each is cut
 * into equal parts; with pages, the whole pages inside a group into units of N x j pages first (every chunk j
 * whole pages), only its ragged ends (and fewer than N x j pages left over) into equal parts as without. */
static void cut_groups(tn_shard_layout *l, const tn_model *m, size_t cap, size_t page) {
    size_t span = (size_t)l->size * page, cap_units = 64;
    size_t whole = span && span <= 4 * cap ? span * (cap / span > 1 ? cap / span : 1) : 0;
    l->bound = tn_xmalloc(cap_units * sizeof *l->bound);
    l->bound[0] = 0;
    for (int g = -1; g <= m->L; g++) {
        size_t lo = l->bound[l->n_units], from, hi; /* from the last cut: the units tile the slab whatever */
        tn_model_group_range(m, g, &from, &hi);  /* lies before the first group */
        if (hi <= lo) continue;
        size_t a = whole ? (lo + page - 1) / page * page : hi, at = a;
        if (a >= hi || hi - a < span) { /* no unit of whole pages fits */
            cut_even(l, &cap_units, lo, hi, cap);
            continue;
        }
        if (a > lo) cut_even(l, &cap_units, lo, a, cap);
        for (size_t step = whole; step >= span; step = step > span ? span : 0)
            while (hi - at >= step) push(l, &cap_units, at += step);
        if (hi > at) cut_even(l, &cap_units, at, hi, cap);
    }
}

tn_shard_layout *tn_shard_layout_create(const tn_model *m, int size, int balanced, size_t cap, size_t page) {
    tn_shard_layout *l = tn_xcalloc(1, sizeof *l);
    l->size = size > 0 ? size : 1, l->balanced = balanced;
    if (balanced && m->n_trainable > 0) {
        cut_groups(l, m, cap ? cap : 1, page);
    } else {
        l->bound = tn_xmalloc(2 * sizeof *l->bound);
        l->bound[0] = 0, l->bound[1] = m->n_trainable, l->n_units = m->n_trainable > 0;
    }
    return l;
}

void tn_shard_layout_free(tn_shard_layout *l) {
    if (!l) return;
    free(l->bound);
    free(l);
}

int tn_shard_layout_balanced(const tn_shard_layout *l) { return l->balanced; }
int tn_shard_layout_units(const tn_shard_layout *l) { return l->n_units; }

void tn_shard_layout_unit(const tn_shard_layout *l, int u, size_t *lo, size_t *hi) {
    *lo = l->bound[u], *hi = l->bound[u + 1];
}

int tn_shard_layout_unit_of(const tn_shard_layout *l, size_t pos) {
    int a = 0, b = l->n_units - 1; /* the last unit whose start is <= pos */
    while (a < b) {
        int mid = (a + b + 1) / 2;
        if (l->bound[mid] <= pos) a = mid;
        else b = mid - 1;
    }
    return a;
}

void tn_shard_layout_chunk(const tn_shard_layout *l, int u, int s, size_t *lo, size_t *n) {
    size_t off;
    tn_comm_slice(l->bound[u + 1] - l->bound[u], l->size, s, &off, n);
    *lo = l->bound[u] + off;
}

int tn_shard_layout_spans(const tn_shard_layout *l, int s, tn_span *out) {
    int k = 0;
    for (int u = 0; u < l->n_units; u++) {
        size_t lo, n;
        tn_shard_layout_chunk(l, u, s, &lo, &n);
        if (!n) continue;
        if (out) out[k] = (tn_span){lo, n};
        k++;
    }
    return k;
}

size_t tn_span_total(const tn_span *sp, int k) {
    size_t t = 0;
    for (int i = 0; i < k; i++) t += sp[i].n;
    return t;
}
