/* model_config.c -- see model_config.h.
 *
 * JSON null counts as absent (HF writes e.g. "num_key_value_heads": null to mean "use the default").
 * Unknown keys are ignored: HF configs carry many tandem has no use for. */
#include "model/model_config.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MC_MAX_FILE ((size_t)16 << 20)

enum { MC_LLAMA, MC_QWEN2, MC_MISTRAL, MC_QWEN3, MC_NTYPES };
static const char *const k_types[MC_NTYPES] = {"llama", "qwen2", "mistral", "qwen3"};
static const char *const k_archs[MC_NTYPES] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM",
                                               "Qwen3ForCausalLM"};
#define MC_ACCEPTED "llama, qwen2, qwen3, mistral, qwen2_vl, qwen2_5_vl, qwen3_vl"

/* The text decoder's kind; a VL model_type maps to its decoder's (Qwen2-VL/2.5-VL: qwen2, Qwen3-VL: qwen3). */
static int type_index(const char *t) {
    for (int i = 0; i < MC_NTYPES; i++)
        if (strcmp(t, k_types[i]) == 0) return i;
    int vl = tn_vl_kind(t);
    return vl == TN_VL_NONE ? -1 : vl == TN_VL_QWEN3 ? MC_QWEN3 : MC_QWEN2;
}

/* Control characters of a quoted string become '?': an error stays one line whatever the file holds. */
static char *mask_controls(char *s) {
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return s;
}

/* What a rejected value was, for the message. */
static const char *describe(const cJSON *j, char buf[static 64]) {
    if (cJSON_IsNumber(j)) snprintf(buf, 64, "%.17g", j->valuedouble);
    else if (cJSON_IsString(j)) snprintf(buf, 64, "\"%.40s\"", j->valuestring), mask_controls(buf);
    else if (cJSON_IsBool(j)) snprintf(buf, 64, "%s", cJSON_IsTrue(j) ? "true" : "false");
    else snprintf(buf, 64, "%s", cJSON_IsArray(j) ? "an array" : cJSON_IsObject(j) ? "an object" : "null");
    return buf;
}

static const cJSON *get(const cJSON *root, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static int is_int_in(const cJSON *j, double lo) {
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble <= INT_MAX && j->valuedouble == floor(j->valuedouble);
}

/* A positive integer; absent -> def, or an error when def < 0 (required). */
static int get_size(const cJSON *root, const char *key, int def, const char *path, int *out) {
    const cJSON *j = get(root, key);
    char b[64];
    if (!j) {
        if (def < 0) return tn_err("%s: missing required key '%s'", path, key);
        *out = def;
        return 0;
    }
    if (cJSON_IsNumber(j) && j->valuedouble > INT_MAX && j->valuedouble == floor(j->valuedouble))
        return tn_err("%s: key '%s' is %s, more than the largest size tandem supports (%d)", path, key, describe(j, b),
                      INT_MAX);
    if (!is_int_in(j, 1)) return tn_err("%s: key '%s' must be a positive integer, got %s", path, key, describe(j, b));
    *out = (int)j->valuedouble;
    return 0;
}

static int get_double(const cJSON *root, const char *key, double def, const char *path, double *out) {
    const cJSON *j = get(root, key);
    char b[64];
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return tn_err("%s: key '%s' must be a number, got %s", path, key, describe(j, b));
    *out = j->valuedouble;
    return 0;
}

static int get_bool(const cJSON *root, const char *key, const char *path, int *out) {
    const cJSON *j = get(root, key);
    char b[64];
    if (!j) {
        *out = 0;
        return 0;
    }
    if (!cJSON_IsBool(j)) return tn_err("%s: key '%s' must be true or false, got %s", path, key, describe(j, b));
    *out = cJSON_IsTrue(j) ? 1 : 0;
    return 0;
}

/* bos/eos: an id, null/absent (-1), or a list of ids (HF allows several eos ids; the first is ours). */
static int get_token(const cJSON *root, const char *key, const char *path, int *out) {
    const cJSON *j = get(root, key);
    char b[64];
    *out = -1;
    if (cJSON_IsArray(j)) j = j->child;
    if (!j || cJSON_IsNull(j)) return 0;
    if (!is_int_in(j, 0)) return tn_err("%s: key '%s' must be a token id (non-negative integer), got %s", path, key, describe(j, b));
    *out = (int)j->valuedouble;
    return 0;
}

/* A string into a fixed field; absent -> def. */
static int get_string(const cJSON *root, const char *key, const char *def, const char *path, char *dst, size_t cap) {
    const cJSON *j = get(root, key);
    char b[64];
    if (j && !cJSON_IsString(j)) return tn_err("%s: key '%s' must be a string, got %s", path, key, describe(j, b));
    const char *s = j ? j->valuestring : def;
    if (strlen(s) >= cap) return tn_err("%s: key '%s': %s is too long (at most %zu characters)", path, key, describe(j, b), cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

static int parse_model_type(const cJSON *root, const char *path, tn_model_config *c) {
    const cJSON *j = get(root, "model_type");
    char b[64];
    if (!j) return tn_err("%s: missing key 'model_type' (accepted: " MC_ACCEPTED ")", path);
    if (!cJSON_IsString(j) || type_index(j->valuestring) < 0)
        return tn_err("%s: key 'model_type': %s is not supported (accepted: " MC_ACCEPTED ")", path, describe(j, b));
    snprintf(c->model_type, sizeof c->model_type, "%s", j->valuestring);
    return 0;
}

static int parse_sizes(const cJSON *root, const char *path, tn_model_config *c) {
    if (get_size(root, "vocab_size", -1, path, &c->vocab_size) || get_size(root, "hidden_size", -1, path, &c->hidden_size) ||
        get_size(root, "intermediate_size", -1, path, &c->intermediate_size) ||
        get_size(root, "num_hidden_layers", -1, path, &c->num_hidden_layers) ||
        get_size(root, "num_attention_heads", -1, path, &c->num_attention_heads))
        return -1;
    /* 0 = "default" for tn_model_config_finish */
    if (get_size(root, "num_key_value_heads", 0, path, &c->num_key_value_heads) ||
        get_size(root, "head_dim", 0, path, &c->head_dim) ||
        get_size(root, "max_position_embeddings", 2048, path, &c->max_position_embeddings))
        return -1;
    return 0;
}

static int parse_scalars(const cJSON *root, const char *path, tn_model_config *c) {
    if (get_double(root, "rope_theta", 10000.0, path, &c->rope_theta) ||
        get_double(root, "rms_norm_eps", 1e-6, path, &c->rms_norm_eps) ||
        get_double(root, "initializer_range", 0.02, path, &c->initializer_range) ||
        get_bool(root, "tie_word_embeddings", path, &c->tie_word_embeddings) ||
        get_bool(root, "attention_bias", path, &c->attention_bias) ||
        get_token(root, "bos_token_id", path, &c->bos_token_id) || get_token(root, "eos_token_id", path, &c->eos_token_id))
        return -1;
    /* transformers >= 4.56 writes "dtype" instead of "torch_dtype" */
    const char *dkey = get(root, "torch_dtype") || !get(root, "dtype") ? "torch_dtype" : "dtype";
    return get_string(root, dkey, "float32", path, c->torch_dtype, sizeof c->torch_dtype);
}

/* Features tandem's decoder does not implement: better refused than silently computed differently. */
static int reject_unsupported(const cJSON *root, const char *path, const tn_model_config *c) {
    char act[32], b[64];
    if (get_string(root, "hidden_act", "silu", path, act, sizeof act) != 0) return -1;
    if (strcmp(act, "silu") != 0)
        return tn_err("%s: key 'hidden_act': \"%s\" is not supported (only \"silu\")", path, mask_controls(act));
    const cJSON *j = get(root, "rope_scaling");
    if (j && c->vis.kind == TN_VL_NONE)
        return tn_err("%s: key 'rope_scaling' is not supported (must be null or absent), got %s", path, describe(j, b));
    int flag = 0;
    if (get_bool(root, "mlp_bias", path, &flag) != 0) return -1;
    if (flag) return tn_err("%s: key 'mlp_bias': true is not supported", path);
    if (strcmp(c->model_type, "qwen2") == 0 || strcmp(c->model_type, "qwen3") == 0) {
        if (get_bool(root, "use_sliding_window", path, &flag) != 0) return -1;
        if (flag) return tn_err("%s: key 'use_sliding_window': sliding-window attention is not supported", path);
    }
    if (strcmp(c->model_type, "mistral") == 0 && (j = get(root, "sliding_window")) != NULL) {
        if (!is_int_in(j, 1))
            return tn_err("%s: key 'sliding_window' must be a positive integer or null, got %s", path, describe(j, b));
        if ((int)j->valuedouble < c->max_position_embeddings)
            return tn_err("%s: key 'sliding_window': %d < max_position_embeddings %d; sliding-window attention is "
                          "not supported (set it to null)", path, (int)j->valuedouble, c->max_position_embeddings);
    }
    return 0;
}

/* The text settings of a VL config (text: text_config or the top level); root's keys fill what text lacks. */
static int parse_vl_text(const cJSON *text, const cJSON *root, const char *path, tn_model_config *c) {
    if (parse_sizes(text, path, c) || parse_scalars(text, path, c) || reject_unsupported(text, path, c)) return -1;
    if (!get(text, "tie_word_embeddings") && get_bool(root, "tie_word_embeddings", path, &c->tie_word_embeddings))
        return -1;
    if (c->vis.kind != TN_VL_QWEN3) c->head_dim = 0; /* Qwen2(.5)-VL ignore head_dim: hidden / heads */
    return 0;
}

int tn_model_config_parse(const char *json_text, const char *path, tn_model_config *c) {
    memset(c, 0, sizeof *c);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json_text, &end, 1);
    int rc;
    if (!root)
        rc = tn_err("%s: not valid JSON (at byte %zu)", path, end ? (size_t)(end - json_text) : 0);
    else if (!cJSON_IsObject(root))
        rc = tn_err("%s: not a JSON object", path);
    else if (parse_model_type(root, path, c))
        rc = -1;
    else if (tn_vl_kind(c->model_type) != TN_VL_NONE)
        rc = tn_vl_config_parse(root, path, c, parse_vl_text) ? -1 : tn_model_config_finish(c, path);
    else if (parse_sizes(root, path, c) || parse_scalars(root, path, c) || reject_unsupported(root, path, c))
        rc = -1;
    else
        rc = tn_model_config_finish(c, path);
    cJSON_Delete(root);
    return rc;
}

int tn_model_config_load(const char *path, tn_model_config *c) {
    char *text = tn_read_file(path, NULL, MC_MAX_FILE);
    if (!text) return -1;
    int rc = tn_model_config_parse(text, path, c);
    free(text);
    return rc;
}

static int check_positive(const char *path, const char *key, int v) {
    return v > 0 ? 0 : tn_err("%s: key '%s' must be a positive integer, got %d", path, key, v);
}

/* The widths the model computes in int (model.c: the q columns H hd, the fused q/k/v columns (H + 2 KV) hd, the
 * fused gate/up columns 2 I) must fit one: checked here, in double, before any of them is formed. */
static int check_widths(const tn_model_config *c, const char *path, int hd_given) {
    const double H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
    if ((H + 2 * KV) * hd > INT_MAX)
        return tn_err("%s: key '%s' %d: (num_attention_heads %d + 2 x num_key_value_heads %d) x head_dim %d is %.0f "
                      "q/k/v columns (%.0f bytes per layer), more than the largest width tandem supports (%d)", path,
                      hd_given ? "head_dim" : "hidden_size", hd_given ? c->head_dim : c->hidden_size,
                      c->num_attention_heads, c->num_key_value_heads, c->head_dim, (H + 2 * KV) * hd,
                      4 * (H + 2 * KV) * hd * c->hidden_size, INT_MAX);
    if (2.0 * c->intermediate_size > INT_MAX)
        return tn_err("%s: key 'intermediate_size' %d: the fused gate/up projection has 2 x %d columns (%.0f bytes per "
                      "layer), more than the largest width tandem supports (%d)", path, c->intermediate_size,
                      c->intermediate_size, 8.0 * c->intermediate_size * c->hidden_size, INT_MAX);
    return 0;
}

/* num_key_value_heads / head_dim of 0 mean "HF default", so code-built configs may leave them unset. */
int tn_model_config_finish(tn_model_config *c, const char *path) {
    if (type_index(c->model_type) < 0)
        return tn_err("%s: key 'model_type': \"%.16s\" is not supported (accepted: " MC_ACCEPTED ")", path, c->model_type);
    if (check_positive(path, "vocab_size", c->vocab_size) || check_positive(path, "hidden_size", c->hidden_size) ||
        check_positive(path, "intermediate_size", c->intermediate_size) ||
        check_positive(path, "num_hidden_layers", c->num_hidden_layers) ||
        check_positive(path, "num_attention_heads", c->num_attention_heads) ||
        check_positive(path, "max_position_embeddings", c->max_position_embeddings))
        return -1;
    if (c->num_key_value_heads == 0) c->num_key_value_heads = c->num_attention_heads;
    int hd_given = c->head_dim != 0;
    if (c->head_dim == 0) {
        if (c->hidden_size % c->num_attention_heads != 0)
            return tn_err("%s: key 'hidden_size' (%d) is not a multiple of num_attention_heads (%d) and no head_dim "
                          "is given", path, c->hidden_size, c->num_attention_heads);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    if (check_positive(path, "num_key_value_heads", c->num_key_value_heads) || check_positive(path, "head_dim", c->head_dim))
        return -1;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return tn_err("%s: key 'num_key_value_heads': num_attention_heads (%d) is not a multiple of "
                      "num_key_value_heads (%d)", path, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2 != 0) return tn_err("%s: key 'head_dim' (%d) must be even (RoPE rotates pairs)", path, c->head_dim);
    if (check_widths(c, path, hd_given) != 0) return -1;
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return tn_err("%s: key 'rope_theta' must be a positive number, got %g", path, c->rope_theta);
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        return tn_err("%s: key 'rms_norm_eps' must be a positive number, got %g", path, c->rms_norm_eps);
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        return tn_err("%s: key 'initializer_range' must be a non-negative number, got %g", path, c->initializer_range);
    int type = type_index(c->model_type);
    c->qkv_bias = type == MC_QWEN2 ? 1 : c->attention_bias != 0; /* Qwen2 always has q/k/v biases, never an o bias */
    c->o_bias = type == MC_QWEN2 ? 0 : c->attention_bias != 0;
    c->qk_norm = type == MC_QWEN3;
    return tn_vl_config_check(c, path);
}

/* ---- writing ---- */

/* Shortest text that reads back to v, with a ".0" when it would otherwise look like an int (as Python). */
static const char *fmt_double(double v, char buf[static 40]) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 40, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    return buf;
}

static void put_string(FILE *o, const char *s) {
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
        else if (*p < 0x20) fprintf(o, "\\u%04x", *p);
        else fputc(*p, o);
    }
    fputc('"', o);
}

static void put_key(FILE *o, const char *key) {
    fputs(",\n  ", o);
    put_string(o, key);
    fputs(": ", o);
}

static void put_int(FILE *o, const char *key, int v) {
    put_key(o, key);
    fprintf(o, "%d", v);
}

static void put_double(FILE *o, const char *key, double v) {
    char b[40];
    put_key(o, key);
    fputs(fmt_double(v, b), o);
}

static void put_bool(FILE *o, const char *key, int v) {
    put_key(o, key);
    fputs(v ? "true" : "false", o);
}

static void put_body(FILE *o, const tn_model_config *c, int type) {
    if (c->vis.kind != TN_VL_NONE) {
        tn_vl_config_write(o, c);
        return;
    }
    fprintf(o, "{\n  \"architectures\": [\n    \"%s\"\n  ]", k_archs[type]);
    put_key(o, "model_type");
    put_string(o, c->model_type);
    put_key(o, "hidden_act");
    put_string(o, "silu");
    put_int(o, "vocab_size", c->vocab_size);
    put_int(o, "hidden_size", c->hidden_size);
    put_int(o, "intermediate_size", c->intermediate_size);
    put_int(o, "num_hidden_layers", c->num_hidden_layers);
    put_int(o, "num_attention_heads", c->num_attention_heads);
    put_int(o, "num_key_value_heads", c->num_key_value_heads);
    put_int(o, "head_dim", c->head_dim);
    put_int(o, "max_position_embeddings", c->max_position_embeddings);
    put_double(o, "rope_theta", c->rope_theta);
    put_double(o, "rms_norm_eps", c->rms_norm_eps);
    put_double(o, "initializer_range", c->initializer_range);
    put_bool(o, "tie_word_embeddings", c->tie_word_embeddings);
    if (type != MC_QWEN2) put_bool(o, "attention_bias", c->attention_bias);
    /* HF's defaults would turn sliding windows on: MistralConfig sliding_window = 4096 */
    if (type == MC_QWEN2 || type == MC_QWEN3) put_bool(o, "use_sliding_window", 0);
    if (type == MC_MISTRAL) {
        put_key(o, "sliding_window");
        fputs("null", o);
    }
    put_key(o, "rope_scaling");
    fputs("null", o);
    put_key(o, "torch_dtype");
    put_string(o, c->torch_dtype[0] ? c->torch_dtype : "float32");
    if (c->bos_token_id >= 0) put_int(o, "bos_token_id", c->bos_token_id);
    if (c->eos_token_id >= 0) put_int(o, "eos_token_id", c->eos_token_id);
    put_bool(o, "use_cache", 0);
    fputs("\n}\n", o);
}

int tn_model_config_save(const char *path, const tn_model_config *c) {
    tn_model_config chk = *c; /* never write a config that would not load back */
    if (tn_model_config_finish(&chk, path) != 0) return -1;
    char *buf = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&buf, &len);
    if (!o) tn_die("out of memory (open_memstream)");
    put_body(o, &chk, type_index(chk.model_type));
    fclose(o);
    int rc = tn_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}
