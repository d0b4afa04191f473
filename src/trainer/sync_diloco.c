/* sync_diloco.c -- DiLoCo (strategy.h, diloco.h): gradients summed inside each machine every step (grad_sync's
 * machine-local mode), each machine stepping alone; every diloco_inner_steps steps the machines average their
 * pseudo-gradients and take an outer step. The numbers the log shows are summed over the machines when a
 * round's exchange completes, so they come later than the step (next_logged); evaluation and checkpoints see
 * the consensus parameters.
 * diloco_sync_steps N: the first N steps are synchronous data parallelism over every rank, the exchange
 * sync_mode ddp would run with the same comm_compression (all-reduce, or the compressed exchange with its
 * residuals), so every rank ends step N with the same parameters and AdamW moments; the rounds start there
 * (consensus and round start = those parameters, outer momentum 0) and end at steps N + k H. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "trainer/diloco.h"
#include "trainer/strategy.h"

extern const tn_strategy_ops tn_sync_diloco;

typedef struct {
    tn_strategy base;
    tn_diloco *d;
    tn_grad_sync *local, *global; /* the rounds' exchange inside a machine; the synchronous phase's (or NULL) */
    int sync_steps;               /* diloco_sync_steps */
    int synced;                   /* in the synchronous phase: base.sync is global */
} diloco_strategy;

static diloco_strategy *ds_of(tn_strategy *s) { return (diloco_strategy *)s; }
static tn_diloco *d_of(const tn_strategy *s) { return ((const diloco_strategy *)s)->d; }

static int picks(const tn_strategy_args *a) { return a->world > 1 && a->cfg->sync_mode == TN_SYNC_DILOCO; }

static int check(const tn_strategy_args *a) {
    const char *f = a->cfg->source_path[0] ? a->cfg->source_path : "<config>";
    if (a->stage > 0)
        return tn_err("%s: sync_mode diloco keeps a whole replica on every machine: set zero_stage 0 (or drop the "
                      "deepspeed / fsdp sharding)", f);
    return 0;
}

/* The synchronous phase's exchange: what sync_mode ddp runs with the same comm_compression (strategy.c's table). */
static tn_grad_sync *global_sync(const tn_strategy_args *a) {
    size_t cap = tn_strategy_bucket_bytes(a);
    if (a->codec != TN_CODEC_FP32) return tn_grad_sync_create_compressed(a->comm, a->model, cap, a->codec);
    return tn_grad_sync_create(a->comm, a->model, cap, TN_GRAD_ALLREDUCE);
}

static tn_strategy *create(const tn_strategy_args *a) {
    const tn_train_config *cfg = a->cfg;
    tn_grad_sync *sync = tn_grad_sync_create(a->comm, a->model, tn_strategy_bucket_bytes(a), TN_GRAD_LOCAL);
    if (!sync) return NULL;
    tn_grad_sync *global = cfg->diloco_sync_steps > 0 ? global_sync(a) : NULL;
    tn_diloco_config dc = {.inner_steps = cfg->diloco_inner_steps, .outer_lr = cfg->diloco_outer_lr,
                           .outer_momentum = cfg->diloco_outer_momentum, .nesterov = cfg->diloco_nesterov,
                           .overlap = cfg->diloco_overlap, .codec = a->codec};
    tn_diloco *d = cfg->diloco_sync_steps > 0 && !global ? NULL : tn_diloco_create(a->comm, a->model, &dc);
    if (!d) {
        tn_err("%s: %s", cfg->source_path, tn_errmsg());
        tn_grad_sync_free(global);
        tn_grad_sync_free(sync);
        return NULL;
    }
    diloco_strategy *ds = tn_xcalloc(1, sizeof *ds);
    tn_strategy_init(&ds->base, &tn_sync_diloco, a, sync, NULL);
    ds->d = d, ds->local = sync, ds->global = global, ds->sync_steps = cfg->diloco_sync_steps;
    ds->base.local = 1;
    ds->base.round = cfg->diloco_inner_steps;
    return &ds->base;
}

static void destroy(tn_strategy *s) {
    diloco_strategy *ds = ds_of(s);
    tn_diloco_free(ds->d);
    s->sync = ds->local; /* fini frees it */
    tn_grad_sync_free(ds->global);
    tn_strategy_fini(s);
    free(s);
}

/* The rounds begin: the machine-local exchange, the consensus taken from the parameters every rank shares. */
static void begin_rounds(diloco_strategy *ds) {
    ds->synced = 0;
    ds->base.sync = ds->local, ds->base.local = 1;
    tn_grad_sync_attach(ds->local);
    tn_diloco_start(ds->d, ds->sync_steps);
}

static void start(tn_strategy *s) {
    diloco_strategy *ds = ds_of(s);
    if (s->start_step >= ds->sync_steps) {
        begin_rounds(ds);
        return;
    }
    ds->synced = 1;
    s->sync = ds->global, s->local = 0;
    tn_grad_sync_attach(ds->global);
}

static int step_done(tn_strategy *s, const tn_strategy_logged *r, double local_loss_sum, int last) {
    diloco_strategy *ds = ds_of(s);
    if (ds->synced) { /* the numbers are every rank's already; a skip happened on every machine */
        s->final = *r, s->has_final = 1;
        if (r->skipped) s->final.skipped = tn_comm_get_info(s->a.comm)->n_nodes;
        if (r->step >= ds->sync_steps) begin_rounds(ds);
        return 0;
    }
    tn_diloco_step st = {.step = r->step, .loss_sum = local_loss_sum, .tokens = (double)r->tokens,
                         .seen = (double)r->seen, .grad_norm = r->grad_norm, .skipped = r->skipped,
                         .samples = (double)r->samples, .batch = (double)r->batch};
    return tn_diloco_step_done(ds->d, &st, last);
}

static int next_logged(tn_strategy *s, tn_strategy_logged *out) {
    if (s->has_final) { /* a synchronous step's, before any round's */
        *out = s->final, s->has_final = 0;
        return 1;
    }
    tn_diloco_step d;
    if (!tn_diloco_pop(d_of(s), &d)) return 0;
    const tn_train_config *cfg = s->a.cfg;
    *out = (tn_strategy_logged){.step = d.step, .skipped = d.skipped, .tokens = (int64_t)d.tokens,
                                .seen = (int64_t)d.seen, .loss = d.tokens > 0 ? d.loss_sum / d.tokens : 0.0,
                                .grad_norm = d.grad_norm};
    out->lr = tn_lr_for(cfg, d.step - 1, s->a.warmup_steps, s->a.total_steps);
    return 1;
}

/* the swap is its own inverse: on and off alike; the synchronous phase's parameters are every rank's */
static void consensus(tn_strategy *s, int on) {
    (void)on;
    if (!ds_of(s)->synced) tn_diloco_swap(d_of(s));
}

/* The ring all-reduce's 2 (M-1)/M of the gradients, or the compressed buckets' encodings. */
static double sync_bytes(const tn_strategy *s) {
    const diloco_strategy *ds = (const diloco_strategy *)s;
    if (s->a.codec != TN_CODEC_FP32) return (double)tn_grad_sync_get_stats(ds->global)->bytes;
    int M = tn_comm_get_info(s->a.comm)->n_nodes;
    return 2.0 * (M - 1) / M * (double)s->a.model->n_trainable * sizeof(float);
}

static double bytes_per_step(const tn_strategy *s) {
    if (((const diloco_strategy *)s)->synced) return sync_bytes(s);
    return (double)tn_diloco_round_bytes(d_of(s)) / s->a.cfg->diloco_inner_steps;
}

/* The synchronous phase's state: compression residuals, as sync_compressed.c keeps them. */
static void save_sync(diloco_strategy *ds, tn_state *mine) {
    size_t nr = tn_grad_sync_residual(ds->global, NULL);
    if (!nr) return;
    float *r = tn_xalloc_floats(nr);
    tn_grad_sync_residual(ds->global, r);
    tn_state_put(mine, "grad.residual", ST_F32, r, nr);
    tn_free_aligned(r);
}

static int save_state(tn_strategy *s, tn_state *mine, tn_state *job) {
    diloco_strategy *ds = ds_of(s);
    if (ds->synced) return save_sync(ds, mine), 0;
    return tn_diloco_save(ds->d, s->opt, mine, job);
}

static void load_sync(diloco_strategy *ds, const tn_state *mine, const tn_state *job, const char *name, char *note,
                      size_t n) {
    size_t nr = tn_grad_sync_residual(ds->global, NULL), got = 0;
    const float *r = tn_state_get(mine, "grad.residual", ST_F32, &got);
    if (nr && r && got == nr) tn_grad_sync_set_residual(ds->global, r);
    else if (nr) snprintf(note, n, "note: comm_compression starts the synchronous steps of diloco_sync_steps with empty "
                          "residuals (%s holds none for this run)", name);
    if (tn_state_get(job, "diloco.meta", ST_I64, NULL))
        snprintf(note, n, "note: %s was taken during DiLoCo rounds; this run is still in its first %d synchronous steps "
                 "(diloco_sync_steps): they go on from its consensus parameters", name, ds->sync_steps);
}

static void load_state(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                       size_t n) {
    diloco_strategy *ds = ds_of(s);
    if (ds->synced) {
        load_sync(ds, mine, job, name, note, n);
        return;
    }
    char why[256] = "";
    if (tn_diloco_load(ds->d, s->opt, mine, job, why, sizeof why) == 0)
        snprintf(note, n, "note: sync_mode diloco restarts its rounds from %s's parameters: %s", name, why);
}

static void describe(const tn_strategy *s, FILE *out) {
    const tn_train_config *cfg = s->a.cfg;
    const tn_comm_info *in = tn_comm_get_info(s->a.comm);
    const diloco_strategy *ds = (const diloco_strategy *)s;
    if (ds->sync_steps > 0)
        fprintf(out, "tandem: diloco_sync_steps %d: steps 1-%d are synchronous data parallelism over all %d rank(s) "
                "(gradients averaged every step%s%s, %.3g MB per step sent by each machine); the DiLoCo rounds start "
                "from step %d's parameters\n", ds->sync_steps, ds->sync_steps, in->size,
                s->a.codec ? ", as " : "", s->a.codec ? tn_codec_name(s->a.codec) : "",
                in->n_nodes > 1 ? sync_bytes(s) / 1e6 : 0.0, ds->sync_steps);
    fprintf(out, "tandem: DiLoCo over %d machine(s) of %d rank(s): gradients summed inside each machine every step; "
            "every %d steps the pseudo-gradients (%s%s) are averaged between machines%s and applied by SGD, lr %g, "
            "momentum %g%s, %s; %.3g MB per step sent by each machine\n",
            in->n_nodes, in->local_size, cfg->diloco_inner_steps, tn_codec_name(s->a.codec),
            s->a.codec ? ", error feedback" : "", s->a.balance ? " (weighted by each machine's samples)" : "",
            cfg->diloco_outer_lr, cfg->diloco_outer_momentum,
            cfg->diloco_nesterov ? " (Nesterov)" : "",
            cfg->diloco_overlap ? "one round late (the exchange overlaps the next round)" : "every machine waiting for it",
            (double)tn_diloco_round_bytes(ds->d) / cfg->diloco_inner_steps / 1e6);
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
