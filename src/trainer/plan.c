/* plan.c -- the cost model of plan.h: each strategy's communication schedule against one rank's compute. */
#include "trainer/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "trainer/memory_check.h"

#define MIN_BUCKETS 8            /* grad_sync.c never cuts fewer (unless buckets would fall under 64 KB) */
#define MIN_BUCKET_BYTES 65536.0
#define TCP_PAYLOAD 0.915        /* TCP payload of a nominal Ethernet rate, both directions busy (measured
                                  * over the 100 Mbit/s netns link: one stream 11.95 MB/s, one each way at once
                                  * 11.44 MB/s of 12.5, docs/performance.md) */
#define INT8_BYTES_PER_FLOAT (1.0 + 4.0 / 256.0)
#define INT4_BYTES_PER_FLOAT (0.5 + 4.0 / 64.0)
/* comm.c's ring defaults (TANDEM_COMM_PIECE_KB, TANDEM_COMM_WINDOW) and comm_impl.h's TN_COMM_LANES */
#define RING_PIECE_FLOATS 8192.0 /* floats a ring message carries */
#define RING_WINDOW 32.0         /* segments of one op in flight */
#define RING_LANES 16.0          /* ops in flight: the next starts once the one before has all segments started */
#define OUTER_PASSES 6.0         /* DiLoCo's round end reads and writes the parameters, round start, consensus
                                  * and pseudo-gradient: about six passes over G bytes */

typedef struct {
    const char *name, *keys;
} strategy_info;

static const strategy_info INFO[TN_PLAN_N] = {
    [TN_PLAN_DDP] = {"ddp", "zero_stage: 0 (the default)"},
    [TN_PLAN_DDP_BF16] = {"ddp+bf16", "comm_compression: bf16"},
    [TN_PLAN_DDP_INT8] = {"ddp+int8", "comm_compression: int8"},
    [TN_PLAN_DDP_INT4] = {"ddp+int4", "comm_compression: int4"},
    [TN_PLAN_ZERO1] = {"zero1", "zero_stage: 1"},
    [TN_PLAN_ZERO2] = {"zero2", "zero_stage: 2"},
    [TN_PLAN_ZERO3] = {"zero3", "zero_stage: 3"},
    [TN_PLAN_DILOCO] = {"diloco", "sync_mode: diloco"},
    [TN_PLAN_DILOCO_INT8] = {"diloco+int8", "sync_mode: diloco, comm_compression: int8"},
    [TN_PLAN_DILOCO_INT4] = {"diloco+int4", "sync_mode: diloco, comm_compression: int4"},
};

const char *tn_plan_name(tn_plan_strategy s) { return s >= 0 && s < TN_PLAN_N ? INFO[s].name : "?"; }
const char *tn_plan_keys(tn_plan_strategy s) { return s >= 0 && s < TN_PLAN_N ? INFO[s].keys : "?"; }

/* Buckets grad_sync.c cuts from G bytes of gradients. */
static double bucket_count(double G, double cap) {
    if (G <= 0) return 0;
    double per = fmin(cap, fmax(ceil(G / MIN_BUCKETS), MIN_BUCKET_BYTES));
    return ceil(G / per);
}

/* Seconds for `bytes` over the machine link in a pass of `ops` ring collectives (comm_ring.c) of `steps` steps
 * whose blocks (what one member sends a step, summed over the segments) hold `block` floats. A block moves in
 * segments of a piece, each a chain of `steps` messages, one after the other (step t+1 needs step t's data); the
 * chains of one op run `window` at a time, and ops overlap once the one before has started all its segments
 * (RING_LANES at most): chains of ops that fit the window run RING_LANES ops at once. The bytes need the link
 * for bytes / rate plus the last chain's steps; the chains need rounds x steps latencies; whichever is longer. */
static double ring_time(const tn_plan_cluster *c, double bytes, double ops, double block, double steps) {
    if (ops <= 0 || steps <= 0) return 0;
    double segs = fmax(1, ceil(block / RING_PIECE_FLOATS));
    double rounds = ceil(ops * segs / (segs <= RING_WINDOW ? RING_LANES * segs : RING_WINDOW));
    return fmax(bytes / c->link_Bps + steps * c->link_latency_s, rounds * steps * c->link_latency_s);
}

/* In-machine sum of G bytes over R ranks through shared memory: each rank reads and writes its share of every
 * other rank's part once (a reduce-scatter and an all-gather inside the machine). */
static double local_time(const tn_plan_cluster *c, double G) {
    int R = c->ranks_per_machine;
    return R > 1 ? 2.0 * G * (R - 1) / R / c->local_Bps : 0;
}

/* Buckets grad_sync.c cuts from the end of the slab (per floats each, the last one short) and, for bucket k in
 * launch order, the share of backward done when its gradient is final: when backward has finished the group that
 * holds the bucket's first float (it runs from the last group to the first). Without groups, evenly: k+1 of nb. */
static double *ready_shares(const tn_plan_job *j, double nb) {
    int n = (int)nb;
    double *ready = tn_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *ready), total = 0;
    for (int g = 0; g < j->n_groups; g++) total += j->group_floats[g];
    for (int k = 0; k < n; k++) {
        ready[k] = (k + 1.0) / n;
        if (j->n_groups <= 0 || total <= 0) continue;
        double per = fmin(j->bucket_bytes / 4, fmax(ceil(total / MIN_BUCKETS), MIN_BUCKET_BYTES / 4));
        double lo = fmax(0, total - (k + 1.0) * per), top = total, done = 0;
        for (int g = j->n_groups - 1; g >= 0; g--) { /* backward's order */
            done += j->group_work[g];
            top -= j->group_floats[g];
            if (top <= lo) break;
        }
        ready[k] = fmin(1, done);
    }
    return ready;
}

/* When a pass of `busy` seconds has its buckets' exchange done, from the pass's start: bucket k is ready at
 * ready[k] x busy, and its transfer (comm / nb) follows the one before it on the link. *before: the link's
 * seconds that fall before the pass ends (NULL: not wanted). */
static double queue_end(const double *ready, double nb, double busy, double comm, double *before) {
    double end = 0, each = comm / fmax(nb, 1), under = 0;
    for (int k = 0; k < (int)nb; k++) {
        end = fmax(end, ready[k] * busy) + each;
        under += fmax(0, fmin(each, busy - (end - each)));
    }
    if (before) *before = under;
    return fmax(end, busy);
}

/* A step whose buckets are exchanged as backward completes them, at the link's pace: forward, then backward
 * with its exchange (ended by the last bucket's transfer), then the update. cpu: the link's cost on the core for
 * all of the step's bytes (its CPU seconds, or DDP's measured stretch). What moves while backward runs lengthens
 * backward, and only backward (the forward runs before the first bucket, the update after the wait: the link is
 * idle or waited for then): a link-bound step hides it behind the queue (p28b's split: DDP's wait shrank by what
 * its backward grew); what moves after backward costs the waiting core nothing. The share under backward grows
 * with backward: the least fixed point, reached from none (monotone, bounded by all of it). */
static double overlapped_step(const tn_plan_job *j, double comm, double buckets, double cpu) {
    double *ready = ready_shares(j, buckets), extra = 0, step = j->compute_s;
    double bwd0 = j->compute_s * j->backward_share;
    for (int it = 0; it < 200; it++) {
        double before = 0, bwd = bwd0 + extra;
        step = j->compute_s - bwd0 + queue_end(ready, buckets, bwd, comm, &before);
        double next = comm > 0 ? cpu * fmin(1, before / comm) : cpu;
        if (fabs(next - extra) <= 1e-15 * (1 + cpu)) break;
        extra = next;
    }
    free(ready);
    return step;
}

static double encoded_bytes(tn_plan_strategy s, double G) {
    if (s == TN_PLAN_DDP_BF16) return G / 2;
    if (s == TN_PLAN_DDP_INT8 || s == TN_PLAN_DILOCO_INT8) return G / 4 * INT8_BYTES_PER_FLOAT;
    if (s == TN_PLAN_DDP_INT4 || s == TN_PLAN_DILOCO_INT4) return G / 4 * INT4_BYTES_PER_FLOAT;
    return G;
}

static int codec_of(tn_plan_strategy s) {
    if (s == TN_PLAN_DDP_INT4 || s == TN_PLAN_DILOCO_INT4) return 3;
    return s == TN_PLAN_DDP_BF16 ? 1 : (s == TN_PLAN_DDP_INT8 || s == TN_PLAN_DILOCO_INT8) ? 2 : 0;
}

/* Ranks on one core. compute_s was measured with them sharing it, so CPU work beyond compute that each rank does
 * (the codec, the link's bytes) lengthens the step of every rank on that core by the sum of theirs. */
static double sharing(const tn_plan_cluster *c) { return c->ranks_per_core > 1 ? c->ranks_per_core : 1; }

/* The core's time to encode this rank's part and decode every machine's encoding of it (and its core-mates'). */
static double codec_time(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_strategy s) {
    int k = codec_of(s);
    if (c->machines < 2 || k == 0) return 0;
    return j->trainable / c->ranks_per_machine * (j->encode_s[k] + c->machines * j->decode_s[k]) * sharing(c);
}

static void predict_ddp(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r, double link_cpu) {
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes), n = G / 4 / fmax(nb, 1);
    if (r->strategy == TN_PLAN_DDP) { /* the machine leaders' all-reduce ring: segments of a piece x M floats */
        r->link_bytes = M > 1 ? 2 * (M - 1) / M * G : 0;
        r->comm_s = local_time(c, G) + (M > 1 ? ring_time(c, r->link_bytes, nb, n / M, 2 * (M - 1)) : 0);
    } else { /* encoded buckets, each rank's part all-gathered on its rail (comm_exchange.c) */
        r->link_bytes = M > 1 ? (M - 1) * encoded_bytes(r->strategy, G) : 0;
        double part = encoded_bytes(r->strategy, 4 * n / c->ranks_per_machine) / 4;
        r->comm_s = local_time(c, G) + (M > 1 ? ring_time(c, r->link_bytes, nb, part, M - 1) : 0);
    }
    r->step_s = (r->comm_s > 0 ? overlapped_step(j, r->comm_s, nb, link_cpu) : j->compute_s) + codec_time(j, c, r->strategy);
}

/* Of the trainable floats, what stage 3 gathers again for backward (model_forward.c): the layers, each before its
 * backward. The final norm and lm_head (the last group) are still whole from the forward, whose loss backward
 * starts with; the embedding's backward scatters rows and reads no weight, so group 0 comes back only with what
 * shares it (a vision tower: the floats no group holds). Without groups, all of it. */
static double regathered_share(const tn_plan_job *j) {
    if (j->n_groups < 2 || j->trainable <= 0) return 1;
    double grouped = 0;
    for (int g = 0; g < j->n_groups; g++) grouped += j->group_floats[g];
    double tower = fmax(0, j->trainable - grouped), skipped = j->group_floats[j->n_groups - 1];
    if (tower <= 0) skipped += j->group_floats[0];
    return fmin(1, fmax(0, 1 - skipped / j->trainable));
}

/* A pass of `busy` seconds of compute beside `comm` seconds of exchange cut in nb units that follow the
 * compute (the first unit's transfer exposed before, or the last one's after): whichever paces it, plus one
 * unit of the other. */
static double paced(double busy, double comm, double nb) {
    return fmax(busy + comm / fmax(nb, 1), comm + busy / fmax(nb, 1));
}

/* Stage 3 on one machine whose ranks map one copy of the parameters (zero.c): no gather, so no refault. */
static int shared_params(const tn_plan_job *j, const tn_plan_cluster *c, int stage) {
    return stage == 3 && j->zero_shared && c->machines == 1 && c->ranks_per_machine > 1;
}

/* Link seconds of a balanced ZeRO step that run while the core computes (the rest cross while it waits, and
 * their CPU costs it nothing): a paced gather pass all but its first unit (before the pass's compute starts) or,
 * when the link paces the pass, all the compute but the last unit's (after the last gather); the reduce-scatters
 * as they queue under backward (before); stage 3's backward gathers as the forward's, within backward. */
static double zero_link_under_compute(double fwd, double bwd, double gather, double unit, double again, double before,
                                     double nb, int stage) {
    double gathers = fmin(fwd, gather) * (1 - 1 / fmax(nb, 1));
    if (stage < 3) return gathers + before;
    return gathers + fmin(bwd, before + fmin(bwd, again * unit) * (1 - 1 / fmax(nb, 1)));
}

/* Balanced shards: every unit's exchange keeps every link busy each way with (M-1)/M of its bytes. Stages 1-2:
 * the gathers (issued after the update, in forward order) pace the forward, the reduce-scatters the backward,
 * each as its bucket's gradient is final (ready_shares); stage 3 gathers every group again in backward, before
 * its use rather than after: the backward ends after the reduce-scatters' queue, and no sooner than both
 * passes of bytes over the link after the first unit's compute. cpu: the link's CPU seconds for the step's
 * bytes on the rank's core; it lengthens compute by the share of the link's seconds that run under compute
 * (zero_link_under_compute), the least fixed point as in overlapped_step: the first unit's gather before the
 * forward and the reduce-scatters after backward move while the core waits, as DDP's after-backward buckets.
 * Stage 3's backward gathers carry the regathered share of the bytes (regathered_share). With the parameters shared
 * on one machine (shared_params) stage 3 gathers nothing: the reduce-scatters alone, as stage 2's backward. */
static void predict_zero_balanced(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r, int stage,
                                  double cpu) {
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes);
    double rail = G / 4 / fmax(nb, 1) / (c->ranks_per_machine * M); /* a unit's block on a rank's rail ring */
    double unit = local_time(c, G) / 2 + (M > 1 ? ring_time(c, (M - 1) * G / M, nb, rail, M - 1) : 0);
    int shared = shared_params(j, c, stage);
    double again = stage == 3 && !shared ? regathered_share(j) : 0, back = (1 + again) * unit, extra = 0;
    double gather = shared ? 0 : unit; /* a unit's gather in forward */
    r->link_bytes = M > 1 ? (2 + again) * (M - 1) / M * G : 0;
    r->comm_s = gather + back;
    double *ready = ready_shares(j, nb);
    for (int it = 0; it < 200; it++) {
        double grow = j->compute_s > 0 ? (j->compute_s + extra) / j->compute_s : 1, before = 0;
        double fwd = grow * j->compute_s * j->forward_share, bwd = grow * j->compute_s * j->backward_share;
        double backward = fmax(queue_end(ready, nb, bwd, unit, &before), back + bwd / fmax(nb, 1));
        r->step_s = paced(fwd, gather, nb) + backward + grow * j->compute_s - fwd - bwd;
        double under = zero_link_under_compute(fwd, bwd, gather, unit, again, before, nb, stage);
        double next = r->comm_s > 0 ? cpu * fmin(1, under / r->comm_s) : cpu;
        if (fabs(next - extra) <= 1e-15 * (1 + cpu)) break;
        extra = next;
    }
    free(ready);
}

/* Contiguous shards chain the step (docs/performance.md, "Step time by stage"): the first owner's shard must be
 * gathered before the forward passes it, and its gradients reduce-scattered after backward reaches it, so
 * stages 1-2 add a gather and a reduce-scatter of one shard ((M-1) G/M through the owner's link each) to the
 * compute. Stage 3 gathers every layer before use, one owner at a time ((M-1) G in forward and again in
 * backward, compute hidden behind them), then the last shard's reduce-scatter. The link's CPU (cpu) is taken
 * whole from compute here (no run with contiguous shards has measured it). */
static void predict_zero(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_row *r, int stage, double cpu) {
    if (!job->zero_contiguous) {
        predict_zero_balanced(job, c, r, stage, cpu);
        return;
    }
    tn_plan_job busier = *job;
    busier.compute_s += cpu;
    const tn_plan_job *j = &busier;
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes);
    double fwd = j->compute_s * j->forward_share, bwd = j->compute_s * j->backward_share;
    double local = local_time(c, G) / 2; /* a reduce-scatter or an all-gather inside the machine */
    double shard = M > 1 ? (M - 1) * G / M / c->link_Bps + nb * (M - 1) / M * c->link_latency_s : 0;
    double again = stage == 3 ? regathered_share(j) : 0;
    r->link_bytes = M > 1 ? (2 + again) * (M - 1) / M * G : 0;
    if (stage < 3) {
        r->comm_s = 2 * (local + M * shard);
        r->step_s = j->compute_s + 2 * (local + shard);
        return;
    }
    if (shared_params(j, c, stage)) { /* one machine, nothing gathered: the last shard's reduce-scatter */
        r->comm_s = local;
        r->step_s = j->compute_s + local;
        return;
    }
    double pass = local + M * shard; /* every shard gathered, owner after owner */
    r->comm_s = (2 + again) * pass;
    r->step_s = fmax(fwd, pass) + fmax(bwd, again * pass) + shard + local;
}

/* The exchange of a round's pseudo-gradient, overlapped with the next round's H steps; the round's end adds
 * the outer step (a few passes over the parameters). */
static void predict_diloco(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r) {
    double G = 4 * j->trainable, M = c->machines, H = j->diloco_h > 0 ? j->diloco_h : 1;
    double local = local_time(c, G), nb = bucket_count(G, j->bucket_bytes);
    double part = encoded_bytes(r->strategy, G / c->ranks_per_machine) / 4; /* one op, every rank's part */
    double round_link = M > 1 ? ring_time(c, (M - 1) * encoded_bytes(r->strategy, G), 1, part, M - 1) : 0;
    double step = local > 0 ? overlapped_step(j, local, nb, 0) : j->compute_s;
    double outer = M > 1 ? OUTER_PASSES * G / c->local_Bps * sharing(c) : 0;
    r->link_bytes = M > 1 ? (M - 1) * encoded_bytes(r->strategy, G) / H : 0;
    r->comm_s = local + round_link / H;
    r->step_s = step + (fmax(0, round_link - H * step) + outer + codec_time(j, c, r->strategy)) / H;
}

static double memory(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_strategy s) {
    double P = j->trainable, N = (double)c->machines * c->ranks_per_machine, state;
    switch (s) {
    case TN_PLAN_ZERO1: state = 8 * P + 8 * P / N; break;
    case TN_PLAN_ZERO2: state = 4 * P + 12 * P / N; break;
    case TN_PLAN_ZERO3: state = 16 * P / N; break;
    case TN_PLAN_DILOCO: state = 16 * P + 8 * P; break;           /* + round start and consensus */
    case TN_PLAN_DILOCO_INT8: case TN_PLAN_DILOCO_INT4: state = 16 * P + 12 * P; break; /* + the residual */
    case TN_PLAN_DDP_BF16: case TN_PLAN_DDP_INT8: case TN_PLAN_DDP_INT4: state = 16 * P + 4 * P / c->ranks_per_machine; break;
    default: state = 16 * P;
    }
    return state + j->frozen_bytes + j->act_bytes;
}

/* Bytes one rank's core writes a step into pages the backend released (cpu_release: the kernel faults and clears
 * each again on its next write) where DDP writes in place: stage 3 releases the parameters outside its chunks
 * ((N-1)/N of them) after each use and gathers them into released pages in forward and, the regathered share of
 * them, in backward.
 * (Stages 2-3 also release the gradient outside the shard; backward's writes into it showed no clearing in the
 * profile of docs/performance.md, "ZeRO-3's refaults", and are not charged.) */
static double refault_bytes(const tn_plan_job *j, const tn_plan_cluster *c, int stage) {
    double G = 4 * j->trainable, N = (double)c->machines * c->ranks_per_machine;
    if (stage < 3 || shared_params(j, c, stage)) return 0;
    return (1 + regathered_share(j)) * G * (N - 1) / N;
}

/* Passes of an in-machine sum (a reduce-scatter or an all-gather inside the machine) a step of s runs: DDP's
 * all-reduce two (compressed DDP sums inside the machine as DDP), ZeRO's gather and reduce-scatter two and
 * stage 3's backward gather its regathered share more (one, the reduce-scatter, with the parameters shared),
 * DiLoCo's every-step sum two. */
static double local_passes(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_strategy s) {
    if (s != TN_PLAN_ZERO3) return 2;
    return shared_params(j, c, 3) ? 1 : 2 + regathered_share(j);
}

/* The core's CPU for one rank's in-machine passes over G bytes (comm_shm.c): an all-reduce copies the rank's G
 * into its input slot, sums its 1/R slice of the R inputs ((R-1) G/R adds and a G/R copy: G of streaming) and
 * copies the result out, 3 G a rank: 1.5 G a pass, at copy_s_per_byte. Nothing with one rank a machine. */
static double local_cpu(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_strategy s) {
    if (c->ranks_per_machine < 2) return 0;
    return local_passes(j, c, s) * 1.5 * 4 * j->trainable * j->copy_s_per_byte * sharing(c);
}

/* link_cpu: the link's (and the in-machine sum's) CPU seconds for the step's bytes on each rank's core; DDP's
 * buckets and balanced ZeRO's passes say how much of it falls under compute, DiLoCo (and contiguous ZeRO) take
 * all of it. */
static void predict_one(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_strategy s, tn_plan_row *r,
                        double link_cpu) {
    memset(r, 0, sizeof *r);
    r->strategy = s;
    tn_plan_job busier = *job;
    if (s <= TN_PLAN_DDP_INT4) predict_ddp(job, c, r, link_cpu);
    else if (s <= TN_PLAN_ZERO3) { /* the refaults run inside the passes, on the core that computes */
        int stage = s - TN_PLAN_ZERO1 + 1;
        busier.compute_s += job->refault_s_per_byte * refault_bytes(job, c, stage) * sharing(c);
        predict_zero(&busier, c, r, stage, link_cpu);
    } else { /* a round's exchange runs beside the next round's compute: all of its CPU under compute */
        busier.compute_s += link_cpu;
        predict_diloco(&busier, c, r);
    }
}

/* The link's cost on a rank's core for the step's bytes, given its CPU seconds (cpu). DDP and compressed DDP queue
 * their buckets under backward, and their ranks' backward was measured to stretch by more than those seconds
 * (link_stretch_s_per_byte, wall time over the whole machine's bytes as the ranks were placed: no sharing applied);
 * overlapped_step then counts only the share under backward, so a link-bound DDP hides most of it. DiLoCo's round
 * is a background op, polled lazily (comm_progress.c), and its measured steps show no more than the CPU seconds;
 * ZeRO's passes were not measured so: both keep cpu. */
static double link_cost(const tn_plan_cluster *c, tn_plan_strategy s, double cpu, double bytes) {
    if (s > TN_PLAN_DDP_INT4) return cpu;
    return fmax(cpu, c->link_stretch_s_per_byte * bytes);
}

void tn_plan_predict(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_row rows[TN_PLAN_N]) {
    double ranks = (double)c->machines * c->ranks_per_machine;
    for (int s = 0; s < TN_PLAN_N; s++) {
        tn_plan_row *r = &rows[s];
        predict_one(job, c, (tn_plan_strategy)s, r, 0);
        double cpu = 0; /* the bytes' CPU comes out of the ranks' compute */
        if (c->machines > 1) cpu += c->link_cpu_s_per_byte * r->link_bytes / c->ranks_per_machine * sharing(c);
        if (c->machines > 1) cpu = link_cost(c, (tn_plan_strategy)s, cpu, r->link_bytes);
        cpu += local_cpu(job, c, (tn_plan_strategy)s);
        if (cpu > 0) predict_one(job, c, (tn_plan_strategy)s, r, cpu);
        r->exposed_s = r->step_s - job->compute_s;
        r->tokens_per_s = r->step_s > 0 ? ranks * job->tokens_per_rank / r->step_s : 0;
        r->memory_bytes = memory(job, c, r->strategy);
        r->fits = c->rank_memory_bytes <= 0 || r->memory_bytes <= c->rank_memory_bytes;
    }
}

int tn_plan_best(const tn_plan_row rows[TN_PLAN_N]) {
    int fastest = -1;
    for (int s = 0; s < TN_PLAN_N; s++)
        if (rows[s].fits && (fastest < 0 || rows[s].step_s < rows[fastest].step_s)) fastest = s;
    if (fastest < 0) return -1;
    for (int s = 0; s < fastest; s++) /* the enum's order is the order of preference */
        if (rows[s].fits && rows[s].step_s <= 1.05 * rows[fastest].step_s) return s;
    return fastest;
}

int tn_plan_parse_link(const char *option, const char *text, double *Bps) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v))
        return tn_err("%s '%s': expected a rate such as 100mbit, 1gbit, 10gbit or bytes per second", option, text);
    double bits = 0;
    if (strcasecmp(end, "mbit") == 0) bits = v * 1e6;
    else if (strcasecmp(end, "gbit") == 0) bits = v * 1e9;
    else if (*end)
        return tn_err("%s '%s': unknown unit '%s' (expected mbit, gbit or none for bytes per second)", option, text, end);
    *Bps = bits > 0 ? bits / 8 * TCP_PAYLOAD : v;
    return 0;
}

tn_plan_strategy tn_plan_config_strategy(const tn_train_config *cfg) {
    if (cfg->sync_mode == TN_SYNC_DILOCO)
        return cfg->comm_compression == 2 ? TN_PLAN_DILOCO_INT8 : cfg->comm_compression == 3 ? TN_PLAN_DILOCO_INT4 : TN_PLAN_DILOCO;
    if (cfg->comm_compression == 1) return TN_PLAN_DDP_BF16;
    if (cfg->comm_compression == 2) return TN_PLAN_DDP_INT8;
    if (cfg->comm_compression == 3) return TN_PLAN_DDP_INT4;
    int z = cfg->zero_stage > 0 ? cfg->zero_stage : 0;
    return z == 0 ? TN_PLAN_DDP : (tn_plan_strategy)(TN_PLAN_ZERO1 + z - 1);
}

/* Backward FLOPs a token of each group (PaLM's convention, as step_flops in cmd_plan.c): a layer 4 x its
 * projections (input and weight gradients) + attention's two products 8 (H hd) S, plus the recomputed forward
 * with checkpointing; the head 4 V D (tied or not); the embedding's row scatter ~0. */
void tn_plan_job_set_groups(tn_plan_job *job, const tn_train_config *cfg, const tn_model_config *mc, int seq) {
    int L = mc->num_hidden_layers, lora = cfg->finetuning_type == TN_FT_LORA;
    if (L + 2 > TN_PLAN_MAX_GROUPS || L < 1) { job->n_groups = 0; return; } /* evenly, as without a model */
    double D = mc->hidden_size, V = mc->vocab_size, I = mc->intermediate_size;
    double q = (double)mc->num_attention_heads * mc->head_dim, kv = (double)mc->num_key_value_heads * mc->head_dim;
    double proj = 2 * q * D + 2 * kv * D + 3 * I * D;
    double layer_floats = proj + 2 * D + (mc->qkv_bias ? q + 2 * kv : 0) + (mc->o_bias ? D : 0) +
                          (mc->qk_norm ? 2.0 * mc->head_dim : 0);
    double layer_work = 4 * proj + 8 * q * seq + (cfg->gradient_checkpointing ? 2 * proj + 4 * q * seq : 0);
    double head_work = 4 * V * D, total = L * layer_work + head_work;
    job->n_groups = L + 2;
    job->group_floats[0] = lora ? 0 : V * D, job->group_work[0] = 0; /* a tied lm_head adds into it */
    for (int l = 0; l < L; l++)
        job->group_floats[1 + l] = lora ? job->trainable / L : layer_floats, job->group_work[1 + l] = layer_work / total;
    job->group_floats[L + 1] = lora ? 0 : D + (mc->tie_word_embeddings ? 0 : V * D);
    job->group_work[L + 1] = head_work / total;
}

void tn_plan_job_from_config(const tn_train_config *cfg, const tn_memory_need *need, int seq, tn_plan_job *job) {
    int lora = cfg->finetuning_type == TN_FT_LORA, ckpt = cfg->gradient_checkpointing;
    memset(job, 0, sizeof *job);
    job->trainable = need->trainable, job->frozen_bytes = 4 * need->frozen, job->act_bytes = need->act_bytes;
    job->tokens_per_rank = (double)cfg->per_device_train_batch_size * seq * cfg->gradient_accumulation_steps;
    job->bucket_bytes = cfg->ddp_bucket_cap_mb * 1048576.0, job->diloco_h = cfg->diloco_inner_steps;
    job->zero_contiguous = cfg->zero_contiguous;
    job->zero_shared = cfg->zero_shared_params; /* tandem plan clears it for --compute (GPUs: device memory is not
                                                 * shared); the in-run check (plan_check.c) cannot tell a GPU run and
                                                 * keeps it, so one machine's stage 3 on GPUs is predicted ungathered */
    /* forward's share of the FLOPs: 2 of 6 N (full), 2 of 4 N (LoRA); a recomputed forward belongs to backward */
    job->forward_share = lora ? (ckpt ? 1.0 / 3 : 0.5) : (ckpt ? 0.25 : 1.0 / 3);
    job->backward_share = 1 - job->forward_share;
}
