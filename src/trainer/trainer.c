/* trainer.c -- see trainer.h. */
#include "trainer/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/exchange.h"
#include "core/core.h"
#include "trainer/balance.h"
#include "trainer/diloco.h"
#include "trainer/grad_sync.h"

#define BALANCE_WINDOW 4 /* steps between two measurements of the ranks' speeds */

int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world) {
    if (cfg->max_steps > 0) return cfg->max_steps;
    int64_t global = (int64_t)world * cfg->per_device_train_batch_size * cfg->gradient_accumulation_steps;
    double steps = ceil(cfg->num_train_epochs * (double)n_samples / (double)global);
    return steps < 1 ? 1 : (int)steps;
}

/* What this configuration asks of the exchange, on `world` ranks; -1 + tn_err for combinations that do
 * not exist. */
static int check_modes(const tn_train_config *cfg, int world, int stage) {
    const char *f = cfg->source_path[0] ? cfg->source_path : "<config>";
    if (world > 1 && stage > 0 && cfg->sync_mode == TN_SYNC_DILOCO)
        return tn_err("%s: sync_mode diloco keeps a whole replica on every machine: set zero_stage 0 (or drop the "
                      "deepspeed / fsdp sharding)", f);
    if (world > 1 && stage > 0 && cfg->comm_compression)
        return tn_err("%s: comm_compression works on whole gradients, not ZeRO's reduce-scatter: set zero_stage 0 "
                      "or comm_compression none", f);
    if (world > 1 && cfg->balance_ranks && cfg->sync_mode == TN_SYNC_DILOCO)
        return tn_err("%s: balance_ranks is for sync_mode ddp (with diloco each machine steps alone): drop one of them", f);
    return 0;
}

/* Vision-language data: the model takes its images before the first step does (a text model refuses them
 * in one line naming the config and dataset, instead of failing inside a step). The first sample with images
 * is the probe; the model's own check decides (the trainer knows no model family). */
static int check_images(tn_trainer *t) {
    const tn_dataset *d = t->data;
    int first = -1, samples = 0;
    for (int i = 0; d->img_off && i < d->n; i++)
        if (d->img_off[i + 1] > d->img_off[i]) samples++, first = first < 0 ? i : first;
    if (first < 0) return 0;
    char err[512];
    if (tn_acts_set_images(t->acts, tn_rows_fill_mm(d, &first, 1, &t->mm), err, sizeof err) != 0)
        return tn_err("%s: key 'dataset': %s has images (%d of %d training samples); model_type %s: %s",
                      t->cfg->source_path, t->cfg->dataset, samples, d->n, t->model->cfg.model_type, err);
    return tn_acts_set_images(t->acts, NULL, err, sizeof err);
}

/* Hands micro-batch mb's images to the model before its forward. 0, or -1 + tn_err. */
static int set_images(tn_trainer *t, const tn_mm_batch *mb) {
    char err[512];
    return tn_acts_set_images(t->acts, mb, err, sizeof err) == 0 ? 0 : tn_err("%s", err);
}

tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm,
                              const tn_test_hooks *hooks) {
    int world = comm ? tn_comm_get_info(comm)->size : 1;
    int stage = world > 1 && cfg->zero_stage > 0 && model->n_trainable > 0 ? cfg->zero_stage : 0;
    if (check_modes(cfg, world, stage) != 0) return NULL;
    int diloco = world > 1 && cfg->sync_mode == TN_SYNC_DILOCO;
    /* compression is of what crosses between machines: with one machine nothing does */
    int codec = comm && tn_comm_get_info(comm)->n_nodes > 1 ? cfg->comm_compression : TN_CODEC_FP32;
    size_t bucket = (size_t)(cfg->ddp_bucket_cap_mb * 1048576.0);
    tn_grad_sync *sync;
    if (diloco) sync = tn_grad_sync_create(comm, model, bucket, TN_GRAD_LOCAL);
    else if (stage == 0 && codec != TN_CODEC_FP32) sync = tn_grad_sync_create_compressed(comm, model, bucket, codec);
    else sync = tn_grad_sync_create(comm, model, bucket, stage == 0 ? TN_GRAD_ALLREDUCE : stage == 1 ? TN_GRAD_REDUCE_SCATTER
                                                                                         : TN_GRAD_REDUCE_SCATTER_RELEASE);
    if (!sync) return NULL;
    tn_diloco *dl = NULL;
    if (diloco) {
        tn_diloco_config dc = {.inner_steps = cfg->diloco_inner_steps, .outer_lr = cfg->diloco_outer_lr,
                               .outer_momentum = cfg->diloco_outer_momentum, .nesterov = cfg->diloco_nesterov,
                               .overlap = cfg->diloco_overlap, .codec = codec};
        if (!(dl = tn_diloco_create(comm, model, &dc))) {
            tn_err("%s: %s", cfg->source_path, tn_errmsg());
            tn_grad_sync_free(sync);
            return NULL;
        }
    }
    tn_trainer *t = tn_xcalloc(1, sizeof *t);
    t->cfg = cfg;
    t->model = model;
    t->data = data;
    t->comm = comm;
    t->sync = sync;
    t->diloco = dl;
    t->codec = codec;
    t->rank = comm ? tn_comm_get_info(comm)->rank : 0;
    t->world = world;
    t->micro_batch = cfg->per_device_train_batch_size;
    t->accum = cfg->gradient_accumulation_steps;
    t->acts = tn_acts_create(model, t->micro_batch, data->S, cfg->gradient_checkpointing);
    if (check_images(t) != 0) {
        tn_trainer_free(t);
        return NULL;
    }
    t->zero_stage = stage;
    if (stage) {
        size_t lo, n;
        tn_comm_shard(comm, model->n_trainable, t->rank, &lo, &n);
        t->opt = tn_adamw_create_range(model, lo, n);
    } else {
        t->opt = tn_adamw_create(model);
    }
    tn_sampler_init(&t->sampler, data->n, (uint64_t)cfg->seed);
    t->total_steps = tn_trainer_total_steps(cfg, data->n, t->world);
    t->warmup_steps = tn_warmup_steps(cfg, t->total_steps);
    t->balance = world > 1 && cfg->balance_ranks;
    t->share = tn_xmalloc((size_t)world * sizeof *t->share);
    for (int r = 0; r < world; r++) t->share[r] = (int64_t)t->accum * t->micro_batch;
    /* staging for this rank's share: with balancing up to the whole global batch less one sample per other rank */
    int64_t most = t->balance ? (int64_t)world * t->accum * t->micro_batch - (world - 1) : (int64_t)t->accum * t->micro_batch;
    int64_t micro = (most + t->micro_batch - 1) / t->micro_batch;
    size_t n = (size_t)micro * t->micro_batch * data->S;
    t->ids = tn_xmalloc(n * sizeof *t->ids);
    t->labels = tn_xmalloc(n * sizeof *t->labels);
    t->lens = tn_xmalloc((size_t)micro * sizeof *t->lens);
    t->rows = tn_xmalloc((size_t)micro * sizeof *t->rows);
    t->hooks = hooks ? *hooks : tn_test_hooks_none();
    return t;
}

void tn_trainer_shard(tn_trainer *t) {
    if (t->zero_stage && !t->zero) t->zero = tn_zero_create(t->comm, t->model, t->zero_stage);
}

void tn_trainer_start(tn_trainer *t) {
    if (t->diloco) tn_diloco_start(t->diloco);
}

void tn_trainer_free(tn_trainer *t) {
    if (!t) return;
    tn_diloco_free(t->diloco);
    tn_zero_free(t->zero);
    tn_grad_sync_free(t->sync);
    tn_acts_free(t->acts);
    tn_mm_buf_free(&t->mm);
    tn_adamw_free(t->opt);
    tn_sampler_free(&t->sampler);
    free(t->ids);
    free(t->labels);
    free(t->lens);
    free(t->rows);
    free(t->share);
    free(t);
}

/* A sum over the ranks that share this step's update: every rank, or (DiLoCo) this machine's. */
static int sum_f64(tn_trainer *t, double *v, size_t n) {
    if (t->world == 1) return 0;
    return t->diloco ? tn_comm_allreduce_f64_local(t->comm, v, n) : tn_comm_allreduce_f64(t->comm, v, n);
}

/* test_hooks.h's slowdown: this rank is made `factor` times slower: before each micro-batch it sleeps
 * (factor - 1) times what the previous one computed, so its gradients come late as a slow processor's would. */
static void fault_slow(const tn_trainer *t, double worked) {
    double factor = tn_test_hooks_slow(&t->hooks, t->rank, t->step + 1);
    if (factor <= 1) return;
    double s = worked * (factor - 1);
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Every BALANCE_WINDOW steps: the ranks' measured costs, gathered; every rank derives the same new shares. */
static int rebalance(tn_trainer *t) {
    double mine[2] = {t->bal_fixed / t->bal_steps, t->bal_samples > 0 ? t->bal_fb / t->bal_samples : 0};
    t->bal_fixed = t->bal_fb = t->bal_samples = 0, t->bal_steps = 0;
    double *all = tn_xmalloc((size_t)t->world * sizeof mine), *fixed = tn_xmalloc((size_t)t->world * sizeof *fixed);
    double *per = tn_xmalloc((size_t)t->world * sizeof *per);
    int64_t *next = tn_xmalloc((size_t)t->world * sizeof *next);
    int rc = tn_comm_allgather(t->comm, mine, sizeof mine, all);
    if (rc == 0) {
        for (int r = 0; r < t->world; r++) fixed[r] = all[2 * r], per[r] = all[2 * r + 1];
        int64_t global = (int64_t)t->world * t->accum * t->micro_batch;
        if (tn_balance_split(t->world, global, fixed, per, t->share, next)) {
            int slow = 0, fast = 0;
            for (int r = 1; r < t->world; r++) {
                if (per[r] > per[slow]) slow = r;
                if (per[r] < per[fast]) fast = r;
            }
            int k = snprintf(t->note, sizeof t->note, "balance: step %d: rank %d on host %s computes %.2fx as fast as "
                             "rank %d; samples per step by rank now", t->step, slow, tn_comm_host_of(t->comm, slow),
                             per[fast] / per[slow], fast);
            for (int r = 0; r < t->world && k > 0 && (size_t)k < sizeof t->note; r++)
                k += snprintf(t->note + k, sizeof t->note - (size_t)k, " %lld", (long long)next[r]);
            if (k > 0 && (size_t)k < sizeof t->note)
                snprintf(t->note + k, sizeof t->note - (size_t)k, " (global batch %lld)", (long long)global);
            memcpy(t->share, next, (size_t)t->world * sizeof *next);
        }
    }
    free(all), free(fixed), free(per), free(next);
    return rc ? tn_err("step %d: speed exchange failed: %s", t->step, tn_errmsg()) : 0;
}

/* The step's phases: the time since *mark goes to *into, and the mark moves on. */
static void lap(double *mark, double *into) {
    double now = tn_now();
    *into += now - *mark;
    *mark = now;
}

static int finish_step(tn_trainer *t, tn_step_stats *st, int rc, double local_loss_sum) {
    if (t->diloco) {
        tn_diloco_step ds = {.step = t->step, .loss_sum = local_loss_sum, .tokens = (double)st->tokens,
                             .seen = (double)st->seen, .grad_norm = st->grad_norm, .skipped = rc != 0};
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rc ? tn_errmsg() : "");
        if (tn_diloco_step_done(t->diloco, &ds, t->step >= t->total_steps) != 0) return -2;
        if (rc) tn_err("%s", msg);
        return rc;
    }
    t->final = *st;
    t->final.step = t->step, t->final.skipped = rc != 0;
    t->has_final = 1;
    return rc;
}

int tn_trainer_step(tn_trainer *t, tn_step_stats *st) {
    tn_model *m = t->model;
    const int B = t->micro_batch;
    const size_t per_micro = (size_t)B * t->data->S; /* staging room of one micro-batch */
    const int64_t global = (int64_t)t->accum * B * t->world;
    /* this rank's slice of the step's global batch: the samples after the shares of the ranks before it */
    int64_t first = 0, mine = t->share[t->rank];
    for (int r = 0; r < t->rank; r++) first += t->share[r];
    const int n_micro = (int)((mine + B - 1) / B);
    /* Fetch it first: the global token count normalises every micro-batch's gradient. Each micro-batch is
     * padded to its own longest sample only. */
    double t0 = tn_now(), mark = t0;
    tn_step_times tm = {0, 0, 0, 0};
    double counts[3] = {0, 0, 0}; /* trained tokens, processed tokens (with padding), then the summed loss */
    for (int a = 0; a < n_micro; a++) {
        t->rows[a] = (int)(mine - (int64_t)a * B < B ? mine - (int64_t)a * B : B);
        t->lens[a] = tn_batch_fill(t->data, &t->sampler, t->samples_seen + first + (int64_t)a * B, t->rows[a],
                                   t->ids + a * per_micro, t->labels + a * per_micro);
        counts[0] += (double)tn_count_targets(t->labels + a * per_micro, t->rows[a], t->lens[a]);
        counts[1] += (double)t->rows[a] * t->lens[a];
    }
    double t_fill = tn_now() - t0; /* this rank's own work: the waits for the others below are not its cost */
    lap(&mark, &tm.data);
    if (sum_f64(t, counts, 2) != 0)
        return tn_err("step %d: token count all-reduce failed: %s", t->step + 1, tn_errmsg()), -2;
    lap(&mark, &tm.wait);
    int64_t targets = (int64_t)counts[0]; /* text tokens only: image tokens sit in the prompt, label -100 */
    const int64_t start = t->samples_seen;
    t->samples_seen += global;
    float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;

    /* stages 2-3: released, the slab reads as zeros and holds no memory until backward writes it */
    (t->zero_stage >= 2 ? m->be->release : m->be->zero)(m->grad, m->n_trainable);
    if (tn_test_hooks_nan(&t->hooks, t->rank, t->step + 1) && m->n_trainable)
        m->be->upload(m->grad + m->n_trainable - 1, &(float){NAN}, 1); /* backward accumulates onto it */
    double loss = 0.0, fb = 0.0;
    int64_t counted = 0;
    /* one dropout seed per step; masks are keyed by the row's place in the global batch (split-invariant) */
    uint64_t seed = ((uint64_t)t->cfg->seed << 32) ^ ((uint64_t)t->step * 0x9E3779B97F4A7C15ull);
    for (int a = 0; a < n_micro; a++) {
        double f0 = tn_now();
        fault_slow(t, t->slow_last);
        tn_acts_set_first_row(t->acts, first + (int64_t)a * B);
        if (set_images(t, tn_batch_fill_mm(t->data, &t->sampler, start + first + (int64_t)a * B, t->rows[a], &t->mm)))
            return tn_err("step %d: %s", t->step + 1, tn_errmsg()), -2;
        if (a == n_micro - 1) tn_grad_sync_arm(t->sync);
        loss += tn_model_forward_backward(m, t->acts, t->ids + a * per_micro, t->labels + a * per_micro, t->rows[a],
                                          t->lens[a], scale, &counted, seed);
        fb += tn_now() - f0;
        t->slow_last = (tn_now() - f0) / tn_test_hooks_slow(&t->hooks, t->rank, t->step + 1);
        if (t->comm) tn_comm_heartbeat(t->comm); /* this rank is making progress (dead-peer watchdog) */
    }
    lap(&mark, &tm.compute);
    if (tn_grad_sync_finish(t->sync) != 0) return tn_err("step %d: %s", t->step + 1, tn_errmsg()), -2;
    counts[2] = loss;
    if (sum_f64(t, counts + 2, 1) != 0) return tn_err("step %d: loss all-reduce failed: %s", t->step + 1, tn_errmsg()), -2;
    lap(&mark, &tm.wait);
    memset(st, 0, sizeof *st);
    st->tokens = targets;
    st->seen = (int64_t)counts[1];
    st->comm_wait = tn_grad_sync_get_stats(t->sync)->wait_s;
    st->loss = targets > 0 ? counts[2] / (double)targets : 0.0;
    st->lr = tn_lr_at(t->cfg->lr_scheduler_type, t->cfg->learning_rate, t->step, t->warmup_steps, t->total_steps);
    /* the summed gradients are bit-identical on every rank (DiLoCo: of the machine), so the norm, the skip
     * decision and the update are too (sharded: every rank adds the shards' sums of squares in the same order) */
    if (!t->zero) st->grad_norm = tn_clip_grad_norm(m, t->cfg->max_grad_norm);
    else if (tn_zero_clip(t->zero, t->cfg->max_grad_norm, &st->grad_norm) != 0)
        return tn_err("step %d: %s", t->step + 1, tn_errmsg()), -2;
    double t1 = tn_now();
    int rc = 0;
    if (!isfinite(st->loss) || !isfinite(st->grad_norm)) {
        t->step++;
        rc = tn_err("step %d: non-finite loss %g or gradient norm %g; step skipped", t->step, st->loss, st->grad_norm);
    } else {
        tn_adamw_hparams h = {.beta1 = t->cfg->adam_beta1,
                              .beta2 = t->cfg->adam_beta2,
                              .eps = t->cfg->adam_epsilon,
                              .weight_decay = t->cfg->weight_decay};
        tn_adamw_step(t->opt, m, &h, st->lr);
        t->step++;
        if (t->zero && tn_zero_after_update(t->zero) != 0) return tn_err("step %d: %s", t->step, tn_errmsg()), -2;
    }
    lap(&mark, &tm.optimizer); /* with the norm's clipping above */
    if (t->balance) { /* batch assembly, clipping and the optimizer; forward and backward per sample */
        t->bal_fixed += t_fill + (tn_now() - t1), t->bal_fb += fb, t->bal_samples += (double)mine;
        if (++t->bal_steps == BALANCE_WINDOW && rebalance(t) != 0) return -2;
    }
    st->samples = mine;
    rc = finish_step(t, st, rc, counts[2]);
    lap(&mark, &tm.wait); /* balancing's speed exchange, DiLoCo's round */
    st->times = tm;
    return rc;
}

int tn_trainer_next_logged(tn_trainer *t, tn_step_stats *st) {
    if (!t->diloco) {
        if (!t->has_final) return 0;
        *st = t->final;
        t->has_final = 0;
        return 1;
    }
    tn_diloco_step d;
    if (!tn_diloco_pop(t->diloco, &d)) return 0;
    memset(st, 0, sizeof *st);
    st->step = d.step, st->skipped = d.skipped;
    st->tokens = (int64_t)d.tokens, st->seen = (int64_t)d.seen;
    st->loss = d.tokens > 0 ? d.loss_sum / d.tokens : 0.0;
    st->grad_norm = d.grad_norm;
    st->lr = tn_lr_at(t->cfg->lr_scheduler_type, t->cfg->learning_rate, d.step - 1, t->warmup_steps, t->total_steps);
    return 1;
}

double tn_trainer_bytes_per_step(const tn_trainer *t) {
    if (!t->comm || t->world == 1 || tn_comm_get_info(t->comm)->n_nodes == 1) return 0;
    if (t->diloco) return (double)tn_diloco_round_bytes(t->diloco) / t->cfg->diloco_inner_steps;
    const tn_comm_info *in = tn_comm_get_info(t->comm);
    if (t->codec != TN_CODEC_FP32) return (double)tn_grad_sync_get_stats(t->sync)->bytes; /* the machine's */
    /* the leaders' ring all-reduce: 2 (M-1) / M of the gradients leave each machine */
    return 2.0 * (in->n_nodes - 1) / in->n_nodes * (double)t->model->n_trainable * sizeof(float);
}

/* ---- checkpoints ---- */

int tn_trainer_save_begin(tn_trainer *t, const char *dir) {
    tn_state *mine = tn_state_new(), *job = tn_state_new();
    int rc = 0;
    if (t->diloco) rc = tn_diloco_save(t->diloco, t->opt, mine, job);
    size_t nr = tn_grad_sync_residual(t->sync, NULL);
    if (rc == 0 && nr) {
        float *r = tn_xalloc_floats(nr);
        tn_grad_sync_residual(t->sync, r);
        tn_state_put(mine, "grad.residual", ST_F32, r, nr);
        tn_free_aligned(r);
    }
    if (t->balance) tn_state_put(job, "balance.shares", ST_I64, t->share, (size_t)t->world);
    /* every rank takes part, so that rank 0 never waits for a message that does not come */
    int64_t any = !tn_state_empty(mine) || !tn_state_empty(job) || rc != 0;
    if (t->world > 1 && tn_comm_allreduce_max_i64(t->comm, &any, 1) != 0) rc = -1;
    if (any) { /* a rank that failed above sends an empty list */
        int saved = tn_state_save(t->world > 1 ? t->comm : NULL, dir, mine, job);
        rc = rc ? rc : saved;
    }
    tn_state_free(mine), tn_state_free(job);
    if (t->diloco) tn_diloco_swap(t->diloco); /* the checkpoint's weights are the consensus */
    return rc;
}

void tn_trainer_save_end(tn_trainer *t) {
    if (t->diloco) tn_diloco_swap(t->diloco);
}

int tn_trainer_load_state(tn_trainer *t, const char *dir) {
    tn_state *mine = NULL, *job = NULL;
    int rc = tn_state_load(t->world > 1 ? t->comm : NULL, dir, &mine, &job);
    char why[256] = "";
    const char *slash = dir ? strrchr(dir, '/') : NULL, *name = slash ? slash + 1 : dir ? dir : "";
    t->note[0] = 0;
    if (rc == 0 && t->diloco && tn_diloco_load(t->diloco, t->opt, mine, job, why, sizeof why) == 0)
        snprintf(t->note, sizeof t->note, "note: sync_mode diloco restarts its rounds from %s's parameters: %s", name, why);
    size_t nr = tn_grad_sync_residual(t->sync, NULL), got = 0;
    const float *r = tn_state_get(mine, "grad.residual", ST_F32, &got);
    if (rc == 0 && nr) {
        if (r && got == nr) tn_grad_sync_set_residual(t->sync, r);
        else snprintf(t->note, sizeof t->note, "note: comm_compression starts with empty residuals (%s holds none for %d "
                      "rank(s) with this bucket size)", name, t->world);
    }
    const int64_t *sh = tn_state_get(job, "balance.shares", ST_I64, &got);
    if (rc == 0 && t->balance && sh && got == (size_t)t->world) {
        int64_t sum = 0, ok = 1;
        for (int q = 0; q < t->world; q++) sum += sh[q], ok &= sh[q] >= 1;
        if (ok && sum == (int64_t)t->world * t->accum * t->micro_batch) memcpy(t->share, sh, (size_t)t->world * sizeof *sh);
    }
    tn_state_free(mine), tn_state_free(job);
    return rc;
}

double tn_trainer_eval(tn_trainer *t, const tn_dataset *eval) {
    const int B = t->micro_batch;
    if (eval->S > t->data->S) {
        tn_err("evaluation samples reach %d tokens, the workspace %d", eval->S, t->data->S);
        return NAN;
    }
    if (t->diloco) tn_diloco_swap(t->diloco); /* the consensus: the same parameters on every machine */
    double sums[2] = {0, 0}; /* loss, targets */
    int mine = eval->n > t->rank ? (eval->n - t->rank + t->world - 1) / t->world : 0;
    for (int k0 = 0; k0 < mine; k0 += B) {
        /* rows beyond this rank's share are padding without targets (the workspace has B rows) */
        int longest = 1;
        for (int64_t k = k0; k < k0 + B && k < mine; k++) {
            int n = tn_dataset_len(eval, (int)(t->rank + k * t->world));
            longest = n > longest ? n : longest;
        }
        const int S = tn_dataset_batch_len(eval, longest);
        int idx[B];
        for (int b = 0; b < B; b++) {
            int64_t k = k0 + b, i = (int64_t)t->rank + k * t->world;
            idx[b] = k < mine ? (int)i : -1;
            int32_t *ids = t->ids + (size_t)b * S, *labels = t->labels + (size_t)b * S;
            if (k < mine) {
                tn_dataset_row(eval, (int)i, S, ids, labels);
            } else {
                memset(ids, 0, (size_t)S * sizeof *ids);
                for (int s = 0; s < S; s++) labels[s] = -100;
            }
        }
        if (set_images(t, tn_rows_fill_mm(eval, idx, B, &t->mm)) != 0) {
            tn_err("evaluation: %s", tn_errmsg());
            return NAN;
        }
        int64_t n = 0;
        sums[0] += tn_model_eval_loss(t->model, t->acts, t->ids, t->labels, B, S, &n);
        sums[1] += (double)n;
    }
    if (t->diloco) tn_diloco_swap(t->diloco);
    if (t->world > 1 && tn_comm_allreduce_f64(t->comm, sums, 2) != 0) {
        tn_err("evaluation all-reduce failed: %s", tn_errmsg());
        return NAN;
    }
    if (t->zero && tn_zero_status(t->zero) != 0) { /* after the collective: no rank is left waiting in it */
        tn_err("evaluation: %s", tn_errmsg());
        return NAN;
    }
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}
