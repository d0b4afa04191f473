/* test_unit_size_limits -- size arithmetic on absurd model configs (issue 24, items 4 and 7), as a property test.
 *
 * Random config.json texts mix small sizes with absurd ones (up to 2^45, past int and past what 64-bit products
 * hold). Every config must end in exactly one of:
 *   - refused by the parser: one line naming the file and a key (a size past INT_MAX says the limit, not
 *     "must be a positive integer");
 *   - refused by the pre-allocation check (tn_memory_check_model, what init-model, export and chat call): one line
 *     naming the file, a key and the bytes, before anything is allocated;
 *   - built: tn_model_create lays out exactly the parameter count worked out here from the formula.
 * Under the sanitizer build, any signed overflow on the way (model.c's q/k/v widths, say) aborts the test. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model.h"
#include "model/model_config.h"
#include "testlib.h"
#include "trainer/memory_check.h"

static tn_rng rng;
static const double AVAIL = 64e6; /* the pretend machine's memory: small enough that absurd models are refused */

/* a size for key: mostly small, sometimes absurd (log-uniform up to 2^45) */
static double draw(int small_max) {
    double u = tn_rng_uniform(&rng);
    if (u < 0.75) return 1 + floor(tn_rng_uniform(&rng) * small_max);
    return floor(pow(2.0, 10 + 35 * tn_rng_uniform(&rng)));
}

/* The parameters of mc counted from HF's layer formula (independently of model.c's layout code). */
static unsigned long long expected_params(const tn_model_config *c) {
    unsigned long long D = c->hidden_size, I = c->intermediate_size, hd = c->head_dim,
                       q = (unsigned long long)c->num_attention_heads * hd,
                       kv = (unsigned long long)c->num_key_value_heads * hd;
    unsigned long long layer = 2 * D + q * D + 2 * kv * D + q * D + 3 * I * D;
    if (c->qkv_bias) layer += q + 2 * kv;
    if (c->o_bias) layer += D;
    if (c->qk_norm) layer += 2 * hd;
    return c->num_hidden_layers * layer + (unsigned long long)c->vocab_size * D * (c->tie_word_embeddings ? 1 : 2) + D;
}

static int one_line(const char *m) { return !strchr(m, '\n') && strlen(m) > 0; }

static void one_config(int trial, int *parsed_bad, int *refused, int *built) {
    static const char *types[] = {"llama", "qwen2", "qwen3", "mistral"};
    char text[1024];
    double heads = draw(4), kv = tn_rng_uniform(&rng) < 0.5 ? heads : 1, hd = 2 * draw(8);
    snprintf(text, sizeof text,
             "{\"model_type\": \"%s\", \"vocab_size\": %.0f, \"hidden_size\": %.0f, \"intermediate_size\": %.0f, "
             "\"num_hidden_layers\": %.0f, \"num_attention_heads\": %.0f, \"num_key_value_heads\": %.0f%s%.0f, "
             "\"tie_word_embeddings\": %s, \"attention_bias\": %s}",
             types[trial % 4], draw(64), draw(32), draw(48), draw(4), heads, kv,
             tn_rng_uniform(&rng) < 0.5 ? ", \"head_dim\": " : ", \"max_position_embeddings\": ", hd,
             trial % 3 ? "false" : "true", trial % 5 ? "false" : "true");
    tn_model_config mc;
    if (tn_model_config_parse(text, "cfg.json", &mc) != 0) {
        const char *e = tn_errmsg();
        CHECKF(one_line(e) && strncmp(e, "cfg.json: ", 10) == 0, "config %d refused without the file: %s", trial, e);
        const char *np = strstr(e, "must be a positive integer, got ");
        double got = np ? strtod(np + strlen("must be a positive integer, got "), NULL) : 0;
        CHECKF(!(got >= 1 && got == floor(got)), "config %d: a positive size called not positive: %s", trial, e);
        ++*parsed_bad;
        return;
    }
    if (tn_memory_check_model("cfg.json", &mc, 8, AVAIL, 0) != 0) {
        const char *e = tn_errmsg();
        CHECKF(one_line(e) && strncmp(e, "cfg.json: key '", 15) == 0 && strstr(e, " bytes") && strstr(e, "more than"),
               "config %d refused without file, key and bytes: %s", trial, e);
        CHECKF(expected_params(&mc) * 8.0 > AVAIL, "config %d (%llu parameters) fits but was refused: %s", trial,
               expected_params(&mc), e);
        ++*refused;
        return;
    }
    CHECKF(expected_params(&mc) * 8.0 <= AVAIL, "config %d: %llu parameters do not fit yet passed: %s", trial,
           expected_params(&mc), text);
    tn_model *m = tn_model_create(&mc, NULL, tn_backend_cpu());
    CHECKF(m->n_total == expected_params(&mc), "config %d: model laid out %zu parameters, the formula says %llu: %s",
           trial, m->n_total, expected_params(&mc), text);
    tn_model_free(m);
    ++*built;
}

/* The instances of the issue: a size past INT_MAX says the limit; a width product past INT_MAX names the key. */
static void test_instances(void) {
    tn_model_config mc;
    CHECK(tn_model_config_parse("{\"model_type\": \"qwen2\", \"vocab_size\": 30, \"hidden_size\": 4, "
                                "\"intermediate_size\": 1099511627776, \"num_hidden_layers\": 1, "
                                "\"num_attention_heads\": 2}", "c.json", &mc) != 0);
    CHECKF(strstr(tn_errmsg(), "c.json: key 'intermediate_size' is 1099511627776, more than the largest size tandem "
                               "supports (2147483647)") != NULL, "2^40: %s", tn_errmsg());
    CHECK(tn_model_config_parse("{\"model_type\": \"llama\", \"vocab_size\": 30, \"hidden_size\": 2000000000, "
                                "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2}",
                                "c.json", &mc) != 0);
    CHECKF(strstr(tn_errmsg(), "c.json: key 'hidden_size' 2000000000:") != NULL, "q/k/v width: %s", tn_errmsg());
    CHECK(tn_model_config_parse("{\"model_type\": \"llama\", \"vocab_size\": 1200000000, \"hidden_size\": 2000000000, "
                                "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, \"head_dim\": 2}",
                                "c.json", &mc) == 0);
    /* 4.8e18 parameters: past what size_t offsets count, whatever the machine (memory unknown: avail 0) */
    CHECK(tn_memory_check_model("c.json", &mc, 8, 0, 0) != 0);
    CHECKF(strstr(tn_errmsg(), "c.json: key 'vocab_size' 1200000000 (x hidden_size 2000000000): the embeddings need ") &&
               strstr(tn_errmsg(), "more than the 2^62 bytes tandem can address"), "2^62: %s", tn_errmsg());
}

int main(void) {
    tn_rng_seed(&rng, 24);
    test_instances();
    int parsed_bad = 0, refused = 0, built = 0;
    for (int trial = 0; trial < 600; trial++) one_config(trial, &parsed_bad, &refused, &built);
    printf("600 random configs: %d refused by the parser, %d by the memory check, %d built\n", parsed_bad, refused, built);
    /* the draw must exercise all three outcomes, or the property says little */
    CHECK(parsed_bad > 20 && refused > 20 && built > 20);
    return tl_done("test_unit_size_limits");
}
