/* plan -- which way of keeping ranks in agreement will train a job fastest, predicted before the run.
 *
 * Owns the cost model behind `tandem plan` and the train-time comparison with it. A step of every strategy is
 * one rank's compute (forward, backward, update: measured or given) plus the communication that compute cannot
 * hide, from each strategy's schedule as tandem runs it:
 *   ddp          gradients all-reduced per bucket during backward: the machine link carries 2 (M-1)/M G
 *                each way (G = 4 bytes x trainable parameters), summed inside a machine first;
 *   ddp+bf16/int8/int4  the same buckets encoded, the encodings all-gathered between machines: (M-1) E each
 *                way (E = G/2, G/4 plus one float scale per 256 values, or G/8 plus one per 64);
 *   zero 1-2     buckets reduce-scattered during backward, the updated parameters all-gathered unit by unit
 *                while the next forward runs. Balanced shards (the default, FSDP's layout): every unit
 *                moves (M-1)/M of its bytes each way on every link, so the reduce-scatter overlaps backward
 *                as DDP's all-reduce does (half its bytes) and the gather overlaps forward the same way.
 *                Contiguous shards (zero_shard_layout: contiguous): a bucket's bytes all go to one machine,
 *                (M-1) G/M per owner, one owner after another: the step waits for a shard each way;
 *   zero 3       + every layer gathered again before its backward (beside the reduce-scatter; the lm_head is
 *                still whole from the forward, the embedding's backward reads no weight);
 *                Stage 3 releases the parameters outside its chunks after each use: on the CPU the kernel
 *                faults and clears each released page again when the next gather writes it
 *                (refault_s_per_byte, in forward and again for the layers in backward), which DDP's
 *                parameters, written in place, do not pay;
 *   diloco H     gradients summed inside the machine each step; between machines a pseudo-gradient every H
 *                steps ((M-1) E), overlapped with the next round: only what exceeds a round's compute shows.
 * A bucket can leave only when backward has made its gradient final: backward runs from the last layer (and the
 * lm_head) to the embedding, so the buckets holding the embedding (and a tied lm_head's gradient, which adds into
 * it) wait for backward's end; the plan follows the model's groups (tn_plan_job_set_groups) and queues each bucket
 * on the link from its moment (DDP, compressed DDP, ZeRO's reduce-scatters).
 * Every exchange runs on tandem's pipelined rings (comm_ring.c): a unit's block moves in 32 KB pieces, each a chain
 * of M-1 messages (2 (M-1) for the all-reduce), 32 pieces of an op and up to 16 ops in flight; a pass costs its
 * bytes plus one chain's latency, or its chains' latency in rounds of what is in flight, whichever is longer.
 * Moving bytes costs CPU too (the TCP stack, MPI, the progress thread: bench allreduce measures it per machine), and
 * that CPU is taken from the cores that compute: a machine's link_cpu_s_per_byte x its link bytes, shared by its
 * ranks, lengthens each rank's compute by the share of the transfer that runs while the core computes: for DDP
 * what crosses under backward (after it the core only waits), for balanced ZeRO its gathers and reduce-scatters
 * but the first unit's gather before the forward and what queues after backward, all of it for DiLoCo, whose
 * round exchange runs beside the next round's compute. Under DDP's bucket queue the computing core loses more than
 * those CPU seconds (link_stretch_s_per_byte, measured as wall time; the larger of the two is charged there);
 * DiLoCo's background exchange and ZeRO keep the CPU seconds. The in-machine sum likewise costs its copies and adds on
 * each rank's core (copy_s_per_byte, 3 G a rank per all-reduce), under the same share. Ranks that share a core
 * (ranks_per_core) were measured so; the CPU beyond compute of each (link, codec) lands on all of them.
 * Memory per rank: the ZeRO formulas over trainable state (16 bytes a parameter: weight, gradient, two AdamW
 * moments; stage 1 8 + 8/N, stage 2 4 + 12/N, stage 3 16/N), frozen weights (4 bytes), activations of one
 * micro-batch, and DiLoCo's round start, consensus and (momentum, residual) copies.
 * What it does not model: stragglers, data loading, a link shared with other traffic. DiLoCo and compression
 * change what a step learns, not only its time: the plan predicts throughput; docs/performance.md measures
 * time to a loss. */
#ifndef TN_PLAN_H
#define TN_PLAN_H

#include "config/train_config.h"
#include "model/model_config.h"
#include "trainer/memory_check.h"

/* A shared-memory reduction inside a machine (memcpy-bound), bytes/s: the in-machine rate when nothing better is
 * given, and the "link" of a one-machine job. */
#define TN_PLAN_LOCAL_BPS 5e9
/* Gradient groups the plan follows through backward: the embedding, up to this many layers less two, the head. */
#define TN_PLAN_MAX_GROUPS 514

typedef enum {
    TN_PLAN_DDP,
    TN_PLAN_DDP_BF16,
    TN_PLAN_DDP_INT8,
    TN_PLAN_DDP_INT4,
    TN_PLAN_ZERO1,
    TN_PLAN_ZERO2,
    TN_PLAN_ZERO3,
    TN_PLAN_DILOCO,
    TN_PLAN_DILOCO_INT8,
    TN_PLAN_DILOCO_INT4,
    TN_PLAN_N
} tn_plan_strategy;

typedef struct {
    int machines, ranks_per_machine;
    double link_Bps;          /* what one machine's link carries each way while both ways are busy, bytes/s
                               * (TCP payload; what bench allreduce records) */
    double link_latency_s;    /* per message on that link */
    double local_Bps;         /* shared-memory reduction inside a machine, bytes/s */
    double link_cpu_s_per_byte; /* CPU seconds one machine spends per byte its link carries each way (sending it
                               * and receiving as many), taken from its ranks' cores; 0: free */
    double link_stretch_s_per_byte; /* seconds one rank's compute lengthens per byte its machine's link carries
                               * each way while a bucketed backward exchange (DDP, compressed DDP) runs under it:
                               * wall time (bench train's split of a DDP step), which holds the link's CPU seconds
                               * and what they do not show (the progress thread's wake-ups on the computing core,
                               * the softirq landing there); 0: link_cpu_s_per_byte alone */
    double rank_memory_bytes; /* what one rank may use; 0: unknown (everything fits) */
    int ranks_per_core;       /* ranks that share each core (network namespaces on one host); compute_s was
                               * measured so shared, and CPU beyond it (the link's, the codec's) lands on every
                               * rank of the core; 0 or 1: a core each */
} tn_plan_cluster;

typedef struct {
    double trainable;         /* trainable parameters (sharded and exchanged) */
    double frozen_bytes;      /* weights that are not trained (LoRA's base), replicated */
    double act_bytes;         /* activations of one micro-batch */
    double compute_s;         /* one rank's step alone: forward + backward of its micro-batches + update */
    double forward_share;     /* of compute_s: forward (what a parameter gather can hide behind) */
    double backward_share;    /* of compute_s: backward (what a gradient exchange can hide behind) */
    double tokens_per_rank;   /* tokens one rank trains per step */
    double bucket_bytes;      /* gradient bucket cap */
    int diloco_h;             /* inner steps of a DiLoCo round */
    int zero_contiguous;      /* ZeRO's shards: 0 balanced, 1 contiguous (zero_shard_layout) */
    int zero_shared;          /* ZeRO-3 with every rank on one machine maps one shared copy of the parameters
                               * (zero_shared_params, host memory: zero.c): nothing gathered or refaulted */
    double encode_s[4], decode_s[4]; /* seconds per float of each codec (compress.h's order: fp32, bf16, int8, int4)
                                      * on the core that runs the step; 0: free */
    double refault_s_per_byte; /* the core's seconds per byte to write a released page again (the backend's
                               * release hands it to the kernel, which clears it on the next write) beyond writing it
                               * in place; 0: free (a GPU: nothing released goes back to a kernel) */
    double copy_s_per_byte;   /* the core's seconds per byte to copy through the machine's shared window: the
                               * in-machine sum (comm_shm.c) runs on the progress thread, on the core that
                               * computes; 0: free (a GPU sums on the device) */
    int n_groups;             /* gradient groups in slab order (embedding first, the final norm and lm_head
                               * last); backward completes them last first. 0: buckets ready evenly through it */
    double group_floats[TN_PLAN_MAX_GROUPS]; /* trainable floats of each group */
    double group_work[TN_PLAN_MAX_GROUPS];   /* its share of backward's compute (the shares sum to 1) */
} tn_plan_job;

typedef struct {
    tn_plan_strategy strategy;
    double comm_s;            /* the step's communication if nothing overlapped */
    double exposed_s;         /* what the step waits for */
    double step_s;            /* compute + exposed */
    double tokens_per_s;      /* all ranks */
    double memory_bytes;      /* per rank */
    double link_bytes;        /* per step on the busiest machine link, each way */
    int fits;                 /* memory_bytes within the cluster's per-rank memory */
} tn_plan_row;

/* The strategy a training config runs (zero_stage, comm_compression, sync_mode). */
tn_plan_strategy tn_plan_config_strategy(const tn_train_config *cfg);
/* A job's sizes and schedule shares from its config and memory estimate at seq tokens a sequence (compute_s and
 * the codec costs left 0 for the caller). */
void tn_plan_job_from_config(const tn_train_config *cfg, const tn_memory_need *need, int seq, tn_plan_job *job);
/* The groups of a job from its model: the embedding's gradient (with a tied lm_head's) is final only when
 * backward ends; each layer's when its backward is done; the final norm's and an untied lm_head's first. */
void tn_plan_job_set_groups(tn_plan_job *job, const tn_train_config *cfg, const tn_model_config *mc, int seq);
/* Predicts every strategy. With one machine only the in-machine costs remain. */
void tn_plan_predict(const tn_plan_job *job, const tn_plan_cluster *c, tn_plan_row rows[TN_PLAN_N]);
/* The strategy to use: the fastest that fits; one within 5% of it that changes less (plain data parallelism
 * before sharding, sharding before compression, compression before DiLoCo) wins the tie. -1 when none fits. */
int tn_plan_best(const tn_plan_row rows[TN_PLAN_N]);
/* Its name and the YAML keys that select it ("sync_mode: diloco, comm_compression: int8"). */
const char *tn_plan_name(tn_plan_strategy s);
const char *tn_plan_keys(tn_plan_strategy s);
/* Link rate from "100mbit", "1gbit", "10gbit", "2.5gbit" (nominal bits/s x what TCP carries of it with both
 * directions busy) or a plain number of bytes/s (taken as it is). 0, or -1 + tn_err naming option and text. */
int tn_plan_parse_link(const char *option, const char *text, double *Bps);

#endif
