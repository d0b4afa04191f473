/* cmd_bench_vl.c -- `tandem bench vl`: timed training steps of a vision-language model (Qwen2-VL, Qwen2.5-VL,
 * Qwen3-VL config.json) on random weights, random tokens and random images; one JSON line. bench/bench_vl.py runs
 * the same step in PyTorch (../shared/ref/vl_ref.py) and compares.
 *
 * Step = the trainer's: forward (vision tower, features at the <|image_pad|> rows, decoder) + cross-entropy +
 * backward + clip + AdamW. Default LLaMA-Factory's VL LoRA: r 8, alpha 16 on q/k/v/o/gate/up/down of the language
 * model, vision tower and projector frozen (the tower then runs forward only); --full: full fine-tuning with
 * nothing frozen (the tower's backward included). Each batch row is [text, <|vision_start|>, pads, <|vision_end|>]
 * x images, then text to --seq; labels = ids with the image pads ignored (-100), as the prompt's image tokens are
 * in LLaMA-Factory. Tokens per second count every position of the batch (B x S, image tokens included); the
 * vision share is the tower's forward + backward wall time over the step's (timed inside the tower). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/commands.h"
#include "core/core.h"
#include "model/model.h"
#include "model/vision.h"
#include "trainer/optimizer.h"

typedef struct {
    const char *config;
    int B, S, images, px, full, rank, steps, warmup;
} vl_opts;

static int parse(int argc, char **argv, vl_opts *o) {
    *o = (vl_opts){.B = 2, .S = 256, .images = 1, .px = 224, .rank = 8, .steps = 3, .warmup = 1};
    for (int i = 0; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--model-config") == 0 && more) o->config = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && more) o->B = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seq") == 0 && more) o->S = atoi(argv[++i]);
        else if (strcmp(argv[i], "--images") == 0 && more) o->images = atoi(argv[++i]);
        else if (strcmp(argv[i], "--image-size") == 0 && more) o->px = atoi(argv[++i]);
        else if (strcmp(argv[i], "--lora-rank") == 0 && more) o->rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && more) o->steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && more) o->warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--full") == 0) o->full = 1;
        else return tn_err("bench vl: unexpected argument '%s'", argv[i]);
    }
    if (!o->config) return tn_err("bench vl: --model-config FILE (a Qwen2-VL, Qwen2.5-VL or Qwen3-VL config.json) is needed");
    if (o->B < 1 || o->S < 2 || o->images < 1 || o->px < 1 || o->rank < 1 || o->steps < 1 || o->warmup < 0)
        return tn_err("bench vl: --batch, --seq, --images, --image-size, --lora-rank, --steps must be positive, "
                      "--warmup >= 0");
    return 0;
}

/* ids/labels [B, S] and the image grids: every row holds o->images images of side o->px (a multiple of patch x
 * merge) after one text token; text tokens are drawn below the smallest vision special id. */
static int make_batch(const tn_model_config *c, const vl_opts *o, int32_t *ids, int32_t *labels, int32_t *grid,
                      int32_t *row, int *n_patches) {
    const tn_vision_config *v = &c->vis;
    int unit = v->patch * v->merge, g = o->px / v->patch, n_tok = g * g / (v->merge * v->merge);
    if (o->px % unit) return tn_err("bench vl: --image-size %d is not a multiple of patch x merge = %d", o->px, unit);
    if (1 + o->images * (n_tok + 2) > o->S)
        return tn_err("bench vl: %d image(s) of %d tokens do not fit --seq %d", o->images, n_tok + 2, o->S);
    int lo = c->vocab_size;
    const int special[] = {v->image_token_id, v->video_token_id, v->vision_start_token_id, v->vision_end_token_id,
                           v->vision_token_id};
    for (int k = 0; k < 5; k++) lo = special[k] >= 0 && special[k] < lo ? special[k] : lo;
    tn_rng rng;
    tn_rng_seed(&rng, 1);
    for (int b = 0; b < o->B; b++) {
        int32_t *r = ids + (size_t)b * o->S;
        for (int s = 0; s < o->S; s++) r[s] = (int32_t)(tn_rng_next(&rng) % (uint64_t)lo);
        for (int i = 0, at = 1; i < o->images; i++) {
            r[at++] = v->vision_start_token_id;
            for (int k = 0; k < n_tok; k++) r[at++] = v->image_token_id;
            r[at++] = v->vision_end_token_id;
            int j = b * o->images + i;
            grid[3 * j] = 1, grid[3 * j + 1] = g, grid[3 * j + 2] = g, row[j] = b;
        }
    }
    for (size_t t = 0; t < (size_t)o->B * o->S; t++) labels[t] = ids[t] == v->image_token_id ? -100 : ids[t];
    *n_patches = o->B * o->images * g * g;
    return 0;
}

static double median_of(double *v, int n) { /* sorts v */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int run(const vl_opts *o) {
    tn_model_config c;
    if (tn_model_config_load(o->config, &c) != 0) return -1;
    if (c.vis.kind == TN_VL_NONE) return tn_err("bench vl: %s is not a vision-language config", o->config);
    int n_img = o->B * o->images, N = 0;
    int32_t *ids = tn_xmalloc((size_t)o->B * o->S * sizeof *ids), *labels = tn_xmalloc((size_t)o->B * o->S * sizeof *labels);
    int32_t *grid = tn_xmalloc((size_t)n_img * 3 * sizeof *grid), *row = tn_xmalloc((size_t)n_img * sizeof *row);
    if (make_batch(&c, o, ids, labels, grid, row, &N) != 0) {
        free(ids), free(labels), free(grid), free(row);
        return -1;
    }
    const tn_vision_config *v = &c.vis;
    int P = v->in_ch * v->tpatch * v->patch * v->patch;
    float *pv = tn_xmalloc((size_t)N * P * sizeof *pv);
    tn_rng rng;
    tn_rng_seed(&rng, 2);
    for (size_t i = 0; i < (size_t)N * P; i++) pv[i] = (float)tn_rng_normal(&rng); /* normalised pixels: ~N(0, 1) */
    tn_mm_batch mm = {.n_images = n_img, .grid_thw = grid, .row = row, .pixel_values = pv, .patch_dim = P};
    /* LLaMA-Factory's VL LoRA: tower and projector frozen; --full: everything trains */
    tn_lora_config lc = {.r = o->rank, .alpha = 2.0 * o->rank, .targets = (1u << TN_LT_COUNT) - 1,
                         .freeze = TN_FREEZE_VISION | TN_FREEZE_PROJECTOR};
    tn_lora_config full = {.r = 0};
    tn_model *m = tn_model_create(&c, o->full ? &full : &lc, tn_backend_cpu());
    tn_model_init_random(m, 0);
    tn_acts *a = tn_acts_create(m, o->B, o->S, 0);
    tn_adamw *opt = tn_adamw_create_range(m, 0, m->n_trainable);
    tn_adamw_hparams h = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    int64_t targets = tn_count_targets(labels, o->B, o->S);
    double *ms = tn_xmalloc((size_t)o->steps * sizeof *ms), *vis = tn_xmalloc((size_t)o->steps * sizeof *vis);
    double vf_sum = 0, vb_sum = 0, loss = 0;
    char err[256];
    for (int i = 0; i < o->warmup + o->steps; i++) {
        double f0, b0, f1, b1, t0 = tn_now();
        tn_acts_vision_seconds(a, &f0, &b0);
        int64_t nv = 0;
        m->be->zero(m->grad, m->n_trainable);
        if (tn_acts_set_images(a, &mm, err, sizeof err) != 0) tn_die("bench vl: %s", err); /* grids checked above */
        loss = tn_model_forward_backward(m, a, ids, labels, o->B, o->S, 1.0f / (float)targets, &nv, 0) / (double)targets;
        tn_clip_grad_norm(m, 1.0);
        tn_adamw_step(opt, m, &h, 1e-4);
        m->be->sync();
        double t1 = tn_now();
        tn_acts_vision_seconds(a, &f1, &b1);
        if (i < o->warmup) continue;
        ms[i - o->warmup] = 1e3 * (t1 - t0), vis[i - o->warmup] = 1e3 * (f1 - f0 + b1 - b0);
        vf_sum += f1 - f0, vb_sum += b1 - b0;
    }
    double share = 0;
    for (int i = 0; i < o->steps; i++) share += vis[i] / ms[i] / o->steps;
    double med = median_of(ms, o->steps), params = 0;
    for (int i = 0; i < m->n_params; i++) params += (double)m->params[i].numel;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int img_tok = 0;
    for (size_t t = 0; t < (size_t)o->B * o->S; t++) img_tok += ids[t] == v->image_token_id;
    printf("{\"impl\":\"tandem\",\"config\":\"%s\",\"mode\":\"%s\",\"threads\":%d,\"batch\":%d,\"seq\":%d,"
           "\"images\":%d,\"image_size\":%d,\"patches\":%d,\"image_tokens\":%d,\"steps\":%d,\"ms_step\":%.2f,"
           "\"ms_min\":%.2f,\"tok_s\":%.1f,\"vision_fwd_ms\":%.2f,\"vision_bwd_ms\":%.2f,\"vision_share\":%.4f,"
           "\"loss\":%.5f,\"params\":%.0f,\"trainable\":%zu,\"peak_rss_mb\":%.1f}\n",
           o->config, o->full ? "full" : "lora", omp_get_max_threads(), o->B, o->S, n_img, o->px, N, img_tok,
           o->steps, med, ms[0], (double)o->B * o->S / (med / 1e3), 1e3 * vf_sum / o->steps,
           1e3 * vb_sum / o->steps, share, loss, params, m->n_trainable, ru.ru_maxrss / 1024.0);
    fflush(stdout);
    free(ms), free(vis), free(ids), free(labels), free(grid), free(row), free(pv);
    tn_adamw_free(opt);
    tn_acts_free(a);
    tn_model_free(m);
    return 0;
}

int tn_cmd_bench_vl(int argc, char **argv) {
    vl_opts o;
    if (parse(argc, argv, &o) != 0 || run(&o) != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
