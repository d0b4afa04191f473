/* lf_template.c -- LLaMA-Factory's chat templates (template.py, register_template) and their special
 * tokens. A formatter is a list of slots; a text slot gets {{content}} (and, for user turns, {{idx}})
 * substituted and is then tokenized ON ITS OWN with special tokens recognised, exactly as
 * Template._convert_elements_to_ids does; {bos_token}/{eos_token} slots insert the ids.
 *
 * Special tokens: tokenizer_config.json beside tokenizer.json gives bos_token, eos_token, pad_token,
 * add_bos_token and split_special_tokens (true: special tokens written in text are not recognised); then fix_special_tokens: replace_eos makes the first stop word the EOS, a missing EOS
 * becomes <|endoftext|>, a missing PAD becomes the EOS. A token the tokenizer does not have is refused
 * (LF would add it and need resize_vocab). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "data/lf_internal.h"

#define T(s) {LF_SLOT_TEXT, s}
#define EOS {LF_SLOT_EOS, NULL}
#define BOS {LF_SLOT_BOS, NULL}
#define F1(a) {{a}, 1}
#define F3(a, b, c) {{a, b, c}, 3}

#define QWEN_USER "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n"
#define QWEN_OBS "<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
#define LLAMA3_USER "<|start_header_id|>user<|end_header_id|>\n\n{{content}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
#define LLAMA3_OBS "<|start_header_id|>ipython<|end_header_id|>\n\n{{content}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"

/* name, user, assistant, system, observation, function, prefix, tools, default system, stop0, replace_eos,
 * reasoning, vision. Unset observation = user, function = assistant slots (register_template's defaults). The
 * vision templates are qwen / qwen3 / qwen3_nothink with LF's Qwen2-VL / Qwen3-VL mm_plugin (qwen2_vl keeps
 * Qwen2-VL's own default system prompt). */
static const lf_template_def k_templates[] = {
    {"default", F3(T("Human: {{content}}"), EOS, T("\nAssistant:")), F3(T("{{content}}"), EOS, T("\n")),
     F3(T("System: {{content}}"), EOS, T("\n")), F3(T("Human: {{content}}"), EOS, T("\nAssistant:")),
     F3(T("{{content}}"), EOS, T("\n")), {{{0, NULL}}, 0}, LF_TOOLS_DEFAULT, "", NULL, 0, 0, 0},
    {"qwen", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")), F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")),
     F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")), {{{0, NULL}}, 0}, LF_TOOLS_QWEN,
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "<|im_end|>", 1, 0, 0},
    {"qwen3", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")), F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")),
     F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")), {{{0, NULL}}, 0}, LF_TOOLS_QWEN, "", "<|im_end|>", 1, 1, 0},
    {"qwen3_nothink", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")),
     F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")), F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")),
     {{{0, NULL}}, 0}, LF_TOOLS_QWEN, "", "<|im_end|>", 1, 0, 0},
    {"llama3", F1(T(LLAMA3_USER)), F1(T("{{content}}<|eot_id|>")),
     F1(T("<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>")), F1(T(LLAMA3_OBS)),
     F1(T("{{content}}<|eot_id|>")), F1(BOS), LF_TOOLS_LLAMA3, "", "<|eot_id|>", 1, 0, 0},
    {"qwen2_vl", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")), F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")),
     F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")), {{{0, NULL}}, 0}, LF_TOOLS_QWEN, "You are a helpful assistant.",
     "<|im_end|>", 1, 0, 1},
    {"qwen3_vl", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")), F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")),
     F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")), {{{0, NULL}}, 0}, LF_TOOLS_QWEN, "", "<|im_end|>", 1, 1, 1},
    {"qwen3_vl_nothink", F1(T(QWEN_USER)), F1(T("{{content}}<|im_end|>\n")),
     F1(T("<|im_start|>system\n{{content}}<|im_end|>\n")), F1(T(QWEN_OBS)), F1(T("{{content}}<|im_end|>\n")),
     {{{0, NULL}}, 0}, LF_TOOLS_QWEN, "", "<|im_end|>", 1, 0, 1},
};
const char *const lf_template_names = "default, qwen, qwen3, qwen3_nothink, llama3, qwen2_vl, qwen3_vl, qwen3_vl_nothink";

/* A token field of tokenizer_config.json: "text", {"content": "text", ...} or null. */
static int config_token(const char *path, const lj_val *cfg, const char *key, char **out) {
    const lj_val *v = lj_get(cfg, key);
    *out = NULL;
    if (!v || v->type == LJ_NULL) return 0;
    if (v->type == LJ_OBJ) v = lj_get(v, "content");
    if (!v || v->type != LJ_STR || v->n == 0)
        return tn_err("%s: %s must be a token string, {\"content\": ...} or null", path, key);
    *out = tn_xstrdup(v->s);
    return 0;
}

static int token_id(const tn_tokenizer *tok, const char *tokpath, const char *name, const char *why, int32_t *id) {
    *id = tn_tokenizer_token_to_id(tok, name);
    if (*id < 0)
        return tn_err("%s: has no token '%s' (%s; LLaMA-Factory would add it and need resize_vocab)", tokpath, name, why);
    return 0;
}

int lf_template_init(lf_template *t, const char *name, const tn_tokenizer *tok, const char *tokenizer_path,
                     int enable_thinking) {
    memset(t, 0, sizeof *t);
    t->bos_id = t->eos_id = t->pad_id = t->image_pad_id = -1;
    for (size_t i = 0; i < sizeof k_templates / sizeof *k_templates; i++)
        if (name && strcmp(name, k_templates[i].name) == 0) t->def = &k_templates[i];
    if (!t->def)
        return tn_err("template: '%s' is not supported (tandem has %s)", name ? name : "(none)", lf_template_names);
    if (!tokenizer_path) return tn_err("lf_load: tokenizer_path is required (its tokenizer_config.json gives the EOS)");
    t->tok = tok;
    t->enable_thinking = enable_thinking >= 0;
    t->parse_special = 1;

    /* tokenizer_config.json next to tokenizer.json (optional, as in a bare tokenizer folder) */
    const char *slash = strrchr(tokenizer_path, '/');
    char *dir = slash ? tn_xstrdup(tokenizer_path) : tn_xstrdup(".");
    if (slash) dir[slash - tokenizer_path] = '\0';
    if (slash == tokenizer_path) strcpy(dir, "/");
    char *cfg_path = tn_path_join(dir, "tokenizer_config.json");
    free(dir);
    char *bos = NULL, *eos = NULL, *pad = NULL, *text = NULL;
    lf_arena a = {0};
    int rc = 0, add_bos = -1, llama_class = 0;
    if (tn_file_exists(cfg_path)) {
        size_t len;
        text = tn_read_file(cfg_path, &len, (size_t)64 << 20);
        lj_error err;
        const lj_val *cfg = text ? lj_parse(&a, text, len, &err) : NULL;
        if (!text) rc = -1;
        else if (!cfg) rc = tn_err("%s: invalid JSON at byte %zu: %s", cfg_path, err.off, err.msg);
        else if (cfg->type != LJ_OBJ) rc = tn_err("%s: top level must be an object", cfg_path);
        if (rc == 0 && (config_token(cfg_path, cfg, "bos_token", &bos) || config_token(cfg_path, cfg, "eos_token", &eos) ||
                        config_token(cfg_path, cfg, "pad_token", &pad)))
            rc = -1;
        if (rc == 0) {
            const lj_val *ab = lj_get(cfg, "add_bos_token"), *cls = lj_get(cfg, "tokenizer_class");
            const lj_val *split = lj_get(cfg, "split_special_tokens");
            if (ab && (ab->type == LJ_TRUE || ab->type == LJ_FALSE)) add_bos = ab->type == LJ_TRUE;
            if (split && split->type == LJ_TRUE) t->parse_special = 0;
            llama_class = cls && cls->type == LJ_STR && strncmp(cls->s, "Llama", 5) == 0;
        }
    }
    if (rc == 0 && bos) {
        t->bos_id = tn_tokenizer_token_to_id(tok, bos);
        if (t->bos_id < 0) rc = tn_err("%s: bos_token '%s' is not a token of %s", cfg_path, bos, tokenizer_path);
    }
    if (rc == 0 && eos) {
        t->eos_id = tn_tokenizer_token_to_id(tok, eos);
        if (t->eos_id < 0) rc = tn_err("%s: eos_token '%s' is not a token of %s", cfg_path, eos, tokenizer_path);
    }
    if (rc == 0 && t->def->replace_eos) {  /* the first stop word becomes the EOS */
        free(eos);
        eos = tn_xstrdup(t->def->stop0);
        rc = token_id(tok, tokenizer_path, eos, "the template's stop word, made the EOS", &t->eos_id);
    }
    if (rc == 0 && t->eos_id < 0) {
        free(eos);
        eos = tn_xstrdup("<|endoftext|>");
        rc = token_id(tok, tokenizer_path, eos, "the EOS LLaMA-Factory adds when the tokenizer has none", &t->eos_id);
    }
    if (rc == 0) {
        if (pad) {
            t->pad_id = tn_tokenizer_token_to_id(tok, pad);
            if (t->pad_id < 0) rc = tn_err("%s: pad_token '%s' is not a token of %s", cfg_path, pad, tokenizer_path);
        } else {
            t->pad_id = t->eos_id;
        }
    }
    /* LlamaTokenizer(Fast) adds BOS unless told otherwise; the others do not */
    t->add_bos = add_bos >= 0 ? add_bos : llama_class;
    if (rc == 0) {
        t->bos_text = bos, bos = NULL;
        /* pre-training appends the EOS as text; LF spells out <|end_of_text|> for llama3 */
        t->eos_text = tn_xstrdup(strcmp(t->def->name, "llama3") == 0 ? "<|end_of_text|>" : eos);
        if (t->def->reasoning) {
            static const char think[] = "<think>\n\n</think>\n\n";
            tn_ids ids = {0};
            if (tn_tokenizer_encode(tok, think, sizeof think - 1, t->parse_special, &ids) != 0) rc = -1;
            t->think_ids = ids.ids, t->n_think = ids.n;
        }
        /* the vision tokens LF's mm_plugin writes must be single tokens, or the model finds no image positions */
        static const char *const vision[] = {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"};
        int32_t vid = -1;
        for (int k = 0; k < 3 && rc == 0 && t->def->vision; k++)
            rc = token_id(tok, tokenizer_path, vision[k], "a vision token of the Qwen-VL templates", &vid);
        if (t->def->vision) t->image_pad_id = vid;  /* the last one looked up */
        time_t now = time(NULL);
        struct tm tmv;
        if (localtime_r(&now, &tmv)) strftime(t->date, sizeof t->date, "%d %b %Y", &tmv);
    }
    lf_arena_free(&a);
    free(text), free(cfg_path), free(bos), free(eos), free(pad);
    if (rc != 0) lf_template_free(t);
    return rc;
}

void lf_template_free(lf_template *t) {
    free(t->eos_text);
    free(t->bos_text);
    free(t->think_ids);
    t->eos_text = t->bos_text = NULL;
    t->think_ids = NULL;
}

static const char *find(const char *h, size_t hn, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= hn; i++)
        if (h[i] == needle[0] && memcmp(h + i, needle, k) == 0) return h + i;
    return NULL;
}

int lf_fmt_encode(const lf_template *t, const lf_fmt *f, const char *content, size_t n, int idx, lf_buf *sb, tn_ids *out) {
    for (int k = 0; k < f->n; k++) {
        const lf_slot *s = &f->s[k];
        if (s->kind == LF_SLOT_BOS) {
            if (t->bos_id >= 0 && tn_ids_push(out, t->bos_id) != 0) return -1;
            continue;
        }
        if (s->kind == LF_SLOT_EOS) {
            if (tn_ids_push(out, t->eos_id) != 0) return -1;
            continue;
        }
        /* str.replace("{{content}}", content, 1), then str.replace("{{idx}}", idx, 1) for user turns */
        sb->n = 0;
        size_t sl = strlen(s->text);
        const char *ph = find(s->text, sl, "{{content}}");
        if (ph) {
            lf_buf_put(sb, s->text, (size_t)(ph - s->text));
            lf_buf_put(sb, content, n);
            lf_buf_puts(sb, ph + 11);
        } else {
            lf_buf_put(sb, s->text, sl);
        }
        if (idx >= 0) {
            const char *ip = find(sb->p, sb->n, "{{idx}}");
            if (ip) {
                char num[16];
                int nl = snprintf(num, sizeof num, "%d", idx);
                size_t at = (size_t)(ip - sb->p), tail = sb->n - at - 7;
                char *rest = tn_xmalloc(tail + 1);
                memcpy(rest, sb->p + at + 7, tail);
                sb->n = at;
                lf_buf_put(sb, num, (size_t)nl);
                lf_buf_put(sb, rest, tail);
                free(rest);
            }
        }
        if (sb->n && tn_tokenizer_encode(t->tok, sb->p, sb->n, t->parse_special, out) != 0) return -1;
    }
    return 0;
}
