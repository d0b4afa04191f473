/* trainer.c -- see trainer.h. */
#include "trainer/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int tn_trainer_total_steps(const tn_train_config *cfg, int n_samples) {
    if (cfg->max_steps > 0) return cfg->max_steps;
    int64_t global = (int64_t)cfg->per_device_train_batch_size * cfg->gradient_accumulation_steps;
    double steps = ceil(cfg->num_train_epochs * (double)n_samples / (double)global);
    return steps < 1 ? 1 : (int)steps;
}

tn_trainer *tn_trainer_create(const tn_train_config *cfg, tn_model *model, const tn_dataset *data) {
    tn_trainer *t = tn_xcalloc(1, sizeof *t);
    t->cfg = cfg;
    t->model = model;
    t->data = data;
    t->micro_batch = cfg->per_device_train_batch_size;
    t->accum = cfg->gradient_accumulation_steps;
    t->acts = tn_acts_create(model, t->micro_batch, data->S, cfg->gradient_checkpointing);
    t->opt = tn_adamw_create(model);
    tn_sampler_init(&t->sampler, data->n, (uint64_t)cfg->seed);
    t->total_steps = tn_trainer_total_steps(cfg, data->n);
    t->warmup_steps = tn_warmup_steps(cfg, t->total_steps);
    size_t n = (size_t)t->accum * t->micro_batch * data->S;
    t->ids = tn_xmalloc(n * sizeof *t->ids);
    t->labels = tn_xmalloc(n * sizeof *t->labels);
    return t;
}

void tn_trainer_free(tn_trainer *t) {
    if (!t) return;
    tn_acts_free(t->acts);
    tn_adamw_free(t->opt);
    tn_sampler_free(&t->sampler);
    free(t->ids);
    free(t->labels);
    free(t);
}

int tn_trainer_step(tn_trainer *t, tn_step_stats *st) {
    tn_model *m = t->model;
    const int B = t->micro_batch, S = t->data->S;
    const size_t per_micro = (size_t)B * S;
    /* Fetch the whole step's batch first: the token count normalises every micro-batch's gradient. */
    int64_t targets = 0;
    for (int a = 0; a < t->accum; a++) {
        tn_batch_fill(t->data, &t->sampler, t->samples_seen + (int64_t)a * B, B, t->ids + a * per_micro,
                      t->labels + a * per_micro);
        targets += tn_count_targets(t->labels + a * per_micro, B, S);
    }
    t->samples_seen += (int64_t)t->accum * B;
    float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;

    m->be->zero(m->grad, m->n_trainable);
    double loss = 0.0;
    int64_t counted = 0;
    for (int a = 0; a < t->accum; a++) {
        uint64_t seed = ((uint64_t)t->cfg->seed << 32) ^ ((uint64_t)t->step * 131u + (uint64_t)a);
        loss += tn_model_forward_backward(m, t->acts, t->ids + a * per_micro, t->labels + a * per_micro, B, S, scale,
                                          &counted, seed);
    }
    memset(st, 0, sizeof *st);
    st->tokens = targets;
    st->seen = (int64_t)t->accum * (int64_t)per_micro;
    st->loss = targets > 0 ? loss / (double)targets : 0.0;
    st->lr = tn_lr_at(t->cfg->lr_scheduler_type, t->cfg->learning_rate, t->step, t->warmup_steps, t->total_steps);
    st->grad_norm = tn_clip_grad_norm(m, t->cfg->max_grad_norm);
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
    t->step++;
    return 0;
}
