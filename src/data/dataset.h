/* dataset -- tokenized training samples, padded per batch, and the per-epoch sampler.
 *
 * Owns: tn_dataset (n samples x S tokens: input_ids and HF-aligned labels, -100 = not trained),
 * the bundled demo tasks (generated here, byte-level vocabulary: no download), and batch assembly.
 * Samples are right-padded with the PAD id and label -100, so a causal model needs no attention mask; a batch
 * is padded only to its own longest sample (rounded up to a multiple of 8, as LLaMA-Factory's collator
 * does), not to the dataset's: on chat data most samples are far shorter than the longest. Vision-language
 * samples also carry their images (prepared uint8 RGB); tn_batch_fill_mm turns a micro-batch's images into
 * the model's pixel_values (data/mm_batch.h). */
#ifndef TN_DATASET_H
#define TN_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/mm_batch.h"
#include "data/vl_processor.h"

/* Byte-level vocabulary of the demo tasks: ids 0..255 are bytes, then three specials. */
enum { TN_BYTE_BOS = 256, TN_BYTE_EOS = 257, TN_BYTE_PAD = 258, TN_BYTE_VOCAB = 259 };

typedef struct {
    int n, S;
    int32_t *ids;     /* [n, S] (fixed-length samples: the demo), or NULL */
    int32_t *labels;  /* [n, S] */
    /* Variable-length samples (LLaMA-Factory data, usually a mapped cache file): sample i is
     * [var_off[i], var_off[i + 1]) of var_ids / var_labels, right-padded to S when a batch is filled, so a
     * rank touches only the pages of the samples it trains on. */
    const int32_t *var_ids, *var_labels;
    const int64_t *var_off;
    int32_t pad_id;
    /* Images of vision-language samples (variable-length samples only; NULL img_off: none): sample i's images
     * are [img_off[i], img_off[i+1]) in the order of its <|image_pad|> runs, image k img_hw[2k] x img_hw[2k+1]
     * RGB bytes at pix + pix_off[k], patchified with vl. */
    const int64_t *img_off, *pix_off;
    const int32_t *img_hw;
    const uint8_t *pix;
    const tn_vl_proc *vl;
} tn_dataset;

/* Sample i as len ids and labels, len >= its own length (padding: pad_id, label -100). */
void tn_dataset_row(const tn_dataset *d, int i, int len, int32_t *ids, int32_t *labels);
/* Tokens of sample i before padding (S for fixed-length samples). */
int tn_dataset_len(const tn_dataset *d, int i);
/* Length to pad a batch whose longest sample has `longest` tokens: the next multiple of 8, at most d->S. */
int tn_dataset_batch_len(const tn_dataset *d, int longest);

void tn_dataset_free(tn_dataset *d);

/* Demo task "demo_addition": "a+b=" -> a+b, then EOS, with a, b in [0, 10^digits). Every number is written
 * least significant digit first and zero-padded to a fixed width (digits, digits + 1 for the sum): 35+72 is
 * "53+27=701". Then each digit of the sum sits at the same distance from the two digits it adds and from
 * the carry's digits, whatever the position, so one attention pattern serves every digit, and each digit
 * depends only on digits already seen. A small model learns that within a few hundred steps; written the
 * usual way (variable widths, most significant first) it sits on a loss plateau whose length depended on
 * rounding (the BLAS kernel). The prompt is masked (only the answer and EOS are trained). Problems are
 * split deterministically: a problem is held out iff hash(a, b) falls in the eval fraction, so training
 * never sees an eval problem. which: 0 = training split, 1 = held-out split. */
int tn_demo_addition(int digits, int n, int which, uint64_t seed, int S, tn_dataset *d);
/* Encode prompt bytes for generation: BOS + text. Returns the length written (<= cap). */
int tn_demo_encode_prompt(const char *text, int32_t *ids, int cap);

/* Epoch sampler: a permutation of [0, n) drawn from (seed, epoch); sample k of the run is
 * order(epoch = k / n)[k % n]. */
typedef struct {
    int n;
    uint64_t seed;
    int epoch;
    int32_t *order;
} tn_sampler;

void tn_sampler_init(tn_sampler *s, int n, uint64_t seed);
void tn_sampler_free(tn_sampler *s);
int tn_sampler_get(tn_sampler *s, int64_t k);
/* Data parallelism: the sampler's stream is cut into global batches of world * accum * B samples; rank r
 * takes the contiguous slice [r * accum * B, (r + 1) * accum * B) of each, micro-batch a its a-th B rows.
 * So each epoch's samples are used exactly once across all ranks whatever the world size; an epoch whose
 * size the global batch does not divide ends inside a global batch, which is completed from the next
 * epoch's shuffle (no sample dropped, none repeated within an epoch). Returns the stream position of row b. */
static inline int64_t tn_dist_position(int64_t batch_start, int rank, int accum, int B, int a, int b) {
    return batch_start + ((int64_t)rank * accum + a) * B + b;
}
/* Copy samples k0 .. k0+B-1 (sampler order) into ids/labels [B, len] and return len, the batch's padded
 * length (tn_dataset_batch_len of its longest sample; ids/labels must hold B x d->S). */
int tn_batch_fill(const tn_dataset *d, tn_sampler *s, int64_t k0, int B, int32_t *ids, int32_t *labels);

/* Storage of one micro-batch's images, reused from step to step (zero-initialise; tn_mm_buf_free). */
typedef struct {
    tn_mm_batch mb;            /* what the model reads: points into the arrays below */
    int32_t *grid_thw, *row;
    float *pixel_values;
    size_t cap_images, cap_values;
} tn_mm_buf;
/* The images of the micro-batch tn_batch_fill(d, s, k0, B, ...) fills: rows b = 0..B-1, each sample's images
 * in order, as pixel_values rows (rescaled, normalised, patchified: tn_vl_patchify). Returns &buf->mb (valid
 * until buf is filled again or freed); n_images 0 for a text-only micro-batch or dataset. */
const tn_mm_batch *tn_batch_fill_mm(const tn_dataset *d, tn_sampler *s, int64_t k0, int B, tn_mm_buf *buf);
/* The same for rows b = 0..B-1 holding samples idx[b] (idx[b] < 0: a padding row, no images): evaluation
 * takes its rows by index, not from the sampler. */
const tn_mm_batch *tn_rows_fill_mm(const tn_dataset *d, const int *idx, int B, tn_mm_buf *buf);
void tn_mm_buf_free(tn_mm_buf *buf);

#endif
