/* cmd_plan.c -- `tandem plan CONFIG.yaml`: before a run, what each sync strategy would cost on the given machines
 * and link, and which to use (the cost model: trainer/plan.h).
 *
 * The compute of one rank's step comes from `--compute TFLOP/s` (hardware that is not here), `--step-time S`,
 * or is measured on this machine by running `tandem bench train` on the config's model, batch and sequence
 * length. The link comes from `--link` or from what `tandem bench allreduce` recorded between the hostfile's
 * machines (outputs/link_capacity.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "comm/compress.h"
#include "backend/backend.h"
#include "core/core.h"
#include "launch/hostfile.h"
#include "model/model_config.h"
#include "outputs/link_capacity.h"
#include "trainer/memory_check.h"
#include "trainer/plan.h"


typedef struct {
    const char *hostfile, *link, *model_config_path;
    int machines, ranks_per_machine, ranks_per_core, seq, json, n_overrides;
    double compute_tflops, step_time, latency_ms, memory_gb, link_cpu_ns, link_stretch_ns, refault_ns, copy_ns; /* < 0: measure */
    const char *local;
    char **overrides; /* CONFIG.yaml and key=value */
} plan_args;

static int parse_num(const char *opt, const char *v, double lo, double *out) {
    char *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(x >= lo) || !isfinite(x))
        return tn_err("%s expects a number >= %g, got '%s'", opt, lo, v ? v : "(nothing)");
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, plan_args *a) {
    memset(a, 0, sizeof *a);
    a->latency_ms = 0.1, a->refault_ns = -1, a->copy_ns = -1;
    a->overrides = tn_xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        int rc = 0, takes = 1;
        if (!strcmp(o, "--hostfile")) a->hostfile = v, rc = v ? 0 : tn_err("--hostfile needs a file");
        else if (!strcmp(o, "--link")) a->link = v, rc = v ? 0 : tn_err("--link needs a rate (100mbit, 10gbit)");
        else if (!strcmp(o, "--local")) a->local = v, rc = v ? 0 : tn_err("--local needs a rate (bytes/s, or 400gbit)");
        else if (!strcmp(o, "--machines")) rc = parse_num(o, v, 1, &x), a->machines = (int)x;
        else if (!strcmp(o, "--ranks-per-machine")) rc = parse_num(o, v, 1, &x), a->ranks_per_machine = (int)x;
        else if (!strcmp(o, "--ranks-per-core")) rc = parse_num(o, v, 1, &x), a->ranks_per_core = (int)x;
        else if (!strcmp(o, "--seq")) rc = parse_num(o, v, 1, &x), a->seq = (int)x;
        else if (!strcmp(o, "--compute")) rc = parse_num(o, v, 1e-6, &a->compute_tflops);
        else if (!strcmp(o, "--step-time")) rc = parse_num(o, v, 1e-9, &a->step_time);
        else if (!strcmp(o, "--latency-ms")) rc = parse_num(o, v, 0, &a->latency_ms);
        else if (!strcmp(o, "--link-cpu")) rc = parse_num(o, v, 0, &a->link_cpu_ns);
        else if (!strcmp(o, "--link-stretch")) rc = parse_num(o, v, 0, &a->link_stretch_ns);
        else if (!strcmp(o, "--refault-ns")) rc = parse_num(o, v, 0, &a->refault_ns);
        else if (!strcmp(o, "--copy-ns")) rc = parse_num(o, v, 0, &a->copy_ns);
        else if (!strcmp(o, "--memory")) rc = parse_num(o, v, 1e-6, &a->memory_gb);
        else if (!strcmp(o, "--json")) a->json = 1, takes = 0;
        else if (o[0] == '-' && o[1] == '-') rc = tn_err("unknown option '%s' (see tandem plan --help)", o);
        else a->overrides[a->n_overrides++] = argv[i], takes = 0;
        if (rc != 0) return rc;
        i += takes;
    }
    if (a->n_overrides == 0) return tn_err("expected CONFIG.yaml (see tandem plan --help)");
    if (a->hostfile && a->machines) return tn_err("give --hostfile or --machines, not both");
    return 0;
}

/* Machines, ranks and link from the hostfile (and the link measured between its machines) or the options. */
static int cluster_from_args(const plan_args *a, tn_plan_cluster *c, double *measured_at) {
    memset(c, 0, sizeof *c);
    c->machines = a->machines ? a->machines : 1, c->ranks_per_machine = a->ranks_per_machine ? a->ranks_per_machine : 1;
    c->link_latency_s = a->latency_ms / 1e3, c->local_Bps = TN_PLAN_LOCAL_BPS;
    c->link_cpu_s_per_byte = a->link_cpu_ns * 1e-9, c->ranks_per_core = a->ranks_per_core;
    c->link_stretch_s_per_byte = a->link_stretch_ns * 1e-9;
    *measured_at = 0;
    if (a->hostfile) {
        tn_hostfile hf;
        if (tn_hostfile_load(a->hostfile, &hf) != 0) return -1;
        c->machines = hf.n;
        if (!a->ranks_per_machine) c->ranks_per_machine = (hf.total_slots + hf.n - 1) / hf.n;
        const char **names = tn_xcalloc((size_t)hf.n, sizeof *names);
        for (int i = 0; i < hf.n; i++) names[i] = hf.hosts[i].name;
        double cpu = 0; /* the record's CPU a byte, unless --link-cpu says */
        int found = !a->link && hf.n > 1 ? tn_link_capacity_find(names, hf.n, &c->link_Bps, measured_at, &cpu) : 0;
        if (found == 1 && a->link_cpu_ns <= 0) c->link_cpu_s_per_byte = cpu;
        int n_hosts = hf.n;
        free(names);
        tn_hostfile_free(&hf);
        if (!a->link && n_hosts > 1 && found != 1)
            return tn_err("no link measurement between the machines of %s: run `tandem launch --hostfile %s "
                          "bench allreduce` first, or give --link 100mbit|1gbit|10gbit|BYTES/s", a->hostfile, a->hostfile);
    }
    if (a->link && tn_plan_parse_link("--link", a->link, &c->link_Bps) != 0) return -1;
    if (a->local && tn_plan_parse_link("--local", a->local, &c->local_Bps) != 0) return -1;
    if (c->machines > 1 && c->link_Bps <= 0)
        return tn_err("%d machines need a link rate: --link 100mbit|1gbit|10gbit|BYTES/s", c->machines);
    if (c->link_Bps <= 0) c->link_Bps = TN_PLAN_LOCAL_BPS;
    return 0;
}

/* Runs argv (no shell) and returns the "ms_step" of the JSON line it prints, or -1. */
static double run_bench(char *const argv[], int threads) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return close(fd[0]), close(fd[1]), -1;
    if (pid == 0) {
        char t[16];
        snprintf(t, sizeof t, "%d", threads);
        dup2(fd[1], 1), close(fd[0]), close(fd[1]);
        setenv("OMP_NUM_THREADS", t, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[8192];
    double ms = -1;
    while (f && fgets(line, sizeof line, f)) {
        const char *k = strstr(line, "\"ms_step\":");
        if (k) ms = strtod(k + 10, NULL);
    }
    if (f) fclose(f);
    else close(fd[0]);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    return ms;
}

/* One rank's step on this machine: `tandem bench train` on the config's model and micro-batch, times the
 * accumulation steps (the update, counted once per micro-batch there, is small beside them). */
static int measure_step(const tn_train_config *cfg, const char *model_config, int seq, int threads, double *seconds) {
    char batch[16], len[16], rank[16];
    snprintf(batch, sizeof batch, "%d", cfg->per_device_train_batch_size);
    snprintf(len, sizeof len, "%d", seq);
    snprintf(rank, sizeof rank, "%d", cfg->lora_rank);
    char *argv[20] = {"tandem", "bench", "train", "--model-config", (char *)model_config, "--batch", batch, "--seq", len,
                      "--steps", "3", "--warmup", "1"};
    int n = 13;
    if (cfg->finetuning_type == TN_FT_LORA) argv[n++] = "--lora-rank", argv[n++] = rank;
    if (cfg->gradient_checkpointing) argv[n++] = "--checkpointing";
    argv[n] = NULL;
    fprintf(stderr, "plan: measuring one rank's step on this machine (%d threads): tandem bench train --model-config %s "
            "--batch %s --seq %s%s ...\n", threads, model_config, batch, len, cfg->finetuning_type == TN_FT_LORA ? " --lora-rank" : "");
    double ms = run_bench(argv, threads);
    if (!(ms > 0))
        return tn_err("measuring the step with tandem bench train failed; give --compute TFLOP/s or "
                      "--step-time SECONDS instead");
    *seconds = ms / 1e3 * cfg->gradient_accumulation_steps;
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Seconds per float of the bf16, int8 and int4 encodings on this machine (best of 3 over 4M floats). */
static void measure_codecs(tn_plan_job *job) {
    const size_t n = (size_t)1 << 22;
    float *x = tn_xcalloc(n, sizeof *x), *e = tn_xcalloc(n, sizeof *e), *out = tn_xcalloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    void *buf = tn_xcalloc(tn_codec_bytes(TN_CODEC_FP32, n), 1);
    for (int k = TN_CODEC_BF16; k < TN_CODEC_N; k++) {
        double enc = 1e9, dec = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            tn_codec_encode((tn_codec)k, x, e, n, buf);
            double t1 = now_s();
            tn_codec_decode((tn_codec)k, buf, n, out, 1);
            double t2 = now_s();
            enc = fmin(enc, t1 - t0), dec = fmin(dec, t2 - t1);
        }
        job->encode_s[k] = enc / (double)n, job->decode_s[k] = dec / (double)n;
    }
    free(x), free(e), free(out), free(buf);
}

/* Seconds per byte to write a page the CPU backend released (cpu_release: MADV_DONTNEED, the kernel faults and
 * clears it again on the next write, as ZeRO's gradients and stage 3's gathered parameters are every step) beyond
 * writing it in place; best of 3 over 64 MB released in pieces of 1 MB: ZeRO releases a unit's chunks (a 4 MB
 * bucket split N ways, at unaligned offsets), which rarely hold a whole aligned 2 MB page, so they come back as
 * 4 KB pages. */
static double measure_refault(void) {
    const tn_backend *be = tn_backend_cpu();
    const size_t n = (size_t)1 << 24, piece = (size_t)1 << 18;
    float *p = be->alloc(n);
    memset(p, 1, n * sizeof *p); /* resident before the first timing */
    double in_place = 1e9, again = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        memset(p, rep + 2, n * sizeof *p);
        double t1 = now_s();
        for (size_t i = 0; i < n; i += piece) be->release(p + i, piece);
        memset(p, rep + 2, n * sizeof *p);
        double t2 = now_s();
        in_place = fmin(in_place, t1 - t0), again = fmin(again, t2 - t1);
    }
    be->free(p);
    return fmax(0, again - in_place) / (double)(n * sizeof *p);
}

/* Seconds per byte to copy on this core, what the in-machine sum (comm_shm.c: copy in, sum a slice, copy out)
 * streams per byte: best of 3 memcpy over 64 MB, both buffers resident first (the sum's slots are). */
static double measure_copy(void) {
    const size_t bytes = (size_t)64 << 20;
    char *a = tn_xmalloc(bytes), *b = tn_xmalloc(bytes);
    memset(a, 1, bytes), memset(b, 2, bytes);
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        memcpy(b, a, bytes);
        best = fmin(best, now_s() - t0);
        a[rep] = b[bytes - 1 - (size_t)rep]; /* the copy is used: not elided */
    }
    free(a), free(b);
    return best / (double)bytes;
}

/* FLOPs of one rank's step (PaLM's convention, as bench train counts them): 6 N per token for full training,
 * 4 N + 6 N_lora under LoRA (no weight gradients for the base), a recomputed forward with checkpointing,
 * attention's two products 12 L (H hd) S per token. */
static double step_flops(const tn_train_config *cfg, const tn_model_config *mc, const tn_memory_need *n, int seq) {
    double T = (double)cfg->per_device_train_batch_size * seq * cfg->gradient_accumulation_steps;
    double N = n->matmul_params, lora = cfg->finetuning_type == TN_FT_LORA;
    double per_token = lora ? 4 * N + 6 * n->lora_params : 6 * N;
    if (cfg->gradient_checkpointing) per_token += 2 * N;
    per_token += 12.0 * mc->num_hidden_layers * mc->num_attention_heads * mc->head_dim * seq;
    return per_token * T;
}

static void print_table(const tn_plan_row rows[TN_PLAN_N], int best, tn_plan_strategy mine) {
    printf("%-12s %9s %9s %9s %11s %12s %12s  %s\n", "strategy", "step s", "comm s", "waits s", "tokens/s",
           "memory/rank", "link MB/step", "keys");
    for (int s = 0; s < TN_PLAN_N; s++) {
        const tn_plan_row *r = &rows[s];
        printf("%-12s %9.3f %9.3f %9.3f %11.1f %9.2f GB%s %12.2f  %s%s%s\n", tn_plan_name(r->strategy), r->step_s,
               r->comm_s, r->exposed_s, r->tokens_per_s, r->memory_bytes / 1e9, r->fits ? "  " : " !",
               r->link_bytes / 1e6, tn_plan_keys(r->strategy), s == best ? "  <- best" : "",
               s == (int)mine ? "  (this config)" : "");
    }
}

static void print_json(const tn_plan_row rows[TN_PLAN_N], int best, tn_plan_strategy mine, double compute_s) {
    for (int s = 0; s < TN_PLAN_N; s++) {
        const tn_plan_row *r = &rows[s];
        printf("{\"strategy\":\"%s\",\"step_s\":%.6g,\"compute_s\":%.6g,\"comm_s\":%.6g,\"exposed_s\":%.6g,"
               "\"tokens_per_s\":%.6g,\"memory_bytes\":%.6g,\"fits\":%s,\"link_bytes\":%.6g,\"best\":%s,\"config\":%s}\n",
               tn_plan_name(r->strategy), r->step_s, compute_s, r->comm_s, r->exposed_s, r->tokens_per_s,
               r->memory_bytes, r->fits ? "true" : "false", r->link_bytes, s == best ? "true" : "false",
               s == (int)mine ? "true" : "false");
    }
}

/* The plan predicts a step's time; what a step learns decides the time to a loss. Over a slow link the recipe
 * that reached a target eval loss soonest, measured against one machine's best (docs/performance.md, "Time to a
 * target eval loss": bench/ttq.sh, two machines over 100 Mbit/s, a small Qwen3). */
static void print_quality_recipe(int lora) {
    if (lora)
        printf("recipe: for time to a loss, LoRA over 100 Mbit/s was soonest with sync_mode: diloco, "
               "diloco_inner_steps: 2, comm_compression: int4, each machine one machine's per-device batch at 1.4x "
               "its learning rate over a cosine 0.55x as long (1.84x sooner than one machine's best, median of 21 "
               "runs, 1.59-1.99x; docs/performance.md, time to quality)\n");
    else
        printf("recipe: for time to a loss, full training over 100 Mbit/s was soonest with sync_mode: diloco, "
               "diloco_inner_steps: 2, comm_compression: int8, each machine keeping one machine's per-device batch "
               "and learning rate (1.83x sooner than one machine's best; docs/performance.md, time to quality)\n");
}

/* Why the best one wins, in a few lines. */
static void print_reasons(const tn_plan_row rows[TN_PLAN_N], int best, tn_plan_strategy mine, const tn_plan_cluster *c,
                          double compute_s, double rank_mem, int lora) {
    const tn_plan_row *b = &rows[best], *ddp = &rows[TN_PLAN_DDP];
    printf("best: %s (%s): %.3f s a step, %.1f tokens/s\n", tn_plan_name(b->strategy), tn_plan_keys(b->strategy),
           b->step_s, b->tokens_per_s);
    if (!ddp->fits)
        printf("why: ddp needs %.2f GB a rank, more than the %.2f GB there are; sharding the trainable state fits\n",
               ddp->memory_bytes / 1e9, rank_mem / 1e9);
    else if (c->machines > 1 && ddp->exposed_s > 0.25 * compute_s)
        printf("why: the link is the bottleneck: ddp would wait %.3f s a step for %.1f MB each way over %.1f MB/s, "
               "against %.3f s of compute\n", ddp->exposed_s, ddp->link_bytes / 1e6, c->link_Bps / 1e6, compute_s);
    else
        printf("why: compute-bound: the exchange (%.3f s) hides behind backward; the simplest strategy within 5%% wins\n",
               ddp->comm_s);
    const tn_plan_row *m = &rows[mine];
    if ((int)mine != best)
        printf("this config runs %s: %.3f s a step predicted; %s is predicted %.2fx faster\n", tn_plan_name(mine),
               m->step_s, tn_plan_name(b->strategy), m->step_s / b->step_s);
    if (b->strategy >= TN_PLAN_DDP_BF16 && b->strategy != TN_PLAN_ZERO1 && b->strategy != TN_PLAN_ZERO2 &&
        b->strategy != TN_PLAN_ZERO3)
        printf("note: compression and DiLoCo change what a step learns, not only its time: the time to a loss is "
               "measured in docs/performance.md (time to quality)\n");
    if (c->machines > 1 && b->strategy >= TN_PLAN_DILOCO) print_quality_recipe(lora);
}

int tn_cmd_plan(int argc, char **argv) {
    plan_args a;
    tn_train_config cfg;
    tn_model_config mc;
    tn_plan_cluster c;
    double measured_at = 0;
    int rc = parse_args(argc, argv, &a);
    if (rc == 0) rc = cluster_from_args(&a, &c, &measured_at);
    if (rc == 0) rc = tn_cli_load_train_config(a.n_overrides, a.overrides, c.machines * c.ranks_per_machine, &cfg);
    char *mpath = NULL;
    if (rc == 0) {
        mpath = cfg.model_name_or_path[0] ? tn_path_join(cfg.model_name_or_path, "config.json") : tn_xstrdup(cfg.model_config);
        rc = tn_model_config_load(mpath, &mc);
    }
    if (rc != 0) {
        fprintf(stderr, "tandem plan: %s\n", tn_errmsg());
        free(a.overrides), free(mpath);
        return 1;
    }
    int seq = a.seq ? a.seq : cfg.cutoff_len;
    tn_memory_need need;
    tn_memory_estimate(&cfg, &mc, seq, &need);
    int lora = cfg.finetuning_type == TN_FT_LORA;
    tn_plan_job job;
    tn_plan_job_from_config(&cfg, &need, seq, &job);
    tn_plan_job_set_groups(&job, &cfg, &mc, seq);
    double flops = step_flops(&cfg, &mc, &need, seq), rank_mem = a.memory_gb * 1e9;
    if (a.compute_tflops <= 0) measure_codecs(&job); /* a GPU encodes at its memory bandwidth: negligible */
    if (a.refault_ns >= 0) job.refault_s_per_byte = a.refault_ns * 1e-9;
    else if (a.compute_tflops <= 0) job.refault_s_per_byte = measure_refault(); /* a GPU's memory stays allocated */
    if (a.copy_ns >= 0) job.copy_s_per_byte = a.copy_ns * 1e-9;
    else if (a.compute_tflops <= 0 && c.ranks_per_machine > 1) job.copy_s_per_byte = measure_copy(); /* GPUs: NCCL */
    const char *source = "given";
    if (a.compute_tflops > 0) job.zero_shared = 0; /* GPUs: device memory is not mapped between processes */
    if (a.compute_tflops > 0) job.compute_s = flops / (a.compute_tflops * 1e12);
    else if (a.step_time > 0) job.compute_s = a.step_time;
    else {
        int limited = 0;
        double avail = tn_memory_available(&limited);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = cores > c.ranks_per_machine ? (int)(cores / c.ranks_per_machine) : 1;
        if (avail > 0 && need.param_bytes + need.act_bytes > 0.5 * avail)
            rc = tn_err("measuring needs %.1f GB, more than half of this machine's %.1f GB: give --compute "
                        "TFLOP/s (the GPUs' sustained rate) or --step-time SECONDS",
                        (need.param_bytes + need.act_bytes) / 1e9, avail / 1e9);
        if (rc == 0) rc = measure_step(&cfg, mpath, seq, threads, &job.compute_s);
        if (rank_mem <= 0 && avail > 0) rank_mem = avail / c.ranks_per_machine;
        source = "measured here";
    }
    if (rc != 0) {
        fprintf(stderr, "tandem plan: %s\n", tn_errmsg());
        free(a.overrides), free(mpath);
        return 1;
    }
    c.rank_memory_bytes = rank_mem;
    tn_plan_row rows[TN_PLAN_N];
    tn_plan_predict(&job, &c, rows);
    int best = tn_plan_best(rows);
    tn_plan_strategy mine = tn_plan_config_strategy(&cfg);
    if (a.json) print_json(rows, best, mine, job.compute_s);
    else {
        printf("tandem plan: %s, %.4g M trainable parameters (%s), %d machine(s) x %d rank(s), link %.2f MB/s each way%s "
               "(%.3g ns of CPU a byte, %.3g ns of compute stretch a byte under DDP's backward), "
               "compute %.3f s a step (%s; %.3g TFLOP a step), %d tokens a sequence, "
               "%.3g ns a byte to write a released page again, %.3g ns a byte to copy through shared memory\n",
               cfg.source_path, need.trainable / 1e6, lora ? "LoRA" : "full", c.machines, c.ranks_per_machine,
               c.link_Bps / 1e6, measured_at > 0 ? " (measured by bench allreduce)" : "", c.link_cpu_s_per_byte * 1e9,
               c.link_stretch_s_per_byte * 1e9,
               job.compute_s, source, flops / 1e12, seq, job.refault_s_per_byte * 1e9, job.copy_s_per_byte * 1e9);
        print_table(rows, best, mine);
        if (best < 0) printf("none fits in %.2f GB a rank: lower per_device_train_batch_size or cutoff_len, or use LoRA\n", rank_mem / 1e9);
        else print_reasons(rows, best, mine, &c, job.compute_s, rank_mem, lora);
    }
    free(a.overrides), free(mpath);
    return best < 0 ? 2 : 0;
}
