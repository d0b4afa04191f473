/* tokenizer -- Hugging Face byte-level BPE tokenizers (the tokenizer.json of Qwen2/2.5/3, LLaMA-3, GPT-2):
 * load, encode text to ids and decode ids to text with the results of HF `tokenizers`.
 *
 * Pipeline (as the JSON declares it): added tokens are split out of the raw text (leftmost-longest),
 * each remaining piece is normalized (null or NFC), split by the pre-tokenizer regexes (PCRE2),
 * mapped to bytes and merged by BPE (lowest merge rank first; `ignore_merges` honoured). Decoding
 * maps the byte-level characters back to bytes and replaces invalid UTF-8 by U+FFFD as Rust's
 * from_utf8_lossy does. Anything else (other models, normalizers, pre-tokenizers, decoders) is
 * refused at load with one line naming the file and the JSON key.
 *
 * Choices where HF cannot be followed: text that is not valid UTF-8 is refused by encode (HF's API
 * only takes valid strings); decode refuses an id that has no token (HF drops it silently). The
 * file's post_processor, truncation and padding are not applied: no BOS/EOS is added, callers do that.
 *
 * A loaded tokenizer is read-only: encode/decode may be called from several threads at once. */
#ifndef TN_TOKENIZER_H
#define TN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tn_tokenizer tn_tokenizer;
typedef struct { int32_t *ids; size_t n, cap; } tn_ids;         /* growable id array */

tn_tokenizer *tn_tokenizer_load(const char *path);               /* tokenizer.json; NULL + tn_err on error */
void tn_tokenizer_free(tn_tokenizer *t);
/* Appends the ids of text[0..len) to out. parse_special: added tokens with "special": true that occur in
 * the text are matched as single tokens (HF's default encode) when 1; treated as plain text when 0.
 * Non-special added tokens are always matched. No BOS/EOS is added. Returns 0 or -1 (+ tn_err). */
int tn_tokenizer_encode(const tn_tokenizer *t, const char *text, size_t len, int parse_special, tn_ids *out);
/* Decodes ids to a NUL-terminated malloc'd string (skip_special: leave out special added tokens).
 * Invalid UTF-8 produced by partial byte sequences is replaced by U+FFFD as HF does. NULL + tn_err on a bad id. */
char *tn_tokenizer_decode(const tn_tokenizer *t, const int32_t *ids, size_t n, int skip_special);
int32_t tn_tokenizer_token_to_id(const tn_tokenizer *t, const char *token);  /* vocab or added token; -1 if none */
const char *tn_tokenizer_id_to_token(const tn_tokenizer *t, int32_t id);     /* NULL if out of range */
int32_t tn_tokenizer_vocab_size(const tn_tokenizer *t);  /* 1 + the largest id (incl. added tokens) */
void tn_ids_free(tn_ids *v);
int tn_ids_push(tn_ids *v, int32_t id);

#endif
