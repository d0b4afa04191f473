/* cmd_bench.c -- `tandem bench train|sgemm` (generate, vl, resnet, allreduce: their own files): one JSON line per measurement, for bench/ scripts.
 *
 * train: the same step as ../shared/ref/bench_ref.py (forward + loss + backward + AdamW, random tokens,
 * labels = inputs) on its tiny/small presets, run by the trainer itself (trainer.h: the step `tandem train`
 * takes, with its sync strategy) on a dataset of random tokens; FLOPs counted with its formula (PaLM convention):
 *   full 6 N T + 12 L D S T ;  LoRA (4 N + 6 N_lora) T + 12 L D S T ; N = base params minus the embedding.
 * Threads come from OMP_NUM_THREADS (OpenBLAS is the OpenMP build and follows it). --dist: one rank of a
 * data-parallel run under mpirun; --zero N: sharded as ZeRO stage N (zero.h), --zero-layout balanced|contiguous
 * its shards (shard_layout.h), --zero-gather: stage 3 on one machine gathers as across machines instead of
 * sharing one copy of the parameters (zero.c); --trace: every rank prints each step's phases, and each collective
 * as it finishes (comm.h: tn_comm_trace_ops), to stderr; --compress bf16|int8|int4: gradients between machines
 * encoded (grad_sync.h); --diloco H: sync_mode diloco with H inner steps (diloco.h; --compress then encodes the
 * pseudo-gradients, --no-overlap waits for each exchange). The JSON line has the median and the mean step
 * (a DiLoCo round's end costs more than its other steps: the mean over whole rounds is the throughput) and
 * the bytes each machine sends per step. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "core/core.h"
#include "comm/compress.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "launch/pernode.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/trainer.h"

static int preset(const char *name, tn_model_config *c, int *B, int *S) {
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "llama");
    c->rope_theta = 10000.0, c->rms_norm_eps = 1e-5, c->initializer_range = 0.02;
    c->bos_token_id = c->eos_token_id = -1;
    if (strcmp(name, "tiny") == 0) {
        c->vocab_size = 4096, c->hidden_size = 256, c->num_hidden_layers = 4, c->num_attention_heads = 4;
        c->num_key_value_heads = 4, c->intermediate_size = 688, *B = 8, *S = 256;
    } else if (strcmp(name, "small") == 0) {
        c->vocab_size = 32000, c->hidden_size = 512, c->num_hidden_layers = 8, c->num_attention_heads = 8;
        c->num_key_value_heads = 4, c->intermediate_size = 1376, *B = 4, *S = 512;
    } else {
        return tn_err("bench: unknown preset '%s' (expected tiny or small)", name);
    }
    c->max_position_embeddings = 2048;
    c->head_dim = c->hidden_size / c->num_attention_heads;
    return 0;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n >= 1; sorts v in place. */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Weights for timing big models (--model-config): a pool of 16M N(0, initializer_range) values drawn once and
 * uploaded cyclically (random-looking data, never zeros, which run faster than real data on tensor cores), norm
 * weights 1, biases 0: seconds instead of the minutes of drawing every value of a 4B model. */
static void fast_init(tn_model *m) {
    const size_t pool = (size_t)1 << 24;
    float *r = tn_xmalloc(pool * sizeof *r), *ones = tn_xmalloc(pool * sizeof *ones);
    tn_rng rng;
    tn_rng_seed(&rng, 5);
    for (size_t i = 0; i < pool; i++) r[i] = (float)(m->cfg.initializer_range * tn_rng_normal(&rng)), ones[i] = 1.0f;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        int norm = strstr(p->name, "norm.weight") != NULL, bias = strstr(p->name, ".bias") != NULL;
        for (size_t off = 0; off < p->numel; off += pool) {
            size_t n = p->numel - off < pool ? p->numel - off : pool;
            if (bias) m->be->zero(m->slab + p->offset + off, n);
            else m->be->upload(m->slab + p->offset + off, norm ? ones : r + (off / pool * 7919) % (pool - n + 1), n);
        }
    }
    free(r), free(ones);
}

/* bench_ref.py's step as a training run: AdamW (betas 0.9 / 0.95, weight decay 0.1) at a constant lr 1e-4, no
 * clipping, one micro-batch a step; the sync strategy from the flags as train takes it from the YAML. steps:
 * the run is one longer than the bench times, so DiLoCo ends no round with train's final synchronous exchange
 * (the bench measures the steady state). */
static void bench_config(tn_train_config *cfg, int B, int steps, int ckpt, double bucket_mb, int stage, int inner,
                         double outer_lr, double outer_mom, int overlap, tn_codec codec) {
    tn_train_config_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "bench train");
    cfg->per_device_train_batch_size = B, cfg->gradient_accumulation_steps = 1;
    cfg->max_steps = steps + 1;
    cfg->learning_rate = 1e-4, cfg->lr_scheduler_type = TN_SCHED_CONSTANT, cfg->no_warmup = 1;
    cfg->adam_beta1 = 0.9, cfg->adam_beta2 = 0.95, cfg->adam_epsilon = 1e-8, cfg->weight_decay = 0.1;
    cfg->max_grad_norm = 0;
    cfg->seed = 0;
    cfg->gradient_checkpointing = ckpt;
    cfg->ddp_bucket_cap_mb = bucket_mb;
    cfg->zero_stage = stage;
    cfg->sync_mode = inner ? TN_SYNC_DILOCO : TN_SYNC_DDP;
    if (inner) cfg->diloco_inner_steps = inner;
    cfg->diloco_outer_lr = outer_lr, cfg->diloco_outer_momentum = outer_mom, cfg->diloco_nesterov = 1;
    cfg->diloco_overlap = overlap;
    cfg->comm_compression = codec;
}

/* n samples of S random tokens, every one trained (labels = inputs, as bench_ref.py), the same on every rank:
 * each rank trains on its own slice of them. */
static void random_data(tn_dataset *d, int n, int S, int vocab) {
    memset(d, 0, sizeof *d);
    d->n = n, d->S = S;
    d->ids = tn_xmalloc((size_t)n * S * sizeof *d->ids);
    d->labels = tn_xmalloc((size_t)n * S * sizeof *d->labels);
    tn_rng rng;
    tn_rng_seed(&rng, 1);
    for (size_t i = 0; i < (size_t)n * S; i++) d->ids[i] = d->labels[i] = (int32_t)(tn_rng_next(&rng) % (uint64_t)vocab);
}

static int bench_train(int argc, char **argv) {
    const char *name = "tiny", *model_config = NULL, *device = "cpu";
    int lora = 0, steps = 0, warmup = 2, dist = 0, trace = 0, stage = 0, batch = 0, seq = 0, bf16 = 0, ckpt = 0;
    int lora_rank = 8, inner = 0, overlap = 1, contiguous = 0, gather = 0;
    double bucket_mb = 4, peak_tflops = 0, outer_lr = 1.0, outer_mom = 0.0; /* train's defaults */
    tn_codec codec = TN_CODEC_FP32;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) name = argv[++i];
        else if (strcmp(argv[i], "--model-config") == 0 && i + 1 < argc) model_config = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc) seq = atoi(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
        else if (strcmp(argv[i], "--bf16") == 0) bf16 = 1;
        else if (strcmp(argv[i], "--checkpointing") == 0) ckpt = 1;
        else if (strcmp(argv[i], "--lora-rank") == 0 && i + 1 < argc) lora = 1, lora_rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--peak-tflops") == 0 && i + 1 < argc) peak_tflops = atof(argv[++i]);
        else if (strcmp(argv[i], "--lora") == 0) lora = 1;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dist") == 0) dist = 1;
        else if (strcmp(argv[i], "--trace") == 0) trace = 1;
        else if (strcmp(argv[i], "--bucket-mb") == 0 && i + 1 < argc) bucket_mb = atof(argv[++i]);
        else if (strcmp(argv[i], "--zero") == 0 && i + 1 < argc) stage = atoi(argv[++i]);
        else if (strcmp(argv[i], "--zero-layout") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "balanced") != 0 && strcmp(v, "contiguous") != 0)
                return tn_err("bench train: --zero-layout expects balanced or contiguous, got '%s'", v);
            contiguous = strcmp(v, "contiguous") == 0;
        }
        else if (strcmp(argv[i], "--zero-gather") == 0) gather = 1;
        else if (strcmp(argv[i], "--diloco") == 0 && i + 1 < argc) inner = atoi(argv[++i]);
        else if (strcmp(argv[i], "--outer-lr") == 0 && i + 1 < argc) outer_lr = atof(argv[++i]);
        else if (strcmp(argv[i], "--outer-momentum") == 0 && i + 1 < argc) outer_mom = atof(argv[++i]);
        else if (strcmp(argv[i], "--no-overlap") == 0) overlap = 0;
        else if (strcmp(argv[i], "--compress") == 0 && i + 1 < argc) {
            if (tn_codec_parse(argv[++i], &codec) != 0) return tn_err("bench train: --compress expects bf16, int8 or int4");
        }
        else return tn_err("bench train: unexpected argument '%s'", argv[i]);
    }
    tn_model_config c;
    int B = 0, S = 0;
    if (model_config) { /* an HF config.json (bench/configs: Qwen3 0.6B, 1.7B, 4B) */
        if (tn_model_config_load(model_config, &c) != 0) return -1;
        name = model_config;
        B = 1, S = 2048;
    } else if (preset(name, &c, &B, &S) != 0 || tn_model_config_finish(&c, "bench preset") != 0) {
        return -1;
    }
    if (batch > 0) B = batch;
    if (seq > 0) S = seq;
    if (B < 1 || S < 2 || lora_rank < 1) return tn_err("bench train: --batch, --seq and --lora-rank must be positive");
    if (steps <= 0) steps = strcmp(name, "tiny") == 0 ? 10 : 5;
    tn_lora_config lc = {.r = lora_rank, .alpha = 2.0 * lora_rank, .dropout = 0, .targets = (1u << TN_LT_COUNT) - 1};
    /* --dist: one rank of a data-parallel step under mpirun (same per-rank batch: weak scaling) */
    tn_comm *comm = dist ? tn_comm_init(NULL, NULL) : NULL;
    if (dist && !comm) return -1;
    const tn_comm_info *in = comm ? tn_comm_get_info(comm) : NULL;
    const tn_backend *be_used = tn_backend_select(device, bf16, in ? in->local_rank : 0);
    if (!be_used) return tn_err("bench train: --device %s: %s", device, tn_errmsg());
    if (comm && tn_backend_attach_comm(be_used, comm, NULL, 0) != 0) return -1; /* device gradients: NCCL or staged */
    tn_model *m = tn_model_create(&c, lora ? &lc : NULL, be_used);
    if (model_config) fast_init(m);
    else tn_model_init_random(m, 0);
    if (stage < 0 || stage > 3 || (stage && !comm)) return tn_err("bench train: --zero expects 0..3, with --dist");
    if (comm && in->size == 1) stage = 0, inner = 0;
    if (stage && (inner || codec)) return tn_err("bench train: --zero goes with neither --diloco nor --compress");
    if (!comm || in->n_nodes == 1) codec = TN_CODEC_FP32; /* nothing crosses between machines */
    tn_train_config cfg;
    bench_config(&cfg, B, warmup + steps, ckpt, bucket_mb, stage, inner, outer_lr, outer_mom, overlap, codec);
    cfg.zero_contiguous = contiguous;
    cfg.zero_shared_params = !gather;
    int world = comm ? in->size : 1;
    tn_dataset data;
    random_data(&data, world * B, S, c.vocab_size);
    /* every rank drew the same weights (seed 0): they start where train's broadcast would leave them */
    tn_trainer *t = tn_trainer_create(&cfg, m, &data, comm, NULL);
    if (!t) return -1;
    tn_trainer_start(t);
    tn_trainer_track_peak(t, 1);
    double peak_state_mb = 0, loss = 0;
    double *ms = tn_xmalloc((size_t)steps * sizeof *ms), *wait = tn_xcalloc((size_t)steps, sizeof *wait);
    double *first = tn_xcalloc((size_t)steps, sizeof *first);
    int64_t T = (int64_t)B * S;
    for (int i = 0; i < warmup + steps; i++) {
        double t0 = tn_now();
        if (trace && comm) tn_comm_trace_ops(comm, i, t0);
        tn_step_stats st, fs;
        if (tn_trainer_step(t, &st) == -2) return -1; /* a non-finite step (-1) is timed like any other */
        m->be->sync(); /* a GPU's queued kernels belong to this step's time */
        while (tn_trainer_next_logged(t, &fs)) { /* DiLoCo's come a round late; the last step's own loss is shown */
        }
        loss = st.loss; /* over the ranks that share the update (DiLoCo: the machine's) */
        if (trace) /* every rank: tells a slow rank (its peers wait) from a slow link (everyone waits) */
            fprintf(stderr, "rank %d step %d: data %.1f ms, forward+backward %.1f (first bucket at %.1f), wait %.1f, "
                    "optimizer %.1f\n", in ? in->rank : 0, i, 1e3 * st.times.data, 1e3 * st.times.compute,
                    1e3 * st.first_ready, 1e3 * st.times.wait, 1e3 * st.times.optimizer);
        double dt = tn_now() - t0;
        /* sampled inside the passes (ZeRO, since the last step); outside them (after the update) too */
        size_t inside = tn_trainer_peak_bytes(t);
        size_t now = tn_model_param_resident(m) + m->be->resident(m->grad, m->n_trainable);
        double peak = stage ? (double)(inside > now ? inside : now) : 0;
        if (i < warmup) continue;
        ms[i - warmup] = 1e3 * dt;
        if (peak / 1048576.0 > peak_state_mb) peak_state_mb = peak / 1048576.0;
        wait[i - warmup] = 1e3 * st.comm_wait;
        first[i - warmup] = 1e3 * st.first_ready;
    }
    double sent = tn_trainer_bytes_per_step(t); /* bytes one machine sends per step */
    const tn_adamw *o = tn_trainer_optimizer(t);
    double mean = 0;
    for (int i = 0; i < steps; i++) mean += ms[i] / steps;
    double med = median(ms, steps); /* sorts: ms[0] is then the fastest step */
    /* model state this rank holds after the last step (page residency): trainable parameters, gradients, AdamW */
    const tn_backend *be = m->be;
    double state_mb = (double)(tn_model_param_resident(m) + be->resident(m->grad, m->n_trainable) +
                               be->resident(o->m, o->n) + be->resident(o->v, o->n)) / 1048576.0;
    /* FLOP model of bench_ref.py */
    double N = 0, n_lora = 0;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (strstr(p->name, ".lora_")) n_lora += (double)p->numel;
        else if (strcmp(p->name, "model.embed_tokens.weight") != 0) N += (double)p->numel;
    }
    if (c.tie_word_embeddings) N += (double)c.vocab_size * c.hidden_size;
    /* attention's two products, fwd + bwd, no causal discount (PaLM's convention): 12 L (H hd) S per token */
    double attn = 12.0 * c.num_hidden_layers * (double)c.num_attention_heads * c.head_dim * (double)S * (double)T;
    double flops = lora ? (4 * N + 6 * n_lora) * (double)T + attn : 6 * N * (double)T + attn;
    if (!in || in->rank == 0)
        printf("{\"impl\":\"tandem\",\"config\":\"%s%s\",\"threads\":%d,\"batch\":%d,\"seq\":%d,\"steps\":%d,"
               "\"ms_step\":%.2f,\"ms_min\":%.2f,\"tok_s\":%.1f,\"gflops\":%.2f,\"flops_per_step\":%.0f,"
               "\"peak_rss_mb\":%.1f,\"acts_mb\":%.1f,\"loss\":%.5f,\"ranks\":%d,\"nodes\":%d,"
               "\"grad_mb\":%.2f,\"comm_wait_ms\":%.2f,\"first_grad_ms\":%.2f,\"zero\":%d,\"trainable\":%zu,"
               "\"state_mb\":%.2f,\"peak_params_grads_mb\":%.2f,\"device\":\"%s\",\"peak_device_mb\":%.1f,"
               "\"mfu\":%.4f,\"checkpointing\":%d,\"lora_rank\":%d,\"ms_mean\":%.2f,\"diloco\":%d,\"compress\":\"%s\","
               "\"sent_mb_step\":%.3f,\"zero_layout\":\"%s\"}\n",
               name, lora ? "-lora" : "", omp_get_max_threads(), B, S, steps, med, ms[0], (double)T / (med / 1e3),
               flops / (med / 1e3) / 1e9, flops, peak_rss_mb(), tn_trainer_acts_bytes(t) / 1048576.0, loss,
               in ? in->size : 1, in ? in->n_nodes : 1, m->n_trainable * 4.0 / 1048576.0, median(wait, steps),
               median(first, steps), stage, m->n_trainable, state_mb, peak_state_mb, be->describe(),
               be->peak_bytes() / 1048576.0, peak_tflops > 0 ? flops / (med / 1e3) / (peak_tflops * 1e12) : 0.0, ckpt,
               lora ? lora_rank : 0, mean, inner, tn_codec_name(codec), sent / 1e6, contiguous ? "contiguous" : "balanced");
    fflush(stdout);
    free(ms);
    free(wait);
    free(first);
    tn_trainer_free(t);
    tn_dataset_free(&data);
    tn_model_free(m);
    if (comm) tn_comm_finalize(comm);
    return 0;
}

static int bench_sgemm(int argc, char **argv) {
    int n = 2048, reps = 10;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) n = atoi(argv[++i]);
        else return tn_err("bench sgemm: unexpected argument '%s'", argv[i]);
    }
    if (n < 16 || n > 16384) return tn_err("bench sgemm: --n must be in [16, 16384]");
    const tn_backend *be = tn_backend_cpu();
    size_t nn = (size_t)n * n;
    float *A = be->alloc(nn), *Bm = be->alloc(nn), *C = be->alloc(nn);
    tn_rng rng;
    tn_rng_seed(&rng, 3);
    for (size_t i = 0; i < nn; i++) A[i] = (float)tn_rng_normal(&rng), Bm[i] = (float)tn_rng_normal(&rng);
    double best = 1e30;
    for (int r = 0; r < reps + 2; r++) {
        double t0 = tn_now();
        be->matmul(0, 0, n, n, n, 1.0f, A, n, Bm, n, 0.0f, C, n);
        double dt = tn_now() - t0;
        if (r >= 2 && dt < best) best = dt;
    }
    printf("{\"impl\":\"tandem\",\"config\":\"sgemm%d\",\"threads\":%d,\"gflops_best\":%.2f}\n", n,
           omp_get_max_threads(), 2.0 * n * (double)n * n / best / 1e9);
    be->free(A);
    be->free(Bm);
    be->free(C);
    return 0;
}

int tn_cmd_bench(int argc, char **argv) {
    int rc;
    if (argc >= 1 && strcmp(argv[0], "allreduce") == 0 && tn_pernode_forced()) { /* per-node launch, as train */
        char **args = tn_xcalloc((size_t)argc + 2, sizeof *args);
        args[0] = "--";
        memcpy(args + 1, argv, (size_t)argc * sizeof *argv);
        int rc = tn_launch(argc + 1, args, "bench");
        free(args);
        return rc;
    }
    if (argc >= 1 && strcmp(argv[0], "allreduce") == 0) return tn_cmd_bench_allreduce(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "train") == 0) rc = bench_train(argc - 1, argv + 1);
    else if (argc >= 1 && strcmp(argv[0], "sgemm") == 0) rc = bench_sgemm(argc - 1, argv + 1);
    else if (argc >= 1 && strcmp(argv[0], "generate") == 0) return tn_cmd_bench_generate(argc - 1, argv + 1);
    else if (argc >= 1 && strcmp(argv[0], "vl") == 0) return tn_cmd_bench_vl(argc - 1, argv + 1);
    else if (argc >= 1 && strcmp(argv[0], "resnet") == 0) return tn_cmd_bench_resnet(argc - 1, argv + 1);
    else rc = tn_err("bench: expected 'train', 'sgemm', 'generate', 'vl', 'resnet' or 'allreduce'");
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
