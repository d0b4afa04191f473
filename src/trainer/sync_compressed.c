/* sync_compressed.c -- data parallelism with comm_compression (strategy.h): each bucket is summed inside the
 * machine, crosses between machines encoded (bf16 / int8 / int4, exchange.h) and is decoded and added in machine
 * order, with error feedback through this rank's residual, which checkpoints carry (sync_state.h). Picked
 * when a codec other than fp32 is asked for between several machines, without ZeRO. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "trainer/strategy.h"

extern const tn_strategy_ops tn_sync_compressed;

static int picks(const tn_strategy_args *a) { return a->stage == 0 && a->codec != TN_CODEC_FP32; }

static tn_strategy *create(const tn_strategy_args *a) {
    return tn_strategy_plain(&tn_sync_compressed, a, tn_grad_sync_create_compressed(a->comm, a->model, tn_strategy_bucket_bytes(a), a->codec));
}

/* what the machine sends: every bucket's encodings */
static double bytes_per_step(const tn_strategy *s) { return (double)tn_grad_sync_get_stats(s->sync)->bytes; }

static int save_state(tn_strategy *s, tn_state *mine, tn_state *job) {
    (void)job;
    size_t nr = tn_grad_sync_residual(s->sync, NULL);
    if (!nr) return 0;
    float *r = tn_xalloc_floats(nr);
    tn_grad_sync_residual(s->sync, r);
    tn_state_put(mine, "grad.residual", ST_F32, r, nr);
    tn_free_aligned(r);
    return 0;
}

static void load_state(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                       size_t n) {
    (void)job;
    size_t nr = tn_grad_sync_residual(s->sync, NULL), got = 0;
    const float *r = tn_state_get(mine, "grad.residual", ST_F32, &got);
    if (!nr) return;
    if (r && got == nr) tn_grad_sync_set_residual(s->sync, r);
    else snprintf(note, n, "note: comm_compression starts with empty residuals (%s holds none for %d rank(s) with this "
                  "bucket size)", name, s->a.world);
}

static void describe(const tn_strategy *s, FILE *out) {
    const tn_comm_info *in = tn_comm_get_info(s->a.comm);
    tn_strategy_describe_dp(s, out);
    fprintf(out, "tandem: gradients cross between machines as %s with error feedback: %.3g MB per step sent by "
            "each machine (fp32: %.3g MB)\n", tn_codec_name(s->a.codec), tn_strategy_bytes_per_step(s) / 1e6,
            2.0 * (in->n_nodes - 1) / in->n_nodes * s->a.model->n_trainable * 4 / 1e6);
}

const tn_strategy_ops tn_sync_compressed = {
    .name = "compressed",
    .summary = "data parallel, gradients encoded (bf16 / int8 / int4, error feedback) between machines: comm_compression",
    .picks = picks,
    .create = create,
    .destroy = tn_strategy_plain_free,
    .save_state = save_state,
    .load_state = load_state,
    .bytes_per_step = bytes_per_step,
    .describe = describe,
};
