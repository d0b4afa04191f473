/* test_unit_diloco -- DiLoCo's outer step (diloco.h) against sums written down here: the mean of the machines'
 * pseudo-gradients, weighted by the samples each machine trained in the round (balance_ranks).
 *
 * Runs as a singleton under ctest (one machine: the outer step with lr 1, momentum 0 is the round's own
 * progress) and under mpirun from tests/cli/test_mpi_comm.sh on 2 and 3 faked machines (TANDEM_NODE_NAME).
 * Machine m's pseudo-gradient is D_m[i] = (m + 1) ((i mod 7) - 3) and its samples n_m of a global batch B, so
 * after a round with outer lr 1 and momentum 0 the consensus is g0 - sum_m (n_m / B) D_m (integers and
 * quarters: exact in fp32 on two machines, a few roundings of the exchange's 1/M on three). An unweighted
 * mean, a weight that leaks into the machine's own progress, or one round's samples carried into the next
 * all miss these values by whole units. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/core.h"
#include "model/model.h"
#include "testlib.h"
#include "trainer/diloco.h"

#define N 1000

static int M, NODE;

static float g0_of(size_t i) { return (float)(i % 13); }
static float d_of(int m, size_t i, int round) { return (float)((m + 1) * (round + 1)) * (float)((int)(i % 7) - 3); }

#define B 24 /* the global batch: divisible by 1-4 machines */

/* The machines' samples in a round: uneven, summing to B (2 machines: 15 + 9, then 6 + 18; 3: 3 6 15, rotated). */
static double samples_of(int m, int round, int even) {
    if (even || M == 1 || M > 3) return B / M;
    if (M == 2) return round == 0 ? (m == 0 ? 15 : 9) : (m == 0 ? 6 : 18);
    static const double three[3] = {3, 6, 15};
    return three[(m + round) % 3];
}

/* sum_m (n_m / B) D_m[i] for round `round`, in double */
static double mean_of(size_t i, int round, int even) {
    double s = 0;
    for (int m = 0; m < M; m++) s += samples_of(m, round, even) / B * d_of(m, i, round);
    return s;
}

static tn_diloco_step step_of(int step, int round, int even) {
    return (tn_diloco_step){.step = step, .loss_sum = 1, .tokens = 1, .seen = 1, .grad_norm = 1,
                            .samples = samples_of(NODE, round, even), .batch = B};
}

/* The worst |params - expected| over the slab. */
static double worst(const float *p, const double *want) {
    double w = 0;
    for (size_t i = 0; i < N; i++) w = fmax(w, fabs(p[i] - want[i]));
    return w;
}

/* One round, synchronous (overlap off, the last step): the consensus moves by the weighted mean. */
static void test_sync_round(tn_comm *c, tn_model *m, int even) {
    tn_diloco_config dc = {.inner_steps = 1, .outer_lr = 1, .outer_momentum = 0, .codec = TN_CODEC_FP32};
    for (size_t i = 0; i < N; i++) m->slab[i] = g0_of(i);
    tn_diloco *d = tn_diloco_create(c, m, &dc);
    CHECKF(d != NULL, "create: %s", tn_errmsg());
    if (!d) return;
    tn_diloco_start(d, 0);
    for (size_t i = 0; i < N; i++) m->slab[i] = g0_of(i) - d_of(NODE, i, 0); /* the round's local training */
    tn_diloco_step st = step_of(1, 0, even);
    CHECKF(tn_diloco_step_done(d, &st, 1) == 0, "step_done: %s", tn_errmsg());
    double want[N];
    for (size_t i = 0; i < N; i++) want[i] = g0_of(i) - mean_of(i, 0, even);
    double w = worst(m->slab, want), tol = M <= 2 ? 0 : 4e-6; /* |values| < 40: fp32's 2^-24 relative a few times */
    CHECKF(w <= tol, "%s shares, one synchronous round: worst |g - expected| %g (> %g)", even ? "equal" : "uneven", w, tol);
    tn_diloco_free(d);
}

/* Two rounds one round late: after the first the machine goes on from g - D_m (its own progress, unweighted);
 * the second (the last) applies the first round's weighted mean, then its own with that round's samples. */
static void test_overlap_rounds(tn_comm *c, tn_model *m) {
    tn_diloco_config dc = {.inner_steps = 1, .outer_lr = 1, .outer_momentum = 0, .overlap = 1, .codec = TN_CODEC_FP32};
    for (size_t i = 0; i < N; i++) m->slab[i] = g0_of(i);
    tn_diloco *d = tn_diloco_create(c, m, &dc);
    if (!d) return;
    tn_diloco_start(d, 0);
    for (size_t i = 0; i < N; i++) m->slab[i] = g0_of(i) - d_of(NODE, i, 0);
    tn_diloco_step st = step_of(1, 0, 0);
    CHECK(tn_diloco_step_done(d, &st, 0) == 0);
    double want[N];
    for (size_t i = 0; i < N; i++) want[i] = g0_of(i) - d_of(NODE, i, 0);
    CHECKF(worst(m->slab, want) == 0, "one round late: the machine's own progress moved: worst %g", worst(m->slab, want));
    for (size_t i = 0; i < N; i++) m->slab[i] -= d_of(NODE, i, 1); /* round 2's training */
    st = step_of(2, 1, 0);
    CHECK(tn_diloco_step_done(d, &st, 1) == 0);
    for (size_t i = 0; i < N; i++) want[i] = g0_of(i) - mean_of(i, 0, 0) - mean_of(i, 1, 0);
    double w = worst(m->slab, want), tol = M <= 2 ? 0 : 8e-6;
    CHECKF(w <= tol, "two rounds one round late: worst |g - expected| %g (> %g)", w, tol);
    tn_diloco_free(d);
}

int main(int argc, char **argv) {
    tn_comm *c = tn_comm_init(&argc, &argv);
    if (!c) {
        fprintf(stderr, "test_unit_diloco: %s\n", tn_errmsg());
        return 1;
    }
    const tn_comm_info *in = tn_comm_get_info(c);
    M = in->n_nodes, NODE = in->node;
    const char *es = getenv("TANDEM_TEST_EXPECT_SIZE"), *en = getenv("TANDEM_TEST_EXPECT_NODES");
    if (es) CHECKF(in->size == atoi(es), "size %d, expected %s", in->size, es);
    if (en) CHECKF(M == atoi(en), "n_nodes %d, expected %s", M, en);
    tn_model m; /* the parameters DiLoCo moves: a host slab on the CPU backend, nothing else */
    memset(&m, 0, sizeof m);
    m.be = tn_backend_cpu(), m.n_trainable = m.n_total = N;
    m.slab = tn_xalloc_floats(N);
    test_sync_round(c, &m, 1);
    test_sync_round(c, &m, 0);
    test_overlap_rounds(c, &m);
    tn_free_aligned(m.slab);
    int64_t f[2] = {tl_failures, tl_checks};
    if (tn_comm_allreduce_max_i64(c, f, 2) != 0) f[0] = 1;
    if (tl_failures) fprintf(stderr, "test_unit_diloco: rank %d: %d of %d checks failed\n", in->rank, tl_failures, tl_checks);
    if (in->rank == 0)
        printf("test_unit_diloco: size %d, %d machine(s), backend %s: %d checks, %lld failed (worst rank)\n", in->size, M,
               tn_comm_backend_name(c), tl_checks, (long long)f[0]);
    tn_comm_finalize(c);
    return f[0] ? 1 : 0;
}
