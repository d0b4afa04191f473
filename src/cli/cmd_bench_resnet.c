/* cmd_bench_resnet.c -- `tandem bench resnet`: timed training steps of torchvision's ResNet-18 (or -34) on random
 * CIFAR-sized batches; one JSON line. bench/bench_resnet_dp.py runs it against PyTorch DDP (gloo).
 *
 * Step = the image trainer's (image_job.c) on a fixed random batch: DDP's buffer broadcast, forward + cross-entropy
 * + backward with the gradient all-reduce started in buckets during backward (trainer/image_sync.h, the trainer's
 * own exchange), clip norm, AdamW. --dist: one rank of a data-parallel run under mpirun (the same per-rank batch on
 * every rank: weak scaling). images/s = batch x ranks / median step. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "core/core.h"
#include "model/resnet.h"
#include "trainer/image_sync.h"

typedef struct {
    int B, steps, warmup, dist, layers34;
    double bucket_mb; /* 0: one all-reduce after backward */
} rn_opts;

static int parse(int argc, char **argv, rn_opts *o) {
    *o = (rn_opts){.B = 64, .steps = 10, .warmup = 2, .bucket_mb = 4}; /* train's ddp_bucket_cap_mb */
    for (int i = 0; i < argc; i++) {
        int more = i + 1 < argc;
        char *end = NULL;
        if (strcmp(argv[i], "--batch") == 0 && more) o->B = (int)strtol(argv[++i], &end, 10);
        else if (strcmp(argv[i], "--steps") == 0 && more) o->steps = (int)strtol(argv[++i], &end, 10);
        else if (strcmp(argv[i], "--warmup") == 0 && more) o->warmup = (int)strtol(argv[++i], &end, 10);
        else if (strcmp(argv[i], "--bucket-mb") == 0 && more) o->bucket_mb = strtod(argv[++i], &end);
        else if (strcmp(argv[i], "--no-overlap") == 0) o->bucket_mb = 0;
        else if (strcmp(argv[i], "--resnet34") == 0) o->layers34 = 1;
        else if (strcmp(argv[i], "--dist") == 0) o->dist = 1;
        else return tn_err("bench resnet: unexpected argument '%s'", argv[i]);
        if (end && (end == argv[i] || *end))
            return tn_err("bench resnet: %s expects a number, got '%s'", argv[i - 1], argv[i]);
    }
    if (o->B < 2 || o->steps < 1 || o->warmup < 0 || !(o->bucket_mb == 0 || o->bucket_mb >= 0.004))
        return tn_err("bench resnet: --batch must be >= 2 (batch norm), --steps >= 1, --warmup >= 0, --bucket-mb 0 "
                      "(no overlap) or >= 0.004");
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    tn_resnet *m;
    tn_image_sync *dp;
    float *img, *mo, *v;
    int32_t *lab;
    int B, world;
} rn_bench;

/* one step as image_job.c's train_step + grad_clip + optimizer_step; its loss */
static int step(rn_bench *r, const tn_backend *be, int t, double *loss) {
    size_t n = tn_resnet_n_params(r->m);
    be->zero(tn_resnet_grad(r->m), n);
    if (tn_image_sync_buffers(r->dp)) return -1;
    tn_image_sync_arm(r->dp);
    *loss = tn_resnet_forward_backward(r->m, r->img, r->lab, r->B, 1.0f / (float)(r->B * r->world), 0.0f, NULL) / r->B;
    if (tn_image_sync_finish(r->dp)) return -1;
    double norm = sqrt(be->sumsq(tn_resnet_grad(r->m), n));
    if (norm > 1.0) be->scale(tn_resnet_grad(r->m), n, (float)(1.0 / (norm + 1e-6))); /* max_grad_norm 1 */
    be->adamw(tn_resnet_params(r->m), tn_resnet_grad(r->m), r->mo, r->v, n, 1e-3, 0.9, 0.999, 1e-8, 0.0,
              1.0 - pow(0.9, t), 1.0 - pow(0.999, t));
    return 0;
}

static int run(const rn_opts *o, tn_comm *comm) {
    const tn_comm_info *in = comm ? tn_comm_get_info(comm) : NULL;
    tn_resnet_config c;
    const char *json = o->layers34 ? "{\"model_type\": \"resnet\", \"layers\": [3,4,6,3], \"num_classes\": 10}"
                                   : "{\"model_type\": \"resnet\", \"layers\": [2,2,2,2], \"num_classes\": 10}";
    if (tn_resnet_config_parse(json, "bench resnet", &c)) return -1;
    const tn_backend *be = tn_backend_cpu();
    rn_bench r = {.B = o->B, .world = in ? in->size : 1};
    if (!(r.m = tn_resnet_create(&c, be))) return -1;
    tn_resnet_init_random(r.m, 1); /* the same weights on every rank, where train's broadcast leaves them */
    int rc = tn_resnet_reserve(r.m, o->B, 32, 32);
    if (rc == 0 && !(r.dp = tn_image_sync_create(comm, r.m, (size_t)(o->bucket_mb * 1048576.0)))) rc = -1;
    size_t n = tn_resnet_n_params(r.m), ni = (size_t)o->B * 3 * 32 * 32;
    r.img = tn_xmalloc(ni * sizeof *r.img), r.lab = tn_xmalloc((size_t)o->B * sizeof *r.lab);
    r.mo = be->alloc(n), r.v = be->alloc(n);
    be->zero(r.mo, n), be->zero(r.v, n);
    tn_rng g;
    tn_rng_seed(&g, 2 + (uint64_t)(in ? in->rank : 0)); /* each rank its own batch */
    for (size_t i = 0; i < ni; i++) r.img[i] = (float)tn_rng_normal(&g);
    for (int i = 0; i < o->B; i++) r.lab[i] = (int32_t)(tn_rng_next(&g) % 10);
    double *ms = tn_xmalloc((size_t)o->steps * sizeof *ms), *wait = tn_xmalloc((size_t)o->steps * sizeof *wait);
    double *first = tn_xmalloc((size_t)o->steps * sizeof *first), loss = 0;
    for (int s = 0; rc == 0 && s < o->warmup + o->steps; s++) {
        double t0 = tn_now();
        rc = step(&r, be, s + 1, &loss);
        if (s < o->warmup) continue;
        ms[s - o->warmup] = 1e3 * (tn_now() - t0);
        wait[s - o->warmup] = 1e3 * tn_image_sync_get_stats(r.dp)->wait_s;
        first[s - o->warmup] = 1e3 * tn_image_sync_get_stats(r.dp)->first_ready_s;
    }
    if (rc == 0 && (!in || in->rank == 0)) {
        qsort(ms, (size_t)o->steps, sizeof *ms, cmp_double);
        qsort(wait, (size_t)o->steps, sizeof *wait, cmp_double);
        qsort(first, (size_t)o->steps, sizeof *first, cmp_double);
        double med = ms[o->steps / 2];
        printf("{\"impl\":\"tandem\",\"config\":\"%s\",\"threads\":%d,\"batch\":%d,\"steps\":%d,\"ms_step\":%.2f,"
               "\"ms_min\":%.2f,\"images_s\":%.1f,\"ranks\":%d,\"nodes\":%d,\"grad_mb\":%.2f,\"buckets\":%d,"
               "\"comm_wait_ms\":%.2f,\"first_grad_ms\":%.2f,\"loss\":%.5f}\n",
               o->layers34 ? "resnet34" : "resnet18", omp_get_max_threads(), o->B, o->steps, med, ms[0],
               o->B * r.world / (med / 1e3), r.world, in ? in->n_nodes : 1, n * 4.0 / 1048576.0,
               tn_image_sync_get_stats(r.dp)->n_buckets, wait[o->steps / 2], first[o->steps / 2], loss);
        fflush(stdout);
    }
    free(ms), free(wait), free(first), free(r.img), free(r.lab);
    be->free(r.mo), be->free(r.v);
    tn_image_sync_free(r.dp);
    tn_resnet_free(r.m);
    return rc;
}

int tn_cmd_bench_resnet(int argc, char **argv) {
    rn_opts o;
    int rc = parse(argc, argv, &o);
    tn_comm *comm = NULL;
    if (rc == 0 && o.dist && !(comm = tn_comm_init(NULL, NULL))) rc = -1;
    if (rc == 0) rc = run(&o, comm);
    if (comm) tn_comm_finalize(comm);
    if (rc) fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
    return rc ? 1 : 0;
}
