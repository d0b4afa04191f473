/* test_unit_tokenizer -- the byte-level BPE tokenizer (src/tokenizer) against references it did not make:
 *  1. tests/fixtures/tokenizer/tiny_bpe.json (Qwen-like: NFC, Split regex + ByteLevel, pair merges, added
 *     tokens incl. lstrip/rstrip/single_word) and tiny_gpt2.json (GPT-2/LLaMA-3-like: ByteLevel regex with
 *     prefix space, "a b" merges, ignore_merges); every expected id is derived by hand in the comments.
 *  2. Hostile files: each is refused with one line naming the file and the key.
 *  3. With ../shared: the HF-produced test vectors for Qwen2/3 and LLaMA-3, special tokens, decode round
 *     trips over the LLaMA-Factory demo datasets; load time and encode throughput are printed. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/core.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"

#define NOSPEC 0
#define SPEC 1

static char *fixture(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "fixtures/tokenizer/%s", name);
    return tn_path_join(tl_tests_dir(), rel);
}

/* Encodes text and compares with the expected ids (n = -1 terminates the list). */
static void check_ids(const tn_tokenizer *t, const char *text, int parse_special, const int32_t *want, size_t nwant,
                      int line) {
    tn_ids got = {0};
    int rc = tn_tokenizer_encode(t, text, strlen(text), parse_special, &got);
    int same = rc == 0 && got.n == nwant;
    for (size_t i = 0; same && i < nwant; i++) same = got.ids[i] == want[i];
    char gs[512] = "", ws[512] = "";
    for (size_t i = 0, o = 0; i < got.n && o < 480; i++) o += (size_t)snprintf(gs + o, sizeof gs - o, " %d", got.ids[i]);
    for (size_t i = 0, o = 0; i < nwant && o < 480; i++) o += (size_t)snprintf(ws + o, sizeof ws - o, " %d", want[i]);
    tl_checkf(same, __FILE__, line, "encode(\"%.60s\", special=%d): got [%s ] (rc %d%s%s), want [%s ]", text, parse_special, gs,
              rc, rc ? ": " : "", rc ? tn_errmsg() : "", ws);
    tn_ids_free(&got);
}
#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)
#define CHECK_IDS(t, text, ps, ...) check_ids(t, text, ps, IDS(__VA_ARGS__), __LINE__)

static void check_decode(const tn_tokenizer *t, const int32_t *ids, size_t n, int skip, const char *want, int line) {
    char *got = tn_tokenizer_decode(t, ids, n, skip);
    tl_checkf(got && strcmp(got, want) == 0, __FILE__, line, "decode: got \"%s\", want \"%s\"", got ? got : tn_errmsg(), want);
    free(got);
}
#define CHECK_DECODE(t, skip, want, ...) check_decode(t, IDS(__VA_ARGS__), skip, want, __LINE__)

static int one_line_error_names(const char *path, const char *key) {
    const char *e = tn_errmsg();
    return strstr(e, path) && (!key || strstr(e, key)) && !strchr(e, '\n');
}

/* Vocab of both fixtures: a0 b1 c2 d3 e4 h5 l6 o7 r8 w9 !10 Ġ(space)11 Ċ(\n)12 Ã(0xC3)13 ©(0xA9)14 <15 >16 |17
 * t18 i19 k20 n21 _22 s23 m24 1:25 2:26 '27 f28 ĉ(\t)29; merges by rank: r0 h+e=he30, r1 l+l=ll31,
 * r2 he+ll=hell32, r3 hell+o=hello33, r4 Ġ+w=Ġw34, r5 o+r=or35, r6 Ġw+or=Ġwor36, r7 Ġwor+l=Ġworl37,
 * r8 Ġworl+d=Ġworld38, r9 Ã+©=Ã©39 (é), r10 e+l=el40, r11 c+a=ca41, r12 ca+f=caf42, r13 caf+Ã©=cafÃ©43,
 * r14 1+2=12:44, r15 Ċ+Ċ=ĊĊ45. */
static void test_tiny_bpe(void) {
    char *path = fixture("tiny_bpe.json");
    tn_tokenizer *t = tn_tokenizer_load(path);
    CHECKF(t != NULL, "load %s: %s", path, tn_errmsg());
    if (!t) {
        free(path);
        return;
    }
    /* Added tokens: 46 <|im_start|> special, 47 <think> plain, 48 <mask> (lstrip, rstrip, single_word),
     * 49 unused, 50 "<|end turn|>" special. */
    CHECK(tn_tokenizer_vocab_size(t) == 51);
    /* Pre-tokens "hello" " world" "!": h e l l o -> he (r0) -> ll (r1) -> hell -> hello; Ġ w o r l d -> Ġw (r4)
     * -> or (r5) -> Ġwor -> Ġworl -> Ġworld. */
    CHECK_IDS(t, "hello world!", SPEC, 33, 38, 10);
    CHECK_IDS(t, "ell", SPEC, 4, 31);        /* l+l (r1) beats e+l (r10) though it is further right */
    CHECK_IDS(t, "lll", SPEC, 31, 6);        /* equal ranks: leftmost pair first */
    CHECK_IDS(t, "cafe\xcc\x81", SPEC, 43);  /* NFC: e + U+0301 -> é (C3 A9): Ã+© (r9), c+a, ca+f, caf+Ã© */
    CHECK_IDS(t, "caf\xc3\xa9", SPEC, 43);
    CHECK_IDS(t, "12", SPEC, 25, 26);        /* \p{N} takes single digits: merge r14 never applies */
    CHECK_IDS(t, "he's", SPEC, 30, 27, 23);  /* "he" "'s" */
    CHECK_IDS(t, "a  b", SPEC, 0, 11, 11, 1); /* "a" " " (\s+(?!\S)) " b" */
    CHECK_IDS(t, "a\n\nb", SPEC, 0, 45, 1);  /* \s*[\r\n]+ keeps the newlines together */
    CHECK_IDS(t, "a\tb", SPEC, 0, 29, 1);    /* "\tb": one non-letter may lead a word */
    CHECK_IDS(t, "<|im_start|>hello<think>", SPEC, 46, 33, 47);
    /* parse_special 0: "<|" "im" "_start" "|>" "hello" as text, <think> (not special) still one token */
    CHECK_IDS(t, "<|im_start|>hello<think>", NOSPEC, 15, 17, 19, 24, 22, 23, 18, 0, 8, 18, 17, 16, 33, 47);
    CHECK_IDS(t, "hi<|end turn|>", SPEC, 5, 19, 50);
    /* HF's own lstrip/rstrip/single_word case: "hi" | " <mask> " | "there" | "\t<mask>\t" | "<mask>\u2000";
     * "there" = t he r e. */
    CHECK_IDS(t, "hi <mask> there\t<mask>\t<mask>\xe2\x80\x80", SPEC, 5, 19, 48, 18, 30, 8, 4, 48, 48);
    CHECK_IDS(t, "a<mask>", SPEC, 0, 15, 24, 0, 23, 20, 16); /* inside a word: plain text "a" "<" "mask" ">" */
    CHECK_IDS(t, "<mask>!", SPEC, 48, 10);
    CHECK_IDS(t, "", SPEC);

    tn_ids v = {0};
    CHECK(tn_tokenizer_encode(t, "xyz", 3, SPEC, &v) == -1 && v.n == 0);  /* no token for byte 'x' */
    CHECKF(one_line_error_names(path, "0x78"), "error: %s", tn_errmsg());
    CHECK(tn_tokenizer_encode(t, "ab\xff", 3, SPEC, &v) == -1 && v.n == 0);
    CHECKF(one_line_error_names(path, "UTF-8 at byte 2"), "error: %s", tn_errmsg());
    CHECK(tn_tokenizer_encode(t, "ab\xe2\x80", 4, SPEC, &v) == -1);       /* truncated sequence */
    CHECK(tn_tokenizer_encode(t, "\xed\xa0\x80", 3, SPEC, &v) == -1);     /* surrogate */
    CHECK(tn_tokenizer_encode(t, "\xc0\xaf", 2, SPEC, &v) == -1);         /* overlong */
    tn_ids_push(&v, 7);  /* encode appends */
    CHECK(tn_tokenizer_encode(t, "hello", 5, SPEC, &v) == 0 && v.n == 2 && v.ids[0] == 7 && v.ids[1] == 33);
    tn_ids_free(&v);

    CHECK_DECODE(t, 0, "hello world!", 33, 38, 10);
    CHECK_DECODE(t, 0, "<|im_start|>hello", 46, 33);
    CHECK_DECODE(t, 1, "hello", 46, 33);
    CHECK_DECODE(t, 1, "<think>", 47);               /* not special: kept */
    CHECK_DECODE(t, 0, "hi<|end turn|>", 5, 19, 50); /* ' ' is no byte-level char: the token's own bytes */
    CHECK_DECODE(t, 0, "caf\xc3\xa9", 43);
    CHECK_DECODE(t, 0, "\xc3\xa9", 13, 14);          /* one character split over two tokens */
    CHECK_DECODE(t, 0, "\xef\xbf\xbd", 13);          /* lone lead byte -> U+FFFD */
    CHECK_DECODE(t, 0, "\xef\xbf\xbd" "a", 13, 0);
    CHECK_DECODE(t, 0, "\xef\xbf\xbd\xef\xbf\xbd", 14, 14); /* two stray continuation bytes: two U+FFFD */
    CHECK_DECODE(t, 0, "\xef\xbf\xbd\xc3\xa9", 13, 13, 14);
    int32_t bad[] = {33, 49};
    CHECK(tn_tokenizer_decode(t, bad, 2, 0) == NULL && one_line_error_names(path, "49"));
    bad[1] = 51;
    CHECK(tn_tokenizer_decode(t, bad, 2, 0) == NULL);
    bad[1] = -1;
    CHECK(tn_tokenizer_decode(t, bad, 2, 0) == NULL);

    CHECK(tn_tokenizer_token_to_id(t, "\xc4\xa0world") == 38);  /* "Ġworld" */
    CHECK(tn_tokenizer_token_to_id(t, "<think>") == 47);
    CHECK(tn_tokenizer_token_to_id(t, "zz") == -1);
    const char *s = tn_tokenizer_id_to_token(t, 43);
    CHECK(s && strcmp(s, "caf\xc3\x83\xc2\xa9") == 0);  /* "cafÃ©" */
    s = tn_tokenizer_id_to_token(t, 46);
    CHECK(s && strcmp(s, "<|im_start|>") == 0);
    CHECK(tn_tokenizer_id_to_token(t, 49) == NULL && tn_tokenizer_id_to_token(t, 51) == NULL &&
          tn_tokenizer_id_to_token(t, -1) == NULL);
    tn_tokenizer_free(t);
    free(path);
}

static void test_tiny_gpt2(void) {
    char *path = fixture("tiny_gpt2.json");
    tn_tokenizer *t = tn_tokenizer_load(path);
    CHECKF(t != NULL, "load %s: %s", path, tn_errmsg());
    if (!t) {
        free(path);
        return;
    }
    /* Same vocab and merges plus 46 "Ġhello" (no merge path to it); add_prefix_space, GPT-2 regex. */
    CHECK_IDS(t, "hello", SPEC, 46);             /* " hello" is in the vocab: ignore_merges takes it whole */
    CHECK_IDS(t, "hello hello", SPEC, 46, 46);
    CHECK_IDS(t, "lll", SPEC, 11, 31, 6);        /* " lll": Ġ ll l */
    CHECK_IDS(t, "12", SPEC, 11, 44);            /* " 12" is one pre-token ( ?\p{N}+): Ġ 12 */
    CHECK_IDS(t, "he's", SPEC, 11, 30, 27, 23);  /* " he" "'s" */
    tn_ids v = {0};  /* no normalizer: e + U+0301 stays, and byte 0xCC has no token */
    CHECK(tn_tokenizer_encode(t, "cafe\xcc\x81", 6, SPEC, &v) == -1 && one_line_error_names(path, "0xCC"));
    tn_ids_free(&v);
    CHECK_DECODE(t, 0, " hello hello", 46, 46);
    tn_tokenizer_free(t);
    free(path);
}

/* --- hostile files ------------------------------------------------------------------------------- */

static const char *k_model = "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"b\"]]}";
static const char *k_pretok = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
static const char *k_dec = "{\"type\":\"ByteLevel\"}";

static char *write_json(const char *name, const char *text) {
    char *path = tn_path_join(tl_tmpdir(), name);
    if (tn_write_file_atomic(path, text, strlen(text)) != 0) {
        fprintf(stderr, "%s\n", tn_errmsg());
        exit(1);
    }
    return path;
}

static char *make(const char *name, const char *model, const char *added, const char *norm, const char *pretok,
                  const char *dec) {
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":null,"
             "\"decoder\":%s,\"model\":%s}",
             added, norm, pretok, dec, model);
    return write_json(name, buf);
}

static void expect_refused(char *path, const char *key, int line) {
    tn_tokenizer *t = tn_tokenizer_load(path);
    tl_checkf(t == NULL && one_line_error_names(path, key), __FILE__, line, "%s: want an error naming '%s', got %s",
              path, key, t ? "a tokenizer" : tn_errmsg());
    tn_tokenizer_free(t);
    free(path);
}
#define REFUSED(path, key) expect_refused(path, key, __LINE__)

static void test_hostile(void) {
    /* The base file is fine: a b -> ab. */
    char *ok = make("ok.json", k_model, "[]", "null", k_pretok, k_dec);
    tn_tokenizer *t = tn_tokenizer_load(ok);
    CHECKF(t != NULL, "%s", tn_errmsg());
    if (t) CHECK_IDS(t, "ab", SPEC, 2);
    tn_tokenizer_free(t);

    /* unk_token: bytes without a token become <unk> (3), runs fused with fuse_unk: "xxab" -> <unk> ab */
    const char *unk_model = "{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":%s,\"vocab\":{\"a\":0,\"b\":1,"
                            "\"ab\":2,\"<unk>\":3},\"merges\":[\"a b\"]}";
    for (int fuse = 0; fuse <= 1; fuse++) {
        char model[256];
        snprintf(model, sizeof model, unk_model, fuse ? "true" : "false");
        char *p = make("unk.json", model, "[]", "null", k_pretok, k_dec);
        t = tn_tokenizer_load(p);
        CHECKF(t != NULL, "%s", tn_errmsg());
        if (t && fuse) CHECK_IDS(t, "xxab", SPEC, 3, 2);
        if (t && !fuse) CHECK_IDS(t, "xxab", SPEC, 3, 3, 2);
        tn_tokenizer_free(t);
        free(p);
    }
    REFUSED(make("unk2.json", "{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0},\"merges\":[]}", "[]",
                 "null", k_pretok, k_dec), "model.unk_token '<unk>' is not in model.vocab");

    size_t n;
    char *text = tn_read_file(ok, &n, 0);
    text[n / 2] = '\0';
    REFUSED(write_json("trunc.json", text), "invalid JSON");
    free(text);
    free(ok);
    REFUSED(write_json("comma.json", "{\"version\": \"1.0\",,}"), "invalid JSON at line 1, column");
    REFUSED(write_json("array.json", "[]"), "object");
    REFUSED(write_json("empty.json", ""), "JSON");
    REFUSED(tn_path_join(tl_tmpdir(), "absent.json"), "cannot open");
    REFUSED(make("unigram.json", "{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}", "[]", "null", k_pretok, k_dec),
            "model.type 'Unigram' not supported (expected BPE)");
    REFUSED(make("nomodel.json", "null", "[]", "null", k_pretok, k_dec), "'model'");
    REFUSED(make("merge1.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"c\"]]}", "[]", "null",
                 k_pretok, k_dec), "model.merges[0]: token 'c' is not in model.vocab");
    REFUSED(make("merge2.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}", "[]", "null",
                 k_pretok, k_dec), "model.merges[0]: token 'ab' is not in model.vocab");
    REFUSED(make("merge3.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\",\"ab\"]}", "[]",
                 "null", k_pretok, k_dec), "model.merges[1]");
    REFUSED(make("merge4.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}", "[]", "null", k_pretok,
                 k_dec), "model.merges[0]");
    REFUSED(make("dupid.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}", "[]", "null", k_pretok,
                 k_dec), "id 0 is given to both 'a' and 'b'");
    REFUSED(make("dupkey.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}", "[]", "null", k_pretok,
                 k_dec), "token 'a' appears twice");
    REFUSED(make("negid.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}", "[]", "null", k_pretok, k_dec),
            "model.vocab['a']");
    REFUSED(make("bigid.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":3000000000},\"merges\":[]}", "[]", "null", k_pretok,
                 k_dec), "model.vocab['a']");
    REFUSED(make("fracid.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}", "[]", "null", k_pretok, k_dec),
            "model.vocab['a']");
    REFUSED(make("strid.json", "{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}", "[]", "null", k_pretok, k_dec),
            "model.vocab['a']");
    REFUSED(make("novocab.json", "{\"type\":\"BPE\",\"merges\":[]}", "[]", "null", k_pretok, k_dec), "model.vocab");
    REFUSED(make("dropout.json", "{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}", "[]", "null",
                 k_pretok, k_dec), "model.dropout");
    REFUSED(make("added1.json", k_model, "[{\"id\":0,\"content\":\"<x>\",\"special\":true}]", "null", k_pretok, k_dec),
            "added_tokens[0]: id 0 is 'a' in model.vocab, not '<x>'");
    REFUSED(make("added2.json", k_model, "[{\"id\":3,\"content\":\"<x>\"},{\"id\":3,\"content\":\"<y>\"}]", "null",
                 k_pretok, k_dec), "added_tokens[1]: id 3");
    REFUSED(make("added3.json", k_model, "[{\"id\":7,\"content\":\"ab\"}]", "null", k_pretok, k_dec), "added_tokens[0]");
    REFUSED(make("added4.json", k_model, "[{\"id\":99999999,\"content\":\"<x>\"}]", "null", k_pretok, k_dec),
            "added_tokens[0].id");
    REFUSED(make("added5.json", k_model, "[{\"id\":3,\"content\":\"\"}]", "null", k_pretok, k_dec),
            "added_tokens[0].content");
    REFUSED(make("added6.json", k_model, "[{\"id\":3,\"content\":\"<x>\",\"special\":\"yes\"}]", "null", k_pretok, k_dec),
            "added_tokens[0].special");
    REFUSED(make("nfkc.json", k_model, "[]", "{\"type\":\"NFKC\"}", k_pretok, k_dec),
            "normalizer.type 'NFKC' not supported");
    REFUSED(make("lower.json", k_model, "[]", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Lowercase\"}]}",
                 k_pretok, k_dec), "normalizer.normalizers[1].type 'Lowercase' not supported");
    REFUSED(make("meta.json", k_model, "[]", "null", "{\"type\":\"Metaspace\"}", k_dec),
            "pre_tokenizer.type 'Metaspace' not supported");
    REFUSED(make("nopre.json", k_model, "[]", "null", "null", k_dec), "pre_tokenizer");
    REFUSED(make("nobl.json", k_model, "[]", "null",
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                 "\"behavior\":\"Isolated\"}]}", k_dec), "no ByteLevel");
    REFUSED(make("removed.json", k_model, "[]", "null",
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                 "\"behavior\":\"Removed\"},{\"type\":\"ByteLevel\"}]}", k_dec), "pre_tokenizer.pretokenizers[0].behavior");
    REFUSED(make("badre.json", k_model, "[]", "null",
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?<\"},"
                 "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\"}]}", k_dec),
            "pre_tokenizer.pretokenizers[0].pattern.Regex does not compile");
    REFUSED(make("wp.json", k_model, "[]", "null", k_pretok, "{\"type\":\"WordPiece\"}"), "decoder.type 'WordPiece'");
    REFUSED(make("nodec.json", k_model, "[]", "null", k_pretok, "null"), "decoder");
    REFUSED(write_json("version.json", "{\"version\":\"2.0\",\"model\":{}}"), "version");
}

/* --- real tokenizers (../shared) ----------------------------------------------------------------- */

static char *shared_path(const char *rel) { return tn_path_join(tl_shared_dir(), rel); }

static char *nfc(const char *s) {
    return (char *)utf8proc_NFC((const utf8proc_uint8_t *)s);
}

/* Every case of a testvectors file: the exact ids (HF encode default: special tokens parsed), and decode
 * giving the text back (NFC-normalized when the tokenizer normalizes). */
static void run_vectors(const tn_tokenizer *t, const char *rel, int is_nfc) {
    char *path = shared_path(rel);
    size_t n;
    char *text = tn_read_file(path, &n, 0);
    CHECKF(text != NULL, "%s", tn_errmsg());
    cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    CHECKF(cJSON_GetArraySize(cases) >= 40, "%s: %d cases", rel, cJSON_GetArraySize(cases));
    int ncase = 0, nok = 0;
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next, ncase++) {
        const char *s = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
        tn_ids got = {0};
        int rc = tn_tokenizer_encode(t, s, strlen(s), SPEC, &got);
        int same = rc == 0 && got.n == (size_t)cJSON_GetArraySize(ids);
        size_t i = 0;
        for (const cJSON *e = ids->child; same && e; e = e->next, i++) same = got.ids[i] == (int32_t)e->valuedouble;
        nok += same;
        CHECKF(same, "%s case %d (\"%.40s\"): ids differ from HF (%zu ids, want %d)", rel, ncase, s, got.n,
               cJSON_GetArraySize(ids));
        char *back = tn_tokenizer_decode(t, got.ids, got.n, 0), *want = is_nfc ? nfc(s) : tn_xstrdup(s);
        CHECKF(back && want && strcmp(back, want) == 0, "%s case %d: decode gives \"%.40s\"", rel, ncase, back ? back : "");
        free(back), free(want);
        tn_ids_free(&got);
    }
    printf("  %s: %d of %d cases exact\n", rel, nok, ncase);
    cJSON_Delete(root);
    free(text), free(path);
}

/* Round trip of every string of a LLaMA-Factory demo dataset, both parse_special modes. */
static size_t roundtrip_strings(const tn_tokenizer *t, const cJSON *j, int is_nfc, int *bad) {
    size_t bytes = 0;
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring;
        for (int ps = 0; ps <= 1; ps++) {
            tn_ids ids = {0};
            int rc = tn_tokenizer_encode(t, s, strlen(s), ps, &ids);
            char *back = rc == 0 ? tn_tokenizer_decode(t, ids.ids, ids.n, 0) : NULL, *want = is_nfc ? nfc(s) : tn_xstrdup(s);
            if (!back || strcmp(back, want) != 0) {
                if ((*bad)++ < 3) fprintf(stderr, "round trip differs (special=%d): \"%.60s\"\n", ps, s);
            }
            free(back), free(want);
            tn_ids_free(&ids);
        }
        return strlen(s);
    }
    for (const cJSON *c = j->child; c; c = c->next) bytes += roundtrip_strings(t, c, is_nfc, bad);
    return bytes;
}

static void run_datasets(const tn_tokenizer *t, int is_nfc, const char *name) {
    const char *files[] = {"alpaca_en_demo.json", "alpaca_zh_demo.json", "glaive_toolcall_en_demo.json", "identity.json"};
    for (int f = 0; f < 4; f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "data/llamafactory/%s", files[f]);
        char *path = shared_path(rel);
        size_t n;
        char *text = tn_read_file(path, &n, 0);
        CHECKF(text != NULL, "%s", tn_errmsg());
        cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
        CHECKF(root != NULL, "%s: not JSON", rel);
        int bad = 0;
        size_t bytes = root ? roundtrip_strings(t, root, is_nfc, &bad) : 0;
        CHECKF(bad == 0 && bytes > 10000, "%s %s: %d strings do not round-trip (%zu bytes)", name, files[f], bad, bytes);
        cJSON_Delete(root);
        free(text), free(path);
    }
}

/* Speed report: encode throughput over the strings of alpaca_en_demo (one core, best of 3). */
static void collect(const cJSON *j, const char **v, int *n, int cap) {
    if (cJSON_IsString(j) && *n < cap) v[(*n)++] = j->valuestring;
    for (const cJSON *c = j->child; c; c = c->next) collect(c, v, n, cap);
}

static void report_speed(const tn_tokenizer *t, const char *name) {
    char *path = shared_path("data/llamafactory/alpaca_en_demo.json");
    size_t n;
    char *text = tn_read_file(path, &n, 0);
    cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
    static const char *v[20000];
    int nv = 0;
    if (root) collect(root, v, &nv, 20000);
    double best = 1e30;
    size_t bytes = 0;
    tn_ids ids = {0};
    for (int rep = 0; rep < 3; rep++) {
        bytes = 0;
        double t0 = tn_now();
        for (int i = 0; i < nv; i++) {
            size_t len = strlen(v[i]);
            ids.n = 0;
            if (tn_tokenizer_encode(t, v[i], len, SPEC, &ids) != 0) break;
            bytes += len;
        }
        double dt = tn_now() - t0;
        if (dt < best) best = dt;
    }
    printf("  %s: encode %.1f MB/s (alpaca_en_demo, %zu bytes)\n", name, bytes / best / 1e6, bytes);
    tn_ids_free(&ids);
    cJSON_Delete(root);
    free(text), free(path);
}

static tn_tokenizer *load_timed(const char *rel, const char *name) {
    char *path = shared_path(rel);
    double t0 = tn_now();
    tn_tokenizer *t = tn_tokenizer_load(path);
    double dt = tn_now() - t0;
    CHECKF(t != NULL, "load %s: %s", rel, tn_errmsg());
    if (t) printf("  %s: loaded in %.3f s, vocab size %d\n", name, dt, tn_tokenizer_vocab_size(t));
    free(path);
    return t;
}

static void test_qwen3(void) {
    tn_tokenizer *t = load_timed("data/tokenizers/qwen3/tokenizer.json", "qwen3");
    if (!t) return;
    CHECK(tn_tokenizer_vocab_size(t) == 151669);
    run_vectors(t, "data/tokenizers/testvectors/qwen2.json", 1);
    CHECK(tn_tokenizer_token_to_id(t, "<|im_start|>") == 151644 && tn_tokenizer_token_to_id(t, "<|im_end|>") == 151645);
    CHECK(tn_tokenizer_token_to_id(t, "<think>") == 151667 && tn_tokenizer_token_to_id(t, "<|endoftext|>") == 151643);
    /* Ids from an independent Python BPE (regex module + unicodedata NFC) over the same tokenizer.json. */
    const char *chat = "<|im_start|>user\nHi<|im_end|>";
    CHECK_IDS(t, chat, SPEC, 151644, 872, 198, 13048, 151645);
    CHECK_IDS(t, chat, NOSPEC, 27, 91, 318, 4906, 91, 29, 872, 198, 13048, 27, 91, 318, 6213, 91, 29);
    /* <think> has "special": false in Qwen3's file, so HF matches it even when special tokens are text. */
    CHECK_IDS(t, "<think>", SPEC, 151667);
    CHECK_IDS(t, "<think>", NOSPEC, 151667);
    int32_t ids[] = {151644, 872, 198, 13048, 151645};
    char *s = tn_tokenizer_decode(t, ids, 5, 1);
    CHECK(s && strcmp(s, "user\nHi") == 0);
    free(s);
    run_datasets(t, 1, "qwen3");
    report_speed(t, "qwen3");
    tn_tokenizer_free(t);
}

static void test_llama3(void) {
    tn_tokenizer *t = load_timed("data/tokenizers/llama3/tokenizer.json", "llama3");
    if (!t) return;
    CHECK(tn_tokenizer_vocab_size(t) == 128256);
    run_vectors(t, "data/tokenizers/testvectors/llama3.json", 0);
    CHECK_IDS(t, "<|begin_of_text|>", SPEC, 128000);
    CHECK_IDS(t, "<|eot_id|>", SPEC, 128009);
    const char *chat = "<|begin_of_text|>Hi<|eot_id|>";
    CHECK_IDS(t, chat, SPEC, 128000, 13347, 128009);
    CHECK_IDS(t, chat, NOSPEC, 27, 91, 7413, 3659, 4424, 91, 29, 13347, 27, 91, 68, 354, 851, 91, 29);
    run_datasets(t, 0, "llama3");
    report_speed(t, "llama3");
    tn_tokenizer_free(t);
}

int main(void) {
    test_tiny_bpe();
    test_tiny_gpt2();
    test_hostile();
    if (!tl_shared_dir()) {
        if (tl_failures) return tl_done("test_unit_tokenizer");
        tl_require_shared("test_unit_tokenizer");  /* the fixture part passed; the HF comparisons need ../shared */
    }
    test_qwen3();
    test_llama3();
    return tl_done("test_unit_tokenizer");
}
