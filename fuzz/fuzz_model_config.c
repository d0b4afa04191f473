/* fuzz_model_config -- HF config.json (src/model/model_config.c): tn_model_config_parse on the input;
 * an accepted config must pass tn_model_config_finish again, and what tn_model_config_save writes must
 * load back (tn_model_config_load) to the same model. */
#include "fuzz_util.h"
#include "model/model_config.h"

#define PATH "fuzz/config.json"

static void same_model(const tn_model_config *a, const tn_model_config *b) {
    FZ_ASSERT(strcmp(a->model_type, b->model_type) == 0);
    FZ_ASSERT(a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size);
    FZ_ASSERT(a->intermediate_size == b->intermediate_size && a->num_hidden_layers == b->num_hidden_layers);
    FZ_ASSERT(a->num_attention_heads == b->num_attention_heads && a->num_key_value_heads == b->num_key_value_heads);
    FZ_ASSERT(a->head_dim == b->head_dim && a->max_position_embeddings == b->max_position_embeddings);
    FZ_ASSERT(a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps);
    FZ_ASSERT(a->initializer_range == b->initializer_range);
    FZ_ASSERT(a->tie_word_embeddings == b->tie_word_embeddings);
    FZ_ASSERT(a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias);
    FZ_ASSERT(a->bos_token_id == b->bos_token_id && a->eos_token_id == b->eos_token_id);
    /* the writer puts float32 for an empty torch_dtype (informational only) */
    FZ_ASSERT(strcmp(a->torch_dtype[0] ? a->torch_dtype : "float32", b->torch_dtype) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fz_cstr(data, size);
    tn_model_config c, again, back;
    fz_err_reset();
    if (tn_model_config_parse(text, PATH, &c) != 0) {
        fz_check_error(PATH);
    } else {
        FZ_ASSERT(c.hidden_size > 0 && c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.head_dim > 0);
        FZ_ASSERT(c.num_attention_heads % c.num_key_value_heads == 0 && c.head_dim % 2 == 0);
        FZ_ASSERT(memchr(c.torch_dtype, 0, sizeof c.torch_dtype));
        again = c;
        FZ_ASSERT(tn_model_config_finish(&again, PATH) == 0);
        char *p = fz_path("config.json");
        FZ_ASSERT(tn_model_config_save(p, &c) == 0);
        if (tn_model_config_load(p, &back) != 0) {
            fprintf(stderr, "fuzz: a saved config does not load back: %s\n", tn_errmsg());
            abort();
        }
        same_model(&c, &back);
        free(p);
    }
    free(text);
    return 0;
}
