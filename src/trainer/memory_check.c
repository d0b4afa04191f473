/* memory_check.c -- see memory_check.h. Every count is a double: the sizes checked here are the ones
 * whose products overflow 64-bit integers. */
#include "trainer/memory_check.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"

void tn_memory_estimate(const tn_train_config *cfg, const tn_model_config *mc, int seq_len, tn_memory_need *need) {
    tn_memory_estimate_frozen(cfg, mc, seq_len, 4, need);
}

void tn_memory_estimate_frozen(const tn_train_config *cfg, const tn_model_config *mc, int seq_len, int frozen_bytes,
                               tn_memory_need *need) {
    const double fb = frozen_bytes;
    const double D = mc->hidden_size, I = mc->intermediate_size, H = mc->num_attention_heads, V = mc->vocab_size,
                 L = mc->num_hidden_layers, hd = mc->head_dim, KV = mc->num_key_value_heads;
    const double q = H * hd, kv = KV * hd, q3 = q + 2 * kv, S = seq_len;
    /* model.c's layout_pass */
    double layer = 2 * D + q * D + 2 * kv * D + q * D + 3 * I * D + (mc->qkv_bias ? q3 : 0) + (mc->o_bias ? D : 0) +
                   (mc->qk_norm ? 2 * hd : 0);
    double embed = V * D * (mc->tie_word_embeddings ? 1 : 2);
    int lora = cfg->finetuning_type == TN_FT_LORA;
    unsigned targets = 0;
    if (lora && tn_lora_parse_targets(cfg->lora_target, &targets) != 0) targets = 0;
    const double r = lora ? cfg->lora_rank : 0;
    double in_out[TN_LT_COUNT] = {D + q, D + kv, D + kv, q + D, D + I, D + I, I + D}, lora_layer = 0, n_adapted = 0;
    for (int t = 0; t < TN_LT_COUNT; t++)
        if (targets & (1u << t)) lora_layer += r * in_out[t], n_adapted++;
    /* parameters (4 bytes each, frozen ones fb); trainable ones also hold a gradient and AdamW's two moments */
    need->layer_bytes = lora ? fb * layer + 16 * lora_layer : 16 * layer;
    need->embed_bytes = lora ? fb * embed : 16 * embed;
    need->param_bytes = L * need->layer_bytes + need->embed_bytes + (lora ? fb : 16) * D;
    double base = L * layer + embed + D;
    need->trainable = lora ? L * lora_layer : base;
    need->frozen = lora ? base : 0;
    need->lora_params = lora ? L * lora_layer : 0;
    need->matmul_params = L * (2 * q * D + 2 * kv * D + 3 * I * D) + V * D;
    /* model_forward.c's carve: one set of layer activations per layer (one with checkpointing), the layer
     * inputs, the backward buffers and one lm_head chunk of logits */
    const double B = cfg->per_device_train_batch_size, T = B * S, widest = fmax(fmax(D, I), q);
    double set = T * (3 * D + 2 + q3 + q + 2 * I + r * n_adapted) + T * H + (mc->qk_norm ? T * (q + kv + H + KV) : 0);
    double chunk = floor((double)(1 << 24) / V);
    chunk = chunk < 64 ? 64 : floor(chunk / 64) * 64;
    double acts = (cfg->gradient_checkpointing ? 1 : L) * set + (L + 1) * T * D + T * (3 * D + 1 + 4 * I + q3 + q) +
                  T * r + (lora && cfg->lora_dropout > 0 ? 2 * T * widest : 0) + fmin(chunk, T) * (V + D) + S * hd;
    /* token ids, targets, scored positions: five per token in the workspace, two per token of every
     * accumulated micro-batch */
    need->act_bytes = 4 * acts + 4 * 5 * T + 4 * 2 * T * cfg->gradient_accumulation_steps;
    need->tokens = T;
}

double tn_memory_available(int *limited) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0, cg = 0;
    /* a container's limit (cgroup v2, then v1; "max" or a huge v1 number means none) */
    const char *files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2 && cg == 0; i++) {
        FILE *f = fopen(files[i], "r");
        unsigned long long v;
        if (f && fscanf(f, "%llu", &v) == 1) cg = (double)v;
        if (f) fclose(f);
    }
    *limited = cg > 0 && (phys == 0 || cg < phys);
    return *limited ? cg : phys;
}

static const char *human(double bytes, char buf[static 48]) {
    const char *unit[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
    double v = bytes;
    int u = 0;
    while (v >= 1000 && u < 6) v /= 1000, u++;
    if (bytes < 1e15) snprintf(buf, 48, "%.0f bytes (%.1f %s)", bytes, v, unit[u]);
    else snprintf(buf, 48, "%.3g bytes (%.1f %s)", bytes, v, unit[u]);
    return buf;
}

/* config.json against the weights file's header: a size that disagrees would make the model (perhaps
 * absurdly large) only for the load to refuse it afterwards. Extra layers in the file are not an error
 * (the load takes the ones the config names). */
static int check_weight_shapes(const char *dir, const char *cfg_path, const tn_model_config *mc) {
    st_set s;
    if (st_set_open(&s, dir) != 0) return -1;
    const st_file *f = NULL;
    const st_tensor *t = st_set_find(&s, "model.embed_tokens.weight", &f);
    int rc = 0, top = -1;
    if (t && t->ndim == 2 && t->shape[0] != mc->vocab_size)
        rc = tn_err("%s: key 'vocab_size' is %d but %s holds model.embed_tokens.weight as [%lld, %lld]", cfg_path,
                    mc->vocab_size, f->path, (long long)t->shape[0], (long long)t->shape[1]);
    else if (t && t->ndim == 2 && t->shape[1] != mc->hidden_size)
        rc = tn_err("%s: key 'hidden_size' is %d but %s holds model.embed_tokens.weight as [%lld, %lld]", cfg_path,
                    mc->hidden_size, f->path, (long long)t->shape[0], (long long)t->shape[1]);
    t = rc ? NULL : st_set_find(&s, "model.layers.0.mlp.gate_proj.weight", &f);
    if (t && t->ndim == 2 && t->shape[0] != mc->intermediate_size)
        rc = tn_err("%s: key 'intermediate_size' is %d but %s holds model.layers.0.mlp.gate_proj.weight as [%lld, %lld]",
                    cfg_path, mc->intermediate_size, f->path, (long long)t->shape[0], (long long)t->shape[1]);
    for (int i = 0; i < s.nfiles && rc == 0; i++)
        for (int k = 0; k < s.files[i].n; k++) {
            int l;
            if (sscanf(s.files[i].tensors[k].name, "model.layers.%d.", &l) == 1 && l > top) top = l;
        }
    if (rc == 0 && top >= 0 && top + 1 < mc->num_hidden_layers)
        rc = tn_err("%s: key 'num_hidden_layers' is %d but the weights in %s hold %d layer(s)", cfg_path,
                    mc->num_hidden_layers, dir, top + 1);
    st_set_close(&s);
    return rc;
}

void tn_memory_target_of(const char *backend, int bf16, int local_rank, int local_size, tn_memory_target *t) {
    memset(t, 0, sizeof *t);
    t->frozen_bytes = 4;
    int count = strcmp(backend, "cuda") == 0 ? tn_backend_gpu_count() : 0;
    if (count <= 0) return;
    int mine = local_rank % count;
    t->gpu_bytes = tn_backend_gpu_memory(mine);
    for (int r = 0; r < local_size; r++) t->gpu_ranks += r % count == mine;
    t->frozen_bytes = bf16 ? 2 : 4;
    snprintf(t->gpu_name, sizeof t->gpu_name, "cuda:%d", mine);
}

/* Host memory a GPU run keeps per rank: DiLoCo's consensus, momentum, round start and mean (and the error
 * feedback residual when compressed), or the compressed exchange's residual. */
static double host_bytes_of_gpu_run(const tn_train_config *cfg, const tn_memory_need *n) {
    double vectors = cfg->sync_mode == TN_SYNC_DILOCO ? 4 + (cfg->comm_compression ? 1 : 0)
                     : cfg->comm_compression     ? 1
                                                 : 0;
    return 4 * vectors * n->trainable;
}

/* The model's own sizes do not fit: names the key to blame (the vocabulary when the embeddings outweigh the
 * layers, a layer's width when one layer alone does not fit, else the layer count). Returns -1 + tn_err. */
static int blame_model(const char *path, const tn_model_config *mc, double layer_bytes, double embed_bytes,
                       double model_bytes, double avail_each, const char *state, const char *each, const char *mem) {
    char a[48], b[48];
    if (embed_bytes >= mc->num_hidden_layers * layer_bytes)
        return tn_err("%s: key 'vocab_size' %d (x hidden_size %d): the embeddings need %s, the whole model %s %s%s, "
                      "%s", path, mc->vocab_size, mc->hidden_size, human(embed_bytes, a), state, human(model_bytes, b),
                      each, mem);
    if (layer_bytes > avail_each) /* one layer alone does not fit: its width is the culprit */
        return tn_err("%s: key '%s' %d: one decoder layer needs %s (x num_hidden_layers %d: %s %s)%s, %s", path,
                      mc->intermediate_size > mc->hidden_size ? "intermediate_size" : "hidden_size",
                      mc->intermediate_size > mc->hidden_size ? mc->intermediate_size : mc->hidden_size,
                      human(layer_bytes, a), mc->num_hidden_layers, human(model_bytes, b), state, each, mem);
    return tn_err("%s: key 'num_hidden_layers' %d x %s per layer: the model %s needs %s%s, %s", path,
                  mc->num_hidden_layers, human(layer_bytes, a), state, human(model_bytes, b), each, mem);
}

/* Parameters of model mc, in floats: one decoder layer, the embeddings (and untied lm_head), the whole model. */
static void model_floats(const tn_model_config *mc, double *layer, double *embed, double *total) {
    tn_train_config full;
    tn_train_config_defaults(&full);
    full.finetuning_type = TN_FT_FULL;
    tn_memory_need n;
    tn_memory_estimate(&full, mc, 1, &n);
    *layer = n.layer_bytes / 16, *embed = n.embed_bytes / 16, *total = n.param_bytes / 16; /* 16: p, g, m, v */
}

int tn_memory_check_model(const char *path, const tn_model_config *mc, double bytes_per_param, double avail,
                          int limited) {
    double layer, embed, total;
    model_floats(mc, &layer, &embed, &total);
    char mem[96], c[48];
    snprintf(mem, sizeof mem, "more than this machine's %s%s", human(avail, c), limited ? " (its cgroup's limit)" : "");
    if (avail <= 0 || avail > 0x1p62) { /* unknown, or more than model.c's size_t offsets can count exactly */
        avail = 0x1p62, limited = 0;
        snprintf(mem, sizeof mem, "more than the 2^62 bytes tandem can address");
    }
    if (total * bytes_per_param <= avail) return 0;
    return blame_model(path, mc, layer * bytes_per_param, embed * bytes_per_param, total * bytes_per_param, avail,
                       "(parameters and gradients)", "", mem);
}

int tn_memory_check_create(const char *path, const tn_model_config *mc, int lora) {
    int limited = 0;
    double avail = tn_memory_available(&limited);
    return tn_memory_check_model(path, mc, lora ? 4 : 8, avail, limited);
}

int tn_memory_check(const tn_train_config *cfg, int seq_len, int local_ranks) {
    return tn_memory_check_on(cfg, seq_len, local_ranks, NULL);
}

int tn_memory_check_on(const tn_train_config *cfg, int seq_len, int local_ranks, const tn_memory_target *t) {
    const int gpu = t && t->gpu_bytes > 0;
    int fresh = !cfg->model_name_or_path[0];
    char *path = fresh ? tn_xstrdup(cfg->model_config) : tn_path_join(cfg->model_name_or_path, "config.json");
    tn_model_config mc;
    int rc = tn_model_config_load(path, &mc);
    if (rc == 0 && !fresh) rc = check_weight_shapes(cfg->model_name_or_path, path, &mc);
    tn_memory_need n;
    if (rc == 0) tn_memory_estimate_frozen(cfg, &mc, seq_len, gpu ? t->frozen_bytes : 4, &n);
    char hb[48];
    if (rc == 0 && n.tokens > INT_MAX)
        rc = tn_err("%s: key 'per_device_train_batch_size' %d x %d tokens per sequence is %.0f tokens in one "
                    "micro-batch (activations: %s), more than the %d tandem can address", cfg->source_path,
                    cfg->per_device_train_batch_size, seq_len, n.tokens, human(n.act_bytes, hb), INT_MAX);
    int limited = 0;
    double host = rc == 0 ? tn_memory_available(&limited) : 0, ranks = local_ranks > 1 ? local_ranks : 1;
    double avail = gpu ? t->gpu_bytes : host;
    char mem[128];
    if (gpu) {
        ranks = t->gpu_ranks > 1 ? t->gpu_ranks : 1;
        snprintf(mem, sizeof mem, "more than GPU %s's %s", t->gpu_name, human(avail, hb));
    } else {
        snprintf(mem, sizeof mem, "more than this machine's %s%s", human(avail, hb), limited ? " (its cgroup's limit)" : "");
    }
    if (rc == 0 && gpu && host > 0 && host_bytes_of_gpu_run(cfg, &n) * local_ranks > host) {
        char a[48];
        rc = tn_err("%s: key '%s': its vectors of the %.0f trainable parameters stay in host memory: %s for each of "
                    "the %d rank(s) on this machine, more than this machine's %s%s", cfg->source_path,
                    cfg->sync_mode == TN_SYNC_DILOCO ? "sync_mode" : "comm_compression", n.trainable,
                    human(host_bytes_of_gpu_run(cfg, &n), a), local_ranks, human(host, hb),
                    limited ? " (its cgroup's limit)" : "");
    }
    if (rc == 0 && avail > 0 && (n.param_bytes + n.act_bytes) * ranks > avail) {
        /* which key: the batch when one sequence per micro-batch would fit, else the model's sizes */
        tn_train_config one = *cfg;
        one.per_device_train_batch_size = 1;
        tn_memory_need n1;
        tn_memory_estimate_frozen(&one, &mc, seq_len, gpu ? t->frozen_bytes : 4, &n1);
        char a[48], b[48], each[64] = "";
        if (ranks > 1)
            snprintf(each, sizeof each, " for each of the %.0f ranks on %s", ranks, gpu ? "that GPU" : "this machine");
        if ((n1.param_bytes + n1.act_bytes) * ranks <= avail)
            rc = tn_err("%s: key 'per_device_train_batch_size' %d: a micro-batch of %d x %d tokens needs %s of "
                        "activations (the model %s)%s, %s; lower per_device_train_batch_size (gradient_accumulation_steps "
                        "keeps the global batch)", cfg->source_path, cfg->per_device_train_batch_size,
                        cfg->per_device_train_batch_size, seq_len, human(n.act_bytes, a), human(n.param_bytes, b),
                        each, mem);
        else if (n1.param_bytes * ranks <= avail)
            rc = tn_err("%s: key 'cutoff_len' %d: one sequence of %d tokens needs %s of activations (the model %s)%s, "
                        "%s", cfg->source_path, cfg->cutoff_len, seq_len, human(n1.act_bytes, a),
                        human(n1.param_bytes, b), each, mem);
        else
            rc = blame_model(path, &mc, n.layer_bytes, n.embed_bytes, n.param_bytes, avail / ranks,
                             "with gradients and optimizer state", each, mem);
    }
    free(path);
    return rc;
}
