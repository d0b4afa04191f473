/* generate -- decoding with a tn_model: the engine that chat, generate, predict and the API server share (sequences
 * in slots of a KV cache, decoded together, each with its own sampling settings, stop ids and seed), and the
 * full-recompute greedy path it is checked against.
 *
 * A step runs one forward (kv_forward.h) for every running slot: a slot whose prompt is not cached yet is
 * prefilled in that forward, every other slot decodes one token. A slot started between two steps joins at the
 * next one (continuous batching). The tokens a slot already holds that begin its next prompt are kept, so a
 * conversation's earlier turns are not computed again. Finished slots keep their cache until started anew or
 * released. */
#ifndef TN_GENERATE_H
#define TN_GENERATE_H

#include "model/kv_forward.h"
#include "model/model.h"
#include "model/sampling.h"

typedef enum { TN_FINISH_NONE, TN_FINISH_STOP, TN_FINISH_LENGTH } tn_finish;

typedef struct {
    int slot;
    int32_t token;      /* the new token (a stop id is reported too, and kept in the output, as HF keeps eos) */
    tn_finish finish;   /* STOP: token is a stop id; LENGTH: max_new reached or the context is full */
    int prefilled;      /* 1: this step prefilled the slot's prompt (token is its first: time to first token) */
} tn_gen_event;

typedef struct tn_gen tn_gen;
/* n_slots sequences of up to ctx tokens (prompt + answer). NULL + tn_err (kv_forward.h tn_kv_create). */
tn_gen *tn_gen_create(tn_model *m, int n_slots, int ctx);
void tn_gen_free(tn_gen *g);
int tn_gen_ctx(const tn_gen *g);
int tn_gen_slots(const tn_gen *g);
/* Starts slot on prompt[0..n) (n >= 1, at most ctx - 1 tokens) with sampling sp (seeded by sp->seed) and the stop ids
 * stop[0..n_stop). 0 or -1 + tn_err (the prompt does not fit). */
int tn_gen_start(tn_gen *g, int slot, const int32_t *prompt, int n, const tn_sampling *sp, const int32_t *stop,
                 int n_stop);
/* Images for the next tn_gen_start of slot (a VL model; mm->row ignored: every image belongs to that prompt, in the
 * order of its <|image_pad|> runs), borrowed until that prompt is prefilled by tn_gen_step. A start with images
 * reuses no cached tokens, nor does one whose kept prefix would end before a cached image (its position shift would
 * stay); one without images refuses a prompt whose uncached part holds <|image_pad|> tokens. */
int tn_gen_set_images(tn_gen *g, int slot, const tn_mm_batch *mm);
/* One step: one event per running slot into out[] (room for tn_gen_slots); their number (0: nothing runs), or -1 +
 * tn_err. */
int tn_gen_step(tn_gen *g, tn_gen_event *out);
int tn_gen_running(const tn_gen *g, int slot);
int tn_gen_n_running(const tn_gen *g);
/* The tokens generated since the slot's start (*n of them); valid until the next start or release. */
const int32_t *tn_gen_output(const tn_gen *g, int slot, int *n);
/* Tokens of the prompt that the last start found cached (not computed again). */
int tn_gen_reused(const tn_gen *g, int slot);
void tn_gen_cancel(tn_gen *g, int slot);  /* stops the slot; its cache stays */
void tn_gen_release(tn_gen *g, int slot); /* stops it and gives its cache's memory back */
size_t tn_gen_cache_resident(const tn_gen *g);

/* The reference: greedy decoding by full recompute (tn_model_logits over the whole sequence for every token).
 * ids [B, S] holds prompts of lengths lens[b]; appends up to max_new greedy tokens per row (stopping a row after
 * eos or at S), updating lens. a must be a workspace of exactly B x S. Returns decoding steps run. */
int tn_generate_greedy(tn_model *m, tn_acts *a, int32_t *ids, int *lens, int B, int S, int max_new, int eos,
                       int pad);

#endif
