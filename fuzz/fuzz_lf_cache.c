/* fuzz_lf_cache -- the tokenized data cache (src/data/lf_cache.c) read back by lf_cache_map: the input is
 * written as a cache file and mapped. A file that maps must be self-consistent (offsets from 0 to the
 * token count, each sample's length its offsets' difference) and every id, label and position is read,
 * so ASan sees any access outside the mapping.
 *
 * Seeds: TANDEM_FUZZ_WRITE_SEEDS=DIR build-fuzz/fuzz_lf_cache writes valid caches (lf_cache_write) into
 * DIR and exits; fuzz/corpus/fuzz_lf_cache/ was made that way. */
#include "fuzz_lf_common.h"

static void check_split(const lf_samples *s) {
    FZ_ASSERT(s->n >= 0 && s->off && s->off[0] == 0);
    int64_t sum = 0;
    for (int i = 0; i < s->n; i++) {
        FZ_ASSERT(s->len[i] >= 0 && s->off[i + 1] - s->off[i] == s->len[i]);
        sum += s->len[i];
    }
    FZ_ASSERT(s->off[s->n] == sum);
    int64_t acc = 0;  /* every element is read: ASan checks the mapping's bounds */
    for (int64_t k = 0; k < sum; k++) acc += (int64_t)s->ids[k] + s->labels[k] + (s->pos ? s->pos[k] : 0);
    FZ_ASSERT(acc != INT64_MIN);  /* keeps the reads */
    FZ_ASSERT(memchr(s->drop_reason, 0, sizeof s->drop_reason));
}

/* Small sample sets: with and without position ids, an empty eval split, a long drop reason. */
static void write_seeds(const char *dir) {
    FZ_ASSERT(tn_mkdirs(dir) == 0);
    int len[3] = {2, 0, 3};
    int64_t off[4] = {0, 2, 2, 5};
    int32_t ids[5] = {1, 2, 3, 4, 5}, labels[5] = {-100, 2, -100, 4, 5}, pos[5] = {0, 1, 0, 1, 2};
    lf_samples train = {.n = 3, .len = len, .ids = ids, .labels = labels, .off = off, .n_dropped = 1};
    snprintf(train.drop_reason, sizeof train.drop_reason, "data.json: record 7: odd number of messages (3)");
    lf_samples eval = {.n = 1, .len = len + 2, .ids = ids, .labels = labels, .off = (int64_t[]){0, 3}, .pos = pos};
    lf_samples none = {.n = 0, .off = (int64_t[]){0}};
    uint8_t key[32] = {1, 2, 3};
    char *p = tn_path_join(dir, "train_eval.bin");
    FZ_ASSERT(lf_cache_write(p, key, &train, &eval) == 0);
    free(p);
    p = tn_path_join(dir, "train_only.bin");
    FZ_ASSERT(lf_cache_write(p, key, &train, NULL) == 0);
    free(p);
    lf_samples packed = train;
    packed.pos = pos;
    p = tn_path_join(dir, "packed_empty_eval.bin");
    FZ_ASSERT(lf_cache_write(p, key, &packed, &none) == 0);
    free(p);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seeds = getenv("TANDEM_FUZZ_WRITE_SEEDS");
    if (seeds && seeds[0]) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_lf_init();
    char *p = fz_path("lf_cache.bin");
    fz_write(p, data, size);
    lf_samples train, eval;
    fz_err_reset();
    if (lf_cache_map(p, &train, &eval) != 0) {
        fz_check_error("lf_cache.bin");
    } else {
        check_split(&train);
        check_split(&eval);
        lf_samples_free(&train);
        lf_samples_free(&eval);
    }
    free(p);
    return 0;
}
