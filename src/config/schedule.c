/* schedule.c -- learning-rate schedules as HF transformers defines them. See train_config.h.
 *
 * Each function mirrors the lr_lambda of transformers.optimization.get_*_schedule_with_warmup (the
 * multiplier LambdaLR applies to the base lr), term for term, so values match PyTorch's to the last bit
 * wherever libm's cos agrees with CPython's. */
#include "config/train_config.h"

#include <math.h>

static double warmup_factor(int step, int warmup) { return (double)step / (double)(warmup > 1 ? warmup : 1); }

double tn_lr_at(tn_sched_type type, double base_lr, int step, int warmup_steps, int total_steps) {
    if (step < warmup_steps) return base_lr * warmup_factor(step, warmup_steps);
    int decay = total_steps - warmup_steps;
    double denom = (double)(decay > 1 ? decay : 1);
    double f;
    switch (type) {
    case TN_SCHED_LINEAR:
        f = fmax(0.0, (double)(total_steps - step) / denom);
        break;
    case TN_SCHED_COSINE: {
        double progress = (double)(step - warmup_steps) / denom;
        /* num_cycles = 0.5: cos(pi * num_cycles * 2 * progress) */
        f = fmax(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress)));
        break;
    }
    case TN_SCHED_CONSTANT:
    default:
        f = 1.0;
        break;
    }
    return base_lr * f;
}

double tn_lr_step_at(double base_lr, int step, int warmup_steps, int step_size, double gamma) {
    if (step < warmup_steps) return base_lr * warmup_factor(step, warmup_steps);
    return base_lr * pow(gamma, (double)((step - warmup_steps) / (step_size > 0 ? step_size : 1)));
}

double tn_lr_for(const tn_train_config *c, int step, int warmup_steps, int total_steps) {
    if (c->lr_scheduler_type == TN_SCHED_STEP)
        return tn_lr_step_at(c->learning_rate, step, warmup_steps, c->lr_step_size, c->lr_step_gamma);
    return tn_lr_at(c->lr_scheduler_type, c->learning_rate, step, warmup_steps, total_steps);
}

int tn_warmup_steps(const tn_train_config *c, int total_steps) {
    if (c->no_warmup) return 0;
    if (c->warmup_steps > 0) return c->warmup_steps;
    if (total_steps <= 0 || c->warmup_ratio <= 0) return 0;
    return (int)ceil((double)total_steps * c->warmup_ratio);
}

const char *tn_sched_name(tn_sched_type t) {
    switch (t) {
    case TN_SCHED_CONSTANT: return "constant_with_warmup";
    case TN_SCHED_LINEAR: return "linear";
    case TN_SCHED_COSINE: return "cosine";
    case TN_SCHED_STEP: return "step";
    }
    return "unknown";
}

const char *tn_train_config_sched_name(const tn_train_config *c) {
    if (c->lr_scheduler_type == TN_SCHED_CONSTANT && c->no_warmup) return "constant";
    return tn_sched_name(c->lr_scheduler_type);
}
