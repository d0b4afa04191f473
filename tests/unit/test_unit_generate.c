/* test_unit_generate -- sampling never draws an id the tokenizer cannot decode.
 *
 * Checkpoints pad the embedding beyond the tokenizer (Qwen: 151936 rows for 151669 tokens). Here a model of
 * 300 rows stands for a tokenizer of 259: its lm_head is zero on the 259 real rows and large and random on
 * the 41 padded ones, so without the mask a padded id wins every greedy step (all 41 logits negative has
 * probability 2^-41) and dominates sampling; with n_vocab = 259 every drawn id must be < 259. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/generate.h"
#include "model/model.h"
#include "testlib.h"

enum { V = 300, N_VOCAB = 259, S = 12, PROMPT = 3 };

static int max_id(const int32_t *ids, int n) {
    int mx = 0;
    for (int i = 0; i < n; i++) mx = ids[i] > mx ? ids[i] : mx;
    return mx;
}

int main(void) {
    tn_model_config c = {.vocab_size = V, .hidden_size = 16, .intermediate_size = 24, .num_hidden_layers = 1,
                         .num_attention_heads = 2, .max_position_embeddings = 64, .rope_theta = 1e4,
                         .rms_norm_eps = 1e-6, .initializer_range = 0.5};
    strcpy(c.model_type, "qwen3");
    if (!CHECKF(tn_model_config_finish(&c, "test") == 0, "%s", tn_errmsg())) return tl_done("test_unit_generate");
    tn_model *m = tn_model_create(&c, NULL, tn_backend_cpu());
    tn_model_init_random(m, 7);
    const tn_param *head = tn_model_find(m, "lm_head.weight");
    CHECK(head != NULL);
    float *w = tn_xmalloc(head->numel * sizeof *w);
    tn_rng rng;
    tn_rng_seed(&rng, 11);
    for (int v = 0; v < V; v++)
        for (int d = 0; d < 16; d++) w[v * 16 + d] = v < N_VOCAB ? 0.0f : (float)(50.0 * tn_rng_normal(&rng));
    tn_model_set(m, head, w);
    tn_gen *g = tn_gen_create(m, 1, S);
    for (int sample = 0; sample < 2; sample++) {
        for (int masked = 0; masked < 2; masked++) {
            int32_t prompt[PROMPT] = {5, 6, 7};
            tn_sampling sp = {.do_sample = sample, .top_k = 50, .max_new = S - PROMPT, .temperature = 0.95,
                              .top_p = 0.7, .repetition_penalty = 1.0, .seed = 3, .n_vocab = masked ? N_VOCAB : 0};
            CHECK(tn_gen_start(g, 0, prompt, PROMPT, &sp, NULL, 0) == 0);
            tn_gen_event ev[1];
            while (tn_gen_step(g, ev) > 0) {}
            int got;
            const int32_t *out = tn_gen_output(g, 0, &got);
            CHECKF(got == S - PROMPT, "%d tokens generated", got);
            int mx = max_id(out, got);
            if (masked) CHECKF(mx < N_VOCAB, "%s drew id %d beyond the tokenizer's %d", sample ? "sampling" : "greedy", mx, N_VOCAB);
            else CHECKF(mx >= N_VOCAB, "%s without the mask drew only real ids: the test cannot tell", sample ? "sampling" : "greedy");
        }
    }
    tn_gen_free(g);
    tn_model_free(m);
    free(w);
    return tl_done("test_unit_generate");
}
