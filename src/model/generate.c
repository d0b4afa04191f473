/* generate.c -- the decoding engine over a KV cache (see generate.h), and the full-recompute greedy reference. */
#include "model/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct {
    int32_t *ids;            /* prompt then generated tokens; [0, kv len) are cached */
    int n, cap;
    int prompt_len, reused, running;
    tn_sampling sp;
    int32_t *stop;
    int n_stop;
    tn_rng rng;
    const tn_mm_batch *mm;   /* images of the prompt not prefilled yet (borrowed), NULL: none */
} slot_state;

struct tn_gen {
    tn_model *m;
    tn_kv *kv;
    int n_slots;
    slot_state *slot;
    tn_kv_seg *segs;
    int *seg_slot;
    float *logits;           /* [n_slots, V] */
    tn_token_sampler *sampler;
    /* the step's images, concatenated over the prefilling segments that have some */
    int32_t *grid, *row;
    float *pix;
    size_t pix_cap;
    int img_cap;
};

tn_gen *tn_gen_create(tn_model *m, int n_slots, int ctx) {
    tn_kv *kv = tn_kv_create(m, n_slots, ctx);
    if (!kv) return NULL;
    tn_gen *g = tn_xcalloc(1, sizeof *g);
    g->m = m, g->kv = kv, g->n_slots = n_slots;
    g->slot = tn_xcalloc((size_t)n_slots, sizeof *g->slot);
    g->segs = tn_xcalloc((size_t)n_slots, sizeof *g->segs);
    g->seg_slot = tn_xcalloc((size_t)n_slots, sizeof *g->seg_slot);
    g->logits = tn_xmalloc((size_t)n_slots * m->V * sizeof *g->logits);
    g->sampler = tn_token_sampler_create(m->V);
    return g;
}

void tn_gen_free(tn_gen *g) {
    if (!g) return;
    for (int s = 0; s < g->n_slots; s++) free(g->slot[s].ids), free(g->slot[s].stop);
    tn_kv_free(g->kv);
    tn_token_sampler_free(g->sampler);
    free(g->slot), free(g->segs), free(g->seg_slot), free(g->logits);
    free(g->grid), free(g->row), free(g->pix);
    free(g);
}

int tn_gen_ctx(const tn_gen *g) { return tn_kv_ctx(g->kv); }
int tn_gen_slots(const tn_gen *g) { return g->n_slots; }
int tn_gen_running(const tn_gen *g, int slot) { return g->slot[slot].running; }
int tn_gen_reused(const tn_gen *g, int slot) { return g->slot[slot].reused; }
size_t tn_gen_cache_resident(const tn_gen *g) { return tn_kv_resident(g->kv); }

int tn_gen_n_running(const tn_gen *g) {
    int n = 0;
    for (int s = 0; s < g->n_slots; s++) n += g->slot[s].running;
    return n;
}

const int32_t *tn_gen_output(const tn_gen *g, int slot, int *n) {
    const slot_state *st = &g->slot[slot];
    *n = st->n - st->prompt_len;
    return st->ids + st->prompt_len;
}

static void push(slot_state *st, int32_t id) {
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 256;
        st->ids = tn_xrealloc(st->ids, (size_t)st->cap * sizeof *st->ids);
    }
    st->ids[st->n++] = id;
}

int tn_gen_start(tn_gen *g, int slot, const int32_t *prompt, int n, const tn_sampling *sp, const int32_t *stop,
                 int n_stop) {
    int ctx = tn_kv_ctx(g->kv);
    if (slot < 0 || slot >= g->n_slots) return tn_err("generation: slot %d of %d", slot, g->n_slots);
    if (n < 1) return tn_err("generation: the prompt is empty");
    if (n > ctx - 1)
        return tn_err("the prompt has %d tokens: the context holds %d (prompt and answer), so at most %d", n, ctx, ctx - 1);
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= g->m->V)
            return tn_err("generation: token id %d outside the model's vocabulary [0, %d)", prompt[i], g->m->V);
    slot_state *st = &g->slot[slot];
    /* keep the cached tokens that begin this prompt; at least the last prompt token is computed (its logits).
     * With images nothing is kept (cached <|image_pad|> rows may hold another image's features). */
    int cached = st->mm ? 0 : tn_kv_len(g->kv, slot), same = 0, vl = g->m->cfg.vis.kind != TN_VL_NONE;
    while (same < cached && same < n - 1 && st->ids[same] == prompt[same]) same++;
    /* M-RoPE: a cached image shifts the positions of every later token (kv_forward.h: the slot's delta), so a cut
     * before one would leave that shift on the new tokens: then nothing is kept */
    for (int i = same; vl && i < cached; i++)
        if (st->ids[i] == g->m->cfg.vis.image_token_id) {
            same = 0;
            break;
        }
    for (int i = same; vl && !st->mm && i < n; i++)
        if (prompt[i] == g->m->cfg.vis.image_token_id)
            return tn_err("generation: the prompt has <|image_pad|> tokens that are not cached, and no images were given");
    tn_kv_truncate(g->kv, slot, same);
    st->n = 0;
    for (int i = 0; i < n; i++) push(st, prompt[i]);
    st->prompt_len = n, st->reused = same, st->running = 1;
    st->sp = *sp;
    free(st->stop);
    st->stop = tn_xmalloc((size_t)(n_stop > 0 ? n_stop : 1) * sizeof *st->stop);
    if (n_stop > 0) memcpy(st->stop, stop, (size_t)n_stop * sizeof *stop);
    st->n_stop = n_stop > 0 ? n_stop : 0;
    tn_rng_seed(&st->rng, sp->seed);
    return 0;
}

int tn_gen_set_images(tn_gen *g, int slot, const tn_mm_batch *mm) {
    if (slot < 0 || slot >= g->n_slots) return tn_err("generation: slot %d of %d", slot, g->n_slots);
    if (mm && mm->n_images && g->m->cfg.vis.kind == TN_VL_NONE)
        return tn_err("generation: images given, but %s takes none", g->m->cfg.model_type);
    g->slot[slot].mm = mm && mm->n_images ? mm : NULL;
    return 0;
}

/* The images of the segments that prefill with some, one batch (row = segment index); NULL when none. */
static const tn_mm_batch *step_images(tn_gen *g, int n_segs, tn_mm_batch *mm) {
    int n = 0;
    size_t pix = 0;
    for (int i = 0; i < n_segs; i++) {
        const tn_mm_batch *b = g->slot[g->seg_slot[i]].mm;
        if (!b) continue;
        n += b->n_images;
        for (int k = 0; k < b->n_images; k++)
            pix += (size_t)b->grid_thw[3 * k] * b->grid_thw[3 * k + 1] * b->grid_thw[3 * k + 2] * b->patch_dim;
    }
    if (!n) return NULL;
    if (n > g->img_cap) {
        g->grid = tn_xrealloc(g->grid, (size_t)3 * n * sizeof *g->grid), g->row = tn_xrealloc(g->row, (size_t)n * sizeof *g->row);
        g->img_cap = n;
    }
    if (pix > g->pix_cap) g->pix = tn_xrealloc(g->pix, pix * sizeof *g->pix), g->pix_cap = pix;
    *mm = (tn_mm_batch){.n_images = n, .grid_thw = g->grid, .row = g->row, .pixel_values = g->pix};
    n = 0, pix = 0;
    for (int i = 0; i < n_segs; i++) {
        const tn_mm_batch *b = g->slot[g->seg_slot[i]].mm;
        if (!b) continue;
        size_t np = 0;
        for (int k = 0; k < b->n_images; k++, n++) {
            memcpy(g->grid + 3 * n, b->grid_thw + 3 * k, 3 * sizeof *g->grid);
            g->row[n] = i;
            np += (size_t)b->grid_thw[3 * k] * b->grid_thw[3 * k + 1] * b->grid_thw[3 * k + 2] * b->patch_dim;
        }
        memcpy(g->pix + pix, b->pixel_values, np * sizeof *g->pix);
        pix += np, mm->patch_dim = b->patch_dim;
    }
    return mm;
}

int tn_gen_step(tn_gen *g, tn_gen_event *out) {
    int n_segs = 0;
    for (int s = 0; s < g->n_slots; s++) {
        slot_state *st = &g->slot[s];
        if (!st->running) continue;
        int cached = tn_kv_len(g->kv, s);
        g->segs[n_segs] = (tn_kv_seg){.slot = s, .n = st->n - cached, .ids = st->ids + cached};
        g->seg_slot[n_segs++] = s;
    }
    if (!n_segs) return 0;
    tn_mm_batch mm;
    if (tn_kv_forward_mm(g->m, g->kv, g->segs, n_segs, step_images(g, n_segs, &mm), g->logits) != 0) return -1;
    for (int i = 0; i < n_segs; i++) g->slot[g->seg_slot[i]].mm = NULL; /* prefilled: the images are in the cache */
    int ctx = tn_kv_ctx(g->kv), V = g->m->V;
    for (int i = 0; i < n_segs; i++) {
        slot_state *st = &g->slot[g->seg_slot[i]];
        int prefilled = st->n == st->prompt_len;
        int32_t t = tn_sample(g->sampler, g->logits + (size_t)i * V, V, &st->sp, st->ids, st->n, &st->rng);
        push(st, t);
        tn_finish f = TN_FINISH_NONE;
        for (int e = 0; e < st->n_stop; e++)
            if (t == st->stop[e]) f = TN_FINISH_STOP;
        if (f == TN_FINISH_NONE && (st->n - st->prompt_len >= st->sp.max_new || st->n >= ctx)) f = TN_FINISH_LENGTH;
        if (f != TN_FINISH_NONE) st->running = 0;
        out[i] = (tn_gen_event){.slot = g->seg_slot[i], .token = t, .finish = f, .prefilled = prefilled};
    }
    return n_segs;
}

void tn_gen_cancel(tn_gen *g, int slot) { g->slot[slot].running = 0, g->slot[slot].mm = NULL; }

void tn_gen_release(tn_gen *g, int slot) {
    slot_state *st = &g->slot[slot];
    st->running = 0, st->n = 0, st->prompt_len = 0, st->mm = NULL;
    tn_kv_release(g->kv, slot);
}

int tn_generate_greedy(tn_model *m, tn_acts *a, int32_t *ids, int *lens, int B, int S, int max_new, int eos,
                       int pad) {
    float *logits = tn_xmalloc((size_t)B * S * m->V * sizeof *logits);
    int *done = tn_xcalloc((size_t)B, sizeof *done);
    for (int b = 0; b < B; b++)
        for (int s = lens[b]; s < S; s++) ids[(size_t)b * S + s] = pad;
    int steps = 0;
    for (; steps < max_new; steps++) {
        int active = 0;
        for (int b = 0; b < B; b++) active += !done[b] && lens[b] < S;
        if (!active) break;
        tn_model_logits(m, a, ids, B, S, logits);
        for (int b = 0; b < B; b++) {
            if (done[b] || lens[b] >= S) continue;
            const float *row = logits + ((size_t)b * S + lens[b] - 1) * m->V;
            int best = 0;
            for (int v = 1; v < m->V; v++) best = row[v] > row[best] ? v : best;
            ids[(size_t)b * S + lens[b]++] = best;
            done[b] = best == eos;
        }
    }
    free(logits);
    free(done);
    return steps;
}
