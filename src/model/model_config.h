/* model_config -- the Hugging Face config.json of a LLaMA-family decoder (llama, qwen2, qwen3, mistral), and of the
 * Qwen vision-language models (qwen2_vl, qwen2_5_vl, qwen3_vl: their text decoder here, the vision tower in
 * tn_vision_config, parsed by model_config_vl.c).
 *
 * Reads the keys the model needs, applies HF's defaults for absent optional keys, and rejects what
 * tandem cannot run (another model_type, head counts that do not divide, rope_scaling, sliding window
 * in use) with one line naming the file and key. Writes config.json back in HF's layout. */
#ifndef TN_MODEL_CONFIG_H
#define TN_MODEL_CONFIG_H

enum { TN_VL_NONE, TN_VL_QWEN2, TN_VL_QWEN25, TN_VL_QWEN3 };
#define TN_VL_MAX_IDX 64

/* The vision tower and multimodal settings of a VL config.json (kind TN_VL_NONE: a text-only model). */
typedef struct {
    int kind;
    int depth, E, I, heads, in_ch, patch, merge, tpatch; /* E = vision width, I = its MLP width */
    int out_hidden;            /* merger output = the text hidden size */
    char act[24];              /* quick_gelu | gelu_pytorch_tanh | gelu | silu */
    int num_pos;               /* Qwen3-VL: learned position grid G*G */
    int n_deep, deep_idx[TN_VL_MAX_IDX];   /* Qwen3-VL deepstack_visual_indexes */
    int window;                /* Qwen2.5-VL window_size (pixels) */
    int n_full, full_idx[TN_VL_MAX_IDX];   /* Qwen2.5-VL fullatt_block_indexes */
    int tokens_per_second;
    int mrope[3];              /* mrope_section (t, h, w) */
    int interleaved;           /* Qwen3-VL: frequencies T H W T H W ... */
    int image_token_id, video_token_id, vision_start_token_id, vision_end_token_id, vision_token_id;
    int text_nested;           /* the file held the text settings in text_config only */
} tn_vision_config;

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
    tn_vision_config vis;      /* vis.kind != TN_VL_NONE: a vision-language model */
} tn_model_config;

/* Parse from a file (path used in messages) or from a JSON text. 0 ok, -1 with tn_err. */
int tn_model_config_load(const char *path, tn_model_config *c);
int tn_model_config_parse(const char *json_text, const char *path_for_errors, tn_model_config *c);
/* Validate derived invariants (positive sizes, heads divide, even head_dim, ...); fills derived fields. */
int tn_model_config_finish(tn_model_config *c, const char *path_for_errors);
/* model_config_vl.c: the VL parts. vl_kind: TN_VL_* of a model_type (TN_VL_NONE for others). */
int tn_vl_kind(const char *model_type);
struct cJSON;
/* Parses text_config (or the top-level text keys) into c's text fields via parse_text, then vision_config,
 * rope_scaling.mrope_section and the special token ids. */
int tn_vl_config_parse(const struct cJSON *root, const char *path, tn_model_config *c,
                       int (*parse_text)(const struct cJSON *text, const struct cJSON *root, const char *path,
                                         tn_model_config *c));
int tn_vl_config_check(const tn_model_config *c, const char *path);
/* Writes a VL config.json body to o (released layout: text keys top-level and in text_config). */
void tn_vl_config_write(void *file, const tn_model_config *c);
/* A VL model's preprocessor_config.json (transformers' Qwen2VLImageProcessor keys) with the released checkpoints'
 * processor settings for its patch and merge sizes; nothing for a text model. 0 or -1 with tn_err. */
int tn_vl_write_preprocessor_config(const tn_model_config *c, const char *path);
/* Write config.json (atomic). */
int tn_model_config_save(const char *path, const tn_model_config *c);

#endif
