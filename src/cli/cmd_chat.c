/* cmd_chat.c -- `tandem chat CONFIG.yaml [key=value ...]` and `tandem generate CONFIG.yaml [key=value ...]
 * --prompt TEXT`: try what was trained, as `llamafactory-cli chat` does.
 *
 * The YAML is LLaMA-Factory's inference YAML: model_name_or_path, adapter_name_or_path (the LoRA output of
 * a run; merged into the weights for speed), template, default_system, and the generation keys do_sample,
 * temperature, top_p, top_k, max_new_tokens (LLaMA-Factory's defaults). Prompts go through the same
 * template code as training, so the model sees exactly the ids it was trained on. chat keeps the
 * conversation; a line "clear" starts a new one, "exit" (or end of input) leaves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "config/train_config.h"
#include "core/core.h"
#include "data/lf_dataset.h"
#include "model/generate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    tn_train_config *cfg;
    tn_model *m;
    tn_tokenizer *tok;
    lf_chat *chat;
    int32_t eos[2];
    int n_eos;
} session;

static int open_session(session *s, tn_train_config *cfg) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    if (!cfg->model_name_or_path[0]) return tn_err("%s: set model_name_or_path (an HF model folder)", cfg->source_path);
    if (!cfg->template_name[0])
        return tn_err("%s: set template (the one the model was trained with: default, qwen, qwen3, qwen3_nothink, llama3)",
                      cfg->source_path);
    char *cfg_path = tn_path_join(cfg->model_name_or_path, "config.json");
    char *tok_path = tn_path_join(cfg->model_name_or_path, "tokenizer.json");
    tn_model_config mc;
    tn_lora_config lora = {0};
    int rc = tn_model_config_load(cfg_path, &mc);
    if (rc == 0 && cfg->adapter_name_or_path[0]) rc = tn_lora_config_load(cfg->adapter_name_or_path, &lora);
    if (rc == 0) {
        s->m = tn_model_create(&mc, lora.r ? &lora : NULL, tn_backend_cpu());
        rc = tn_model_load_hf(s->m, cfg->model_name_or_path);
        if (rc == 0 && lora.r) rc = tn_model_load_adapter(s->m, cfg->adapter_name_or_path);
        if (rc == 0) tn_model_fold_lora(s->m);
    }
    if (rc == 0 && !(s->tok = tn_tokenizer_load(tok_path))) rc = -1;
    if (rc == 0 && !(s->chat = lf_chat_open(cfg->template_name, s->tok, tok_path, cfg->enable_thinking ? 1 : -1))) rc = -1;
    if (rc == 0) {
        s->eos[s->n_eos++] = lf_chat_eos(s->chat);
        int32_t eot = tn_tokenizer_token_to_id(s->tok, "<|endoftext|>");
        if (eot >= 0 && eot != s->eos[0]) s->eos[s->n_eos++] = eot;
    }
    free(cfg_path), free(tok_path);
    return rc;
}

static void close_session(session *s) {
    lf_chat_close(s->chat);
    tn_tokenizer_free(s->tok);
    tn_model_free(s->m);
}

/* The assistant's answer to turns[0..n) (n odd); malloc'd text or NULL + tn_err. */
static char *answer(session *s, const char *const *turns, int n, uint64_t seed) {
    tn_ids prompt = {0};
    if (lf_chat_prompt(s->chat, s->cfg->default_system, turns, n, &prompt) != 0) return NULL;
    const tn_train_config *c = s->cfg;
    int S = (int)prompt.n + c->max_new_tokens;
    int max_pos = s->m->cfg.max_position_embeddings;
    if (max_pos > 0 && S > max_pos) S = max_pos;
    if ((int)prompt.n >= S) {
        tn_ids_free(&prompt);
        tn_err("the conversation (%zu tokens) fills the model's %d positions: say \"clear\"", prompt.n, S);
        return NULL;
    }
    int32_t *ids = tn_xcalloc((size_t)S, sizeof *ids);
    memcpy(ids, prompt.ids, prompt.n * sizeof *ids);
    tn_acts *a = tn_acts_create(s->m, 1, S, 0);
    tn_sampling sp = {.do_sample = c->do_sample, .top_k = c->top_k, .max_new = c->max_new_tokens,
                      .n_vocab = tn_tokenizer_vocab_size(s->tok), .temperature = c->temperature, .top_p = c->top_p,
                      .seed = seed};
    int got = tn_generate(s->m, a, ids, (int)prompt.n, S, &sp, s->eos, s->n_eos);
    char *text = tn_tokenizer_decode(s->tok, ids + prompt.n, (size_t)got, 1);
    tn_acts_free(a);
    free(ids);
    tn_ids_free(&prompt);
    return text;
}

static int load_cfg(int argc, char **argv, tn_train_config *cfg, const char **prompt) {
    if (argc < 1 || strchr(argv[0], '=')) return tn_err("expected a config file first: CONFIG.yaml [key=value ...]");
    int rc = tn_train_config_load(argv[0], cfg);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (prompt && strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) *prompt = argv[++i];
        else if (!strchr(argv[i], '=')) rc = tn_err("command line: '%s' is not key=value", argv[i]);
        else rc = tn_train_config_override(cfg, argv[i]);
    }
    if (rc == 0) rc = tn_train_config_finish(cfg);
    if (rc == 0) rc = tn_train_config_check_model_paths(cfg);
    if (rc == 0) tn_train_config_print_notices(cfg, stderr); /* stdout: the answer */
    return rc;
}

int tn_cmd_generate(int argc, char **argv) {
    static tn_train_config cfg;
    const char *prompt = NULL;
    session s = {0};
    int rc = load_cfg(argc, argv, &cfg, &prompt);
    if (rc == 0 && !prompt) rc = tn_err("generate needs --prompt TEXT");
    if (rc == 0) rc = open_session(&s, &cfg);
    char *text = rc == 0 ? answer(&s, &prompt, 1, (uint64_t)cfg.seed) : NULL;
    if (text) printf("%s\n", text);
    else rc = -1;
    free(text);
    close_session(&s);
    if (rc) fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
    return rc ? 1 : 0;
}

int tn_cmd_chat(int argc, char **argv) {
    static tn_train_config cfg;
    session s = {0};
    int rc = load_cfg(argc, argv, &cfg, NULL);
    if (rc == 0) rc = open_session(&s, &cfg);
    if (rc) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        close_session(&s);
        return 1;
    }
    printf("tandem chat: %s%s%s, template %s. \"clear\" starts over, \"exit\" leaves.\n", cfg.model_name_or_path,
           cfg.adapter_name_or_path[0] ? " + " : "", cfg.adapter_name_or_path, cfg.template_name);
    char **turns = NULL;
    int n = 0;
    char line[8192];
    uint64_t seed = (uint64_t)cfg.seed ^ (uint64_t)time(NULL);
    for (;;) {
        printf("\nUser: ");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!strcmp(line, "exit")) break;
        if (!strcmp(line, "clear")) {
            for (int i = 0; i < n; i++) free(turns[i]);
            n = 0;
            printf("History has been removed.\n");
            continue;
        }
        turns = tn_xrealloc(turns, (size_t)(n + 2) * sizeof *turns);
        turns[n++] = tn_xstrdup(line);
        char *text = answer(&s, (const char *const *)turns, n, seed++);
        if (!text) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            free(turns[--n]);
            continue;
        }
        printf("Assistant: %s\n", text);
        turns[n++] = text;
    }
    for (int i = 0; i < n; i++) free(turns[i]);
    free(turns);
    close_session(&s);
    return 0;
}
