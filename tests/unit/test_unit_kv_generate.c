/* test_unit_kv_generate -- generation over the KV cache against the full-recompute path.
 *
 * For llama (GQA 4 -> 2), qwen2 (q/k/v bias) and qwen3 (q/k head norms, head_dim != D / H), each with a LoRA
 * adapter unmerged and then merged, and without LoRA:
 *  - logits of a prefill and of every decode step equal tn_model_logits at the same position within a bound
 *    (below: the two paths differ only in summation order);
 *  - greedy decoding gives the same tokens as tn_generate_greedy (full recompute), one sequence and three
 *    sequences decoded together, one of them joining at a later step (continuous batching);
 *  - a conversation's next prompt reuses the cached tokens it begins with and still matches full recompute;
 *  - a stop id ends the answer (kept in it), max_new and the context end it with LENGTH, a prompt that leaves no
 *    room is refused.
 * The models are random with a wide initialisation (0.3) so that greedy choices are far from ties: every step's
 * margin between the best two logits is checked to exceed what the logits bound allows, so token equality is a
 * consequence of the logits bound, not luck. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/generate.h"
#include "model/kv_forward.h"
#include "model/model.h"
#include "testlib.h"

enum { V = 97, PROMPT = 6, NEW = 24, S = PROMPT + NEW, CTX = 64 };

/* |a - b| <= LOGIT_TOL (1 + |b|): fp32 products of length <= 48 in another order differ by <= 48 u sum|a_i b_i|
 * (u = 6e-8) per product, a few 1e-6 relative after two layers and the norms; 1e-4 leaves a wide margin that a
 * wrong position, mask or cache row (errors of order 1) never fits in. */
#define LOGIT_TOL 1e-4

static tn_model *make_model(const char *type, int lora, uint64_t seed) {
    tn_model_config c = {.vocab_size = V, .hidden_size = 32, .intermediate_size = 48, .num_hidden_layers = 2,
                         .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = CTX,
                         .rope_theta = 1e4, .rms_norm_eps = 1e-6, .initializer_range = 0.3};
    strcpy(c.model_type, type);
    if (!strcmp(type, "qwen3")) c.head_dim = 12;
    if (tn_model_config_finish(&c, "test") != 0) tn_die("%s", tn_errmsg());
    tn_lora_config lc = {.r = 4, .alpha = 8, .targets = (1u << TN_LT_COUNT) - 1};
    tn_model *m = tn_model_create(&c, lora ? &lc : NULL, tn_backend_cpu());
    tn_model_init_random(m, seed);
    tn_rng rng;
    tn_rng_seed(&rng, seed + 1);
    for (int i = 0; i < m->n_params; i++) { /* LoRA B starts at zero: make the adapters matter; biases too */
        const tn_param *p = &m->params[i];
        if (!strstr(p->name, "lora_B") && !strstr(p->name, ".bias")) continue;
        float *w = tn_xmalloc(p->numel * sizeof *w);
        for (size_t k = 0; k < p->numel; k++) w[k] = (float)(0.2 * tn_rng_normal(&rng));
        tn_model_set(m, p, w);
        free(w);
    }
    return m;
}

/* The argmax; *margin: how far the best logit leads the second, in units of what the logits bound lets the two
 * paths differ by (best and second each moving by LOGIT_TOL (1 + |x|)): above 1 the cached path must agree. */
static int argmax(const float *x, int n, float *margin) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    int second = b ? 0 : 1;
    for (int i = 0; i < n; i++)
        if (i != b && x[i] > x[second]) second = i;
    *margin = (x[b] - x[second]) / (float)(LOGIT_TOL * (2 + fabsf(x[b]) + fabsf(x[second])));
    return b;
}

/* Full-recompute greedy continuation of prompt[0..n) by max_new tokens into out; checks the margins. */
static void reference(tn_model *m, const int32_t *prompt, int n, int max_new, int32_t *out, const char *what) {
    int Sref = n + max_new;
    tn_acts *a = tn_acts_create(m, 1, Sref, 0);
    int32_t *ids = tn_xcalloc((size_t)Sref, sizeof *ids);
    float *logits = tn_xmalloc((size_t)Sref * V * sizeof *logits);
    memcpy(ids, prompt, (size_t)n * sizeof *ids);
    float worst = INFINITY;
    for (int k = 0; k < max_new; k++) {
        tn_model_logits(m, a, ids, 1, Sref, logits);
        float margin;
        ids[n + k] = argmax(logits + (size_t)(n + k - 1) * V, V, &margin);
        worst = margin < worst ? margin : worst;
    }
    memcpy(out, ids + n, (size_t)max_new * sizeof *out);
    CHECKF(worst > 1, "%s: a greedy step's margin is %.2f of the logits bound: too close to a tie for this test", what,
           worst);
    /* and tn_generate_greedy (the path the demo uses) agrees with the loop above */
    int len = n;
    int32_t *ids2 = tn_xcalloc((size_t)Sref, sizeof *ids2);
    memcpy(ids2, prompt, (size_t)n * sizeof *ids2);
    tn_generate_greedy(m, a, ids2, &len, 1, Sref, max_new, -1, 0);
    CHECKF(!memcmp(ids2 + n, out, (size_t)max_new * sizeof *out), "%s: tn_generate_greedy differs", what);
    free(ids2), free(ids), free(logits);
    tn_acts_free(a);
}

static tn_sampling greedy(int max_new) {
    tn_sampling sp = tn_sampling_defaults();
    sp.do_sample = 0, sp.max_new = max_new;
    return sp;
}

/* Prefill + decode logits against tn_model_logits of the whole sequence. */
static void check_logits(tn_model *m, const int32_t *seq, const char *what) {
    tn_acts *a = tn_acts_create(m, 1, S, 0);
    float *full = tn_xmalloc((size_t)S * V * sizeof *full), *got = tn_xmalloc((size_t)V * sizeof *got);
    tn_model_logits(m, a, seq, 1, S, full);
    tn_kv *kv = tn_kv_create(m, 2, CTX);
    double worst = 0;
    tn_kv_seg seg = {.slot = 1, .n = PROMPT, .ids = seq};
    CHECK(tn_kv_forward(m, kv, &seg, 1, got) == 0);
    for (int t = PROMPT - 1; t < S; t++) {
        const float *want = full + (size_t)t * V;
        for (int v = 0; v < V; v++) {
            double e = fabs(got[v] - want[v]) / (1 + fabs(want[v]));
            worst = e > worst ? e : worst;
        }
        if (t + 1 == S) break;
        seg = (tn_kv_seg){.slot = 1, .n = 1, .ids = seq + t + 1};
        CHECK(tn_kv_forward(m, kv, &seg, 1, got) == 0);
    }
    if (getenv("TN_VERBOSE")) printf("%s: worst logits error %.3e\n", what, worst);
    CHECKF(worst <= LOGIT_TOL, "%s: cached logits differ from the full forward by %.3e (bound %.0e)", what, worst,
           LOGIT_TOL);
    CHECKF(tn_kv_len(kv, 1) == S && tn_kv_len(kv, 0) == 0, "%s: cache lengths %d %d", what, tn_kv_len(kv, 1),
           tn_kv_len(kv, 0));
    tn_kv_free(kv);
    tn_acts_free(a);
    free(full), free(got);
}

/* Runs g until every slot is done; tokens of slot s into out[s] (NEW each), returns the steps taken. join: slot 2
 * is started only after `join` steps (continuous batching). */
static int run_all(tn_gen *g, int32_t out[][NEW + 1], int n_out[], const int32_t prompts[][PROMPT + 3],
                   const int *plen, int n_seq, int join) {
    tn_sampling sp = greedy(NEW);
    tn_gen_event ev[4];
    for (int s = 0; s < n_seq; s++) {
        n_out[s] = 0;
        if (s != 2 || !join) CHECK(tn_gen_start(g, s, prompts[s], plen[s], &sp, NULL, 0) == 0);
    }
    int steps = 0;
    for (;; steps++) {
        if (join && steps == join) CHECK(tn_gen_start(g, 2, prompts[2], plen[2], &sp, NULL, 0) == 0);
        int n = tn_gen_step(g, ev);
        CHECK(n >= 0);
        if (n <= 0 && !(join && steps < join)) break;
        for (int i = 0; i < n; i++) out[ev[i].slot][n_out[ev[i].slot]++] = ev[i].token;
    }
    return steps;
}

static void check_model(const char *type, int lora, int merge) {
    char what[64];
    snprintf(what, sizeof what, "%s%s", type, lora ? (merge ? " + LoRA merged" : " + LoRA unmerged") : "");
    tn_model *m = make_model(type, lora, 11 + (uint64_t)lora);
    if (merge) tn_model_fold_lora(m);
    int32_t prompts[3][PROMPT + 3] = {{3, 14, 15, 92, 65, 35, 89, 79, 32}, {2, 71, 82, 81, 82, 84, 59, 0, 4},
                                      {1, 41, 42, 13, 56, 23, 7, 11, 30}};
    int plen[3] = {PROMPT, PROMPT + 3, PROMPT - 2};
    int32_t want[3][NEW];
    for (int s = 0; s < 3; s++) reference(m, prompts[s], plen[s], NEW, want[s], what);
    int32_t seq[S];
    memcpy(seq, prompts[0], PROMPT * sizeof *seq), memcpy(seq + PROMPT, want[0], NEW * sizeof *seq);
    check_logits(m, seq, what);

    tn_gen *g = tn_gen_create(m, 3, CTX);
    int32_t got[3][NEW + 1];
    int n_got[3];
    run_all(g, got, n_got, prompts, plen, 1, 0);
    CHECKF(n_got[0] == NEW && !memcmp(got[0], want[0], sizeof want[0]), "%s: one sequence: greedy tokens differ",
           what);
    int steps = run_all(g, got, n_got, prompts, plen, 3, 5);
    for (int s = 0; s < 3; s++)
        CHECKF(n_got[s] == NEW && !memcmp(got[s], want[s], sizeof want[s]),
               "%s: batched, sequence %d: greedy tokens differ from its own full recompute", what, s);
    CHECKF(steps == 5 + NEW, "%s: %d steps for a batch whose last member joined at step 5", what, steps);

    /* the next turn of a conversation: prompt 0 + its answer + 3 more tokens reuses the cached part */
    int32_t turn2[PROMPT + NEW + 3], want2[8];
    memcpy(turn2, seq, sizeof seq);
    turn2[S] = 5, turn2[S + 1] = 6, turn2[S + 2] = 7;
    tn_sampling sp = greedy(8);
    CHECK(tn_gen_start(g, 0, prompts[0], PROMPT, &sp, NULL, 0) == 0);
    for (tn_gen_event ev[3]; tn_gen_step(g, ev) > 0;) {}
    CHECK(tn_gen_start(g, 0, turn2, S + 3, &sp, NULL, 0) == 0);
    /* cached: the prompt and 7 of the 8 answer tokens (the last was sampled, never forwarded) */
    CHECKF(tn_gen_reused(g, 0) == PROMPT + 7, "%s: %d tokens reused, expected %d", what, tn_gen_reused(g, 0),
           PROMPT + 7);
    for (tn_gen_event ev[3]; tn_gen_step(g, ev) > 0;) {}
    reference(m, turn2, S + 3, 8, want2, what);
    int n;
    const int32_t *o = tn_gen_output(g, 0, &n);
    CHECKF(n == 8 && !memcmp(o, want2, sizeof want2), "%s: the second turn differs from full recompute", what);

    /* stop ids and lengths */
    int32_t stop = want[1][3];
    CHECK(tn_gen_start(g, 1, prompts[1], plen[1], &sp, &stop, 1) == 0);
    tn_gen_event ev[3];
    int k = 0, fin = TN_FINISH_NONE;
    while (tn_gen_step(g, ev) > 0) k++, fin = ev[0].finish;
    int first = 0;
    while (want[1][first] != stop) first++;
    CHECKF(k == first + 1 && fin == TN_FINISH_STOP, "%s: stop id: %d tokens, finish %d", what, k, fin);
    CHECK(tn_gen_start(g, 1, prompts[1], plen[1], &sp, NULL, 0) == 0);
    k = 0;
    while (tn_gen_step(g, ev) > 0) k++, fin = ev[0].finish;
    CHECKF(k == 8 && fin == TN_FINISH_LENGTH, "%s: max_new 8: %d tokens, finish %d", what, k, fin);
    tn_gen_free(g);

    g = tn_gen_create(m, 1, 12); /* context 12: a 9-token prompt leaves room for 3 */
    sp = greedy(100);
    CHECK(tn_gen_start(g, 0, prompts[1], 9, &sp, NULL, 0) == 0);
    k = 0;
    while (tn_gen_step(g, ev) > 0) k++, fin = ev[0].finish;
    CHECKF(k == 3 && fin == TN_FINISH_LENGTH, "%s: context 12: %d tokens, finish %d", what, k, fin);
    int32_t long_prompt[12] = {0};
    CHECK(tn_gen_start(g, 0, long_prompt, 12, &sp, NULL, 0) != 0 && strstr(tn_errmsg(), "at most 11"));
    tn_gen_free(g);
    tn_model_free(m);
}

int main(void) {
    const char *types[3] = {"llama", "qwen2", "qwen3"};
    for (int t = 0; t < 3; t++) {
        check_model(types[t], 0, 0);
        check_model(types[t], 1, 0);
        check_model(types[t], 1, 1);
    }
    return tl_done("test_unit_kv_generate");
}
