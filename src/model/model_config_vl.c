/* model_config_vl.c -- config.json of the Qwen vision-language models (qwen2_vl, qwen2_5_vl, qwen3_vl).
 *
 * Owns: where each setting lives in the three layouts (released Qwen2-VL / Qwen2.5-VL: text keys at the top level,
 * newer transformers also in "text_config"; Qwen3-VL: "text_config" only), the vision_config keys of each model
 * (Qwen2-VL names the vision width embed_dim and the merger output hidden_size; the later ones hidden_size and
 * out_hidden_size), mrope_section, the special token ids, and writing the released layout back. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model_config.h"

int tn_vl_kind(const char *t) {
    if (strcmp(t, "qwen2_vl") == 0) return TN_VL_QWEN2;
    if (strcmp(t, "qwen2_5_vl") == 0) return TN_VL_QWEN25;
    if (strcmp(t, "qwen3_vl") == 0) return TN_VL_QWEN3;
    return TN_VL_NONE;
}

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

/* A non-negative integer key of object `o` (named `where` in messages); absent -> def, or required when def < 0. */
static int geti(const cJSON *o, const char *key, int def, const char *path, const char *where, int *out) {
    const cJSON *j = get(o, key);
    if (!j) {
        if (def < 0) return tn_err("%s: %s has no key '%s'", path, where, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > INT_MAX || j->valuedouble != floor(j->valuedouble))
        return tn_err("%s: %s key '%s' must be a non-negative integer", path, where, key);
    *out = (int)j->valuedouble;
    return 0;
}

/* An integer list key into out[cap]; absent -> empty. */
static int get_list(const cJSON *o, const char *key, int cap, const char *path, const char *where, int *out, int *n) {
    const cJSON *j = get(o, key), *it;
    *n = 0;
    if (!j) return 0;
    if (!cJSON_IsArray(j)) return tn_err("%s: %s key '%s' must be a list of integers", path, where, key);
    cJSON_ArrayForEach(it, j) {
        if (*n >= cap || !cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble))
            return tn_err("%s: %s key '%s' must be a list of at most %d non-negative integers", path, where, key, cap);
        out[(*n)++] = (int)it->valuedouble;
    }
    return 0;
}

static int parse_vision(const cJSON *vd, const char *path, tn_vision_config *v) {
    const char *W = "vision_config";
    if (!cJSON_IsObject(vd)) return tn_err("%s: missing key 'vision_config' (an object)", path);
    int in_chans = 3;
    if (geti(vd, "depth", -1, path, W, &v->depth) || geti(vd, "num_heads", -1, path, W, &v->heads) ||
        geti(vd, "in_chans", 3, path, W, &in_chans) || geti(vd, "in_channels", in_chans, path, W, &v->in_ch) ||
        geti(vd, "spatial_merge_size", 2, path, W, &v->merge) || geti(vd, "temporal_patch_size", 2, path, W, &v->tpatch))
        return -1;
    const char *act_def = "quick_gelu";
    if (v->kind == TN_VL_QWEN2) {
        const cJSON *r = get(vd, "mlp_ratio");
        if (geti(vd, "embed_dim", -1, path, W, &v->E) || geti(vd, "hidden_size", -1, path, W, &v->out_hidden) ||
            geti(vd, "patch_size", 14, path, W, &v->patch))
            return -1;
        if (r && (!cJSON_IsNumber(r) || !(r->valuedouble > 0)))
            return tn_err("%s: vision_config key 'mlp_ratio' must be a positive number", path);
        v->I = (int)(v->E * (r ? r->valuedouble : 4.0));
    } else {
        if (geti(vd, "hidden_size", -1, path, W, &v->E) || geti(vd, "out_hidden_size", -1, path, W, &v->out_hidden) ||
            geti(vd, "intermediate_size", -1, path, W, &v->I) ||
            geti(vd, "patch_size", v->kind == TN_VL_QWEN3 ? 16 : 14, path, W, &v->patch))
            return -1;
        act_def = v->kind == TN_VL_QWEN3 ? "gelu_pytorch_tanh" : "silu";
    }
    if (v->kind == TN_VL_QWEN25 &&
        (geti(vd, "window_size", 112, path, W, &v->window) || geti(vd, "tokens_per_second", 2, path, W, &v->tokens_per_second) ||
         get_list(vd, "fullatt_block_indexes", TN_VL_MAX_IDX, path, W, v->full_idx, &v->n_full)))
        return -1;
    if (v->kind == TN_VL_QWEN3 &&
        (geti(vd, "num_position_embeddings", -1, path, W, &v->num_pos) ||
         get_list(vd, "deepstack_visual_indexes", TN_VL_MAX_IDX, path, W, v->deep_idx, &v->n_deep)))
        return -1;
    const cJSON *act = get(vd, "hidden_act");
    if (act && !cJSON_IsString(act)) return tn_err("%s: vision_config key 'hidden_act' must be a string", path);
    snprintf(v->act, sizeof v->act, "%s", act ? act->valuestring : act_def);
    return 0;
}

/* mrope_section from rope_scaling (or rope_parameters) of text_config or the top level. */
static int parse_mrope(const cJSON *text, const cJSON *root, const char *path, tn_model_config *c) {
    const cJSON *rs = get(text, "rope_scaling");
    if (!rs) rs = get(text, "rope_parameters");
    if (!rs) rs = get(root, "rope_scaling");
    const cJSON *sec = cJSON_IsObject(rs) ? get(rs, "mrope_section") : NULL;
    int n = 0;
    if (!sec) return tn_err("%s: rope_scaling has no 'mrope_section' (a vision-language model needs one)", path);
    if (get_list(rs, "mrope_section", 3, path, "rope_scaling", c->vis.mrope, &n) != 0 || n != 3)
        return tn_err("%s: rope_scaling key 'mrope_section' must be 3 integers (t, h, w)", path);
    const cJSON *il = get(rs, "mrope_interleaved");
    c->vis.interleaved = c->vis.kind == TN_VL_QWEN3 || cJSON_IsTrue(il);
    const cJSON *th = get(rs, "rope_theta");
    if (!get(text, "rope_theta") && cJSON_IsNumber(th)) c->rope_theta = th->valuedouble;
    return 0;
}

int tn_vl_config_parse(const cJSON *root, const char *path, tn_model_config *c,
                       int (*parse_text)(const cJSON *text, const cJSON *root, const char *path, tn_model_config *c)) {
    tn_vision_config *v = &c->vis;
    v->kind = tn_vl_kind(c->model_type);
    const cJSON *text = get(root, "text_config");
    if (text && !cJSON_IsObject(text)) return tn_err("%s: key 'text_config' must be an object", path);
    v->text_nested = text && !get(root, "hidden_size");
    if (!text) text = root;
    if (parse_text(text, root, path, c) || parse_mrope(text, root, path, c) ||
        parse_vision(get(root, "vision_config"), path, v))
        return -1;
    const char *W = "config";
    return geti(root, "image_token_id", 151655, path, W, &v->image_token_id) ||
                   geti(root, "video_token_id", 151656, path, W, &v->video_token_id) ||
                   geti(root, "vision_start_token_id", 151652, path, W, &v->vision_start_token_id) ||
                   geti(root, "vision_end_token_id", 151653, path, W, &v->vision_end_token_id) ||
                   geti(root, "vision_token_id", 151654, path, W, &v->vision_token_id)
               ? -1
               : 0;
}

static int check_idx(const char *path, const char *key, const int *idx, int n, int lim, const char *what) {
    for (int i = 0; i < n; i++)
        if (idx[i] >= lim) return tn_err("%s: vision_config key '%s': %d is not a %s index (< %d)", path, key, idx[i], what, lim);
    return 0;
}

int tn_vl_config_check(const tn_model_config *c, const char *path) {
    const tn_vision_config *v = &c->vis;
    if (v->kind == TN_VL_NONE) return 0;
    if (v->depth < 1 || v->E < 1 || v->I < 1 || v->heads < 1 || v->in_ch < 1 || v->patch < 1 || v->merge < 1 ||
        v->tpatch < 1)
        return tn_err("%s: vision_config: depth, widths, heads, in_channels, patch, merge and temporal patch sizes must "
                      "be positive", path);
    if (v->E % v->heads || (v->E / v->heads) % 4)
        return tn_err("%s: vision_config: width %d over %d heads must give a head size that is a multiple of 4 (2-D "
                      "rotary)", path, v->E, v->heads);
    if (v->out_hidden != c->hidden_size)
        return tn_err("%s: vision_config: merger output %d differs from the text hidden_size %d", path, v->out_hidden,
                      c->hidden_size);
    int half = c->head_dim / 2, s = v->mrope[0] + v->mrope[1] + v->mrope[2];
    if (v->mrope[0] < 0 || v->mrope[1] < 0 || v->mrope[2] < 0 || (!v->interleaved && s != half) ||
        (v->interleaved && (3 * v->mrope[1] > half + 1 || 3 * v->mrope[2] > half + 2)))
        return tn_err("%s: rope_scaling key 'mrope_section' [%d, %d, %d] does not fit head_dim %d (sections sum to %d)",
                      path, v->mrope[0], v->mrope[1], v->mrope[2], c->head_dim, half);
    if (strcmp(v->act, "quick_gelu") && strcmp(v->act, "gelu_pytorch_tanh") && strcmp(v->act, "gelu") &&
        strcmp(v->act, "silu"))
        return tn_err("%s: vision_config key 'hidden_act': \"%.20s\" is not supported (quick_gelu, gelu_pytorch_tanh, "
                      "gelu, silu)", path, v->act);
    if (v->kind == TN_VL_QWEN3) {
        int g = (int)lround(sqrt((double)v->num_pos));
        if (v->num_pos < 1 || g * g != v->num_pos)
            return tn_err("%s: vision_config key 'num_position_embeddings' must be a square, got %d", path, v->num_pos);
        if (v->n_deep > c->num_hidden_layers)
            return tn_err("%s: vision_config: %d deepstack layers but %d text layers", path, v->n_deep, c->num_hidden_layers);
    }
    if (v->kind == TN_VL_QWEN25 && (v->window < v->merge * v->patch || v->window % (v->merge * v->patch)))
        return tn_err("%s: vision_config key 'window_size' %d must be a positive multiple of %d (merge x patch)", path,
                      v->window, v->merge * v->patch);
    return check_idx(path, "deepstack_visual_indexes", v->deep_idx, v->n_deep, v->depth, "vision block") ||
                   check_idx(path, "fullatt_block_indexes", v->full_idx, v->n_full, v->depth, "vision block")
               ? -1
               : 0;
}

/* ---- writing ---- */

static cJSON *int_list(const int *x, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

static void add_text(cJSON *o, const tn_model_config *c) {
    const tn_vision_config *v = &c->vis;
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->num_key_value_heads);
    if (v->kind == TN_VL_QWEN3) cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    if (v->kind == TN_VL_QWEN3) cJSON_AddBoolToObject(o, "attention_bias", c->attention_bias);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(o, "initializer_range", c->initializer_range);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(o, "bos_token_id", c->bos_token_id);
    if (c->eos_token_id >= 0) cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_id);
    cJSON_AddBoolToObject(o, "use_cache", 0);
    cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    cJSON_AddStringToObject(o, "torch_dtype", c->torch_dtype[0] ? c->torch_dtype : "float32");
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    if (v->kind != TN_VL_QWEN3) cJSON_AddStringToObject(rs, "type", "mrope");
    cJSON_AddStringToObject(rs, "rope_type", "default");
    cJSON_AddItemToObject(rs, "mrope_section", int_list(v->mrope, 3));
    if (v->interleaved) cJSON_AddBoolToObject(rs, "mrope_interleaved", 1);
}

static cJSON *vision_json(const tn_model_config *c) {
    const tn_vision_config *v = &c->vis;
    cJSON *o = cJSON_CreateObject();
    static const char *const types[] = {"", "qwen2_vl", "qwen2_5_vl", "qwen3_vl"};
    cJSON_AddStringToObject(o, "model_type", types[v->kind]);
    cJSON_AddNumberToObject(o, "depth", v->depth);
    cJSON_AddNumberToObject(o, "num_heads", v->heads);
    cJSON_AddNumberToObject(o, "in_channels", v->in_ch);
    if (v->kind != TN_VL_QWEN3) cJSON_AddNumberToObject(o, "in_chans", v->in_ch);
    cJSON_AddNumberToObject(o, "patch_size", v->patch);
    cJSON_AddNumberToObject(o, "spatial_merge_size", v->merge);
    cJSON_AddNumberToObject(o, "temporal_patch_size", v->tpatch);
    cJSON_AddStringToObject(o, "hidden_act", v->act);
    cJSON_AddNumberToObject(o, "initializer_range", c->initializer_range);
    if (v->kind == TN_VL_QWEN2) {
        cJSON_AddNumberToObject(o, "embed_dim", v->E);
        cJSON_AddNumberToObject(o, "hidden_size", v->out_hidden);
        cJSON_AddNumberToObject(o, "mlp_ratio", (double)v->I / v->E);
        return o;
    }
    cJSON_AddNumberToObject(o, "hidden_size", v->E);
    cJSON_AddNumberToObject(o, "out_hidden_size", v->out_hidden);
    cJSON_AddNumberToObject(o, "intermediate_size", v->I);
    if (v->kind == TN_VL_QWEN25) {
        cJSON_AddNumberToObject(o, "window_size", v->window);
        cJSON_AddItemToObject(o, "fullatt_block_indexes", int_list(v->full_idx, v->n_full));
        cJSON_AddNumberToObject(o, "tokens_per_second", v->tokens_per_second);
    } else {
        cJSON_AddNumberToObject(o, "num_position_embeddings", v->num_pos);
        cJSON_AddItemToObject(o, "deepstack_visual_indexes", int_list(v->deep_idx, v->n_deep));
    }
    return o;
}

void tn_vl_config_write(void *file, const tn_model_config *c) {
    const tn_vision_config *v = &c->vis;
    static const char *const archs[] = {"", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                                        "Qwen3VLForConditionalGeneration"};
    cJSON *o = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(archs[v->kind]));
    cJSON_AddStringToObject(o, "model_type", c->model_type);
    if (v->kind != TN_VL_QWEN3) add_text(o, c); /* released Qwen2(.5)-VL layout: text keys at the top level too */
    else cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(o, "image_token_id", v->image_token_id);
    cJSON_AddNumberToObject(o, "video_token_id", v->video_token_id);
    cJSON_AddNumberToObject(o, "vision_start_token_id", v->vision_start_token_id);
    cJSON_AddNumberToObject(o, "vision_end_token_id", v->vision_end_token_id);
    cJSON_AddNumberToObject(o, "vision_token_id", v->vision_token_id);
    cJSON *t = cJSON_AddObjectToObject(o, "text_config");
    add_text(t, c);
    char mt[32];
    snprintf(mt, sizeof mt, "%s_text", c->model_type);
    cJSON_AddStringToObject(t, "model_type", mt);
    cJSON_AddItemToObject(o, "vision_config", vision_json(c));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) tn_die("out of memory (config.json)");
    fputs(s, (FILE *)file);
    fputc('\n', (FILE *)file);
    free(s);
}

int tn_vl_write_preprocessor_config(const tn_model_config *c, const char *path) {
    const tn_vision_config *v = &c->vis;
    if (v->kind == TN_VL_NONE) return 0;
    /* the released checkpoints' values: Qwen2(.5)-VL CLIP mean/std, 56*56 .. 28*28*16384 pixels; Qwen3-VL 0.5 and
     * 65536 .. 16777216 pixels */
    int q3 = v->kind == TN_VL_QWEN3;
    static const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073}, clip_std[3] = {0.26862954, 0.26130258, 0.27577711};
    double half[3] = {0.5, 0.5, 0.5};
    long long lo = q3 ? 65536 : 3136, hi = q3 ? 16777216 : 12845056;
    cJSON *o = cJSON_CreateObject(), *size = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "min_pixels", (double)lo);
    cJSON_AddNumberToObject(o, "max_pixels", (double)hi);
    cJSON_AddNumberToObject(size, "shortest_edge", (double)lo);
    cJSON_AddNumberToObject(size, "longest_edge", (double)hi);
    cJSON_AddItemToObject(o, "size", size);
    cJSON_AddNumberToObject(o, "patch_size", v->patch);
    cJSON_AddNumberToObject(o, "temporal_patch_size", v->tpatch);
    cJSON_AddNumberToObject(o, "merge_size", v->merge);
    cJSON_AddItemToObject(o, "image_mean", cJSON_CreateDoubleArray(q3 ? half : clip_mean, 3));
    cJSON_AddItemToObject(o, "image_std", cJSON_CreateDoubleArray(q3 ? half : clip_std, 3));
    cJSON_AddBoolToObject(o, "do_resize", 1);
    cJSON_AddNumberToObject(o, "resample", 3);
    cJSON_AddBoolToObject(o, "do_rescale", 1);
    cJSON_AddNumberToObject(o, "rescale_factor", 1.0 / 255);
    cJSON_AddBoolToObject(o, "do_normalize", 1);
    cJSON_AddBoolToObject(o, "do_convert_rgb", 1);
    cJSON_AddStringToObject(o, "image_processor_type", "Qwen2VLImageProcessor");
    cJSON_AddStringToObject(o, "processor_class", v->kind == TN_VL_QWEN2    ? "Qwen2VLProcessor"
                                                  : v->kind == TN_VL_QWEN25 ? "Qwen2_5_VLProcessor"
                                                                            : "Qwen3VLProcessor");
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return tn_err("%s: out of memory", path);
    int rc = tn_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}
