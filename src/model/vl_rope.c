/* vl_rope.c -- multimodal rotary positions of the Qwen VL text decoder: transformers' get_rope_index (images) and
 * the per-token cos/sin tables where each frequency takes its angle from the temporal, height or width position
 * (Qwen2-VL/2.5-VL: contiguous mrope_section blocks; Qwen3-VL: interleaved T H W T H W ..., the rest T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/vision.h"

int tn_vl_mrope_owner(const tn_model *m, int i) {
    const tn_vision_config *v = &m->cfg.vis;
    if (v->interleaved) return i % 3 == 1 && i < 3 * v->mrope[1] ? 1 : i % 3 == 2 && i < 3 * v->mrope[2] ? 2 : 0;
    return i < v->mrope[0] ? 0 : i < v->mrope[0] + v->mrope[1] ? 1 : 2;
}

void tn_vl_mrope_tables(const tn_model *m, const int32_t *pos, int T, float *cos_t, float *sin_t) {
    int half = m->hd / 2;
    for (int i = 0; i < half; i++) {
        double inv = 1.0 / pow(m->cfg.rope_theta, (double)(2 * i) / m->hd);
        const int32_t *p = pos + (size_t)tn_vl_mrope_owner(m, i) * T;
        for (int t = 0; t < T; t++) {
            double ang = (double)p[t] * inv;
            cos_t[(size_t)t * half + i] = (float)cos(ang);
            sin_t[(size_t)t * half + i] = (float)sin(ang);
        }
    }
}

/* One row's valid tokens (toks[n]) -> positions out[3][n]; consumes images from *img. */
static int row_positions(const tn_model *m, const int32_t *toks, int n, const int32_t *grid, int n_images, int *img,
                         int32_t *out, int ld, int b, char *err, size_t errlen) {
    const tn_vision_config *v = &m->cfg.vis;
    int st = 0, base = 0;
    int n_img = 0;
    for (int j = 0; j + 1 < n; j++) n_img += toks[j] == v->vision_start_token_id && toks[j + 1] == v->image_token_id;
    for (int k = 0; k < n_img; k++) {
        int ed = st;
        while (ed < n && toks[ed] != v->image_token_id) ed++;
        if (ed == n || *img >= n_images) {
            snprintf(err, errlen, "row %d: image %d has no image grid (%d images in the batch)", b, *img, n_images);
            return -1;
        }
        const int32_t *g = grid + 3 * (*img)++;
        int t = g[0], gh = g[1] / v->merge, gw = g[2] / v->merge, len = t * gh * gw;
        for (int j = st; j < ed; j++) out[j] = out[ld + j] = out[2 * ld + j] = base + (j - st);
        if (ed + len > n) {
            snprintf(err, errlen, "row %d: image %d needs %d <|image_pad|> tokens, the row ends after %d", b, *img - 1, len,
                     n - ed);
            return -1;
        }
        int p0 = base + ed - st;
        for (int q = 0; q < len; q++) {
            if (toks[ed + q] != v->image_token_id) {
                snprintf(err, errlen, "row %d: image %d needs %d <|image_pad|> tokens, found %d", b, *img - 1, len, q);
                return -1;
            }
            out[ed + q] = p0 + q / (gh * gw), out[ld + ed + q] = p0 + q / gw % gh, out[2 * ld + ed + q] = p0 + q % gw;
        }
        int mx = t > gh ? t : gh;
        base = p0 + (mx > gw ? mx : gw);
        st = ed + len;
    }
    for (int j = st; j < n; j++) out[j] = out[ld + j] = out[2 * ld + j] = base + (j - st);
    return 0;
}

int tn_vl_rope_index(const tn_model *m, const int32_t *ids, const int32_t *mask, int B, int S, const int32_t *grid_thw,
                     int n_images, int32_t *pos, char *err, size_t errlen) {
    size_t T = (size_t)B * S;
    int32_t *toks = malloc((size_t)S * sizeof *toks), *tmp = malloc((size_t)3 * S * sizeof *tmp);
    if (!toks || !tmp) {
        free(toks), free(tmp);
        snprintf(err, errlen, "out of memory (rope index)");
        return -1;
    }
    int img = 0, rc = 0;
    for (int b = 0; b < B && rc == 0; b++) {
        int n = 0;
        for (int s = 0; s < S; s++)
            if (!mask || mask[(size_t)b * S + s]) toks[n++] = ids[(size_t)b * S + s];
        rc = row_positions(m, toks, n, grid_thw, n_images, &img, tmp, S, b, err, errlen);
        for (int r = 0; r < 3 && rc == 0; r++)
            for (int s = 0, k = 0; s < S; s++)
                pos[r * T + (size_t)b * S + s] = !mask || mask[(size_t)b * S + s] ? tmp[r * S + k++] : 1;
    }
    if (rc == 0 && img != n_images) {
        snprintf(err, errlen, "the batch has %d images but its rows place %d (<|vision_start|><|image_pad|> runs)",
                 n_images, img);
        rc = -1;
    }
    free(toks), free(tmp);
    return rc;
}
