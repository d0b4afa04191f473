/* test_unit_lora_embed -- LoRA on embed_tokens (lora_target naming embed_tokens) with PEFT's semantics, on a tiny
 * llama built in code (vocab 23, hidden 8, 1 layer), r = 2, alpha = 6 (scale 3), against hand computations in
 * double:
 *   PEFT init: lora_embedding_A zeros (the adapter starts as a no-op), lora_embedding_B N(0, 1);
 *   forward: logits equal those of a plain model whose embedding is E + s (B A)^T, merged here in double;
 *   gradients: with dx the gradient at the embedding output (read as the plain model's embedding gradient, row v =
 *     sum of dx over the positions holding token v), dB = s sum_v dE[v] (x) A[:, v] and dA[:, v] = s B^T dE[v];
 *   tn_model_merge_lora folds the delta into the embedding as PEFT's merge does ((B A)^T scaled);
 *   the adapter folder: base_model.model.model.embed_tokens.lora_embedding_A [r, V] / _B [D, r] (no ".weight", PEFT's
 *     ParameterDict names), target_modules listing embed_tokens, read back equal.
 * Bounds: every value here is a sum of at most 24 fp32 products of O(1) terms: rel L2 <= 24 x 2^-24 ~ 1.5e-6 per
 * step; 1e-5 leaves room for the few chained steps of a forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "testlib.h"

enum { V = 23, D = 8, R = 2, B = 2, S = 6 };
#define ALPHA 6.0
#define SCALE (ALPHA / R)
#define TOL 1e-5

static tn_model_config cfg;
static int32_t ids[B * S], labels[B * S];

static void make_config(void) {
    snprintf(cfg.model_type, sizeof cfg.model_type, "llama");
    cfg.vocab_size = V, cfg.hidden_size = D, cfg.intermediate_size = 12, cfg.num_hidden_layers = 1;
    cfg.num_attention_heads = 2, cfg.num_key_value_heads = 1, cfg.max_position_embeddings = 32;
    cfg.rope_theta = 10000.0, cfg.rms_norm_eps = 1e-6, cfg.initializer_range = 0.4;
    cfg.bos_token_id = cfg.eos_token_id = -1;
    if (!CHECKF(tn_model_config_finish(&cfg, "test") == 0, "%s", tn_errmsg())) exit(1);
    for (int i = 0; i < B * S; i++) ids[i] = labels[i] = (int32_t)((i * 7 + 3) % V);
    ids[4] = ids[1]; /* a token twice: its adapter row gathers two positions' gradients */
    labels[S + 2] = -100;
}

static float *get(const tn_model *m, const char *name) {
    const tn_param *p = tn_model_find(m, name);
    if (!p) tn_die("no tensor %s", name);
    float *h = tn_xmalloc(p->numel * sizeof *h);
    tn_model_get(m, p, h);
    return h;
}

static double rel_l2_f(const float *a, const float *b, size_t n) {
    double *d = tn_xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = b[i];
    double e = tl_rel_l2(a, d, (int64_t)n);
    free(d);
    return e;
}

/* the plain model with the base weights of m and E + s A^T B^T merged in double (A held as A^T [V, r]) */
static tn_model *merged_by_hand(const tn_model *m, const float *At, const float *Bm) {
    tn_model *p = tn_model_create(&cfg, NULL, tn_backend_cpu());
    for (int i = 0; i < p->n_params; i++) {
        float *h = get(m, p->params[i].name);
        if (strcmp(p->params[i].name, "model.embed_tokens.weight") == 0)
            for (int v = 0; v < V; v++)
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int k = 0; k < R; k++) acc += (double)At[v * R + k] * Bm[d * R + k];
                    h[v * D + d] = (float)(h[v * D + d] + SCALE * acc);
                }
        tn_model_set(p, &p->params[i], h);
        free(h);
    }
    return p;
}

static void check_adapter_files(tn_model *m, const float *At, const float *Bm) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/adapter", tl_tmpdir());
    if (!CHECKF(tn_model_save_adapter(m, dir) == 0, "%s", tn_errmsg())) return;
    char *path = tn_path_join(dir, "adapter_model.safetensors");
    st_file f;
    if (CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg())) {
        const st_tensor *a = st_find(&f, "base_model.model.model.embed_tokens.lora_embedding_A");
        const st_tensor *b = st_find(&f, "base_model.model.model.embed_tokens.lora_embedding_B");
        CHECK(a && a->ndim == 2 && a->shape[0] == R && a->shape[1] == V);
        CHECK(b && b->ndim == 2 && b->shape[0] == D && b->shape[1] == R);
        float fa[R * V];
        if (a && st_read_f32(&f, a, fa, R * V) == 0) { /* the file holds A [r, V]: A[k][v] = At[v][k] */
            int bad = 0;
            for (int k = 0; k < R; k++)
                for (int v = 0; v < V; v++) bad += fa[k * V + v] != At[v * R + k];
            CHECKF(bad == 0, "lora_embedding_A in the file is not A [r, V] (%d values differ)", bad);
        }
        st_close(&f);
    }
    char *cfg_text = tn_path_join(dir, "adapter_config.json");
    char *text = tn_read_file(cfg_text, NULL, 1 << 20);
    CHECK(text && strstr(text, "\"embed_tokens\""));
    tn_lora_config lc;
    if (CHECKF(tn_lora_config_load(dir, &lc) == 0, "%s", tn_errmsg())) {
        CHECK(lc.targets == TN_LORA_EMBED && lc.r == R);
        tn_model *back = tn_model_create(&cfg, &lc, tn_backend_cpu());
        CHECKF(tn_model_load_adapter(back, dir) == 0, "%s", tn_errmsg());
        float *a2 = get(back, "model.embed_tokens.lora_embedding_A"), *b2 = get(back, "model.embed_tokens.lora_embedding_B");
        CHECK(memcmp(a2, At, sizeof(float) * V * R) == 0 && memcmp(b2, Bm, sizeof(float) * D * R) == 0);
        free(a2), free(b2);
        tn_model_free(back);
    }
    free(text), free(cfg_text), free(path);
}

int main(void) {
    make_config();
    CHECK(tn_lora_parse_targets("q_proj,embed_tokens", &(unsigned){0}) == 0);
    tn_lora_config lc = {.r = R, .alpha = ALPHA, .targets = TN_LORA_EMBED};
    tn_model *m = tn_model_create(&cfg, &lc, tn_backend_cpu());
    tn_model_init_random(m, 7);
    float *At = get(m, "model.embed_tokens.lora_embedding_A"), *Bm = get(m, "model.embed_tokens.lora_embedding_B");
    int zeros = 0, nonzero_b = 0;
    double b2 = 0;
    for (int i = 0; i < V * R; i++) zeros += At[i] == 0.0f;
    for (int i = 0; i < D * R; i++) nonzero_b += Bm[i] != 0.0f, b2 += (double)Bm[i] * Bm[i];
    CHECKF(zeros == V * R && nonzero_b == D * R && b2 / (D * R) > 0.2 && b2 / (D * R) < 5,
           "PEFT init: A zeros (%d of %d), B N(0, 1) (mean square %.3f)", zeros, V * R, b2 / (D * R));
    CHECK(tn_model_find(m, "model.embed_tokens.weight")->trainable == 0);
    /* a nonzero A to test with */
    tn_rng rng;
    tn_rng_seed(&rng, 3);
    for (int i = 0; i < V * R; i++) At[i] = (float)(0.5 * tn_rng_normal(&rng));
    tn_model_set(m, tn_model_find(m, "model.embed_tokens.lora_embedding_A"), At);

    tn_model *p = merged_by_hand(m, At, Bm);
    tn_acts *am = tn_acts_create(m, B, S, 0), *ap = tn_acts_create(p, B, S, 0);
    float lm[B * S * V], lp[B * S * V];
    tn_model_logits(m, am, ids, B, S, lm);
    tn_model_logits(p, ap, ids, B, S, lp);
    double e = rel_l2_f(lm, lp, sizeof lm / sizeof *lm);
    CHECKF(e <= TOL, "logits with the embedding adapter vs the hand-merged embedding: rel L2 %.3g", e);

    /* gradients */
    int64_t nv = 0, nv2 = 0;
    m->be->zero(m->grad, m->n_trainable), p->be->zero(p->grad, p->n_trainable);
    tn_model_forward_backward(m, am, ids, labels, B, S, 0.1f, &nv, 1);
    tn_model_forward_backward(p, ap, ids, labels, B, S, 0.1f, &nv2, 1);
    float dE[V * D], dA[V * R], dB[D * R], wantA[V * R], wantB[D * R];
    p->be->download(dE, p->d_embed, V * D);
    m->be->download(dA, m->d_lora_emb.A, V * R);
    m->be->download(dB, m->d_lora_emb.B, D * R);
    for (int d = 0; d < D; d++)
        for (int k = 0; k < R; k++) {
            double acc = 0;
            for (int v = 0; v < V; v++) acc += (double)dE[v * D + d] * At[v * R + k];
            wantB[d * R + k] = (float)(SCALE * acc);
        }
    for (int v = 0; v < V; v++)
        for (int k = 0; k < R; k++) {
            double acc = 0;
            for (int d = 0; d < D; d++) acc += (double)dE[v * D + d] * Bm[d * R + k];
            wantA[v * R + k] = (float)(SCALE * acc);
        }
    double eb = rel_l2_f(dB, wantB, D * R), ea = rel_l2_f(dA, wantA, V * R);
    CHECKF(eb <= TOL && ea <= TOL, "embedding adapter gradients: dB rel L2 %.3g, dA %.3g", eb, ea);

    check_adapter_files(m, At, Bm);

    /* merge: the embedding becomes the hand-merged one */
    tn_model_merge_lora(m);
    float *Em = get(m, "model.embed_tokens.weight"), *Ep = get(p, "model.embed_tokens.weight");
    e = rel_l2_f(Em, Ep, V * D);
    CHECKF(e <= TOL, "merged embedding vs the hand-merged one: rel L2 %.3g", e);
    free(Em), free(Ep), free(At), free(Bm);
    tn_acts_free(am), tn_acts_free(ap);
    tn_model_free(m), tn_model_free(p);
    return tl_done("test_unit_lora_embed");
}
