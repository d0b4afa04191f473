/* model_config -- the Hugging Face config.json of a LLaMA-family decoder (llama, qwen2, qwen3, mistral).
 *
 * Reads the keys the model needs, applies HF's defaults for absent optional keys, and rejects what
 * tandem cannot run (another model_type, head counts that do not divide, rope_scaling, sliding window
 * in use) with one line naming the file and key. Writes config.json back in HF's layout. */
#ifndef TN_MODEL_CONFIG_H
#define TN_MODEL_CONFIG_H

typedef struct {
    char model_type[16];       /* "llama" | "qwen2" | "qwen3" | "mistral" */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;   /* default: num_attention_heads */
    int head_dim;              /* default: hidden_size / num_attention_heads */
    int max_position_embeddings;
    double rope_theta;         /* default 10000 */
    double rms_norm_eps;       /* default 1e-6 (HF LlamaConfig default) */
    int tie_word_embeddings;   /* default 0 */
    int attention_bias;        /* llama/mistral/qwen3: bias on q,k,v,o (default 0) */
    int qkv_bias;              /* derived: qwen2 => 1; others => attention_bias */
    int o_bias;                /* derived: llama/mistral/qwen3 attention_bias */
    int qk_norm;               /* derived: qwen3 => RMSNorm of each q and k head (q_norm, k_norm [head_dim]) */
    double initializer_range;  /* default 0.02 */
    int bos_token_id, eos_token_id; /* -1 when absent */
    char torch_dtype[16];      /* as written ("float32", "bfloat16", ...), informational */
} tn_model_config;

/* Parse from a file (path used in messages) or from a JSON text. 0 ok, -1 with tn_err. */
int tn_model_config_load(const char *path, tn_model_config *c);
int tn_model_config_parse(const char *json_text, const char *path_for_errors, tn_model_config *c);
/* Validate derived invariants (positive sizes, heads divide, even head_dim, ...); fills derived fields. */
int tn_model_config_finish(tn_model_config *c, const char *path_for_errors);
/* Write config.json (atomic). */
int tn_model_config_save(const char *path, const tn_model_config *c);

#endif
