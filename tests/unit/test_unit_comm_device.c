/* test_unit_comm_device -- the comm layer's path for device buffers (comm.h tn_comm_attach_device), on the CPU:
 * a fake device (fake_device.h) whose "memory" is host pages kept PROT_NONE except inside its own copies, so
 * any direct touch of a device buffer by the comm layer (MPI, shared memory, the rings) crashes the test instead
 * of passing by accident. Every collective on such buffers must then go through the staging, and its results must
 * be the closed-form sums of test_unit_comm (x_r[i] = 4096 (r+1) + (i mod 4093): exact in fp32).
 * Runs as a singleton under ctest and with 2..4 ranks (one or faked several machines) from
 * tests/cli/test_comm_device.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/core.h"
#include "fake_device.h"
#include "testlib.h"

static int R, P;

static float x_of(int r, size_t i) { return (float)(4096 * (r + 1) + (int)(i % 4093)); }
static float sum_of(size_t i) { return (float)(4096 * P * (P + 1) / 2 + P * (int)(i % 4093)); }

/* ---- tests */

static float *dev_fill(size_t n, int rank_dependent) {
    float *d = fd_alloc(n * sizeof *d), *h = tn_xmalloc((n + 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = rank_dependent ? x_of(R, i) : -1.0f;
    fd_quiet = 1;
    fd_to_device(d, h, n * sizeof *h);
    fd_quiet = 0;
    free(h);
    return d;
}

static float *dev_read(const float *d, size_t n) {
    float *h = tn_xmalloc((n + 1) * sizeof *h);
    fd_quiet = 1;
    fd_to_host(h, d, n * sizeof *h);
    fd_quiet = 0;
    return h;
}

/* TANDEM_TEST_STAGING=sync: a device without the asynchronous copy out (each staged all-reduce waits in to_host) */
static int async_staging(void) {
    const char *s = getenv("TANDEM_TEST_STAGING");
    return !(s && strcmp(s, "sync") == 0);
}

static void test_attach(tn_comm *c) {
    tn_comm_device fake = {.name = "fake", .owns = fd_owns, .to_host = fd_to_host, .to_device = fd_to_device,
                           .queue = NULL, .device = R};
    if (async_staging())
        fake.to_host_async = fd_to_host_async, fake.copied = fd_copied, fake.host_alloc = fd_host_alloc,
        fake.host_free = fd_host_free;
    if (P > 1) { /* rank 1 on "the CPU": refused on every rank, naming it */
        CHECK(tn_comm_attach_device(c, R == 1 ? NULL : &fake, NULL, 0) == -1);
        CHECKF(strstr(tn_errmsg(), "rank 1") && strstr(tn_errmsg(), "same device kind"), "%s", tn_errmsg());
    }
    char note[320];
    CHECK(tn_comm_attach_device(c, &fake, note, sizeof note) == 0);
    CHECK(tn_comm_attach_device(c, &fake, NULL, 0) == -1); /* once */
    /* $TANDEM_COMM_BACKEND=mpi (the CLI test sets it for P > 1): the note names the staging */
    if (P > 1) CHECKF(strstr(note, "staged in host memory"), "note: %s", note);
}

static void test_blocking(tn_comm *c) {
    size_t sizes[] = {1, 1000, 70001, (1u << 20) + 3};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si], bad = n, off, len;
        float *d = dev_fill(n, 1);
        CHECK(tn_comm_allreduce_f32(c, d, n) == 0);
        float *h = dev_read(d, n);
        for (size_t i = 0; i < n && bad == n; i++)
            if (h[i] != sum_of(i)) bad = i;
        CHECKF(bad == n, "allreduce n=%zu: first wrong element %zu", n, bad);
        free(h), fd_free(d);
        /* reduce-scatter, then all-gather of the sums: the full sum everywhere */
        d = dev_fill(n, 1);
        CHECK(tn_comm_reduce_scatter_f32(c, d, n) == 0);
        tn_comm_slice(n, P, R, &off, &len);
        h = dev_read(d, n);
        for (size_t i = off; i < off + len; i++) bad = bad == n && h[i] != sum_of(i) ? i : bad;
        CHECKF(bad == n, "reduce-scatter n=%zu: first wrong element %zu", n, bad);
        CHECK(tn_comm_allgather_f32(c, d, n) == 0);
        free(h);
        h = dev_read(d, n);
        for (size_t i = 0; i < n; i++) bad = bad == n && h[i] != sum_of(i) ? i : bad;
        CHECKF(bad == n, "all-gather n=%zu: first wrong element %zu", n, bad);
        free(h), fd_free(d);
    }
    /* bcast of device bytes from the last rank */
    float *d = dev_fill(4099, 1);
    CHECK(tn_comm_bcast(c, d, 4099 * sizeof(float), P - 1) == 0);
    float *h = dev_read(d, 4099);
    int ok = 1;
    for (size_t i = 0; i < 4099; i++) ok &= h[i] == x_of(P - 1, i);
    CHECK(ok);
    free(h), fd_free(d);
    /* host buffers still go straight to MPI, untouched by the staging */
    size_t before = fd_to_host_bytes;
    float host[3] = {x_of(R, 0), x_of(R, 1), x_of(R, 2)};
    CHECK(tn_comm_allreduce_f32(c, host, 3) == 0);
    CHECK(host[0] == sum_of(0) && host[2] == sum_of(2) && fd_to_host_bytes == before);
}

/* round 1, 2: the second reuses the first's pinned buffers */
static void test_nonblocking(tn_comm *c, int round) {
    enum { K = 4 };
    size_t ns[K] = {17, 70001, (1u << 20) + 1, 1000};
    float *d[K];
    tn_comm_op *op[K];
    for (int k = 0; k < K; k++) {
        d[k] = dev_fill(ns[k], 1);
        op[k] = tn_comm_iallreduce_f32(c, d[k], ns[k]);
        CHECK(op[k] != NULL);
    }
    /* the first two waited one by one (out of order), the rest by wait_all */
    CHECK(tn_comm_wait(op[1]) == 0);
    CHECK(tn_comm_wait(op[0]) == 0);
    CHECK(tn_comm_wait_all(c) == 0);
    if (async_staging()) { /* the copies were asynchronous and polled: each issue polled the ones in flight */
        CHECKF(fd_async_copies == K * round && fd_polls_refused > 0, "async copies %d, polls refused %d",
               fd_async_copies, fd_polls_refused);
        CHECKF(fd_pinned_held == K, "%d pinned buffers held, expected %d (one per size, kept)", fd_pinned_held, K);
    }
    for (int k = 0; k < K; k++) {
        float *h = dev_read(d[k], ns[k]);
        size_t bad = ns[k];
        for (size_t i = 0; i < ns[k] && bad == ns[k]; i++)
            if (h[i] != sum_of(i)) bad = i;
        CHECKF(bad == ns[k], "iallreduce %d (n=%zu): first wrong element %zu", k, ns[k], bad);
        free(h), fd_free(d[k]);
    }
}

/* ZeRO's range collectives on a device slab: every group range, reduce-scatter then all-gather. */
static void test_ranges(tn_comm *c) {
    const size_t n = 300007, cuts[] = {0, 1, 5000, 100003, 250000, n};
    const int n_cuts = (int)(sizeof cuts / sizeof *cuts);
    size_t off, len;
    tn_comm_shard(c, n, R, &off, &len);
    float *g = dev_fill(n, 1);
    tn_comm_op *ops[8];
    for (int k = 0; k + 1 < n_cuts; k++) ops[k] = tn_comm_ireduce_scatter_range(c, g, n, cuts[k], cuts[k + 1]);
    for (int k = 0; k + 1 < n_cuts; k++) CHECK(ops[k] && tn_comm_wait(ops[k]) == 0);
    float *h = dev_read(g, n);
    size_t bad = n;
    for (size_t i = off; i < off + len; i++) bad = bad == n && h[i] != sum_of(i) ? i : bad;
    CHECKF(bad == n, "range reduce-scatter: first wrong element %zu of shard [%zu, %zu)", bad, off, off + len);
    /* all-gather: outside its shard each rank holds garbage first */
    float *p = dev_fill(n, 0);
    for (size_t i = off; i < off + len; i++) h[i] = sum_of(i) + 0.5f;
    fd_quiet = 1;
    fd_to_device(p + off, h + off, len * sizeof *h);
    fd_quiet = 0;
    for (int k = 0; k + 1 < n_cuts; k++) ops[k] = tn_comm_iallgather_range(c, p, n, cuts[k], cuts[k + 1]);
    CHECK(tn_comm_wait_all(c) == 0);
    free(h);
    h = dev_read(p, n);
    bad = n;
    for (size_t i = 0; i < n; i++) bad = bad == n && h[i] != sum_of(i) + 0.5f ? i : bad;
    CHECKF(bad == n, "range all-gather: first wrong element %zu", bad);
    free(h), fd_free(g), fd_free(p);
}

int main(int argc, char **argv) {
    tn_comm *c = tn_comm_init(&argc, &argv);
    if (!c) {
        fprintf(stderr, "test_unit_comm_device: %s\n", tn_errmsg());
        return 1;
    }
    R = tn_comm_get_info(c)->rank, P = tn_comm_get_info(c)->size;
    test_attach(c);
    test_blocking(c);
    test_nonblocking(c, 1);
    test_nonblocking(c, 2);
    test_ranges(c);
    /* every collective above staged its whole buffer out and back (the byte counts are the test's own sums) */
    size_t blocking = 0, sizes[] = {1, 1000, 70001, (1u << 20) + 3};
    for (int i = 0; i < 4; i++) blocking += 3 * sizes[i] * sizeof(float); /* allreduce, reduce-scatter, all-gather */
    blocking += 4099 * sizeof(float);                                        /* bcast */
    size_t nonblocking = 2 * (17 + 70001 + (1u << 20) + 1 + 1000) * sizeof(float), ranges = 2 * 300007 * sizeof(float);
    size_t want = blocking + nonblocking + ranges;
    CHECKF(fd_to_host_bytes == want && fd_to_device_bytes == want, "staged %zu bytes out and %zu back, expected %zu each",
           fd_to_host_bytes, fd_to_device_bytes, want);
    int64_t f[2] = {tl_failures, tl_checks};
    if (tn_comm_allreduce_max_i64(c, f, 2) != 0) f[0] = 1;
    if (tl_failures) fprintf(stderr, "test_unit_comm_device: rank %d: %d of %d checks failed\n", R, tl_failures, tl_checks);
    if (R == 0)
        printf("test_unit_comm_device: size %d, %d machine(s), backend %s: %d checks, %lld failed (worst rank)\n", P,
               tn_comm_get_info(c)->n_nodes, tn_comm_backend_name(c), tl_checks, (long long)f[0]);
    tn_comm_finalize(c);
    if (fd_pinned_held != 0) { /* the comm layer gives its pinned buffers back when it goes */
        fprintf(stderr, "test_unit_comm_device: rank %d: %d pinned buffers not freed\n", R, fd_pinned_held);
        return 1;
    }
    return f[0] ? 1 : 0;
}
