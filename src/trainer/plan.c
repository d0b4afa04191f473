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

/* Seconds for `bytes` over the machine link in `messages` messages. */
static double link_time(const tn_plan_cluster *c, double bytes, double messages) {
    return bytes / c->link_Bps + messages * c->link_latency_s;
}

/* In-machine sum of G bytes over R ranks through shared memory: each rank reads and writes its share of every
 * other rank's part once (a reduce-scatter and an all-gather inside the machine). */
static double local_time(const tn_plan_cluster *c, double G) {
    int R = c->ranks_per_machine;
    return R > 1 ? 2.0 * G * (R - 1) / R / c->local_Bps : 0;
}

/* A step whose exchange starts when the first bucket is ready (forward, and backward through the last
 * bucket's layers) and then runs at the link's pace, bucket after bucket: it ends with compute plus the last
 * bucket's transfer, or with the first bucket's readiness plus the whole transfer, whichever is later. */
static double overlapped_step(const tn_plan_job *j, double comm, double buckets) {
    double first_ready = j->compute_s * (j->forward_share + j->backward_share / fmax(buckets, 1));
    return fmax(j->compute_s + comm / fmax(buckets, 1), first_ready + comm);
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

/* The core's time to encode this rank's part and decode every machine's encoding of it. */
static double codec_time(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_strategy s) {
    int k = codec_of(s);
    if (c->machines < 2 || k == 0) return 0;
    return j->trainable / c->ranks_per_machine * (j->encode_s[k] + c->machines * j->decode_s[k]);
}

static void predict_ddp(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r) {
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes);
    if (r->strategy == TN_PLAN_DDP) {
        r->link_bytes = M > 1 ? 2 * (M - 1) / M * G : 0;
        r->comm_s = local_time(c, G) + (M > 1 ? link_time(c, r->link_bytes, nb * 2 * (M - 1)) : 0);
    } else { /* encoded buckets, all-gathered between machines */
        r->link_bytes = M > 1 ? (M - 1) * encoded_bytes(r->strategy, G) : 0;
        r->comm_s = local_time(c, G) + (M > 1 ? link_time(c, r->link_bytes, nb * (M - 1)) : 0);
    }
    r->step_s = (r->comm_s > 0 ? overlapped_step(j, r->comm_s, nb) : j->compute_s) + codec_time(j, c, r->strategy);
}

/* A pass of `busy` seconds of compute beside `comm` seconds of exchange cut in nb units that follow the
 * compute (the first unit's transfer exposed before, or the last one's after): whichever paces it, plus one
 * unit of the other. */
static double paced(double busy, double comm, double nb) {
    return fmax(busy + comm / fmax(nb, 1), comm + busy / fmax(nb, 1));
}

/* Balanced shards: every unit's exchange keeps every link busy each way with (M-1)/M of its bytes. Stages 1-2:
 * the gathers (issued after the update, in forward order) pace the forward, the reduce-scatters the backward;
 * stage 3 gathers every group again in backward, beside the reduce-scatters. */
static void predict_zero_balanced(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r, int stage) {
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes);
    double fwd = j->compute_s * j->forward_share, bwd = j->compute_s * j->backward_share;
    double rest = j->compute_s - fwd - bwd;
    double unit = local_time(c, G) / 2 + (M > 1 ? link_time(c, (M - 1) * G / M, nb * (M - 1)) : 0);
    double back = stage == 3 ? 2 * unit : unit;
    r->link_bytes = M > 1 ? (stage == 3 ? 3 : 2) * (M - 1) / M * G : 0;
    r->comm_s = unit + back;
    r->step_s = paced(fwd, unit, nb) + paced(bwd, back, nb) + rest;
}

/* Contiguous shards chain the step (docs/performance.md, "Step time by stage"): the first owner's shard must be
 * gathered before the forward passes it, and its gradients reduce-scattered after backward reaches it, so
 * stages 1-2 add a gather and a reduce-scatter of one shard ((M-1) G/M through the owner's link each) to the
 * compute. Stage 3 gathers every layer before use, one owner at a time ((M-1) G in forward and again in
 * backward, compute hidden behind them), then the last shard's reduce-scatter. */
static void predict_zero(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r, int stage) {
    if (!j->zero_contiguous) {
        predict_zero_balanced(j, c, r, stage);
        return;
    }
    double G = 4 * j->trainable, M = c->machines, nb = bucket_count(G, j->bucket_bytes);
    double fwd = j->compute_s * j->forward_share, bwd = j->compute_s * j->backward_share;
    double local = local_time(c, G) / 2; /* a reduce-scatter or an all-gather inside the machine */
    double shard = M > 1 ? link_time(c, (M - 1) * G / M, nb * (M - 1) / M) : 0;
    r->link_bytes = M > 1 ? (stage == 3 ? 3 : 2) * (M - 1) / M * G : 0;
    if (stage < 3) {
        r->comm_s = 2 * (local + M * shard);
        r->step_s = j->compute_s + 2 * (local + shard);
        return;
    }
    double pass = local + M * shard; /* every shard gathered, owner after owner */
    r->comm_s = 2 * pass + pass;
    r->step_s = fmax(fwd, pass) + fmax(bwd, pass) + shard + local;
}

/* The exchange of a round's pseudo-gradient, overlapped with the next round's H steps; the round's end adds
 * the outer step (a few passes over the parameters). */
static void predict_diloco(const tn_plan_job *j, const tn_plan_cluster *c, tn_plan_row *r) {
    double G = 4 * j->trainable, M = c->machines, H = j->diloco_h > 0 ? j->diloco_h : 1;
    double local = local_time(c, G), nb = bucket_count(G, j->bucket_bytes);
    double round_link = M > 1 ? link_time(c, (M - 1) * encoded_bytes(r->strategy, G), M - 1) : 0;
    double step = local > 0 ? overlapped_step(j, local, nb) : j->compute_s;
    double outer = M > 1 ? OUTER_PASSES * G / c->local_Bps : 0;
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

static void predict_one(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_strategy s, tn_plan_row *r) {
    memset(r, 0, sizeof *r);
    r->strategy = s;
    if (s <= TN_PLAN_DDP_INT4) predict_ddp(job, c, r);
    else if (s <= TN_PLAN_ZERO3) predict_zero(job, c, r, s - TN_PLAN_ZERO1 + 1);
    else predict_diloco(job, c, r);
}

void tn_plan_predict(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_row rows[TN_PLAN_N]) {
    double ranks = (double)c->machines * c->ranks_per_machine;
    for (int s = 0; s < TN_PLAN_N; s++) {
        tn_plan_row *r = &rows[s];
        predict_one(job, c, (tn_plan_strategy)s, r);
        if (c->machines > 1 && c->link_cpu_s_per_byte > 0) { /* the bytes' CPU comes out of the ranks' compute */
            tn_plan_job busier = *job;
            busier.compute_s += c->link_cpu_s_per_byte * r->link_bytes / c->ranks_per_machine;
            predict_one(&busier, c, (tn_plan_strategy)s, r);
        }
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

void tn_plan_job_from_config(const tn_train_config *cfg, const tn_memory_need *need, int seq, tn_plan_job *job) {
    int lora = cfg->finetuning_type == TN_FT_LORA, ckpt = cfg->gradient_checkpointing;
    memset(job, 0, sizeof *job);
    job->trainable = need->trainable, job->frozen_bytes = 4 * need->frozen, job->act_bytes = need->act_bytes;
    job->tokens_per_rank = (double)cfg->per_device_train_batch_size * seq * cfg->gradient_accumulation_steps;
    job->bucket_bytes = cfg->ddp_bucket_cap_mb * 1048576.0, job->diloco_h = cfg->diloco_inner_steps;
    job->zero_contiguous = cfg->zero_contiguous;
    /* forward's share of the FLOPs: 2 of 6 N (full), 2 of 4 N (LoRA); a recomputed forward belongs to backward */
    job->forward_share = lora ? (ckpt ? 1.0 / 3 : 0.5) : (ckpt ? 0.25 : 1.0 / 3);
    job->backward_share = 1 - job->forward_share;
}
