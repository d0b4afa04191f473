/* strategy -- how the ranks agree on a step: the one interface every way of synchronising implements.
 *
 * Owns the interface (tn_strategy_ops), the table the configuration chooses from (strategy.c) and what every
 * strategy shares (tn_strategy: the gradient exchange of grad_sync.h and this rank's optimizer). One file per
 * strategy implements it:
 *   sync_ddp.c         plain data parallelism: gradients all-reduced, every rank the same update
 *   sync_zero.c        ZeRO stages 1-3 (zero.h): reduce-scattered gradients, sharded optimizer (and parameters)
 *   sync_compressed.c  data parallelism with comm_compression between machines (exchange.h)
 *   sync_diloco.c      DiLoCo (diloco.h): each machine steps alone, the machines meet every H steps
 * The trainer (trainer.h) is the loop and calls only these; balance_ranks (shares.h) is a property of the loop
 * that any strategy may allow. Adding a strategy touches its own file and the table in strategy.c.
 *
 * A step, as the trainer drives it: clear_grads; forward+backward of each micro-batch, arm before the last;
 * finish (the exchange complete); clip; update; after_update; step_done. The sums the loss normalisation
 * needs cover the ranks that share one update (sum_f64). Ops left NULL take the plain data-parallel
 * behaviour (strategy.c's dispatchers say which). */
#ifndef TN_STRATEGY_H
#define TN_STRATEGY_H

#include <stdio.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "config/train_config.h"
#include "model/model.h"
#include "trainer/grad_sync.h"
#include "trainer/optimizer.h"
#include "trainer/sync_state.h"

/* What a strategy is chosen by and created from. */
typedef struct {
    const tn_train_config *cfg;
    tn_model *model;
    tn_comm *comm;      /* NULL: one process */
    int world;
    int stage;          /* ZeRO stage in effect (0 on one rank or without trainable parameters) */
    tn_codec codec;     /* of what crosses between machines (fp32 on one machine) */
    int balance;        /* balance_ranks on several ranks */
    int total_steps, warmup_steps;
} tn_strategy_args;

/* One step's numbers as the log wants them (the trainer's tn_step_stats, less its per-rank timings). */
typedef struct {
    int step, skipped;
    double loss, grad_norm, lr;
    int64_t tokens, seen;
    int64_t samples, batch; /* the step's samples as the strategy sums them (DiLoCo: the machine's), of the global batch */
} tn_strategy_logged;

typedef struct tn_strategy tn_strategy;

typedef struct {
    const char *name;    /* "ddp", "zero", "compressed", "diloco" */
    const char *summary; /* one line: what it does (tandem env) */
    /* Does the configuration ask for it (the table's first that does is chosen)? */
    int (*picks)(const tn_strategy_args *a);
    /* -1 + tn_err for a combination with it that does not exist (NULL: none). */
    int (*check)(const tn_strategy_args *a);
    /* Creates it and installs its model hooks (the gradient exchange's grad_ready). NULL + tn_err. */
    tn_strategy *(*create)(const tn_strategy_args *a);
    void (*destroy)(tn_strategy *s);
    /* Every rank holds the same whole model (after the start-up broadcast) at step s->start_step (0, or the
     * resumed position): shard it (ZeRO's param_hook), take it as the consensus (DiLoCo). */
    void (*start)(tn_strategy *s);
    void (*clear_grads)(tn_strategy *s);
    int (*clip)(tn_strategy *s, double max_norm, double *norm);
    int (*after_update)(tn_strategy *s);
    /* After step r->step (counted from 1; r->skipped: nothing moved); 0, or -1 + tn_err. NULL: the numbers are
     * final at once. */
    int (*step_done)(tn_strategy *s, const tn_strategy_logged *r, double local_loss_sum, int last);
    int (*next_logged)(tn_strategy *s, tn_strategy_logged *out);
    /* The parameters every rank agrees on (DiLoCo's consensus) in the model, on = 0 back (evaluation, saving). */
    void (*consensus)(tn_strategy *s, int on);
    /* Every parameter on every rank (saving), collective; end_full gives back what is not this rank's. */
    int (*full)(tn_strategy *s);
    void (*end_full)(tn_strategy *s);
    /* 0, or -1 + tn_err when a pass since the last step ran on parameters that never arrived (ZeRO). */
    int (*status)(const tn_strategy *s);
    /* Checkpoints: the optimizer's shards into / out of dir (collective; NULL: it is saved with the weights),
     * and the exchange's own state into / out of the lists of sync_state.h. What load cannot restore exactly
     * it says in *note (a line for the log; `name`: the checkpoint's). */
    int (*save_moments)(tn_strategy *s, const char *dir);
    int (*load_moments)(tn_strategy *s, const char *dir);
    int (*save_state)(tn_strategy *s, tn_state *mine, tn_state *job);
    void (*load_state)(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                       size_t n);
    /* Bytes this machine sends to the network per optimizer step (averaged over a round). */
    double (*bytes_per_step)(const tn_strategy *s);
    /* Benchmarks: the most parameter + gradient bytes resident inside the passes since the last peak_bytes. */
    void (*track_peak)(tn_strategy *s, int on);
    size_t (*peak_bytes)(tn_strategy *s);
    /* Its lines of the log's banner (several ranks). */
    void (*describe)(const tn_strategy *s, FILE *out);
} tn_strategy_ops;

/* What every strategy holds; an implementation's own struct starts with it. */
struct tn_strategy {
    const tn_strategy_ops *ops;
    tn_strategy_args a;
    tn_grad_sync *sync;    /* the exchange of a step's gradients */
    tn_adamw *opt;         /* this rank's optimizer (ZeRO: its shard's moments) */
    int local;             /* the update is shared by this machine's ranks only (DiLoCo) */
    int round;             /* steps between two exchanges between machines (1: every step) */
    int shards_optimizer;  /* each rank holds its own moments: not broadcast from rank 0 */
    int start_step;        /* the position tn_strategy_start was given */
    int has_final;         /* final: the last step's numbers, when step_done is NULL */
    tn_strategy_logged final;
};

/* The table: the strategy cfg asks for on `a` (checked), created; NULL + tn_err. */
tn_strategy *tn_strategy_create(const tn_strategy_args *a);
void tn_strategy_free(tn_strategy *s);
/* For implementations: the shared part, with this exchange (NULL: -1, tn_err passed on) and optimizer (NULL:
 * one over the whole trainable slab). */
int tn_strategy_init(tn_strategy *s, const tn_strategy_ops *ops, const tn_strategy_args *a, tn_grad_sync *sync,
                     tn_adamw *opt);
void tn_strategy_fini(tn_strategy *s);
/* A strategy with no state of its own (plain and compressed data parallelism): allocated and initialised (NULL when
 * sync is NULL), and its destroy. */
tn_strategy *tn_strategy_plain(const tn_strategy_ops *ops, const tn_strategy_args *a, tn_grad_sync *sync);
void tn_strategy_plain_free(tn_strategy *s);
/* The gradient buckets' size cap (ddp_bucket_cap_mb) in bytes. */
size_t tn_strategy_bucket_bytes(const tn_strategy_args *a);

/* The dispatchers the trainer calls (a NULL op: the plain behaviour). */
void tn_strategy_start(tn_strategy *s, int step);
int tn_strategy_sum_f64(tn_strategy *s, double *v, size_t n);
void tn_strategy_clear_grads(tn_strategy *s);
void tn_strategy_arm(tn_strategy *s);
int tn_strategy_finish(tn_strategy *s);
/* Seconds the last step waited for its exchange after backward. */
double tn_strategy_wait_s(const tn_strategy *s);
/* Seconds from arming to the first complete bucket: what overlap cannot hide. */
double tn_strategy_first_ready_s(const tn_strategy *s);
void tn_strategy_track_peak(tn_strategy *s, int on);
size_t tn_strategy_peak_bytes(tn_strategy *s);
int tn_strategy_clip(tn_strategy *s, double max_norm, double *norm);
void tn_strategy_update(tn_strategy *s, const tn_adamw_hparams *h, double lr);
int tn_strategy_after_update(tn_strategy *s);
int tn_strategy_step_done(tn_strategy *s, const tn_strategy_logged *r, double local_loss_sum, int last);
int tn_strategy_next_logged(tn_strategy *s, tn_strategy_logged *out);
int tn_strategy_save_moments(tn_strategy *s, const char *dir);
int tn_strategy_load_moments(tn_strategy *s, const char *dir);
int tn_strategy_save_state(tn_strategy *s, tn_state *mine, tn_state *job);
void tn_strategy_load_state(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                            size_t n);
int tn_strategy_status(const tn_strategy *s);
void tn_strategy_consensus(tn_strategy *s, int on);
int tn_strategy_full(tn_strategy *s);
void tn_strategy_end_full(tn_strategy *s);
double tn_strategy_bytes_per_step(const tn_strategy *s);
void tn_strategy_describe(const tn_strategy *s, FILE *out);
/* The table's strategies by name, for `tandem env`: "ddp, zero, ...". */
void tn_strategy_names(char *out, size_t n);

/* The plain data-parallel banner lines (ddp, zero, compressed share them). */
void tn_strategy_describe_dp(const tn_strategy *s, FILE *out);

#endif
