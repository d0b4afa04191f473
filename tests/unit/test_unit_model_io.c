/* test_unit_model_io -- HF model folders written by tn_model_save_hf and read back by
 * tn_model_config_load + tn_model_create + tn_model_load_hf: single file and forced shards, tied
 * embeddings, and folders that must be refused (a tensor of the wrong shape, a missing tensor) with an
 * error naming the tensor. Besides the round trip, the written files are read tensor by tensor with the
 * safetensors reader and compared with the values set here, so a mistake made symmetrically on both
 * sides (a transposed or swapped tensor) still fails. */
#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "testlib.h"

static tn_rng rng;

static void make_config(tn_model_config *c, const char *type, int tied, int attention_bias) {
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    c->vocab_size = 23, c->hidden_size = 8, c->intermediate_size = 12, c->num_hidden_layers = 2;
    c->num_attention_heads = 2, c->num_key_value_heads = 1, c->head_dim = 4, c->max_position_embeddings = 32;
    c->rope_theta = 10000.0, c->rms_norm_eps = 1e-5, c->initializer_range = 0.02;
    c->tie_word_embeddings = tied, c->attention_bias = attention_bias;
    c->bos_token_id = 1, c->eos_token_id = 2;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "float32");
    if (!CHECKF(tn_model_config_finish(c, "test") == 0, "%s", tn_errmsg())) exit(1);
}

/* every tensor random (norms and biases too, so none round-trips trivially as 0 or 1) */
static void fill_random(tn_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        float *h = malloc(p->numel * sizeof *h);
        for (size_t j = 0; j < p->numel; j++) h[j] = (float)(2 * tn_rng_uniform(&rng) - 1);
        tn_model_set(m, p, h);
        free(h);
    }
}

static char *path2(const char *dir, const char *name) { return tn_path_join(dir, name); }

static int exists(const char *dir, const char *name) {
    char *p = path2(dir, name);
    int e = tn_file_exists(p);
    free(p);
    return e;
}

/* Every base tensor of m is in the folder, F32, with m's shape and exactly m's values. */
static void check_folder_contents(const tn_model *m, const char *dir, int expect_tensors) {
    st_set s;
    if (!CHECKF(st_set_open(&s, dir) == 0, "%s", tn_errmsg())) return;
    int found = 0, total = 0;
    for (int f = 0; f < s.nfiles; f++) total += s.files[f].n;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (strstr(p->name, ".lora_")) continue;
        const st_file *file;
        const st_tensor *t = st_set_find(&s, p->name, &file);
        if (!CHECKF(t != NULL, "%s: no tensor %s", dir, p->name)) continue;
        found++;
        CHECKF(t->dtype == ST_F32 && t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
                   (p->ndim == 1 || t->shape[1] == p->shape[1]),
               "%s: %s stored as %s ndim %d", dir, p->name, st_dtype_name(t->dtype), t->ndim);
        float *a = malloc(p->numel * sizeof *a), *b = malloc(p->numel * sizeof *b);
        tn_model_get(m, p, a);
        if (CHECKF(st_read_f32(file, t, b, (int64_t)p->numel) == 0, "%s", tn_errmsg()))
            CHECKF(memcmp(a, b, p->numel * sizeof *a) == 0, "%s: %s values differ from the model's", dir, p->name);
        free(a);
        free(b);
    }
    CHECKF(found == expect_tensors && total == expect_tensors, "%s: %d tensors found, %d in files, want %d", dir,
           found, total, expect_tensors);
    st_set_close(&s);
}

/* Load dir into a fresh model built from dir/config.json; compare every tensor and the logits with m. */
static void check_reload(tn_model *m, const char *dir) {
    char *cp = path2(dir, "config.json");
    tn_model_config c2;
    int ok = CHECKF(tn_model_config_load(cp, &c2) == 0, "%s", tn_errmsg());
    free(cp);
    if (!ok) return;
    const tn_model_config *c = &m->cfg;
    CHECK(strcmp(c2.model_type, c->model_type) == 0 && c2.vocab_size == c->vocab_size &&
          c2.hidden_size == c->hidden_size && c2.intermediate_size == c->intermediate_size &&
          c2.num_hidden_layers == c->num_hidden_layers && c2.num_attention_heads == c->num_attention_heads &&
          c2.num_key_value_heads == c->num_key_value_heads && c2.head_dim == c->head_dim &&
          c2.tie_word_embeddings == c->tie_word_embeddings && c2.qkv_bias == c->qkv_bias && c2.o_bias == c->o_bias &&
          c2.rope_theta == c->rope_theta && c2.rms_norm_eps == c->rms_norm_eps);
    tn_model *m2 = tn_model_create(&c2, NULL, tn_backend_cpu());
    CHECK(m2->n_params == m->n_params && m2->n_total == m->n_total);
    if (CHECKF(tn_model_load_hf(m2, dir) == 0, "%s", tn_errmsg())) {
        int same = 1;
        for (int i = 0; i < m->n_params; i++) {
            const tn_param *p = &m->params[i], *q = tn_model_find(m2, p->name);
            if (!CHECKF(q && q->numel == p->numel, "reloaded model lacks %s", p->name)) continue;
            float *a = malloc(p->numel * sizeof *a), *b = malloc(p->numel * sizeof *b);
            tn_model_get(m, p, a);
            tn_model_get(m2, q, b);
            same &= CHECKF(memcmp(a, b, p->numel * sizeof *a) == 0, "%s: %s not bit-identical", dir, p->name);
            free(a);
            free(b);
        }
        /* logits on the same batch: identical */
        enum { B = 2, S = 9 };
        int32_t ids[B * S];
        for (int i = 0; i < B * S; i++) ids[i] = (i * 7 + 3) % m->V;
        size_t nl = (size_t)B * S * m->V;
        float *l1 = malloc(nl * sizeof *l1), *l2 = malloc(nl * sizeof *l2);
        tn_acts *a1 = tn_acts_create(m, B, S, 0), *a2 = tn_acts_create(m2, B, S, 0);
        tn_model_logits(m, a1, ids, B, S, l1);
        tn_model_logits(m2, a2, ids, B, S, l2);
        double sum = 0;
        for (size_t i = 0; i < nl; i++) sum += fabs(l1[i]);
        CHECKF(memcmp(l1, l2, nl * sizeof *l1) == 0 && sum > 0, "%s: logits differ after reload", dir);
        tn_acts_free(a1);
        tn_acts_free(a2);
        free(l1);
        free(l2);
    }
    tn_model_free(m2);
}

static int count_base(const tn_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_params; i++) n += strstr(m->params[i].name, ".lora_") == NULL;
    return n;
}

static cJSON *read_json(const char *dir, const char *name) {
    char *p = path2(dir, name);
    char *text = tn_read_file(p, NULL, 0);
    free(p);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

static void test_round_trips(void) {
    tn_model_config c;
    make_config(&c, "llama", 0, 1); /* untied, biases on q/k/v/o */
    tn_model *m = tn_model_create(&c, NULL, tn_backend_cpu());
    fill_random(m);
    int nb = count_base(m);
    CHECK(nb == 3 + 2 * 13); /* embed, norm, lm_head; per layer 2 norms, 7 weights, 4 biases */
    CHECK(tn_model_find(m, "lm_head.weight") && tn_model_find(m, "model.layers.1.self_attn.o_proj.bias"));

    char dir[512];
    snprintf(dir, sizeof dir, "%s/single", tl_tmpdir());
    CHECKF(tn_model_save_hf(m, dir, 0) == 0, "%s", tn_errmsg());
    CHECK(exists(dir, "config.json") && exists(dir, "model.safetensors") && !exists(dir, "model.safetensors.index.json"));
    check_folder_contents(m, dir, nb);
    check_reload(m, dir);

    /* forced shards: ~1.5 KB per shard */
    snprintf(dir, sizeof dir, "%s/sharded", tl_tmpdir());
    CHECKF(tn_model_save_hf(m, dir, 1536) == 0, "%s", tn_errmsg());
    CHECK(exists(dir, "model.safetensors.index.json") && !exists(dir, "model.safetensors"));
    cJSON *idx = read_json(dir, "model.safetensors.index.json");
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(idx, "metadata"), "total_size");
    CHECK(cJSON_IsObject(wm) && cJSON_GetArraySize(wm) == nb);
    CHECKF(cJSON_IsNumber(ts) && ts->valuedouble == (double)(m->n_total * sizeof(float)), "index total_size");
    /* several distinct shard files, each present */
    char shards[16][64];
    int nshards = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, wm) {
        CHECK(tn_model_find(m, it->string) != NULL);
        int seen = 0;
        for (int k = 0; k < nshards; k++) seen |= strcmp(shards[k], it->valuestring) == 0;
        if (!seen && nshards < 16) snprintf(shards[nshards++], 64, "%s", it->valuestring);
    }
    CHECKF(nshards >= 3, "only %d shards with max_shard_bytes 1536", nshards);
    for (int k = 0; k < nshards; k++) CHECKF(exists(dir, shards[k]), "shard %s missing", shards[k]);
    cJSON_Delete(idx);
    check_folder_contents(m, dir, nb);
    check_reload(m, dir);

    /* re-saving a folder in the other layout must not leave the old entry file to be picked up */
    fill_random(m);
    CHECKF(tn_model_save_hf(m, dir, 0) == 0, "%s", tn_errmsg());
    CHECK(exists(dir, "model.safetensors") && !exists(dir, "model.safetensors.index.json"));
    check_reload(m, dir);
    snprintf(dir, sizeof dir, "%s/single", tl_tmpdir());
    CHECKF(tn_model_save_hf(m, dir, 2048) == 0, "%s", tn_errmsg());
    CHECK(!exists(dir, "model.safetensors") && exists(dir, "model.safetensors.index.json"));
    check_reload(m, dir);

    /* a LoRA model loads the same base weights (its adapters are not in the folder and stay untouched) */
    tn_lora_config lora = {.r = 2, .alpha = 4, .targets = (1u << TN_LT_V) | (1u << TN_LT_UP)};
    tn_model *ml = tn_model_create(&c, &lora, tn_backend_cpu());
    const tn_param *la = tn_model_find(ml, "model.layers.1.mlp.up_proj.lora_A.weight");
    float marker[2 * 8];
    for (int i = 0; i < 16; i++) marker[i] = (float)i;
    if (CHECK(la && la->numel == 16)) tn_model_set(ml, la, marker);
    CHECKF(tn_model_load_hf(ml, dir) == 0, "%s", tn_errmsg());
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i], *q = tn_model_find(ml, p->name);
        float *a = malloc(p->numel * sizeof *a), *b = malloc(p->numel * sizeof *b);
        tn_model_get(m, p, a);
        if (CHECK(q != NULL)) tn_model_get(ml, q, b);
        CHECKF(q && memcmp(a, b, p->numel * sizeof *a) == 0, "LoRA model: base %s differs", p->name);
        free(a);
        free(b);
    }
    float back[16];
    if (la) {
        tn_model_get(ml, la, back);
        CHECK(memcmp(back, marker, sizeof back) == 0);
    }
    /* and saving it as an HF folder writes the base weights only (LoRA not merged, not included) */
    snprintf(dir, sizeof dir, "%s/from_lora", tl_tmpdir());
    CHECKF(tn_model_save_hf(ml, dir, 0) == 0, "%s", tn_errmsg());
    check_folder_contents(ml, dir, nb);
    check_reload(m, dir);
    tn_model_free(ml);
    tn_model_free(m);
}

static void test_tied(void) {
    tn_model_config c;
    make_config(&c, "qwen2", 1, 0);
    tn_model *m = tn_model_create(&c, NULL, tn_backend_cpu());
    fill_random(m);
    CHECK(m->lm_head == m->embed && tn_model_find(m, "lm_head.weight") == NULL);
    CHECK(tn_model_find(m, "model.layers.0.self_attn.q_proj.bias") && !tn_model_find(m, "model.layers.0.self_attn.o_proj.bias"));
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tied", tl_tmpdir());
    CHECKF(tn_model_save_hf(m, dir, 0) == 0, "%s", tn_errmsg());
    st_set s;
    if (CHECKF(st_set_open(&s, dir) == 0, "%s", tn_errmsg())) {
        const st_file *f;
        CHECK(st_set_find(&s, "lm_head.weight", &f) == NULL);
        CHECK(st_set_find(&s, "model.embed_tokens.weight", &f) != NULL);
        st_set_close(&s);
    }
    cJSON *cfg = read_json(dir, "config.json");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings")));
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "model_type")), "qwen2") == 0);
    cJSON_Delete(cfg);
    check_folder_contents(m, dir, count_base(m));
    check_reload(m, dir);
    tn_model_free(m);
}

/* Write dir/model.safetensors from m's tensors, with one tensor reshaped (transposed) or left out. */
static void write_altered(const tn_model *m, const char *dir, const char *victim, int drop) {
    st_entry *e = calloc((size_t)m->n_params, sizeof *e);
    float **bufs = calloc((size_t)m->n_params, sizeof *bufs);
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const tn_param *p = &m->params[i];
        if (drop && strcmp(p->name, victim) == 0) continue;
        bufs[n] = malloc(p->numel * sizeof(float));
        tn_model_get(m, p, bufs[n]);
        e[n].name = p->name;
        e[n].dtype = e[n].src_dtype = ST_F32;
        e[n].ndim = p->ndim;
        e[n].shape[0] = p->shape[0];
        e[n].shape[1] = p->shape[1];
        if (!drop && strcmp(p->name, victim) == 0) e[n].shape[0] = p->shape[1], e[n].shape[1] = p->shape[0];
        e[n].data = bufs[n];
        n++;
    }
    tn_mkdirs(dir);
    char *path = path2(dir, "model.safetensors");
    CHECKF(st_write(path, e, n, NULL) == 0, "%s", tn_errmsg());
    free(path);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
}

static void test_refusals(void) {
    tn_model_config c;
    make_config(&c, "llama", 0, 0);
    tn_model *m = tn_model_create(&c, NULL, tn_backend_cpu());
    fill_random(m);
    tn_model *m2 = tn_model_create(&c, NULL, tn_backend_cpu());
    char dir[512];

    const char *victim = "model.layers.1.mlp.down_proj.weight"; /* [8, 12] stored as [12, 8] */
    snprintf(dir, sizeof dir, "%s/badshape", tl_tmpdir());
    write_altered(m, dir, victim, 0);
    CHECK(tn_model_load_hf(m2, dir) == -1);
    CHECKF(strstr(tn_errmsg(), victim) && strstr(tn_errmsg(), "[12, 8]") && strstr(tn_errmsg(), "[8, 12]"),
           "wrong-shape error does not name the tensor and shapes: %s", tn_errmsg());

    victim = "model.layers.0.self_attn.k_proj.weight";
    snprintf(dir, sizeof dir, "%s/missing", tl_tmpdir());
    write_altered(m, dir, victim, 1);
    CHECK(tn_model_load_hf(m2, dir) == -1);
    CHECKF(strstr(tn_errmsg(), victim) != NULL, "missing-tensor error does not name it: %s", tn_errmsg());

    victim = "lm_head.weight"; /* untied config, folder saved without the head */
    snprintf(dir, sizeof dir, "%s/nohead", tl_tmpdir());
    write_altered(m, dir, victim, 1);
    CHECK(tn_model_load_hf(m2, dir) == -1);
    CHECKF(strstr(tn_errmsg(), victim) != NULL, "missing lm_head error does not name it: %s", tn_errmsg());

    /* a folder without weights */
    snprintf(dir, sizeof dir, "%s/empty", tl_tmpdir());
    tn_mkdirs(dir);
    CHECK(tn_model_load_hf(m2, dir) == -1 && strlen(tn_errmsg()) > 0);
    tn_model_free(m);
    tn_model_free(m2);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    tn_rng_seed(&rng, 2024);
    test_round_trips();
    test_tied();
    test_refusals();
    int failed = tl_failures;
    if (!failed) nftw(tl_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* kept for inspection on failure */
    return tl_done("test_unit_model_io");
}
