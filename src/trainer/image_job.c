/* image_job -- `tandem train` for an image classifier (model_type resnet): data parallel as PyTorch DDP runs
 * torchvision's CIFAR recipe. Data: dataset cifar10 (dataset_dir = a cifar-10-batches-bin folder), imagefolder
 * (dataset_dir/train, and dataset_dir/val or dataset_dir/test for evaluation) or demo_shapes (generated). Each
 * global batch (per_device_train_batch_size x ranks x gradient_accumulation_steps) is a slice of a per-epoch
 * permutation drawn from (seed, epoch), cut into equal rank shares, so a run's samples do not depend on the number
 * of ranks. Batch normalisation as DDP's default: per-rank batch statistics, running estimates broadcast from rank
 * 0 before every forward (broadcast_buffers); sync_bn: true sums the statistics over the ranks (SyncBatchNorm), so
 * a global batch trains the same on any number of ranks. Gradients: the mean over the global batch (all-reduced in ddp_bucket_cap_mb buckets while the last backward runs,
 * image_sync.h), clipped at
 * max_grad_norm, then torch's AdamW (weight decay on every parameter, as torch.optim given model.parameters())
 * or SGD (optim: sgd, optim_args momentum / dampening / nesterov). Each epoch ends with an evaluation (accuracy,
 * loss) of the held-out set. Rank 0 writes trainer_log.jsonl, all_results.json and the model (config.json +
 * model.safetensors) into output_dir. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/image_kernels.h"
#include "core/core.h"
#include "data/image_set.h"
#include "model/resnet.h"
#include "outputs/loss_plot.h"
#include "outputs/tensorboard.h"
#include "trainer/family.h"
#include "trainer/image_ckpt.h"
#include "trainer/image_sync.h"

#define DEMO_TRAIN 4000
#define DEMO_EVAL 500

typedef struct {
    double momentum, dampening;
    int nesterov;
} sgd_args;

typedef struct {
    const tn_train_config *cfg;
    tn_comm *comm;
    int rank, world;
    const tn_backend *be;
    tn_resnet *m;
    tn_image_set train, eval;
    float *opt_a, *opt_b;            /* AdamW m, v; SGD momentum buffer in opt_a */
    sgd_args sgd;
    tn_bn_sync sync;                 /* sync_bn: batch statistics summed over the ranks */
    tn_image_sync *dp;               /* buffers broadcast, gradients all-reduced in buckets during backward */
    int sync_failed;                 /* an all-reduce inside a BN failed (reported after the step) */
    char *log;                       /* trainer_log.jsonl so far (rank 0), rewritten atomically */
    int start_step;                  /* resumed from checkpoint-<start_step> (0: a fresh run) */
    tn_tb_writer *tb;                /* report_to: tensorboard (rank 0), HF's tags */
    double *curve[3][2];             /* plot_loss: (step, value) of loss, eval_loss, eval_accuracy */
    int n_curve[3];
    size_t log_len;
    double t0;
} image_job;

static int parse_sgd_args(const tn_train_config *cfg, sgd_args *a) {
    *a = (sgd_args){0.0, 0.0, 0};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", cfg->optim_args);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        while (*tok == ' ') tok++;
        char *eq = strchr(tok, '=');
        if (!eq) return tn_err("%s: key 'optim_args': '%s' is not key=value", cfg->source_path, tok);
        *eq = '\0';
        const char *v = eq + 1;
        char *end;
        if (!strcmp(tok, "nesterov")) {
            a->nesterov = !strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1");
            if (!a->nesterov && strcmp(v, "False") && strcmp(v, "false") && strcmp(v, "0"))
                return tn_err("%s: key 'optim_args': nesterov=%s is not True or False", cfg->source_path, v);
            continue;
        }
        double x = strtod(v, &end);
        if (end == v || *end || !(x >= 0 && x < 1))
            return tn_err("%s: key 'optim_args': %s=%s is not a number in [0, 1)", cfg->source_path, tok, v);
        if (!strcmp(tok, "momentum")) a->momentum = x;
        else if (!strcmp(tok, "dampening")) a->dampening = x;
        else return tn_err("%s: key 'optim_args': '%s' is not an SGD argument (momentum, dampening, nesterov)",
                           cfg->source_path, tok);
    }
    if (a->nesterov && (a->momentum <= 0 || a->dampening != 0))
        return tn_err("%s: key 'optim_args': nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)",
                      cfg->source_path);
    return 0;
}

static int load_sets(image_job *j, int size) {
    const tn_train_config *cfg = j->cfg;
    const char *d = cfg->dataset, *dir = cfg->dataset_dir;
    int rc;
    if (!strcmp(d, "demo_shapes")) {
        rc = tn_demo_shapes(DEMO_TRAIN, 0, (uint64_t)cfg->seed, &j->train);
        if (rc == 0) rc = tn_demo_shapes(DEMO_EVAL, 1, (uint64_t)cfg->seed, &j->eval);
    } else if (!strcmp(d, "cifar10")) {
        rc = tn_cifar10_load(dir, 1, &j->train);
        if (rc == 0) rc = tn_cifar10_load(dir, 0, &j->eval);
    } else if (!strcmp(d, "imagefolder")) {
        char *t = tn_path_join(dir, "train"), *v = tn_path_join(dir, "val"), *te = tn_path_join(dir, "test");
        rc = tn_image_folder_load(t, size, &j->train);
        const char *ev = tn_file_exists(v) ? v : tn_file_exists(te) ? te : NULL;
        if (rc == 0 && ev) rc = tn_image_folder_load(ev, size, &j->eval);
        free(t), free(v), free(te);
    } else {
        return tn_err("%s: key 'dataset': %s is not an image dataset (cifar10, imagefolder, demo_shapes)",
                      cfg->source_path, d);
    }
    if (rc) return tn_err("%s: key 'dataset': %s", cfg->source_path, tn_errmsg());
    int classes = tn_resnet_cfg(j->m)->num_classes;
    if (j->train.num_classes > classes)
        return tn_err("%s: the data has %d classes, the model's num_classes is %d", cfg->source_path,
                      j->train.num_classes, classes);
    return 0;
}

static int load_model(image_job *j) {
    const tn_train_config *cfg = j->cfg;
    int fresh = !cfg->model_name_or_path[0];
    char *path = fresh ? tn_xstrdup(cfg->model_config) : tn_path_join(cfg->model_name_or_path, "config.json");
    tn_resnet_config rc;
    int r = tn_resnet_config_load(path, &rc);
    free(path);
    if (r) return -1;
    if (!(j->m = tn_resnet_create(&rc, j->be))) return -1;
    if (fresh) tn_resnet_init_random(j->m, (uint64_t)cfg->seed);
    else if (tn_resnet_load(j->m, cfg->model_name_or_path)) return -1;
    return 0;
}

static void add_point(image_job *j, int which, double step, double v) {
    int n = j->n_curve[which]++;
    for (int k = 0; k < 2; k++) j->curve[which][k] = tn_xrealloc(j->curve[which][k], (size_t)(n + 1) * sizeof(double));
    j->curve[which][0][n] = step, j->curve[which][1][n] = v;
}

/* plot_loss: LLaMA-Factory's training_loss.png, training_eval_loss.png, training_eval_accuracy.png (rank 0) */
static int plot_curves(image_job *j) {
    static const char *const keys[3] = {"loss", "eval_loss", "eval_accuracy"};
    int rc = 0;
    for (int k = 0; rc == 0 && k < 3; k++) {
        if (!j->n_curve[k]) continue;
        char file[64], title[4200];
        snprintf(file, sizeof file, "training_%s.png", keys[k]);
        snprintf(title, sizeof title, "training %s of %s", keys[k], j->cfg->output_dir);
        char *p = tn_path_join(j->cfg->output_dir, file);
        rc = tn_plot_curve_png(p, title, keys[k], j->curve[k][0], j->curve[k][1], j->n_curve[k]);
        free(p);
    }
    return rc;
}

/* appends one JSON line to trainer_log.jsonl (rank 0), rewriting the file atomically */
static int log_line(image_job *j, const char *line) {
    if (j->rank != 0) return 0;
    size_t n = strlen(line);
    j->log = tn_xrealloc(j->log, j->log_len + n + 2);
    memcpy(j->log + j->log_len, line, n);
    j->log_len += n;
    j->log[j->log_len++] = '\n';
    char *p = tn_path_join(j->cfg->output_dir, "trainer_log.jsonl");
    int rc = tn_write_file_atomic(p, j->log, j->log_len);
    free(p);
    return rc;
}

static void hms(double s, char *b, size_t n) {
    long t = (long)s;
    snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* permutation of n for epoch e (the same on every rank) */
static void permute(int64_t *idx, int n, uint64_t seed, int64_t e) {
    tn_rng r;
    tn_rng_seed(&r, seed * 1000003u + (uint64_t)e);
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int k = (int)(tn_rng_next(&r) % (uint64_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[k], idx[k] = t;
    }
}

static void sync_sum(void *ctx, double *buf, int n) {
    image_job *j = ctx;
    if (j->world > 1 && !j->sync_failed && tn_comm_allreduce_f64(j->comm, buf, (size_t)n)) j->sync_failed = 1;
}

/* evaluation of the held-out set, split over ranks: accuracy and mean cross-entropy */
static int evaluate(image_job *j, double *acc, double *loss) {
    const tn_image_set *s = &j->eval;
    int K = tn_resnet_cfg(j->m)->num_classes, B = j->cfg->per_device_eval_batch_size;
    size_t off, len;
    tn_comm_slice((size_t)s->n, j->world, j->rank, &off, &len);
    tn_image_aug plain = tn_image_aug_cifar(0);
    float *img = tn_xmalloc((size_t)B * s->C * s->H * s->W * sizeof *img), *lg = tn_xmalloc((size_t)B * K * sizeof *lg);
    int64_t *idx = tn_xmalloc((size_t)B * sizeof *idx);
    int32_t *lab = tn_xmalloc((size_t)B * sizeof *lab);
    double sums[3] = {0, 0, 0}; /* correct, loss, count */
    for (size_t b = 0; b < len; b += (size_t)B) {
        int n = (int)(len - b < (size_t)B ? len - b : (size_t)B);
        for (int i = 0; i < n; i++) idx[i] = (int64_t)(off + b) + i;
        tn_image_batch(s, idx, n, &plain, 0, 0, img, lab);
        tn_resnet_logits(j->m, img, n, lg);
        for (int i = 0; i < n; i++) {
            const float *z = lg + (size_t)i * K;
            int best = 0;
            double mx = z[0], se = 0;
            for (int k = 1; k < K; k++) best = z[k] > z[best] ? k : best, mx = z[k] > mx ? z[k] : mx;
            for (int k = 0; k < K; k++) se += exp(z[k] - mx);
            sums[0] += best == lab[i], sums[1] += mx + log(se) - z[lab[i]], sums[2] += 1;
        }
    }
    free(img), free(lg), free(idx), free(lab);
    if (j->world > 1 && tn_comm_allreduce_f64(j->comm, sums, 3)) return -1;
    *acc = sums[2] ? sums[0] / sums[2] : 0, *loss = sums[2] ? sums[1] / sums[2] : 0;
    return 0;
}

static double grad_clip(image_job *j) {
    size_t n = tn_resnet_n_params(j->m);
    double norm = sqrt(j->be->sumsq(tn_resnet_grad(j->m), n));
    double maxn = j->cfg->max_grad_norm;
    if (maxn > 0 && norm > maxn) j->be->scale(tn_resnet_grad(j->m), n, (float)(maxn / (norm + 1e-6)));
    return norm;
}

static void optimizer_step(image_job *j, double lr, int step) {
    const tn_train_config *c = j->cfg;
    size_t n = tn_resnet_n_params(j->m);
    float *p = tn_resnet_params(j->m), *g = tn_resnet_grad(j->m);
    if (c->optim_sgd) {
        j->be->image->sgd(p, g, j->opt_a, n, lr, j->sgd.momentum, j->sgd.dampening, c->weight_decay, j->sgd.nesterov,
                          step == 1);
    } else {
        j->be->adamw(p, g, j->opt_a, j->opt_b, n, lr, c->adam_beta1, c->adam_beta2, c->adam_epsilon, c->weight_decay,
                     1.0 - pow(c->adam_beta1, step), 1.0 - pow(c->adam_beta2, step));
    }
}

/* one optimizer step over global batch `b` of the epoch's permutation; returns the batch's mean loss (all ranks) */
static int train_step(image_job *j, const int64_t *perm, int64_t start, int gsize, int64_t epoch, double *loss) {
    const tn_train_config *c = j->cfg;
    const tn_image_set *s = &j->train;
    int micro = c->per_device_train_batch_size;
    size_t off, len;
    tn_comm_slice((size_t)gsize, j->world, j->rank, &off, &len); /* this rank's share of the global batch */
    size_t n = tn_resnet_n_params(j->m);
    j->be->zero(tn_resnet_grad(j->m), n);
    if (tn_image_sync_buffers(j->dp)) return -1;
    tn_image_aug aug = tn_image_aug_cifar(1);
    float *img = tn_xmalloc((size_t)micro * s->C * s->H * s->W * sizeof *img);
    int32_t *lab = tn_xmalloc((size_t)micro * sizeof *lab);
    double sum = 0;
    for (size_t b = 0; b < len; b += (size_t)micro) {
        int k = (int)(len - b < (size_t)micro ? len - b : (size_t)micro);
        tn_image_batch(s, perm + start + (int64_t)(off + b), k, &aug, (uint64_t)c->seed, epoch, img, lab);
        if (b + (size_t)micro >= len) tn_image_sync_arm(j->dp); /* the last micro-batch: exchange during backward */
        sum += tn_resnet_forward_backward(j->m, img, lab, k, 1.0f / (float)gsize, (float)c->label_smoothing_factor, NULL);
    }
    free(img), free(lab);
    int rc = tn_image_sync_finish(j->dp); /* waited for even when a BN all-reduce failed: no op is left in flight */
    if (j->sync_failed) return tn_err("sync_bn: the batch-statistics all-reduce failed: %s", tn_errmsg());
    if (rc || (j->world > 1 && tn_comm_allreduce_f64(j->comm, &sum, 1))) return -1;
    *loss = sum / gsize;
    return 0;
}

/* checkpoint-<step>/, then save_total_limit applied (HF: the newest N are kept) */
static int save_checkpoint(image_job *j, int step) {
    int rc = tn_image_ckpt_save(j->cfg->output_dir, step, j->m, j->opt_a, j->opt_b, j->be);
    return rc ? rc : tn_image_ckpt_prune(j->cfg->output_dir, j->cfg->save_total_limit);
}

static int train(image_job *j) {
    const tn_train_config *c = j->cfg;
    int per_rank = c->per_device_train_batch_size * c->gradient_accumulation_steps;
    int G = per_rank * j->world, n = j->train.n;
    /* a last partial batch that cannot give every rank 2 images is dropped: batch norm needs 2 values per channel
     * (torch refuses 1), and under sync_bn a rank without images would miss the statistics all-reduce */
    int steps_per_epoch = n / G + (n % G >= 2 * j->world);
    if (steps_per_epoch == 0)
        return tn_err("%s: %d training images do not fill one batch of 2 per rank (%d ranks)", c->source_path, n, j->world);
    int total = c->max_steps > 0 ? c->max_steps : (int)ceil(c->num_train_epochs * steps_per_epoch);
    int warmup = tn_warmup_steps(c, total), logging = c->logging_steps > 0 ? c->logging_steps : 10;
    int64_t *perm = tn_xmalloc((size_t)n * sizeof *perm);
    double window = 0, train_sum = 0, acc = 0, eval_loss = 0;
    int in_window = 0, step = j->start_step, first = j->start_step, rc = 0;
    char line[512], el[32], rem[32];
    if (j->rank == 0)
        printf("tandem: image classifier, %d training images (%d classes), %d held out; %d steps of %d images "
               "(%d ranks), %s\n", n, j->train.num_classes, j->eval.n, total, G, j->world, c->optim_sgd ? "SGD" : "AdamW");
    for (int64_t epoch = step / steps_per_epoch; rc == 0 && step < total; epoch++) {
        permute(perm, n, (uint64_t)c->seed, epoch);
        for (int b = step % steps_per_epoch; rc == 0 && b < steps_per_epoch && step < total; b++) {
            int64_t start = (int64_t)b * G;
            int gsize = (int)(n - start < G ? n - start : G);
            double lr = tn_lr_for(c, step, warmup, total), loss = 0;
            rc = train_step(j, perm, start, gsize, epoch, &loss);
            if (rc) break;
            double gn = grad_clip(j);
            step++;
            optimizer_step(j, lr, step);
            window += loss, train_sum += loss, in_window++;
            if (c->save_strategy == TN_SAVE_STEPS && c->save_steps > 0 && step % c->save_steps == 0 && j->rank == 0)
                rc = save_checkpoint(j, step);
            if (step % logging == 0 || step == total) {
                double e = tn_now() - j->t0, ep = (double)epoch + (double)(b + 1) / steps_per_epoch;
                hms(e, el, sizeof el), hms(e / (step - first) * (total - step), rem, sizeof rem);
                snprintf(line, sizeof line, "{\"current_steps\": %d, \"total_steps\": %d, \"loss\": %.4f, \"lr\": %.6g, "
                         "\"grad_norm\": %.4f, \"epoch\": %.4f, \"percentage\": %.2f, \"elapsed_time\": \"%s\", "
                         "\"remaining_time\": \"%s\"}", step, total, window / in_window, lr, gn, ep, 100.0 * step / total,
                         el, rem);
                if (j->rank == 0) printf("%s\n", line);
                rc = log_line(j, line);
                add_point(j, 0, step, window / in_window);
                if (rc == 0 && j->tb)
                    rc = tn_tb_scalar(j->tb, "train/loss", window / in_window, step) ||
                         tn_tb_scalar(j->tb, "train/learning_rate", lr, step) ||
                         tn_tb_scalar(j->tb, "train/grad_norm", gn, step) || tn_tb_scalar(j->tb, "train/epoch", ep, step);
                window = 0, in_window = 0;
            }
        }
        if (rc == 0 && j->eval.n && (step % steps_per_epoch == 0 || step == total)) {
            rc = evaluate(j, &acc, &eval_loss);
            snprintf(line, sizeof line, "{\"current_steps\": %d, \"total_steps\": %d, \"eval_loss\": %.4f, "
                     "\"eval_accuracy\": %.4f, \"epoch\": %.4f}", step, total, eval_loss, acc,
                     (double)step / steps_per_epoch);
            if (rc == 0 && j->rank == 0) printf("%s\n", line);
            if (rc == 0) rc = log_line(j, line);
            add_point(j, 1, step, eval_loss), add_point(j, 2, step, acc);
            if (rc == 0 && j->tb)
                rc = tn_tb_scalar(j->tb, "eval/loss", eval_loss, step) || tn_tb_scalar(j->tb, "eval/accuracy", acc, step);
        }
        if (rc == 0 && c->save_strategy == TN_SAVE_EPOCH && step % steps_per_epoch == 0 && j->rank == 0)
            rc = save_checkpoint(j, step);
    }
    free(perm);
    if (rc || j->rank != 0) return rc;
    double rt = tn_now() - j->t0;
    char res[512];
    char ev[160] = ""; /* the eval keys only when there was a held-out set */
    if (j->eval.n)
        snprintf(ev, sizeof ev, "    \"eval_accuracy\": %.4f,\n    \"eval_loss\": %.4f,\n    \"eval_samples\": %d,\n", acc,
                 eval_loss, j->eval.n);
    snprintf(res, sizeof res, "{\n    \"epoch\": %.4f,\n%s    \"train_loss\": %.4f,\n    \"train_runtime\": %.4f,\n"
             "    \"train_samples_per_second\": %.3f,\n    \"train_steps_per_second\": %.3f\n}\n",
             (double)step / steps_per_epoch, ev, train_sum / (step > first ? step - first : 1), rt,
             (double)(step - first) * G / rt, (step - first) / rt);
    char *p = tn_path_join(c->output_dir, "all_results.json");
    rc = tn_write_file_atomic(p, res, strlen(res));
    free(p);
    if (rc == 0) rc = tn_resnet_save(j->m, c->output_dir);
    if (rc == 0 && c->plot_loss) rc = plot_curves(j);
    if (rc == 0 && j->eval.n) printf("tandem: eval accuracy %.2f%%; model saved to %s\n", 100 * acc, c->output_dir);
    else if (rc == 0) printf("tandem: model saved to %s (no held-out set to evaluate)\n", c->output_dir);
    return rc;
}

/* keeps the lines of output_dir/trainer_log.jsonl up to step (a resumed run continues the log) */
static void keep_log(image_job *j, int step) {
    char *p = tn_path_join(j->cfg->output_dir, "trainer_log.jsonl");
    char *text = tn_file_exists(p) ? tn_read_file(p, NULL, 1 << 28) : NULL;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        else next = line + strlen(line);
        const char *k = strstr(line, "\"current_steps\": ");
        if (k && atoi(k + 16) <= step) log_line(j, line);
    }
    free(text), free(p);
}

/* resume_from_checkpoint: a checkpoint folder, or true for output_dir's latest */
static int resume(image_job *j) {
    const char *r = j->cfg->resume_from_checkpoint;
    if (!r[0]) return 0;
    char dir[4096];
    if (!strcmp(r, "true") || !strcmp(r, "True")) {
        if (tn_image_ckpt_latest(j->cfg->output_dir, dir, sizeof dir) < 0)
            return tn_err("%s: key 'resume_from_checkpoint': no checkpoint-N in %s", j->cfg->source_path,
                          j->cfg->output_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", r);
    }
    int step = tn_image_ckpt_load(dir, j->m, j->opt_a, j->opt_b, j->be);
    if (step < 0) return tn_err("%s: key 'resume_from_checkpoint': %s", j->cfg->source_path, tn_errmsg());
    j->start_step = step;
    keep_log(j, step);
    if (j->rank == 0) printf("tandem: resuming from %s (step %d)\n", dir, step);
    return 0;
}

int tn_image_job_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint) {
    (void)config_fingerprint;
    image_job j = {.cfg = cfg, .comm = comm, .t0 = tn_now()};
    const tn_comm_info *in = tn_comm_get_info(comm);
    j.rank = in->rank, j.world = in->size;
    j.be = tn_backend_select(cfg->device, cfg->bf16, in->local_rank);
    if (!j.be) return tn_err("%s: key 'device' (or $TANDEM_DEVICE): %s", cfg->source_path, tn_errmsg());
    int rc = cfg->zero_stage > 0 ? tn_err("%s: ZeRO/FSDP sharding is for language models; an image classifier trains "
                                          "with plain data parallelism (zero_stage 0)", cfg->source_path) : 0;
    if (rc == 0 && cfg->report_tensorboard && j.rank == 0) {
        char *dir = cfg->logging_dir[0] ? tn_xstrdup(cfg->logging_dir) : tn_tb_default_logdir(cfg->output_dir);
        if (!(j.tb = tn_tb_open(dir))) rc = -1;
        free(dir);
    }
    if (rc == 0 && cfg->optim_sgd) rc = parse_sgd_args(cfg, &j.sgd);
    if (rc == 0) rc = load_model(&j);
    if (rc == 0) rc = load_sets(&j, tn_resnet_cfg(j.m)->image_size);
    j.sync = (tn_bn_sync){sync_sum, &j};
    if (rc == 0 && cfg->sync_bn) tn_resnet_set_sync_bn(j.m, &j.sync);
    if (rc == 0 && j.rank == 0 && tn_mkdirs(cfg->output_dir)) rc = tn_err("%s: cannot create output_dir", cfg->output_dir);
    if (rc == 0) rc = tn_resnet_reserve(j.m, cfg->per_device_train_batch_size > cfg->per_device_eval_batch_size
                                                   ? cfg->per_device_train_batch_size : cfg->per_device_eval_batch_size,
                                        j.train.H, j.train.W);
    if (rc == 0 && !(j.dp = tn_image_sync_create(comm, j.m, (size_t)(cfg->ddp_bucket_cap_mb * 1048576.0))))
        rc = tn_err("%s: key 'ddp_bucket_cap_mb': %s", cfg->source_path, tn_errmsg());
    if (rc == 0) {
        size_t n = tn_resnet_n_params(j.m);
        j.opt_a = j.be->alloc(n), j.opt_b = j.be->alloc(n);
        rc = resume(&j);
        if (rc == 0) rc = train(&j);
        j.be->free(j.opt_a), j.be->free(j.opt_b);
    }
    if (j.tb) tn_tb_close(j.tb);
    tn_image_sync_free(j.dp);
    for (int k = 0; k < 3; k++) free(j.curve[k][0]), free(j.curve[k][1]);
    tn_image_set_free(&j.train), tn_image_set_free(&j.eval);
    tn_resnet_free(j.m);
    free(j.log);
    return rc;
}
