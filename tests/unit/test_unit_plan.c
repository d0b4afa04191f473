/* test_unit_plan -- the plan's cost model (trainer/plan.h) against step times and memory worked out by hand from
 * each strategy's schedule, the choice it makes, and its link-rate parser. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "testlib.h"
#include "trainer/plan.h"
#include "trainer/plan_check.h"

/* 1M trainable parameters (G = 4 MB of gradients), 1 s of compute, a third of it forward, 8 buckets. */
static tn_plan_job job_1m(void) {
    tn_plan_job j;
    memset(&j, 0, sizeof j);
    j.trainable = 1e6, j.compute_s = 1, j.forward_share = 1.0 / 3, j.backward_share = 2.0 / 3;
    j.tokens_per_rank = 1000, j.bucket_bytes = 4 * 1048576.0, j.diloco_h = 8;
    return j;
}

static tn_plan_cluster cluster(int machines, int ranks, double Bps) {
    tn_plan_cluster c = {.machines = machines, .ranks_per_machine = ranks, .link_Bps = Bps, .local_Bps = 5e9};
    return c;
}

/* One rank alone: nothing to exchange, every strategy is its compute; memory by the ZeRO formulas (N = 1). */
static void test_single_rank(void) {
    tn_plan_job j = job_1m();
    j.act_bytes = 1e6;
    tn_plan_cluster c = cluster(1, 1, 1e6);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    for (int s = 0; s < TN_PLAN_N; s++) CHECK_NEAR(r[s].step_s, 1.0, 1e-12);
    CHECK_NEAR(r[TN_PLAN_DDP].memory_bytes, 16e6 + 1e6, 1e-3);
    CHECK_NEAR(r[TN_PLAN_ZERO3].memory_bytes, 16e6 + 1e6, 1e-3);
    CHECK(tn_plan_best(r) == TN_PLAN_DDP);
}

/* Two machines, 1 MB/s, no latency. DDP: the 4 MB all-reduce puts 2 (M-1)/M G = 4 MB each way = 4 s on the link,
 * starting when the first bucket is ready (forward 1/3 s + an eighth of backward 1/12 s): 4.41667 s. bf16 sends
 * (M-1) G/2 = 2 MB: 2 s + 5/12 s. ZeRO with balanced shards (8 units, each (M-1)/M of its bytes each way): the
 * gathers, 2 MB = 2 s, pace the forward (2 s + the last unit's forward 1/24 s), the reduce-scatters, 2 s, the
 * backward (2 s + the last unit's 1/12 s): ZeRO-2 4.125 s; ZeRO-3's backward also gathers again: 4 s + 1/12,
 * 6.125 s. Contiguous shards: ZeRO-2 compute + a gather and a reduce-scatter of one shard of 2 MB: 1 + 2 + 2;
 * ZeRO-3: both passes wait for 4 MB of gathers each (4 s > compute), then the last shard's 2 s: 10 s. DiLoCo:
 * 4 MB every 8 steps, 4 s hidden behind 8 s of compute; its round end 6 passes over 4 MB at 5 GB/s. */
static void test_two_machines(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e6);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 4 + 1.0 / 3 + 1.0 / 12, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DDP].link_bytes, 4e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_DDP_BF16].step_s, 2 + 1.0 / 3 + 1.0 / 12, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 2 + 1.0 / 24 + 2 + 1.0 / 12, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 2 + 1.0 / 24 + 4 + 1.0 / 12, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO2].link_bytes, 4e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_ZERO3].link_bytes, 6e6, 1e-6);
    j.zero_contiguous = 1;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 5.0, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 10.0, 1e-9);
    j.zero_contiguous = 0;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DILOCO].step_s, 1 + 6 * 4e6 / 5e9 / 8, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DILOCO].link_bytes, 4e6 / 8, 1e-6);
    CHECK_NEAR(r[TN_PLAN_ZERO2].memory_bytes, 4 * 1e6 + 12 * 1e6 / 2, 1e-3);
    CHECK_NEAR(r[TN_PLAN_ZERO1].memory_bytes, 8 * 1e6 + 8 * 1e6 / 2, 1e-3);
    CHECK_NEAR(r[TN_PLAN_ZERO3].memory_bytes, 16 * 1e6 / 2, 1e-3);
    /* a round that outlasts its compute shows: 100 kB/s makes DiLoCo's 4 MB take 40 s against 8 s */
    c.link_Bps = 1e5;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DILOCO].step_s, 1 + (40 - 8 + 6 * 4e6 / 5e9) / 8, 1e-9);
    /* compute-bound (a fast link): DDP ends with the last bucket, 1 + 4 MB / 8 over 1 GB/s */
    c.link_Bps = 1e9;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 4e6 / 1e9 / 8, 1e-12);
    CHECK(tn_plan_best(r) == TN_PLAN_DDP); /* DiLoCo is not 5% faster: the simpler one wins */
}

/* Four machines: all-reduce bytes 2 (3/4) G each way; encodings all-gathered: 3 E. */
static void test_four_machines(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(4, 1, 1e6);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].link_bytes, 6e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_DDP_BF16].link_bytes, 6e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].link_bytes, 3e6 * (1 + 4.0 / 256), 1e-6);
    CHECK_NEAR(r[TN_PLAN_DDP_INT4].link_bytes, 3e6 * (0.5 + 4.0 / 64), 1e-6); /* 4 bits + a scale per 64 */
    CHECK_NEAR(r[TN_PLAN_DILOCO_INT4].link_bytes, 3e6 * (0.5 + 4.0 / 64) / j.diloco_h, 1e-6);
    CHECK_NEAR(r[TN_PLAN_ZERO3].memory_bytes, 16e6 / 4, 1e-3);
    /* memory decides: with 6 MB a rank only ZeRO-3's 4 MB fits */
    c.rank_memory_bytes = 6e6;
    tn_plan_predict(&j, &c, r);
    CHECK(tn_plan_best(r) == TN_PLAN_ZERO3);
    c.rank_memory_bytes = 1e6;
    tn_plan_predict(&j, &c, r);
    CHECK(tn_plan_best(r) == -1);
}

/* Per-message latency through tandem's rings (comm_ring.c: 32 KB pieces, 32 segments of an op in flight, 16 ops
 * at once). 256 machines of one rank, 1 ms a message, 10 GB/s, 64 KiB buckets: 62 buckets of 16129 floats, each
 * one segment on every ring (a block of 63 floats on a rail, 4096 of an int8 encoding, 2^21 floats fit one
 * all-reduce segment), so 16 buckets' chains run at once: 4 rounds. A chain is M-1 = 255 messages (reduce-scatter,
 * all-gather of encodings) or 2 (M-1) = 510 (all-reduce): DDP 2.04 s, int8 and each ZeRO pass 1.02 s, each far
 * above its bytes (0.8 ms, 26 ms, 0.4 ms + one chain 0.255 s). With backward 2/3 s over 62 buckets the link paces
 * it from the first bucket (2/3 / 62 s): DDP 1/3 + 1/93 + 2.04, int8 1/3 + 1/93 + 1.02; ZeRO-2 the gathers pace
 * the forward (1.02 + its last unit 1/186 s), the reduce-scatters the backward (1.02 + 1/93). DiLoCo at H = 1:
 * one exchange of 10^6 floats = 123 segments, 32 at a time, 4 rounds of 255 ms = 1.02 s against 1 s of compute:
 * 0.02 s shows, + the round end's 6 passes over 4 MB at 5 GB/s. */
static void test_ring_latency(void) {
    tn_plan_job j = job_1m();
    j.bucket_bytes = 65536, j.diloco_h = 1;
    tn_plan_cluster c = cluster(256, 1, 1e10);
    c.link_latency_s = 1e-3;
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1.0 / 3 + 1.0 / 93 + 2.04, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].step_s, 1.0 / 3 + 1.0 / 93 + 1.02, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 1.02 + 1.0 / 186 + 1.02 + 1.0 / 93, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DILOCO].step_s, 1 + 0.02 + 6 * 4e6 / 5e9, 1e-9);
    /* bandwidth-bound (1 MB/s): the bytes plus one chain; ZeRO-2's passes of 255/256 x 4 MB each */
    c.link_Bps = 1e6;
    tn_plan_predict(&j, &c, r);
    double pass = 4e6 * 255 / 256 / 1e6 + 0.255;
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, pass + 1.0 / 186 + pass + 1.0 / 93, 1e-9);
}

/* Encoding costs the step's core: int8 at 10 ns a float to encode and 1 ns to decode each of 2 encodings. */
static void test_codec_cost(void) {
    tn_plan_job j = job_1m();
    j.encode_s[2] = 1e-8, j.decode_s[2] = 1e-9;
    tn_plan_cluster c = cluster(2, 1, 1e9);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    double link = 1e6 * (1 + 4.0 / 256) / 1e9;
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].step_s, 1 + link / 8 + 1e6 * (1e-8 + 2e-9), 1e-12);
}

/* Moving bytes costs the ranks' cores: 25 ns a byte of link traffic, 0.1 s of CPU for DDP's 4 MB each way. What
 * moves while backward runs lengthens backward (not the forward before it) by that share; what moves after it
 * costs the waiting core nothing. The link (4 s) runs from the first bucket (backward's eighth) on, so 7/8 of
 * backward's 2/3 + x s lies under it: x = 0.1 (7/8)(2/3 + x) / 4, x = a (2/3) / (1 - a) with a = 0.1 (7/32), and
 * the step is forward 1/3 + backward's first eighth (2/3 + x)/8 + the link's 4 s.
 * Two ranks a machine share the CPU (0.05 s each) and their local sum adds 2 (R-1)/R G at 5 GB/s to the exchange.
 * DiLoCo overlaps its exchange with compute throughout: all of it counts. DiLoCo's 4 MB a round is 0.5 MB a
 * step: 12.5 ms, its round still hidden. One machine moves nothing: no cost. ZeRO: test_zero_link_cpu. */
static void test_link_cpu(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e6);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    double a = 0.1 * 7.0 / 32, x = a * (2.0 / 3) / (1 - a);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 4 + 1.0 / 3 + (2.0 / 3 + x) / 8, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DDP].exposed_s, 4 + 1.0 / 3 + (2.0 / 3 + x) / 8 - 1, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DILOCO].step_s, 1.0125 + 6 * 4e6 / 5e9 / 8, 1e-9);
    c = cluster(2, 2, 1e6);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_predict(&j, &c, r);
    double comm = 4 + 4e6 / 5e9;
    a = 0.05 * (7.0 / 8) / comm, x = a * (2.0 / 3) / (1 - a);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, comm + 1.0 / 3 + (2.0 / 3 + x) / 8, 1e-9);
    /* compute-bound (1 GB/s): every bucket but the last crosses under backward; the last one's 0.5 ms after it.
     * Bucket k's transfer starts when it is ready, (k+1)/8 of backward: 7 of 8 transfers under it, x = 0.1 x 7/8 */
    c = cluster(2, 1, 1e9);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 0.1 * 7 / 8 + 4e6 / 1e9 / 8, 1e-9);
    c = cluster(1, 2, 1e6);
    tn_plan_row free_cpu[TN_PLAN_N];
    tn_plan_predict(&j, &c, free_cpu);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_predict(&j, &c, r);
    for (int s = 0; s < TN_PLAN_N; s++) CHECK(r[s].step_s == free_cpu[s].step_s);
}

/* The link's stretch of backward under DDP's bucket queue (60 ns a byte, wall time) over its CPU (25 ns a byte):
 * DDP and compressed DDP take the larger per byte, the rest keep the CPU. Compute-bound at 1 GB/s as in
 * test_link_cpu: 7 of DDP's 8 buckets cross under backward, x = 60e-9 x 4 MB x 7/8 = 0.21 s, step 1 + x + one
 * bucket's 0.5 ms after it; int8 sends E = 1 MB (1 + 4/256): x = 60e-9 E 7/8, step 1 + x + E/8 / 1 GB/s. ZeRO-2
 * and DiLoCo as with the CPU alone; a stretch under the CPU's changes nothing. Two ranks a core: the link's CPU
 * doubles (0.2 s, still under 0.24), the stretch was measured with the cores so shared and stays 0.24 s. */
static void test_link_stretch(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e9);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_row cpu_only[TN_PLAN_N], r[TN_PLAN_N];
    tn_plan_predict(&j, &c, cpu_only);
    c.link_stretch_s_per_byte = 60e-9;
    tn_plan_predict(&j, &c, r);
    double E = 1e6 * (1 + 4.0 / 256);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 60e-9 * 4e6 * 7 / 8 + 4e6 / 1e9 / 8, 1e-9);
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].step_s, 1 + 60e-9 * E * 7 / 8 + E / 1e9 / 8, 1e-9);
    for (int s = TN_PLAN_ZERO1; s < TN_PLAN_N; s++) CHECK(r[s].step_s == cpu_only[s].step_s);
    c.link_stretch_s_per_byte = 10e-9;
    tn_plan_predict(&j, &c, r);
    for (int s = 0; s < TN_PLAN_N; s++) CHECK(r[s].step_s == cpu_only[s].step_s);
    c.link_stretch_s_per_byte = 60e-9, c.ranks_per_core = 2;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 60e-9 * 4e6 * 7 / 8 + 4e6 / 1e9 / 8, 1e-9);
}

/* Balanced ZeRO's link CPU (25 ns a byte) counts where the link runs under compute, as DDP's. ZeRO-2 at 1 MB/s,
 * link-bound: gathers of 2 MB (2 s) pace the forward, which computes (1 + x)/3 s of it, all under the link but
 * the last unit's eighth after it; the reduce-scatters (2 s) start when the first bucket is ready, an eighth into
 * backward, and run under its remaining 7/8. So 7/8 of the compute (1 + x) lies under the 4 link-seconds:
 * x = 0.1 (7/8)(1 + x) / 4 = a / (1 - a) with a = 0.1 x 7/32, and the step is 2 + fwd/8 + 2 + bwd/8 = 4 + (1 + x)/8
 * (taken whole, x = 0.1: 4.1375 s). Two ranks a core: 0.2 s of CPU, a = 0.2 x 7/32. ZeRO-3 (6 MB, 0.15 s): the
 * backward's gathers (before use, the first unit exposed) and reduce-scatters both under backward's (2/3)(1 + x)
 * s, all of it; the forward's 7/8: a = 0.15 (7/24 + 16/24) / 6; step 2 + fwd/8 + 4 + bwd/8 = 6 + (1 + x)/8.
 * Compute-bound (1 GB/s, 2 ms a pass): everything crosses under compute but the first unit's gather before the
 * forward and the last bucket's reduce-scatter after backward: x = 0.1 x 7/8, step (1 + x) + 2 x 0.25 ms. */
static void test_zero_link_cpu(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e6);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    double a = 0.1 * 7 / 32, x = a / (1 - a);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 4 + (1 + x) / 8, 1e-9);
    CHECK_NEAR(r[TN_PLAN_ZERO1].step_s, 4 + (1 + x) / 8, 1e-9);
    a = 0.15 * (7.0 / 24 + 16.0 / 24) / 6, x = a / (1 - a);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 6 + (1 + x) / 8, 1e-9);
    c.ranks_per_core = 2;
    tn_plan_predict(&j, &c, r);
    a = 0.2 * 7 / 32, x = a / (1 - a);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 4 + (1 + x) / 8, 1e-9);
    c = cluster(2, 1, 1e9);
    c.link_cpu_s_per_byte = 25e-9;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 1 + 0.1 * 7 / 8 + 2 * 0.25e-3, 1e-12);
}

/* The in-machine sum's copies and adds on the ranks' cores (copy_s_per_byte, 1 ns a byte): one machine of 2 ranks,
 * G = 4 MB. DDP's all-reduce streams 3 G a rank (copy in, sum a slice: G read, copy out): 12 ms; its exchange (2 G
 * (R-1)/R at 5 GB/s, 0.8 ms in 8 buckets of 0.1 ms, each ready an eighth of backward after the one before) runs
 * under backward but the last bucket's: x = 12 ms x 7/8, step 1 + x + 0.1 ms. ZeRO-2: a gather and a
 * reduce-scatter inside the machine (0.4 ms each, 1.5 G = 6 ms of copies each): under compute but the first
 * gather's and the last reduce-scatter's unit, x = 12 ms x 7/8, step 1 + x + 2 x 0.05 ms. ZeRO-3 gathers again in
 * backward, 18 ms: x = 18 ms x 7/8, step 1 + x + 0.1 ms. Two ranks a core: twice. A rank alone on its machine sums
 * nothing: no cost. */
static void test_local_copy_cpu(void) {
    tn_plan_job j = job_1m();
    j.copy_s_per_byte = 1e-9;
    tn_plan_cluster c = cluster(1, 2, 1e6);
    tn_plan_row r[TN_PLAN_N], free_copies[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 12e-3 * 7 / 8 + 0.1e-3, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 1 + 12e-3 * 7 / 8 + 2 * 0.05e-3, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 1 + 18e-3 * 7 / 8 + 0.1e-3, 1e-12);
    c.ranks_per_core = 2;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 24e-3 * 7 / 8 + 0.1e-3, 1e-12);
    c = cluster(2, 1, 1e9);
    tn_plan_predict(&j, &c, r);
    j.copy_s_per_byte = 0;
    tn_plan_predict(&j, &c, free_copies);
    for (int s = 0; s < TN_PLAN_N; s++) CHECK(r[s].step_s == free_copies[s].step_s);
}

/* Pages the backend released and a rank writes again (refault_s_per_byte, 1 ns a byte here), on one machine of 4
 * ranks, compute-bound: ZeRO-3 gathers the parameters outside its chunks, 3/4 of G = 3 MB, into released pages
 * twice (forward, backward): 6 MB, 6 ms. The in-machine exchange (G 3/4 at 5 GB/s a pass, 0.6 ms) shows by one
 * bucket of 8 in each pass: 1 + 0.006 + 2 x 0.6 ms / 8. DDP, ZeRO-1/2 (parameters resident) and DiLoCo write in
 * place: unchanged. Two ranks a core: each one's faults land on both. */
static void test_refault_cost(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(1, 4, 1e6);
    tn_plan_row r[TN_PLAN_N], free_faults[TN_PLAN_N];
    tn_plan_predict(&j, &c, free_faults);
    j.refault_s_per_byte = 1e-9;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 1 + 6e-3 + 2 * 0.6e-3 / 8, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s - free_faults[TN_PLAN_ZERO3].step_s, 6e-3, 1e-12);
    CHECK(r[TN_PLAN_ZERO2].step_s == free_faults[TN_PLAN_ZERO2].step_s);
    CHECK(r[TN_PLAN_DDP].step_s == free_faults[TN_PLAN_DDP].step_s);
    CHECK(r[TN_PLAN_ZERO1].step_s == free_faults[TN_PLAN_ZERO1].step_s);
    CHECK(r[TN_PLAN_DILOCO].step_s == free_faults[TN_PLAN_DILOCO].step_s);
    c.ranks_per_core = 2;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s - free_faults[TN_PLAN_ZERO3].step_s, 12e-3, 1e-12);
}

/* Stage 3 gathers again for backward only what backward reads (model_forward.c): the layers. The head (norm and
 * lm_head) is still whole from the forward and the embedding's backward reads no weight. Groups of 1M floats:
 * embedding 0.2M, two layers 0.3M each, head 0.2M: 0.6 of G again. Two machines at 1 MB/s: (2 + 0.6) x G/2 =
 * 5.2 MB; the backward's gathers 3.2 s pace it (+ its last unit's 1/12 s; the reduce-scatters' queue, from the
 * head's bucket at 0.2 of backward, ends at 2.13 s): 2 + 1/24 + 3.2 + 1/12. Refaults on one machine of 4 ranks:
 * 3/4 of G in forward and 0.6 of that in backward, 4.8 MB at 1 ns. A vision tower (floats no group holds) is
 * gathered with the embedding: of 1.2M, all but the head's 0.2M. LoRA's adapters live in the layers: all of G. */
static void test_regathered_share(void) {
    tn_plan_job j = job_1m();
    const double floats[4] = {0.2e6, 0.3e6, 0.3e6, 0.2e6}, work[4] = {0, 0.4, 0.4, 0.2};
    j.n_groups = 4;
    memcpy(j.group_floats, floats, sizeof floats), memcpy(j.group_work, work, sizeof work);
    tn_plan_cluster c = cluster(2, 1, 1e6);
    tn_plan_row r[TN_PLAN_N], free_faults[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].link_bytes, 5.2e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_ZERO2].link_bytes, 4e6, 1e-6);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 2 + 1.0 / 24 + 3.2 + 1.0 / 12, 1e-9);
    c = cluster(1, 4, 1e6);
    tn_plan_predict(&j, &c, free_faults);
    j.refault_s_per_byte = 1e-9;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s - free_faults[TN_PLAN_ZERO3].step_s, 4.8e-3, 1e-12);
    j.refault_s_per_byte = 0, j.trainable = 1.2e6;
    c = cluster(2, 1, 1e6);
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].link_bytes, (2 + 1.0 / 1.2) * 2.4e6, 1e-6);
    const double lora[4] = {0, 0.5e6, 0.5e6, 0};
    memcpy(j.group_floats, lora, sizeof lora), j.trainable = 1e6;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].link_bytes, 6e6, 1e-6);
}

/* ZeRO-3 with the parameters shared on one machine (zero_shared, zero.c): nothing is gathered, so nothing is
 * refaulted, and the in-machine work is the gradients' reduce-scatter alone. One machine of 4 ranks, 1 ns a byte
 * of copies and of refaults: one pass of 1.5 G = 6 ms of copies, under backward but the last of 8 buckets
 * (x = 6 ms x 7/8), and the last bucket's 0.6 ms / 8 after it: 1 + x + 0.075 ms, below ZeRO-2's two passes (12 ms
 * x 7/8 + 2 x 0.075 ms). Contiguous shards take the copies whole and add the last shard's reduce-scatter (0.6 ms).
 * Across machines, and with zero_shared off, the rows are those of gathered parameters. */
static void test_shared_params(void) {
    tn_plan_job j = job_1m();
    j.copy_s_per_byte = 1e-9, j.refault_s_per_byte = 1e-9, j.zero_shared = 1;
    tn_plan_cluster c = cluster(1, 4, 1e6);
    tn_plan_row r[TN_PLAN_N], gathered[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 1 + 6e-3 * 7 / 8 + 0.6e-3 / 8, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 1 + 12e-3 * 7 / 8 + 2 * 0.6e-3 / 8, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO3].memory_bytes, 16e6 / 4, 1e-6);
    j.zero_contiguous = 1;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 1 + 6e-3 + 0.6e-3, 1e-12);
    j.zero_contiguous = 0;
    tn_plan_predict(&j, &c, r);
    j.zero_shared = 0;
    tn_plan_predict(&j, &c, gathered);
    CHECK(gathered[TN_PLAN_ZERO3].step_s > r[TN_PLAN_ZERO3].step_s + 6e-3); /* its refaults alone: 2 x 3 MB */
    c = cluster(2, 2, 1e6);
    tn_plan_predict(&j, &c, gathered);
    j.zero_shared = 1;
    tn_plan_predict(&j, &c, r);
    for (int s = 0; s < TN_PLAN_N; s++) CHECK(r[s].step_s == gathered[s].step_s);
}

/* Two ranks a core (four machines' namespaces on two cores): compute_s was measured so shared, and the CPU each
 * rank spends beyond it lands on both. DiLoCo: 25 ns x 4 MB / 8 a step = 12.5 ms per rank, 25 ms on the core, and
 * its round end's 6 passes twice; int8's codec twice (10 ns to encode and 1 ns to decode each of 2 encodings). */
static void test_ranks_per_core(void) {
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e6);
    c.link_cpu_s_per_byte = 25e-9, c.ranks_per_core = 2;
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DILOCO].step_s, 1.025 + 2 * 6 * 4e6 / 5e9 / 8, 1e-9);
    j.encode_s[2] = 1e-8, j.decode_s[2] = 1e-9;
    c = cluster(2, 1, 1e9);
    c.ranks_per_core = 2;
    tn_plan_predict(&j, &c, r);
    double link = 1e6 * (1 + 4.0 / 256) / 1e9;
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].step_s, 1 + link / 8 + 2 * 1e6 * (1e-8 + 2e-9), 1e-12);
    c.ranks_per_core = 1; /* 1 and 0 (unset) both mean a core each */
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP_INT8].step_s, 1 + link / 8 + 1e6 * (1e-8 + 2e-9), 1e-12);
}

/* When buckets are ready: 1M floats in slab order, an embedding of 250k (no backward work: final at the end), a
 * layer of 500k and a head of 250k, each half of backward. The 8 buckets of 125k from the slab's end: two in the
 * head, ready at half of backward (1/3 + 1/3 s); six in the layer or the embedding, ready when it ends (1 s).
 * At 1 GB/s (0.5 ms a bucket) the head's two cross under backward and the other six queue after it: 1 + 6 x 0.5
 * ms (evenly ready, 1 + 0.5 ms). At 1 MB/s the 4 s exchange starts at 2/3 s. A tied embedding holding every
 * float: nothing ready before the end, 1 + 4 s. ZeRO-2's reduce-scatters (2 MB, 2 s) follow the same buckets:
 * at 1 GB/s 1 + 6 x 0.25 ms after the gathers' pacing of the forward (1/3 + 2 ms / 8). ZeRO-3 as much: its
 * backward's gathers (another 2 ms) go before their layers' use, not after the gradients. */
static void test_bucket_readiness(void) {
    tn_plan_job j = job_1m();
    j.n_groups = 3;
    double floats[3] = {250e3, 500e3, 250e3}, work[3] = {0, 0.5, 0.5};
    for (int g = 0; g < 3; g++) j.group_floats[g] = floats[g], j.group_work[g] = work[g];
    tn_plan_cluster c = cluster(2, 1, 1e9);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 6 * 0.5e-3, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO2].step_s, 1 + 2e-3 / 8 + 6 * 0.25e-3, 1e-12);
    CHECK_NEAR(r[TN_PLAN_ZERO3].step_s, 1 + 2e-3 / 8 + 6 * 0.25e-3, 1e-12);
    c.link_Bps = 1e6;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 2.0 / 3 + 4, 1e-9);
    j.group_floats[0] = 1e6, j.group_floats[1] = j.group_floats[2] = 0;
    tn_plan_predict(&j, &c, r);
    CHECK_NEAR(r[TN_PLAN_DDP].step_s, 1 + 4, 1e-9);
}

/* The groups of bench train's tiny preset (vocab 4096, hidden 256, 4 layers of 4 heads, intermediate 688, 256
 * tokens), worked out by hand: a layer holds 4 x 256^2 + 3 x 688 x 256 + 2 x 256 = 791040 floats and does
 * 4 x 790528 + 8 x 256 x 256 = 3686400 FLOPs a token of backward; the head 4 x 4096 x 256 = 4194304 of
 * 18939904 in all. Tied: the lm_head's floats belong to the embedding, its work stays first. */
static void test_groups_from_model(void) {
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    cfg.gradient_checkpointing = 0, cfg.finetuning_type = TN_FT_FULL;
    tn_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 4096, mc.hidden_size = 256, mc.num_hidden_layers = 4, mc.num_attention_heads = 4;
    mc.num_key_value_heads = 4, mc.head_dim = 64, mc.intermediate_size = 688;
    tn_plan_job j = job_1m();
    tn_plan_job_set_groups(&j, &cfg, &mc, 256);
    CHECK(j.n_groups == 6);
    CHECK_NEAR(j.group_floats[0], 1048576, 1e-9);
    CHECK_NEAR(j.group_floats[1], 791040, 1e-9);
    CHECK_NEAR(j.group_floats[5], 256 + 1048576, 1e-9);
    CHECK_NEAR(j.group_work[0], 0, 1e-15);
    CHECK_NEAR(j.group_work[2], 3686400.0 / 18939904, 1e-12);
    CHECK_NEAR(j.group_work[5], 4194304.0 / 18939904, 1e-12);
    mc.tie_word_embeddings = 1;
    tn_plan_job_set_groups(&j, &cfg, &mc, 256);
    CHECK_NEAR(j.group_floats[5], 256, 1e-9);
    CHECK_NEAR(j.group_work[5], 4194304.0 / 18939904, 1e-12);
}

static void test_parse_link(void) {
    double v = 0;
    CHECK(tn_plan_parse_link("--link", "100mbit", &v) == 0);
    CHECK_NEAR(v, 100e6 / 8 * 0.915, 1e-6);
    CHECK(tn_plan_parse_link("--link", "10Gbit", &v) == 0);
    CHECK_NEAR(v, 10e9 / 8 * 0.915, 1e-3);
    CHECK(tn_plan_parse_link("--link", "11.44e6", &v) == 0);
    CHECK_NEAR(v, 11.44e6, 1e-9);
    CHECK(tn_plan_parse_link("--link", "fast", &v) == -1);
    CHECK(strstr(tn_errmsg(), "--link 'fast'") != NULL);
    CHECK(tn_plan_parse_link("--link", "10tbit", &v) == -1);
    CHECK(tn_plan_parse_link("--link", "-5", &v) == -1);
    CHECK(tn_plan_parse_link("--link", "nan", &v) == -1);
}

/* What a run prints beside the plan: its own prediction always; the warning only when the best strategy is
 * predicted more than 2x faster than measured, naming the keys that select it. */
static void test_verdict(void) {
    tn_train_config cfg;
    tn_train_config_defaults(&cfg);
    snprintf(cfg.source_path, sizeof cfg.source_path, "run.yaml");
    tn_plan_job j = job_1m();
    tn_plan_cluster c = cluster(2, 1, 1e6);
    tn_plan_row r[TN_PLAN_N];
    tn_plan_predict(&j, &c, r);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tn_plan_verdict(&cfg, r, 4.5, 1.0, f); /* DiLoCo predicted ~1.0 s: 4.5x */
    fclose(f);
    CHECKF(strstr(text, "4.500 s a step measured (1.000 s of it compute), 4.417 s predicted for ddp") != NULL, "%s", text);
    CHECKF(strstr(text, "warning: this run is link-bound: diloco (sync_mode: diloco) is predicted 1.001 s a step, 4.5x "
                        "faster than measured") != NULL, "%s", text);
    free(text);
    f = open_memstream(&text, &len);
    tn_plan_verdict(&cfg, r, 1.9, 1.0, f); /* within 2x of the best: no warning */
    fclose(f);
    CHECKF(strstr(text, "warning") == NULL && strstr(text, "1.900 s a step measured") != NULL, "%s", text);
    free(text);
    cfg.sync_mode = TN_SYNC_DILOCO; /* already the best: no warning however slow */
    f = open_memstream(&text, &len);
    tn_plan_verdict(&cfg, r, 9.0, 1.0, f);
    fclose(f);
    CHECKF(strstr(text, "warning") == NULL && strstr(text, "predicted for diloco") != NULL, "%s", text);
    free(text);
}

int main(void) {
    test_verdict();
    test_single_rank();
    test_two_machines();
    test_four_machines();
    test_ring_latency();
    test_codec_cost();
    test_link_cpu();
    test_zero_link_cpu();
    test_link_stretch();
    test_local_copy_cpu();
    test_ranks_per_core();
    test_refault_cost();
    test_regathered_share();
    test_shared_params();
    test_bucket_readiness();
    test_groups_from_model();
    test_parse_link();
    return tl_done("test_unit_plan");
}
