/* lf_dataset -- LLaMA-Factory's data pipeline (the v0 trainer, snapshot ff6d4d1): what a training job
 * reads from `dataset`, `dataset_dir`, `template`, `cutoff_len`, ... becomes tokenized samples with
 * HF-aligned labels, exactly as LLaMA-Factory builds them.
 *
 * Owns (files src/data/lf_*.c): dataset_info.json entries; alpaca and sharegpt records in JSON, JSON
 * lines or txt files; several datasets concatenated in order, max_samples per dataset; the templates
 * default, qwen, qwen3, qwen3_nothink, llama3, qwen2_vl, qwen3_vl, qwen3_vl_nothink rendered slot by slot AT
 * TOKEN-ID LEVEL (each formatted
 * slot string is tokenized on its own, so merges never cross slot boundaries but do cross the content
 * boundary inside a slot); tool descriptions and tool calls (LF's default, qwen and llama3 tool formats);
 * the qwen3 empty-<think> rule; labels -100 on every prompt token and every assistant turn trained
 * (train_on_prompt / mask_history as LF); infer_seqlen truncation; SFT packing (greedy knapsack, LF's
 * bins padded to cutoff_len) and pre-training (text + EOS, blocks of cutoff_len); HF's
 * train_test_split for val_size (numpy PCG64 permutation); a tokenized cache file.
 *
 * Where LF would crash or do something undefined we stop with one tn_err line naming the file, the
 * record (0-based index in its file) or line, and what was expected. Where LF silently drops an
 * example (broken sharegpt role order, odd message count, no response) we drop it too and count it.
 *
 * Special tokens come from tokenizer_config.json next to tokenizer.json (bos_token, eos_token,
 * pad_token, add_bos_token), then LF's template fix: replace_eos makes the first stop word the EOS,
 * a missing EOS becomes <|endoftext|>, a missing PAD becomes the EOS.
 *
 * Images (the `images` column, lf_media.c): each path is joined to media_dir (default dataset_dir) when
 * that file exists, else taken as written, as LF's converter does; the vision templates (qwen2_vl, qwen3_vl,
 * qwen3_vl_nothink) need as many `<image>` tags in an example's messages as it has images and expand the k-th
 * into <|vision_start|> + n_k <|image_pad|> + <|vision_end|> (LF's Qwen2-VL / Qwen3-VL mm_plugin), n_k from
 * the image after data/vl_processor.h's pre-processing, whose uint8 result is kept with the sample (and in the
 * cache); text-only datasets mix freely. Refused in one line naming the data file, dataset, record and image
 * file: a missing or undecodable image, a tag count that differs from the image count, images under a
 * template without vision support, image tokens cut by cutoff_len (LF would fail in the model), images with
 * packing or stage pt.
 *
 * Not supported (refused by name): hub/remote datasets, formatting openai, preference/KTO columns, video and
 * audio columns, num_samples, csv/parquet/arrow files, other templates. Differences, on purpose: a folder's
 * files are read in name order (LF: os.listdir order); val_size 1 is a count of one (HF refuses 1.0);
 * a tools column may also hold the list itself. Pre-training labels mask the PAD id, as HF's
 * DataCollatorForLanguageModeling does (matters when PAD == the appended EOS, e.g. template default
 * with a LLaMA-3 tokenizer). */
#ifndef TN_LF_DATASET_H
#define TN_LF_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/vl_processor.h"
#include "tokenizer/tokenizer.h"

#define LF_IGNORE (-100)

typedef struct {               /* what the YAML says (keys of LLaMA-Factory) */
    const char *dataset;       /* "identity,alpaca_en_demo" (comma list, names in dataset_info.json) */
    const char *dataset_dir;   /* folder of dataset_info.json (NULL = LLaMA-Factory default "data") */
    const char *template_name; /* default, qwen, qwen3, qwen3_nothink, llama3 */
    const char *stage;         /* "sft" or "pt" (NULL = sft) */
    int cutoff_len;            /* 0 = default 2048 */
    int max_samples;           /* 0 = all; per dataset, first N, as LLaMA-Factory */
    int packing;               /* -1 = default (pt: on, sft: off); 1 = on (LF then uses cutoff_len - 1); 0 = off */
    int train_on_prompt, mask_history; /* LLaMA-Factory flags (defaults false) */
    double val_size;           /* 0 = none; fraction (<1) or count (>=1) held out, seed-shuffled as HF's train_test_split */
    int seed;
    const char *cache_dir;     /* where the tokenized cache goes (NULL = no cache) */
    /* Additions to the LF keys above: */
    const char *tokenizer_path; /* the tokenizer.json `tok` was loaded from: its bytes key the cache, and
                                   tokenizer_config.json in the same folder gives bos/eos/pad/add_bos_token
                                   (required: without it EOS is unknown) */
    int enable_thinking;       /* LF `enable_thinking` for qwen3: 0 = LF default (true), 1 = true, -1 = false */
    /* Images (vision-language data): */
    const char *media_dir;     /* LF `media_dir` (NULL = dataset_dir) */
    int64_t image_max_pixels, image_min_pixels; /* LF model args (0 = LF defaults 768*768, 32*32) */
    const char *processor_path; /* preprocessor_config.json (NULL = beside tokenizer_path); read when a dataset
                                   has an images column */
} lf_data_args;

typedef struct {
    int n;                     /* samples */
    int *len;                  /* [n] tokens of each sample */
    int32_t *ids;              /* all samples back to back */
    int32_t *labels;           /* same length; LF_IGNORE on positions without loss; HF alignment (label[t] =
                                  ids[t] at trained positions, the model shifts) */
    int64_t *off;              /* [n + 1]: sample i is [off[i], off[i+1]) */
    int32_t *pos;              /* position ids, only for SFT packing (restart at 0 per packed example, 0 on
                                  padding); NULL = 0 .. len-1 */
    int n_dropped;             /* examples LF drops (broken sharegpt roles or count, no response) */
    char drop_reason[200];     /* the first drop: file, record and why ("" when none) */
    /* Images (NULL img_off: no sample has one). Sample i's images are [img_off[i], img_off[i+1]), in the order
     * of their <|image_pad|> runs; image k is img_hw[2k] x img_hw[2k+1] RGB uint8 at pix + pix_off[k], ready
     * for tn_vl_patchify with vl. */
    int64_t *img_off;          /* [n + 1] */
    int32_t *img_hw;           /* [n_img][2]: height, width */
    int64_t *pix_off;          /* [n_img + 1] */
    uint8_t *pix;
    tn_vl_proc vl;             /* the processor settings the images were prepared with */
    void *map_;                /* internal: the mapped cache file these arrays point into (NULL = malloc'd) */
    size_t map_len_;
} lf_samples;

/* Builds the training samples and, with val_size, the held-out ones (eval may be NULL only when val_size
 * is 0; it then gets an empty set). With cache_dir the result goes to cache_dir/lf_<key>.bin (atomic
 * write), keyed by SHA-256 of every input (dataset files' bytes, dataset_info entries, template, stage,
 * cutoff_len, max_samples, packing, flags, val_size + seed, tokenizer.json and tokenizer_config.json
 * bytes); a matching cache is mapped (copy-on-write) instead of tokenizing again. Tokenization uses all
 * OpenMP threads. Returns 0, or -1 with tn_err set. */
int lf_load(const lf_data_args *a, const tn_tokenizer *tok, lf_samples *train, lf_samples *eval);
void lf_samples_free(lf_samples *s);
/* Number of images of sample set s (0 without images). */
int64_t lf_samples_images(const lf_samples *s);

/* The training view of s (data/dataset.h): variable-length samples padded to S tokens, its images (when it has
 * any) attached for tn_batch_fill_mm. d points into s, which must outlive it. */
void lf_samples_dataset(const lf_samples *s, int S, tn_dataset *d);

/* Maps an existing cache file. Every rank of a job can call lf_load after one rank wrote the cache (the
 * key is cheap to recompute): the file is mapped, so each rank reads from disk only the pages of the
 * samples it touches, and ranks on one node share them through the page cache. eval may be NULL. */
int lf_cache_map(const char *path, lf_samples *train, lf_samples *eval);

/* LLaMA-Factory's predict set (do_predict with predict_with_generate): the datasets a->dataset names (its
 * eval_dataset), max_samples each, through UnsupervisedDatasetProcessor: per example the prompt ids (every turn but
 * the last, ending with the assistant header) and the label ids (the last assistant turn as training encodes it,
 * template suffix included; empty when the example has no answer), cut by infer_seqlen(cutoff_len). Examples LF drops
 * (an even number of prompt turns, a broken conversation) are dropped and counted. Not cached.
 * Images as training prepares them (see Images above): the prompt holds each image's expanded run, and the example's
 * prepared images are kept in `images` for the model's image-aware prefill. */
typedef struct {
    int n;
    int64_t *prompt_off, *label_off; /* [n + 1]: example i is [off[i], off[i+1]) of prompt / label */
    int32_t *prompt, *label;
    int n_dropped;
    char drop_reason[200];
    lf_samples images;         /* only its image fields: n examples, img_off NULL when no dataset has an images
                                  column; example i's images are [img_off[i], img_off[i+1]), laid out as lf_samples */
} lf_predict_set;
int lf_load_predict(const lf_data_args *a, const tn_tokenizer *tok, lf_predict_set *out);
void lf_predict_set_free(lf_predict_set *s);
/* The template's extra stop ids for predict: tokenizer_config.json's additional_special_tokens (LF passes eos + these
 * to generate). Appends up to max ids to out; returns how many. */
int lf_additional_special_ids(const char *tokenizer_path, const tn_tokenizer *tok, int32_t *out, int max);

/* Chat prompts through the same templates (`tandem chat` / `tandem generate`). */
typedef struct lf_chat lf_chat;
/* NULL + tn_err for an unknown template. tokenizer_path: as in lf_data_args (tokenizer_config.json beside it). */
lf_chat *lf_chat_open(const char *template_name, const tn_tokenizer *tok, const char *tokenizer_path,
                      int enable_thinking);
void lf_chat_close(lf_chat *c);
/* The ids a model continues from: system (NULL or "" = the template's default), then turns[0..n) alternating
 * user, assistant, ..., user (n odd), rendered exactly as training renders them, up to where the assistant's
 * answer starts. Appends to out; 0 or -1 + tn_err. */
int lf_chat_prompt(const lf_chat *c, const char *system, const char *const *turns, int n, tn_ids *out);
/* The same with n_img images whose <|image_pad|> counts are img_tokens[k]: the turns' <image> tags expand as in
 * training (LF's mm_plugin), and their number must equal n_img. */
int lf_chat_prompt_mm(const lf_chat *c, const char *system, const char *const *turns, int n, const int *img_tokens,
                      int n_img, tn_ids *out);
/* The id that ends an assistant turn (the template's EOS), -1 if none. */
int32_t lf_chat_eos(const lf_chat *c);

#endif
