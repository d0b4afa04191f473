/* job.c -- see job.h. */
#include "trainer/job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/core.h"
#include "core/shell_quote.h"
#include "launch/rank_watch.h"
#include "data/dataset.h"
#include "data/lf_dataset.h"
#include "tokenizer/tokenizer.h"
#include "model/model.h"
#include "model/vision.h"
#include "outputs/chat_template.h"
#include "outputs/output_lock.h"
#include "outputs/previous_run.h"
#include "outputs/progress.h"
#include "outputs/run_log.h"
#include "outputs/tensorboard.h"
#include "trainer/checkpoint.h"
#include "trainer/demo_eval.h"
#include "trainer/memory_check.h"
#include "trainer/monitor.h"
#include "trainer/plan_check.h"
#include "serve/dashboard.h"
#include "trainer/recipe.h"
#include "trainer/replica.h"
#include "trainer/trainer.h"

#define DEMO_TRAIN_SAMPLES 20000
#define DEMO_EVAL_SAMPLES 500
#define DEMO_DIGITS 2

static int is_demo(const tn_train_config *cfg) { return strcmp(cfg->dataset, "demo_addition") == 0; }

/* Data of a run: the bundled demo, or LLaMA-Factory datasets tokenized by the model's tokenizer. */
typedef struct {
    tn_dataset train, eval;
    lf_samples lf_train, lf_eval;   /* backing store of LLaMA-Factory data (a mapped cache file) */
    int32_t vocab;                  /* tokenizer's vocabulary (0 for the demo) */
} job_data;

static void job_data_free(job_data *d) {
    if (d->train.ids) tn_dataset_free(&d->train);
    if (d->eval.ids) tn_dataset_free(&d->eval);
    lf_samples_free(&d->lf_train);
    lf_samples_free(&d->lf_eval);
    memset(d, 0, sizeof *d);
}

static int longest(const lf_samples *s) {
    int m = 0;
    for (int i = 0; i < s->n; i++) m = s->len[i] > m ? s->len[i] : m;
    return m;
}

/* Where tokenized data is cached: $TANDEM_CACHE_DIR, else ~/.cache/tandem/data (as HF caches datasets). */
static char *cache_dir(void) {
    const char *env = getenv("TANDEM_CACHE_DIR"), *home = getenv("HOME");
    if (env && *env) return tn_xstrdup(env);
    return tn_path_join(home && *home ? home : "/tmp", ".cache/tandem/data");
}

/* LLaMA-Factory datasets: tokenized once per job. The first rank of each machine tokenizes (or finds the
 * cache), the others then map the cache file it wrote, so each rank reads only the samples it trains on. */
static int load_lf_data(const tn_train_config *cfg, tn_comm *comm, job_data *d) {
    if (!cfg->model_name_or_path[0])
        return tn_err("%s: key 'dataset': LLaMA-Factory datasets need model_name_or_path (a folder with "
                      "tokenizer.json)", cfg->source_path);
    if (!cfg->template_name[0] && cfg->stage == TN_STAGE_SFT)
        return tn_err("%s: key 'template' is required for sft data (default, qwen, qwen3, qwen3_nothink, llama3)",
                      cfg->source_path);
    char *tok_path = tn_path_join(cfg->model_name_or_path, "tokenizer.json"), *cache = cache_dir();
    tn_tokenizer *tok = tn_tokenizer_load(tok_path);
    const tn_comm_info *in = tn_comm_get_info(comm);
    lf_data_args a = {.dataset = cfg->dataset, .dataset_dir = cfg->dataset_dir,
                      .template_name = cfg->template_name[0] ? cfg->template_name : "default",
                      .stage = cfg->stage == TN_STAGE_PT ? "pt" : "sft", .cutoff_len = cfg->cutoff_len,
                      .max_samples = cfg->max_samples, .packing = cfg->packing, .train_on_prompt = cfg->train_on_prompt,
                      .mask_history = cfg->mask_history, .val_size = cfg->val_size, .seed = cfg->seed,
                      .cache_dir = cache, .tokenizer_path = tok_path, .enable_thinking = cfg->enable_thinking ? 1 : -1,
                      .media_dir = cfg->media_dir[0] ? cfg->media_dir : NULL, .image_max_pixels = cfg->image_max_pixels,
                      .image_min_pixels = cfg->image_min_pixels};
    int rc = tok ? 0 : -1;
    for (int turn = 0; turn < 2; turn++) { /* local rank 0 first, then the rest of its machine */
        if (rc == 0 && (in->local_rank == 0) == (turn == 0)) rc = lf_load(&a, tok, &d->lf_train, &d->lf_eval);
        if (in->size > 1 && tn_comm_barrier(comm) != 0 && rc == 0) rc = tn_err("barrier failed: %s", tn_errmsg());
    }
    if (rc == 0 && d->lf_train.pos)
        rc = tn_err("%s: packing with stage sft needs per-sample position ids, not supported yet: set packing: false",
                    cfg->source_path);
    if (rc == 0 && d->lf_train.n == 0) rc = tn_err("%s: key 'dataset': no training samples", cfg->source_path);
    if (rc == 0) {
        int S = longest(&d->lf_train), Se = longest(&d->lf_eval);
        S = Se > S ? Se : S;
        lf_samples_dataset(&d->lf_train, S, &d->train); /* with its images, if any */
        if (d->lf_eval.n) lf_samples_dataset(&d->lf_eval, S, &d->eval);
        d->vocab = tn_tokenizer_vocab_size(tok);
        if (in->rank == 0)
            printf("tandem: %d training samples%s%.0d%s (longest %d tokens) from %s, template %s%s\n", d->train.n,
                   d->eval.n ? ", " : "", d->eval.n, d->eval.n ? " held out" : "", S, cfg->dataset, a.template_name,
                   d->lf_train.n_dropped ? "" : "");
        if (in->rank == 0 && d->lf_train.n_dropped)
            printf("tandem: note: %d example(s) dropped as LLaMA-Factory drops them, first: %s\n",
                   d->lf_train.n_dropped, d->lf_train.drop_reason);
    }
    tn_tokenizer_free(tok);
    free(tok_path), free(cache);
    return rc;
}

static int load_data(const tn_train_config *cfg, tn_comm *comm, job_data *d) {
    memset(d, 0, sizeof *d);
    if (!cfg->dataset[0])
        return tn_err("%s: key 'dataset' is required (names from dataset_info.json; the bundled demo is "
                      "'demo_addition')", cfg->source_path);
    if (!is_demo(cfg)) return load_lf_data(cfg, comm, d);
    if (tn_demo_addition(DEMO_DIGITS, DEMO_TRAIN_SAMPLES, 0, (uint64_t)cfg->seed, cfg->cutoff_len, &d->train) != 0 ||
        tn_demo_addition(DEMO_DIGITS, DEMO_EVAL_SAMPLES, 1, (uint64_t)cfg->seed, cfg->cutoff_len, &d->eval) != 0) {
        job_data_free(d);
        return tn_err("%s: %s", cfg->source_path, tn_errmsg());
    }
    return 0;
}

/* The backend of this rank (backend.h tn_backend_select: the CPU, or the GPU of its local rank). */
static const tn_backend *select_backend(const tn_train_config *cfg, tn_comm *comm) {
    const tn_backend *be = tn_backend_select(cfg->device, cfg->bf16, tn_comm_get_info(comm)->local_rank);
    if (!be) tn_err("%s: key 'device' (or $TANDEM_DEVICE): %s", cfg->source_path, tn_errmsg());
    return be;
}

/* LLaMA-Factory's freeze_vision_tower / freeze_multi_modal_projector / freeze_language_model for a VL model (a
 * text model has none of these parts: LF ignores them there, and so does tandem). Full fine-tuning leaves the
 * frozen parts out of the trainable set. With LoRA, LF's defaults keep the adapters on the language model,
 * which is what tandem's LoRA covers; other settings would put LoRA on the vision tower or the projector
 * (find_all_linear_modules skips only the frozen parts): one line, rather than a different model. */
static int vl_freeze(const tn_train_config *cfg, const tn_model_config *mc, tn_lora_config *lora) {
    if (mc->vis.kind == TN_VL_NONE) return 0;
    lora->freeze = (cfg->freeze_vision_tower ? TN_FREEZE_VISION : 0u) |
                   (cfg->freeze_multi_modal_projector ? TN_FREEZE_PROJECTOR : 0u) |
                   (cfg->freeze_language_model ? TN_FREEZE_LM : 0u);
    if (cfg->finetuning_type == TN_FT_LORA && lora->freeze != (TN_FREEZE_VISION | TN_FREEZE_PROJECTOR))
        return tn_err("%s: finetuning_type lora with freeze_vision_tower %s, freeze_multi_modal_projector %s, "
                      "freeze_language_model %s would put LoRA on %s (LLaMA-Factory); tandem's LoRA covers the language "
                      "model: keep the defaults (true, true, false), or use finetuning_type full",
                      cfg->source_path, cfg->freeze_vision_tower ? "true" : "false",
                      cfg->freeze_multi_modal_projector ? "true" : "false", cfg->freeze_language_model ? "true" : "false",
                      !cfg->freeze_vision_tower ? "the vision tower" : !cfg->freeze_multi_modal_projector ? "the projector"
                                                                                                 : "the vision parts only");
    if (lora->freeze == (TN_FREEZE_VISION | TN_FREEZE_PROJECTOR | TN_FREEZE_LM))
        return tn_err("%s: freeze_vision_tower, freeze_multi_modal_projector and freeze_language_model are all true: "
                      "nothing would train", cfg->source_path);
    return 0;
}

static tn_model *load_model(const tn_train_config *cfg, const tn_backend *be) {
    int fresh = !cfg->model_name_or_path[0];
    char *cfg_path = fresh ? tn_xstrdup(cfg->model_config) : tn_path_join(cfg->model_name_or_path, "config.json");
    tn_model_config mc;
    tn_model *m = NULL;
    if (tn_model_config_load(cfg_path, &mc) != 0) goto out;
    tn_lora_config lora = {0};
    if (cfg->finetuning_type == TN_FT_LORA && cfg->adapter_name_or_path[0]) {
        /* continue training an existing adapter: its own r, alpha and targets */
        if (tn_lora_config_load(cfg->adapter_name_or_path, &lora) != 0) goto out;
        lora.dropout = cfg->lora_dropout;
    } else if (cfg->finetuning_type == TN_FT_LORA) {
        lora.r = cfg->lora_rank;
        lora.alpha = cfg->lora_alpha;
        lora.dropout = cfg->lora_dropout;
        if (tn_lora_parse_targets(cfg->lora_target, &lora.targets) != 0) {
            tn_err("%s: %s", cfg->source_path, tn_errmsg());
            goto out;
        }
    }
    if (vl_freeze(cfg, &mc, &lora) != 0) goto out;
    m = tn_model_create(&mc, &lora, be);
    tn_model_init_random(m, (uint64_t)cfg->seed); /* LoRA adapters (and a fresh model) start from here */
    m->base_name_or_path = fresh ? NULL : cfg->model_name_or_path; /* adapter_config.json names it */
    if ((!fresh && tn_model_load_hf(m, cfg->model_name_or_path) != 0) ||
        (lora.r && cfg->adapter_name_or_path[0] && tn_model_load_adapter(m, cfg->adapter_name_or_path) != 0)) {
        tn_model_free(m);
        m = NULL;
    }
out:
    free(cfg_path);
    return m;
}

/* The final model as LLaMA-Factory leaves it: a PEFT adapter for LoRA, an HF folder for full fine-tuning;
 * either way with the base model's tokenizer files and chat template beside it (LF saves the tokenizer into
 * output_dir), so the folder serves chat and export as it is. */
static int save_outputs(const tn_train_config *cfg, const tn_model *m) {
    int rc = m->lora.r ? tn_model_save_adapter(m, cfg->output_dir) : tn_model_save_hf(m, cfg->output_dir, (size_t)5 << 30);
    if (rc == 0 && cfg->model_name_or_path[0] && tn_model_copy_tokenizer_files(cfg->model_name_or_path, cfg->output_dir) < 0)
        rc = -1; /* tn_err names the file and why (a full disk, say) */
    if (rc == 0 && cfg->model_name_or_path[0] && tn_write_chat_template(cfg->model_name_or_path, cfg->output_dir) < 0)
        rc = -1;
    return rc;
}

static void print_banner(const tn_train_config *cfg, const tn_model *m, const tn_trainer *tr) {
    const tn_trainer_info *t = tn_trainer_get_info(tr);
    size_t base = m->n_total - (m->lora.r ? m->n_trainable : 0);
    printf("tandem: %s model, %d layers, hidden %d, vocab %d: %.2fM parameters, %.2fM trainable (%s)\n",
           m->cfg.model_type, m->L, m->D, m->V, base / 1e6, m->n_trainable / 1e6,
           m->lora.r ? "LoRA" : "full fine-tuning");
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT"); /* main.c sets a default */
    if (strcmp(m->be->name, "cpu") == 0)
        printf("tandem: %d steps of %d rank(s) x %d x %d sequences x %d tokens, lr %.2g (%s, %d warmup), "
               "%d threads per rank (%s; OpenMP waits: %s%s%s%s%s)\n",
               t->total_steps, t->world, t->micro_batch, t->accum, t->data->S, cfg->learning_rate,
               tn_train_config_sched_name(cfg), t->warmup_steps, m->be->num_threads(), m->be->kernel_name(),
               policy ? "OMP_WAIT_POLICY=" : "", policy ? policy : "", policy && spin ? " " : "",
               spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : (policy ? "" : "libgomp default"));
    else /* one GPU per rank: the device line names rank 0's */
        printf("tandem: %d steps of %d rank(s) x %d x %d sequences x %d tokens, lr %.2g (%s, %d warmup), on %s (%s)\n",
               t->total_steps, t->world, t->micro_batch, t->accum, t->data->S, cfg->learning_rate,
               tn_train_config_sched_name(cfg), t->warmup_steps, m->be->describe(), m->be->kernel_name());
    tn_trainer_describe(tr, stdout);
    fflush(stdout);
}

/* Every rank calls this after a local step that may fail; -1 (this rank reports) or -2 (another rank does)
 * when any rank failed, so that no rank goes on to wait for one that has stopped. */
static int agree(tn_comm *c, int rc) { return tn_replica_agree(c, rc); }

typedef struct {
    const tn_train_config *cfg;
    tn_trainer *t;
    tn_comm *comm;
    int lead;
    uint64_t config_fingerprint;
    const char *recipe;       /* recorded in every checkpoint (recipe.h) */
    tn_run_log *log;          /* rank 0 only */
    const tn_dataset *eval;   /* NULL: no evaluation set */
    double t0;                /* when this process started training */
    int start_step;           /* step resumed from (0 for a fresh run) */
    double loss_sum;          /* token-weighted, over this process's steps */
    int64_t loss_tokens;
    double comm_wait;
    tn_monitor *mon;          /* every rank: the steps' timings for tandem_ranks.jsonl */
    double plan_wall, plan_compute, plan_seen; /* rank 0: the steps timed for the plan check (plan_check.h) */
    int plan_steps;
    int steps_trained;        /* steps of this process that were not skipped */
    int last_skipped;         /* the last final step was skipped (non-finite loss or gradient) */
} job_ctx;

/* Rank 0 of a multi-rank run: after the first step (warm-up), a window of steps (two DiLoCo rounds: a round's
 * end costs more than its other steps) is timed and set beside the plan's prediction. */
static void plan_window(job_ctx *j, const tn_step_stats *st, double wall, double compute) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    int window = t->machine_local ? 2 * t->round : 5; /* DiLoCo: two rounds */
    if (!j->lead || t->world < 2 || t->step - j->start_step < 2 || j->plan_steps >= window) return;
    if (t->machine_local && t->step <= j->cfg->diloco_sync_steps + 1) return; /* the plan is of the rounds */
    j->plan_wall += wall, j->plan_compute += compute, j->plan_steps++;
    j->plan_seen += (double)st->seen / ((double)t->world * t->micro_batch * t->accum);
    if (j->plan_steps == window)
        tn_plan_check(j->cfg, j->comm, j->plan_wall / window, j->plan_compute / window, j->plan_seen / window, stdout);
}

/* The dashboard's address, as TensorBoard prints its own. */
static void print_dashboard(const tn_dash *d, const char *output_dir) {
    char *dir = tn_sh_quote(output_dir); /* the command is pasted into a shell */
    printf("tandem: dashboard of this run at %s (live; afterwards: tandem dashboard %s)%s\n", tn_dash_url(d), dir,
           getenv("TANDEM_DASHBOARD_TOKEN") && *getenv("TANDEM_DASHBOARD_TOKEN") ? "; open it with ?token=$TANDEM_DASHBOARD_TOKEN once" : "");
    free(dir);
    if (!tn_dash_has_charts(d))
        printf("tandem: note: the dashboard draws no charts without uPlot: scripts/install-deps.sh installs it (npm, "
               "into deps/node_modules); the rest of the page works\n");
    fflush(stdout);
}

/* What watching cost, on rank 0, with the dashboard on: the monitor's time in the training thread and the
 * dashboard's threads' CPU (docs/performance.md). */
static void print_overhead(const job_ctx *j, tn_dash *d) {
    int steps = tn_trainer_get_info(j->t)->step - j->start_step;
    double wall = tn_now() - j->t0, worst = 0, mine = tn_monitor_cost(j->mon, &worst), dash_cpu = tn_dash_cpu(d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                 1e-6 * (double)ru.ru_stime.tv_usec;
    if (steps <= 0 || wall <= 0) return;
    printf("tandem: dashboard: the job monitor took %.4f ms a step on rank 0 (%.3f%% of the step time), at most %.3f%% "
           "on any rank; the dashboard's threads used %.3f s of CPU, %.3f%% of this process's %.1f s\n",
           1e3 * mine / steps, 100.0 * mine / wall, 100.0 * worst / wall, dash_cpu,
           cpu > dash_cpu ? 100.0 * dash_cpu / (cpu - dash_cpu) : 0.0, cpu - dash_cpu);
}

static double epoch_of(const tn_trainer_info *t) { return t->data->n ? (double)t->samples_seen / t->data->n : 0; }

/* HF TrainerState fields for trainer_state.json (in checkpoints and at the end). */
static tn_trainer_state_info state_info(const job_ctx *j, int saving) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    const tn_train_config *cfg = j->cfg;
    int64_t global = (int64_t)t->world * t->micro_batch * t->accum;
    double epochs = cfg->max_steps > 0 ? ceil((double)t->total_steps * global / (t->data->n ? t->data->n : 1))
                                       : ceil(cfg->num_train_epochs);
    tn_trainer_state_info in = {.global_step = t->step, .max_steps = t->total_steps, .epoch = epoch_of(t),
                                .num_train_epochs = (int)epochs, .logging_steps = cfg->logging_steps,
                                .eval_steps = cfg->eval_strategy == TN_EVAL_STEPS ? cfg->eval_steps : 500,
                                .save_steps = cfg->save_steps > 0 ? cfg->save_steps : 500,
                                .train_batch_size = t->micro_batch, .should_save = saving,
                                .should_training_stop = saving && t->step >= t->total_steps};
    /* 6 N T per token trained (HF's floating_point_ops estimate), over the steps done */
    in.total_flos = 6.0 * (double)t->model->n_total * (double)t->step * (double)global * t->data->S;
    return in;
}

static int write_state_into(void *ctx, const char *dir) {
    const job_ctx *j = ctx;
    tn_trainer_state_info in = state_info(j, 1);
    return tn_run_log_write_state(j->log, dir, &in);
}

/* Rank 0 writes checkpoint-<step>/ (then applies save_total_limit); every rank learns whether it worked.
 * Sharded runs: every rank's AdamW shard travels to rank 0, which writes it as its own file, and the whole
 * model is gathered for the weights (stage 3), so one folder holds the complete checkpoint whatever
 * machine is later lost (--drop-dead-hosts resumes from it on the rest). */
static int save_checkpoint(const job_ctx *j) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    int rc = 0, with_opt = !j->cfg->save_only_model;
    char *tmp = NULL;
    tn_ckpt_state st = {.step = t->step, .samples_seen = t->samples_seen, .adam_step = tn_trainer_optimizer(j->t)->step,
                        .config_fingerprint = j->config_fingerprint, .recipe = j->recipe};
    if (j->lead) {
        tn_comm_busy(j->comm, 1); /* the others wait for this write: alive, not hung */
        tn_rank_watch_saving(1);  /* a rank whose launcher died finishes this save first */
        rc = (tmp = tn_checkpoint_begin(j->cfg->output_dir, t->step)) ? 0 : -1;
    }
    /* the optimizer's shards and the exchange's own state (residuals, shares, DiLoCo); the weights saved are
     * every parameter (ZeRO gathers them), DiLoCo's consensus */
    rc = tn_trainer_save_begin(j->t, tmp, with_opt, rc);
    if (j->lead) {
        if (rc == 0) {
            rc = tn_checkpoint_commit(j->cfg->output_dir, tmp, t->model, with_opt ? tn_trainer_saved_optimizer(j->t) : NULL,
                                      &st, write_state_into, (void *)j);
            if (rc == 0) {
                char name[48];
                snprintf(name, sizeof name, "checkpoint-%d", t->step);
                tn_monitor_checkpoint(j->mon, t->step, name);
            }
            if (rc == 0) rc = tn_checkpoint_prune(j->cfg->output_dir, j->cfg->save_total_limit);
        } else {
            tn_checkpoint_abandon(tmp);
        }
        tn_rank_watch_saving(0);
        tn_comm_busy(j->comm, 0);
    }
    tn_trainer_save_end(j->t);
    return agree(j->comm, rc < 0 ? rc : 0);
}

/* Each rank's resident bytes of trainable parameters, gradients and AdamW state, printed by rank 0 next to
 * what a full replica holds: the ZeRO stages' memory, measured (page residency), not computed. */
static int report_memory(const job_ctx *j) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    const tn_model *m = t->model;
    const tn_backend *be = m->be;
    const tn_adamw *o = tn_trainer_optimizer(j->t);
    double mine[3] = {(double)tn_model_param_resident(m), (double)be->resident(m->grad, m->n_trainable),
                      (double)(be->resident(o->m, o->n) + be->resident(o->v, o->n))};
    double *all = tn_xmalloc((size_t)t->world * sizeof mine);
    if (tn_comm_allgather(j->comm, mine, sizeof mine, all) != 0) {
        free(all);
        return tn_err("memory report exchange failed: %s", tn_errmsg());
    }
    if (j->lead) {
        double psi = 4.0 * (double)m->n_trainable / 1048576.0;
        printf("tandem: ZeRO stage %d, %d rank(s), %zu trainable parameters (a full replica holds %.3f MB of them, "
               "as much again of gradients and twice that of AdamW state)\n",
               t->zero_stage, t->world, m->n_trainable, psi);
        for (int r = 0; r < t->world; r++)
            printf("tandem: rank %d memory: trainable parameters %.0f bytes, gradients %.0f bytes, optimizer state "
                   "%.0f bytes\n", r, all[3 * r], all[3 * r + 1], all[3 * r + 2]);
    }
    free(all);
    return 0;
}

static int evaluate(job_ctx *j, double *loss, double *runtime) {
    double t0 = tn_now();
    *loss = tn_trainer_eval(j->t, j->eval);
    *runtime = tn_now() - t0;
    return isnan(*loss) ? -1 : 0;
}

/* Every logging step: each rank's compute time over the window (the step minus the wait for gradients).
 * A rank that is the slowest, by >= 15% over the median, for 3 windows in a row is named in the log: the
 * others wait for it at every exchange. Collective. */
static int name_slow_rank(const job_ctx *j, double compute, int *slow_rank, int *streak) {
    int n = tn_trainer_get_info(j->t)->world;
    double *all = tn_xmalloc((size_t)n * sizeof *all), *sorted = tn_xmalloc((size_t)n * sizeof *sorted);
    if (tn_comm_allgather(j->comm, &compute, sizeof compute, all) != 0) {
        free(all), free(sorted);
        return tn_err("compute-time exchange failed: %s", tn_errmsg());
    }
    int slowest = 0;
    for (int r = 0; r < n; r++) {
        sorted[r] = all[r];
        slowest = all[r] > all[slowest] ? r : slowest;
        for (int q = r; q > 0 && sorted[q] < sorted[q - 1]; q--) {
            double x = sorted[q];
            sorted[q] = sorted[q - 1], sorted[q - 1] = x;
        }
    }
    double median = sorted[(n - 1) / 2], ratio = median > 0 ? all[slowest] / median : 1;
    if (ratio >= 1.15) {
        *streak = slowest == *slow_rank ? *streak + 1 : 1;
        *slow_rank = slowest;
    } else {
        *streak = 0, *slow_rank = -1;
    }
    if (j->lead && *streak == 3)
        printf("tandem: note: rank %d on host %s is the slowest for 3 logging windows in a row (%.2fx the median "
               "compute time); the other ranks wait for it at every gradient exchange\n",
               slowest, tn_comm_host_of(j->comm, slowest), ratio);
    free(all), free(sorted);
    return 0;
}

/* The step just done finished an epoch (samples_seen crossed a multiple of the training set). */
static int epoch_ended(const tn_trainer_info *t) {
    int64_t n = t->data->n, global = (int64_t)t->world * t->micro_batch * t->accum;
    return n > 0 && t->samples_seen / n > (t->samples_seen - global) / n;
}

/* The batches an evaluation of n samples runs (tn_trainer_eval: each rank its share, micro_batch rows at a time;
 * gradient accumulation plays no part), HF's eval steps. */
static int eval_batches(const tn_trainer_info *t, int n) {
    int64_t per_step = (int64_t)t->world * t->micro_batch;
    return (int)((n + per_step - 1) / per_step);
}

/* An evaluation during training (eval_on_start, eval_steps, epoch ends): announced while it runs, then logged
 * as HF logs it. *seconds: its duration, which the throughput leaves out. Collective. */
static int eval_during_training(job_ctx *j, int tty, double *seconds) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    double loss, rt;
    if (j->lead) tn_progress_eval_begin(t->step, j->eval->n, tty);
    int rc = agree(j->comm, evaluate(j, &loss, &rt));
    if (rc) return rc;
    *seconds = rt;
    tn_log_eval le = {.step = t->step, .epoch = epoch_of(t), .eval_loss = loss, .runtime_s = rt,
                      .n_samples = j->eval->n, .total_steps = t->total_steps, .elapsed_s = tn_now() - j->t0,
                      .n_batches = eval_batches(t, j->eval->n)};
    if (j->lead) {
        tn_progress_eval_end(t->step, loss, j->eval->n, rt, tty);
        if (tn_run_log_eval(j->log, &le) != 0) return agree(j->comm, -1);
    }
    return 0;
}

/* The training loop's accounting between two log lines. */
typedef struct {
    int tty, bad, slow_rank, slow_streak, cap;
    double window_loss, last, window_compute, window_eval;
    int64_t window_tokens, window_seen, global;
    double *done_at; /* [cap]: when step s ended, at s mod cap (DiLoCo's numbers come up to two rounds later) */
} loop_state;

/* One step whose numbers are final (DiLoCo: summed over machines): the bad-step count, the windows, the log
 * line and the progress bar. 0, or what train_loop returns. */
static int take_final(job_ctx *j, loop_state *L, const tn_step_stats *fs) {
    const tn_train_config *cfg = j->cfg;
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    j->last_skipped = fs->skipped != 0;
    if (fs->skipped) {
        if (j->lead && t->machine_local)
            fprintf(stderr, "tandem: warning: step %d: non-finite loss or gradient on %d machine(s); skipped there\n",
                    fs->step, fs->skipped);
        if (++L->bad >= cfg->max_bad_steps)
            return tn_err("%d consecutive steps had a non-finite loss or gradient (max_bad_steps %d): stopping at "
                          "step %d; lower learning_rate or check the data", L->bad, cfg->max_bad_steps, fs->step),
                   j->lead ? -1 : -2;
        return 0;
    }
    L->bad = 0;
    j->steps_trained++;
    L->window_loss += fs->loss * (double)fs->tokens;
    L->window_tokens += fs->tokens;
    L->window_seen += fs->seen;
    j->loss_sum += fs->loss * (double)fs->tokens;
    j->loss_tokens += fs->tokens;
    int log_now = fs->step % cfg->logging_steps == 0 || fs->step == t->total_steps ||
                  (cfg->logging_first_step && fs->step == 1);
    double ended = L->done_at[fs->step % L->cap];
    if (log_now || (L->tty && j->lead)) { /* a terminal's bar moves every step; the logs every logging step */
        double elapsed = ended - j->t0, train_s = ended - L->last - L->window_eval;
        int done = fs->step - j->start_step;
        tn_log_step ls = {.step = fs->step, .total_steps = t->total_steps,
                          .loss = L->window_loss / (double)(L->window_tokens ? L->window_tokens : 1),
                          .grad_norm = cfg->max_grad_norm > 0 ? fs->grad_norm : -1, .learning_rate = fs->lr,
                          .epoch = t->data->n ? (double)fs->step * (double)L->global / t->data->n : 0,
                          .elapsed_s = elapsed, .remaining_s = done > 0 ? elapsed / done * (t->total_steps - fs->step) : 0,
                          .tokens_per_s = train_s > 0 ? (double)L->window_seen / train_s : 0};
        if (j->lead && log_now && tn_run_log_step(j->log, &ls) != 0) return agree(j->comm, -1);
        if (j->lead && log_now) tn_monitor_log(j->mon, fs->step, cfg->max_grad_norm > 0 ? fs->grad_norm : -1, ls.tokens_per_s);
        if (j->lead) tn_progress_print(&ls, L->tty);
    }
    if (log_now) {
        /* with balance_ranks the ranks' compute times differ by design; the shares say who is slow */
        if (t->world > 1 && !t->balance && name_slow_rank(j, L->window_compute, &L->slow_rank, &L->slow_streak) != 0)
            return agree(j->comm, -1);
        L->window_loss = 0, L->window_tokens = 0, L->window_seen = 0, L->window_compute = 0, L->window_eval = 0;
        L->last = ended;
    }
    return 0;
}

/* A run that trained nothing, or ended on a non-finite loss, is a failure, not "saved": the weights it would save
 * are not those of a finished run. 1 + tn_err when so. */
static int ended_untrained(const job_ctx *j) {
    int ran = tn_trainer_get_info(j->t)->step - j->start_step;
    if (ran > 0 && j->steps_trained == 0)
        return tn_err("every one of the %d steps of this run had a non-finite loss or gradient and was skipped: nothing "
                      "was trained, nothing saved (check the model's weights and the data, or lower learning_rate)",
                      ran), 1;
    if (ran > 0 && j->last_skipped)
        return tn_err("the last step (%d) had a non-finite loss or gradient: the run did not end on a finite loss, "
                      "nothing saved (lower learning_rate or check the data; the checkpoints hold the earlier steps)",
                      tn_trainer_get_info(j->t)->step), 1;
    return 0;
}

static int train_loop(job_ctx *j) {
    const tn_train_config *cfg = j->cfg;
    tn_trainer *tr = j->t;
    const tn_trainer_info *t = tn_trainer_get_info(tr);
    /* TANDEM_TTY=1|0 says whether a terminal is at the end: under mpirun a rank's stdout is a pty even when
     * mpirun writes to a file, so the launcher sets it; without it, stdout itself tells */
    const char *tty_env = getenv("TANDEM_TTY");
    loop_state L = {.tty = tty_env && *tty_env ? strcmp(tty_env, "1") == 0
                                               : !getenv("OMPI_COMM_WORLD_SIZE") && isatty(fileno(stdout)),
                    .slow_rank = -1, .last = tn_now(), .global = (int64_t)t->world * t->micro_batch * t->accum,
                    .cap = (t->machine_local ? 2 * t->round : 1) + 2};
    L.done_at = tn_xmalloc((size_t)L.cap * sizeof *L.done_at);
    int rc = 0;
    if (j->eval && cfg->eval_on_start && t->step == 0) rc = eval_during_training(j, L.tty, &L.window_eval);
    while (rc == 0 && t->step < t->total_steps) {
        tn_step_stats st, fs;
        double step_t0 = tn_now();
        int step_rc = tn_trainer_step(tr, &st);
        if (step_rc == -2) {
            rc = -1; /* an exchange failed: this rank says which */
            break;
        }
        L.done_at[t->step % L.cap] = tn_now();
        tn_monitor_step(j->mon, &st);
        L.window_compute += tn_now() - step_t0 - (step_rc == 0 ? st.comm_wait : 0);
        if (step_rc == 0) j->comm_wait += st.comm_wait;
        if (step_rc == 0) plan_window(j, &st, tn_now() - step_t0, tn_now() - step_t0 - st.comm_wait);
        /* plain data parallelism: every rank sees the same summed gradient, so all skip together */
        if (step_rc != 0 && j->lead && !t->machine_local) fprintf(stderr, "tandem: warning: %s\n", tn_errmsg());
        const char *note = tn_trainer_take_note(tr);
        if (note && j->lead) printf("tandem: %s\n", note);
        while (rc == 0 && tn_trainer_next_logged(tr, &fs)) rc = take_final(j, &L, &fs);
        if (rc) break;
        int epoch_end = epoch_ended(t);
        if (j->eval && t->step < t->total_steps &&
            ((cfg->eval_strategy == TN_EVAL_STEPS && t->step % cfg->eval_steps == 0) ||
             (cfg->eval_strategy == TN_EVAL_EPOCH && epoch_end))) {
            double secs = 0;
            rc = eval_during_training(j, L.tty, &secs);
            L.window_eval += secs;
        }
        int save_now = cfg->save_strategy == TN_SAVE_STEPS
                           ? cfg->save_steps > 0 && (t->step % cfg->save_steps == 0 || t->step == t->total_steps)
                           : cfg->save_strategy == TN_SAVE_EPOCH && (epoch_end || t->step == t->total_steps);
        if (rc == 0 && save_now) rc = save_checkpoint(j);
    }
    free(L.done_at);
    if (rc) return rc;
    if (ended_untrained(j)) return j->lead ? -1 : -2; /* every rank sees the same final numbers */
    if (t->world > 1 && agree(j->comm, report_memory(j))) return -1;
    if (j->lead) {
        printf("tandem: trained %d steps in %.1f s", t->step - j->start_step, tn_now() - j->t0);
        if (t->world > 1) printf(", %.1f%% of it waiting for gradients", 100.0 * j->comm_wait / (tn_now() - j->t0));
        double bytes = tn_trainer_bytes_per_step(tr);
        if (bytes > 0) printf("; %.3g MB per step sent by each machine", bytes / 1e6);
        printf("\n");
    }
    return 0;
}

/* The end of a run as LLaMA-Factory's run_sft leaves it: the final evaluation when there is an evaluation
 * set (collective), the model, then train/eval/all_results.json, trainer_state.json and the loss plot
 * (rank 0). The results come only after the model is on disk: a results file must never claim a finished
 * run whose model is missing. */
static int final_eval(job_ctx *j, double *loss, double *runtime, double *train_rt) {
    *loss = 0, *runtime = 0, *train_rt = tn_now() - j->t0; /* HF's train_runtime: not the final eval */
    if (j->lead && j->eval) tn_progress_eval_begin(tn_trainer_get_info(j->t)->step, j->eval->n, 0);
    int rc = j->eval ? agree(j->comm, evaluate(j, loss, runtime)) : 0;
    if (rc == 0 && j->eval && j->lead) printf("tandem: eval_loss %.4f on %d held-out samples\n", *loss, j->eval->n);
    return rc;
}

static int write_results(job_ctx *j, double eval_loss, double eval_rt, double train_rt) {
    const tn_trainer_info *t = tn_trainer_get_info(j->t);
    const tn_train_config *cfg = j->cfg;
    int saved = cfg->save_strategy == TN_SAVE_EPOCH || (cfg->save_strategy == TN_SAVE_STEPS && cfg->save_steps > 0);
    tn_trainer_state_info in = state_info(j, saved);
    int64_t global = (int64_t)t->world * t->micro_batch * t->accum;
    tn_train_summary sum = {.train_runtime_s = train_rt,
                            .train_loss = j->loss_tokens ? j->loss_sum / (double)j->loss_tokens : 0,
                            .epoch = epoch_of(t), .global_step = t->step,
                            .n_samples_trained = (int)((int64_t)t->total_steps * global), .total_flos = in.total_flos,
                            .has_eval = j->eval != NULL, .eval_loss = eval_loss, .eval_runtime_s = eval_rt,
                            .eval_samples = j->eval ? j->eval->n : 0,
                            .eval_batches = j->eval ? eval_batches(t, j->eval->n) : 0,
                            .state = &in};
    return tn_run_log_finish(j->log, j->cfg->output_dir, &sum, j->cfg->plot_loss);
}

/* After a failed final save or results write: no results file of this run (some written, a later one not) may
 * stand in output_dir as if the run had completed (previous_run.h). */
static void drop_results(const char *output_dir) {
    const char *files[] = {"train_results.json", "eval_results.json", "all_results.json", "trainer_state.json",
                           "training_loss.png", "training_eval_loss.png"};
    for (int i = 0; i < 6; i++) {
        char *p = tn_path_join(output_dir, files[i]);
        unlink(p);
        free(p);
    }
}

/* An earlier run's final model and results leave output_dir before this run writes (previous_run.h). Not when
 * output_dir is the model or adapter this run reads (it would remove its own base). */
static int clear_previous(const tn_train_config *cfg) {
    char *out = realpath(cfg->output_dir, NULL), *base = cfg->model_name_or_path[0] ? realpath(cfg->model_name_or_path, NULL) : NULL,
         *adapter = cfg->adapter_name_or_path[0] ? realpath(cfg->adapter_name_or_path, NULL) : NULL;
    int same = out && ((base && strcmp(out, base) == 0) || (adapter && strcmp(out, adapter) == 0)), removed = 0, rc = 0;
    free(out), free(base), free(adapter);
    if (!same) rc = tn_previous_run_clear(cfg->output_dir, &removed);
    if (rc == 0 && removed)
        printf("tandem: note: removed the earlier run's final model and results from %s (%d files): this run writes its "
               "own at the end, all_results.json last\n", cfg->output_dir, removed);
    return rc;
}

/* LLaMA-Factory's resume rule, on rank 0: resume_from_checkpoint (a folder, or true for the newest in
 * output_dir); else, unless overwrite_output_dir, the newest complete checkpoint in output_dir; an
 * output_dir holding trained weights but no checkpoint, or checkpoints none of which verifies, is an
 * error rather than silently overwritten. 1 and the folder in dir, 0 for a fresh start, -1 + tn_err. */
static int find_resume(const tn_train_config *cfg, char *dir, size_t n) {
    const char *r = cfg->resume_from_checkpoint;
    if (r[0] && strcmp(r, "true") != 0) {
        if (!tn_file_exists(r)) return tn_err("%s: key 'resume_from_checkpoint': %s does not exist", cfg->source_path, r);
        snprintf(dir, n, "%s", r);
        return 1;
    }
    if (r[0] || !cfg->overwrite_output_dir) {
        if (tn_checkpoint_latest(cfg->output_dir, dir, n)) return 1;
        if (r[0]) return tn_err("%s: resume_from_checkpoint: no complete checkpoint in %s", cfg->source_path, cfg->output_dir);
        if (tn_checkpoint_any(cfg->output_dir)) /* all damaged: training from step 0 would discard the run quietly */
            return tn_err("%s: output_dir %s holds checkpoints but none verifies (each is named above): set "
                          "overwrite_output_dir: true to train from step 0, or resume_from_checkpoint: a good copy",
                          cfg->source_path, cfg->output_dir);
        const char *weights[] = {"model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json"};
        for (int i = 0; i < 3; i++) {
            char *p = tn_path_join(cfg->output_dir, weights[i]);
            int there = tn_file_exists(p);
            free(p);
            if (there)
                return tn_err("%s: output_dir %s already holds a trained model and no checkpoint to resume: set "
                              "overwrite_output_dir: true to replace it, or another output_dir",
                              cfg->source_path, cfg->output_dir);
        }
    }
    return 0;
}

int tn_job_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint) {
    const int rank = tn_comm_get_info(comm)->rank, lead = rank == 0;
    job_data data = {0};
    /* one job per output_dir: rank 0 holds its lock (or finds it held by the launcher of this job) */
    tn_output_lock *lock = NULL;
    const char *launcher = getenv("TANDEM_LAUNCHER");
    int rc = agree(comm, lead && !(lock = tn_output_lock_take(cfg->output_dir, launcher, cfg->source_path)) ? -1 : 0);
    if (rc == 0) rc = agree(comm, load_data(cfg, comm, &data));
    tn_dataset train = data.train, eval = data.eval;
    /* the backend: every rank the same kind, device memory attached to the comm layer (NCCL or staged MPI) */
    const tn_backend *be = NULL;
    char comm_note[320] = "";
    if (rc == 0) rc = agree(comm, (be = select_backend(cfg, comm)) ? 0 : -1);
    /* absurd sizes are one line naming the key and the bytes, before the model is allocated (on its GPU, if any) */
    tn_memory_target mt;
    const tn_comm_info *ci = tn_comm_get_info(comm);
    if (rc == 0) tn_memory_target_of(be->name, cfg->bf16, ci->local_rank, ci->local_size, &mt);
    if (rc == 0) rc = agree(comm, tn_memory_check_on(cfg, train.S, ci->local_size, &mt));
    if (rc == 0) rc = agree(comm, tn_backend_attach_comm(be, comm, comm_note, sizeof comm_note));
    if (rc == 0 && lead && comm_note[0]) printf("tandem: note: %s\n", comm_note);
    tn_model *m = rc ? NULL : load_model(cfg, be);
    int need = is_demo(cfg) ? TN_BYTE_VOCAB : data.vocab;
    if (m && m->V < need) {
        tn_err("%s: the %s has %d tokens but the model's vocab_size is %d", cfg->source_path,
               is_demo(cfg) ? "demo's byte vocabulary" : "tokenizer", need, m->V);
        tn_model_free(m);
        m = NULL;
    }
    if (rc == 0) rc = agree(comm, m ? 0 : -1);
    tn_trainer *t = NULL;
    if (rc == 0) {
        tn_test_hooks hooks = tn_test_hooks_from_env(); /* the one place the tests' faults are read */
        t = tn_trainer_create(cfg, m, &train, comm, &hooks);
        rc = agree(comm, t ? 0 : -1);
    }
    const tn_trainer_info *ti = t ? tn_trainer_get_info(t) : NULL;
    /* resume on rank 0 (only it needs to see output_dir), then every rank takes rank 0's state */
    int resumed = 0;
    char resume_dir[TN_PATH_MAX + 64] = "";
    static char recipe[TN_RECIPE_MAX];
    if (rc == 0) tn_recipe_of(cfg, ti->world, recipe, sizeof recipe);
    if (rc == 0 && lead) {
        tn_ckpt_state st = {0};
        resumed = find_resume(cfg, resume_dir, sizeof resume_dir);
        if (resumed == 1 && tn_recipe_check_resume(resume_dir, recipe, cfg->source_path) != 0) /* a note per change */
            resumed = -1;
        else if (resumed == 1 && tn_checkpoint_load(resume_dir, m, tn_trainer_optimizer(t), &st) == 0) {
            tn_trainer_set_position(t, st.step, st.samples_seen);
            printf("tandem: resuming from %s (step %d of %d)\n", resume_dir, st.step, ti->total_steps);
        } else if (resumed == 1) {
            resumed = -1;
        }
    }
    if (rc == 0) rc = agree(comm, resumed < 0 ? -1 : 0);
    if (rc == 0) rc = agree(comm, lead ? clear_previous(cfg) : 0); /* before this run writes anything */
    if (rc == 0) rc = agree(comm, tn_replica_sync_params(comm, m));
    if (rc == 0) rc = agree(comm, tn_trainer_sync_position(t));
    /* every rank holds rank 0's whole model now: ZeRO keeps its shard, DiLoCo takes it as the consensus */
    if (rc == 0) tn_trainer_start(t);
    if (rc == 0 && ti->step > 0) { /* optimizer shards, residuals, shares, DiLoCo's state */
        rc = tn_trainer_load_state(t, resume_dir);
        const char *note = tn_trainer_take_note(t);
        if (rc == 0 && lead && note) printf("tandem: %s\n", note);
    }
    job_ctx j = {.cfg = cfg, .t = t, .comm = comm, .lead = lead, .config_fingerprint = config_fingerprint,
                 .recipe = recipe, .eval = eval.n > 0 && !is_demo(cfg) ? &eval : NULL};
    if (rc == 0 && lead) { /* trainer_log.jsonl: continued on resume, fresh otherwise */
        j.log = tn_run_log_open(cfg->output_dir, ti->step);
        if (j.log && ti->step > 0 && resume_dir[0] && tn_run_log_load_history(j.log, resume_dir) != 0) {
            tn_run_log_close(j.log);
            j.log = NULL;
        }
        if (j.log && cfg->report_tensorboard) { /* HF's default logging_dir: a new runs/ folder per run */
            char *dir = cfg->logging_dir[0] ? tn_xstrdup(cfg->logging_dir) : tn_tb_default_logdir(cfg->output_dir);
            if (tn_run_log_tensorboard(j.log, dir) == 0) {
                char *q = tn_sh_quote(dir);
                printf("tandem: TensorBoard event files in %s (tensorboard --logdir %s)\n", dir, q);
                free(q);
            } else {
                tn_run_log_close(j.log);
                j.log = NULL;
            }
            free(dir);
        }
    }
    if (rc == 0) rc = agree(comm, lead && !j.log ? -1 : 0);
    tn_dash *dash = NULL;
    if (rc == 0 && lead && cfg->dashboard) { /* before the banner: its lines are the page's first */
        const char *dirs[1] = {cfg->output_dir};
        tn_dash_opts o = {.host = cfg->dashboard_host, .port = cfg->dashboard_port, .dirs = dirs, .n_dirs = 1, .live = 1};
        if ((dash = tn_dash_start(&o))) print_dashboard(dash, cfg->output_dir);
    }
    if (rc == 0) rc = agree(comm, lead && cfg->dashboard && !dash ? -1 : 0);
    if (rc == 0) {
        if (lead) print_banner(cfg, m, t);
        j.mon = tn_monitor_start(t, comm, cfg->dashboard);
        rc = agree(comm, j.mon ? 0 : -1);
    }
    if (rc == 0) {
        j.t0 = tn_now();
        tn_monitor_clock(j.mon, j.t0);
        j.start_step = ti->step;
        tn_comm_heartbeat(comm);
        tn_comm_set_peer_timeout(comm, cfg->peer_timeout); /* from here on every rank keeps step */
        rc = train_loop(&j);
        tn_comm_set_peer_timeout(comm, 0);
    }
    double eval_loss = 0, eval_rt = 0, train_rt = 0;
    if (rc == 0) rc = final_eval(&j, &eval_loss, &eval_rt, &train_rt);
    if (rc == 0) rc = agree(comm, tn_trainer_full(t)); /* rank 0 writes the whole model (ZeRO gathers it) */
    if (lead) tn_comm_busy(comm, 1), tn_rank_watch_saving(1);
    if (rc == 0) {
        /* rank 0 alone writes; the others wait for its verdict so every rank exits with the same status */
        if (lead) {
            rc = save_outputs(cfg, m);
            if (rc == 0) rc = write_results(&j, eval_loss, eval_rt, train_rt); /* all_results.json last: complete */
            if (rc == 0) printf("tandem: saved %s to %s\n", m->lora.r ? "LoRA adapter" : "model", cfg->output_dir);
            else drop_results(cfg->output_dir);
            if (rc == 0 && is_demo(cfg)) {
                printf("tandem: held-out problems (never trained on), greedy completions:\n");
                double acc = tn_demo_report(m, &eval, 8);
                printf("tandem: held-out accuracy %.1f%% (%d problems)\n", 100.0 * acc, eval.n / 50 * 50);
            }
        }
        rc = agree(comm, rc);
    }
    if (lead) tn_monitor_end(j.mon, rc != 0);
    if (lead && dash) print_overhead(&j, dash);
    tn_dash_stop(dash);
    tn_monitor_free(j.mon);
    if (j.log) tn_run_log_close(j.log);
    if (lead) tn_comm_busy(comm, 0), tn_rank_watch_saving(0);
    tn_trainer_free(t);
    tn_model_free(m);
    job_data_free(&data);
    tn_output_lock_release(lock);
    return rc;
}
