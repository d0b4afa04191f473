/* test_unit_train_config -- the training YAML: values, defaults, list keys, every kind of error, overrides,
 * finish (model key required, lora_alpha default, path resolution). */
#include "config/train_config.h"
#include "core/core.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *FULL_YAML =
    "### model\n"
    "model_name_or_path: models/tiny\n"
    "\n"
    "### method\n"
    "finetuning_type: lora\n"
    "lora_rank: 16\n"
    "lora_alpha: 24.5\n"
    "lora_dropout: 0.05\n"
    "lora_target: v_proj, q_proj,down_proj\n"
    "### data\n"
    "dataset: demo_addition\n"
    "cutoff_len: 512\n"
    "### train\n"
    "learning_rate: 1.0e-4\n"
    "max_steps: 200\n"
    "num_train_epochs: 2.5\n"
    "per_device_train_batch_size: 4\n"
    "gradient_accumulation_steps: 2\n"
    "lr_scheduler_type: cosine\n"
    "warmup_ratio: 0.1\n"
    "warmup_steps: 5\n"
    "max_grad_norm: 0.5\n"
    "weight_decay: 0.01\n"
    "adam_beta1: 0.85\n"
    "adam_beta2: .95\n"
    "adam_epsilon: 1e-6\n"
    "gradient_checkpointing: yes\n"
    "seed: 1234\n"
    "### output\n"
    "output_dir: \"out/run1\"\n"
    "logging_steps: 5\n"
    "save_steps: 50\n"
    "overwrite_output_dir: true   # comment\n";

static void write_text(const char *path, const char *text) {
    if (tn_write_file_atomic(path, text, strlen(text)) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, tn_errmsg());
        exit(1);
    }
}

static void full_yaml(void) {
    tn_train_config c;
    CHECKF(tn_train_config_parse(FULL_YAML, "full.yaml", &c) == 0, "parse: %s", tn_errmsg());
    CHECK(strcmp(c.model_name_or_path, "models/tiny") == 0);
    CHECK(c.model_config[0] == 0);
    CHECK(c.finetuning_type == TN_FT_LORA);
    CHECK(c.lora_rank == 16);
    CHECK(c.lora_alpha == 24.5);
    CHECK(c.lora_dropout == 0.05);
    CHECKF(strcmp(c.lora_target, "q_proj,v_proj,down_proj") == 0, "lora_target '%s'", c.lora_target);
    CHECK(strcmp(c.dataset, "demo_addition") == 0);
    CHECK(c.cutoff_len == 512);
    CHECK(c.learning_rate == 1e-4);
    CHECK(c.max_steps == 200);
    CHECK(c.num_train_epochs == 2.5);
    CHECK(c.per_device_train_batch_size == 4);
    CHECK(c.gradient_accumulation_steps == 2);
    CHECK(c.lr_scheduler_type == TN_SCHED_COSINE && c.no_warmup == 0);
    CHECK(c.warmup_ratio == 0.1);
    CHECK(c.warmup_steps == 5);
    CHECK(c.max_grad_norm == 0.5);
    CHECK(c.weight_decay == 0.01);
    CHECK(c.adam_beta1 == 0.85);
    CHECK(c.adam_beta2 == 0.95);
    CHECK(c.adam_epsilon == 1e-6);
    CHECK(c.gradient_checkpointing == 1);
    CHECK(c.seed == 1234);
    CHECK(strcmp(c.output_dir, "out/run1") == 0);
    CHECK(c.logging_steps == 5);
    CHECK(c.save_steps == 50);
    CHECK(c.overwrite_output_dir == 1);
    CHECK(strcmp(c.source_path, "full.yaml") == 0);
    CHECKF(tn_train_config_finish(&c) == 0, "finish: %s", tn_errmsg());
    CHECK(c.lora_alpha == 24.5); /* given: kept */
    CHECK(strcmp(c.model_name_or_path, "models/tiny") == 0); /* YAML in the working dir: unchanged */
}

static void defaults(void) {
    tn_train_config c;
    CHECKF(tn_train_config_parse("model_config: tiny.json\n", "d.yaml", &c) == 0, "%s", tn_errmsg());
    CHECK(strcmp(c.model_config, "tiny.json") == 0);
    CHECK(c.model_name_or_path[0] == 0);
    CHECK(c.finetuning_type == TN_FT_LORA);
    CHECK(c.lora_rank == 8);
    CHECK(c.lora_dropout == 0);
    CHECK(strcmp(c.lora_target, "all") == 0);
    CHECK(c.dataset[0] == 0);
    CHECK(c.cutoff_len == 2048);
    CHECK(c.learning_rate == 5e-5);
    CHECK(c.max_steps == -1);
    CHECK(c.num_train_epochs == 3.0);
    CHECK(c.per_device_train_batch_size == 8);
    CHECK(c.gradient_accumulation_steps == 1);
    CHECK(c.lr_scheduler_type == TN_SCHED_LINEAR && c.no_warmup == 0);
    CHECK(c.warmup_ratio == 0 && c.warmup_steps == 0);
    CHECK(c.max_grad_norm == 1.0);
    CHECK(c.weight_decay == 0);
    CHECK(c.adam_beta1 == 0.9 && c.adam_beta2 == 0.999 && c.adam_epsilon == 1e-8);
    CHECK(c.gradient_checkpointing == -1); /* unset until finish applies LLaMA-Factory's default (on) */
    CHECK(c.seed == 42);
    CHECK(strcmp(c.output_dir, "saves/tandem") == 0);
    CHECK(c.logging_steps == 10);
    CHECK(c.save_steps == 0);
    CHECK(c.overwrite_output_dir == 0);
    CHECKF(tn_train_config_finish(&c) == 0, "%s", tn_errmsg());
    CHECK(c.lora_alpha == 16.0); /* 2 * default rank */
    /* LLaMA-Factory's defaults where they differ from HF's */
    CHECK(c.gradient_checkpointing == 1 && c.stage == TN_STAGE_SFT && c.packing == 0);
    CHECK(strcmp(c.dataset_dir, "data") == 0 && c.enable_thinking == 1 && c.eval_strategy == TN_EVAL_NO);
    CHECK(c.per_device_eval_batch_size == 8 && c.eval_steps == c.logging_steps && c.notices[0] == 0);

    /* LLaMA-Factory's example skeleton (examples/train_lora/qwen3_lora_sft.yaml) parses as it is */
    const char *lf = "model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\ntrust_remote_code: true\nstage: sft\n"
                     "do_train: true\nfinetuning_type: lora\nlora_rank: 8\nlora_target: all\n"
                     "deepspeed: examples/deepspeed/ds_z3_config.json\ndataset: identity,alpaca_en_demo\n"
                     "template: qwen3_nothink\ncutoff_len: 2048\nmax_samples: 1000\npreprocessing_num_workers: 16\n"
                     "dataloader_num_workers: 4\noutput_dir: saves/qwen3-4b/lora/sft\nlogging_steps: 10\n"
                     "save_steps: 500\nplot_loss: true\noverwrite_output_dir: true\nsave_only_model: false\n"
                     "report_to: none\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 8\n"
                     "learning_rate: 1.0e-4\nnum_train_epochs: 3.0\nlr_scheduler_type: cosine\nwarmup_ratio: 0.1\n"
                     "bf16: true\nddp_timeout: 180000000\nresume_from_checkpoint: null\nval_size: 0.1\n"
                     "per_device_eval_batch_size: 1\neval_strategy: steps\neval_steps: 500\n";
    CHECKF(tn_train_config_parse(lf, "lf.yaml", &c) == 0, "%s", tn_errmsg());
    CHECKF(tn_train_config_finish(&c) == 0, "%s", tn_errmsg());
    CHECK(strcmp(c.dataset, "identity,alpaca_en_demo") == 0 && strcmp(c.template_name, "qwen3_nothink") == 0);
    CHECK(c.max_samples == 1000 && c.plot_loss == 1 && c.save_steps == 500 && c.val_size == 0.1);
    CHECK(c.eval_strategy == TN_EVAL_STEPS && c.eval_steps == 500 && c.per_device_eval_batch_size == 1);
    CHECK(c.resume_from_checkpoint[0] == 0 && strcmp(c.output_dir, "saves/qwen3-4b/lora/sft") == 0);
    /* one notice line per Python-world key, saying what tandem does instead (report_to: none needs none) */
    int lines = 0;
    for (const char *q = c.notices; *q; q++) lines += *q == '\n';
    CHECKF(lines == 5, "%d notices:\n%s", lines, c.notices);
    CHECK(!strstr(c.notices, "report_to") && c.report_tensorboard == 0);
    CHECK(strstr(c.notices, "trust_remote_code: ") && strstr(c.notices, "bf16: "));
    /* deepspeed is a file to read (deepspeed_config.h), kept relative to the working directory as LF does */
    CHECK(strcmp(c.deepspeed, "examples/deepspeed/ds_z3_config.json") == 0 && !strstr(c.notices, "deepspeed: "));
    /* pt turns packing on; disable_gradient_checkpointing turns checkpointing off */
    CHECK(tn_train_config_parse("model_config: x.json\nstage: pt\ndisable_gradient_checkpointing: true\n", "p.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0 && c.packing == 1 && c.gradient_checkpointing == 0);
    /* features LLaMA-Factory has and tandem does not: one clear error naming the key */
    const char *unsupported[] = {"stage: dpo\n", "use_dora: true\n", "quantization_bit: 4\n",
                                 "optim: adafactor\n", "neat_packing: true\n"};
    for (int i = 0; i < 5; i++) {
        char y[256];
        snprintf(y, sizeof y, "model_config: x.json\n%s", unsupported[i]);
        CHECKF(tn_train_config_parse(y, "u.yaml", &c) != 0 && strstr(tn_errmsg(), "u.yaml:2: key '"),
               "%s -> %s", unsupported[i], tn_errmsg());
    }
    /* vision-language keys, LLaMA-Factory's defaults (ProcessorArguments 768*768 / 32*32; FinetuningArguments:
     * vision tower and projector frozen, language model trained) and its qwen3vl_full_sft.yaml values */
    CHECK(tn_train_config_parse("model_config: x.json\n", "vl.yaml", &c) == 0 && tn_train_config_finish(&c) == 0);
    CHECK(c.image_max_pixels == 589824 && c.image_min_pixels == 1024 && !c.media_dir[0]);
    CHECK(c.freeze_vision_tower == 1 && c.freeze_multi_modal_projector == 1 && c.freeze_language_model == 0);
    CHECKF(tn_train_config_parse("model_config: x.json\nimage_max_pixels: 262144\nvideo_max_pixels: 16384\n"
                                 "freeze_vision_tower: false\nfreeze_multi_modal_projector: false\n"
                                 "freeze_language_model: true\nmedia_dir: /data/imgs\nimage_min_pixels: 4096\n",
                                 "vl.yaml", &c) == 0, "%s", tn_errmsg());
    CHECK(c.image_max_pixels == 262144 && c.image_min_pixels == 4096 && !strcmp(c.media_dir, "/data/imgs"));
    CHECK(c.freeze_vision_tower == 0 && c.freeze_multi_modal_projector == 0 && c.freeze_language_model == 1);
    CHECK(strstr(c.notices, "video_max_pixels") && strstr(c.notices, "videos and audio are not supported yet"));
    CHECKF(tn_train_config_parse("model_config: x.json\nimage_max_pixels: 0\n", "vl.yaml", &c) != 0 &&
               strstr(tn_errmsg(), "vl.yaml:2: key 'image_max_pixels'"), "%s", tn_errmsg());
    CHECKF(tn_train_config_parse("model_config: x.json\nuse_audio_in_video: true\n", "vl.yaml", &c) != 0 &&
               strstr(tn_errmsg(), "vl.yaml:2: key 'use_audio_in_video': not supported yet"), "%s", tn_errmsg());
    /* optim: sgd is read (image classifiers train with it; a language model's job refuses it: test_image_train) */
    CHECK(tn_train_config_parse("model_config: x.json\noptim: sgd\noptim_args: momentum=0.9\nlabel_smoothing_factor: 0.1\n",
                                "s.yaml", &c) == 0 && c.optim_sgd == 1 && strcmp(c.optim_args, "momentum=0.9") == 0 &&
          c.label_smoothing_factor == 0.1);
    CHECK(tn_train_config_parse("model_config: x.json\nlabel_smoothing_factor: 1.5\n", "s.yaml", &c) != 0 &&
          strstr(tn_errmsg(), "label_smoothing_factor"));
    CHECK(tn_train_config_parse("model_config: x.json\ndo_train: false\n", "t.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) != 0 && strstr(tn_errmsg(), "do_train"));
    /* do_predict without do_train predicts only (LF's default do_train is false); it needs predict_with_generate and
     * eval_dataset */
    CHECK(tn_train_config_parse("model_config: x.json\ndo_predict: true\npredict_with_generate: true\n"
                                "eval_dataset: [identity, alpaca_en_demo]\n", "t.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0 && !c.do_train && c.do_predict && !strcmp(c.eval_dataset, "identity,alpaca_en_demo"));
    CHECK(tn_train_config_parse("model_config: x.json\ndo_predict: true\neval_dataset: identity\n", "t.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) != 0 && strstr(tn_errmsg(), "predict_with_generate"));
    CHECK(tn_train_config_parse("model_config: x.json\ndo_predict: true\npredict_with_generate: true\n", "t.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) != 0 && strstr(tn_errmsg(), "eval_dataset"));
    CHECK(tn_train_config_parse("model_config: x.json\neval_strategy: steps\n", "t.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) != 0 && strstr(tn_errmsg(), "val_size"));

    /* lora_alpha follows lora_rank (YAML or override) when not given */
    CHECK(tn_train_config_parse("model_config: x.json\nlora_rank: 32\n", "d.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECK(c.lora_alpha == 64.0);
    CHECK(tn_train_config_parse("model_config: x.json\nlora_rank: 32\n", "d.yaml", &c) == 0);
    CHECK(tn_train_config_override(&c, "lora_rank=4") == 0);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECK(c.lora_alpha == 8.0);

    /* null values: strings become empty ("unset") */
    CHECK(tn_train_config_parse("model_config: x.json\nmodel_name_or_path: ~\ndataset:\n", "d.yaml", &c) == 0);
    CHECK(c.model_name_or_path[0] == 0 && c.dataset[0] == 0);
}

static void value_forms(void) {
    tn_train_config c;
    const char *y = "model_config: x.json\n"
                    "learning_rate: 1\n"          /* integer for a float key */
                    "weight_decay: 5.0e-5\n"
                    "adam_epsilon: \"1e-7\"\n"    /* quoted numbers are fine */
                    "max_grad_norm: -1\n"         /* disables clipping */
                    "lora_dropout: .5\n"
                    "max_steps: -1\n"
                    "save_steps: 1e3\n"           /* integral */
                    "cutoff_len: +64\n"
                    "gradient_checkpointing: False\n"
                    "overwrite_output_dir: 1\n"
                    "finetuning_type: full\n"
                    "lr_scheduler_type: constant_with_warmup\n"
                    "lora_target: [k_proj, o_proj, k_proj]\n"
                    "seed: -7\n";
    CHECKF(tn_train_config_parse(y, "forms.yaml", &c) == 0, "%s", tn_errmsg());
    CHECK(c.learning_rate == 1.0);
    CHECK(c.weight_decay == 5e-5);
    CHECK(c.adam_epsilon == 1e-7);
    CHECK(c.max_grad_norm == -1.0);
    CHECK(c.lora_dropout == 0.5);
    CHECK(c.max_steps == -1);
    CHECK(c.save_steps == 1000);
    CHECK(c.cutoff_len == 64);
    CHECK(c.gradient_checkpointing == 0);
    CHECK(c.overwrite_output_dir == 1);
    CHECK(c.finetuning_type == TN_FT_FULL);
    CHECK(c.lr_scheduler_type == TN_SCHED_CONSTANT && c.no_warmup == 0);
    CHECKF(strcmp(c.lora_target, "k_proj,o_proj") == 0, "lora_target '%s'", c.lora_target);
    CHECK(c.seed == -7);

    /* block sequence form */
    CHECKF(tn_train_config_parse("model_config: x.json\nlora_target:\n  - gate_proj\n  - up_proj\n  - down_proj\n",
                                 "list.yaml", &c) == 0,
           "%s", tn_errmsg());
    CHECKF(strcmp(c.lora_target, "gate_proj,up_proj,down_proj") == 0, "lora_target '%s'", c.lora_target);
    CHECK(tn_train_config_parse("lora_target: all\n", "list.yaml", &c) == 0);
    CHECK(strcmp(c.lora_target, "all") == 0);
    CHECK(tn_train_config_parse("lora_target: [all]\n", "list.yaml", &c) == 0);
    CHECK(strcmp(c.lora_target, "all") == 0);
    /* issue 25's config: the projections and the embedding (PEFT's embedding adapter), kept in table order */
    CHECK(tn_train_config_parse("lora_target: k_proj,up_proj,o_proj,v_proj,q_proj,gate_proj,down_proj,embed_tokens\n",
                                "list.yaml", &c) == 0);
    CHECKF(strcmp(c.lora_target, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,embed_tokens") == 0,
           "lora_target '%s'", c.lora_target);
    CHECK(tn_train_config_parse("lr_scheduler_type: constant\n", "s.yaml", &c) == 0);
    CHECK(c.lr_scheduler_type == TN_SCHED_CONSTANT && c.no_warmup == 1);
    /* 'step' (torch StepLR): step_size and gamma through lr_scheduler_kwargs; gamma defaults to StepLR's 0.1 */
    CHECK(tn_train_config_parse("model_config: x.json\noutput_dir: o\nlr_scheduler_type: step\n"
                                "lr_scheduler_kwargs: step_size=30, gamma=0.5\n", "s.yaml", &c) == 0);
    CHECK(c.lr_scheduler_type == TN_SCHED_STEP && c.lr_step_size == 30 && c.lr_step_gamma == 0.5);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECK(tn_train_config_parse("model_config: x.json\noutput_dir: o\nlr_scheduler_type: step\n"
                                "lr_scheduler_kwargs: step_size=7\n", "s.yaml", &c) == 0);
    CHECK(c.lr_step_size == 7 && c.lr_step_gamma == 0.1);
    CHECK(tn_train_config_parse("model_config: x.json\noutput_dir: o\nlr_scheduler_type: step\n", "s.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == -1 && strstr(tn_errmsg(), "step_size=N") != NULL);
    /* an explicit document marker and comments are fine */
    CHECK(tn_train_config_parse("# job\n---\nseed: 3\n...\n", "doc.yaml", &c) == 0 && c.seed == 3);
}

/* The YAML must fail with exactly this message (want_exact) or with a message holding every needle. */
static void expect_error(const char *yaml, const char *want_exact, const char *n1, const char *n2, const char *n3) {
    tn_train_config c;
    int rc = tn_train_config_parse(yaml, "demo.yaml", &c);
    const char *m = tn_errmsg();
    CHECKF(rc == -1, "no error for:\n%s", yaml);
    if (rc != -1) return;
    CHECKF(strchr(m, '\n') == NULL, "message is not one line: %s", m);
    if (want_exact) CHECKF(strcmp(m, want_exact) == 0, "message '%s', want '%s'", m, want_exact);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) CHECKF(strstr(m, needles[i]) != NULL, "message '%s' lacks '%s'", m, needles[i]);
}

static void errors(void) {
    /* unknown key, with and without a suggestion */
    expect_error("model_config: x.json\nlora_rank: 8\nlora_rnak: 8\n",
                 "demo.yaml:3: key 'lora_rnak' is not known (did you mean 'lora_rank'?)", NULL, NULL, NULL);
    expect_error("learnig_rate: 1e-4\n", NULL, "demo.yaml:1:", "'learnig_rate'", "did you mean 'learning_rate'?");
    expect_error("seed: 1\nbanana: 3\n", "demo.yaml:2: key 'banana' is not known", NULL, NULL, NULL);
    expect_error("seed: 1\nx: 3\n", "demo.yaml:2: key 'x' is not known", NULL, NULL, NULL);
    /* bad values */
    expect_error("seed: 1\n\n\n\nlearning_rate: fast\n",
                 "demo.yaml:5: key 'learning_rate' expects a positive number, got 'fast'", NULL, NULL, NULL);
    expect_error("learning_rate: 0\n", NULL, "demo.yaml:1:", "'learning_rate'", "positive");
    expect_error("learning_rate: -1e-4\n", NULL, "demo.yaml:1:", "'learning_rate'", "'-1e-4'");
    expect_error("learning_rate: 1e-4x\n", NULL, "demo.yaml:1:", "'learning_rate'", NULL);
    expect_error("learning_rate: .inf\n", NULL, "demo.yaml:1:", "'learning_rate'", NULL);
    expect_error("learning_rate: 1e999\n", NULL, "demo.yaml:1:", "'learning_rate'", NULL);
    expect_error("learning_rate: 0x10\n", NULL, "demo.yaml:1:", "'learning_rate'", NULL);
    expect_error("learning_rate:\n", "demo.yaml:1: key 'learning_rate' expects a positive number, got no value", NULL,
                 NULL, NULL);
    expect_error("seed: 1\nmax_steps: 3.5\n", "demo.yaml:2: key 'max_steps' expects -1 or an integer >= 1, got '3.5'",
                 NULL, NULL, NULL);
    expect_error("max_steps: 0\n", NULL, "demo.yaml:1:", "'max_steps'", NULL);
    expect_error("max_steps: -2\n", NULL, "demo.yaml:1:", "'max_steps'", NULL);
    expect_error("max_steps: 99999999999\n", NULL, "demo.yaml:1:", "'max_steps'", NULL);
    expect_error("lora_rank: 0\n", "demo.yaml:1: key 'lora_rank' expects an integer >= 1, got '0'", NULL, NULL, NULL);
    expect_error("lora_alpha: 0\n", NULL, "demo.yaml:1:", "'lora_alpha'", NULL);
    expect_error("lora_dropout: 1.0\n", NULL, "demo.yaml:1:", "'lora_dropout'", "[0, 1)");
    expect_error("lora_dropout: -0.1\n", NULL, "demo.yaml:1:", "'lora_dropout'", NULL);
    expect_error("cutoff_len: 1\n", NULL, "demo.yaml:1:", "'cutoff_len'", ">= 2");
    expect_error("num_train_epochs: 0\n", NULL, "demo.yaml:1:", "'num_train_epochs'", NULL);
    expect_error("per_device_train_batch_size: 0\n", NULL, "demo.yaml:1:", "'per_device_train_batch_size'", NULL);
    expect_error("gradient_accumulation_steps: 2.5\n", NULL, "demo.yaml:1:", "'gradient_accumulation_steps'", NULL);
    expect_error("warmup_ratio: 1.5\n", NULL, "demo.yaml:1:", "'warmup_ratio'", "[0, 1]");
    expect_error("warmup_steps: -1\n", NULL, "demo.yaml:1:", "'warmup_steps'", NULL);
    expect_error("max_grad_norm: big\n", NULL, "demo.yaml:1:", "'max_grad_norm'", NULL);
    expect_error("weight_decay: -0.1\n", NULL, "demo.yaml:1:", "'weight_decay'", NULL);
    expect_error("adam_beta1: 1\n", NULL, "demo.yaml:1:", "'adam_beta1'", NULL);
    expect_error("adam_beta2: 1.0\n", NULL, "demo.yaml:1:", "'adam_beta2'", NULL);
    expect_error("adam_epsilon: 0\n", NULL, "demo.yaml:1:", "'adam_epsilon'", NULL);
    expect_error("gradient_checkpointing: maybe\n",
                 "demo.yaml:1: key 'gradient_checkpointing' expects true or false, got 'maybe'", NULL, NULL, NULL);
    expect_error("overwrite_output_dir: 2\n", NULL, "demo.yaml:1:", "'overwrite_output_dir'", NULL);
    expect_error("seed: 1.5\n", NULL, "demo.yaml:1:", "'seed'", NULL);
    expect_error("logging_steps: 0\n", NULL, "demo.yaml:1:", "'logging_steps'", NULL);
    expect_error("save_steps: -5\n", NULL, "demo.yaml:1:", "'save_steps'", NULL);
    /* choices */
    expect_error("seed: 1\nfinetuning_type: freeze\n", NULL, "demo.yaml:2:", "'finetuning_type'", "not supported yet");
    expect_error("finetuning_type: qlora\n", "demo.yaml:1: key 'finetuning_type' expects one of lora, full, got 'qlora'",
                 NULL, NULL, NULL);
    expect_error("lr_scheduler_type: polynomial\n", NULL, "demo.yaml:1:", "'lr_scheduler_type'", "not supported yet");
    expect_error("lr_scheduler_kwargs: step_size=0\n", NULL, "demo.yaml:1:", "'lr_scheduler_kwargs'", "step_size=0");
    expect_error("lr_scheduler_kwargs: gamma=-1\n", NULL, "demo.yaml:1:", "'lr_scheduler_kwargs'", "gamma=-1");
    expect_error("lr_scheduler_kwargs: step_size=3x\n", NULL, "demo.yaml:1:", "'lr_scheduler_kwargs'", NULL);
    expect_error("lr_scheduler_kwargs: last_epoch=3\n", NULL, "demo.yaml:1:", "'lr_scheduler_kwargs'", "last_epoch");
    expect_error("lr_scheduler_type: Cosine\n", NULL, "demo.yaml:1:", "'lr_scheduler_type'", "'Cosine'");
    expect_error("seed: 1\nlora_target: q_proj,qkv_proj\n", NULL, "demo.yaml:2:", "'lora_target'", "'qkv_proj'");
    expect_error("lora_target: [q_proj, gate_prj]\n", NULL, "demo.yaml:1:", "'gate_prj'", "did you mean 'gate_proj'?");
    expect_error("lora_target: all,q_proj\n", NULL, "demo.yaml:1:", "'lora_target'", "'all'");
    expect_error("lora_target: q_proj,,v_proj\n", NULL, "demo.yaml:1:", "'lora_target'", NULL);
    expect_error("lora_target: []\n", NULL, "demo.yaml:1:", "'lora_target'", NULL);
    /* strings */
    char *longv = malloc(1200);
    strcpy(longv, "dataset: ");
    memset(longv + 9, 'a', 300);
    strcpy(longv + 309, "\n");
    expect_error(longv, NULL, "demo.yaml:1:", "'dataset'", "too long");
    free(longv);
    /* structure */
    expect_error("seed: 1\nlora_rank: 4\n\nseed: 2\n", "demo.yaml:4: key 'seed' is given twice (first on line 1)", NULL,
                 NULL, NULL);
    expect_error("seed: 1\nlora_rank:\n  value: 4\n", NULL, "demo.yaml:2:", "'lora_rank'", "nested mapping");
    expect_error("lora_target: {q_proj: 1}\n", NULL, "demo.yaml:1:", "'lora_target'", "nested mapping");
    expect_error("seed: [1, 2]\n", "demo.yaml:1: key 'seed' expects an integer, got a list", NULL, NULL, NULL);
    expect_error("lora_target:\n  - q_proj\n  - [v_proj]\n", NULL, "demo.yaml:3:", "'lora_target'", "single values");
    expect_error("seed: &s 5\nlora_rank: *s\n", NULL, "demo.yaml:2:", "'lora_rank'", "alias");
    expect_error("- seed\n- 1\n", NULL, "demo.yaml:1:", "top level must be a mapping", "a list");
    expect_error("just words\n", NULL, "demo.yaml:1:", "top level must be a mapping", NULL);
    expect_error("", NULL, "demo.yaml:1:", "mapping", NULL);
    expect_error("# only a comment\n", NULL, "demo.yaml:1:", "mapping", NULL);
    expect_error("seed: 1\n---\nseed: 2\n", NULL, "demo.yaml:2:", "one YAML document", NULL);
    expect_error("[seed, 1]: 3\n", NULL, "demo.yaml:1:", "keys must be", NULL);
    /* YAML syntax errors carry libyaml's problem and the line */
    expect_error("seed: 1\nlora_rank: 8: 9\n", NULL, "demo.yaml:2:", "YAML syntax error", "mapping values");
    expect_error("seed: 1\nlora_target: [q_proj, v_proj\nlora_rank: 4\n", NULL, "demo.yaml:", "YAML syntax error",
                 NULL);
    expect_error("seed: 1\n- q_proj\n", NULL, "demo.yaml:2:", "YAML syntax error", NULL);
    /* a continuation line is part of the plain value: reported as a bad value on the key's line */
    expect_error("seed: 1\n  lora_rank: 4\n", NULL, "demo.yaml:1:", "'seed'", NULL);
    expect_error("seed: \"1\n", NULL, "demo.yaml:", "YAML syntax error", NULL);
    expect_error("seed: 1\nlora_rank: \xff\n", NULL, "demo.yaml:2:", "YAML syntax error", "UTF-8");
    expect_error("seed:\t1\n\tlora_rank: 2\n", NULL, "demo.yaml:", "YAML syntax error", NULL);
}

static void overrides(void) {
    tn_train_config c;
    CHECK(tn_train_config_parse(FULL_YAML, "full.yaml", &c) == 0);
    CHECKF(tn_train_config_override(&c, "learning_rate=2e-4") == 0, "%s", tn_errmsg());
    CHECK(c.learning_rate == 2e-4);
    CHECK(tn_train_config_override(&c, "lora_target=[o_proj, q_proj]") == 0);
    CHECKF(strcmp(c.lora_target, "q_proj,o_proj") == 0, "lora_target '%s'", c.lora_target);
    CHECK(tn_train_config_override(&c, "lora_target=up_proj") == 0);
    CHECK(strcmp(c.lora_target, "up_proj") == 0);
    CHECK(tn_train_config_override(&c, "gradient_checkpointing=false") == 0 && c.gradient_checkpointing == 0);
    CHECK(tn_train_config_override(&c, "max_steps=-1") == 0 && c.max_steps == -1);
    CHECK(tn_train_config_override(&c, "lr_scheduler_type=constant") == 0 && c.no_warmup == 1);
    CHECK(tn_train_config_override(&c, "output_dir=a=b") == 0 && strcmp(c.output_dir, "a=b") == 0);
    CHECK(tn_train_config_override(&c, " seed = 7") == 0 && c.seed == 7);
    CHECK(tn_train_config_override(&c, "dataset=") == 0 && c.dataset[0] == 0);

    /* bad overrides: one line naming the key and the command line; c is unchanged */
    CHECK(tn_train_config_override(&c, "learning_rate=fast") == -1);
    CHECKF(strcmp(tn_errmsg(), "command line: key 'learning_rate' expects a positive number, got 'fast'") == 0, "%s",
           tn_errmsg());
    CHECK(c.learning_rate == 2e-4);
    CHECK(tn_train_config_override(&c, "lora_rnak=4") == -1);
    CHECKF(strstr(tn_errmsg(), "command line") && strstr(tn_errmsg(), "'lora_rnak'") &&
               strstr(tn_errmsg(), "did you mean 'lora_rank'?"),
           "%s", tn_errmsg());
    CHECK(tn_train_config_override(&c, "lora_target=q_proj,nope") == -1);
    CHECKF(strstr(tn_errmsg(), "command line") && strstr(tn_errmsg(), "'nope'"), "%s", tn_errmsg());
    CHECK(strcmp(c.lora_target, "up_proj") == 0);
    CHECK(tn_train_config_override(&c, "max_steps") == -1);
    CHECKF(strstr(tn_errmsg(), "command line") && strstr(tn_errmsg(), "key=value"), "%s", tn_errmsg());
    CHECK(tn_train_config_override(&c, "max_steps=0") == -1);
    CHECKF(strstr(tn_errmsg(), "command line") && strstr(tn_errmsg(), "'max_steps'"), "%s", tn_errmsg());
    CHECK(tn_train_config_override(&c, "finetuning_type=freeze") == -1);
    CHECKF(strstr(tn_errmsg(), "command line") && strstr(tn_errmsg(), "not supported yet"), "%s", tn_errmsg());
}

static void finish_and_paths(void) {
    tn_train_config c;
    /* no model */
    CHECK(tn_train_config_parse("seed: 1\n", "nomodel.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == -1);
    CHECKF(strstr(tn_errmsg(), "nomodel.yaml") && strstr(tn_errmsg(), "model_name_or_path") &&
               strstr(tn_errmsg(), "model_config"),
           "%s", tn_errmsg());
    /* both */
    CHECK(tn_train_config_parse("model_config: a.json\nmodel_name_or_path: m\n", "both.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == -1);
    CHECKF(strstr(tn_errmsg(), "both.yaml") && strstr(tn_errmsg(), "both"), "%s", tn_errmsg());

    /* relative paths resolve against the YAML's folder when they exist there */
    char dir[300], path[400], model[400], cfgjson[400], yaml[1024];
    snprintf(dir, sizeof dir, "%s/job", tl_tmpdir());
    snprintf(model, sizeof model, "%s/models/tiny", dir);
    CHECK(tn_mkdirs(model) == 0);
    snprintf(cfgjson, sizeof cfgjson, "%s/tiny.json", dir);
    write_text(cfgjson, "{}\n");
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    write_text(path, "model_name_or_path: models/tiny\noutput_dir: saves/x\nlora_rank: 2\n");
    CHECKF(tn_train_config_load(path, &c) == 0, "%s", tn_errmsg());
    CHECK(strcmp(c.source_path, path) == 0);
    CHECKF(tn_train_config_finish(&c) == 0, "%s", tn_errmsg());
    CHECKF(strcmp(c.model_name_or_path, model) == 0, "model_name_or_path '%s'", c.model_name_or_path);
    CHECKF(strcmp(c.output_dir, "saves/x") == 0, "output_dir '%s'", c.output_dir); /* absent there: kept */
    CHECK(c.lora_alpha == 4.0);

    write_text(path, "model_config: tiny.json\noutput_dir: /abs/out\n");
    CHECK(tn_train_config_load(path, &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECKF(strcmp(c.model_config, cfgjson) == 0, "model_config '%s'", c.model_config);
    CHECK(strcmp(c.output_dir, "/abs/out") == 0);

    /* a path given on the command line stays relative to the working directory */
    CHECK(tn_train_config_load(path, &c) == 0);
    CHECK(tn_train_config_override(&c, "model_config=tiny.json") == 0);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECKF(strcmp(c.model_config, "tiny.json") == 0, "model_config '%s'", c.model_config);

    /* load errors name the file */
    snprintf(yaml, sizeof yaml, "%s/missing.yaml", dir);
    CHECK(tn_train_config_load(yaml, &c) == -1);
    CHECKF(strstr(tn_errmsg(), "missing.yaml") != NULL, "%s", tn_errmsg());
    write_text(path, "model_config: tiny.json\nlora_rnak: 3\n");
    CHECK(tn_train_config_load(path, &c) == -1);
    snprintf(yaml, sizeof yaml, "%s:2: key 'lora_rnak' is not known (did you mean 'lora_rank'?)", path);
    CHECKF(strcmp(tn_errmsg(), yaml) == 0, "%s", tn_errmsg());

    remove(path);
    remove(cfgjson);
    rmdir(model);
    snprintf(model, sizeof model, "%s/models", dir);
    rmdir(model);
    rmdir(dir);
    rmdir(tl_tmpdir());
}

/* Trainer keys LLaMA-Factory users bring: handled (report_to, logging_dir, save_strategy, logging_first_step,
 * eval_on_start) or noted in one line each (tokenized_path, export_size, export_device, infer_backend, the
 * report_to services); pissa_init: true refused. */
static int count_lines(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

static void trainer_keys(void) {
    tn_train_config c;
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: tensorboard\n", "r.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0 && c.report_tensorboard == 1 && c.notices[0] == 0 && c.logging_dir[0] == 0);
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: [tensorboard, wandb, swanlab]\nlogging_dir: tb\n",
                                "r.yaml", &c) == 0);
    CHECKF(tn_train_config_finish(&c) == 0 && c.report_tensorboard == 1 && strcmp(c.logging_dir, "tb") == 0 &&
               count_lines(c.notices, "\n") == 1 && strstr(c.notices, "report_to: nothing is sent to wandb, swanlab") &&
               strstr(c.notices, "TensorBoard"),
           "%s", c.notices);
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: mlflow\nlogging_dir: tb\n", "r.yaml", &c) == 0);
    CHECKF(tn_train_config_finish(&c) == 0 && c.report_tensorboard == 0 && strstr(c.notices, "nothing is sent to mlflow") &&
               strstr(c.notices, "logging_dir: TensorBoard files are written only with report_to: tensorboard"),
           "%s", c.notices);
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: all\n", "r.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0 && c.report_tensorboard == 1 && strstr(c.notices, "report_to: all: "));
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: wandb\n", "r.yaml", &c) == 0);
    CHECK(tn_train_config_override(&c, "report_to=none") == 0);
    CHECK(tn_train_config_finish(&c) == 0 && c.report_tensorboard == 0 && c.notices[0] == 0);
    CHECK(tn_train_config_parse("model_config: x.json\nreport_to: tensorbord\n", "r.yaml", &c) != 0);
    CHECKF(strstr(tn_errmsg(), "r.yaml:2: key 'report_to': 'tensorbord' is not an integration"), "%s", tn_errmsg());

    CHECK(tn_train_config_parse("model_config: x.json\n", "s.yaml", &c) == 0 && c.save_strategy == TN_SAVE_STEPS &&
          c.logging_first_step == 0 && c.eval_on_start == 0);
    CHECK(tn_train_config_parse("model_config: x.json\nsave_strategy: epoch\nlogging_first_step: true\n"
                                "eval_on_start: true\n", "s.yaml", &c) == 0);
    CHECK(c.save_strategy == TN_SAVE_EPOCH && c.logging_first_step == 1 && c.eval_on_start == 1 && c.notices[0] == 0);
    CHECK(tn_train_config_override(&c, "save_strategy=no") == 0 && c.save_strategy == TN_SAVE_NO);
    CHECK(tn_train_config_parse("model_config: x.json\nsave_strategy: best\n", "s.yaml", &c) != 0 &&
          strstr(tn_errmsg(), "s.yaml:2: key 'save_strategy': 'best' is not supported yet"));
    CHECK(tn_train_config_parse("model_config: x.json\nsave_strategy: sometimes\n", "s.yaml", &c) != 0 &&
          strstr(tn_errmsg(), "s.yaml:2: key 'save_strategy' expects steps, epoch or no"));

    CHECK(tn_train_config_parse("model_config: x.json\ntokenized_path: data/tok\nexport_size: 2\nexport_device: cpu\n"
                                "infer_backend: vllm\npissa_init: false\n", "n.yaml", &c) == 0);
    CHECK(tn_train_config_override(&c, "export_size=3") == 0 && c.export_size == 3);
    CHECK(tn_train_config_finish(&c) == 0);
    CHECKF(count_lines(c.notices, "\n") == 4 && strstr(c.notices, "tokenized_path: tandem tokenizes once") &&
               strstr(c.notices, "export_size: only `tandem export` reads it (safetensors shards of at most 3 GB)") &&
               !strstr(c.notices, "at most 2 GB") && strstr(c.notices, "export_device: ") &&
               strstr(c.notices, "infer_backend: "),
           "%s", c.notices);
    CHECK(tn_train_config_parse("model_config: x.json\npissa_init: true\n", "p.yaml", &c) != 0 &&
          strstr(tn_errmsg(), "p.yaml:2: key 'pissa_init': not supported yet"));

    /* model folders: a Hub id gets one line saying it is not downloaded and what to pass */
    CHECK(tn_train_config_parse("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\n", "h.yaml", &c) == 0);
    CHECK(tn_train_config_finish(&c) == 0 && tn_train_config_check_model_paths(&c) != 0);
    CHECKF(strcmp(tn_errmsg(), "h.yaml: key 'model_name_or_path': 'Qwen/Qwen3-4B-Instruct-2507' is not a local folder, "
                               "and Hugging Face Hub ids are not downloaded: fetch it first (huggingface-cli download "
                               "Qwen/Qwen3-4B-Instruct-2507 --local-dir models/Qwen3-4B-Instruct-2507) and pass "
                               "model_name_or_path: models/Qwen3-4B-Instruct-2507") == 0,
           "%s", tn_errmsg());
    CHECK(tn_train_config_parse("model_config: x.json\nadapter_name_or_path: saves/x/lora/sft\n", "h.yaml", &c) == 0);
    CHECK(tn_train_config_check_model_paths(&c) != 0 &&
          strstr(tn_errmsg(), "key 'adapter_name_or_path': folder 'saves/x/lora/sft' does not exist"));
    CHECK(tn_train_config_parse("model_name_or_path: /\n", "h.yaml", &c) == 0 && tn_train_config_check_model_paths(&c) == 0);
    CHECK(tn_train_config_parse("model_name_or_path: /proc/self/status\n", "h.yaml", &c) == 0);
    CHECK(tn_train_config_check_model_paths(&c) != 0 && strstr(tn_errmsg(), "is a file; expected"));
    CHECK(tn_train_config_parse("model_config: x.json\n", "h.yaml", &c) == 0 && tn_train_config_check_model_paths(&c) == 0);
}

int main(void) {
    trainer_keys();
    full_yaml();
    defaults();
    value_forms();
    errors();
    overrides();
    finish_and_paths();
    return tl_done("test_unit_train_config");
}
