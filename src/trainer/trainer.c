/* trainer.c -- see trainer.h. */
#include "trainer/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "trainer/replica.h"
#include "trainer/shares.h"
#include "trainer/strategy.h"

struct tn_trainer {
    tn_trainer_info in;      /* what the job sees; in.step and in.samples_seen are the position */
    tn_acts *acts;
    tn_strategy *sync;       /* how the ranks agree on each step (strategy.h) */
    tn_shares *shares;       /* each rank's share of the global batch (shares.h) */
    char note[512];          /* a line for the log (balance changes, resume), taken by tn_trainer_take_note */
    char note_out[512];
    int swapped;             /* between save_begin and save_end: the consensus is in the model */
    tn_sampler sampler;
    int32_t *ids, *labels;   /* [micro-batches, micro_batch, S] host staging of this rank's share of a step */
    int *lens, *rows;        /* per micro-batch: padded length (<= S), samples (<= micro_batch) */
    tn_mm_buf mm;            /* the images of the micro-batch about to run (vision-language data) */
    tn_test_hooks hooks;     /* the faults a test injects (test_hooks.h) */
    double slow_last;        /* seconds the last micro-batch computed (before the injected slowdown) */
};

int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world) {
    if (cfg->max_steps > 0) return cfg->max_steps;
    int64_t global = (int64_t)world * cfg->per_device_train_batch_size * cfg->gradient_accumulation_steps;
    double steps = ceil(cfg->num_train_epochs * (double)n_samples / (double)global);
    return steps < 1 ? 1 : (int)steps;
}

/* Vision-language data: the model takes its images before the first step does (a text model refuses them
 * in one line naming the config and dataset, instead of failing inside a step). The first sample with images
 * is the probe; the model's own check decides (the trainer knows no model family). */
static int check_images(tn_trainer *t) {
    const tn_dataset *d = t->in.data;
    int first = -1, samples = 0;
    for (int i = 0; d->img_off && i < d->n; i++)
        if (d->img_off[i + 1] > d->img_off[i]) samples++, first = first < 0 ? i : first;
    if (first < 0) return 0;
    char err[512];
    if (tn_acts_set_images(t->acts, tn_rows_fill_mm(d, &first, 1, &t->mm), err, sizeof err) != 0)
        return tn_err("%s: key 'dataset': %s has images (%d of %d training samples); model_type %s: %s",
                      t->in.cfg->source_path, t->in.cfg->dataset, samples, d->n, t->in.model->cfg.model_type, err);
    return tn_acts_set_images(t->acts, NULL, err, sizeof err);
}

/* Hands micro-batch mb's images to the model before its forward. 0, or -1 + tn_err. */
static int set_images(tn_trainer *t, const tn_mm_batch *mb) {
    char err[512];
    return tn_acts_set_images(t->acts, mb, err, sizeof err) == 0 ? 0 : tn_err("%s", err);
}

/* The strategy this run uses (strategy.h's table decides), and the loop's view of it. */
static int create_sync(tn_trainer *t, const tn_train_config *cfg, tn_model *model, tn_comm *comm) {
    int world = t->in.world;
    tn_strategy_args a = {.cfg = cfg, .model = model, .comm = comm, .world = world,
                          .stage = world > 1 && cfg->zero_stage > 0 && model->n_trainable > 0 ? cfg->zero_stage : 0,
                          /* compression is of what crosses between machines: with one machine nothing does */
                          .codec = comm && tn_comm_get_info(comm)->n_nodes > 1 ? cfg->comm_compression : TN_CODEC_FP32,
                          .balance = world > 1 && cfg->balance_ranks,
                          .total_steps = t->in.total_steps, .warmup_steps = t->in.warmup_steps};
    if (!(t->sync = tn_strategy_create(&a))) return -1;
    t->in.sync = t->sync->ops->name;
    t->in.zero_stage = t->sync->shards_optimizer ? a.stage : 0;
    t->in.balance = a.balance;
    t->in.machine_local = t->sync->local;
    t->in.round = t->sync->round;
    return 0;
}

tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm,
                              const tn_test_hooks *hooks) {
    tn_trainer *t = tn_xcalloc(1, sizeof *t);
    tn_trainer_info *in = &t->in;
    in->cfg = cfg, in->model = model, in->data = data, in->comm = comm;
    in->world = comm ? tn_comm_get_info(comm)->size : 1;
    in->rank = comm ? tn_comm_get_info(comm)->rank : 0;
    in->micro_batch = cfg->per_device_train_batch_size;
    in->accum = cfg->gradient_accumulation_steps;
    in->global_batch = (int64_t)in->world * in->micro_batch * in->accum;
    in->total_steps = tn_trainer_total_steps(cfg, data->n, in->world);
    in->warmup_steps = tn_warmup_steps(cfg, in->total_steps);
    t->hooks = hooks ? *hooks : tn_test_hooks_none();
    tn_sampler_init(&t->sampler, data->n, (uint64_t)cfg->seed);
    if (create_sync(t, cfg, model, comm) != 0) {
        tn_trainer_free(t);
        return NULL;
    }
    t->acts = tn_acts_create(model, in->micro_batch, data->S, cfg->gradient_checkpointing);
    if (check_images(t) != 0) {
        tn_trainer_free(t);
        return NULL;
    }
    t->shares = tn_shares_create(comm, in->world, (int64_t)in->accum * in->micro_batch, in->balance);
    /* staging for the most this rank can be given */
    int64_t micro = (tn_shares_most(t->shares) + in->micro_batch - 1) / in->micro_batch;
    size_t n = (size_t)micro * in->micro_batch * data->S;
    t->ids = tn_xmalloc(n * sizeof *t->ids);
    t->labels = tn_xmalloc(n * sizeof *t->labels);
    t->lens = tn_xmalloc((size_t)micro * sizeof *t->lens);
    t->rows = tn_xmalloc((size_t)micro * sizeof *t->rows);
    return t;
}

void tn_trainer_start(tn_trainer *t) { tn_strategy_start(t->sync, t->in.step); }

void tn_trainer_free(tn_trainer *t) {
    if (!t) return;
    tn_strategy_free(t->sync);
    tn_acts_free(t->acts);
    tn_mm_buf_free(&t->mm);
    tn_sampler_free(&t->sampler);
    tn_shares_free(t->shares);
    free(t->ids);
    free(t->labels);
    free(t->lens);
    free(t->rows);
    free(t);
}

const tn_trainer_info *tn_trainer_get_info(const tn_trainer *t) { return &t->in; }
tn_adamw *tn_trainer_optimizer(const tn_trainer *t) { return t->sync->opt; }
const tn_adamw *tn_trainer_saved_optimizer(const tn_trainer *t) { return t->sync->shards_optimizer ? NULL : t->sync->opt; }
void tn_trainer_set_position(tn_trainer *t, int step, int64_t samples_seen) { t->in.step = step, t->in.samples_seen = samples_seen; }

int tn_trainer_sync_position(tn_trainer *t) {
    return tn_replica_sync_position(t->in.comm, t->sync->opt, &t->in.step, &t->in.samples_seen,
                                    !t->sync->shards_optimizer);
}

const char *tn_trainer_take_note(tn_trainer *t) {
    if (!t->note[0]) return NULL;
    memcpy(t->note_out, t->note, sizeof t->note);
    t->note[0] = 0;
    return t->note_out;
}

void tn_trainer_describe(const tn_trainer *t, FILE *out) {
    const tn_trainer_info *in = &t->in;
    if (!in->comm || in->world < 2) return;
    tn_strategy_describe(t->sync, out);
    if (in->cfg->comm_compression && tn_comm_get_info(in->comm)->n_nodes == 1)
        fprintf(out, "tandem: note: comm_compression: one machine, nothing crosses a network: exchanged in fp32\n");
    if (in->balance)
        fprintf(out, "tandem: balance_ranks: each rank's share of the global batch of %d follows its measured speed "
                "(measured every 4 steps)\n", in->world * in->micro_batch * in->accum);
}

/* test_hooks.h's slowdown: this rank is made `factor` times slower: before each micro-batch it sleeps
 * (factor - 1) times what the previous one computed, so its gradients come late as a slow processor's would. */
static void fault_slow(const tn_trainer *t, double worked) {
    double factor = tn_test_hooks_slow(&t->hooks, t->in.rank, t->in.step + 1);
    if (factor <= 1) return;
    double s = worked * (factor - 1);
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The step's phases: the time since *mark goes to *into, and the mark moves on. */
static void lap(double *mark, double *into) {
    double now = tn_now();
    *into += now - *mark;
    *mark = now;
}

/* After the update (or the skip): the strategy takes the step's numbers (DiLoCo: into its round), keeping a
 * skip's message for the caller. */
static int finish_step(tn_trainer *t, tn_step_stats *st, int rc, double local_loss_sum, int64_t summed_samples) {
    tn_strategy_logged r = {.step = t->in.step, .skipped = rc != 0, .loss = st->loss, .grad_norm = st->grad_norm,
                            .lr = st->lr, .tokens = st->tokens, .seen = st->seen, .samples = summed_samples,
                            .batch = t->in.global_batch};
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? tn_errmsg() : "");
    if (tn_strategy_step_done(t->sync, &r, local_loss_sum, t->in.step >= t->in.total_steps) != 0) return -2;
    if (rc) tn_err("%s", msg);
    return rc;
}

/* This rank's share of the step's samples into the staging, micro-batch by micro-batch (each padded to its own
 * longest sample only); counts[0] += trained tokens, counts[1] += tokens processed. The number of micro-batches. */
static int fill_batches(tn_trainer *t, int64_t first, int64_t mine, double *counts) {
    const int B = t->in.micro_batch;
    const size_t per_micro = (size_t)B * t->in.data->S;
    const int n_micro = (int)((mine + B - 1) / B);
    for (int a = 0; a < n_micro; a++) {
        t->rows[a] = (int)(mine - (int64_t)a * B < B ? mine - (int64_t)a * B : B);
        t->lens[a] = tn_batch_fill(t->in.data, &t->sampler, t->in.samples_seen + first + (int64_t)a * B, t->rows[a],
                                   t->ids + a * per_micro, t->labels + a * per_micro);
        counts[0] += (double)tn_count_targets(t->labels + a * per_micro, t->rows[a], t->lens[a]);
        counts[1] += (double)t->rows[a] * t->lens[a];
    }
    return n_micro;
}

/* Forward and backward of every micro-batch, the exchange armed before the last. The summed loss (-1 + tn_err
 * when the model refused a micro-batch's images); *fb: seconds computing. */
static int run_batches(tn_trainer *t, int n_micro, int64_t first, int64_t start, float scale, double *loss,
                       double *fb) {
    tn_model *m = t->in.model;
    const int B = t->in.micro_batch;
    const size_t per_micro = (size_t)B * t->in.data->S;
    int64_t counted = 0;
    /* one dropout seed per step; masks are keyed by the row's place in the global batch (split-invariant) */
    uint64_t seed = ((uint64_t)t->in.cfg->seed << 32) ^ ((uint64_t)t->in.step * 0x9E3779B97F4A7C15ull);
    for (int a = 0; a < n_micro; a++) {
        double f0 = tn_now();
        fault_slow(t, t->slow_last);
        tn_acts_set_first_row(t->acts, first + (int64_t)a * B);
        if (set_images(t, tn_batch_fill_mm(t->in.data, &t->sampler, start + first + (int64_t)a * B, t->rows[a], &t->mm)))
            return -1;
        if (a == n_micro - 1) tn_strategy_arm(t->sync);
        *loss += tn_model_forward_backward(m, t->acts, t->ids + a * per_micro, t->labels + a * per_micro, t->rows[a],
                                           t->lens[a], scale, &counted, seed);
        *fb += tn_now() - f0;
        t->slow_last = (tn_now() - f0) / tn_test_hooks_slow(&t->hooks, t->in.rank, t->in.step + 1);
        if (t->in.comm) tn_comm_heartbeat(t->in.comm); /* this rank is making progress (dead-peer watchdog) */
    }
    return 0;
}

/* Clipped already: AdamW, or the skip of a non-finite step (-1 + tn_err); -2 + tn_err when the strategy's
 * after-update exchange could not start. */
static int update(tn_trainer *t, const tn_step_stats *st) {
    const tn_train_config *cfg = t->in.cfg;
    if (!isfinite(st->loss) || !isfinite(st->grad_norm)) {
        t->in.step++;
        return tn_err("step %d: non-finite loss %g or gradient norm %g; step skipped", t->in.step, st->loss, st->grad_norm);
    }
    tn_adamw_hparams h = {.beta1 = cfg->adam_beta1, .beta2 = cfg->adam_beta2, .eps = cfg->adam_epsilon,
                          .weight_decay = cfg->weight_decay};
    tn_strategy_update(t->sync, &h, st->lr);
    t->in.step++;
    if (tn_strategy_after_update(t->sync) != 0) return tn_err("step %d: %s", t->in.step, tn_errmsg()), -2;
    return 0;
}

int tn_trainer_step(tn_trainer *t, tn_step_stats *st) {
    tn_model *m = t->in.model;
    const tn_train_config *cfg = t->in.cfg;
    /* this rank's slice of the step's global batch: the samples after the shares of the ranks before it */
    int64_t first = tn_shares_first(t->shares, t->in.rank), mine = tn_shares_of(t->shares, t->in.rank);
    /* Fetch it first: the global token count normalises every micro-batch's gradient. */
    double t0 = tn_now(), mark = t0;
    tn_step_times tm = {0, 0, 0, 0};
    /* trained tokens, processed tokens (with padding), samples, then the summed loss */
    double counts[4] = {0, 0, (double)mine, 0};
    const int n_micro = fill_batches(t, first, mine, counts);
    double t_fill = tn_now() - t0; /* this rank's own work: the waits for the others below are not its cost */
    lap(&mark, &tm.data);
    if (tn_strategy_sum_f64(t->sync, counts, 3) != 0)
        return tn_err("step %d: token count all-reduce failed: %s", t->in.step + 1, tn_errmsg()), -2;
    lap(&mark, &tm.wait);
    int64_t targets = (int64_t)counts[0]; /* text tokens only: image tokens sit in the prompt, label -100 */
    const int64_t start = t->in.samples_seen;
    t->in.samples_seen += t->in.global_batch;
    float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;

    tn_strategy_clear_grads(t->sync);
    if (tn_test_hooks_nan(&t->hooks, t->in.rank, t->in.step + 1) && m->n_trainable)
        m->be->upload(m->grad + m->n_trainable - 1, &(float){NAN}, 1); /* backward accumulates onto it */
    double loss = 0.0, fb = 0.0;
    if (run_batches(t, n_micro, first, start, scale, &loss, &fb) != 0)
        return tn_err("step %d: %s", t->in.step + 1, tn_errmsg()), -2;
    lap(&mark, &tm.compute);
    if (tn_strategy_finish(t->sync) != 0) return tn_err("step %d: %s", t->in.step + 1, tn_errmsg()), -2;
    counts[3] = loss;
    if (tn_strategy_sum_f64(t->sync, counts + 3, 1) != 0)
        return tn_err("step %d: loss all-reduce failed: %s", t->in.step + 1, tn_errmsg()), -2;
    lap(&mark, &tm.wait);
    memset(st, 0, sizeof *st);
    st->tokens = targets;
    st->seen = (int64_t)counts[1];
    st->comm_wait = tn_strategy_wait_s(t->sync);
    st->first_ready = tn_strategy_first_ready_s(t->sync);
    st->loss = targets > 0 ? counts[3] / (double)targets : 0.0;
    st->lr = tn_lr_for(cfg, t->in.step, t->in.warmup_steps, t->in.total_steps);
    /* the summed gradients are bit-identical on every rank (DiLoCo: of the machine), so the norm, the skip
     * decision and the update are too (sharded: every rank adds the shards' sums of squares in the same order) */
    if (tn_strategy_clip(t->sync, cfg->max_grad_norm, &st->grad_norm) != 0)
        return tn_err("step %d: %s", t->in.step + 1, tn_errmsg()), -2;
    double t1 = tn_now();
    int rc = update(t, st);
    if (rc == -2) return rc;
    lap(&mark, &tm.optimizer); /* with the norm's clipping above */
    /* balancing: batch assembly, clipping and the optimizer; forward and backward per sample */
    if (tn_shares_measure(t->shares, t->in.step, t_fill + (tn_now() - t1), fb, mine, t->note, sizeof t->note) != 0)
        return -2;
    st->samples = mine;
    rc = finish_step(t, st, rc, counts[3], (int64_t)counts[2]);
    lap(&mark, &tm.wait); /* balancing's speed exchange, DiLoCo's round */
    st->times = tm;
    return rc;
}

int tn_trainer_next_logged(tn_trainer *t, tn_step_stats *st) {
    tn_strategy_logged r;
    if (!tn_strategy_next_logged(t->sync, &r)) return 0;
    memset(st, 0, sizeof *st);
    st->step = r.step, st->skipped = r.skipped;
    st->loss = r.loss, st->grad_norm = r.grad_norm, st->lr = r.lr;
    st->tokens = r.tokens, st->seen = r.seen;
    return 1;
}

double tn_trainer_bytes_per_step(const tn_trainer *t) { return tn_strategy_bytes_per_step(t->sync); }
void tn_trainer_strategies(char *out, size_t n) { tn_strategy_names(out, n); }
void tn_trainer_track_peak(tn_trainer *t, int on) { tn_strategy_track_peak(t->sync, on); }
size_t tn_trainer_peak_bytes(tn_trainer *t) { return tn_strategy_peak_bytes(t->sync); }
size_t tn_trainer_acts_bytes(const tn_trainer *t) { return tn_acts_bytes(t->acts); }

/* ---- checkpoints ---- */

/* The exchange's state and the shares (sync_state.h), collective. */
static int save_state(tn_trainer *t, const char *dir) {
    tn_state *mine = tn_state_new(), *job = tn_state_new();
    int rc = tn_strategy_save_state(t->sync, mine, job);
    tn_shares_save(t->shares, job);
    /* every rank takes part, so that rank 0 never waits for a message that does not come */
    int64_t any = !tn_state_empty(mine) || !tn_state_empty(job) || rc != 0;
    if (t->in.world > 1 && tn_comm_allreduce_max_i64(t->in.comm, &any, 1) != 0) rc = -1;
    if (any) { /* a rank that failed above sends an empty list */
        int saved = tn_state_save(t->in.world > 1 ? t->in.comm : NULL, dir, mine, job);
        rc = rc ? rc : saved;
    }
    tn_state_free(mine), tn_state_free(job);
    return rc;
}

int tn_trainer_save_begin(tn_trainer *t, const char *dir, int with_opt, int rc) {
    tn_comm *c = t->in.comm;
    rc = tn_replica_agree(c, rc);
    if (rc == 0 && with_opt) rc = tn_replica_agree(c, tn_strategy_save_moments(t->sync, dir));
    if (rc == 0) rc = tn_replica_agree(c, tn_strategy_full(t->sync)); /* every parameter for the weights */
    if (rc != 0) return rc;
    if (with_opt) rc = tn_replica_agree(c, save_state(t, dir));
    tn_strategy_consensus(t->sync, 1); /* the checkpoint's weights are the consensus */
    t->swapped = 1;
    return rc;
}

void tn_trainer_save_end(tn_trainer *t) {
    tn_strategy_end_full(t->sync);
    if (t->swapped) tn_strategy_consensus(t->sync, 0);
    t->swapped = 0;
}

int tn_trainer_load_state(tn_trainer *t, const char *dir) {
    tn_comm *c = t->in.comm;
    int rc = tn_replica_agree(c, tn_strategy_load_moments(t->sync, dir));
    if (rc != 0) return rc;
    tn_state *mine = NULL, *job = NULL;
    rc = tn_state_load(t->in.world > 1 ? c : NULL, dir, &mine, &job);
    const char *slash = dir ? strrchr(dir, '/') : NULL, *name = slash ? slash + 1 : dir ? dir : "";
    t->note[0] = 0;
    if (rc == 0) {
        tn_strategy_load_state(t->sync, mine, job, name, t->note, sizeof t->note);
        tn_shares_load(t->shares, job);
    }
    tn_state_free(mine), tn_state_free(job);
    return tn_replica_agree(c, rc);
}

int tn_trainer_full(tn_trainer *t) { return tn_strategy_full(t->sync); }

double tn_trainer_eval(tn_trainer *t, const tn_dataset *eval) {
    const int B = t->in.micro_batch;
    if (eval->S > t->in.data->S) {
        tn_err("evaluation samples reach %d tokens, the workspace %d", eval->S, t->in.data->S);
        return NAN;
    }
    tn_strategy_consensus(t->sync, 1); /* the same parameters on every machine (DiLoCo's consensus) */
    double sums[2] = {0, 0}; /* loss, targets */
    int mine = eval->n > t->in.rank ? (eval->n - t->in.rank + t->in.world - 1) / t->in.world : 0;
    for (int k0 = 0; k0 < mine; k0 += B) {
        /* rows beyond this rank's share are padding without targets (the workspace has B rows) */
        int longest = 1;
        for (int64_t k = k0; k < k0 + B && k < mine; k++) {
            int n = tn_dataset_len(eval, (int)(t->in.rank + k * t->in.world));
            longest = n > longest ? n : longest;
        }
        const int S = tn_dataset_batch_len(eval, longest);
        int idx[B];
        for (int b = 0; b < B; b++) {
            int64_t k = k0 + b, i = (int64_t)t->in.rank + k * t->in.world;
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
            tn_strategy_consensus(t->sync, 0);
            return NAN;
        }
        int64_t n = 0;
        sums[0] += tn_model_eval_loss(t->in.model, t->acts, t->ids, t->labels, B, S, &n);
        sums[1] += (double)n;
    }
    tn_strategy_consensus(t->sync, 0);
    if (t->in.world > 1 && tn_comm_allreduce_f64(t->in.comm, sums, 2) != 0) {
        tn_err("evaluation all-reduce failed: %s", tn_errmsg());
        return NAN;
    }
    if (tn_strategy_status(t->sync) != 0) { /* after the collective: no rank is left waiting in it */
        tn_err("evaluation: %s", tn_errmsg());
        return NAN;
    }
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}
