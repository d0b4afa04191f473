/* parity_bounds -- the fp32-derived bounds the parity tests share (test_parity_fixtures for the text models,
 * test_parity_vl for the vision-language ones): relative L2 per tensor for logits, loss and gradients, and the
 * judgement of the 3-step AdamW update. The derivation is in test_parity_fixtures.c's header. */
#ifndef TN_PARITY_BOUNDS_H
#define TN_PARITY_BOUNDS_H

#include <stdint.h>

#include "model/model.h"
#include "model/safetensors.h"

#define GRAD_TOL 1e-5
#define TAU 0.01                   /* elements with |g| below TAU x rms(g) are held to AdamW's step bound only */
#define DIR_GAIN 4.0               /* update error per unit of relative gradient error */
#define STORE_ROUNDINGS 6.0        /* fp32 roundings of p over 3 steps */
#define FP32_U 5.9604644775390625e-8 /* 2^-24 */
#define ADAMW_STEP_MAX 1.001       /* |m_t / sqrt(v_t)| for t <= 3 with betas (0.9, 0.95) */
#define BF16_U 0.00390625          /* 2^-8 */

typedef struct {
    double ratio;           /* worst (update error / its bound) over tensors */
    char tensor[128];       /* where */
    int64_t excluded, nonzero, elements; /* near-zero-gradient elements, elements with a nonzero gradient, all */
} pb_step3;

/* A tensor of a fixture file as float64 (NULL when absent). */
double *pb_read_f64(const st_file *f, const char *name, int64_t *n);
/* Judges every trainable tensor's update p3 - p0 against the float64 reference (tensors named as the model's
 * checkpoints name them, tn_model_file_name). bf16: every element held to AdamW's step bound only. */
pb_step3 pb_check_step3(const char *name, tn_model *m, const float *p0, const st_file *gf, const st_file *pf, double lr,
                        double wd, int bf16);

#endif
