/* cmd_bench_generate.c -- `tandem bench generate`: generation speed on random weights, one JSON line per
 * measurement (bench/bench_generate.py compares them with PyTorch and the machine's memory bandwidth).
 *
 *   copy:    a STREAM-style copy of 2 x 512 MiB with the same threads: bytes read + written per second; beside
 *            it a read-only stream (a vector sum over the same 1 GiB, 4x the L3 of the machine it was written
 *            on): what reading the weights can reach at best, since a decode step only reads them;
 *   prefill: the prompt's tokens in one cached forward (kv_forward.h), against the training forward
 *            (tn_model_eval_loss) on the same tokens;
 *   decode:  for each --new N, N greedy tokens after the prompt at batch --batch (1: one sequence): tokens/s, ms
 *            a token, and bytes read a token (every weight once + the cached keys and values at the mean
 *            context) over the copy bandwidth measured just before: the memory-bound limit (the figure);
 *            the same over the read-only stream. A step's time split in two: the weight stream (every
 *            linear_rows call, lm_head included: timed around the backend entry) and the rest (attention,
 *            norms, rope, sampling, OpenMP forks); ideal_tok_s is the step with the weights read at the read-only
 *            rate and the rest as measured.
 *
 * On a machine shared with other work the wall-clock rates follow the CPU share the process gets, not the memory:
 * copy and decode also report bytes per second of their threads' CPU time (process CPU seconds / threads), which
 * other processes on the cores disturb far less; their ratio is printed as cpu_fraction_of_limit beside the
 * wall-clock fraction. */
#include <omp.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_profile.h"
#include "backend/cpu_vec.h"
#include "cli/commands.h"
#include "core/core.h"
#include "model/generate.h"
#include "model/model.h"

/* CPU seconds of every thread of the process so far */
static double cpu_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float g_sink;

typedef struct {
    double copy, copy_cpu, read, read_cpu; /* bytes per second of wall time and of the threads' CPU time */
} bandwidth;

/* sum of x[0, n): four independent vector chains, as the decode's product keeps (n a multiple of 4 VL) */
static float stream_sum(const float *x, size_t n) {
    vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t j = 0; j < n; j += 4 * VL)
        a0 += vload(x + j), a1 += vload(x + j + VL), a2 += vload(x + j + 2 * VL), a3 += vload(x + j + 3 * VL);
    return vsum((a0 + a1) + (a2 + a3));
}

/* one pass of the copy of a into b: each thread its own contiguous band, as the decode's product splits a matrix */
static void copy_pass(float *a, float *b, size_t n) {
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(b + lo, a + lo, (hi - lo) * sizeof *a);
    }
}

/* one read-only pass over a and b, the same bands */
static void read_pass(float *a, float *b, size_t n) {
    float total = 0;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        size_t q = n / (4 * VL), lo = q * t / nt * 4 * VL, hi = q * (t + 1) / nt * 4 * VL;
        float s = stream_sum(a + lo, hi - lo) + stream_sum(b + lo, hi - lo);
#pragma omp atomic
        total += s;
    }
    g_sink = total; /* the sums are used: the loads stay */
}

/* best of 5 passes over `bytes`: bytes per second of wall time, and (*per_cpu) of the threads' CPU time */
static double best_of_5(void (*pass)(float *, float *, size_t), float *a, float *b, size_t n, double bytes,
                        double *per_cpu) {
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = tn_now(), c0 = cpu_now();
        pass(a, b, n);
        double dt = tn_now() - t0, dc = (cpu_now() - c0) / omp_get_max_threads();
        best = dt < best ? dt : best;
        best_cpu = dc < best_cpu ? dc : best_cpu;
    }
    *per_cpu = bytes / best_cpu;
    return bytes / best;
}

/* STREAM copy of 512 MiB (bytes read + written), then a read-only sum of both 512 MiB buffers (bytes read) */
static bandwidth measure_bandwidth(void) {
    size_t n = (size_t)128 << 20;
    float *a = tn_xalloc_floats(n), *b = tn_xalloc_floats(n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 0;
    bandwidth bw;
    bw.copy = best_of_5(copy_pass, a, b, n, 2.0 * n * sizeof(float), &bw.copy_cpu);
    bw.read = best_of_5(read_pass, a, b, n, 2.0 * n * sizeof(float), &bw.read_cpu);
    tn_free_aligned(a), tn_free_aligned(b);
    return bw;
}

static void random_ids(int32_t *ids, int n, int V, uint64_t seed) {
    tn_rng r;
    tn_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(tn_rng_next(&r) % (uint64_t)V);
}

static void prefill_vs_training(tn_model *m, int P, const char *name) {
    int32_t *ids = tn_xmalloc((size_t)P * sizeof *ids), *labels = tn_xmalloc((size_t)P * sizeof *labels);
    random_ids(ids, P, m->V, 1);
    memcpy(labels, ids, (size_t)P * sizeof *ids);
    float *logits = tn_xmalloc((size_t)m->V * sizeof *logits);
    tn_acts *a = tn_acts_create(m, 1, P, 0);
    double best_fwd = 1e30, best_pre = 1e30;
    for (int r = 0; r < 3; r++) {
        int64_t nv = 0;
        double t0 = tn_now();
        tn_model_eval_loss(m, a, ids, labels, 1, P, &nv);
        double t1 = tn_now();
        tn_kv *kv = tn_kv_create(m, 1, P + 1);
        tn_kv_seg seg = {.slot = 0, .n = P, .ids = ids};
        double t2 = tn_now();
        if (tn_kv_forward(m, kv, &seg, 1, logits) != 0) tn_die("%s", tn_errmsg());
        double t3 = tn_now();
        tn_kv_free(kv);
        best_fwd = t1 - t0 < best_fwd ? t1 - t0 : best_fwd;
        best_pre = t3 - t2 < best_pre ? t3 - t2 : best_pre;
    }
    printf("{\"impl\":\"tandem\",\"what\":\"prefill\",\"config\":\"%s\",\"threads\":%d,\"tokens\":%d,"
           "\"prefill_tok_s\":%.1f,\"training_forward_tok_s\":%.1f,\"ratio\":%.3f}\n",
           name, omp_get_max_threads(), P, P / best_pre, P / best_fwd, best_fwd / best_pre);
    fflush(stdout);
    tn_acts_free(a);
    free(ids), free(labels), free(logits);
}

/* The weight stream's share of a step: the model's backend with linear_rows timed (every product of a decode
 * step, lm_head included, goes through it; at batch <= 8 it reads W once, N K floats, whatever M). */
static const tn_backend *g_inner;
static double g_w_wall, g_w_cpu, g_w_bytes;

static void timed_linear_rows(float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M,
                              float alpha, float beta) {
    double t0 = tn_now(), c0 = cpu_now();
    g_inner->linear_rows(y, ldy, x, ldx, W, N, K, M, alpha, beta);
    g_w_wall += tn_now() - t0, g_w_cpu += (cpu_now() - c0) / omp_get_max_threads();
    g_w_bytes += (double)N * K * sizeof *W;
}

static void decode(tn_model *m, int P, int N, int B, bandwidth bw, const char *name) {
    tn_gen *g = tn_gen_create(m, B, P + N + 1);
    if (!g) tn_die("%s", tn_errmsg());
    int32_t *ids = tn_xmalloc((size_t)P * sizeof *ids);
    tn_sampling sp = tn_sampling_defaults();
    sp.do_sample = 0, sp.max_new = N;
    for (int b = 0; b < B; b++) {
        random_ids(ids, P, m->V, 10 + (uint64_t)b);
        if (tn_gen_start(g, b, ids, P, &sp, NULL, 0) != 0) tn_die("%s", tn_errmsg());
    }
    tn_gen_event *ev = tn_xcalloc((size_t)B, sizeof *ev);
    tn_gen_step(g, ev); /* the prefill, and the first token */
    int tokens = 0;
    g_w_wall = g_w_cpu = g_w_bytes = 0;
    double t0 = tn_now(), c0 = cpu_now();
    for (int k; (k = tn_gen_step(g, ev)) > 0;) tokens += k;
    double dt = tn_now() - t0, dc = (cpu_now() - c0) / omp_get_max_threads();
    double kv_bytes = 2.0 * m->L * m->KV * m->hd * sizeof(float) * (P + N / 2.0) * B;
    double bytes = (double)m->n_total * sizeof(float) + kv_bytes; /* per step: every weight once, every cached row */
    double steps = (double)tokens / B, limit = bw.copy / bytes * B, rlimit = bw.read / bytes * B;
    double w_ms = 1e3 * g_w_wall / steps, other_ms = 1e3 * dt / steps - w_ms, w_step = g_w_bytes / steps;
    /* the products' weights read at the read-only rate, the rest of the step as measured */
    double ideal = B / (w_step / bw.read + other_ms / 1e3);
    printf("{\"impl\":\"tandem\",\"what\":\"decode\",\"config\":\"%s\",\"threads\":%d,\"batch\":%d,\"prompt\":%d,"
           "\"new\":%d,\"decode_tok_s\":%.2f,\"ms_per_step\":%.2f,\"bytes_per_step\":%.4g,\"copy_GBps\":%.2f,"
           "\"bandwidth_limit_tok_s\":%.2f,\"fraction_of_limit\":%.3f,\"decode_cpu_GBps\":%.2f,\"copy_cpu_GBps\":%.2f,"
           "\"cpu_fraction_of_limit\":%.3f,\"read_GBps\":%.2f,\"read_limit_tok_s\":%.2f,\"fraction_of_read\":%.3f,"
           "\"read_cpu_GBps\":%.2f,\"cpu_fraction_of_read\":%.3f,\"weights_ms_per_step\":%.2f,"
           "\"other_ms_per_step\":%.2f,\"weights_GBps\":%.2f,\"weights_cpu_GBps\":%.2f,\"ideal_tok_s\":%.2f,"
           "\"ideal_fraction_of_limit\":%.3f}\n",
           name, omp_get_max_threads(), B, P, N, tokens / dt, 1e3 * dt / steps, bytes, bw.copy / 1e9, limit,
           tokens / dt / limit, bytes * steps / dc / 1e9, bw.copy_cpu / 1e9, bytes * steps / dc / bw.copy_cpu,
           bw.read / 1e9, rlimit, tokens / dt / rlimit, bw.read_cpu / 1e9, bytes * steps / dc / bw.read_cpu, w_ms,
           other_ms, w_step * steps / g_w_wall / 1e9, w_step * steps / g_w_cpu / 1e9, ideal, ideal / limit);
    fflush(stdout);
    free(ev), free(ids);
    tn_gen_free(g);
}

int tn_cmd_bench_generate(int argc, char **argv) {
    const char *cfg_path = NULL;
    int P = 128, B = 1, prefill = 512, n_new = 0, news[16];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--model-config") && i + 1 < argc) cfg_path = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--new") && i + 1 < argc) {
            for (char *s = argv[++i], *e; *s && n_new < 16; s = *e ? e + 1 : e) news[n_new++] = (int)strtol(s, &e, 10);
        } else {
            fprintf(stderr, "tandem: error: bench generate: unexpected argument '%s' (--model-config FILE --prompt P "
                            "--new N[,N...] --batch B --prefill P)\n", argv[i]);
            return 1;
        }
    }
    if (!n_new) news[n_new++] = 64;
    tn_model_config mc;
    if (!cfg_path || tn_model_config_load(cfg_path, &mc) != 0) {
        fprintf(stderr, "tandem: error: bench generate: %s\n", cfg_path ? tn_errmsg() : "--model-config FILE is required");
        return 1;
    }
    if (P < 1 || B < 1 || prefill < 0) {
        fprintf(stderr, "tandem: error: bench generate: --prompt, --batch >= 1, --prefill >= 0\n");
        return 1;
    }
    const char *slash = strrchr(cfg_path, '/');
    const char *name = slash ? slash + 1 : cfg_path;
    /* TANDEM_PROFILE=1: every backend call timed, the table on stderr at exit (backend_profile.h) */
    const tn_backend *cpu = tn_backend_profile_wanted() ? tn_backend_profiled(tn_backend_cpu()) : tn_backend_cpu();
    tn_model *m = tn_model_create(&mc, NULL, cpu);
    /* random weights of HF's scale (uniform, std ~0.02), drawn in parallel: the speed does not depend on them */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < m->n_total; i++) m->slab[i] = 0.07f * (tn_hash_uniform(42, i) - 0.5f);
    /* the products timed (decode's split of a step); every other entry is the CPU backend's own */
    static tn_backend timed;
    g_inner = m->be, timed = *m->be, timed.linear_rows = timed_linear_rows, m->be = &timed;
    bandwidth bw = measure_bandwidth();
    printf("{\"impl\":\"tandem\",\"what\":\"copy\",\"threads\":%d,\"copy_GBps\":%.2f,\"copy_cpu_GBps\":%.2f,"
           "\"read_GBps\":%.2f,\"read_cpu_GBps\":%.2f,\"read_over_copy\":%.3f,\"params\":%zu}\n",
           omp_get_max_threads(), bw.copy / 1e9, bw.copy_cpu / 1e9, bw.read / 1e9, bw.read_cpu / 1e9, bw.read / bw.copy,
           m->n_total);
    fflush(stdout);
    if (prefill) prefill_vs_training(m, prefill, name);
    /* the bandwidth again just before each decode run: on a shared machine it moves with the other processes' load */
    for (int i = 0; i < n_new; i++) decode(m, P, news[i], B, measure_bandwidth(), name);
    tn_model_free(m);
    return 0;
}
