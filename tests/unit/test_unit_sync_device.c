/* test_unit_sync_device -- every gradient sync mode (grad_sync.h: all-reduce, reduce-scatter, reduce-scatter with
 * release, compressed exchange, machine-local sum) and DiLoCo's rounds (diloco.h: plain, Nesterov, overlapped; swap,
 * save) on parameters and gradients in device memory: a fake device (fake_device.h) keeps them PROT_NONE outside its
 * copies, so host code that reads or writes them directly (a memcpy, a loop, MPI or shared memory on a device
 * pointer) crashes the test. The model is a bare slab with a backend whose memory functions are the fake device's
 * copies; every other kernel is absent (NULL), so calling one fails too. Results are closed forms: gradients
 * x_r[i] = 4096 (r+1) + (i mod 4093), summed exactly in fp32; DiLoCo's outer steps on small dyadic values, computed
 * here with the same fp32 operations in the same order (exact). Runs as a singleton under ctest (DiLoCo on one
 * machine; the gradient modes need two ranks) and with 2..4 ranks, one or several faked machines, from
 * tests/cli/test_comm_device.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/exchange.h"
#include "core/core.h"
#include "fake_device.h"
#include "model/model.h"
#include "testlib.h"
#include "trainer/diloco.h"
#include "trainer/grad_sync.h"
#include "trainer/optimizer.h"

static int R, P, M, NODE;
static int *node_of; /* [P] machine of each rank */

static float x_of(int r, size_t i) { return (float)(4096 * (r + 1) + (int)(i % 4093)); }

/* ---- the fake backend: memory functions only */
static void fb_upload(float *dst, const float *host, size_t n) { fd_to_device(dst, host, n * sizeof *dst); }
static void fb_download(float *host, const float *src, size_t n) { fd_to_host(host, src, n * sizeof *host); }
static void fb_zero(float *p, size_t n) {
    float *z = tn_xcalloc(n ? n : 1, sizeof *z);
    fd_to_device(p, z, n * sizeof *z);
    free(z);
}
static const tn_backend fake_backend = {.name = "fake", .upload = fb_upload, .download = fb_download,
                                        .zero = fb_zero, .release = fb_zero};

static float *dev_put(const float *h, size_t n) {
    float *d = fd_alloc(n * sizeof *d);
    fd_quiet = 1;
    fd_to_device(d, h, n * sizeof *d);
    fd_quiet = 0;
    return d;
}

static float *dev_get(const float *d, size_t n) {
    float *h = tn_xmalloc((n + 1) * sizeof *h);
    fd_quiet = 1;
    fd_to_host(h, d, n * sizeof *h);
    fd_quiet = 0;
    return h;
}

/* ---- gradient sync */

enum { N_GRAD = 200003 };

static float want_grad(tn_grad_mode mode, size_t i, size_t own_lo, size_t own_hi) {
    float s = 0;
    for (int r = 0; r < P; r++)
        if (mode != TN_GRAD_LOCAL || node_of[r] == NODE) s += x_of(r, i);
    if (mode == TN_GRAD_REDUCE_SCATTER_RELEASE && (i < own_lo || i >= own_hi)) return 0; /* released: zero */
    return s;
}

static void test_grad_mode(tn_comm *c, tn_grad_mode mode) {
    static const char *const names[] = {"all-reduce", "reduce-scatter", "reduce-scatter-release", "compressed",
                                        "machine-local"};
    size_t n = N_GRAD;
    float *h = tn_xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = x_of(R, i);
    tn_model m;
    memset(&m, 0, sizeof m);
    m.be = &fake_backend, m.n_trainable = m.n_total = n;
    m.grad = dev_put(h, n);
    tn_grad_sync *s = mode == TN_GRAD_COMPRESSED ? tn_grad_sync_create_compressed(c, &m, 1 << 16, TN_CODEC_FP32)
                                                 : tn_grad_sync_create(c, &m, 1 << 16, mode);
    CHECKF(s != NULL, "%s: %s", names[mode], tn_errmsg());
    if (!s) return;
    tn_grad_sync_arm(s);
    /* backward hands the gradients over from the last layer's down, in three pieces */
    if (m.grad_ready) m.grad_ready(m.grad_ready_ctx, n - n / 3), m.grad_ready(m.grad_ready_ctx, n / 2);
    CHECKF(tn_grad_sync_finish(s) == 0, "%s: %s", names[mode], tn_errmsg());
    size_t lo = 0, len = n;
    if (mode == TN_GRAD_REDUCE_SCATTER || mode == TN_GRAD_REDUCE_SCATTER_RELEASE) tn_comm_shard(c, n, R, &lo, &len);
    float *got = dev_get(m.grad, n);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if ((mode == TN_GRAD_REDUCE_SCATTER_RELEASE || (i >= lo && i < lo + len)) &&
            got[i] != want_grad(mode, i, lo, lo + len))
            bad = i;
    CHECKF(bad == n, "%s: first wrong gradient %zu: %g, expected %g", names[mode], bad, bad < n ? got[bad] : 0,
           bad < n ? want_grad(mode, bad, lo, lo + len) : 0);
    tn_grad_sync_free(s);
    free(got), free(h);
    fd_free(m.grad);
}

/* ---- DiLoCo */

enum { N_PAR = 70001, H = 2 };
static const float LR = 0.5f, MU = 0.5f;

static float x0_of(size_t i) { return (float)(i % 1000); }
/* what machine k's inner steps move parameter i by in a round (the same on every rank of the machine) */
static float delta_of(int k, size_t i) { return (float)((k + 1) * (int)(i % 5 + 1)); }

/* The mean of the machines' moves as the exchange forms it: summed in machine order, times 1/M. */
static float mean_of(size_t i) {
    float s = delta_of(0, i);
    for (int k = 1; k < M; k++) s += delta_of(k, i);
    return s * (1.0f / (float)M);
}

/* One inner round on this machine: the parameters move by -delta (uploaded as training would leave them). */
static void train_round(tn_model *m, tn_diloco *d, int *step, int last_round) {
    float *x = dev_get(m->slab, N_PAR);
    for (size_t i = 0; i < N_PAR; i++) x[i] -= delta_of(NODE, i);
    fd_quiet = 1;
    fb_upload(m->slab, x, N_PAR);
    fd_quiet = 0;
    free(x);
    for (int k = 0; k < H; k++) {
        ++*step;
        tn_diloco_step st = {.step = *step, .loss_sum = 1, .tokens = 1, .seen = 1, .grad_norm = 1};
        CHECKF(tn_diloco_step_done(d, &st, last_round && k == H - 1) == 0, "step %d: %s", *step, tn_errmsg());
    }
}

static void check_params(const tn_model *m, const float *want, const char *what) {
    float *x = dev_get(m->slab, N_PAR);
    size_t bad = N_PAR;
    for (size_t i = 0; i < N_PAR && bad == N_PAR; i++)
        if (x[i] != want[i]) bad = i;
    CHECKF(bad == N_PAR, "%s: first wrong parameter %zu: %g, expected %g", what, bad, bad < N_PAR ? x[bad] : 0,
           bad < N_PAR ? want[bad] : 0);
    free(x);
}

/* Two rounds; the outer optimizer as diloco.h states it: v = mu v + mean; g -= lr (mean + mu v) (Nesterov) or
 * lr v. Overlapped, round 1 ends with x = g - D and round 2 applies round 1's mean, then (the last round waits)
 * its own. */
static void test_diloco(tn_comm *c, int nesterov, int overlap) {
    char what[64];
    snprintf(what, sizeof what, "diloco (nesterov %d, overlap %d)", nesterov, overlap);
    float *x0 = tn_xmalloc(N_PAR * sizeof *x0), *g = tn_xmalloc(N_PAR * sizeof *g), *v = tn_xcalloc(N_PAR, sizeof *v);
    for (size_t i = 0; i < N_PAR; i++) x0[i] = x0_of(i), g[i] = x0[i];
    tn_model m;
    memset(&m, 0, sizeof m);
    m.be = &fake_backend, m.n_trainable = m.n_total = N_PAR;
    m.slab = dev_put(x0, N_PAR);
    tn_diloco_config cfg = {.inner_steps = H, .outer_lr = LR, .outer_momentum = MU, .nesterov = nesterov,
                            .overlap = overlap, .codec = TN_CODEC_FP32};
    tn_diloco *d = tn_diloco_create(c, &m, &cfg);
    CHECKF(d != NULL, "%s: %s", what, tn_errmsg());
    if (!d) return;
    tn_diloco_start(d, 0);
    int step = 0;
    for (int round = 0; round < 2; round++) {
        train_round(&m, d, &step, round == 1);
        for (int k = 0; k < (overlap && round == 1 ? 2 : overlap ? 0 : 1); k++)
            for (size_t i = 0; i < N_PAR; i++) {
                float mean = mean_of(i), vi = MU * v[i] + mean;
                v[i] = vi;
                g[i] -= nesterov ? LR * (mean + MU * vi) : LR * vi;
            }
        if (overlap && round == 0) { /* x = g - D: the parameters go on from there */
            float *x = tn_xmalloc(N_PAR * sizeof *x);
            for (size_t i = 0; i < N_PAR; i++) x[i] = g[i] - delta_of(NODE, i);
            check_params(&m, x, what);
            free(x);
        } else {
            check_params(&m, g, what);
        }
    }
    /* swap: the consensus g in the parameters and back; the parameters are g after the last round, so move them */
    float *x = dev_get(m.slab, N_PAR);
    for (size_t i = 0; i < N_PAR; i++) x[i] += 0.25f;
    fd_quiet = 1;
    fb_upload(m.slab, x, N_PAR);
    fd_quiet = 0;
    tn_diloco_swap(d);
    check_params(&m, g, "swap");
    tn_diloco_swap(d);
    check_params(&m, x, "swap back");
    /* save: the machine's parameters and (machines after the first) the optimizer's moments, from device memory */
    float *mom = tn_xmalloc(N_PAR * sizeof *mom);
    for (size_t i = 0; i < N_PAR; i++) mom[i] = (float)i;
    tn_span all = {0, N_PAR};
    tn_adamw opt = {.be = &fake_backend, .spans = &all, .n_spans = 1, .n = N_PAR, .m = dev_put(mom, N_PAR),
                    .v = dev_put(x0, N_PAR)};
    tn_state *mine = tn_state_new(), *job = tn_state_new();
    CHECK(tn_diloco_save(d, &opt, mine, job) == 0);
    const tn_comm_info *in = tn_comm_get_info(c);
    if (in->local_rank == 0) {
        size_t n = 0;
        const float *p = tn_state_get(mine, "machine.diloco.params", ST_F32, &n);
        CHECK(p && n == N_PAR && memcmp(p, x, N_PAR * sizeof *x) == 0);
        const float *em = tn_state_get(mine, "machine.diloco.exp_avg", ST_F32, &n);
        if (in->node > 0) CHECK(em && n == N_PAR && memcmp(em, mom, N_PAR * sizeof *mom) == 0);
    }
    tn_state_free(mine), tn_state_free(job);
    tn_diloco_free(d);
    fd_free(opt.m), fd_free(opt.v), fd_free(m.slab);
    free(x0), free(g), free(v), free(x), free(mom);
}

int main(int argc, char **argv) {
    tn_comm *c = tn_comm_init(&argc, &argv);
    if (!c) {
        fprintf(stderr, "test_unit_sync_device: %s\n", tn_errmsg());
        return 1;
    }
    const tn_comm_info *in = tn_comm_get_info(c);
    R = in->rank, P = in->size, M = in->n_nodes, NODE = in->node;
    node_of = tn_xmalloc((size_t)P * sizeof *node_of);
    CHECK(tn_comm_allgather(c, &NODE, sizeof NODE, node_of) == 0);
    tn_comm_device fake = {.name = "fake", .owns = fd_owns, .to_host = fd_to_host, .to_device = fd_to_device,
                           .queue = NULL, .device = R};
    CHECKF(tn_comm_attach_device(c, &fake, NULL, 0) == 0, "%s", tn_errmsg());
    for (int mode = TN_GRAD_ALLREDUCE; mode <= TN_GRAD_LOCAL; mode++) test_grad_mode(c, (tn_grad_mode)mode);
    for (int k = 0; k < 3; k++) test_diloco(c, k == 1, k == 2);
    /* with several ranks every mode moved gradients through the fake device's copies */
    if (P > 1) CHECKF(fd_to_host_bytes > 0 && fd_to_device_bytes > 0, "no staging: %zu bytes out, %zu in",
                      fd_to_host_bytes, fd_to_device_bytes);
    int64_t f[2] = {tl_failures, tl_checks};
    if (tn_comm_allreduce_max_i64(c, f, 2) != 0) f[0] = 1;
    if (tl_failures) fprintf(stderr, "test_unit_sync_device: rank %d: %d of %d checks failed\n", R, tl_failures, tl_checks);
    if (R == 0)
        printf("test_unit_sync_device: size %d, %d machine(s), backend %s: %d checks, %lld failed (worst rank)\n", P, M,
               tn_comm_backend_name(c), tl_checks, (long long)f[0]);
    free(node_of);
    tn_comm_finalize(c);
    return f[0] ? 1 : 0;
}
