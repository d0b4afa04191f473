/* job.c -- see job.h. */
#include "trainer/job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/demo_eval.h"
#include "trainer/trainer.h"

#define DEMO_TRAIN_SAMPLES 20000
#define DEMO_EVAL_SAMPLES 500
#define DEMO_DIGITS 2

static int is_demo(const tn_train_config *cfg) { return strcmp(cfg->dataset, "demo_addition") == 0; }

static int load_data(const tn_train_config *cfg, tn_dataset *train, tn_dataset *eval) {
    memset(eval, 0, sizeof *eval);
    if (!cfg->dataset[0]) return tn_err("%s: key 'dataset' is required (the bundled demo is 'demo_addition')", cfg->source_path);
    if (!is_demo(cfg))
        return tn_err("%s: key 'dataset': '%s' is not available; this build bundles 'demo_addition' "
                      "(dataset_info.json datasets come with the LLaMA-Factory data stage)", cfg->source_path, cfg->dataset);
    if (tn_demo_addition(DEMO_DIGITS, DEMO_TRAIN_SAMPLES, 0, (uint64_t)cfg->seed, cfg->cutoff_len, train) != 0 ||
        tn_demo_addition(DEMO_DIGITS, DEMO_EVAL_SAMPLES, 1, (uint64_t)cfg->seed, cfg->cutoff_len, eval) != 0) {
        tn_dataset_free(train);
        return tn_err("%s: %s", cfg->source_path, tn_errmsg());
    }
    return 0;
}

static tn_model *load_model(const tn_train_config *cfg) {
    int fresh = !cfg->model_name_or_path[0];
    char *cfg_path = fresh ? tn_xstrdup(cfg->model_config) : tn_path_join(cfg->model_name_or_path, "config.json");
    tn_model_config mc;
    tn_model *m = NULL;
    if (tn_model_config_load(cfg_path, &mc) != 0) goto out;
    tn_lora_config lora = {0};
    if (cfg->finetuning_type == TN_FT_LORA) {
        lora.r = cfg->lora_rank;
        lora.alpha = cfg->lora_alpha;
        lora.dropout = cfg->lora_dropout;
        if (tn_lora_parse_targets(cfg->lora_target, &lora.targets) != 0) {
            tn_err("%s: %s", cfg->source_path, tn_errmsg());
            goto out;
        }
    }
    m = tn_model_create(&mc, &lora, tn_backend_cpu());
    tn_model_init_random(m, (uint64_t)cfg->seed); /* LoRA adapters (and a fresh model) start from here */
    if (!fresh && tn_model_load_hf(m, cfg->model_name_or_path) != 0) {
        tn_model_free(m);
        m = NULL;
    }
out:
    free(cfg_path);
    return m;
}

static int save_outputs(const tn_train_config *cfg, const tn_model *m) {
    if (m->lora.r) return tn_model_save_adapter(m, cfg->output_dir);
    return tn_model_save_hf(m, cfg->output_dir, 0);
}

static void print_banner(const tn_train_config *cfg, const tn_model *m, const tn_trainer *t) {
    size_t base = m->n_total - (m->lora.r ? m->n_trainable : 0);
    printf("tandem: %s model, %d layers, hidden %d, vocab %d: %.2fM parameters, %.2fM trainable (%s)\n",
           m->cfg.model_type, m->L, m->D, m->V, base / 1e6, m->n_trainable / 1e6,
           m->lora.r ? "LoRA" : "full fine-tuning");
    printf("tandem: %d steps of %d x %d sequences x %d tokens, lr %.2g (%s, %d warmup), %d threads\n", t->total_steps,
           t->micro_batch, t->accum, t->data->S, cfg->learning_rate, tn_train_config_sched_name(cfg), t->warmup_steps,
           m->be->num_threads());
    fflush(stdout);
}

int tn_job_train(const tn_train_config *cfg) {
    tn_dataset train, eval;
    if (load_data(cfg, &train, &eval) != 0) return -1;
    tn_model *m = load_model(cfg);
    if (!m) {
        tn_dataset_free(&train);
        tn_dataset_free(&eval);
        return -1;
    }
    int rc = 0;
    if (is_demo(cfg) && m->V < TN_BYTE_VOCAB)
        rc = tn_err("%s: the demo's byte vocabulary needs vocab_size >= %d, the model has %d", cfg->source_path,
                    TN_BYTE_VOCAB, m->V);
    tn_trainer *t = rc ? NULL : tn_trainer_create(cfg, m, &train);
    if (t) {
        print_banner(cfg, m, t);
        double t0 = tn_now(), window_loss = 0, last = t0;
        int64_t window_tokens = 0, window_seen = 0;
        for (int s = 0; s < t->total_steps; s++) {
            tn_step_stats st;
            if (tn_trainer_step(t, &st) != 0) {
                fprintf(stderr, "tandem: warning: %s\n", tn_errmsg());
                continue;
            }
            window_loss += st.loss * (double)st.tokens;
            window_tokens += st.tokens;
            window_seen += st.seen;
            if (t->step % cfg->logging_steps == 0 || t->step == t->total_steps) {
                double now = tn_now();
                printf("step %5d/%d | loss %.4f | grad_norm %.3f | lr %.3e | %.0f tok/s\n", t->step, t->total_steps,
                       window_loss / (double)(window_tokens ? window_tokens : 1), st.grad_norm, st.lr,
                       (double)window_seen / (now - last));
                fflush(stdout);
                window_loss = 0, window_tokens = 0, window_seen = 0, last = now;
            }
        }
        printf("tandem: trained %d steps in %.1f s\n", t->step, tn_now() - t0);
        rc = save_outputs(cfg, m);
        if (rc == 0) printf("tandem: saved %s to %s\n", m->lora.r ? "LoRA adapter" : "model", cfg->output_dir);
        if (rc == 0 && is_demo(cfg)) {
            printf("tandem: held-out problems (never trained on), greedy completions:\n");
            double acc = tn_demo_report(m, &eval, 8);
            printf("tandem: held-out accuracy %.1f%% (%d problems)\n", 100.0 * acc, eval.n / 50 * 50);
        }
        tn_trainer_free(t);
    }
    tn_model_free(m);
    tn_dataset_free(&train);
    tn_dataset_free(&eval);
    return rc;
}
