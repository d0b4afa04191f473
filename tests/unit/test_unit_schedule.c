/* test_unit_schedule -- tn_lr_at / tn_warmup_steps / names against hand-derived HF values. */
#include "config/train_config.h"
#include "testlib.h"

#include <string.h>

#define TOL 1e-15

static void linear(void) {
    /* lr 1e-3, warmup 10, total 110: ramp step/10, then (110 - step) / 100. */
    const double lr = 1e-3;
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 0, 10, 110), 0.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 1, 10, 110), 1e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 5, 10, 110), 5e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 9, 10, 110), 9e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 10, 10, 110), 1e-3, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 11, 10, 110), 9.9e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 60, 10, 110), 5e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 109, 10, 110), 1e-5, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, lr, 110, 10, 110), 0.0, TOL);
    CHECK(tn_lr_at(TN_SCHED_LINEAR, lr, 130, 10, 110) == 0.0); /* clamped at 0 past the end */
    /* No warmup: the first step uses the full lr; total 4: 1, 0.75, 0.5, 0.25. */
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 2.0, 0, 0, 4), 2.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 2.0, 1, 0, 4), 1.5, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 2.0, 3, 0, 4), 0.5, TOL);
    /* warmup == total: max(1, total - warmup) = 1 keeps it finite: (total - step) / 1. */
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 5, 5, 5), 0.0, TOL);
    /* warmup 1: step 0 -> 0 (0 / max(1, 1)). */
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 0, 1, 11), 0.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 1, 1, 11), 1.0, TOL);
}

static void cosine(void) {
    const double lr = 1e-3;
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 0, 10, 110), 0.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 5, 10, 110), 5e-4, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 10, 10, 110), 1e-3, TOL);
    /* progress 0.25: 0.5 * (1 + cos(pi/4)) = 0.8535533905932737 */
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 35, 10, 110), 0.8535533905932737e-3, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 60, 10, 110), 0.5e-3, TOL); /* midpoint */
    /* progress 0.75: 0.5 * (1 - cos(pi/4)) = 0.1464466094067262 */
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 85, 10, 110), 0.1464466094067262e-3, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, lr, 110, 10, 110), 0.0, TOL);
    CHECK(tn_lr_at(TN_SCHED_COSINE, lr, 110, 10, 110) >= 0.0);
    /* past the end: progress 1.2, cos(1.2 pi) < 0 ... 0.5 * (1 + cos) = 0.0954915; HF's max(0, .) does not
     * clamp it (the half cosine climbs back), so neither do we. */
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, 1.0, 120, 0, 100), 0.09549150281252627, 1e-15);
    /* No warmup, total 2: step 0 -> lr, step 1 -> progress 0.5 -> lr / 2. */
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, 3.0, 0, 0, 2), 3.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_COSINE, 3.0, 1, 0, 2), 1.5, TOL);
}

static void constant(void) {
    const double lr = 2e-5;
    /* constant_with_warmup, warmup 4: 0, 0.25, 0.5, 0.75, then 1. */
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 0, 4, 100), 0.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 2, 4, 100), 1e-5, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 3, 4, 100), 1.5e-5, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 4, 4, 100), lr, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 100, 4, 100), lr, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_CONSTANT, lr, 500, 4, 100), lr, TOL);

    /* 'constant' (HF get_constant_schedule): warmup settings are ignored. */
    tn_train_config c;
    tn_train_config_defaults(&c);
    CHECK(tn_train_config_override(&c, "lr_scheduler_type=constant") == 0);
    CHECK(tn_train_config_override(&c, "warmup_steps=10") == 0);
    CHECK(tn_train_config_override(&c, "warmup_ratio=0.5") == 0);
    CHECK(c.lr_scheduler_type == TN_SCHED_CONSTANT && c.no_warmup == 1);
    int w = tn_warmup_steps(&c, 100);
    CHECK(w == 0);
    CHECK_NEAR(tn_lr_at(c.lr_scheduler_type, lr, 0, w, 100), lr, TOL);
    CHECK_NEAR(tn_lr_at(c.lr_scheduler_type, lr, 5, w, 100), lr, TOL);
    CHECK(strcmp(tn_train_config_sched_name(&c), "constant") == 0);

    /* 'constant_with_warmup' keeps them. */
    CHECK(tn_train_config_override(&c, "lr_scheduler_type=constant_with_warmup") == 0);
    CHECK(c.lr_scheduler_type == TN_SCHED_CONSTANT && c.no_warmup == 0);
    CHECK(tn_warmup_steps(&c, 100) == 10);
    CHECK(strcmp(tn_train_config_sched_name(&c), "constant_with_warmup") == 0);
}

static void warmup_steps(void) {
    tn_train_config c;
    tn_train_config_defaults(&c);
    CHECK(tn_warmup_steps(&c, 100) == 0); /* defaults: no warmup */
    c.warmup_ratio = 0.1;
    CHECK(tn_warmup_steps(&c, 100) == 10);
    CHECK(tn_warmup_steps(&c, 95) == 10); /* ceil(9.5) */
    CHECK(tn_warmup_steps(&c, 91) == 10); /* ceil(9.1) */
    CHECK(tn_warmup_steps(&c, 3) == 1);   /* ceil(0.30000000000000004) */
    CHECK(tn_warmup_steps(&c, 0) == 0);
    c.warmup_ratio = 0.03;
    CHECK(tn_warmup_steps(&c, 1000) == 30); /* 1000 * 0.03 == 30.0 in doubles, as in Python */
    c.warmup_ratio = 0.3;
    CHECK(tn_warmup_steps(&c, 7) == 3); /* ceil(2.1) */
    c.warmup_steps = 4;                 /* > 0 wins over the ratio */
    CHECK(tn_warmup_steps(&c, 7) == 4);
    CHECK(tn_warmup_steps(&c, 1000) == 4);
    /* the ratio-derived warmup then feeds the schedule: linear, total 20, ratio 0.1 -> warmup 2 */
    c.warmup_steps = 0;
    c.warmup_ratio = 0.1;
    int w = tn_warmup_steps(&c, 20);
    CHECK(w == 2);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 1, w, 20), 0.5, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 2, w, 20), 1.0, TOL);
    CHECK_NEAR(tn_lr_at(TN_SCHED_LINEAR, 1.0, 11, w, 20), 0.5, TOL);
}

static void names(void) {
    CHECK(strcmp(tn_sched_name(TN_SCHED_LINEAR), "linear") == 0);
    CHECK(strcmp(tn_sched_name(TN_SCHED_COSINE), "cosine") == 0);
    CHECK(strcmp(tn_sched_name(TN_SCHED_CONSTANT), "constant_with_warmup") == 0);
    tn_train_config c;
    tn_train_config_defaults(&c);
    CHECK(strcmp(tn_train_config_sched_name(&c), "linear") == 0);
    CHECK(tn_train_config_override(&c, "lr_scheduler_type=cosine") == 0);
    CHECK(strcmp(tn_train_config_sched_name(&c), "cosine") == 0);
}

/* 'step': torch.optim.lr_scheduler.StepLR(step_size, gamma) stepped once per optimizer step, after HF's linear warmup;
 * values by hand: lr gamma^floor((step - warmup) / step_size) */
static void step_lr(void) {
    const double lr = 0.1;
    CHECK_NEAR(tn_lr_step_at(lr, 0, 0, 3, 0.5), 0.1, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 2, 0, 3, 0.5), 0.1, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 3, 0, 3, 0.5), 0.05, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 5, 0, 3, 0.5), 0.05, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 6, 0, 3, 0.5), 0.025, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 9, 0, 3, 0.1), 1e-4, 1e-18);
    /* warmup 4: 0, 0.025, 0.05, 0.075, then 0.1 for 3 steps (4..6), 0.05 from step 7 */
    CHECK_NEAR(tn_lr_step_at(lr, 1, 4, 3, 0.5), 0.025, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 4, 4, 3, 0.5), 0.1, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 6, 4, 3, 0.5), 0.1, TOL);
    CHECK_NEAR(tn_lr_step_at(lr, 7, 4, 3, 0.5), 0.05, TOL);
    /* through the config: tn_lr_for picks it (and the other types go to tn_lr_at) */
    tn_train_config c;
    memset(&c, 0, sizeof c);
    c.learning_rate = 0.2, c.lr_scheduler_type = TN_SCHED_STEP, c.lr_step_size = 2, c.lr_step_gamma = 0.1;
    CHECK_NEAR(tn_lr_for(&c, 3, 0, 100), 0.02, TOL);
    CHECK(strcmp(tn_sched_name(TN_SCHED_STEP), "step") == 0);
    c.lr_scheduler_type = TN_SCHED_LINEAR;
    CHECK_NEAR(tn_lr_for(&c, 50, 0, 100), tn_lr_at(TN_SCHED_LINEAR, 0.2, 50, 0, 100), 0);
}

int main(void) {
    step_lr();
    linear();
    cosine();
    constant();
    warmup_steps();
    names();
    return tl_done("test_unit_schedule");
}
