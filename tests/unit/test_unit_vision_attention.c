/* test_unit_vision_attention -- the vision tower's attention inside segments (vision.c: one parallel task per
 * segment and head, query rows in blocks of TN_VATT_BLOCK) against a plain double-precision softmax attention.
 *
 * The parity fixtures' images are small (every frame under TN_VATT_BLOCK patches), so they never reach a second
 * row block; here frames of 160 (two full blocks and a partial one), 64 (exactly one), 4 and 96 patches, on the
 * tiny Qwen2-VL config (E 32, 2 heads of 16), with random q, k, v and output gradients: forward output and
 * d(q, k, v) within rel L2 1e-5 of the double reference (fp32 products of length <= 160 with unit-scale values:
 * rounding errors ~ sqrt(160) * 6e-8 = 8e-7 relative, the softmax's exp within 2 ulp; a wrong block offset, a
 * missed block or a race between tasks is an O(1) error). Runs with the ctest environment's 2 threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/vision_internal.h"
#include "testlib.h"

/* double attention of one segment [a, a+n), head h: out rows, and with dout the gradients (dqkv += ...) */
static void reference(const float *qkv, const float *dout, double *out, double *dqkv, int a, int n, int h, int E,
                      int hv) {
    int ld = 3 * E;
    double *P = calloc((size_t)n * n, sizeof *P), *dP = calloc((size_t)n * n, sizeof *dP), s = 1.0 / sqrt(hv);
    for (int i = 0; i < n; i++) {
        const float *q = qkv + (size_t)(a + i) * ld + h * hv;
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; j++) {
            const float *k = qkv + (size_t)(a + j) * ld + E + h * hv;
            double d = 0;
            for (int c = 0; c < hv; c++) d += (double)q[c] * k[c];
            P[(size_t)i * n + j] = d * s, mx = fmax(mx, d * s);
        }
        for (int j = 0; j < n; j++) sum += (P[(size_t)i * n + j] = exp(P[(size_t)i * n + j] - mx));
        for (int j = 0; j < n; j++) P[(size_t)i * n + j] /= sum;
        for (int c = 0; c < hv; c++) {
            double o = 0;
            for (int j = 0; j < n; j++) o += P[(size_t)i * n + j] * qkv[(size_t)(a + j) * ld + 2 * E + h * hv + c];
            out[(size_t)(a + i) * E + h * hv + c] = o;
        }
    }
    for (int i = 0; i < n; i++) { /* dP = dout v^T, dS = P (dP - rowdot) */
        double dot = 0;
        for (int j = 0; j < n; j++) {
            double d = 0;
            for (int c = 0; c < hv; c++)
                d += (double)dout[(size_t)(a + i) * E + h * hv + c] * qkv[(size_t)(a + j) * ld + 2 * E + h * hv + c];
            dP[(size_t)i * n + j] = d, dot += d * P[(size_t)i * n + j];
        }
        for (int j = 0; j < n; j++) dP[(size_t)i * n + j] = P[(size_t)i * n + j] * (dP[(size_t)i * n + j] - dot);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int c = 0; c < hv; c++) {
                size_t qi = (size_t)(a + i) * ld + h * hv + c, kj = (size_t)(a + j) * ld + E + h * hv + c;
                dqkv[qi] += s * dP[(size_t)i * n + j] * qkv[kj];                     /* dq = s dS k */
                dqkv[kj] += s * dP[(size_t)i * n + j] * qkv[qi];                     /* dk = s dS^T q */
                dqkv[kj + E] += P[(size_t)i * n + j] * dout[(size_t)(a + i) * E + h * hv + c]; /* dv = P^T dout */
            }
    free(P), free(dP);
}

/* examples/tiny-qwen2-vl's shapes (written out: the mutation tests build from src/ and tests/ alone) */
static const char *CONFIG =
    "{\"model_type\": \"qwen2_vl\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 160, "
    "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, "
    "\"rope_theta\": 1000000.0, \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [2, 3, 3]}, "
    "\"tie_word_embeddings\": true, \"vision_start_token_id\": 290, \"vision_end_token_id\": 291, "
    "\"vision_token_id\": 292, \"image_token_id\": 293, \"video_token_id\": 294, \"vision_config\": {\"depth\": 1, "
    "\"embed_dim\": 32, \"hidden_size\": 64, \"mlp_ratio\": 4, \"num_heads\": 2, \"in_chans\": 3, "
    "\"hidden_act\": \"quick_gelu\", \"patch_size\": 14, \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}}";

int main(void) {
    tn_model_config cfg;
    if (!CHECKF(tn_model_config_parse(CONFIG, "test config", &cfg) == 0, "%s", tn_errmsg()))
        return tl_done("test_unit_vision_attention");
    tn_model *m = tn_model_create(&cfg, NULL, tn_backend_cpu());
    const tn_vision_config *v = &m->cfg.vis;
    int32_t grid[] = {1, 10, 16, 1, 8, 8, 1, 2, 2, 1, 8, 12}, row[] = {0, 0, 0, 0};
    int N = 160 + 64 + 4 + 96, E = v->E, hv = E / v->heads, P = v->in_ch * v->tpatch * v->patch * v->patch;
    float *pv = calloc((size_t)N * P, sizeof *pv);
    tn_mm_batch mm = {.n_images = 4, .grid_thw = grid, .row = row, .pixel_values = pv, .patch_dim = P};
    tn_vision_acts *va = tn_vision_acts_create(0);
    tn_vision_prepare(m, va, &mm);
    CHECKF(va->ncu == 5 && va->cu[1] == 160 && va->cu[4] == N, "segments: %d", va->ncu);
    float *qkv = tn_xmalloc((size_t)N * 3 * E * sizeof *qkv), *dout = tn_xmalloc((size_t)N * E * sizeof *dout);
    float *att = tn_xmalloc((size_t)N * E * sizeof *att), *dqkv = tn_xmalloc((size_t)N * 3 * E * sizeof *dqkv);
    double *ref = calloc((size_t)N * E, sizeof *ref), *dref = calloc((size_t)N * 3 * E, sizeof *dref);
    tn_rng rng;
    tn_rng_seed(&rng, 11);
    for (size_t i = 0; i < (size_t)N * 3 * E; i++) qkv[i] = (float)tn_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)N * E; i++) dout[i] = (float)tn_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)N * 3 * E; i++) dqkv[i] = NAN; /* every element must be written */
    tn_vision_attention_forward(m, va, att, qkv, va->cu, va->ncu);
    tn_vision_attention_backward(m, va, dqkv, dout, qkv, va->cu, va->ncu);
    for (int s = 0; s + 1 < va->ncu; s++)
        for (int h = 0; h < v->heads; h++) reference(qkv, dout, ref, dref, va->cu[s], va->cu[s + 1] - va->cu[s], h, E, hv);
    double e_out = tl_rel_l2(att, ref, (int64_t)N * E), e_grad = tl_rel_l2(dqkv, dref, (int64_t)N * 3 * E);
    CHECKF(e_out <= 1e-5, "attention output vs double reference: rel L2 %.3g", e_out);
    CHECKF(e_grad <= 1e-5, "d(q, k, v) vs double reference: rel L2 %.3g", e_grad);
    printf("frames of 160, 64, 4, 96 patches, %d heads: output rel L2 %.2g, gradient rel L2 %.2g\n", v->heads, e_out,
           e_grad);
    free(qkv), free(dout), free(att), free(dqkv), free(ref), free(dref), free(pv);
    tn_vision_acts_free(va);
    tn_model_free(m);
    return tl_done("test_unit_vision_attention");
}
