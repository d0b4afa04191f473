/* strategy.c -- see strategy.h: the table, and the plain data-parallel behaviour of every op left NULL. */
#include "trainer/strategy.h"

#include <stdio.h>
#include <stdlib.h>

#include "comm/exchange.h"
#include "core/core.h"

extern const tn_strategy_ops tn_sync_diloco, tn_sync_zero, tn_sync_compressed, tn_sync_ddp;

/* The first strategy that the configuration picks runs (ddp picks whatever is left). */
static const tn_strategy_ops *const table[] = {&tn_sync_diloco, &tn_sync_zero, &tn_sync_compressed, &tn_sync_ddp, NULL};

void tn_strategy_names(char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; table[i] && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", table[i]->name);
}

tn_strategy *tn_strategy_create(const tn_strategy_args *a) {
    const tn_strategy_ops *ops = table[0];
    for (int i = 0; table[i] && !table[i]->picks(a); i++) ops = table[i + 1];
    if (ops->check && ops->check(a) != 0) return NULL;
    return ops->create(a);
}

int tn_strategy_init(tn_strategy *s, const tn_strategy_ops *ops, const tn_strategy_args *a, tn_grad_sync *sync,
                     tn_adamw *opt) {
    if (!sync) return -1;
    s->ops = ops, s->a = *a, s->sync = sync, s->round = 1;
    s->opt = opt ? opt : tn_adamw_create(a->model);
    return 0;
}

void tn_strategy_fini(tn_strategy *s) {
    tn_grad_sync_free(s->sync);
    tn_adamw_free(s->opt);
}

tn_strategy *tn_strategy_plain(const tn_strategy_ops *ops, const tn_strategy_args *a, tn_grad_sync *sync) {
    tn_strategy *s = tn_xcalloc(1, sizeof *s);
    if (tn_strategy_init(s, ops, a, sync, NULL) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void tn_strategy_plain_free(tn_strategy *s) {
    tn_strategy_fini(s);
    free(s);
}

size_t tn_strategy_bucket_bytes(const tn_strategy_args *a) { return (size_t)(a->cfg->ddp_bucket_cap_mb * 1048576.0); }

void tn_strategy_free(tn_strategy *s) {
    if (s) s->ops->destroy(s);
}

void tn_strategy_start(tn_strategy *s, int step) {
    s->start_step = step;
    if (s->ops->start) s->ops->start(s);
}

int tn_strategy_sum_f64(tn_strategy *s, double *v, size_t n) {
    if (s->a.world == 1) return 0;
    return s->local ? tn_comm_allreduce_f64_local(s->a.comm, v, n) : tn_comm_allreduce_f64(s->a.comm, v, n);
}

void tn_strategy_clear_grads(tn_strategy *s) {
    tn_model *m = s->a.model;
    if (s->ops->clear_grads) s->ops->clear_grads(s);
    else m->be->zero(m->grad, m->n_trainable);
}

void tn_strategy_arm(tn_strategy *s) { tn_grad_sync_arm(s->sync); }
int tn_strategy_finish(tn_strategy *s) { return tn_grad_sync_finish(s->sync); }
double tn_strategy_wait_s(const tn_strategy *s) { return tn_grad_sync_get_stats(s->sync)->wait_s; }
double tn_strategy_first_ready_s(const tn_strategy *s) { return tn_grad_sync_get_stats(s->sync)->first_ready_s; }

void tn_strategy_track_peak(tn_strategy *s, int on) {
    if (s->ops->track_peak) s->ops->track_peak(s, on);
}

size_t tn_strategy_peak_bytes(tn_strategy *s) { return s->ops->peak_bytes ? s->ops->peak_bytes(s) : 0; }

int tn_strategy_clip(tn_strategy *s, double max_norm, double *norm) {
    if (s->ops->clip) return s->ops->clip(s, max_norm, norm);
    *norm = tn_clip_grad_norm(s->a.model, max_norm);
    return 0;
}

void tn_strategy_update(tn_strategy *s, const tn_adamw_hparams *h, double lr) { tn_adamw_step(s->opt, s->a.model, h, lr); }

int tn_strategy_after_update(tn_strategy *s) { return s->ops->after_update ? s->ops->after_update(s) : 0; }

int tn_strategy_step_done(tn_strategy *s, const tn_strategy_logged *r, double local_loss_sum, int last) {
    if (s->ops->step_done) return s->ops->step_done(s, r, local_loss_sum, last);
    s->final = *r, s->has_final = 1;
    return 0;
}

int tn_strategy_next_logged(tn_strategy *s, tn_strategy_logged *out) {
    if (s->ops->next_logged) return s->ops->next_logged(s, out);
    if (!s->has_final) return 0;
    *out = s->final, s->has_final = 0;
    return 1;
}

int tn_strategy_status(const tn_strategy *s) { return s->ops->status ? s->ops->status(s) : 0; }

void tn_strategy_consensus(tn_strategy *s, int on) {
    if (s->ops->consensus) s->ops->consensus(s, on);
}

int tn_strategy_full(tn_strategy *s) { return s->ops->full ? s->ops->full(s) : 0; }

void tn_strategy_end_full(tn_strategy *s) {
    if (s->ops->end_full) s->ops->end_full(s);
}

int tn_strategy_save_moments(tn_strategy *s, const char *dir) {
    return s->ops->save_moments ? s->ops->save_moments(s, dir) : 0;
}

int tn_strategy_load_moments(tn_strategy *s, const char *dir) {
    return s->ops->load_moments ? s->ops->load_moments(s, dir) : 0;
}

int tn_strategy_save_state(tn_strategy *s, tn_state *mine, tn_state *job) {
    return s->ops->save_state ? s->ops->save_state(s, mine, job) : 0;
}

void tn_strategy_load_state(tn_strategy *s, const tn_state *mine, const tn_state *job, const char *name, char *note,
                            size_t n) {
    if (s->ops->load_state) s->ops->load_state(s, mine, job, name, note, n);
}

double tn_strategy_bytes_per_step(const tn_strategy *s) {
    tn_comm *c = s->a.comm;
    if (!c || s->a.world == 1 || tn_comm_get_info(c)->n_nodes == 1) return 0;
    if (s->ops->bytes_per_step) return s->ops->bytes_per_step(s);
    /* the leaders' ring all-reduce: 2 (M-1) / M of the gradients leave each machine */
    const tn_comm_info *in = tn_comm_get_info(c);
    return 2.0 * (in->n_nodes - 1) / in->n_nodes * (double)s->a.model->n_trainable * sizeof(float);
}

void tn_strategy_describe(const tn_strategy *s, FILE *out) {
    if (s->ops->describe) s->ops->describe(s, out);
    else tn_strategy_describe_dp(s, out);
}

void tn_strategy_describe_dp(const tn_strategy *s, FILE *out) {
    const tn_comm_info *in = tn_comm_get_info(s->a.comm);
    const tn_grad_sync_stats *gs = tn_grad_sync_get_stats(s->sync); /* the plan that runs, not the cap */
    fprintf(out, "tandem: data parallel over %d rank(s) on %d machine(s)%s; gradients all-reduced once per step "
            "in %d bucket(s) of <= %.3g MB (ddp_bucket_cap_mb %g; at least 8 buckets of >= 64 KB where the gradients allow, for overlap)\n",
            in->size, in->n_nodes, in->n_nodes > 1 ? " (hierarchical: inside each machine first)" : "",
            gs->n_buckets, gs->bucket_bytes / 1048576.0, s->a.cfg->ddp_bucket_cap_mb);
}
