/* fuzz_tokenizer -- tokenizer.json (src/tokenizer/): tn_tokenizer_load on the input; a tokenizer that
 * loads encodes fixed texts (ASCII, NFC/NFD, CJK, emoji, added-token look-alikes, a 200-letter word for
 * the long-word BPE path) with and without special tokens, decodes the ids (with and without
 * skip_special), and decodes every id of the vocabulary one by one. */
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

#define NAME "tokenizer.json"

static const char *const TEXTS[] = {
    "Hello, world! It's 2024: 3.14 apples  and\tnew\nlines\r\n  ",
    "<|im_start|>user\nCaf\xc3\xa9 cafe\xcc\x81 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82<|im_end|>",
    "<think>\n\n</think>\n\n<|endoftext|><|begin_of_text|> <s></s>[INST] \xe2\x80\x83x\xc2\xa0y",
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"),
};

static void roundtrip(const tn_tokenizer *t, const char *text, int parse_special) {
    tn_ids ids = {0};
    fz_err_reset();
    if (tn_tokenizer_encode(t, text, strlen(text), parse_special, &ids) != 0) {
        fz_check_error(NAME);
        FZ_ASSERT(ids.n == 0);  /* all or nothing */
    }
    for (int skip = 0; skip <= 1; skip++) {
        char *s = tn_tokenizer_decode(t, ids.ids, ids.n, skip);
        FZ_ASSERT(s != NULL);  /* ids from encode always have tokens */
        free(s);
    }
    tn_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *p = fz_path(NAME);
    fz_write(p, data, size);
    fz_err_reset();
    tn_tokenizer *t = tn_tokenizer_load(p);
    if (!t) {
        fz_check_error(NAME);
        free(p);
        return 0;
    }
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++)
        for (int sp = 0; sp <= 1; sp++) roundtrip(t, TEXTS[i], sp);
    int32_t nv = tn_tokenizer_vocab_size(t);
    FZ_ASSERT(nv >= 1);
    for (int32_t id = 0; id < nv && id < 4096; id++) {
        const char *tok = tn_tokenizer_id_to_token(t, id);
        char *s = tn_tokenizer_decode(t, &id, 1, 0);
        FZ_ASSERT((tok != NULL) == (s != NULL));
        if (tok) FZ_ASSERT(tn_tokenizer_token_to_id(t, tok) >= 0);
        free(s);
    }
    int32_t bad[2] = {-1, nv};
    fz_err_reset();
    FZ_ASSERT(tn_tokenizer_decode(t, bad, 1, 0) == NULL && tn_tokenizer_decode(t, bad + 1, 1, 0) == NULL);
    fz_check_error(NAME);
    tn_tokenizer_free(t);
    free(p);
    return 0;
}
