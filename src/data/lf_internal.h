/* lf_internal -- types shared by the lf_*.c files of the LLaMA-Factory data pipeline (lf_dataset.h is the
 * public interface): a JSON tree that keeps number lexemes and byte offsets (json.loads/json.dumps as
 * Python does them), growable buffers, dataset attributes, aligned examples and resolved templates. */
#ifndef TN_LF_INTERNAL_H
#define TN_LF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/lf_dataset.h"

/* ---- arena + buffers (lf_json.c) ---- */
typedef struct lf_arena_block lf_arena_block;
typedef struct { lf_arena_block *head; } lf_arena;
void *lf_alloc(lf_arena *a, size_t n);            /* 8-byte aligned, zeroed; never NULL */
char *lf_strndup(lf_arena *a, const char *s, size_t n);
void lf_arena_free(lf_arena *a);

typedef struct { char *p; size_t n, cap; } lf_buf;  /* growable bytes, kept NUL-terminated */
void lf_buf_put(lf_buf *b, const char *s, size_t n);
void lf_buf_puts(lf_buf *b, const char *s);
void lf_buf_putc(lf_buf *b, char c);

/* ---- JSON (lf_json.c) ---- */
enum { LJ_NULL, LJ_FALSE, LJ_TRUE, LJ_NUM, LJ_STR, LJ_ARR, LJ_OBJ };
typedef struct lj_val lj_val;
struct lj_val {
    int type;
    uint32_t n;            /* STR: bytes; NUM: lexeme bytes; ARR/OBJ: items */
    const char *s;         /* STR: decoded UTF-8 (NUL-terminated, may hold \0); NUM: lexeme in the source */
    const char *key;       /* member of an object: its decoded key */
    uint32_t klen;
    lj_val *child, *next;  /* ARR/OBJ items in order */
    size_t off, end;       /* byte span [off, end) in the parsed text */
};
typedef struct { size_t off; char msg[112]; } lj_error;
/* Parses text[0..n) as exactly one JSON value (Python's json.loads, incl. NaN/Infinity; strict about control
 * characters, invalid UTF-8 and lone surrogates; nesting deeper than 500 refused). NULL + err. */
lj_val *lj_parse(lf_arena *a, const char *text, size_t n, lj_error *err);
const lj_val *lj_get(const lj_val *obj, const char *key);   /* last member with that key (Python dict) */
int lj_streq(const lj_val *v, const char *s);               /* v is a string equal to s */
const char *lj_type_name(int type);
/* json.dumps(v, ensure_ascii=False) (indent < 0) or with indent=N. Duplicate keys as a Python dict. */
void lj_dump(const lj_val *v, int indent, lf_buf *out);
/* Python str() of a scalar (str, int, float, bool, None); -1 for arrays and objects. */
int lj_pystr(const lj_val *v, lf_buf *out);
/* 0 if s is well-formed UTF-8, else -1 with *bad = offset of the first bad byte. */
int lj_utf8_check(const char *s, size_t n, size_t *bad);
/* 1-based line and column of byte off in text. */
void lj_linecol(const char *text, size_t off, size_t *line, size_t *col);

/* ---- dataset attributes (lf_dataset_info.c) ---- */
enum { LF_ALPACA, LF_SHAREGPT };
typedef struct {
    char *name, *file_name;
    int formatting;
    /* columns (NULL = none) */
    char *prompt, *query, *response, *history, *messages, *system, *tools, *images;
    /* sharegpt tags (NULL = none) */
    char *role_tag, *content_tag, *user_tag, *assistant_tag, *observation_tag, *function_tag, *system_tag;
    const char *entry;     /* the entry's JSON text in dataset_info.json (hashed into the cache key) */
    size_t entry_len;
} lf_dsattr;
typedef struct {
    char *path;            /* dataset_info.json */
    char *text;            /* its bytes (entries point into it) */
    lf_dsattr *ds;
    int n;
} lf_dsinfo;
int lf_dsinfo_load(const char *dataset_dir, const char *names, lf_dsinfo *out);
void lf_dsinfo_free(lf_dsinfo *d);

/* ---- aligned examples (lf_formats.c) ---- */
enum { LF_USER, LF_ASSISTANT, LF_OBSERVATION, LF_FUNCTION };
typedef struct { int role; const char *s; size_t n; } lf_msg;
typedef struct {
    lf_msg *msg;           /* prompt then response messages */
    int n_prompt, n_resp;
    const char *system;    /* "" when none */
    size_t nsys;
    const char *tools;     /* "" when none (a JSON string of the tool list) */
    size_t ntools;
    const char *bad;       /* why LF's converter marks it broken (NULL = fine) */
    const char *file;      /* for messages: the data file and the record index in it */
    int rec;
    const char *dsname;    /* its dataset's name in dataset_info.json */
    int n_img;             /* images: paths as LF resolves them (media_dir joined when that file exists) */
    const char *const *img;
    const char *const *img_raw; /* as written in the record */
} lf_example;
typedef struct {
    lf_arena arena;        /* examples, messages and decoded strings */
    lf_example *ex;
    int n, cap;
} lf_examples;
typedef struct { char *path; char *bytes; size_t n; int type; } lf_file;
enum { LF_FILE_JSON, LF_FILE_TXT };
/* The files of a dataset (file_name is a file or a folder, whose files are taken in name order), read. */
int lf_dataset_files(const char *dataset_dir, const lf_dsattr *ds, lf_file **files, int *n);
void lf_files_free(lf_file *f, int n);
/* Aligns the records of the files (the first max_samples of the dataset when > 0) and appends them. Image
 * paths are resolved against media_dir (NULL: none given; "." is not assumed). */
int lf_align_dataset(const lf_dsattr *ds, const lf_file *files, int n_files, int max_samples, const char *media_dir,
                     lf_examples *out);
void lf_examples_free(lf_examples *e);

/* ---- templates (lf_template.c, lf_tools.c) ---- */
enum { LF_SLOT_TEXT, LF_SLOT_BOS, LF_SLOT_EOS };
typedef struct { int kind; const char *text; } lf_slot;
typedef struct { lf_slot s[3]; int n; } lf_fmt;
enum { LF_TOOLS_DEFAULT, LF_TOOLS_QWEN, LF_TOOLS_LLAMA3 };
typedef struct {
    const char *name;
    lf_fmt user, assistant, system, observation, function, prefix;
    int tool_format;
    const char *default_system;
    const char *stop0;     /* first stop word (the EOS when replace_eos) or NULL */
    int replace_eos, reasoning;
    int vision;            /* LF's qwen2_vl / qwen3_vl mm_plugin: <image> tags expand to vision tokens */
} lf_template_def;

typedef struct {
    const lf_template_def *def;
    const tn_tokenizer *tok;
    int32_t bos_id, eos_id, pad_id;   /* -1 = none (bos only) */
    int add_bos;                      /* tokenizer_config add_bos_token (pre-training only) */
    int parse_special;                /* special tokens in text are recognised (not split_special_tokens) */
    char *eos_text;                   /* what pre-training appends to each text */
    char *bos_text;                   /* the BOS token's text (pre-training without packing), NULL = none */
    int enable_thinking;              /* reasoning templates */
    int32_t *think_ids;               /* encode("<think>\n\n</think>\n\n") */
    size_t n_think;
    char date[32];                    /* llama3 tool prompt: "%d %b %Y" of today */
    int32_t image_pad_id;             /* vision templates: <|image_pad|> (-1 otherwise) */
} lf_template;
/* Resolves the template against the tokenizer; tokenizer_config.json beside tokenizer_path may be absent. */
int lf_template_init(lf_template *t, const char *name, const tn_tokenizer *tok, const char *tokenizer_path,
                     int enable_thinking);
void lf_template_free(lf_template *t);
extern const char *const lf_template_names;   /* "default, qwen, ..." for messages */
/* Appends the ids of formatter f applied to content (and {{idx}} for user turns, idx >= 0). */
int lf_fmt_encode(const lf_template *t, const lf_fmt *f, const char *content, size_t n, int idx, lf_buf *scratch,
                  tn_ids *out);
/* Tool prompt appended to the system text (json = the example's tools string); "" for an empty list. */
int lf_tools_prompt(const lf_template *t, const char *json, size_t n, lf_buf *out, const lf_example *e);
/* The assistant text of a function-call message (JSON of one call or a list), as LF's FunctionFormatter. */
int lf_function_text(const lf_template *t, const char *content, size_t n, lf_buf *out, const lf_example *e);

/* ---- encoding (lf_encode.c, lf_pack.c) ---- */
typedef struct {
    int cutoff;            /* effective cutoff (LF subtracts 1 when packing was set explicitly) */
    int train_on_prompt, mask_history;
    int packing;           /* resolved */
    int pt;
    const tn_vl_proc *vl;  /* image processor (NULL: no dataset has an images column) */
} lf_encode_opts;
/* One SFT example -> ids/labels (appended). img_tokens[k]: <|image_pad|> count of image k (NULL when the example
 * has none). Returns 0, or -1 + tn_err. */
int lf_encode_supervised(const lf_template *t, const lf_encode_opts *o, const lf_example *e, const int *img_tokens,
                         tn_ids *ids, tn_ids *labels);

/* ---- images (lf_media.c) ---- */
typedef struct { int h, w; uint8_t *rgb; } lf_img;  /* a prepared image: h x w x 3 */
/* Reads, decodes and prepares example e's images (out[k], tokens[k]); 0, or -1 + tn_err naming the data file,
 * dataset, record and image file. */
int lf_images_prepare(const tn_vl_proc *vl, const lf_example *e, lf_img *out, int *tokens);
void lf_imgs_free(lf_img *img, int n);
/* The `<image>` tags in s[0..n). */
int lf_count_image_tags(const char *s, size_t n);
/* s with each <image> tag replaced by <|vision_start|> + tokens[k] x <|image_pad|> + <|vision_end|>, k counting
 * on from *next. */
void lf_expand_image_tags(const char *s, size_t n, const int *tokens, int *next, lf_buf *out);
void lf_infer_seqlen(int source_len, int target_len, int cutoff_len, int *src_out, int *tgt_out);
/* Datasets with an images column (lf_load.c): *any set; with a vision template vl gets the processor settings
 * (a->processor_path, else preprocessor_config.json beside the tokenizer) and LF's pixel limits; images with stage
 * pt or packing are refused. 0 or -1 + tn_err. */
int lf_vision_setup(const lf_data_args *a, const lf_template *t, const lf_dsinfo *info, const lf_encode_opts *o,
                    tn_vl_proc *vl, int *any);
/* One example for generation, as LF's UnsupervisedDatasetProcessor with Template.encode_oneturn (its <image> tags
 * first expanded as lf_encode_supervised does, img_tokens as there; every run must survive the cut): the prompt is every
 * turn but the last (up to the assistant header), the label the last assistant turn as encoded (template suffix
 * included; an empty turn when the example has none), qwen3's empty thought appended to the prompt (enable_thinking
 * false) or prepended to the label (true) when the answer has no think block, both cut by infer_seqlen(cutoff).
 * Appended to prompt and label; 0 or -1 + tn_err. */
int lf_encode_oneturn(const lf_template *t, int cutoff, const lf_example *e, const int *img_tokens, tn_ids *prompt,
                      tn_ids *label);

/* Growable sample set under construction. */
typedef struct {
    tn_ids ids, labels, pos;
    int *len;
    int n, cap, has_pos;
    int n_dropped;
    char drop_reason[200];
    int has_img;           /* images kept (an image column was read) */
    int64_t *img_off, *pix_off;  /* per sample / per image, as in lf_samples */
    int32_t *img_hw;
    uint8_t *pix;
    int64_t n_img, cap_img;
    size_t n_pix, cap_pix;
} lf_build;
void lf_build_add(lf_build *b, const int32_t *ids, const int32_t *labels, const int32_t *pos, size_t n);
/* The images of the sample lf_build_add just added (call after it, also with n = 0, when has_img). */
void lf_build_add_images(lf_build *b, const lf_img *img, int n);
void lf_build_drop(lf_build *b, const lf_example *e, const char *why);
void lf_build_finish(lf_build *b, lf_samples *out);
void lf_build_free(lf_build *b);
/* Runs LF's processor over the examples in order (batches of 1000 rows as datasets.map does). */
int lf_process(const lf_template *t, const lf_encode_opts *o, const lf_example *const *ex, int n, lf_samples *out);
void lf_greedy_knapsack(int *lengths, int n, int capacity, int *bin_of_sorted, int *n_bins);

/* ---- split (lf_split.c) ---- */
/* numpy.random.default_rng(seed).permutation(n) */
void lf_np_permutation(uint64_t seed, int64_t n, int64_t *out);
/* HF Dataset.train_test_split(test_size, seed): test = perm[:n_test], train = perm[n_test:]. */
int lf_train_test_split(int64_t n, double val_size, uint64_t seed, int64_t *perm, int64_t *n_test);

/* ---- cache + hash (lf_cache.c) ---- */
typedef struct { uint32_t h[8]; uint64_t len; uint8_t buf[64]; size_t fill; } lf_sha256;
void lf_sha256_init(lf_sha256 *s);
void lf_sha256_update(lf_sha256 *s, const void *p, size_t n);
void lf_sha256_final(lf_sha256 *s, uint8_t out[32]);
int lf_cache_write(const char *path, const uint8_t key[32], const lf_samples *train, const lf_samples *eval);
/* 1 = hit (mapped), 0 = absent or stale (nothing set), -1 = I/O error. */
int lf_cache_try(const char *path, const uint8_t key[32], lf_samples *train, lf_samples *eval);

#endif
