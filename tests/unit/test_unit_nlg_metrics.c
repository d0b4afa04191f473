/* test_unit_nlg_metrics -- predict's BLEU-4 and ROUGE-1/2/L (src/infer/nlg_metrics.c).
 *
 * Hand-derived cases first (each worked out in its comment), then 600 random pairs over a mixed alphabet (ASCII
 * words and numbers, Chinese characters, Chinese and ASCII punctuation, spaces and newlines; pairs built to share
 * pieces so that every n-gram order and the zero-precision smoothing occur) scored here and by
 * tests/tools/nlg_ref.py: nltk's sentence_bleu with method3 (Debian python3-nltk) and an independent Python ROUGE.
 * Without /usr/bin/python3 + nltk the reference half is skipped (CI=true: a failure). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "infer/nlg_metrics.h"
#include "testlib.h"

static const char *const PIECES[] = {"the", "cat", "sat", "on", "mat", "3.14", "50%", "42", "C++", " ", " ", "\n",
                                     "我", "们", "是", "学", "生", "。", "！", "？", "，", "好", "的", "!", "?", ".",
                                     "hello", "world", "数据", "模型"};
#define NP ((int)(sizeof PIECES / sizeof PIECES[0]))

static void random_text(tn_rng *r, char *out, size_t cap, const char *base) {
    size_t k = 0;
    int n = (int)(tn_rng_uniform(r) * 30);
    out[0] = '\0';
    if (base && tn_rng_uniform(r) < 0.6) { /* a variant of base: shared n-grams */
        size_t bl = strlen(base), cut = (size_t)(tn_rng_uniform(r) * (double)bl);
        while (cut < bl && ((unsigned char)base[cut] & 0xC0) == 0x80) cut++;
        memcpy(out, base, cut);
        k = cut;
        n /= 3;
    }
    for (int i = 0; i < n; i++) {
        const char *p = PIECES[(int)(tn_rng_uniform(r) * NP)];
        size_t l = strlen(p);
        if (k + l + 1 >= cap) break;
        memcpy(out + k, p, l);
        k += l;
        if (tn_rng_uniform(r) < 0.3 && k + 2 < cap) out[k++] = ' ';
    }
    out[k] = '\0';
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

int main(void) {
    double r1, r2, rl;
    /* identical texts: every precision 1, bp 1 -> BLEU 1; ROUGE f = 2 / (2 + 1e-8) */
    CHECK_NEAR(tn_bleu4_chars("abcdef", "abcdef"), 1.0, 1e-12);
    tn_rouge_words("the cat sat", "the cat sat", &r1, &r2, &rl);
    CHECK_NEAR(r1, 2.0 / (2.0 + 1e-8), 1e-15);
    CHECK_NEAR(rl, 2.0 / (2.0 + 1e-8), 1e-15);
    /* "ab" vs "abc": p1 = 2/2, p2 = 1/1, p3 = p4 zero with denominator max(1, 0) = 1 -> 1/2, 1/4;
     * bp = exp(1 - 3/2); BLEU = bp (1 * 1 * 1/2 * 1/4)^(1/4) */
    CHECK_NEAR(tn_bleu4_chars("ab", "abc"), exp(-0.5) * pow(0.125, 0.25), 1e-12);
    /* no shared character: 0 */
    CHECK_NEAR(tn_bleu4_chars("xyz", "abc"), 0.0, 0);
    /* hypothesis "a a a a" (7 chars, 'a' x4 and ' ' x3) vs reference "a b" (3 chars): unigram clipped a 1 + ' ' 1 = 2 of 7;
     * bigrams "a "x3, " a"x3 vs ref "a ", " b": 1 of 6; trigrams 0 of 5 -> 1/(2*5); 4-grams 0 of 4 -> 1/(4*4);
     * bp = 1 (7 > 3) */
    CHECK_NEAR(tn_bleu4_chars("a a a a", "a b"), pow(2.0 / 7 * 1.0 / 6 * 0.1 * 1.0 / 16, 0.25), 1e-12);
    /* ROUGE distinct n-grams: hyp "a a b" (unigrams {a, b}, bigrams {a a, a b}) vs ref "a b" ({a, b}, {a b}):
     * R1 P = R = 1; R2 P = 1/2, R = 1 -> f = 2 (1/2) / (3/2 + 1e-8); RL: LCS words {a, b}: P = 2/2, R = 2/2 */
    tn_rouge_words("a a b", "a b", &r1, &r2, &rl);
    CHECK_NEAR(r1, 2.0 / (2.0 + 1e-8), 1e-15);
    CHECK_NEAR(r2, 1.0 / (1.5 + 1e-8), 1e-15);
    CHECK_NEAR(rl, 2.0 / (2.0 + 1e-8), 1e-15);
    /* Chinese: one word per character; 我们是学生 vs 我是学生: unigrams 5 vs 4 distinct, overlap 4 -> P 4/5 R 1 */
    tn_rouge_words("我们是学生", "我是学生", &r1, &r2, &rl);
    CHECK_NEAR(r1, 2 * 0.8 / (1.8 + 1e-8), 1e-12);
    /* segmentation */
    char **w;
    unsigned char *e;
    int n = tn_nlg_words("pi is 3.14, 50% 好的。\nC++ x", &w, &e);
    const char *want[] = {"pi", "is", "3.14", ",", "50%", "好", "的", "。", "C", "+", "+", "x"};
    CHECKF(n == 12, "%d words", n);
    for (int i = 0; i < n && i < 12; i++) CHECKF(!strcmp(w[i], want[i]), "word %d: '%s', expected '%s'", i, w[i], want[i]);
    CHECK(n == 12 && e[7] && !e[6] && !e[10]);
    for (int i = 0; i < n; i++) free(w[i]);
    free(w), free(e);
    /* an empty side gives 0 for every ROUGE (LF) */
    tn_rouge_words("  \n", "abc", &r1, &r2, &rl);
    CHECK(r1 == 0 && r2 == 0 && rl == 0);
    tn_nlg_scores sc;
    tn_nlg_score("ab", "abc", &sc);
    CHECK_NEAR(sc.bleu4, round(exp(-0.5) * pow(0.125, 0.25) * 100 * 1e4) / 1e4, 1e-12);

    /* random pairs against the Python reference */
    char path[512];
    snprintf(path, sizeof path, "%s/nlg_cases.jsonl", tl_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    tn_rng r;
    tn_rng_seed(&r, 2026);
    char a[1024], b[1024];
    for (int i = 0; f && i < 600; i++) {
        random_text(&r, b, sizeof b, NULL);
        random_text(&r, a, sizeof a, b);
        double bl = tn_bleu4_chars(a, b);
        tn_rouge_words(a, b, &r1, &r2, &rl);
        fputs("{\"pred\": ", f), json_str(f, a), fputs(", \"label\": ", f), json_str(f, b);
        fprintf(f, ", \"bleu\": %.17g, \"rouge1\": %.17g, \"rouge2\": %.17g, \"rougel\": %.17g}\n", bl, r1, r2, rl);
    }
    if (f) fclose(f);
    if (system("/usr/bin/python3 -c 'import nltk' 2>/dev/null") != 0) {
        if (getenv("CI") && !strcmp(getenv("CI"), "true")) CHECKF(0, "python3-nltk is missing (scripts/install-deps.sh)");
        else printf("test_unit_nlg_metrics: the nltk reference is skipped (python3-nltk missing)\n");
        return tl_done("test_unit_nlg_metrics");
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/nlg_ref.py %s", tl_tests_dir(), path);
    CHECKF(system(cmd) == 0, "tandem's scores differ from the reference (%s)", cmd);
    return tl_done("test_unit_nlg_metrics");
}
