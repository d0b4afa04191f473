/* fuzz_lf_encode -- the whole LLaMA-Factory data pipeline, lf_load (src/data/lf_*.c): the input's bytes
 * after the first two are a dataset file (DIR/data.json) that dataset_info.json describes as alpaca,
 * sharegpt (with system and tools columns) or OpenAI-style sharegpt; it is aligned, rendered with a
 * template (tool prompts and function calls included), tokenized with the test fixtures' tokenizer and
 * truncated or packed. Byte 0: template (bits 0-2: default, qwen, qwen3, qwen3_nothink, llama3), stage pt,
 * packing, train_on_prompt, mask_history, enable_thinking off (bits 3..7). Byte 1: dataset (bits 0-2, one
 * of DATASETS), cutoff_len 8 + 16 x (bits 3-6), val_size 0.25 (bit 7). Accepted output must be
 * consistent: offsets match lengths, ids are tokens of the vocabulary, labels are -100 or the id. */
#include "fuzz_lf_common.h"

#ifndef TANDEM_FUZZ_ROOT
#error "TANDEM_FUZZ_ROOT (the repository root) is defined by fuzz/CMakeLists.txt"
#endif

static const char *const TEMPLATES[5] = {"default", "qwen", "qwen3", "qwen3_nothink", "llama3"};
static const char *const DATASETS[5] = {"alpaca", "alpaca_full", "sharegpt", "sharegpt_tools", "openai"};
static const char DSINFO[] =
    "{\"alpaca\": {\"file_name\": \"data.json\"},"
    " \"alpaca_full\": {\"file_name\": \"data.json\", \"columns\": {\"prompt\": \"instruction\", \"query\": \"input\","
    " \"response\": \"output\", \"history\": \"history\", \"system\": \"system\"}},"
    " \"sharegpt\": {\"file_name\": \"data.json\", \"formatting\": \"sharegpt\"},"
    " \"sharegpt_tools\": {\"file_name\": \"data.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\":"
    " \"conversations\", \"tools\": \"tools\"}},"
    " \"openai\": {\"file_name\": \"data.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": \"messages\"},"
    " \"tags\": {\"role_tag\": \"role\", \"content_tag\": \"content\", \"user_tag\": \"user\", \"assistant_tag\":"
    " \"assistant\", \"system_tag\": \"system\", \"observation_tag\": \"tool\", \"function_tag\": \"function_call\"}}}";

static const char *tok_path(int llama) {
    return llama ? TANDEM_FUZZ_ROOT "/tests/fixtures/lf_data/tok_l/tokenizer.json"
                 : TANDEM_FUZZ_ROOT "/tests/fixtures/lf_data/tok_q/tokenizer.json";
}

static const tn_tokenizer *tokenizer(int llama) {
    static tn_tokenizer *tok[2];
    if (!tok[llama] && !(tok[llama] = tn_tokenizer_load(tok_path(llama)))) {
        fprintf(stderr, "fuzz: cannot load the fixture tokenizer: %s\n", tn_errmsg());
        abort();
    }
    return tok[llama];
}

static void check_samples(const lf_samples *s, const tn_tokenizer *tok, int cutoff) {
    FZ_ASSERT(s->n >= 0 && s->off[0] == 0);
    int32_t nv = tn_tokenizer_vocab_size(tok);
    for (int i = 0; i < s->n; i++) {
        FZ_ASSERT(s->len[i] >= 1 && s->len[i] <= cutoff && s->off[i + 1] - s->off[i] == s->len[i]);
        for (int64_t k = s->off[i]; k < s->off[i + 1]; k++) {
            FZ_ASSERT(s->ids[k] >= 0 && s->ids[k] < nv);
            FZ_ASSERT(s->labels[k] == LF_IGNORE || s->labels[k] == s->ids[k]);
            if (s->pos) FZ_ASSERT(s->pos[k] >= 0 && s->pos[k] < cutoff);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    fz_lf_init();
    unsigned a = data[0], b = data[1];
    const char *dir = fz_dir();
    char *info = fz_path("dataset_info.json"), *file = fz_path("data.json");
    fz_write(info, DSINFO, sizeof DSINFO - 1);
    fz_write(file, data + 2, size - 2);
    int llama = a % 5 == 4;
    lf_data_args args = {
        .dataset = DATASETS[(b & 7) % 5], .dataset_dir = dir, .template_name = TEMPLATES[a % 5],
        .stage = (a >> 3) & 1 ? "pt" : "sft", .cutoff_len = 8 + (int)((b >> 3) & 15) * 16,
        .packing = (a >> 4) & 1 ? 1 : -1, .train_on_prompt = (a >> 5) & 1,
        .mask_history = (a >> 6) & 1, .val_size = (b >> 7) ? 0.25 : 0, .seed = 42, .tokenizer_path = tok_path(llama),
        .enable_thinking = (a >> 7) ? -1 : 0};
    const tn_tokenizer *tok = tokenizer(llama);
    lf_samples train, eval;
    fz_err_reset();
    if (lf_load(&args, tok, &train, &eval) != 0) {
        fz_check_error(NULL);
    } else {
        check_samples(&train, tok, args.cutoff_len);
        check_samples(&eval, tok, args.cutoff_len);
        lf_samples_free(&train);
        lf_samples_free(&eval);
    }
    free(info), free(file);
    return 0;
}
