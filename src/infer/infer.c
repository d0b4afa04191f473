/* infer.c -- see infer.h. */
#include "infer/infer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "trainer/memory_check.h"

static void add_stop(tn_infer *s, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < s->n_stop; i++)
        if (s->stop[i] == id) return;
    if (s->n_stop < TN_MAX_STOP) s->stop[s->n_stop++] = id;
}

/* eos_token_id of generation_config.json (a number or a list); an absent file adds nothing */
static int read_generation_config(tn_infer *s, const char *dir) {
    char *path = tn_path_join(dir, "generation_config.json");
    int rc = 0;
    if (tn_file_exists(path)) {
        size_t n;
        char *text = tn_read_file(path, &n, (size_t)1 << 20);
        cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
        if (!j) rc = text ? tn_err("%s: not valid JSON", path) : -1;
        const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "eos_token_id") : NULL;
        if (cJSON_IsNumber(e)) add_stop(s, (int32_t)e->valuedouble);
        else if (cJSON_IsArray(e))
            for (const cJSON *x = e->child; x; x = x->next)
                if (cJSON_IsNumber(x)) add_stop(s, (int32_t)x->valuedouble);
        cJSON_Delete(j);
        free(text);
    }
    free(path);
    return rc;
}

int tn_infer_open(tn_infer *s, const tn_train_config *cfg, int merge_lora) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    if (!cfg->model_name_or_path[0]) return tn_err("%s: set model_name_or_path (an HF model folder)", cfg->source_path);
    if (!cfg->template_name[0])
        return tn_err("%s: set template (the one the model was trained with: default, qwen, qwen3, qwen3_nothink, llama3)",
                      cfg->source_path);
    char *cfg_path = tn_path_join(cfg->model_name_or_path, "config.json");
    s->tok_path = tn_path_join(cfg->model_name_or_path, "tokenizer.json");
    tn_model_config mc;
    tn_lora_config lora = {0};
    int rc = tn_model_config_load(cfg_path, &mc);
    if (rc == 0 && cfg->adapter_name_or_path[0]) rc = tn_lora_config_load(cfg->adapter_name_or_path, &lora);
    if (rc == 0) rc = tn_memory_check_create(cfg_path, &mc, lora.r > 0);
    if (rc == 0) {
        lora.dropout = 0;
        s->m = tn_model_create(&mc, lora.r ? &lora : NULL, tn_backend_cpu());
        rc = tn_model_load_hf(s->m, cfg->model_name_or_path);
        if (rc == 0 && lora.r) rc = tn_model_load_adapter(s->m, cfg->adapter_name_or_path);
        if (rc == 0 && merge_lora) tn_model_fold_lora(s->m);
    }
    if (rc == 0 && !(s->tok = tn_tokenizer_load(s->tok_path))) rc = -1;
    if (rc == 0 && !(s->chat = lf_chat_open(cfg->template_name, s->tok, s->tok_path, cfg->enable_thinking ? 1 : -1)))
        rc = -1;
    if (rc == 0) {
        s->eos = lf_chat_eos(s->chat);
        add_stop(s, s->eos);
        rc = read_generation_config(s, cfg->model_name_or_path);
        s->n_vocab = tn_tokenizer_vocab_size(s->tok);
    }
    free(cfg_path);
    return rc;
}

void tn_infer_close(tn_infer *s) {
    lf_chat_close(s->chat);
    tn_tokenizer_free(s->tok);
    tn_model_free(s->m);
    free(s->tok_path);
    memset(s, 0, sizeof *s);
}

tn_sampling tn_infer_sampling(const tn_infer *s, uint64_t seed) {
    const tn_train_config *c = s->cfg;
    return (tn_sampling){.do_sample = c->do_sample, .temperature = c->temperature, .top_p = c->top_p,
                         .top_k = c->top_k, .repetition_penalty = c->repetition_penalty, .max_new = c->max_new_tokens,
                         .n_vocab = s->n_vocab, .seed = seed};
}

int tn_infer_context(const tn_infer *s, int cap) {
    int ctx = s->m->cfg.max_position_embeddings > 0 ? s->m->cfg.max_position_embeddings : 2048;
    return cap > 0 && ctx > cap ? cap : ctx;
}

int tn_infer_prompt(const tn_infer *s, const char *system, const char *const *turns, int n, tn_ids *out) {
    return lf_chat_prompt(s->chat, system ? system : s->cfg->default_system, turns, n, out);
}

int tn_infer_prompt_mm(const tn_infer *s, const char *system, const char *const *turns, int n, const int *img_tokens,
                       int n_img, tn_ids *out) {
    return lf_chat_prompt_mm(s->chat, system ? system : s->cfg->default_system, turns, n, img_tokens, n_img, out);
}

/* length of s[0..n) without a trailing U+FFFD (what a character cut between tokens decodes to for now) */
static size_t settled(const char *s, size_t n) {
    while (n >= 3 && (unsigned char)s[n - 3] == 0xEF && (unsigned char)s[n - 2] == 0xBF && (unsigned char)s[n - 1] == 0xBD)
        n -= 3;
    return n;
}

char *tn_text_next(tn_text_stream *ts, const tn_tokenizer *tok, const int32_t *ids, int n, int final) {
    char *all = tn_tokenizer_decode(tok, ids, (size_t)n, 1);
    if (!all) return tn_xstrdup("");
    size_t len = strlen(all), upto = final ? len : settled(all, len);
    char *out = tn_xstrdup(upto > ts->emitted ? all + ts->emitted : "");
    out[upto > ts->emitted ? upto - ts->emitted : 0] = '\0';
    if (upto > ts->emitted) ts->emitted = upto;
    free(all);
    return out;
}
