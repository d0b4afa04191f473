/* model_io.c -- HF model folders and PEFT adapters in and out of a tn_model. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"

#define PEFT_PREFIX "base_model.model."

/* The checkpoint's shape of p (a Qwen VL patch_embed kernel is 5-D there, [E, P] here). */
static int file_shape(const tn_param *p, int64_t shape[5]) {
    if (p->file_ndim) {
        memcpy(shape, p->file_shape, sizeof p->file_shape);
        return p->file_ndim;
    }
    shape[0] = p->shape[p->file_transposed], shape[1] = p->shape[!p->file_transposed];
    return p->ndim;
}

/* [rows, cols] -> [cols, rows] in place (through a copy) */
static void transpose(float *x, int64_t rows, int64_t cols) {
    float *t = tn_xmalloc((size_t)(rows * cols) * sizeof *t);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j];
    memcpy(x, t, (size_t)(rows * cols) * sizeof *t);
    free(t);
}

static int shape_matches(const st_tensor *t, const tn_param *p) {
    int64_t shape[5];
    int nd = file_shape(p, shape);
    if (t->ndim != nd) return 0;
    for (int d = 0; d < nd; d++)
        if (t->shape[d] != shape[d]) return 0;
    return 1;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Copy tensor `file_name` from a safetensors file into parameter p (converting to fp32). */
static int load_tensor(tn_model *m, const st_file *f, const st_tensor *t, const tn_param *p, float *host) {
    if (!shape_matches(t, p)) {
        char want[64], got[64];
        int64_t fs[5];
        int nd = file_shape(p, fs);
        shape_str(want, sizeof want, nd, fs);
        shape_str(got, sizeof got, t->ndim, t->shape);
        return tn_err("%s: tensor '%s' has shape %s, the config needs %s", f->path, t->name, got, want);
    }
    if (st_read_f32(f, t, host, (int64_t)p->numel) != 0) return -1;
    if (p->file_transposed) transpose(host, p->shape[1], p->shape[0]);
    tn_model_set(m, p, host);
    return 0;
}

static size_t max_numel(const tn_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n = m->params[i].numel > n ? m->params[i].numel : n;
    return n;
}

/* A VL checkpoint's naming: released Qwen2(.5)-VL files name the embedding model.embed_tokens.weight. */
static void detect_vl_naming(tn_model *m, const st_set *set) {
    const st_file *f;
    if (m->cfg.vis.kind != TN_VL_NONE) m->vl_legacy_names = st_set_find(set, "model.embed_tokens.weight", &f) != NULL;
}

int tn_model_load_hf(tn_model *m, const char *dir) {
    st_set set;
    if (st_set_open(&set, dir) != 0) return -1;
    detect_vl_naming(m, &set);
    float *host = tn_xmalloc(max_numel(m) * sizeof *host);
    int rc = 0;
    for (int i = 0; i < m->n_params && rc == 0; i++) {
        const tn_param *p = &m->params[i];
        if (strstr(p->name, ".lora_")) continue;
        const st_file *f;
        char fname[160];
        const st_tensor *t = st_set_find(&set, tn_model_file_name(m, p->name, fname, sizeof fname), &f);
        if (!t) {
            rc = tn_err("%s: weights have no tensor '%s' (the config.json needs it)", dir, fname);
            break;
        }
        rc = load_tensor(m, f, t, p, host);
    }
    free(host);
    st_set_close(&set);
    return rc;
}

/* Entries for every parameter that passes `want` (host copies kept alive in *bufs). */
static int collect_entries(const tn_model *m, int lora, const char *prefix, st_entry **out, float ***bufs) {
    int n = 0;
    *out = tn_xcalloc((size_t)m->n_params, sizeof **out);
    *bufs = tn_xcalloc((size_t)m->n_params, sizeof **bufs);
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if ((strstr(p->name, ".lora_") != NULL) != lora) continue;
        float *host = tn_xmalloc(p->numel * sizeof *host);
        tn_model_get(m, p, host);
        if (p->file_transposed) transpose(host, p->shape[0], p->shape[1]);
        char fname[160];
        tn_model_file_name(m, p->name, fname, sizeof fname);
        char *name = tn_xmalloc(strlen(prefix) + strlen(fname) + 1);
        strcpy(name, prefix);
        strcat(name, fname);
        st_entry *e = &(*out)[n];
        e->name = name;
        e->dtype = ST_F32;
        e->src_dtype = ST_F32;
        e->ndim = file_shape(p, e->shape);
        e->data = host;
        (*bufs)[n++] = host;
    }
    return n;
}

static void free_entries(st_entry *e, float **bufs, int n) {
    for (int i = 0; i < n; i++) {
        free((char *)e[i].name);
        free(bufs[i]);
    }
    free(e);
    free(bufs);
}

int tn_model_save_hf(const tn_model *m, const char *dir, size_t max_shard_bytes) {
    if (tn_mkdirs(dir) != 0) return -1;
    char *cfg_path = tn_path_join(dir, "config.json");
    tn_model_config c = m->cfg;
    snprintf(c.torch_dtype, sizeof c.torch_dtype, "float32");
    int rc = tn_model_config_save(cfg_path, &c);
    free(cfg_path);
    if (rc != 0) return -1;
    st_entry *e;
    float **bufs;
    int n = collect_entries(m, 0, "", &e, &bufs);
    rc = st_set_write(dir, e, n, max_shard_bytes);
    free_entries(e, bufs, n);
    return rc;
}

int tn_lora_config_load(const char *adapter_dir, tn_lora_config *lora) {
    char *path = tn_path_join(adapter_dir, "adapter_config.json");
    size_t len;
    char *text = tn_read_file(path, &len, 1 << 20);
    int rc = -1;
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!text) goto out;
    if (!cJSON_IsObject(j)) {
        tn_err("%s: not a JSON object", path);
        goto out;
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r");
    const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble != (int)r->valuedouble) {
        tn_err("%s: key 'r' must be a positive integer", path);
        goto out;
    }
    memset(lora, 0, sizeof *lora);
    lora->r = (int)r->valuedouble;
    lora->alpha = cJSON_IsNumber(alpha) ? alpha->valuedouble : 8.0; /* PEFT default lora_alpha = 8 */
    lora->dropout = cJSON_IsNumber(drop) ? drop->valuedouble : 0.0;
    if (cJSON_IsString(tm)) {
        if (tn_lora_parse_targets(tm->valuestring, &lora->targets) != 0) {
            tn_err("%s: target_modules: %s", path, tn_errmsg());
            goto out;
        }
    } else if (cJSON_IsArray(tm)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, tm) {
            unsigned one;
            /* a full module name (LLaMA-Factory writes them for VL models) adapts its leaf projection */
            const char *leaf = cJSON_IsString(it) && strrchr(it->valuestring, '.') ? strrchr(it->valuestring, '.') + 1
                               : cJSON_IsString(it) ? it->valuestring : "";
            if (cJSON_IsString(it) && strstr(it->valuestring, "visual")) {
                tn_err("%s: target_modules: '%s' is in the vision tower; LoRA there is not supported", path,
                       it->valuestring);
                goto out;
            }
            if (!cJSON_IsString(it) || tn_lora_parse_targets(leaf, &one) != 0) {
                tn_err("%s: target_modules: expected names among q_proj..down_proj", path);
                goto out;
            }
            lora->targets |= one;
        }
    } else {
        tn_err("%s: key 'target_modules' must be a list of projection names", path);
        goto out;
    }
    rc = lora->targets ? 0 : tn_err("%s: target_modules is empty", path);
out:
    cJSON_Delete(j);
    free(text);
    free(path);
    return rc;
}

int tn_model_load_adapter(tn_model *m, const char *adapter_dir) {
    char *path = tn_path_join(adapter_dir, "adapter_model.safetensors");
    st_file f;
    int rc = st_open(&f, path);
    free(path);
    if (rc != 0) return -1;
    float *host = tn_xmalloc(max_numel(m) * sizeof *host);
    for (int i = 0; i < m->n_params && rc == 0; i++) {
        const tn_param *p = &m->params[i];
        if (!strstr(p->name, ".lora_")) continue;
        char name[200], fname[160];
        snprintf(name, sizeof name, PEFT_PREFIX "%s", tn_model_file_name(m, p->name, fname, sizeof fname));
        const st_tensor *t = st_find(&f, name);
        if (!t) {
            rc = tn_err("%s: adapter has no tensor '%s'", f.path, name);
            break;
        }
        rc = load_tensor(m, &f, t, p, host);
    }
    free(host);
    st_close(&f);
    return rc;
}

int tn_model_save_adapter(const tn_model *m, const char *adapter_dir) {
    if (!m->lora.r) return tn_err("save adapter: the model has no LoRA");
    if (tn_mkdirs(adapter_dir) != 0) return -1;
    st_entry *e;
    float **bufs;
    int n = collect_entries(m, 1, PEFT_PREFIX, &e, &bufs);
    char *path = tn_path_join(adapter_dir, "adapter_model.safetensors");
    int rc = st_write(path, e, n, NULL);
    free(path);
    free_entries(e, bufs, n);
    if (rc != 0) return -1;

    cJSON *j = cJSON_CreateObject(), *tm = cJSON_CreateArray();
    for (int t = 0; t < TN_LT_COUNT; t++)
        if (m->lora.targets & (1u << t)) cJSON_AddItemToArray(tm, cJSON_CreateString(tn_lora_target_names[t]));
    if (m->lora.targets & TN_LORA_EMBED) cJSON_AddItemToArray(tm, cJSON_CreateString("embed_tokens"));
    cJSON_AddStringToObject(j, "peft_type", "LORA");
    cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(j, "r", m->lora.r);
    cJSON_AddNumberToObject(j, "lora_alpha", m->lora.alpha);
    cJSON_AddNumberToObject(j, "lora_dropout", m->lora.dropout);
    cJSON_AddItemToObject(j, "target_modules", tm);
    cJSON_AddStringToObject(j, "bias", "none");
    cJSON_AddFalseToObject(j, "fan_in_fan_out");
    cJSON_AddFalseToObject(j, "use_rslora");
    if (m->base_name_or_path && m->base_name_or_path[0])
        cJSON_AddStringToObject(j, "base_model_name_or_path", m->base_name_or_path);
    else
        cJSON_AddNullToObject(j, "base_model_name_or_path"); /* a fresh model (model_config) has no folder */
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return tn_err("adapter_config.json: out of memory");
    path = tn_path_join(adapter_dir, "adapter_config.json");
    rc = tn_write_file_atomic(path, text, strlen(text));
    free(path);
    free(text);
    return rc;
}

static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "generation_config.json", "vocab.json", "merges.txt",
                                              "tokenizer.model", "chat_template.jinja",
                                              /* VL models: the image processor's settings travel with the tokenizer */
                                              "preprocessor_config.json", "chat_template.json", NULL};

int tn_model_copy_tokenizer_files(const char *from, const char *to) {
    int copied = 0;
    for (int i = 0; TOKENIZER_FILES[i]; i++) {
        char *src = tn_path_join(from, TOKENIZER_FILES[i]), *dst = tn_path_join(to, TOKENIZER_FILES[i]);
        size_t n = 0;
        char *data = tn_file_exists(src) ? tn_read_file(src, &n, (size_t)1 << 30) : NULL;
        int ok = !data || tn_write_file_atomic(dst, data, n) == 0; /* tn_err of a failed write names it and why */
        copied += data && ok;
        free(data), free(src), free(dst);
        if (!ok) return -1;
    }
    return copied;
}

