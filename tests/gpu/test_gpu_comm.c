/* test_gpu_comm -- the comm layer on GPU memory: the CUDA backend attached (comm.h tn_comm_attach_device), then
 * every collective on device buffers, with test_unit_comm's closed-form data (x_r[i] = 4096 (r+1) + (i mod 4093),
 * exact in fp32). Each buffer is scaled by 2 on the GPU just before its collective, so a collective that does not
 * wait for the kernels queued before it (NCCL's stream versus the compute stream) reads the unscaled values and
 * fails. Under ctest: one rank with $TANDEM_COMM_BACKEND=nccl (NCCL at 1 rank per process); from
 * tests/gpu/test_gpu_train.sh: 2 ranks on one GPU through MPI, staged in host memory (NCCL refuses two ranks on one
 * device). Skipped (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/core.h"
#include "testlib.h"

static int R, P;
static const tn_backend *be;

static float x_of(int r, size_t i) { return (float)(4096 * (r + 1) + (int)(i % 4093)); }
static float sum2_of(size_t i) { return 2.0f * (float)(4096 * P * (P + 1) / 2 + P * (int)(i % 4093)); }

static float *dev_data(size_t n) {
    float *h = tn_xmalloc((n + 1) * sizeof *h), *d = be->alloc(n);
    for (size_t i = 0; i < n; i++) h[i] = x_of(R, i);
    be->upload(d, h, n);
    free(h);
    be->scale(d, n, 2.0f); /* queued on the compute stream: the collective must wait for it */
    return d;
}

static size_t first_bad(const float *d, size_t lo, size_t hi, size_t n) {
    float *h = tn_xmalloc((n + 1) * sizeof *h);
    be->download(h, d, n);
    size_t bad = hi;
    for (size_t i = lo; i < hi && bad == hi; i++)
        if (h[i] != sum2_of(i)) bad = i;
    free(h);
    return bad;
}

int main(int argc, char **argv) {
    if (tn_backend_gpu_count() == 0) { /* before MPI: $TANDEM_COMM_BACKEND=nccl would fail there without a GPU */
        printf("test_gpu_comm: skipped: no GPU is visible\n");
        return 77;
    }
    tn_comm *c = tn_comm_init(&argc, &argv);
    if (!c) {
        fprintf(stderr, "test_gpu_comm: %s\n", tn_errmsg());
        return 1;
    }
    R = tn_comm_get_info(c)->rank, P = tn_comm_get_info(c)->size;
    be = tn_backend_select("cuda", 0, tn_comm_get_info(c)->local_rank);
    if (!be) {
        fprintf(stderr, "test_gpu_comm: rank %d: %s\n", R, tn_errmsg());
        tn_comm_abort(c, 1);
    }
    char note[320] = "";
    CHECKF(tn_backend_attach_comm(be, c, note, sizeof note) == 0, "attach: %s", tn_errmsg());
    const char *want = getenv("TANDEM_TEST_EXPECT_BACKEND");
    if (want) CHECKF(strcmp(tn_comm_backend_name(c), want) == 0, "backend %s, expected %s (%s)", tn_comm_backend_name(c), want, note);

    size_t sizes[] = {1, 4099, (1u << 20) + 7};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k], off, len;
        float *d = dev_data(n);
        CHECK(tn_comm_allreduce_f32(c, d, n) == 0);
        CHECKF(first_bad(d, 0, n, n) == n, "allreduce n=%zu", n);
        be->free(d);
        d = dev_data(n);
        tn_comm_op *op = tn_comm_iallreduce_f32(c, d, n);
        CHECK(op && tn_comm_wait(op) == 0);
        CHECKF(first_bad(d, 0, n, n) == n, "iallreduce n=%zu", n);
        be->free(d);
        d = dev_data(n);
        CHECK(tn_comm_reduce_scatter_f32(c, d, n) == 0);
        tn_comm_slice(n, P, R, &off, &len);
        CHECKF(first_bad(d, off, off + len, n) == off + len, "reduce-scatter n=%zu", n);
        CHECK(tn_comm_allgather_f32(c, d, n) == 0);
        CHECKF(first_bad(d, 0, n, n) == n, "all-gather n=%zu", n);
        be->free(d);
    }
    /* ZeRO's range collectives on a slab, several ranges in flight */
    const size_t n = 300007, cuts[] = {0, 1, 5000, 100003, 250000, n};
    size_t off, len;
    tn_comm_shard(c, n, R, &off, &len);
    float *g = dev_data(n);
    tn_comm_op *ops[5];
    for (int k = 0; k < 5; k++) ops[k] = tn_comm_ireduce_scatter_range(c, g, n, cuts[k], cuts[k + 1]);
    for (int k = 0; k < 5; k++) CHECK(ops[k] && tn_comm_wait(ops[k]) == 0);
    CHECKF(first_bad(g, off, off + len, n) == off + len, "range reduce-scatter");
    for (int k = 0; k < 5; k++) ops[k] = tn_comm_iallgather_range(c, g, n, cuts[k], cuts[k + 1]);
    CHECK(tn_comm_wait_all(c) == 0);
    CHECKF(first_bad(g, 0, n, n) == n, "range all-gather");
    be->free(g);
    /* bcast of device bytes from the last rank */
    float *b = be->alloc(4099), *h = tn_xmalloc(4099 * sizeof *h);
    for (size_t i = 0; i < 4099; i++) h[i] = x_of(R, i);
    be->upload(b, h, 4099);
    CHECK(tn_comm_bcast(c, b, 4099 * sizeof(float), P - 1) == 0);
    be->download(h, b, 4099);
    int ok = 1;
    for (size_t i = 0; i < 4099; i++) ok &= h[i] == x_of(P - 1, i);
    CHECK(ok);
    free(h), be->free(b);

    int64_t f[2] = {tl_failures, tl_checks};
    if (tn_comm_allreduce_max_i64(c, f, 2) != 0) f[0] = 1;
    if (R == 0)
        printf("test_gpu_comm: size %d, backend %s (%s): %d checks, %lld failed (worst rank)\n", P,
               tn_comm_backend_name(c), note[0] ? note : "one rank", tl_checks, (long long)f[0]);
    tn_comm_finalize(c);
    return f[0] ? 1 : 0;
}
