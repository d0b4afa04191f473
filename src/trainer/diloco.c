/* diloco.c -- see diloco.h. The parameter slab (and the optimizer's moments) are the backend's memory, a GPU's under
 * CUDA: only the backend's download and upload touch them. DiLoCo's own vectors (consensus, momentum, round start,
 * exchanged mean) are host memory, worked on once per round, and the exchange runs on them. */
#include "trainer/diloco.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/exchange.h"
#include "core/core.h"
#include "model/safetensors.h"

#define NUMS 5 /* per step: loss sum, trained tokens, tokens seen, gradient norm, skipped */
#define META_LEN 13 /* 12 before diloco_sync_steps: first 0 */

struct tn_diloco {
    tn_comm *c;
    tn_model *m;
    tn_diloco_config cfg;
    size_t n;                 /* trainable floats */
    int M, H;
    int first;                /* rounds end at first + k H */
    float *g, *v, *s, *buf;   /* consensus, outer momentum, round start, exchanged pseudo-gradient */
    float *res;               /* error feedback of this rank's part (compressed only) */
    tn_comm_op *op;           /* the exchange of buf + xstats in flight */
    int have_avg;             /* buf holds a mean not applied yet, xstats its summed numbers */
    int pend_first, pend_n;   /* the steps of that round */
    double *xstats;           /* [NUMS H] */
    double *round;            /* [NUMS H]: this machine's numbers of the running round */
    int round_first, round_n;
    double round_samples[2];  /* the machine's samples in the running round, and the global batches' */
    tn_diloco_step *queue;    /* summed numbers not popped yet */
    int qhead, qcount, qcap;
    int skipped_outer;
};

tn_diloco *tn_diloco_create(tn_comm *c, tn_model *m, const tn_diloco_config *cfg) {
    if (!tn_comm_uniform(c)) {
        tn_err("sync_mode diloco needs the same number of ranks on every machine");
        return NULL;
    }
    tn_diloco *d = tn_xcalloc(1, sizeof *d);
    d->c = c, d->m = m, d->cfg = *cfg;
    d->n = m->n_trainable;
    d->M = tn_comm_get_info(c)->n_nodes;
    d->H = cfg->inner_steps;
    size_t n = d->n ? d->n : 1;
    d->g = tn_xalloc_floats(n), d->v = tn_xalloc_floats(n), d->s = tn_xalloc_floats(n), d->buf = tn_xalloc_floats(n);
    memset(d->v, 0, n * sizeof *d->v);
    if (cfg->codec != TN_CODEC_FP32) {
        d->res = tn_xalloc_floats(n);
        memset(d->res, 0, n * sizeof *d->res);
    }
    d->xstats = tn_xcalloc((size_t)NUMS * d->H, sizeof *d->xstats);
    d->round = tn_xcalloc((size_t)NUMS * d->H, sizeof *d->round);
    d->qcap = 2 * d->H + 2;
    d->queue = tn_xcalloc((size_t)d->qcap, sizeof *d->queue);
    return d;
}

void tn_diloco_free(tn_diloco *d) {
    if (!d) return;
    if (d->op) tn_comm_wait(d->op);
    tn_free_aligned(d->g), tn_free_aligned(d->v), tn_free_aligned(d->s), tn_free_aligned(d->buf);
    tn_free_aligned(d->res);
    free(d->xstats), free(d->round), free(d->queue), free(d);
}

void tn_diloco_start(tn_diloco *d, int first) {
    d->first = first;
    d->m->be->download(d->g, d->m->slab, d->n);
    memcpy(d->s, d->g, d->n * sizeof *d->s);
    memset(d->v, 0, d->n * sizeof *d->v);
}

/* The parameters become the host vector x (g or s). */
static void set_params(tn_diloco *d, const float *x) { d->m->be->upload(d->m->slab, x, d->n); }

static void push(tn_diloco *d, const tn_diloco_step *st) {
    if (d->qcount == d->qcap) d->qhead = (d->qhead + 1) % d->qcap, d->qcount--; /* never: the job pops each step */
    d->queue[(d->qhead + d->qcount++) % d->qcap] = *st;
}

int tn_diloco_pop(tn_diloco *d, tn_diloco_step *out) {
    if (!d->qcount) return 0;
    *out = d->queue[d->qhead];
    d->qhead = (d->qhead + 1) % d->qcap, d->qcount--;
    return 1;
}

int tn_diloco_take_skipped_outer(tn_diloco *d) {
    int k = d->skipped_outer;
    d->skipped_outer = 0;
    return k;
}

size_t tn_diloco_round_bytes(const tn_diloco *d) {
    return tn_comm_exchange_bytes(d->c, d->n, d->cfg.codec, (size_t)NUMS * d->H);
}

/* The mean of the exchanged round (buf, xstats) moves g; its steps' numbers become final. */
static void apply_mean(tn_diloco *d) {
    const float mu = (float)d->cfg.outer_momentum, lr = (float)d->cfg.outer_lr;
    float *restrict g = d->g, *restrict v = d->v;
    const float *restrict D = d->buf;
    if (!isfinite(tn_backend_cpu()->sumsq(D, d->n))) { /* D is host memory */
        d->skipped_outer++; /* a machine diverged: g keeps its value, every machine the same */
    } else if (d->cfg.nesterov) {
        for (size_t i = 0; i < d->n; i++) {
            float vi = mu * v[i] + D[i];
            v[i] = vi;
            g[i] -= lr * (D[i] + mu * vi);
        }
    } else {
        for (size_t i = 0; i < d->n; i++) {
            float vi = mu * v[i] + D[i];
            v[i] = vi;
            g[i] -= lr * vi;
        }
    }
    for (int k = 0; k < d->pend_n; k++) {
        const double *x = d->xstats + NUMS * k;
        int skipped = (int)x[4];
        tn_diloco_step st = {.step = d->pend_first + k, .loss_sum = x[0], .tokens = x[1], .seen = x[2],
                             .grad_norm = skipped < d->M ? x[3] / (d->M - skipped) : NAN, .skipped = skipped};
        push(d, &st);
    }
    d->have_avg = 0;
}

static int wait_exchange(tn_diloco *d) {
    if (!d->op) return 0;
    int rc = tn_comm_wait(d->op);
    d->op = NULL;
    if (rc != 0) return tn_err("the DiLoCo exchange between machines failed: %s", tn_errmsg());
    d->have_avg = 1;
    return 0;
}

/* The round's pseudo-gradient times M n_m / n (diloco.h's weights); equal shares: exactly 1, D untouched. */
static void weigh(tn_diloco *d) {
    const double *rs = d->round_samples;
    double f = rs[1] > 0 ? d->M * rs[0] / rs[1] : 1.0;
    d->round_samples[0] = d->round_samples[1] = 0;
    if (f == 1.0) return;
    const float w = (float)f;
    for (size_t i = 0; i < d->n; i++) d->buf[i] *= w;
}

static int launch(tn_diloco *d) {
    weigh(d);
    tn_exchange x = {.codec = d->cfg.codec, .residual = d->res, .scale = 1.0f / (float)d->M, .reduce_local = 0,
                     .background = 1, .extra = d->xstats, .n_extra = (size_t)NUMS * d->H};
    d->op = tn_comm_iexchange(d->c, d->buf, d->n, &x);
    return d->op ? 0 : tn_err("the DiLoCo exchange between machines could not start: %s", tn_errmsg());
}

/* End of a round: see diloco.h. */
static int boundary(tn_diloco *d, int last) {
    if (wait_exchange(d) != 0) return -1;
    if (d->have_avg) apply_mean(d);
    float *restrict s = d->s, *restrict D = d->buf;
    const float *restrict g = d->g;
    d->m->be->download(D, d->m->slab, d->n); /* the parameters x, then D = s - x */
    for (size_t i = 0; i < d->n; i++) D[i] = s[i] - D[i];
    memset(d->xstats, 0, (size_t)NUMS * d->H * sizeof *d->xstats);
    memcpy(d->xstats, d->round, (size_t)NUMS * d->round_n * sizeof *d->xstats);
    d->pend_first = d->round_first, d->pend_n = d->round_n, d->round_n = 0;
    if (d->cfg.overlap && !last) {
        for (size_t i = 0; i < d->n; i++) s[i] = g[i] - D[i]; /* x = s = g - D, before the exchange rewrites D */
        set_params(d, s);
        return launch(d);
    }
    if (launch(d) != 0 || wait_exchange(d) != 0) return -1;
    apply_mean(d);
    set_params(d, d->g);
    memcpy(s, d->g, d->n * sizeof *s);
    return 0;
}

int tn_diloco_step_done(tn_diloco *d, const tn_diloco_step *st, int last) {
    if (d->round_n == 0) d->round_first = st->step;
    d->round_samples[0] += st->samples, d->round_samples[1] += st->batch;
    double *r = d->round + NUMS * d->round_n++;
    r[0] = st->skipped ? 0 : st->loss_sum, r[1] = st->skipped ? 0 : st->tokens, r[2] = st->seen;
    r[3] = st->skipped ? 0 : st->grad_norm, r[4] = st->skipped ? 1 : 0;
    if ((st->step - d->first) % d->H == 0 || last || d->round_n == d->H) return boundary(d, last);
    return 0;
}

void tn_diloco_swap(tn_diloco *d) {
    float *x = tn_xalloc_floats(d->n ? d->n : 1);
    d->m->be->download(x, d->m->slab, d->n);
    set_params(d, d->g);
    memcpy(d->g, x, d->n * sizeof *x);
    tn_free_aligned(x);
}

/* A copy of backend memory into the state (tn_state_put copies host bytes). */
static void put_backend(tn_state *st, const char *name, const tn_backend *be, const float *p, size_t n) {
    float *h = tn_xalloc_floats(n ? n : 1);
    be->download(h, p, n);
    tn_state_put(st, name, ST_F32, h, n);
    tn_free_aligned(h);
}

/* ---- checkpoints ---- */

int tn_diloco_save(tn_diloco *d, const tn_adamw *opt, tn_state *mine, tn_state *job) {
    if (wait_exchange(d) != 0) return -1; /* its mean stays pending: applied at the next round's end */
    const tn_comm_info *in = tn_comm_get_info(d->c);
    int64_t meta[META_LEN] = {1, d->M, in->size, d->H, d->cfg.overlap, d->cfg.codec, d->have_avg, d->pend_first,
                              d->pend_n, d->round_first, d->round_n, (int64_t)d->n, d->first};
    tn_state_put(job, "diloco.meta", ST_I64, meta, META_LEN);
    tn_state_put(job, "diloco.outer_momentum", ST_F32, d->v, d->n);
    if (d->have_avg) {
        tn_state_put(job, "diloco.pending_mean", ST_F32, d->buf, d->n);
        tn_state_put(job, "diloco.pending_stats", ST_F64, d->xstats, (size_t)NUMS * d->H);
    }
    if (d->res) {
        size_t off, len;
        tn_comm_exchange_part(d->c, d->n, &off, &len);
        tn_state_put(mine, "diloco.residual", ST_F32, d->res + off, len);
    }
    if (in->local_rank == 0) { /* the machine's own state, once per machine */
        int64_t adam = opt->step;
        put_backend(mine, "machine.diloco.params", d->m->be, d->m->slab, d->n);
        tn_state_put(mine, "machine.diloco.round_start", ST_F32, d->s, d->n);
        tn_state_put(mine, "machine.diloco.round_stats", ST_F64, d->round, (size_t)NUMS * d->H);
        tn_state_put(mine, "machine.diloco.round_samples", ST_F64, d->round_samples, 2);
        tn_state_put(mine, "machine.diloco.adam_step", ST_I64, &adam, 1);
        if (in->node > 0) { /* machine 0's moments are the checkpoint's optimizer.safetensors */
            put_backend(mine, "machine.diloco.exp_avg", opt->be, opt->m, opt->n);
            put_backend(mine, "machine.diloco.exp_avg_sq", opt->be, opt->v, opt->n);
        }
    }
    return 0;
}

static const float *get_f32(const tn_state *s, const char *name, size_t want) {
    size_t n = 0;
    const float *p = tn_state_get(s, name, ST_F32, &n);
    return p && n == want ? p : NULL;
}

int tn_diloco_load(tn_diloco *d, tn_adamw *opt, const tn_state *mine, const tn_state *job, char *why, size_t wn) {
    const tn_comm_info *in = tn_comm_get_info(d->c);
    size_t mn = 0, sn = 0;
    const int64_t *meta = tn_state_get(job, "diloco.meta", ST_I64, &mn);
    snprintf(why, wn, "it holds no DiLoCo state (another sync_mode, or save_only_model)");
    if (!meta || (mn != META_LEN && mn != META_LEN - 1) || meta[11] != (int64_t)d->n) {
        d->round_n = 0, d->round_samples[0] = d->round_samples[1] = 0;
        return 0;
    }
    const float *v = get_f32(job, "diloco.outer_momentum", d->n);
    if (v) memcpy(d->v, v, d->n * sizeof *d->v);
    const float *mean = get_f32(job, "diloco.pending_mean", d->n);
    const double *ps = tn_state_get(job, "diloco.pending_stats", ST_F64, &sn);
    if (meta[6] && mean && ps && sn == (size_t)NUMS * meta[3] && meta[3] <= d->H) {
        memcpy(d->buf, mean, d->n * sizeof *d->buf);
        memset(d->xstats, 0, (size_t)NUMS * d->H * sizeof *d->xstats);
        memcpy(d->xstats, ps, sn * sizeof *ps);
        d->have_avg = 1, d->pend_first = (int)meta[7], d->pend_n = (int)meta[8];
    }
    const float *x = get_f32(mine, "machine.diloco.params", d->n), *s = get_f32(mine, "machine.diloco.round_start", d->n);
    const double *rs = tn_state_get(mine, "machine.diloco.round_stats", ST_F64, &sn);
    const int64_t *adam = tn_state_get(mine, "machine.diloco.adam_step", ST_I64, NULL);
    const float *em = get_f32(mine, "machine.diloco.exp_avg", opt->n), *ev = get_f32(mine, "machine.diloco.exp_avg_sq", opt->n);
    int64_t first = mn == META_LEN ? meta[12] : 0;
    int same = meta[1] == d->M && meta[2] == in->size && meta[3] == d->H && meta[5] == d->cfg.codec &&
               first == d->first && x && s && rs && sn == (size_t)NUMS * d->H && adam && (in->node == 0 || (em && ev));
    if (!same) {
        snprintf(why, wn, "it was taken with %lld machine(s), %lld rank(s), diloco_inner_steps %lld, comm_compression %s, "
                 "diloco_sync_steps %lld", (long long)meta[1], (long long)meta[2], (long long)meta[3],
                 meta[5] >= 0 && meta[5] < TN_CODEC_N ? tn_codec_name((tn_codec)meta[5]) : "?", (long long)first);
        if (d->have_avg) { /* its pending mean is the same for any topology: apply it, restart from g */
            apply_mean(d);
            set_params(d, d->g);
            memcpy(d->s, d->g, d->n * sizeof *d->s);
        }
        d->round_n = 0, d->round_samples[0] = d->round_samples[1] = 0;
        return 0;
    }
    set_params(d, x);
    memcpy(d->s, s, d->n * sizeof *s);
    memcpy(d->round, rs, sn * sizeof *rs);
    size_t nsamp = 0; /* absent before balance_ranks came to DiLoCo: equal shares */
    const double *samp = tn_state_get(mine, "machine.diloco.round_samples", ST_F64, &nsamp);
    d->round_samples[0] = samp && nsamp == 2 ? samp[0] : 0, d->round_samples[1] = samp && nsamp == 2 ? samp[1] : 0;
    d->round_first = (int)meta[9], d->round_n = (int)meta[10];
    opt->step = (int)adam[0];
    if (in->node > 0) opt->be->upload(opt->m, em, opt->n), opt->be->upload(opt->v, ev, opt->n);
    size_t off, len;
    tn_comm_exchange_part(d->c, d->n, &off, &len);
    const float *res = get_f32(mine, "diloco.residual", len);
    if (d->res && res) memcpy(d->res + off, res, len * sizeof *res);
    return 1;
}
