/* tok_internal -- the tables of a loaded tokenizer and the per-call encode state, shared by the files
 * of src/tokenizer/ only (tokenizer.h is the public interface).
 *
 * Every id in [0, vocab_size) has a flag byte; a token string (its model.vocab key, or for an added
 * token its content) lives in one arena. One string -> id map serves model.vocab and the added tokens:
 * an added token whose content is also in model.vocab must carry the same id, so keys never clash. */
#ifndef TN_TOK_INTERNAL_H
#define TN_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define TK_MAX_ID (1 << 24)        /* ids beyond this are refused: the id tables are dense arrays */
#define TK_MAX_SPLITS 8            /* Split pre-tokenizers in one Sequence */
#define TK_BL_NCP 0x144            /* byte-level characters are U+0021..U+0143 */

enum { TK_VOCAB = 1, TK_ADDED = 2, TK_SPECIAL = 4 };

typedef struct {                   /* open addressing, linear probing; slot id -1 = empty */
    int32_t *id;
    uint32_t *hash;
    size_t mask;
} tk_strmap;

typedef struct { uint64_t key; int32_t rank, id; } tk_merge;
typedef struct {                   /* (left id, right id) -> merge rank and merged id; key ~0 = empty */
    tk_merge *slot;
    size_t mask;
    int shift;
} tk_mergemap;

typedef struct {
    const char *content;           /* in the arena */
    size_t len;
    int32_t id;
    uint8_t special, normalized, lstrip, rstrip, single_word;
} tk_added;

typedef struct {
    const char *s;                 /* the text to find: content, or its normalized form (then owned) */
    size_t n;
    const tk_added *tok;
    int owned;
} tk_pattern;

/* Added tokens of one kind (matched on raw or on normalized text), grouped by first byte, longest first. */
typedef struct {
    int n;
    tk_pattern *pat;
    int start[257];                /* pat[start[b] .. start[b+1]) begin with byte b */
} tk_matcher;

typedef struct {
    pcre2_code *re;
    int jit;
} tk_regex;

struct tn_tokenizer {
    char *path;
    int32_t vocab_size;            /* 1 + the largest id */
    uint8_t *flags;                /* per id: TK_VOCAB | TK_ADDED | TK_SPECIAL; 0 = hole */
    uint32_t *str_off;             /* per id: token string in arena (valid when flags != 0) */
    uint32_t *str_len;
    char *arena;
    size_t arena_len, arena_cap;
    tk_strmap map;

    tk_mergemap merges;
    int ignore_merges;
    int32_t unk_id;                /* -1: a byte without a token is an error */
    int fuse_unk;
    int32_t byte_id[256];          /* token of each byte's byte-level character, -1 if absent */
    tk_merge *byte_pair;           /* [a << 8 | b]: the merge of two byte tokens (rank INT32_MAX: none) */

    uint16_t b2u[256];             /* GPT-2 bytes_to_unicode */
    int16_t u2b[TK_BL_NCP];        /* its inverse, -1 off the map */
    char bl_utf8[256][2];          /* b2u as UTF-8 */
    uint8_t bl_len[256];

    tk_added *added;
    int n_added;
    tk_matcher raw_match, norm_match;

    int nfc;                       /* normalizer: NFC (else none) */
    int n_splits;                  /* Split{Regex, Isolated} steps, in order, before ByteLevel */
    tk_regex split[TK_MAX_SPLITS];
    int bl_prefix_space;           /* ByteLevel.add_prefix_space */
    tk_regex bl_re;                /* ByteLevel.use_regex: the GPT-2 pattern; re NULL when off */
    uint32_t max_pairs;            /* ovector pairs a match needs */

    pthread_mutex_t pool_lock;     /* encode scratch states kept between calls (one per concurrent caller) */
    struct tk_enc **pool;
    int npool, pool_cap;
};

/* Word cache slot: a short pre-token and its ids (HF keeps a similar cache; words repeat a lot). */
#define TK_CACHE_SLOTS 16384
#define TK_CACHE_WORD 22
#define TK_CACHE_IDS 8
typedef struct {
    uint64_t h;
    uint8_t n, nids;               /* n == 0: empty */
    char w[TK_CACHE_WORD];
    int32_t ids[TK_CACHE_IDS];
} tk_cslot;

/* Scratch of one encode call, reused by later calls through the tokenizer's pool (the tables stay
 * read-only; a state is used by one call at a time). */
typedef struct tk_enc {
    const tn_tokenizer *t;
    tn_ids *out;
    int parse_special;
    pcre2_match_data *md;
    pcre2_jit_stack *jit_stack;    /* made on demand when the default JIT stack is too small */
    pcre2_match_context *mctx;
    char *pbuf;                    /* piece with ByteLevel's prefix space */
    size_t pcap;
    char *bbuf;                    /* pre-token as byte-level string (ignore_merges lookup) */
    size_t bcap;
    int32_t *sym, *rank, *merged, *prev, *next;  /* BPE work arrays */
    size_t symcap;
    int64_t *heap;
    size_t heapcap;
    tk_cslot *cache;               /* TK_CACHE_SLOTS, direct-mapped by word hash */
} tk_enc;

/* tok_maps.c */
uint64_t tk_hash(const void *p, size_t n);
int tk_strmap_init(tk_strmap *m, size_t n);
void tk_strmap_free(tk_strmap *m);
int32_t tk_strmap_get(const tn_tokenizer *t, const char *s, size_t n);
/* Inserts id under its string; returns -1 when inserted, else the id already holding that string. */
int32_t tk_strmap_put(tn_tokenizer *t, int32_t id);
int tk_mergemap_init(tk_mergemap *m, size_t n);
void tk_mergemap_free(tk_mergemap *m);
void tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id); /* later wins, as HF */
const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b);

/* bytelevel.c */
void tk_bytelevel_init(tn_tokenizer *t);
/* Length of the valid UTF-8 sequence at s (1..4), or 0 with *bad = bytes of the maximal ill-formed
 * subpart (Unicode's "best practice", which Rust's from_utf8_lossy follows). n > 0. */
size_t tk_utf8_next(const uint8_t *s, size_t n, size_t *bad);
/* 0 if s is valid UTF-8, else -1 with *at = offset of the first bad byte. */
int tk_utf8_check(const uint8_t *s, size_t n, size_t *at);
uint32_t tk_utf8_decode(const uint8_t *s, size_t len);          /* one valid sequence of len bytes */
/* Appends the bytes a token string stands for (HF ByteLevel decoder: every char mapped, else the
 * string's own bytes) to *buf. */
void tk_bytelevel_token_bytes(const tn_tokenizer *t, const char *s, size_t n, char **buf, size_t *len, size_t *cap);
/* Bytes -> NUL-terminated UTF-8, ill-formed parts replaced by U+FFFD. Never NULL. */
char *tk_utf8_lossy(const char *s, size_t n);

/* tok_pipeline.c */
int tk_load_pipeline(tn_tokenizer *t, const void *root_json);    /* normalizer, pre_tokenizer, decoder */

/* added_tokens.c */
int tk_matchers_build(tn_tokenizer *t);
void tk_matchers_free(tn_tokenizer *t);
/* Next added token in s[*pos..n) as HF's AddedVocabulary finds it (leftmost-longest; a match that is
 * dropped -- special with !parse_special, single_word inside a word -- still consumes its span).
 * Returns 1 with the span [*ms, *me) (lstrip/rstrip widened, never below floor) and *id, else 0. */
int tk_match_next(const tk_matcher *m, const char *s, size_t n, size_t *pos, size_t floor, int parse_special,
                  size_t *ms, size_t *me, int32_t *id);

/* tokenizer.c */
void tk_enc_free(tk_enc *c);

/* pretokenize.c */
/* Normalizes one piece, then splits out normalized added tokens, regex-splits the rest and BPEs it. */
int tk_encode_piece(tk_enc *c, const char *s, size_t n);

/* bpe.c */
int tk_bpe_word(tk_enc *c, const uint8_t *w, size_t n);

#endif
