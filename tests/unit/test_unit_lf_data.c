/* test_unit_lf_data -- the LLaMA-Factory data pipeline (src/data/lf_*) against references it did not make:
 *  1. A tiny hand-made byte-level tokenizer (tests/fixtures/lf_data/tok_q, tok_l: byte b is id b, merges
 *     h+i=256, \n\n=257, e+r=258, \nH=259, specials 300..310) so every expected id below is written by hand
 *     from LLaMA-Factory's template strings (study §2.4) and its rules: prompt masking, every assistant turn
 *     trained, infer_seqlen truncation, mask_history / train_on_prompt, the qwen3 empty-think rule, SFT
 *     packing (greedy knapsack), pre-training blocks, sharegpt drops.
 *  2. Tool rendering: expected strings made with Python's json.dumps and LF's prompt texts (see
 *     fixtures/lf_data/make_expected.py for the method); val_size: numpy's default_rng permutations.
 *  3. Error cases for each parser (one line, naming file and record/line) and hostile JSON.
 *  4. With ../shared: the real Qwen3 / LLaMA-3 tokenizers render the study's exact strings with the masking
 *     boundary in the right place; the LF demo datasets through every template (counts, cutoff, trained
 *     tokens, end-of-turn tokens trained), pre-training packing, the cache, and timings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "data/lf_dataset.h"
#include "data/lf_internal.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"

/* tiny tokenizer ids */
enum {
    HI = 256, NN = 257, ER = 258, NH = 259,
    EOTXT = 300, IMS = 301, IME = 302, THINK = 303, ETHINK = 304, BOT = 305, EOTX = 306, SH = 307, EH = 308, EOT = 309
};

static char *fx(const char *rel) {
    char p[256];
    snprintf(p, sizeof p, "fixtures/lf_data/%s", rel);
    return tn_path_join(tl_tests_dir(), p);
}

/* ---- expected sequences ---- */
typedef struct {
    int32_t ids[4096], lab[4096];
    int n;
} want_t;

/* Text as byte ids. A string holding a merge pair would need a merged id: written out by hand instead. */
static void txt(want_t *w, int trained, const char *s) {
    static const char *pairs[] = {"hi", "\n\n", "er", "\nH"};
    for (size_t k = 0; k < 4; k++)
        if (strstr(s, pairs[k])) {
            printf("test bug: \"%s\" holds a merge pair; write the merged id\n", s);
            exit(2);
        }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        w->ids[w->n] = *p, w->lab[w->n] = trained ? *p : LF_IGNORE;
        w->n++;
    }
}
static void tid(want_t *w, int trained, int32_t id) {
    w->ids[w->n] = id, w->lab[w->n] = trained ? id : LF_IGNORE;
    w->n++;
}
/* Sequence DSL: P/R = prompt/response text, PI/RI = prompt/response id. */
#define P(s) txt(&w, 0, s)
#define R(s) txt(&w, 1, s)
static void tids(want_t *w, int trained, const int32_t *x, size_t n) {
    for (size_t k = 0; k < n; k++) tid(w, trained, x[k]);
}
#define IDLIST(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)
#define PI(...) tids(&w, 0, IDLIST(__VA_ARGS__))
#define RI(...) tids(&w, 1, IDLIST(__VA_ARGS__))

static void check_sample(const lf_samples *s, int i, const want_t *w, int line) {
    if (!tl_checkf(i < s->n, __FILE__, line, "sample %d missing (n = %d)", i, s->n)) return;
    const int32_t *ids = s->ids + s->off[i], *lab = s->labels + s->off[i];
    int n = s->len[i], bad = -1;
    for (int k = 0; k < n && k < w->n && bad < 0; k++)
        if (ids[k] != w->ids[k] || lab[k] != w->lab[k]) bad = k;
    if (bad < 0 && n != w->n) bad = n < w->n ? n : w->n;
    char got[400] = "", exp[400] = "";
    if (bad >= 0) {
        for (int k = bad > 3 ? bad - 3 : 0, o = 0; k < n && k < bad + 8; k++)
            o += snprintf(got + o, sizeof got - (size_t)o, " %d/%d", ids[k], lab[k]);
        for (int k = bad > 3 ? bad - 3 : 0, o = 0; k < w->n && k < bad + 8; k++)
            o += snprintf(exp + o, sizeof exp - (size_t)o, " %d/%d", w->ids[k], w->lab[k]);
    }
    tl_checkf(bad < 0, __FILE__, line, "sample %d: first difference at %d (len %d, want %d): got [%s ] want [%s ] (id/label)", i,
              bad, n, w->n, got, exp);
}
#define CHECK_SAMPLE(s, i) check_sample(s, i, &w, __LINE__)

/* ---- loading ---- */
static char *TOKQ, *TOKL, *DATA;
static tn_tokenizer *tq, *tl;

static lf_data_args args(const char *ds, const char *tmpl, int llama_tok) {
    lf_data_args a = {0};
    a.dataset = ds, a.dataset_dir = DATA, a.template_name = tmpl, a.stage = "sft";
    a.cutoff_len = 1024, a.packing = -1, a.seed = 42;
    a.tokenizer_path = llama_tok ? TOKL : TOKQ;
    return a;
}

static int load(const lf_data_args *a, lf_samples *tr, lf_samples *ev, int line) {
    const tn_tokenizer *tok = strcmp(a->tokenizer_path, TOKL) == 0 ? tl : tq;
    int rc = lf_load(a, tok, tr, ev);
    tl_checkf(rc == 0, __FILE__, line, "lf_load(%s, %s): %s", a->dataset, a->template_name, rc ? tn_errmsg() : "");
    return rc;
}
#define LOAD(a, tr, ev) load(a, tr, ev, __LINE__)

static void write_file(const char *dir, const char *name, const char *text, size_t n) {
    char *p = tn_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) {
        printf("cannot write %s\n", p);
        exit(2);
    }
    free(p);
}
#define WRITE(dir, name, lit) write_file(dir, name, lit, sizeof(lit) - 1)

/* Concatenated decoded text of a sample, and of its trained runs joined by "|". */
static char *decode_sample(const tn_tokenizer *t, const lf_samples *s, int i) {
    return tn_tokenizer_decode(t, s->ids + s->off[i], (size_t)s->len[i], 0);
}
static char *decode_runs(const tn_tokenizer *t, const lf_samples *s, int i, char sep) {
    lf_buf out = {0};
    const int32_t *lab = s->labels + s->off[i];
    int n = s->len[i];
    for (int k = 0; k < n;) {
        if (lab[k] == LF_IGNORE) {
            k++;
            continue;
        }
        int e = k;
        while (e < n && lab[e] != LF_IGNORE) e++;
        char *x = tn_tokenizer_decode(t, lab + k, (size_t)(e - k), 0);
        if (out.n) lf_buf_putc(&out, sep);
        lf_buf_puts(&out, x ? x : "(bad)");
        free(x);
        k = e;
    }
    if (!out.p) lf_buf_puts(&out, "");
    return out.p;
}
static char *decode_trained(const tn_tokenizer *t, const lf_samples *s, int i) { return decode_runs(t, s, i, '|'); }

/* ---- 1. templates with the tiny tokenizer ---- */
static void test_templates_tiny(void) {
    lf_samples tr;
    /* qwen: the default system prompt is injected; the study's worked example */
    lf_data_args a = args("hi", "qwen", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."), PI(IME), P("\n");
        PI(IMS), P("us"), PI(ER), P("\n"), PI(HI), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        R("Hello!"), RI(IME), R("\n");
        CHECK(tr.n == 1);
        CHECK_SAMPLE(&tr, 0);
        CHECK(tr.pos == NULL && tr.off[0] == 0 && tr.off[1] == tr.len[0]);
        lf_samples_free(&tr);
    }
    /* qwen3: no default system; the empty think block is trained in front of the response */
    a = args("hi", "qwen3", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("us"), PI(ER), P("\n"), PI(HI), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        RI(THINK, NN, ETHINK, NN), R("Hello!"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* qwen3, enable_thinking false: the block moves into the (masked) prompt */
    a.enable_thinking = -1;
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("us"), PI(ER), P("\n"), PI(HI), PI(IME), P("\n"), PI(IMS), P("assistant\n"), PI(THINK, NN, ETHINK, NN);
        R("Hello!"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* qwen3_nothink: qwen without the default system, no think block */
    a = args("hi", "qwen3_nothink", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("us"), PI(ER), P("\n"), PI(HI), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        R("Hello!"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* llama3: BOS prefix, EOS = <|eot_id|> (replace_eos), the study's worked example */
    a = args("hi", "llama3", 1);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(BOT, SH), P("us"), PI(ER, EH, NN, HI, EOT, SH), P("assistant"), PI(EH, NN);
        R("Hello!"), RI(EOT);
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* default: {eos_token} slots are the tokenizer's EOS (tok_l: <|end_of_text|>, tok_q: <|im_end|>) */
    a = args("hi", "default", 1);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        P("Human: "), PI(HI, EOTX), P("\nAssistant:"), R("Hello!"), RI(EOTX), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    a = args("hi", "default", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        P("Human: "), PI(HI, IME), P("\nAssistant:"), R("Hello!"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* alpaca history + system column: every assistant turn trained; "Q2\nx" joins instruction and input */
    a = args("multi", "qwen", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("system\nS"), PI(IME), P("\n");
        PI(IMS), P("us"), PI(ER), P("\nQ1"), PI(IME), P("\n"), PI(IMS), P("assistant\n"), R("A1"), RI(IME), R("\n");
        PI(IMS), P("us"), PI(ER), P("\nQ2\nx"), PI(IME), P("\n"), PI(IMS), P("assistant\n"), R("A2"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* default template: slots are tokenized one by one, so the system's "\n" slot and "Human: ..." never
     * merge into \nH (259), while inside one slot "\n" + content merges freely (next test) */
    a = args("multi", "default", 1);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        P("System: S"), PI(EOTX), P("\n"), P("Human: Q1"), PI(EOTX), P("\nAssistant:"), R("A1"), RI(EOTX), R("\n");
        P("Human: Q2\nx"), PI(EOTX), P("\nAssistant:"), R("A2"), RI(EOTX), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* JSON lines; content "\nX" after the slot's "user\n" merges into \n\n (one slot, one tokenization);
     * the blank line is skipped and record 1 (output null) has no response: LF drops it */
    a = args("nl", "qwen3_nothink", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("us"), PI(ER, NN), P("X"), PI(IME), P("\n"), PI(IMS), P("assistant\n"), RI(HI, IME), R("\n");
        CHECK(tr.n == 1);
        CHECK_SAMPLE(&tr, 0);
        CHECK(tr.n_dropped == 1 && strstr(tr.drop_reason, "nl.jsonl: record 1: no response"));
        lf_samples_free(&tr);
    }
    /* sharegpt with a system turn, two turns; then mask_history, train_on_prompt */
    for (int mode = 0; mode < 3; mode++) {
        a = args("chat", "qwen3_nothink", 0);
        a.mask_history = mode == 1, a.train_on_prompt = mode == 2;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        want_t w = {0};
        int p = mode == 2;  /* prompt trained? */
        tid(&w, p, IMS), txt(&w, p, "system\nS"), tid(&w, p, IME), txt(&w, p, "\n");
        tid(&w, p, IMS), txt(&w, p, "us"), tid(&w, p, ER), txt(&w, p, "\na"), tid(&w, p, IME), txt(&w, p, "\n");
        tid(&w, p, IMS), txt(&w, p, "assistant\n");
        txt(&w, mode != 1, "b"), tid(&w, mode != 1, IME), txt(&w, mode != 1, "\n");
        tid(&w, p, IMS), txt(&w, p, "us"), tid(&w, p, ER), txt(&w, p, "\nc"), tid(&w, p, IME), txt(&w, p, "\n");
        tid(&w, p, IMS), txt(&w, p, "assistant\n");
        R("d"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* qwen3 multi-turn: every response gets the trained empty think block; with mask_history only the
     * last one (discarding_history_cot) */
    for (int mh = 0; mh < 2; mh++) {
        a = args("chat", "qwen3", 0);
        a.mask_history = mh;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        want_t w = {0};
        PI(IMS), P("system\nS"), PI(IME), P("\n"), PI(IMS), P("us"), PI(ER), P("\na"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        if (!mh) RI(THINK, NN, ETHINK, NN), R("b"), RI(IME), R("\n");
        else P("b"), PI(IME), P("\n");
        PI(IMS), P("us"), PI(ER), P("\nc"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        RI(THINK, NN, ETHINK, NN), R("d"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* qwen3 with a real thought in turn 1: kept and trained (no empty block there); enable_thinking false
     * removes it and puts empty blocks in the prompts; mask_history drops the history thought */
    for (int mode = 0; mode < 3; mode++) {
        a = args("think", "qwen3", 0);
        a.enable_thinking = mode == 1 ? -1 : 0, a.mask_history = mode == 2;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        want_t w = {0};
        PI(IMS), P("us"), PI(ER), P("\na"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        if (mode == 0) RI(THINK), R("\nT1\n"), RI(ETHINK, NN), R("b"), RI(IME), R("\n");
        if (mode == 1) PI(THINK, NN, ETHINK, NN), R("b"), RI(IME), R("\n");
        if (mode == 2) P("b"), PI(IME), P("\n");
        PI(IMS), P("us"), PI(ER), P("\nc"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        if (mode == 1) PI(THINK, NN, ETHINK, NN);
        else RI(THINK, NN, ETHINK, NN);
        R("d"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* sharegpt with custom tags (role/content/user/assistant) and a system column */
    a = args("msgs", "qwen3_nothink", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        want_t w = {0};
        PI(IMS), P("system\nT"), PI(IME), P("\n"), PI(IMS), P("us"), PI(ER), P("\na"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
        R("b"), RI(IME), R("\n");
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
    /* several datasets concatenated in order, max_samples per dataset */
    a = args("hi,chat,pack", "qwen3_nothink", 0);
    a.max_samples = 2;
    if (LOAD(&a, &tr, NULL) == 0) {
        CHECK(tr.n == 4);  /* hi (1), chat (1), pack (first 2 of 5) */
        char *t0 = decode_trained(tq, &tr, 0), *t1 = decode_trained(tq, &tr, 1), *t3 = decode_trained(tq, &tr, 3);
        CHECK(strcmp(t0, "Hello!<|im_end|>\n") == 0);
        CHECK(strcmp(t1, "b<|im_end|>\n|d<|im_end|>\n") == 0);
        CHECK(strcmp(t3, "BBBBB<|im_end|>\n") == 0);
        free(t0), free(t1), free(t3);
        lf_samples_free(&tr);
    }
    /* broken sharegpt rows are dropped as LF does: wrong role at 0, odd count, empty */
    a = args("broken", "qwen3_nothink", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        CHECK(tr.n == 2 && tr.n_dropped == 3);
        CHECKF(strstr(tr.drop_reason, "broken.json: record 1: message 0 has role 'gpt' (expected human or observation)"),
               "drop reason: %s", tr.drop_reason);
        char *t1 = decode_trained(tq, &tr, 1);
        CHECK(strcmp(t1, "d<|im_end|>\n") == 0);
        free(t1);
        lf_samples_free(&tr);
    }
}

/* ---- truncation: LLaMA-Factory's infer_seqlen, hand-computed ---- */
static void test_truncation(void) {
    /* the rule itself: source 19, target 8 */
    int s, t;
    lf_infer_seqlen(19, 8, 10, &s, &t);  /* 16 < 10 no, 38 < 10 no: t = int(10*8/27) = 2, s = 8 */
    CHECK(s == 8 && t == 2);
    lf_infer_seqlen(19, 8, 20, &s, &t);  /* 16 < 20: target kept, source 12 */
    CHECK(s == 12 && t == 8);
    lf_infer_seqlen(5, 30, 20, &s, &t);  /* 60 < 20 no, 10 < 20: target = 20 - 5 = 15 */
    CHECK(s == 5 && t == 15);
    lf_infer_seqlen(19, 5, 10, &s, &t);  /* 10 < 10 is false: both cut, t = int(10*5/24) = 2 */
    CHECK(s == 8 && t == 2);
    lf_infer_seqlen(4, 9, 8, &s, &t);    /* 18 < 8 no, 8 < 8 no: t = int(8*9/13) = 5, s = 3 */
    CHECK(s == 3 && t == 5);
    lf_infer_seqlen(19, 8, 2, &s, &t);   /* int(2*8/27) = 0: nothing trained remains */
    CHECK(s == 2 && t == 0);

    /* "hi" with qwen3_nothink: source = 19 ids, target = 8 ("Hello!" <|im_end|> "\n") */
    int cut[] = {10, 20, 2, 40};
    for (int c = 0; c < 4; c++) {
        lf_data_args a = args("hi", "qwen3_nothink", 0);
        a.cutoff_len = cut[c];
        lf_samples tr;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        want_t full = {0}, w = {0};
        {
            want_t w = {0};
            PI(IMS), P("us"), PI(ER), P("\n"), PI(HI), PI(IME), P("\n"), PI(IMS), P("assistant\n");
            R("Hello!"), RI(IME), R("\n");
            full = w;
        }
        int keep_s[] = {8, 12, 2, 19}, keep_t[] = {2, 8, 0, 8};
        for (int k = 0; k < keep_s[c]; k++) tid(&w, 0, full.ids[k]);
        for (int k = 0; k < keep_t[c]; k++) tid(&w, 1, full.ids[19 + k]);
        CHECK_SAMPLE(&tr, 0);  /* cutoff 2: kept with no trained token, as LF keeps it */
        lf_samples_free(&tr);
    }
    /* two turns (chat): turn 0 = 30 source + 3 target, turn 1 = 19 + 3; the budget runs out turn by turn */
    int cut2[] = {40, 33, 20};
    for (int c = 0; c < 3; c++) {
        lf_data_args a = args("chat", "qwen3_nothink", 0);
        a.cutoff_len = cut2[c];
        lf_samples tr;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        want_t full = {0}, w = {0};
        {
            want_t w = {0};
            PI(IMS), P("system\nS"), PI(IME), P("\n"), PI(IMS), P("us"), PI(ER), P("\na"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
            R("b"), RI(IME), R("\n");
            PI(IMS), P("us"), PI(ER), P("\nc"), PI(IME), P("\n"), PI(IMS), P("assistant\n"), R("d"), RI(IME), R("\n");
            full = w;
        }
        /* 40: 30+3, then budget 7: 6 < 7 keeps the target, source 4. 33: stops after turn 0.
         * 20: 6 < 20 keeps the target (3), source 17; then the budget is spent. */
        int s0[] = {30, 30, 17}, t0[] = {3, 3, 3}, s1[] = {4, 0, 0}, t1[] = {3, 0, 0};
        for (int k = 0; k < s0[c]; k++) tid(&w, 0, full.ids[k]);
        for (int k = 0; k < t0[c]; k++) tid(&w, 1, full.ids[30 + k]);
        for (int k = 0; k < s1[c]; k++) tid(&w, 0, full.ids[33 + k]);
        for (int k = 0; k < t1[c]; k++) tid(&w, 1, full.ids[52 + k]);
        CHECK_SAMPLE(&tr, 0);
        lf_samples_free(&tr);
    }
}

/* ---- SFT packing ---- */
static void test_sft_packing(void) {
    /* pack.json: lengths 22 (A), 26 (BBBBB), 24 (CCC), 22 (D) and E: 19 + 42 cut by infer_seqlen to the packing
     * cutoff (packing: true lowers cutoff_len 51 to 50): 38 < 50, so the target keeps 31 tokens -> 50. Knapsack
     * over sorted [22, 22, 24, 26, 50]: bin 0 takes 50 (E); bin 1 takes 26 then 24; bin 2 takes 22 and 22 --
     * LF pops the LAST example of a length first, so D (record 3) comes before A (record 0). Each bin is padded
     * with PAD (<|endoftext|>) to 51, labels -100, position ids restarting per example and 0 on padding. */
    lf_data_args a = args("pack", "qwen3_nothink", 0);
    a.packing = 1, a.cutoff_len = 51;
    lf_samples tr;
    if (LOAD(&a, &tr, NULL) != 0) return;
    CHECK(tr.n == 3 && tr.n_dropped == 0);
    CHECK(tr.pos != NULL);
    const char *outs[3][2] = {{"EEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE", NULL}, {"BBBBB", "CCC"}, {"D", "A"}};
    for (int b = 0; b < 3 && b < tr.n; b++) {
        want_t w = {0};
        int32_t pos[64];
        int np = 0;
        for (int k = 0; k < 2 && outs[b][k]; k++) {
            int start = w.n;
            PI(IMS), P("us"), PI(ER), P("\nq"), PI(IME), P("\n"), PI(IMS), P("assistant\n"), R(outs[b][k]);
            if (b > 0) RI(IME), R("\n");  /* E's end was cut off */
            for (int j = start; j < w.n; j++) pos[np++] = j - start;
        }
        while (w.n < 51) tid(&w, 0, EOTXT), pos[np++] = 0;
        CHECK_SAMPLE(&tr, b);
        int same = 1;
        for (int j = 0; j < 51; j++) same &= tr.pos[tr.off[b] + j] == pos[j];
        CHECKF(same, "bin %d: position ids", b);
    }
    lf_samples_free(&tr);
}

/* ---- pre-training ---- */
static void test_pretrain(const char *tmp) {
    char *dir = tn_path_join(tmp, "pt");
    tn_mkdirs(dir);
    WRITE(dir, "dataset_info.json",
          "{\"pt\": {\"file_name\": \"pt.txt\", \"columns\": {\"prompt\": \"text\"}},"
          " \"ptj\": {\"file_name\": \"c4.jsonl\", \"columns\": {\"prompt\": \"text\"}},"
          " \"big\": {\"file_name\": \"big.txt\", \"columns\": {\"prompt\": \"text\"}}}");
    WRITE(dir, "pt.txt", "abc\r\nde\n\nfgh");  /* universal newlines: abc, de, "", fgh */
    WRITE(dir, "c4.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"de\"}\n{\"text\": \"\"}\n{\"text\": \"fgh\"}\n");
    lf_buf big = {0};
    for (int i = 0; i < 1001; i++) lf_buf_puts(&big, "a\n");
    write_file(dir, "big.txt", big.p, big.n);
    free(big.p);
    struct {
        const char *ds, *tmpl;
        int tok_l, packing, cutoff, n;
        int32_t ids[4][6];
        int lab_masked_id;  /* labels -100 where ids == this (the PAD), else = ids */
    } cases[] = {
        /* text + <|im_end|> (qwen EOS), concatenated: a b c E d e E E f g h E, blocks of 5, rest dropped */
        {"pt", "qwen3_nothink", 0, -1, 5, 2, {{'a', 'b', 'c', IME, 'd'}, {'e', IME, IME, 'f', 'g'}}, EOTXT},
        {"ptj", "qwen3_nothink", 0, -1, 5, 2, {{'a', 'b', 'c', IME, 'd'}, {'e', IME, IME, 'f', 'g'}}, EOTXT},
        /* packing: true lowers cutoff to 4 */
        {"pt", "qwen3_nothink", 0, 1, 5, 3, {{'a', 'b', 'c', IME}, {'d', 'e', IME, IME}, {'f', 'g', 'h', IME}}, EOTXT},
        /* no packing: each text cut to cutoff */
        {"pt", "qwen3_nothink", 0, 0, 3, 4, {{'a', 'b', 'c'}, {'d', 'e', IME}, {IME}, {'f', 'g', 'h'}}, EOTXT},
        /* llama3 appends the literal <|end_of_text|>; PAD = EOS = <|eot_id|>, so every token is trained */
        {"pt", "llama3", 1, -1, 5, 2, {{'a', 'b', 'c', EOTX, 'd'}, {'e', EOTX, EOTX, 'f', 'g'}}, EOT},
        /* default with tok_l: EOS <|end_of_text|> is also the PAD (none configured): its labels are -100 */
        {"pt", "default", 1, -1, 5, 2, {{'a', 'b', 'c', EOTX, 'd'}, {'e', EOTX, EOTX, 'f', 'g'}}, EOTX},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        lf_data_args a = args(cases[c].ds, cases[c].tmpl, cases[c].tok_l);
        a.dataset_dir = dir, a.stage = "pt", a.packing = cases[c].packing, a.cutoff_len = cases[c].cutoff;
        lf_samples tr;
        if (LOAD(&a, &tr, NULL) != 0) continue;
        CHECKF(tr.n == cases[c].n, "pt case %zu: %d samples, want %d", c, tr.n, cases[c].n);
        for (int i = 0; i < tr.n && i < cases[c].n; i++) {
            want_t w = {0};
            for (int k = 0; k < 6 && cases[c].ids[i][k]; k++) tid(&w, cases[c].ids[i][k] != cases[c].lab_masked_id, cases[c].ids[i][k]);
            check_sample(&tr, i, &w, __LINE__);
        }
        lf_samples_free(&tr);
    }
    /* a tokenizer that adds BOS: packing forces BOS as each block's first token, else BOS text in front */
    char *tokb = tn_path_join(tmp, "tok_bos");
    tn_mkdirs(tokb);
    size_t n;
    char *tj = tn_read_file(TOKL, &n, 0);
    write_file(tokb, "tokenizer.json", tj, n);
    free(tj);
    WRITE(tokb, "tokenizer_config.json", "{\"add_bos_token\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|end_of_text|>\"}");
    char *tokb_json = tn_path_join(tokb, "tokenizer.json");
    for (int packing = -1; packing <= 0; packing++) {
        lf_data_args a = args("pt", "llama3", 1);
        a.tokenizer_path = tokb_json, a.dataset_dir = dir, a.stage = "pt", a.packing = packing, a.cutoff_len = packing ? 5 : 10;
        lf_samples tr;
        if (lf_load(&a, tl, &tr, NULL) != 0) {
            CHECKF(0, "pt with BOS: %s", tn_errmsg());
            continue;
        }
        int32_t pk[2][5] = {{BOT, 'b', 'c', EOTX, 'd'}, {BOT, EOTX, EOTX, 'f', 'g'}};
        int32_t np[4][5] = {{BOT, 'a', 'b', 'c', EOTX}, {BOT, 'd', 'e', EOTX}, {BOT, EOTX}, {BOT, 'f', 'g', 'h', EOTX}};
        CHECK(tr.n == (packing ? 2 : 4));
        for (int i = 0; i < tr.n && i < 4; i++) {
            want_t w = {0};
            for (int k = 0; k < 5 && (packing ? pk[i][k] : np[i][k]); k++) tid(&w, 1, packing ? pk[i][k] : np[i][k]);
            check_sample(&tr, i, &w, __LINE__);
        }
        lf_samples_free(&tr);
    }
    /* datasets.map batches of 1000 rows: 1001 texts "a" (2 ids each), blocks of 3 -> batch 1: 2000 ids =
     * 666 blocks (2 left over, dropped), batch 2: 2 ids = no block. One concatenation would give 667. */
    lf_data_args a = args("big", "qwen3_nothink", 0);
    a.dataset_dir = dir, a.stage = "pt", a.cutoff_len = 3;
    lf_samples tr;
    if (LOAD(&a, &tr, NULL) == 0) {
        CHECKF(tr.n == 666, "1001 texts in blocks of 3: %d blocks, want 666", tr.n);
        lf_samples_free(&tr);
    }
    free(tokb), free(tokb_json), free(dir);
}

/* ---- tools ---- */
static const char k_qwen_tool_text[] =
    "<|im_start|>system\n\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", "
    "\"description\": \"F\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"description\": "
    "\"X\"}, \"k\": {\"type\": \"string\", \"enum\": [\"u\", \"v\"]}}, \"required\": [\"x\"]}}}\n</tools>\n\nFor each function call, "
    "return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nw?<|im_end|>\n<|im_start|>"
    "assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null], \"z\": \"\xc3\xa9\\n\"}}\n</tool_call>"
    "<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"r\": 2}\n</tool_response><|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n";
static const char k_default_tool_sys[] =
    "You have access to the following tools:\n> Tool Name: f\nTool Description: F\nTool Args:\n  - x (number, required): X\n  - k "
    "(string): , should be one of [u, v]\n\nUse the following format if using a tool:\n```\nAction: tool name (one of [f])\nAction "
    "Input: the input to the tool, in a JSON format representing the kwargs (e.g. ```{\"input\": \"hello world\", \"num_beams\": "
    "5}```)\n```\n";
static const char k_default_tool_fn[] = "Action: f\nAction Input: {\"x\": 1.5, \"y\": [true, null], \"z\": \"\xc3\xa9\\n\"}";
static const char k_llama3_tool_a[] = "Cutting Knowledge Date: December 2023\nToday Date: ";
static const char k_llama3_tool_b[] =
    "\n\nYou have access to the following functions. To call a function, please respond with JSON for a function call. Respond in "
    "the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not use variables.\n\n{\n   "
    " \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"description\": \"F\",\n        "
    "\"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"x\": {\n                "
    "    \"type\": \"number\",\n                    \"description\": \"X\"\n                },\n                \"k\": {\n         "
    "           \"type\": \"string\",\n                    \"enum\": [\n                        \"u\",\n                        "
    "\"v\"\n                    ]\n                }\n            },\n            \"required\": [\n                \"x\"\n         "
    "   ]\n        }\n    }\n}\n\n";
static const char k_llama3_tool_fn[] = "{\"name\": \"f\", \"parameters\": {\"x\": 1.5, \"y\": [true, null], \"z\": \"\xc3\xa9\\n\"}}";

static void test_tools(void) {
    lf_samples tr;
    lf_data_args a = args("tool", "qwen3_nothink", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        char *s = decode_sample(tq, &tr, 0), *t = decode_trained(tq, &tr, 0);
        CHECKF(s && strcmp(s, k_qwen_tool_text) == 0, "qwen tool text:\n%s", s);
        CHECKF(strcmp(t, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null], \"z\": \"\xc3\xa9\\n\"}}\n"
                         "</tool_call><|im_end|>\n|ok<|im_end|>\n") == 0, "qwen tool trained: %s", t);
        free(s), free(t);
        lf_samples_free(&tr);
    }
    a = args("tool", "default", 0);
    if (LOAD(&a, &tr, NULL) == 0) {
        lf_buf want = {0};
        lf_buf_puts(&want, "System: "), lf_buf_puts(&want, k_default_tool_sys), lf_buf_puts(&want, "<|im_end|>\nHuman: w?<|im_end|>\nAssistant:");
        lf_buf_puts(&want, k_default_tool_fn), lf_buf_puts(&want, "<|im_end|>\nHuman: {\"r\": 2}<|im_end|>\nAssistant:ok<|im_end|>\n");
        char *s = decode_sample(tq, &tr, 0);
        CHECKF(s && strcmp(s, want.p) == 0, "default tool text:\n%s", s);
        free(s), free(want.p);
        lf_samples_free(&tr);
    }
    a = args("tool", "llama3", 1);
    if (LOAD(&a, &tr, NULL) == 0) {
        char date[32];
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        strftime(date, sizeof date, "%d %b %Y", &tmv);  /* LF: datetime.now().strftime("%d %b %Y") */
        lf_buf want = {0};
        lf_buf_puts(&want, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"), lf_buf_puts(&want, k_llama3_tool_a);
        lf_buf_puts(&want, date), lf_buf_puts(&want, k_llama3_tool_b);
        lf_buf_puts(&want, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nw?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        lf_buf_puts(&want, k_llama3_tool_fn);
        lf_buf_puts(&want, "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"r\": 2}<|eot_id|><|start_header_id|>assistant"
                           "<|end_header_id|>\n\nok<|eot_id|>");
        char *s = decode_sample(tl, &tr, 0);
        CHECKF(s && strcmp(s, want.p) == 0, "llama3 tool text:\n%s", s);
        free(s), free(want.p);
        lf_samples_free(&tr);
    }
}

/* ---- JSON as Python writes it (and FIPS 180-4's SHA-256 vectors, which key the cache) ---- */
static void test_json(void) {
    static const char *sv[][2] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    };
    for (size_t i = 0; i < 3; i++) {
        lf_sha256 h;
        uint8_t d[32];
        char hex[65];
        lf_sha256_init(&h);
        for (const char *c = sv[i][0]; *c; c++) lf_sha256_update(&h, c, 1);  /* byte by byte: the buffering path */
        lf_sha256_final(&h, d);
        for (int k = 0; k < 32; k++) snprintf(hex + 2 * k, 3, "%02x", d[k]);
        CHECKF(strcmp(hex, sv[i][1]) == 0, "sha256(\"%s\") = %s", sv[i][0], hex);
    }
    static const struct { const char *in, *out; } cases[] = {
        {"{\"a\": 1.50, \"b\": 1e5, \"c\": -0, \"d\": 1E-7, \"e\": 12345678901234567890, \"f\": 0.1}",
         "{\"a\": 1.5, \"b\": 100000.0, \"c\": 0, \"d\": 1e-07, \"e\": 12345678901234567890, \"f\": 0.1}"},
        {"[1e16, 1e15, 0.0001, 0.00001, -2.5e-300, 1e400, NaN, -Infinity]",
         "[1e+16, 1000000000000000.0, 0.0001, 1e-05, -2.5e-300, Infinity, NaN, -Infinity]"},
        {"{\"k\": 1, \"k\": 2, \"j\": [], \"i\": {}}", "{\"k\": 2, \"j\": [], \"i\": {}}"},  /* dict: first place, last value */
        {"\"\\u00e9\\t\\u0001\\\"\\/\\ud83d\\ude00\"", "\"\xc3\xa9\\t\\u0001\\\"/\xf0\x9f\x98\x80\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lf_arena ar = {0};
        lj_error e;
        lf_buf b = {0};
        const lj_val *v = lj_parse(&ar, cases[i].in, strlen(cases[i].in), &e);
        if (v) lj_dump(v, -1, &b);
        CHECKF(v && strcmp(b.p, cases[i].out) == 0, "json.dumps(%s): got %s, want %s", cases[i].in, v ? b.p : e.msg, cases[i].out);
        free(b.p);
        lf_arena_free(&ar);
    }
    static const struct { const char *in; size_t off; const char *msg; } bad[] = {
        {"[1, 2", 5, "end of text"}, {"{\"a\" 1}", 5, "expected ':'"}, {"[01]", 2, "expected ','"},
        {"\"a\x01\"", 2, "control character"}, {"\"\\ud800x\"", 1, "lone UTF-16 surrogate"}, {"\"\xff\"", 1, "invalid UTF-8"},
        {"\"\xed\xa0\x80\"", 1, "invalid UTF-8"}, {"[1] 2", 4, "extra data"}, {"", 0, "end of the text"}, {"tru", 0, "expected a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lf_arena ar = {0};
        lj_error e;
        const lj_val *v = lj_parse(&ar, bad[i].in, strlen(bad[i].in), &e);
        CHECKF(!v && e.off == bad[i].off && strstr(e.msg, bad[i].msg), "bad JSON #%zu: off %zu msg '%s'", i, e.off, v ? "(parsed)" : e.msg);
        lf_arena_free(&ar);
    }
    /* hostile nesting: refused, no stack overflow */
    size_t deep = 200000;
    char *s = tn_xmalloc(deep);
    memset(s, '[', deep);
    lf_arena ar = {0};
    lj_error e;
    CHECK(lj_parse(&ar, s, deep, &e) == NULL && strstr(e.msg, "nesting"));
    lf_arena_free(&ar);
    free(s);
}

/* ---- val_size: numpy's permutation and HF's split ---- */
static void test_split(void) {
    /* constants from /usr/bin/python3 tests/fixtures/lf_data/make_expected.py (numpy 1.24.2) */
    static const int64_t p42_10[] = {5, 6, 0, 7, 3, 2, 4, 9, 1, 8}, p0_7[] = {2, 4, 3, 6, 5, 0, 1};
    int64_t p[70000];
    lf_np_permutation(42, 10, p);
    CHECK(memcmp(p, p42_10, sizeof p42_10) == 0);
    lf_np_permutation(0, 7, p);
    CHECK(memcmp(p, p0_7, sizeof p0_7) == 0);
    lf_np_permutation(1234, 1, p);
    CHECK(p[0] == 0);
    static const int64_t first2390[] = {2229, 889, 1592, 1029, 1337, 709, 1380, 1207};
    lf_np_permutation(42, 2390, p);
    uint64_t chk = 0;
    for (int64_t i = 0; i < 2390; i++) chk = (chk + (uint64_t)(i * p[i])) % ((uint64_t)1 << 61);
    CHECK(memcmp(p, first2390, sizeof first2390) == 0 && p[2389] == 1672 && chk == 3396409655ull);
    static const int64_t first70k[] = {15808, 48179, 11705, 6440, 12002, 28192, 35791, 5854};
    lf_np_permutation(7, 70000, p);
    chk = 0;
    for (int64_t i = 0; i < 70000; i++) chk = (chk + (uint64_t)(i * p[i])) % ((uint64_t)1 << 61);
    CHECK(memcmp(p, first70k, sizeof first70k) == 0 && p[69999] == 16809 && chk == 85724861694269ull);

    /* split10: outputs r0..r9. val_size 0.3 -> ceil(3.0) = 3 held out: rows 5, 6, 0; train 7 3 2 4 9 1 8.
     * val_size 4 -> a count: 5 6 0 7 held out. */
    const double vs[] = {0.3, 4};
    const int want_eval[2][4] = {{5, 6, 0}, {5, 6, 0, 7}}, n_eval[2] = {3, 4};
    const int want_train[2][7] = {{7, 3, 2, 4, 9, 1, 8}, {3, 2, 4, 9, 1, 8}}, n_train[2] = {7, 6};
    for (int c = 0; c < 2; c++) {
        lf_data_args a = args("split10", "qwen3_nothink", 0);
        a.val_size = vs[c];
        lf_samples tr, ev;
        if (LOAD(&a, &tr, &ev) != 0) continue;
        CHECK(tr.n == n_train[c] && ev.n == n_eval[c]);
        for (int i = 0; i < ev.n && i < n_eval[c]; i++) {
            want_t w = {0};
            PI(IMS), P("us"), PI(ER), P("\nq"), PI(IME), P("\n"), PI(IMS), P("assistant\n");
            char r[3] = {'r', (char)('0' + want_eval[c][i]), 0};
            R(r), RI(IME), R("\n");
            CHECK_SAMPLE(&ev, i);
        }
        for (int i = 0; i < tr.n && i < n_train[c]; i++) {
            const int32_t *lab = tr.labels + tr.off[i];
            CHECKF(lab[tr.len[i] - 3] == '0' + want_train[c][i], "train row %d: r%c, want r%d", i, lab[tr.len[i] - 3], want_train[c][i]);
        }
        lf_samples_free(&tr), lf_samples_free(&ev);
    }
}

/* ---- cache ---- */
static int count_files(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f && fscanf(f, "%d", &n) != 1) n = -1;
    if (f) pclose(f);
    return n;
}

static int same_samples(const lf_samples *a, const lf_samples *b) {
    if (a->n != b->n || a->off[a->n] != b->off[b->n] || (a->pos == NULL) != (b->pos == NULL)) return 0;
    size_t T = (size_t)a->off[a->n];
    return memcmp(a->len, b->len, sizeof(int) * (size_t)a->n) == 0 && memcmp(a->ids, b->ids, 4 * T) == 0 &&
           memcmp(a->labels, b->labels, 4 * T) == 0 && (!a->pos || memcmp(a->pos, b->pos, 4 * T) == 0) &&
           a->n_dropped == b->n_dropped && strcmp(a->drop_reason, b->drop_reason) == 0;
}

static void test_cache(const char *tmp) {
    char *dir = tn_path_join(tmp, "cache");
    lf_data_args a = args("pack,split10,broken", "qwen3_nothink", 0);
    a.cache_dir = dir, a.packing = 1, a.cutoff_len = 51, a.val_size = 0.25;
    lf_samples t1, e1, t2, e2;
    if (LOAD(&a, &t1, &e1) != 0) return;
    CHECK(t1.map_ == NULL && count_files(dir) == 1);
    if (LOAD(&a, &t2, &e2) == 0) {
        CHECK(t2.map_ != NULL && e2.map_ != NULL);  /* a hit: mapped, not tokenized */
        CHECK(same_samples(&t1, &t2) && same_samples(&e1, &e2));
        lf_samples_free(&t2), lf_samples_free(&e2);
    }
    /* the cache file found by name can be mapped on its own (what another rank does) */
    char cmd[600], path[512] = "";
    snprintf(cmd, sizeof cmd, "ls %s/lf_*.bin", dir);
    FILE *f = popen(cmd, "r");
    if (f && fgets(path, sizeof path, f)) path[strcspn(path, "\n")] = '\0';
    if (f) pclose(f);
    if (lf_cache_map(path, &t2, &e2) == 0) {
        CHECK(same_samples(&t1, &t2) && same_samples(&e1, &e2));
        t2.labels[0] = 7;  /* private mapping: writable, never written back */
        lf_samples_free(&t2), lf_samples_free(&e2);
    } else {
        CHECKF(0, "lf_cache_map(%s): %s", path, tn_errmsg());
    }
    /* another key (max_samples) -> another file; a damaged file is a miss and is rebuilt */
    a.max_samples = 3;
    if (LOAD(&a, &t2, &e2) == 0) {
        CHECK(t2.map_ == NULL && count_files(dir) == 2);
        lf_samples_free(&t2), lf_samples_free(&e2);
    }
    a.max_samples = 0;
    CHECK(truncate(path, 600) == 0);
    if (LOAD(&a, &t2, &e2) == 0) {
        CHECK(t2.map_ == NULL && same_samples(&t1, &t2));
        lf_samples_free(&t2), lf_samples_free(&e2);
    }
    if (LOAD(&a, &t2, &e2) == 0) {
        CHECK(t2.map_ != NULL && same_samples(&t1, &t2));
        lf_samples_free(&t2), lf_samples_free(&e2);
    }
    char *junk = tn_path_join(dir, "junk.bin");
    write_file(dir, "junk.bin", "not a cache", 11);
    CHECK(lf_cache_map(junk, &t2, NULL) != 0 && strstr(tn_errmsg(), "junk.bin"));
    lf_samples_free(&t1), lf_samples_free(&e1);
    free(junk), free(dir);
}

/* ---- errors ---- */
static void expect_error(const lf_data_args *a, const tn_tokenizer *tok, const char *s1, const char *s2, int line) {
    lf_samples tr, ev;
    int rc = lf_load(a, tok, &tr, a->val_size > 0 ? &ev : NULL);
    const char *m = tn_errmsg();
    tl_checkf(rc != 0 && strstr(m, s1) && (!s2 || strstr(m, s2)) && !strchr(m, '\n'), __FILE__, line,
              "%s/%s: want an error with '%s'%s%s, got rc %d: %s", a->dataset, a->template_name, s1, s2 ? " and " : "", s2 ? s2 : "",
              rc, rc ? m : "(success)");
    if (rc == 0) {
        lf_samples_free(&tr);
        if (a->val_size > 0) lf_samples_free(&ev);
    }
}
#define ERR(a, s1, s2) expect_error(&(a), tq, s1, s2, __LINE__)

static void test_errors(const char *tmp) {
    char *dir = tn_path_join(tmp, "bad");
    tn_mkdirs(dir);
    WRITE(dir, "dataset_info.json",
          "{\n"
          " \"hub\": {\"hf_hub_url\": \"llamafactory/alpaca_en\"},\n"
          " \"rank\": {\"file_name\": \"ok.json\", \"ranking\": true},\n"
          " \"vid\": {\"file_name\": \"ok.json\", \"columns\": {\"prompt\": \"instruction\", \"videos\": \"videos\"}},\n"
          " \"aud\": {\"file_name\": \"ok.json\", \"columns\": {\"prompt\": \"instruction\", \"audios\": \"audios\"}},\n"
          " \"img\": {\"file_name\": \"ok.json\", \"columns\": {\"prompt\": \"instruction\", \"images\": \"images\"}},\n"
          " \"oai\": {\"file_name\": \"ok.json\", \"formatting\": \"openai\"},\n"
          " \"ns\": {\"file_name\": \"ok.json\", \"num_samples\": 5},\n"
          " \"nofile\": {\"formatting\": \"alpaca\"},\n"
          " \"missing\": {\"file_name\": \"nope.json\"},\n"
          " \"csv\": {\"file_name\": \"x.csv\"},\n"
          " \"badarr\": {\"file_name\": \"badarr.json\"},\n"
          " \"badl\": {\"file_name\": \"badl.jsonl\"},\n"
          " \"nocol\": {\"file_name\": \"nocol.json\"},\n"
          " \"numcol\": {\"file_name\": \"numcol.json\"},\n"
          " \"notobj\": {\"file_name\": \"notobj.json\"},\n"
          " \"sg\": {\"file_name\": \"sg.json\", \"formatting\": \"sharegpt\"},\n"
          " \"sgmsg\": {\"file_name\": \"sgmsg.json\", \"formatting\": \"sharegpt\"},\n"
          " \"deep\": {\"file_name\": \"deep.json\"},\n"
          " \"utf\": {\"file_name\": \"utf.json\"},\n"
          " \"trunc\": {\"file_name\": \"trunc.json\"},\n"
          " \"empty\": {\"file_name\": \"empty.json\"},\n"
          " \"fn\": {\"file_name\": \"fn.json\", \"formatting\": \"sharegpt\"},\n"
          " \"tools\": {\"file_name\": \"tools.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": \"conversations\", \"tools\": \"tools\"}},\n"
          " \"deftools\": {\"file_name\": \"deftools.json\", \"formatting\": \"sharegpt\", \"columns\": {\"messages\": \"conversations\", \"tools\": \"tools\"}},\n"
          " \"hist\": {\"file_name\": \"hist.json\", \"columns\": {\"prompt\": \"instruction\", \"response\": \"output\", \"history\": \"history\"}},\n"
          " \"allbad\": {\"file_name\": \"allbad.json\", \"formatting\": \"sharegpt\"},\n"
          " \"ok\": {\"file_name\": \"ok.json\"}\n"
          "}\n");
    WRITE(dir, "ok.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}]");
    WRITE(dir, "x.csv", "instruction,output\na,b\n");
    WRITE(dir, "badarr.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"},\n {\"instruction\": \"c\" \"output\": \"d\"}]");
    WRITE(dir, "badl.jsonl", "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n\n{\"instruction\": \"c\", \"input\": \"\", \"output\": }\n");
    WRITE(dir, "nocol.json", "[{\"instruction\": \"a\", \"input\": \"\", \"answer\": \"b\"}]");
    WRITE(dir, "numcol.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}, {\"instruction\": 5, \"input\": \"\", \"output\": \"b\"}]");
    WRITE(dir, "notobj.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}, [1, 2]]");
    WRITE(dir, "sg.json", "[{\"conversations\": \"hello\"}]");
    WRITE(dir, "sgmsg.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, \"gpt: b\"]}]");
    WRITE(dir, "utf.json", "[{\"instruction\": \"a\xff\", \"input\": \"\", \"output\": \"b\"}]");
    WRITE(dir, "trunc.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b");
    WRITE(dir, "empty.json", "");
    WRITE(dir, "fn.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, {\"from\": \"function_call\", \"value\": \"f(1)\"},"
                          " {\"from\": \"observation\", \"value\": \"1\"}, {\"from\": \"gpt\", \"value\": \"b\"}]}]");
    WRITE(dir, "tools.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, {\"from\": \"gpt\", \"value\": \"b\"}], \"tools\": \"[{\\\"name\\\": \"}]");
    WRITE(dir, "deftools.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, {\"from\": \"gpt\", \"value\": \"b\"}], \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\"}]");
    WRITE(dir, "hist.json", "[{\"instruction\": \"a\", \"output\": \"b\", \"history\": [[\"q\"]]}]");
    WRITE(dir, "allbad.json", "[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"a\"}, {\"from\": \"human\", \"value\": \"b\"}]}]");
    {
        size_t deep = 100000;
        char *s = tn_xmalloc(deep + 2);
        s[0] = '[';
        memset(s + 1, '{', 1), memset(s + 1, '[', deep);
        write_file(dir, "deep.json", s, deep + 1);
        free(s);
    }
    lf_data_args a = args("ok", "qwen", 0);
    a.dataset_dir = dir;
#define ERRDS(ds, s1, s2) do { a.dataset = ds; ERR(a, s1, s2); } while (0)
    ERRDS("hub", "dataset 'hub' loads from 'hf_hub_url'", "local files only");
    ERRDS("rank", "dataset 'rank' is preference data", NULL);
    ERRDS("vid", "dataset 'vid': columns.videos: videos are not supported yet", NULL);
    ERRDS("aud", "dataset 'aud': columns.audios: audio inputs are not supported yet", NULL);
    ERRDS("img", "column 'images' (images) is in no record", NULL);  /* LF's KeyError */
    ERRDS("oai", "formatting 'openai' not supported", NULL);
    ERRDS("ns", "num_samples", NULL);
    ERRDS("nofile", "dataset 'nofile' has no 'file_name'", NULL);
    ERRDS("nosuch", "dataset 'nosuch' is not defined", "dataset_info.json");
    ERRDS("ok, nosuch", "dataset 'nosuch' is not defined", NULL);
    ERRDS("missing", "nope.json: dataset 'missing': file not found", NULL);
    ERRDS("csv", "x.csv: .csv files are not supported", NULL);
    ERRDS("badarr", "badarr.json: invalid JSON at line 2, column 22 (byte 72)", "expected ',' or '}'");
    ERRDS("badl", "badl.jsonl: line 3: invalid JSON at column", "expected a value");
    ERRDS("nocol", "column 'output' (response) is in no record", NULL);
    ERRDS("numcol", "numcol.json: record 1: prompt column 'instruction' must be a string (got number)", NULL);
    ERRDS("notobj", "notobj.json: record 1: expected an object, got array", NULL);
    ERRDS("sg", "sg.json: record 0: column 'conversations' must be a list of messages (got string)", NULL);
    ERRDS("sgmsg", "sgmsg.json: record 0: conversations[1] must be an object", NULL);
    ERRDS("deep", "deep.json: invalid JSON", "nesting deeper than 500");
    ERRDS("utf", "utf.json: invalid JSON at line 1, column 20 (byte 19)", "invalid UTF-8");
    ERRDS("trunc", "trunc.json: invalid JSON", "unterminated string");
    ERRDS("empty", "empty.json: dataset 'empty' has no records", NULL);
    ERRDS("fn", "fn.json: record 0: function_call message: not valid JSON", NULL);
    ERRDS("tools", "tools.json: record 0: tools: not valid JSON", NULL);
    ERRDS("allbad", "train split: no valid example", "message 0 has role 'gpt'");
    ERRDS("hist", "hist.json: record 0: history[0] must be a pair", NULL);
    a.dataset = "deftools", a.template_name = "default";
    ERR(a, "deftools.json: record 0: tools", "parameters.properties");
    a.template_name = "qwen";
    /* pt: a broken conversation has no text (LF would crash on it) */
    a.dataset = "allbad", a.stage = "pt";
    ERR(a, "allbad.json: record 0: stage pt needs a text", NULL);
    a.stage = "sft";
    /* arguments */
    a.dataset = "ok";
    a.template_name = "alpaca";
    ERR(a, "template: 'alpaca' is not supported", "qwen3_nothink");
    a.template_name = "qwen";
    a.stage = "dpo";
    ERR(a, "stage: 'dpo' is not supported", NULL);
    a.stage = "sft";
    a.val_size = 1;  /* one row: nothing left to train on */
    ERR(a, "val_size 1", "training set would be empty");
    a.val_size = 0;
    a.mask_history = a.train_on_prompt = 1;
    ERR(a, "mask_history is incompatible with train_on_prompt", NULL);
    a.mask_history = a.train_on_prompt = 0;
    a.tokenizer_path = NULL;
    ERR(a, "tokenizer_path is required", NULL);
    a.tokenizer_path = TOKQ;
    a.dataset_dir = tmp;  /* no dataset_info.json there */
    ERR(a, "dataset_info.json: cannot open", NULL);
    free(dir);
}

/* ---- 4. real tokenizers (../shared) ---- */
static int count_trained(const lf_samples *s, int i) {
    int k = 0;
    for (int64_t j = s->off[i]; j < s->off[i + 1]; j++) k += s->labels[j] != LF_IGNORE;
    return k;
}

/* Prompt = everything before the first trained token: its text and the trained text must be the study's. */
static void check_render(const tn_tokenizer *t, const lf_samples *s, const char *prompt, const char *trained, const char *what) {
    if (!tl_checkf(s->n == 1, __FILE__, __LINE__, "%s: %d samples", what, s->n)) return;
    int first = -1;
    for (int k = 0; k < s->len[0] && first < 0; k++)
        if (s->labels[k] != LF_IGNORE) first = k;
    int tail_ok = first >= 0;
    for (int k = first; tail_ok && k < s->len[0]; k++) tail_ok = s->labels[k] == s->ids[k];
    char *p = first >= 0 ? tn_tokenizer_decode(t, s->ids, (size_t)first, 0) : NULL;
    char *r = first >= 0 ? tn_tokenizer_decode(t, s->ids + first, (size_t)(s->len[0] - first), 0) : NULL;
    CHECKF(tail_ok && p && strcmp(p, prompt) == 0, "%s: prompt text\n%s\nwant\n%s", what, p ? p : "(none)", prompt);
    CHECKF(tail_ok && r && strcmp(r, trained) == 0, "%s: trained text\n%s\nwant\n%s", what, r ? r : "(none)", trained);
    free(p), free(r);
}

static void test_real(const char *tmp) {
    const char *sh = tl_shared_dir();
    char qp[512], lp[512], demo[512];
    snprintf(qp, sizeof qp, "%s/data/tokenizers/qwen3/tokenizer.json", sh);
    snprintf(lp, sizeof lp, "%s/data/tokenizers/llama3/tokenizer.json", sh);
    snprintf(demo, sizeof demo, "%s/data/llamafactory", sh);
    double t0 = tn_now();
    tn_tokenizer *q3 = tn_tokenizer_load(qp), *l3 = tn_tokenizer_load(lp);
    printf("real tokenizers loaded in %.2f s\n", tn_now() - t0);
    if (!CHECKF(q3 && l3, "load: %s", tn_errmsg())) return;

    /* the study's strings (§2.4, worked example) for "hi" -> "Hello!" */
    struct {
        const char *tmpl;
        int llama;
        const char *prompt, *trained;
    } r[] = {
        {"qwen", 0, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi"
                    "<|im_end|>\n<|im_start|>assistant\n", "Hello!<|im_end|>\n"},
        {"qwen3", 0, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\n\n</think>\n\nHello!<|im_end|>\n"},
        {"qwen3_nothink", 0, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "Hello!<|im_end|>\n"},
        {"default", 0, "Human: hi<|im_end|>\nAssistant:", "Hello!<|im_end|>\n"},
        {"llama3", 1, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant"
                      "<|end_header_id|>\n\n", "Hello!<|eot_id|>"},
        {"default", 1, "Human: hi<|end_of_text|>\nAssistant:", "Hello!<|end_of_text|>\n"},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        lf_data_args a = args("hi", r[i].tmpl, 0);
        a.tokenizer_path = r[i].llama ? lp : qp;
        lf_samples tr;
        if (lf_load(&a, r[i].llama ? l3 : q3, &tr, NULL) != 0) {
            CHECKF(0, "%s: %s", r[i].tmpl, tn_errmsg());
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "%s (%s)", r[i].tmpl, r[i].llama ? "llama3" : "qwen3");
        check_render(r[i].llama ? l3 : q3, &tr, r[i].prompt, r[i].trained, what);
        lf_samples_free(&tr);
    }
    /* multi-turn: both assistant turns trained, with their end-of-turn tokens */
    {
        lf_data_args a = args("chat", "qwen3_nothink", 0);
        a.tokenizer_path = qp;
        lf_samples tr;
        if (lf_load(&a, q3, &tr, NULL) == 0) {
            char *t = decode_trained(q3, &tr, 0), *s = decode_sample(q3, &tr, 0);
            CHECKF(strcmp(t, "b<|im_end|>\n|d<|im_end|>\n") == 0, "chat trained: %s", t);
            CHECK(strcmp(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
                            "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\nd<|im_end|>\n") == 0);
            free(t), free(s);
            lf_samples_free(&tr);
        }
        a = args("chat", "llama3", 1);
        a.tokenizer_path = lp;
        if (lf_load(&a, l3, &tr, NULL) == 0) {
            char *t = decode_trained(l3, &tr, 0);
            CHECKF(strcmp(t, "b<|eot_id|>|d<|eot_id|>") == 0, "llama3 chat trained: %s", t);
            free(t);
            lf_samples_free(&tr);
        }
    }
    /* every demo example's rendered text and trained turns against LF's rules rewritten in Python
     * (fixtures/lf_data/make_expected.py: json.dumps for tools and calls, LF's prompt texts), as SHA-256 */
    {
        static const struct { const char *tmpl, *eos, *ds, *sha; } dg[] = {
            {"qwen", "<|im_end|>", "identity,alpaca_en_demo,alpaca_zh_demo,glaive_toolcall_en_demo",
             "f6e70b1a98c9f9d6a6ff80c6e99aba769c5cf25c99f591601f1a9f521769b155"},
            {"default", "<|im_end|>", "identity,alpaca_en_demo,alpaca_zh_demo,glaive_toolcall_en_demo",
             "437e7e627cdf2e5e8de7b338664f2e4f3dd75bbe8d71dfb1a9171eb17f3369e9"},
            {"llama3", "<|eot_id|>", "identity,alpaca_en_demo,alpaca_zh_demo",
             "c8c0601823f69c337ec195e2572716d5a9f2583601f91d89cc5bd81706341853"},
            {"default", "<|end_of_text|>", "identity,alpaca_en_demo,alpaca_zh_demo",
             "aa1373226bf1f2ec254a0a98c1e8604b52e57d27b3acf8b6453d15643c0d0e1a"},
        };
        for (size_t i = 0; i < sizeof dg / sizeof *dg; i++) {
            int llama = strcmp(dg[i].eos, "<|im_end|>") != 0;
            const tn_tokenizer *tok = llama ? l3 : q3;
            lf_data_args a = {0};
            a.dataset = dg[i].ds, a.dataset_dir = demo, a.template_name = dg[i].tmpl, a.stage = "sft";
            a.cutoff_len = 1000000, a.packing = -1, a.tokenizer_path = llama ? lp : qp;
            lf_samples tr;
            if (lf_load(&a, tok, &tr, NULL) != 0) {
                CHECKF(0, "%s: %s", dg[i].tmpl, tn_errmsg());
                continue;
            }
            lf_sha256 h;
            lf_sha256_init(&h);
            for (int k = 0; k < tr.n; k++) {
                char *full = decode_sample(tok, &tr, k), *tt = decode_runs(tok, &tr, k, '\x02');
                lf_sha256_update(&h, full, strlen(full));
                lf_sha256_update(&h, "\x01", 1);
                lf_sha256_update(&h, tt, strlen(tt));
                lf_sha256_update(&h, "\x03", 1);
                free(full), free(tt);
            }
            uint8_t d[32];
            char hex[65];
            lf_sha256_final(&h, d);
            for (int k = 0; k < 32; k++) snprintf(hex + 2 * k, 3, "%02x", d[k]);
            CHECKF(strcmp(hex, dg[i].sha) == 0, "%s (%s): rendered text of %d examples: sha256 %s, want %s", dg[i].tmpl, dg[i].eos, tr.n,
                   hex, dg[i].sha);
            lf_samples_free(&tr);
        }
    }
    /* a template whose stop word the tokenizer lacks */
    {
        lf_data_args a = args("hi", "llama3", 0);
        a.tokenizer_path = qp;
        expect_error(&a, q3, "has no token '<|eot_id|>'", "resize_vocab", __LINE__);
    }

    /* the demo datasets through every template */
    const char *all = "identity,alpaca_en_demo,alpaca_zh_demo,glaive_toolcall_en_demo";
    struct {
        const char *tmpl;
        int llama;
        int32_t end[2];  /* a trained run ends with these ids (end-of-turn [+ "\n"]) */
    } tp[] = {{"default", 0, {-1, -1}}, {"qwen", 0, {-1, -1}}, {"qwen3", 0, {-1, -1}}, {"qwen3_nothink", 0, {-1, -1}},
              {"default", 1, {-1, -1}}, {"llama3", 1, {-1, -1}}};
    int32_t q_nl[1], l_none = -1;
    tn_ids tmpids = {0};
    tn_tokenizer_encode(q3, "\n", 1, 1, &tmpids);
    q_nl[0] = tmpids.ids[0];
    tn_ids_free(&tmpids);
    int32_t im_end = tn_tokenizer_token_to_id(q3, "<|im_end|>"), eot = tn_tokenizer_token_to_id(l3, "<|eot_id|>");
    int32_t eot_text = tn_tokenizer_token_to_id(l3, "<|end_of_text|>");
    tp[0].end[0] = im_end, tp[0].end[1] = q_nl[0];
    tp[1].end[0] = im_end, tp[1].end[1] = q_nl[0];
    tp[2].end[0] = im_end, tp[2].end[1] = q_nl[0];
    tp[3].end[0] = im_end, tp[3].end[1] = q_nl[0];
    tn_tokenizer_encode(l3, "\n", 1, 1, &tmpids);
    tp[4].end[0] = eot_text, tp[4].end[1] = tmpids.ids[0];
    tn_ids_free(&tmpids);
    tp[5].end[0] = eot, tp[5].end[1] = l_none;
    for (size_t i = 0; i < sizeof tp / sizeof *tp; i++) {
        lf_data_args a = {0};
        a.dataset = all, a.dataset_dir = demo, a.template_name = tp[i].tmpl, a.stage = "sft", a.cutoff_len = 1024;
        a.packing = -1, a.seed = 42, a.tokenizer_path = tp[i].llama ? lp : qp;
        lf_samples tr;
        double t1 = tn_now();
        if (lf_load(&a, tp[i].llama ? l3 : q3, &tr, NULL) != 0) {
            CHECKF(0, "demo %s: %s", tp[i].tmpl, tn_errmsg());
            continue;
        }
        double dt = tn_now() - t1;
        int over = 0, none = 0, bad_end = 0, truncated = 0;
        for (int s = 0; s < tr.n; s++) {
            over += tr.len[s] > 1024;
            none += count_trained(&tr, s) == 0;
            if (tr.len[s] == 1024) {
                truncated++;
                continue;
            }
            /* every trained run of an untruncated sample ends with the end-of-turn token(s) */
            const int32_t *lab = tr.labels + tr.off[s];
            for (int k = 0; k < tr.len[s]; k++) {
                if (lab[k] == LF_IGNORE || (k + 1 < tr.len[s] && lab[k + 1] != LF_IGNORE)) continue;
                int ok = tp[i].end[1] < 0 ? lab[k] == tp[i].end[0] : (k >= 1 && lab[k] == tp[i].end[1] && lab[k - 1] == tp[i].end[0]);
                bad_end += !ok;
            }
        }
        printf("demo datasets, %-13s (%s tokenizer): %d samples, %lld tokens, %d cut at 1024, tokenized in %.3f s\n", tp[i].tmpl,
               tp[i].llama ? "llama3" : "qwen3", tr.n, (long long)tr.off[tr.n], truncated, dt);
        CHECKF(tr.n == 91 + 999 + 1000 + 300 && tr.n_dropped == 0, "%s: %d samples, %d dropped", tp[i].tmpl, tr.n, tr.n_dropped);
        CHECKF(over == 0 && none == 0 && bad_end == 0, "%s: %d over cutoff, %d without trained tokens, %d runs not ending with "
               "the end-of-turn token", tp[i].tmpl, over, none, bad_end);
        lf_samples_free(&tr);
    }

    /* pre-training on alpaca_en_demo: blocks of cutoff, counted independently per batch of 1000 rows from the
     * tokenizer's own encodings of instruction(\ninput) + "<|im_end|>" */
    {
        lf_data_args a = {0};
        a.dataset = "alpaca_en_demo", a.dataset_dir = demo, a.template_name = "qwen3_nothink", a.stage = "pt", a.cutoff_len = 512;
        a.packing = -1, a.seed = 42, a.tokenizer_path = qp;
        lf_samples tr;
        if (lf_load(&a, q3, &tr, NULL) == 0) {
            char p[600];
            snprintf(p, sizeof p, "%s/alpaca_en_demo.json", demo);
            size_t n;
            char *text = tn_read_file(p, &n, 0);
            lf_arena ar = {0};
            lj_error e;
            const lj_val *root = text ? lj_parse(&ar, text, n, &e) : NULL;
            long total = 0, blocks = 0;
            int rows = 0;
            for (const lj_val *r = root ? root->child : NULL; r; r = r->next, rows++) {
                const lj_val *ins = lj_get(r, "instruction"), *inp = lj_get(r, "input");
                lf_buf b = {0};
                lf_buf_put(&b, ins->s, ins->n);
                if (inp && inp->n) lf_buf_putc(&b, '\n'), lf_buf_put(&b, inp->s, inp->n);
                lf_buf_puts(&b, "<|im_end|>");
                tn_ids ids = {0};
                tn_tokenizer_encode(q3, b.p, b.n, 1, &ids);
                total += (long)ids.n;
                tn_ids_free(&ids);
                free(b.p);
                if ((rows + 1) % 1000 == 0 || !r->next) blocks += total / 512, total = 0;
            }
            CHECKF(tr.n == blocks && tr.n > 0, "pt blocks: %d, want %ld", tr.n, blocks);
            int all_full = 1, all_trained = 1;
            for (int s = 0; s < tr.n; s++) all_full &= tr.len[s] == 512, all_trained &= count_trained(&tr, s) == 512;
            CHECK(all_full && all_trained);
            lf_arena_free(&ar);
            free(text);
            lf_samples_free(&tr);
        } else {
            CHECKF(0, "pt: %s", tn_errmsg());
        }
    }
    /* the cache on the demo datasets: the time of a hit */
    {
        char *cdir = tn_path_join(tmp, "democache");
        lf_data_args a = {0};
        a.dataset = all, a.dataset_dir = demo, a.template_name = "qwen3", a.stage = "sft", a.cutoff_len = 2048;
        a.packing = -1, a.seed = 42, a.tokenizer_path = qp, a.cache_dir = cdir, a.val_size = 0.1;
        lf_samples t1, e1, t2, e2;
        double c0 = tn_now();
        if (lf_load(&a, q3, &t1, &e1) == 0) {
            double c1 = tn_now();
            if (lf_load(&a, q3, &t2, &e2) == 0) {
                double c2 = tn_now();
                printf("demo datasets with val_size 0.1: %d train + %d eval samples; tokenize + write cache %.3f s, cache hit %.3f s\n",
                       t1.n, e1.n, c1 - c0, c2 - c1);
                CHECK(e1.n == 239 && t1.n == 2151);  /* ceil(0.1 * 2390) held out */
                CHECK(t2.map_ && same_samples(&t1, &t2) && same_samples(&e1, &e2));
                lf_samples_free(&t2), lf_samples_free(&e2);
            }
            lf_samples_free(&t1), lf_samples_free(&e1);
        }
        free(cdir);
    }
    tn_tokenizer_free(q3), tn_tokenizer_free(l3);
}

int main(void) {
    TOKQ = fx("tok_q/tokenizer.json"), TOKL = fx("tok_l/tokenizer.json"), DATA = fx("data");
    tq = tn_tokenizer_load(TOKQ), tl = tn_tokenizer_load(TOKL);
    if (!tq || !tl) {
        printf("tiny tokenizer: %s\n", tn_errmsg());
        return 1;
    }
    const char *tmp = tl_tmpdir();
    test_json();
    test_templates_tiny();
    test_truncation();
    test_sft_packing();
    test_pretrain(tmp);
    test_tools();
    test_split();
    test_cache(tmp);
    test_errors(tmp);
    if (tl_shared_dir()) test_real(tmp);
    tn_tokenizer_free(tq), tn_tokenizer_free(tl);
    free(TOKQ), free(TOKL), free(DATA);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    if (!tl_shared_dir()) {
        if (tl_failures) return tl_done("test_unit_lf_data");
        tl_require_shared("test_unit_lf_data");  /* the fixture part passed; the real tokenizers need ../shared */
    }
    return tl_done("test_unit_lf_data");
}
