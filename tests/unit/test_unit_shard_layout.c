/* test_unit_shard_layout -- ZeRO's shard layouts (trainer/shard_layout.h) on a small qwen2 model with tied
 * embeddings, at 1 to 4 ranks (3 divides neither the slab nor most units), and the two things that follow a
 * balanced shard's scattered chunks:
 *   layout      units tile the slab, never cross a group, stay under the cap; shard s's chunk of a unit is
 *               comm's block s of that unit (tn_comm_slice's rule, written out here), so the owner the
 *               optimizer updates is the rank the reduce-scatter sums into; chunks differ by at most one value;
 *               every value has exactly one owner;
 *   AdamW       each shard's update over its spans equals, bit for bit, the whole-slab update on those values
 *               (weight decay on matrices only, wherever a span cuts a tensor);
 *   checkpoint  moments written as balanced shards at N ranks read back for any layout at any M, and the
 *               other way, equal to the values written;
 *   pages       with a page size (2 MB on the CPU; 64 and 1000 floats here), the units of whole pages start on a
 *               page and hold N x j pages, so every chunk of them is j whole pages; what a group leaves to
 *               ragged units is less than a page plus N x j pages; units stay under the cap, or under 4 x cap
 *               when N pages exceed it; beyond that the layout is the unpaged one; chunks still comm's blocks,
 *               one owner each, and AdamW over the shards and the checkpoints as above. The CPU backend's
 *               large buffers start on a 2 MB boundary, which the page alignment relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/core.h"
#include "model/model.h"
#include "testlib.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"
#include "trainer/shard_layout.h"

#define CAP 700 /* floats: the model's groups (1-5 thousand) are cut into several units */

static tn_span *spans_of(const tn_shard_layout *l, int s, int *k) {
    *k = tn_shard_layout_spans(l, s, NULL);
    tn_span *sp = tn_xmalloc(((size_t)*k + 1) * sizeof *sp);
    tn_shard_layout_spans(l, s, sp);
    return sp;
}

/* The unit [lo, hi) lies inside one group. */
static int inside_a_group(const tn_model *m, size_t lo, size_t hi) {
    for (int g = -1; g <= m->L; g++) {
        size_t a, b;
        tn_model_group_range(m, g, &a, &b);
        if (lo >= a && hi <= b) return 1;
    }
    return 0;
}

/* Unit [lo, hi) is one of whole pages: starts on a page, N x j pages long. */
static int paged(size_t lo, size_t hi, int N, size_t page) {
    return page && lo % page == 0 && (hi - lo) % (page * (size_t)N) == 0;
}

static void test_layout(const tn_model *m, int N, int balanced, size_t page) {
    size_t n = m->n_trainable, span = page * (size_t)N, most_unit = page && span > CAP && span <= 4 * CAP ? span : CAP;
    tn_shard_layout *l = tn_shard_layout_create(m, N, balanced, CAP, page);
    int U = tn_shard_layout_units(l), uneven = 0;
    CHECKF(balanced ? U > m->L + 2 : U == 1, "N %d balanced %d: %d units", N, balanced, U);
    size_t prev = 0;
    for (int u = 0; u < U; u++) {
        size_t lo, hi;
        tn_shard_layout_unit(l, u, &lo, &hi);
        CHECKF(lo == prev && hi > lo, "unit %d [%zu, %zu) after %zu", u, lo, hi, prev);
        CHECKF(!balanced || (hi - lo <= most_unit && inside_a_group(m, lo, hi)), "N %d page %zu: unit %d [%zu, %zu)", N,
               page, u, lo, hi);
        CHECK(tn_shard_layout_unit_of(l, lo) == u && tn_shard_layout_unit_of(l, hi - 1) == u);
        size_t len = hi - lo, q = len / (size_t)N, extra = len % (size_t)N, most = 0, least = len;
        uneven += extra != 0;
        for (int s = 0; s < N; s++) { /* block s of the unit: the first `extra` blocks hold one value more */
            size_t c_lo, c_n, want_n = q + ((size_t)s < extra);
            size_t want_lo = lo + (size_t)s * q + ((size_t)s < extra ? (size_t)s : extra);
            tn_shard_layout_chunk(l, u, s, &c_lo, &c_n);
            CHECKF(c_lo == want_lo && c_n == want_n, "N %d unit %d shard %d: chunk [%zu, +%zu), want [%zu, +%zu)", N, u, s,
                   c_lo, c_n, want_lo, want_n);
            CHECK(!paged(lo, hi, N, page) || (c_lo % page == 0 && c_n % page == 0 && c_n > 0));
            most = c_n > most ? c_n : most, least = c_n < least ? c_n : least;
        }
        CHECK(most - least <= 1);
        prev = hi;
    }
    CHECKF(prev == n, "units end at %zu of %zu", prev, n);
    if (balanced && N == 3) CHECKF(uneven > 0, "no unit that 3 does not divide: the uneven case is untested");
    unsigned char *owners = tn_xcalloc(n, 1);
    for (int s = 0; s < N; s++) {
        int k;
        tn_span *sp = spans_of(l, s, &k);
        CHECK(k == (balanced ? U : 1) || N > 1);
        for (int i = 0; i < k; i++)
            for (size_t j = sp[i].lo; j < sp[i].lo + sp[i].n && j < n; j++) owners[j]++;
        free(sp);
    }
    size_t bad = 0;
    for (size_t j = 0; j < n; j++) bad += owners[j] != 1;
    CHECKF(bad == 0, "N %d balanced %d: %zu values without exactly one owner", N, balanced, bad);
    free(owners);
    tn_shard_layout_free(l);
}

static void fill(float *x, size_t n, unsigned seed, float scale) {
    tn_rng r;
    tn_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)(2 * tn_rng_uniform(&r) - 1);
}

/* Three AdamW steps (weight decay 0.1) of each balanced shard of N against the whole slab's. */
static void test_adamw(tn_model *m, int N, size_t page) {
    size_t n = m->n_trainable;
    float *p0 = tn_xalloc_floats(n), *g = tn_xalloc_floats(n), *want = tn_xalloc_floats(n), *got = tn_xalloc_floats(n);
    fill(p0, n, 11, 0.5f), fill(g, n, 12, 0.01f);
    tn_adamw_hparams h = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    tn_adamw *whole = tn_adamw_create(m);
    memcpy(m->slab, p0, n * sizeof *p0), memcpy(m->grad, g, n * sizeof *g);
    for (int t = 0; t < 3; t++) tn_adamw_step(whole, m, &h, 1e-2);
    memcpy(want, m->slab, n * sizeof *want);
    tn_adamw_free(whole);
    tn_shard_layout *l = tn_shard_layout_create(m, N, 1, CAP, page);
    size_t differ = 0;
    for (int s = 0; s < N; s++) {
        int k;
        tn_span *sp = spans_of(l, s, &k);
        tn_adamw *o = tn_adamw_create_spans(m, sp, k);
        memcpy(m->slab, p0, n * sizeof *p0);
        for (int t = 0; t < 3; t++) tn_adamw_step(o, m, &h, 1e-2);
        memcpy(got, m->slab, n * sizeof *got);
        for (int i = 0; i < k; i++)
            for (size_t j = sp[i].lo; j < sp[i].lo + sp[i].n; j++) differ += memcmp(&got[j], &want[j], sizeof *got) != 0;
        tn_adamw_free(o);
        free(sp);
    }
    CHECKF(differ == 0, "N %d page %zu: %zu values updated differently from the whole-slab AdamW", N, page, differ);
    tn_shard_layout_free(l);
    free(p0), free(g), free(want), free(got);
}

/* Moments written as N shards of one layout, read back as every shard of M of the other. */
static void test_checkpoint(const tn_model *m, int N, int bal_w, int M, int bal_r, size_t page) {
    size_t n = m->n_trainable;
    float *mm = tn_xalloc_floats(n), *vv = tn_xalloc_floats(n);
    fill(mm, n, 21, 1.0f), fill(vv, n, 22, 1.0f);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ckpt-%d%c-%d%c-%zu", tl_tmpdir(), N, bal_w ? 'b' : 'c', M, bal_r ? 'b' : 'c', page);
    CHECK(tn_mkdirs(dir) == 0);
    tn_shard_layout *w = tn_shard_layout_create(m, N, bal_w, CAP, page), *r = tn_shard_layout_create(m, M, bal_r, CAP, 0);
    for (int s = 0; s < N; s++) {
        int k;
        tn_span *sp = spans_of(w, s, &k);
        size_t t = tn_span_total(sp, k), at = 0;
        float *pm = tn_xalloc_floats(t + 1), *pv = tn_xalloc_floats(t + 1);
        for (int i = 0; i < k; at += sp[i].n, i++)
            memcpy(pm + at, mm + sp[i].lo, sp[i].n * sizeof *pm), memcpy(pv + at, vv + sp[i].lo, sp[i].n * sizeof *pv);
        CHECKF(tn_checkpoint_write_moments(dir, s, N, n, sp, k, pm, pv) == 0, "%s", tn_errmsg());
        free(pm), free(pv), free(sp);
    }
    size_t wrong = 0;
    for (int s = 0; s < M; s++) {
        int k;
        tn_span *sp = spans_of(r, s, &k);
        size_t t = tn_span_total(sp, k), at = 0;
        float *pm = tn_xalloc_floats(t + 1), *pv = tn_xalloc_floats(t + 1);
        CHECKF(tn_checkpoint_read_moments(dir, n, sp, k, pm, pv) == 0, "%s", tn_errmsg());
        for (int i = 0; i < k; at += sp[i].n, i++)
            wrong += memcmp(pm + at, mm + sp[i].lo, sp[i].n * sizeof *pm) != 0 ||
                     memcmp(pv + at, vv + sp[i].lo, sp[i].n * sizeof *pv) != 0;
        free(pm), free(pv), free(sp);
    }
    CHECKF(wrong == 0, "%d %s shards read as %d %s: %zu spans wrong", N, bal_w ? "balanced" : "contiguous", M,
           bal_r ? "balanced" : "contiguous", wrong);
    /* a model of another size is refused, naming the file */
    int k;
    tn_span *sp = spans_of(r, 0, &k);
    float *pm = tn_xalloc_floats(n), *pv = tn_xalloc_floats(n);
    CHECK(tn_checkpoint_read_moments(dir, n + 1, sp, k, pm, pv) != 0 && strstr(tn_errmsg(), "optimizer"));
    free(pm), free(pv), free(sp);
    tn_shard_layout_free(w), tn_shard_layout_free(r);
    free(mm), free(vv);
}

/* What a group leaves outside units of whole pages; past 4 x cap for N pages, the layout without pages. */
static void test_pages(const tn_model *m, int N, size_t page) {
    size_t span = page * (size_t)N;
    tn_shard_layout *l = tn_shard_layout_create(m, N, 1, CAP, page), *plain = tn_shard_layout_create(m, N, 1, CAP, 0);
    int U = tn_shard_layout_units(l), whole = 0, differ = U != tn_shard_layout_units(plain);
    for (int u = 0; u < U && !differ; u++) {
        size_t lo, hi, plo, phi;
        tn_shard_layout_unit(l, u, &lo, &hi), tn_shard_layout_unit(plain, u, &plo, &phi);
        differ = lo != plo || hi != phi;
    }
    if (span > 4 * CAP) CHECKF(!differ, "N %d page %zu: N pages exceed 4 x cap, yet the units moved", N, page);
    for (int g = -1; g <= m->L && span <= 4 * CAP; g++) {
        size_t a, b, ragged = 0;
        tn_model_group_range(m, g, &a, &b);
        for (int u = 0; u < U; u++) {
            size_t lo, hi;
            tn_shard_layout_unit(l, u, &lo, &hi);
            if (lo < a || hi > b) continue;
            if (paged(lo, hi, N, page)) whole++;
            else ragged += hi - lo;
        }
        CHECKF(ragged < page + span, "N %d page %zu: group %d [%zu, %zu) leaves %zu values to ragged units", N, page, g, a,
               b, ragged);
    }
    CHECKF(span > 4 * CAP || whole > 0, "N %d page %zu: no unit of whole pages, the case is untested", N, page);
    tn_shard_layout_free(l), tn_shard_layout_free(plain);
}

/* ZeRO's page alignment assumes the slabs start on a 2 MB boundary: the CPU backend's large buffers do. */
static void test_cpu_alignment(void) {
    const tn_backend *be = tn_backend_cpu();
    size_t sizes[] = {TN_SHARD_PAGE_FLOATS, 3 * TN_SHARD_PAGE_FLOATS + 5, 1u << 16};
    for (int i = 0; i < 3; i++) {
        float *p = be->alloc(sizes[i]);
        CHECKF(sizes[i] < TN_SHARD_PAGE_FLOATS || (uintptr_t)p % (TN_SHARD_PAGE_FLOATS * sizeof *p) == 0,
               "a buffer of %zu floats at %p: not on a 2 MB boundary", sizes[i], (void *)p);
        p[0] = 1, p[sizes[i] - 1] = 2; /* the whole length is mapped */
        be->free(p);
    }
}

int main(void) {
    tn_model *m = tl_tiny_qwen2();
    CHECKF(m->n_trainable > 4 * CAP, "model too small: %zu trainable floats", m->n_trainable);
    for (int N = 1; N <= 4; N++) test_layout(m, N, 1, 0), test_layout(m, N, 0, 0);
    for (int N = 1; N <= 4; N++) /* 64: units of N x j pages under the cap; 1000: over it at 2, none at 3-4 */
        test_layout(m, N, 1, 64), test_pages(m, N, 64), test_layout(m, N, 1, 1000), test_pages(m, N, 1000);
    for (int N = 1; N <= 3; N++) test_adamw(m, N, 0), test_adamw(m, N, 64);
    test_checkpoint(m, 3, 1, 2, 0, 0);
    test_checkpoint(m, 2, 0, 3, 1, 0);
    test_checkpoint(m, 3, 1, 4, 1, 0);
    test_checkpoint(m, 3, 1, 1, 0, 0);
    test_checkpoint(m, 3, 1, 2, 1, 64); /* paged shards read as unpaged ones */
    test_cpu_alignment();
    tn_model_free(m);
    return tl_done("test_unit_shard_layout");
}
