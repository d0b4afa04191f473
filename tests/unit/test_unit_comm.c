/* test_unit_comm -- the comm layer's collectives against closed-form results.
 *
 * Runs as a singleton under ctest (size 1) and under mpirun with 2..4 ranks from tests/cli/test_mpi_comm.sh
 * and tests/cli/test_netns_comm.sh, which fake or simulate several machines (TANDEM_NODE_NAME per rank,
 * network namespaces) to drive the hierarchical path. Every rank's data is a formula of (rank, index), so
 * each expected value is a sum written down here, independent of the code under test:
 *   x_r[i] = 4096 (r+1) + (i mod 4093)  ->  sum_r x_r[i] = 4096 size(size+1)/2 + size (i mod 4093)
 * (integers below 2^24: exact in float whatever the summation order; the period 4093 is prime, so a block
 * that lands at a wrong offset, a rank counted twice or missed all show up).
 * TANDEM_TEST_EXPECT_SIZE / _NODES, when set, are checked against what the comm layer found.
 * The machine-level exchange (exchange.h) is checked the same way: per-machine data y_m[i] = ((7i + m) mod 255)
 * - 127 are integers in [-127, 127] and every 256-block holds -127 and 127, so bf16 and int8 (scale 1) carry
 * them exactly and the expected sums are written down; where a codec does lose bits, the expected result is
 * every machine's encoding decoded and added in machine order, computed here from the formula. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/exchange.h"
#include "core/core.h"
#include "testlib.h"

static int R, P; /* rank, size */

static float x_of(int r, size_t i) { return (float)(4096 * (r + 1) + (int)(i % 4093)); }
static float sum_of(size_t i) { return (float)(4096 * P * (P + 1) / 2 + P * (int)(i % 4093)); }

static void fill(float *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = x_of(R, i);
}

/* First index in [lo, hi) where b differs from the full sum, or hi. */
static size_t first_bad_sum(const float *b, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        if (b[i] != sum_of(i)) return i;
    return hi;
}

static void test_info(tn_comm *c) {
    const tn_comm_info *in = tn_comm_get_info(c);
    CHECK(in->size == P && in->rank == R);
    const char *es = getenv("TANDEM_TEST_EXPECT_SIZE"), *en = getenv("TANDEM_TEST_EXPECT_NODES");
    if (es) CHECKF(P == atoi(es), "size %d, expected %s", P, es);
    if (en) CHECKF(in->n_nodes == atoi(en), "n_nodes %d, expected %s", in->n_nodes, en);
    /* everyone's view, gathered: node numbering and local ranks must be consistent */
    int mine[4] = {in->node, in->local_rank, in->local_size, in->n_nodes};
    int *all = tn_xmalloc((size_t)P * sizeof mine);
    CHECK(tn_comm_allgather(c, mine, sizeof mine, all) == 0);
    CHECK(all[0] == 0); /* node of rank 0 */
    for (int nd = 0; nd < in->n_nodes; nd++) {
        int count = 0, seen = 0;
        for (int r = 0; r < P; r++)
            if (all[4 * r] == nd) {
                CHECKF(all[4 * r + 1] >= 0 && all[4 * r + 1] < all[4 * r + 2], "rank %d local rank %d of %d", r,
                       all[4 * r + 1], all[4 * r + 2]);
                seen |= 1 << (all[4 * r + 1] & 15);
                count++;
            }
        for (int r = 0; r < P; r++)
            if (all[4 * r] == nd) CHECKF(all[4 * r + 2] == count, "node %d: local_size %d but %d ranks", nd, all[4 * r + 2], count);
        CHECKF(count > 0 && (count > 15 || seen == (1 << count) - 1), "node %d: local ranks not 0..%d", nd, count - 1);
    }
    for (int r = 0; r < P; r++) CHECK(all[4 * r + 3] == in->n_nodes && all[4 * r] < in->n_nodes);
    /* the same machine name implies the same node only within one shared-memory domain; with
     * TANDEM_NODE_NAME set per rank, ranks with different names must be on different nodes */
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    CHECK(strcmp(in->host, host) == 0);
    char(*hosts)[64] = tn_xcalloc((size_t)P, 64);
    CHECK(tn_comm_allgather(c, in->host, 64, hosts) == 0);
    for (int r = 0; r < P; r++) CHECKF(strcmp(tn_comm_host_of(c, r), hosts[r]) == 0, "host_of(%d)", r);
    CHECK(tn_comm_host_of(c, P) == NULL && tn_comm_host_of(c, -1) == NULL);
    const char *nn = getenv("TANDEM_NODE_NAME");
    char name[64] = "";
    snprintf(name, sizeof name, "%s", nn ? nn : "");
    char(*names)[64] = tn_xcalloc((size_t)P, 64);
    CHECK(tn_comm_allgather(c, name, 64, names) == 0);
    for (int r = 0; r < P; r++)
        if (names[r][0] && name[0] && strcmp(names[r], name) != 0)
            CHECKF(all[4 * r] != in->node, "rank %d (%s) and rank %d (%s) share node %d", r, names[r], R, name, in->node);
    free(all), free(hosts), free(names);
}

static void test_slice(void) {
    size_t off, len, want_off[3] = {0, 4, 7}, want_len[3] = {4, 3, 3};
    for (int r = 0; r < 3; r++) {
        tn_comm_slice(10, 3, r, &off, &len);
        CHECKF(off == want_off[r] && len == want_len[r], "slice(10,3,%d) = [%zu,+%zu)", r, off, len);
    }
    tn_comm_slice(2, 4, 3, &off, &len);
    CHECK(off == 2 && len == 0);
}

static void test_small(tn_comm *c) {
    CHECK(tn_comm_barrier(c) == 0);
    size_t sizes[] = {0, 1, 1000, (3u << 20) + 5};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t nb = sizes[si];
        for (int root = 0; root < P; root++) {
            unsigned char *b = tn_xmalloc(nb + 1);
            for (size_t i = 0; i < nb; i++) b[i] = R == root ? (unsigned char)(i * 7 + root) : 0xEE;
            CHECK(tn_comm_bcast(c, b, nb, root) == 0);
            size_t bad = nb;
            for (size_t i = 0; i < nb && bad == nb; i++)
                if (b[i] != (unsigned char)(i * 7 + root)) bad = i;
            CHECKF(bad == nb, "bcast %zu bytes from %d: byte %zu wrong", nb, root, bad);
            free(b);
        }
    }
    double d[5];
    for (int i = 0; i < 5; i++) d[i] = R + 1 + 0.5 * i;
    CHECK(tn_comm_allreduce_f64(c, d, 5) == 0);
    for (int i = 0; i < 5; i++) CHECK_NEAR(d[i], P * (P + 1) / 2.0 + 0.5 * i * P, 0);
    int64_t m[3] = {R * 1000, -R, (int64_t)R << 40};
    CHECK(tn_comm_allreduce_max_i64(c, m, 3) == 0);
    CHECK(m[0] == (P - 1) * 1000 && m[1] == 0 && m[2] == (int64_t)(P - 1) << 40);
    CHECK(tn_comm_allreduce_f64(c, NULL, 0) == 0);
}

static const size_t SIZES[] = {0, 1, 2, 3, 5, 7, 1000, 32768, 65536 + 3, 300007, (1u << 20) + 3, 3 * (1u << 20) + 7};
#define NSIZES (sizeof SIZES / sizeof *SIZES)

static void test_allreduce(tn_comm *c) {
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = SIZES[si];
        float *b = tn_xmalloc((n + 1) * sizeof *b);
        fill(b, n);
        int rc = tn_comm_allreduce_f32(c, b, n);
        CHECKF(rc == 0, "allreduce n=%zu: %s", n, tn_errmsg());
        size_t bad = first_bad_sum(b, 0, n);
        CHECKF(bad == n, "allreduce n=%zu: [%zu] = %g, expected %g", n, bad, bad < n ? b[bad] : 0, bad < n ? sum_of(bad) : 0);
        free(b);
    }
    /* many small ops in a row: shared-memory slots and counters carry over between ops */
    for (int it = 0; it < 25; it++) {
        size_t n = 100 + 37 * (size_t)it;
        float b[1100];
        fill(b, n);
        CHECK(tn_comm_allreduce_f32(c, b, n) == 0);
        CHECKF(first_bad_sum(b, 0, n) == n, "allreduce round %d n=%zu", it, n);
    }
}

static void test_iallreduce(tn_comm *c) {
    enum { K = 5 };
    size_t ns[K] = {1, 70001, 1000, (1u << 20) + 1, 17};
    float *b[K];
    tn_comm_op *op[K];
    for (int k = 0; k < K; k++) {
        b[k] = tn_xmalloc(ns[k] * sizeof *b[k]);
        fill(b[k], ns[k]);
        op[k] = tn_comm_iallreduce_f32(c, b[k], ns[k]);
        CHECK(op[k] != NULL);
    }
    for (int k = K - 1; k >= 0; k--) CHECK(op[k] && tn_comm_wait(op[k]) == 0); /* any wait order */
    for (int k = 0; k < K; k++) {
        CHECKF(first_bad_sum(b[k], 0, ns[k]) == ns[k], "iallreduce op %d n=%zu", k, ns[k]);
        fill(b[k], ns[k]);
        CHECK(tn_comm_iallreduce_f32(c, b[k], ns[k]) != NULL);
    }
    CHECK(tn_comm_wait_all(c) == 0);
    for (int k = 0; k < K; k++) {
        CHECKF(first_bad_sum(b[k], 0, ns[k]) == ns[k], "iallreduce + wait_all op %d n=%zu", k, ns[k]);
        free(b[k]);
    }
    /* gradient buckets: many ops queued at once, each starting while the one before drains (more ops than
     * tag lanes, so lanes are reused); sizes from under one ring segment to several shared-memory chunks.
     * Op k's data is the formula shifted by 1237 k, so a chunk taken from another op's buffer shows up. */
    enum { M = 13 };
    float *g[M];
    size_t gn[M];
    for (int k = 0; k < M; k++) {
        gn[k] = 1 + (size_t)k * 90001 % 400000;
        g[k] = tn_xmalloc(gn[k] * sizeof *g[k]);
        for (size_t i = 0; i < gn[k]; i++) g[k][i] = x_of(R, i + 1237 * (size_t)k);
        op[k % K] = tn_comm_iallreduce_f32(c, g[k], gn[k]);
        CHECK(op[k % K] != NULL);
    }
    CHECK(tn_comm_wait_all(c) == 0);
    for (int k = 0; k < M; k++) {
        size_t bad = 0;
        for (size_t i = 0; i < gn[k]; i++) bad += g[k][i] != sum_of(i + 1237 * (size_t)k);
        CHECKF(bad == 0, "bucket op %d of %d n=%zu: %zu wrong", k, M, gn[k], bad);
        free(g[k]);
    }
    tn_comm_stats st;
    tn_comm_get_stats(c, &st);
    CHECK(st.ops >= 2 * K && st.progress_cpu_s >= 0 && st.progress_busy_s >= 0);
}

static void test_rs_ag(tn_comm *c) {
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = SIZES[si], off, len;
        tn_comm_slice(n, P, R, &off, &len);
        float *b = tn_xmalloc((n + 1) * sizeof *b);
        fill(b, n);
        int rc = tn_comm_reduce_scatter_f32(c, b, n);
        CHECKF(rc == 0, "reduce-scatter n=%zu: %s", n, tn_errmsg());
        size_t bad = first_bad_sum(b, off, off + len);
        CHECKF(bad == off + len, "reduce-scatter n=%zu rank %d slice [%zu,+%zu): [%zu] wrong", n, R, off, len, bad);
        /* all-gather of the reduced slices = allreduce; poison everything outside my slice first */
        for (size_t i = 0; i < n; i++)
            if (i < off || i >= off + len) b[i] = -1.0f;
        CHECK(tn_comm_allgather_f32(c, b, n) == 0);
        bad = first_bad_sum(b, 0, n);
        CHECKF(bad == n, "reduce-scatter + all-gather n=%zu: [%zu] = %g", n, bad, bad < n ? b[bad] : 0);
        /* all-gather alone: slice of rank r holds r's own values */
        for (size_t i = 0; i < n; i++) b[i] = i >= off && i < off + len ? x_of(R, i) : -1.0f;
        CHECK(tn_comm_allgather_f32(c, b, n) == 0);
        for (int r = 0; r < P; r++) {
            size_t ro, rl, i;
            tn_comm_slice(n, P, r, &ro, &rl);
            for (i = ro; i < ro + rl && b[i] == x_of(r, i); i++) {
            }
            CHECKF(i == ro + rl, "all-gather n=%zu: slice of rank %d wrong at %zu", n, r, i);
        }
        free(b);
    }
}

/* ZeRO shards: a permutation of shard indices covering the slab; reduce-scatter and all-gather on ranges
 * (bucket-sized, crossing shard boundaries, empty, the whole slab), many queued at once as the trainer
 * queues its buckets, each checked against the closed form and for not touching anything outside it. */
static float g_of(size_t i) { return (float)(7 + (int)(i % 4093)); } /* an all-gather value, any rank */

/* Ranges [lo[k], hi[k]) queued together, both collectives, checked everywhere. */
static void check_ranges(tn_comm *c, size_t n, size_t off, size_t len, const size_t *lo, const size_t *hi, int nr) {
    for (int kind = 0; kind < 2; kind++) {
        float *b = tn_xmalloc(n * sizeof *b);
        for (size_t i = 0; i < n; i++) b[i] = kind ? (i >= off && i < off + len ? g_of(i) : -1.0f) : x_of(R, i);
        /* disjoint ranges queued together */
        tn_comm_op **ops = tn_xcalloc((size_t)nr, sizeof *ops);
        for (int k = 0; k < nr; k++) {
            ops[k] = kind ? tn_comm_iallgather_range(c, b, n, lo[k], hi[k]) : tn_comm_ireduce_scatter_range(c, b, n, lo[k], hi[k]);
            CHECKF(ops[k] != NULL, "%s [%zu, %zu): %s", kind ? "all-gather" : "reduce-scatter", lo[k], hi[k], tn_errmsg());
        }
        for (int k = 0; k < nr; k++)
            if (ops[k]) CHECK(tn_comm_wait(ops[k]) == 0);
        for (size_t i = 0; i < n; i++) {
            int in = 0;
            for (int k = 0; k < nr; k++) in |= i >= lo[k] && i < hi[k];
            int own = i >= off && i < off + len;
            float want = kind ? (in || own ? g_of(i) : -1.0f) : (in && own ? sum_of(i) : x_of(R, i));
            if (!in && !own && b[i] != want) { CHECKF(0, "%s touched [%zu] outside its ranges", kind ? "all-gather" : "reduce-scatter", i); break; }
            if ((kind || own) && b[i] != want) {
                CHECKF(0, "%s rank %d shard [%zu,+%zu): [%zu] = %g, expected %g", kind ? "all-gather" : "reduce-scatter", R,
                       off, len, i, b[i], want);
                break;
            }
        }
        free(b);
        free(ops);
    }
}

static void test_shard_ranges(tn_comm *c) {
    int *idx = tn_xmalloc((size_t)P * sizeof *idx), mine = tn_comm_shard_index(c, R), seen = 0;
    CHECK(tn_comm_allgather(c, &mine, sizeof mine, idx) == 0);
    for (int r = 0; r < P; r++) {
        CHECKF(idx[r] == tn_comm_shard_index(c, r) && idx[r] >= 0 && idx[r] < P, "rank %d shard index %d", r, idx[r]);
        seen |= 1 << (idx[r] & 15);
    }
    CHECK(P > 15 || seen == (1 << P) - 1);
    free(idx);
    const size_t n = 100003; /* prime: shards of unequal length */
    size_t off, len;
    tn_comm_shard(c, n, R, &off, &len);
    enum { NR = 8, NS = 40 };
    /* disjoint, queued together; gaps between them must stay untouched */
    size_t lo[NR] = {0, 17, 5000, 9001, 33340, 33340, 66670, 99000},
           hi[NR] = {1, 4999, 9000, 33340, 33340, 66670, 66671, n};
    check_ranges(c, n, off, len, lo, hi, NR);
    /* the whole slab, both collectives: reduce-scatter then all-gather = allreduce (the second may start
     * while the first drains, so data that depends on an op is touched only after waiting for it) */
    float *b = tn_xmalloc(n * sizeof *b);
    fill(b, n);
    tn_comm_op *rs = tn_comm_ireduce_scatter_range(c, b, n, 0, n);
    CHECK(rs && tn_comm_wait(rs) == 0);
    tn_comm_op *ag = tn_comm_iallgather_range(c, b, n, 0, n);
    CHECK(ag && tn_comm_wait(ag) == 0);
    size_t bad = first_bad_sum(b, 0, n);
    CHECKF(bad == n, "range reduce-scatter + all-gather: [%zu] = %g", bad, bad < n ? b[bad] : 0);
    free(b);
    /* more ranges than ops may run at once, in scrambled slab order: ranges of different shards run side by
     * side (comm_impl.h), so lanes are reused while others still move (slots k x 7919 mod 1600 are distinct:
     * 7919 is prime and does not divide 1600) */
    size_t slo[NS], shi[NS];
    for (int k = 0; k < NS; k++) slo[k] = (size_t)(k * 7919 % 1600) * 61, shi[k] = slo[k] + 61;
    check_ranges(c, n, off, len, slo, shi, NS);
    float x = 0;
    CHECK(tn_comm_iallgather_range(c, &x, 1, 1, 2) == NULL && strstr(tn_errmsg(), "outside"));
    /* point-to-point: every rank sends its rank to rank 0 */
    if (R == 0) {
        for (int r = 1; r < P; r++) {
            int got = -1;
            CHECK(tn_comm_recv(c, &got, sizeof got, r) == 0 && got == r);
        }
    } else {
        CHECK(tn_comm_send(c, &R, sizeof R, 0) == 0);
    }
}

static float y_of(int m, size_t i) { return (float)((int)((7 * i + (size_t)m) % 255) - 127); }

/* Every rank's machine, gathered. */
static int *nodes_of(tn_comm *c) {
    int me = tn_comm_get_info(c)->node, *all = tn_xmalloc((size_t)P * sizeof *all);
    CHECK(tn_comm_allgather(c, &me, sizeof me, all) == 0);
    return all;
}

static void test_exchange(tn_comm *c) {
    const tn_comm_info *in = tn_comm_get_info(c);
    int M = in->n_nodes, *node = nodes_of(c);
    size_t n = 3 * 256 * 5 + 7, cap = n + (size_t)1024 * in->local_size; /* parts of every rank cross 256-blocks */
    float *b = tn_xmalloc(cap * sizeof *b), *res = tn_xcalloc(cap, sizeof *res);
    if (!tn_comm_uniform(c)) { /* machines with unequal rank counts: refused with a clear line */
        CHECK(tn_comm_iexchange(c, b, n, &(tn_exchange){.codec = TN_CODEC_FP32, .scale = 1}) == NULL);
        CHECK(strstr(tn_errmsg(), "same number of ranks on every machine") != NULL);
        free(b), free(res), free(node);
        return;
    }
    size_t off, len;
    tn_comm_exchange_part(c, n, &off, &len);
    /* 1. gradients: the machine's ranks' buffers summed, then over machines; fp32 gives the all-reduce */
    for (int bg = 0; bg < 2; bg++) {
        fill(b, n);
        tn_comm_op *op = tn_comm_iexchange(c, b, n, &(tn_exchange){.codec = TN_CODEC_FP32, .scale = 1,
                                                                  .reduce_local = 1, .background = bg});
        CHECK(op && tn_comm_wait(op) == 0);
        CHECKF(first_bad_sum(b, 0, n) == n, "fp32 exchange (background %d): index %zu wrong", bg,
               first_bad_sum(b, 0, n));
    }
    /* 2. parameters kept in step inside each machine: machine m holds y_m; mean over machines, extras summed */
    tn_codec codecs[3] = {TN_CODEC_FP32, TN_CODEC_BF16, TN_CODEC_INT8};
    for (int k = 0; k < 3; k++) {
        size_t nk = codecs[k] == TN_CODEC_INT8 ? (size_t)256 * 4 * in->local_size : n; /* whole blocks per part */
        for (size_t i = 0; i < nk; i++) b[i] = y_of(in->node, i);
        memset(res, 0, cap * sizeof *res);
        double extra[2] = {in->node + 1.0, 0.25 * in->node};
        tn_exchange x = {.codec = codecs[k], .residual = res, .scale = 1.0f / (float)M, .background = 1,
                         .extra = extra, .n_extra = 2};
        tn_comm_op *op = tn_comm_iexchange(c, b, nk, &x);
        /* a queued op runs while the background exchange is in flight */
        float *g = tn_xmalloc(1000 * sizeof *g);
        fill(g, 1000);
        CHECK(tn_comm_allreduce_f32(c, g, 1000) == 0 && first_bad_sum(g, 0, 1000) == 1000);
        free(g);
        CHECK(op && tn_comm_wait(op) == 0);
        size_t bad = nk, nonzero = 0;
        for (size_t i = 0; i < nk && bad == nk; i++) {
            double want = 0;
            for (int m = 0; m < M; m++) want += y_of(m, i);
            if (b[i] != (float)(want / M)) bad = i;
        }
        for (size_t i = 0; i < nk; i++) nonzero += res[i] != 0;
        CHECKF(bad == nk, "%s exchange: index %zu is %g", tn_codec_name(codecs[k]), bad, bad < nk ? b[bad] : 0);
        CHECKF(nonzero == 0, "%s: exact values left %zu residuals", tn_codec_name(codecs[k]), nonzero);
        CHECK(extra[0] == M * (M + 1) / 2.0 && extra[1] == 0.25 * M * (M - 1) / 2.0);
    }
    /* 3. values int8 cannot carry: the result is every machine's encoding decoded in machine order; each rank's
     * residual (its part only) is what its machine's encoding left out */
    {
        size_t ne = 1000 + 3;
        float *want = tn_xcalloc(ne, sizeof *want), *v = tn_xmalloc(ne * sizeof *v), *r = tn_xcalloc(ne, sizeof *r);
        tn_comm_exchange_part(c, ne, &off, &len);
        void *enc = tn_xmalloc(tn_codec_bytes(TN_CODEC_INT8, ne));
        for (int m = 0; m < M; m++) {
            for (size_t i = 0; i < ne; i++) v[i] = 0.37f * y_of(m, i) + 0.011f * (float)m;
            memset(r, 0, ne * sizeof *r);
            tn_codec_encode(TN_CODEC_INT8, v + off, r + off, len, enc);
            tn_codec_decode(TN_CODEC_INT8, enc, len, want + off, m > 0);
            if (m == in->node) memcpy(b, v, ne * sizeof *b), memcpy(res, r, ne * sizeof *res);
        }
        /* want[off..) holds only this rank's part: the other parts come from other ranks, check them via sums */
        float *got_res = tn_xcalloc(ne, sizeof *got_res);
        memset(res, 0, ne * sizeof *res);
        tn_comm_op *op = tn_comm_iexchange(c, b, ne, &(tn_exchange){.codec = TN_CODEC_INT8, .residual = got_res,
                                                                      .scale = 1});
        CHECK(op && tn_comm_wait(op) == 0);
        size_t bad = off + len;
        for (size_t i = off; i < off + len && bad == off + len; i++)
            if (b[i] != want[i]) bad = i;
        CHECKF(bad == off + len, "int8 exchange: index %zu is %g, expected %g", bad, bad < ne ? b[bad] : 0,
               bad < ne ? want[bad] : 0);
        /* every rank's own residual, and nothing outside its part */
        for (size_t i = 0; i < ne; i++) v[i] = 0.37f * y_of(in->node, i) + 0.011f * (float)in->node;
        memset(r, 0, ne * sizeof *r);
        tn_codec_encode(TN_CODEC_INT8, v + off, r + off, len, enc);
        size_t rbad = ne;
        for (size_t i = 0; i < ne && rbad == ne; i++)
            if (got_res[i] != r[i]) rbad = i;
        CHECKF(rbad == ne, "int8 exchange: residual %zu is %g, expected %g", rbad, rbad < ne ? got_res[rbad] : 0,
               rbad < ne ? r[rbad] : 0);
        /* the other ranks' parts of the result equal theirs: every rank holds the same floats */
        uint64_t h = tn_hash64(b, ne * sizeof *b, 0), *all = tn_xmalloc((size_t)P * sizeof h);
        CHECK(tn_comm_allgather(c, &h, sizeof h, all) == 0);
        for (int q = 0; q < P; q++) CHECKF(all[q] == h, "rank %d holds another result than rank %d", q, R);
        free(want), free(v), free(r), free(enc), free(got_res), free(all);
    }
    /* 4. machine-local sums */
    fill(b, n);
    tn_comm_op *op = tn_comm_iallreduce_local_f32(c, b, n);
    CHECK(op && tn_comm_wait(op) == 0);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        float want = 0;
        for (int q = 0; q < P; q++)
            if (node[q] == in->node) want += x_of(q, i);
        if (b[i] != want) bad = i;
    }
    CHECKF(bad == n, "machine-local allreduce: index %zu wrong", bad);
    double d[2] = {R, 1};
    CHECK(tn_comm_allreduce_f64_local(c, d, 2) == 0);
    double wr = 0;
    for (int q = 0; q < P; q++) wr += node[q] == in->node ? q : 0;
    CHECK(d[0] == wr && d[1] == in->local_size);
    CHECK(tn_comm_exchange_bytes(c, 1024, TN_CODEC_BF16, 0) == (size_t)(M - 1) * 2048);
    free(b), free(res), free(node);
}

static void test_errors(tn_comm *c) {
    CHECK(tn_comm_allreduce_f32(c, NULL, 5) == -1 && strstr(tn_errmsg(), "NULL"));
    CHECK(tn_comm_iallreduce_f32(c, NULL, 5) == NULL);
    CHECK(tn_comm_bcast(c, &R, sizeof R, P) == -1 && strstr(tn_errmsg(), "root"));
    CHECK(tn_comm_bcast(c, &R, sizeof R, -1) == -1);
}

/* A peer that comes late must not cost the waiting rank a core: rank 0's all-reduce waits ~0.4 s for the others,
 * and its progress thread polls with backoff (up to poll_max_us, 1 ms by default, between polls; comm_progress.c),
 * so it runs ~420 polls of a few MPI calls each. Even at 100 us of CPU a poll that is 42 ms: under 10% of the
 * wait, where a progress thread that spins uses the whole core it is given. Rank 0 checks its own thread; the
 * result is shared so every rank reports the same verdict. */
static void test_slow_peer_cpu(tn_comm *c) {
    if (P < 2 || getenv("TANDEM_COMM_POLL_US")) return; /* the bound assumes the default poll interval */
    float x = 1;
    CHECK(tn_comm_barrier(c) == 0);
    if (R > 0) {
        struct timespec ts = {0, 400000000L};
        nanosleep(&ts, NULL);
    }
    tn_comm_stats a, b;
    tn_comm_get_stats(c, &a);
    double t0 = tn_now();
    tn_comm_op *op = tn_comm_iallreduce_f32(c, &x, 1);
    CHECK(op && tn_comm_wait(op) == 0);
    double waited = tn_now() - t0;
    tn_comm_get_stats(c, &b);
    double share[2] = {R == 0 ? (b.progress_cpu_s - a.progress_cpu_s) / waited : 0, R == 0 ? waited : 0};
    CHECK(tn_comm_allreduce_f64(c, share, 2) == 0);
    CHECKF(share[1] > 0.3 && share[0] < 0.10, "rank 0 waited %.3f s for a late peer; its progress thread used "
           "%.1f%% of a core meanwhile (bound 10%%)", share[1], 100 * share[0]);
    CHECK(x == (float)P);
}

/* A background exchange whose peers start late, while nobody waits for it (DiLoCo: the other machine has not
 * reached its round end, this one computes). Its messages are single ring pieces (1000 floats), so from the
 * first idle poll on the progress thread sleeps 1, 2, 4, 8, 16 ms, then bg_poll_max_us (20 ms) between polls:
 * over the 0.4 s below that is ~8 re-polls at launch + 5 + 369 / 20 ~ 32 polls at most (fewer when the host is
 * loaded: sleeps only get longer). Polling every millisecond, as the queue does, is over 400; a 10 ms grace at
 * 1 ms first (what a multi-piece exchange gets) ~50 (issue 27). Then rank 0 waits: that must finish it (the
 * wait wakes the thread), and the result is the exact mean. */
static void test_slow_peer_background(tn_comm *c) {
    const tn_comm_info *in = tn_comm_get_info(c);
    if (in->n_nodes < 2 || !tn_comm_uniform(c) || getenv("TANDEM_COMM_POLL_US") || getenv("TANDEM_COMM_BG_POLL_US"))
        return; /* the bound assumes the default poll intervals */
    size_t n = 1000;
    float *b = tn_xmalloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) b[i] = y_of(in->node, i);
    CHECK(tn_comm_barrier(c) == 0);
    struct timespec late = {0, 400000000L};
    if (R > 0) nanosleep(&late, NULL);
    tn_comm_stats a, z;
    tn_comm_get_stats(c, &a);
    tn_comm_op *op = tn_comm_iexchange(c, b, n, &(tn_exchange){.codec = TN_CODEC_FP32, .scale = 1.0f / (float)in->n_nodes,
                                                              .background = 1});
    if (R == 0) nanosleep(&late, NULL); /* rank 0 "computes" while its exchange waits for the others */
    tn_comm_get_stats(c, &z);
    double polls[2] = {R == 0 ? (double)(z.polls - a.polls) : 0, 0};
    CHECK(op && tn_comm_wait(op) == 0);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        double want = 0;
        for (int m = 0; m < in->n_nodes; m++) want += y_of(m, i);
        if (b[i] != (float)(want / in->n_nodes)) bad = i;
    }
    CHECKF(bad == n, "late background exchange: index %zu wrong", bad);
    CHECK(tn_comm_allreduce_f64(c, polls, 2) == 0);
    if (getenv("TANDEM_TEST_VERBOSE") && R == 0) printf("test_unit_comm: late background exchange: %.0f polls\n", polls[0]);
    CHECKF(polls[0] > 0 && polls[0] <= 40, "rank 0's progress thread polled a background exchange of single pieces "
           "%.0f times in 0.4 s of waiting for late peers (bound 40: it should sleep 1, 2, 4, .. 20 ms)", polls[0]);
    free(b);
}

int main(int argc, char **argv) {
    tn_comm *c = tn_comm_init(&argc, &argv);
    if (!c) {
        fprintf(stderr, "test_unit_comm: %s\n", tn_errmsg());
        return 1;
    }
    R = tn_comm_get_info(c)->rank, P = tn_comm_get_info(c)->size;
    test_slice();
    test_info(c);
    test_small(c);
    test_allreduce(c);
    test_iallreduce(c);
    test_slow_peer_cpu(c);
    test_slow_peer_background(c);
    test_rs_ag(c);
    test_shard_ranges(c);
    test_exchange(c);
    test_errors(c);
    int64_t f[2] = {tl_failures, tl_checks};
    if (tn_comm_allreduce_max_i64(c, f, 2) != 0) f[0] = 1;
    if (tl_failures) fprintf(stderr, "test_unit_comm: rank %d: %d of %d checks failed\n", R, tl_failures, tl_checks);
    if (R == 0)
        printf("test_unit_comm: size %d, %d machine(s), backend %s: %d checks, %lld failed (worst rank)\n", P,
               tn_comm_get_info(c)->n_nodes, tn_comm_backend_name(c), tl_checks, (long long)f[0]);
    tn_comm_finalize(c);
    return f[0] ? 1 : 0;
}
