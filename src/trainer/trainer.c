/* trainer.c -- see trainer.h. */
#include "trainer/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "trainer/grad_sync.h"

int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples, int world) {
    if (cfg->max_steps > 0) return cfg->max_steps;
    int64_t global = (int64_t)world * cfg->per_device_train_batch_size * cfg->gradient_accumulation_steps;
    double steps = ceil(cfg->num_train_epochs * (double)n_samples / (double)global);
    return steps < 1 ? 1 : (int)steps;
}

tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data, tn_comm *comm) {
    int world = comm ? tn_comm_get_info(comm)->size : 1;
    int stage = world > 1 && cfg->zero_stage > 0 && model->n_trainable > 0 ? cfg->zero_stage : 0;
    int mode = stage == 0 ? TN_SYNC_ALLREDUCE : stage == 1 ? TN_SYNC_REDUCE_SCATTER : TN_SYNC_REDUCE_SCATTER_RELEASE;
    tn_grad_sync *sync = tn_grad_sync_create(comm, model, (size_t)(cfg->ddp_bucket_cap_mb * 1048576.0), mode);
    if (!sync) return NULL;
    tn_trainer *t = tn_xcalloc(1, sizeof *t);
    t->cfg = cfg;
    t->model = model;
    t->data = data;
    t->comm = comm;
    t->sync = sync;
    t->rank = comm ? tn_comm_get_info(comm)->rank : 0;
    t->world = comm ? tn_comm_get_info(comm)->size : 1;
    t->micro_batch = cfg->per_device_train_batch_size;
    t->accum = cfg->gradient_accumulation_steps;
    t->acts = tn_acts_create(model, t->micro_batch, data->S, cfg->gradient_checkpointing);
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
    size_t n = (size_t)t->accum * t->micro_batch * data->S;
    t->ids = tn_xmalloc(n * sizeof *t->ids);
    const char *fault = getenv("TANDEM_FAULT_NAN_STEPS");
    if (fault && sscanf(fault, "%d-%d", &t->fault_nan_from, &t->fault_nan_to) == 1) t->fault_nan_to = t->fault_nan_from;
    t->labels = tn_xmalloc(n * sizeof *t->labels);
    t->lens = tn_xmalloc((size_t)t->accum * sizeof *t->lens);
    return t;
}

void tn_trainer_shard(tn_trainer *t) {
    if (t->zero_stage && !t->zero) t->zero = tn_zero_create(t->comm, t->model, t->zero_stage);
}

void tn_trainer_free(tn_trainer *t) {
    if (!t) return;
    tn_zero_free(t->zero);
    tn_grad_sync_free(t->sync);
    tn_acts_free(t->acts);
    tn_adamw_free(t->opt);
    tn_sampler_free(&t->sampler);
    free(t->ids);
    free(t->labels);
    free(t->lens);
    free(t);
}

int tn_trainer_step(tn_trainer *t, tn_step_stats *st) {
    tn_model *m = t->model;
    const int B = t->micro_batch;
    const size_t per_micro = (size_t)B * t->data->S; /* staging room of one micro-batch */
    const int64_t per_rank = (int64_t)t->accum * B, global = per_rank * t->world;
    /* Fetch this rank's slice of the step's global batch first: the global token count normalises every
     * micro-batch's gradient. Each micro-batch is padded to its own longest sample only. */
    double counts[3] = {0, 0, 0}; /* trained tokens, processed tokens (with padding), then the summed loss */
    for (int a = 0; a < t->accum; a++) {
        t->lens[a] = tn_batch_fill(t->data, &t->sampler, tn_dist_position(t->samples_seen, t->rank, t->accum, B, a, 0),
                                   B, t->ids + a * per_micro, t->labels + a * per_micro);
        counts[0] += (double)tn_count_targets(t->labels + a * per_micro, B, t->lens[a]);
        counts[1] += (double)B * t->lens[a];
    }
    if (t->world > 1 && tn_comm_allreduce_f64(t->comm, counts, 2) != 0)
        return tn_err("step %d: token count all-reduce failed: %s", t->step + 1, tn_errmsg());
    int64_t targets = (int64_t)counts[0];
    t->samples_seen += global;
    float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;

    /* stages 2-3: released, the slab reads as zeros and holds no memory until backward writes it */
    (t->zero_stage >= 2 ? m->be->release : m->be->zero)(m->grad, m->n_trainable);
    if (t->rank == 0 && t->step + 1 >= t->fault_nan_from && t->step + 1 <= t->fault_nan_to && m->n_trainable)
        m->be->upload(m->grad + m->n_trainable - 1, &(float){NAN}, 1); /* backward accumulates onto it */
    double loss = 0.0;
    int64_t counted = 0;
    /* one dropout seed per step; masks are keyed by the row's place in the global batch (split-invariant) */
    uint64_t seed = ((uint64_t)t->cfg->seed << 32) ^ ((uint64_t)t->step * 0x9E3779B97F4A7C15ull);
    for (int a = 0; a < t->accum; a++) {
        tn_acts_set_first_row(t->acts, tn_dist_position(0, t->rank, t->accum, B, a, 0));
        if (a == t->accum - 1) tn_grad_sync_arm(t->sync);
        loss += tn_model_forward_backward(m, t->acts, t->ids + a * per_micro, t->labels + a * per_micro, B, t->lens[a],
                                          scale, &counted, seed);
        if (t->comm) tn_comm_heartbeat(t->comm); /* this rank is making progress (dead-peer watchdog) */
    }
    if (tn_grad_sync_finish(t->sync) != 0) return tn_err("step %d: %s", t->step + 1, tn_errmsg());
    counts[2] = loss;
    if (t->world > 1 && tn_comm_allreduce_f64(t->comm, counts + 2, 1) != 0)
        return tn_err("step %d: loss all-reduce failed: %s", t->step + 1, tn_errmsg());
    loss = counts[2];
    memset(st, 0, sizeof *st);
    st->tokens = targets;
    st->seen = (int64_t)counts[1];
    st->comm_wait = tn_grad_sync_get_stats(t->sync)->wait_s;
    st->loss = targets > 0 ? loss / (double)targets : 0.0;
    st->lr = tn_lr_at(t->cfg->lr_scheduler_type, t->cfg->learning_rate, t->step, t->warmup_steps, t->total_steps);
    /* the summed gradients are bit-identical on every rank, so the norm, the skip decision and the update are too
     * (sharded: every rank adds the shards' sums of squares in the same order) */
    if (!t->zero) st->grad_norm = tn_clip_grad_norm(m, t->cfg->max_grad_norm);
    else if (tn_zero_clip(t->zero, t->cfg->max_grad_norm, &st->grad_norm) != 0) return -1;
    if (!isfinite(st->loss) || !isfinite(st->grad_norm)) {
        t->step++;
        return tn_err("step %d: non-finite loss %g or gradient norm %g; step skipped", t->step, st->loss,
                      st->grad_norm);
    }
    tn_adamw_hparams h = {.beta1 = t->cfg->adam_beta1,
                          .beta2 = t->cfg->adam_beta2,
                          .eps = t->cfg->adam_epsilon,
                          .weight_decay = t->cfg->weight_decay};
    tn_adamw_step(t->opt, m, &h, st->lr);
    if (t->zero) tn_zero_after_update(t->zero);
    t->step++;
    return 0;
}

double tn_trainer_eval(tn_trainer *t, const tn_dataset *eval) {
    const int B = t->micro_batch;
    if (eval->S > t->data->S) {
        tn_err("evaluation samples reach %d tokens, the workspace %d", eval->S, t->data->S);
        return NAN;
    }
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
        for (int b = 0; b < B; b++) {
            int64_t k = k0 + b, i = (int64_t)t->rank + k * t->world;
            int32_t *ids = t->ids + (size_t)b * S, *labels = t->labels + (size_t)b * S;
            if (k < mine) {
                tn_dataset_row(eval, (int)i, S, ids, labels);
            } else {
                memset(ids, 0, (size_t)S * sizeof *ids);
                for (int s = 0; s < S; s++) labels[s] = -100;
            }
        }
        int64_t n = 0;
        sums[0] += tn_model_eval_loss(t->model, t->acts, t->ids, t->labels, B, S, &n);
        sums[1] += (double)n;
    }
    if (t->world > 1 && tn_comm_allreduce_f64(t->comm, sums, 2) != 0) {
        tn_err("evaluation all-reduce failed: %s", tn_errmsg());
        return NAN;
    }
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}
