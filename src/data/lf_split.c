/* lf_split.c -- val_size as LLaMA-Factory does it: HF Dataset.train_test_split(test_size, seed) on the
 * aligned rows, before tokenization. HF draws numpy.random.default_rng(seed).permutation(n) (SeedSequence
 * -> PCG64 -> Fisher-Yates with numpy's masked rejection sampling); test = perm[:n_test],
 * train = perm[n_test:], both in permutation order. This file reproduces those bits. */
#include <math.h>
#include <stdint.h>

#include "core/core.h"
#include "data/lf_internal.h"

/* ---- numpy SeedSequence (bit_generator.pyx), pool of 4 uint32 words ---- */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u

static uint32_t hashmix(uint32_t v, uint32_t *hc) {
    v ^= *hc;
    *hc *= SS_MULT_A;
    v *= *hc;
    v ^= v >> 16;
    return v;
}
static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

static void seed_sequence_state(uint64_t seed, uint64_t out[4]) {
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int nent = seed >> 32 ? 2 : 1;  /* the int as little-endian 32-bit words (0 -> [0]) */
    uint32_t pool[4], hc = SS_INIT_A;
    for (int i = 0; i < 4; i++) pool[i] = hashmix(i < nent ? ent[i] : 0, &hc);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    for (int s = 4; s < nent; s++)
        for (int d = 0; d < 4; d++) pool[d] = mix(pool[d], hashmix(ent[s], &hc));
    uint32_t words[8];
    hc = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4];
        v ^= hc;
        hc *= SS_MULT_B;
        v *= hc;
        v ^= v >> 16;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
}

/* ---- PCG64 (XSL-RR 128/64) ---- */
__extension__ typedef unsigned __int128 u128;
typedef struct {
    u128 state, inc;
    int has32;
    uint32_t u32;
} pcg64;

static const u128 k_pcg_mult = ((u128)0x2360ED051FC65DA4ull << 64) | 0x4385DF649FCCF645ull;

static uint64_t pcg_next64(pcg64 *g) {
    g->state = g->state * k_pcg_mult + g->inc;
    uint64_t hi = (uint64_t)(g->state >> 64), lo = (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(pcg64 *g) {
    if (g->has32) {
        g->has32 = 0;
        return g->u32;
    }
    uint64_t v = pcg_next64(g);
    g->has32 = 1;
    g->u32 = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

static void pcg_seed(pcg64 *g, uint64_t seed) {
    uint64_t s[4];
    seed_sequence_state(seed, s);
    u128 initstate = (u128)s[0] << 64 | s[1], initseq = (u128)s[2] << 64 | s[3];
    g->state = 0;
    g->inc = initseq << 1 | 1;
    g->state = g->state * k_pcg_mult + g->inc;
    g->state += initstate;
    g->state = g->state * k_pcg_mult + g->inc;
    g->has32 = 0, g->u32 = 0;
}

/* numpy's random_interval: uniform in [0, max] by masked rejection. */
static uint64_t random_interval(pcg64 *g, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1, mask |= mask >> 2, mask |= mask >> 4, mask |= mask >> 8, mask |= mask >> 16, mask |= mask >> 32;
    if (max <= 0xffffffffull) {
        while ((v = (pcg_next32(g) & mask)) > max) {}
    } else {
        while ((v = (pcg_next64(g) & mask)) > max) {}
    }
    return v;
}

void lf_np_permutation(uint64_t seed, int64_t n, int64_t *out) {
    pcg64 g;
    pcg_seed(&g, seed);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)random_interval(&g, (uint64_t)i);
        int64_t t = out[i];
        out[i] = out[j], out[j] = t;
    }
}

int lf_train_test_split(int64_t n, double val_size, uint64_t seed, int64_t *perm, int64_t *n_test) {
    int64_t nt;
    if (!(val_size > 0)) return tn_err("val_size must be > 0 to split");
    if (val_size < 1) nt = (int64_t)ceil(val_size * (double)n);  /* HF: ceil(test_size * n_samples) */
    else nt = (int64_t)val_size;                                   /* LF: int(val_size) */
    if (nt >= n || nt <= 0 || n - nt <= 0)
        return tn_err("val_size %g: with %lld examples the %s set would be empty", val_size, (long long)n,
                      nt <= 0 ? "validation" : "training");
    lf_np_permutation(seed, n, perm);
    *n_test = nt;
    return 0;
}
