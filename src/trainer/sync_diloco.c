/* sync_diloco.c -- DiLoCo (strategy.h, diloco.h): gradients summed inside each machine every step (grad_sync's
 * machine-local mode), each machine stepping alone; every diloco_inner_steps steps the machines average their
 * pseudo-gradients and take an outer step. The numbers the log shows are summed over the machines when a
 * round's exchange completes, so they come later than the step (next_logged); evaluation and checkpoints see
 * the consensus parameters. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "trainer/diloco.h"
#include "trainer/strategy.h"

extern const tn_strategy_ops tn_sync_diloco;

typedef struct {
    tn_strategy base;
    tn_diloco *d;
} diloco_strategy;

static tn_diloco *d_of(const tn_strategy *s) { return ((const diloco_strategy *)s)->d; }

static int picks(const tn_strategy_args *a) { return a->world > 1 && a->cfg->sync_mode == TN_SYNC_DILOCO; }

static int check(const tn_strategy_args *a) {
    const char *f = a->cfg->source_path[0] ? a->cfg->source_path : "<config>";
    if (a->stage > 0)
        return tn_err("%s: sync_mode diloco keeps a whole replica on every machine: set zero_stage 0 (or drop the "
                      "deepspeed / fsdp sharding)", f);
    if (a->balance)
        return tn_err("%s: balance_ranks is for sync_mode ddp (with diloco each machine steps alone): drop one of them", f);
    return 0;
}

static tn_strategy *create(const tn_strategy_args *a) {
    const tn_train_config *cfg = a->cfg;
    tn_grad_sync *sync = tn_grad_sync_create(a->comm, a->model, tn_strategy_bucket_bytes(a), TN_GRAD_LOCAL);
    if (!sync) return NULL;
    tn_diloco_config dc = {.inner_steps = cfg->diloco_inner_steps, .outer_lr = cfg->diloco_outer_lr,
                           .outer_momentum = cfg->diloco_outer_momentum, .nesterov = cfg->diloco_nesterov,
                           .overlap = cfg->diloco_overlap, .codec = a->codec};
    tn_diloco *d = tn_diloco_create(a->comm, a->model, &dc);
    if (!d) {
        tn_err("%s: %s", cfg->source_path, tn_errmsg());
        tn_grad_sync_free(sync);
        return NULL;
    }
    diloco_strategy *ds = tn_xcalloc(1, sizeof *ds);
    tn_strategy_init(&ds->base, &tn_sync_diloco, a, sync, NULL);
    ds->d = d;
    ds->base.local = 1;
    ds->base.round = cfg->diloco_inner_steps;
    return &ds->base;
}

static void destroy(tn_strategy *s) {
    tn_diloco_free(d_of(s));
    tn_strategy_fini(s);
    free(s);
}

static void start(tn_strategy *s) { tn_diloco_start(d_of(s)); }

static int step_done(tn_strategy *s, const tn_strategy_logged *r, double local_loss_sum, int last) {
    tn_diloco_step ds = {.step = r->step, .loss_sum = local_loss_sum, .tokens = (double)r->tokens,
                         .seen = (double)r->seen, .grad_norm = r->grad_norm, .skipped = r->skipped};
    return tn_diloco_step_done(d_of(s), &ds, last);
}

static int next_logged(tn_strategy *s, tn_strategy_logged *out) {
    tn_diloco_step d;
    if (!tn_diloco_pop(d_of(s), &d)) return 0;
    const tn_train_config *cfg = s->a.cfg;
    *out = (tn_strategy_logged){.step = d.step, .skipped = d.skipped, .tokens = (int64_t)d.tokens,
                                .seen = (int64_t)d.seen, .loss = d.tokens > 0 ? d.loss_sum / d.tokens : 0.0,
                                .grad_norm = d.grad_norm};
    out->lr = tn_lr_for(cfg, d.step - 1, s->a.warmup_steps, s->a.total_steps);
    return 1;
}

/* the swap is its own inverse: on and off alike */
static void consensus(tn_strategy *s, int on) {
    (void)on;
    tn_diloco_swap(d_of(s));
}

static double bytes_per_step(const tn_strategy *s) {
    return (double)tn_diloco_round_bytes(d_of(s)) / s->a.cfg->diloco_inner_steps;
}

static int save_state(tn_strategy *s, tn_state *mine, tn_state *job) { return tn_diloco_save(d_of(s), s->opt, mine, job); }

static void load_state(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                       size_t n) {
    char why[256] = "";
    if (tn_diloco_load(d_of(s), s->opt, mine, job, why, sizeof why) == 0)
        snprintf(note, n, "note: sync_mode diloco restarts its rounds from %s's parameters: %s", name, why);
}

static void describe(const tn_strategy *s, FILE *out) {
    static const char *const codec[] = {"fp32", "bf16", "int8"};
    const tn_train_config *cfg = s->a.cfg;
    const tn_comm_info *in = tn_comm_get_info(s->a.comm);
    fprintf(out, "tandem: DiLoCo over %d machine(s) of %d rank(s): gradients summed inside each machine every step; "
            "every %d steps the pseudo-gradients (%s%s) are averaged between machines and applied by SGD, lr %g, "
            "momentum %g%s, %s; %.3g MB per step sent by each machine\n",
            in->n_nodes, in->local_size, cfg->diloco_inner_steps, codec[s->a.codec],
            s->a.codec ? ", error feedback" : "", cfg->diloco_outer_lr, cfg->diloco_outer_momentum,
            cfg->diloco_nesterov ? " (Nesterov)" : "",
            cfg->diloco_overlap ? "one round late (the exchange overlaps the next round)" : "every machine waiting for it",
            tn_strategy_bytes_per_step(s) / 1e6);
}

const tn_strategy_ops tn_sync_diloco = {
    .name = "diloco",
    .summary = "DiLoCo: each machine steps alone, pseudo-gradients averaged every diloco_inner_steps: sync_mode diloco",
    .picks = picks,
    .check = check,
    .create = create,
    .destroy = destroy,
    .start = start,
    .step_done = step_done,
    .next_logged = next_logged,
    .consensus = consensus,
    .save_state = save_state,
    .load_state = load_state,
    .bytes_per_step = bytes_per_step,
    .describe = describe,
};
