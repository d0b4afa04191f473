/* infer -- what every inference command (chat, generate, predict, api) opens from an inference YAML
 * (LLaMA-Factory's keys): the model with its adapter, the tokenizer, the chat template, the ids that end an
 * answer, and the sampling settings; and the text of a growing answer, piece by piece, for streaming.
 *
 * Stop ids: the template's EOS (its first stop word for qwen/qwen3/llama3) plus the eos_token_id entries of the
 * model folder's generation_config.json. Sampling: the YAML's do_sample, temperature, top_p, top_k,
 * repetition_penalty, max_new_tokens (LF defaults). Unlike LF's chat engine, fields of generation_config.json are
 * not merged in (LF's chat silently takes the model's top_k 20 etc. where the request leaves HF's defaults; the
 * YAML is what tandem uses). */
#ifndef TN_INFER_H
#define TN_INFER_H

#include <stdint.h>

#include "config/train_config.h"
#include "data/lf_dataset.h"
#include "model/generate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define TN_MAX_STOP 16

typedef struct {
    const tn_train_config *cfg;
    tn_model *m;
    tn_tokenizer *tok;
    char *tok_path;
    lf_chat *chat;
    int32_t eos;                  /* the template's EOS (finish_reason "stop" means it was generated) */
    int32_t stop[TN_MAX_STOP];    /* every id that ends an answer */
    int n_stop;
    int n_vocab;
} tn_infer;

/* Loads what cfg names (model_name_or_path, adapter_name_or_path, template) on the CPU backend. merge_lora: fold the
 * adapter into the weights (faster decoding) or keep it beside them. 0 or -1 + tn_err (one line naming the key). */
int tn_infer_open(tn_infer *s, const tn_train_config *cfg, int merge_lora);
void tn_infer_close(tn_infer *s);
/* The YAML's sampling settings with this seed. */
tn_sampling tn_infer_sampling(const tn_infer *s, uint64_t seed);
/* The context a generation may use: the model's max_position_embeddings, at most cap (0: no cap). */
int tn_infer_context(const tn_infer *s, int cap);
/* The prompt of a conversation turns[0..n) (user, assistant, ..., user) with the YAML's default_system (or system
 * when not NULL), appended to out. */
int tn_infer_prompt(const tn_infer *s, const char *system, const char *const *turns, int n, tn_ids *out);
/* The same for a VL model with images (img_tokens[k] <|image_pad|> tokens each): the <image> tags of the turns
 * expand as in training. */
int tn_infer_prompt_mm(const tn_infer *s, const char *system, const char *const *turns, int n, const int *img_tokens,
                       int n_img, tn_ids *out);

/* Text of an answer as it grows: tn_text_next returns the text of ids[0..n) not returned before (malloc'd, maybe
 * ""), holding back a character whose bytes are not all there yet unless final. Special tokens are left out. */
typedef struct {
    size_t emitted;
} tn_text_stream;
char *tn_text_next(tn_text_stream *ts, const tn_tokenizer *tok, const int32_t *ids, int n, int final);

#endif
