/* test_unit_safetensors -- fp16/bf16 conversions, round trips per dtype, exact bytes of a tiny file,
 * sharded folders, and hostile files (each must fail with one line naming the file). */
#include "core/core.h"
#include "model/safetensors.h"
#include "testlib.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static char g_path[512];

static const char *tmp_path(const char *name) {
    snprintf(g_path, sizeof g_path, "%s/%s", tl_tmpdir(), name);
    return g_path;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    CHECK(st_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(st_bf16_to_f32(0x4049) == 3.140625f);
    CHECK(st_bf16_to_f32(0xC000) == -2.0f);
    CHECK(isinf(st_bf16_to_f32(0x7F80)) && st_bf16_to_f32(0x7F80) > 0);
    CHECK(isinf(st_bf16_to_f32(0xFF80)) && st_bf16_to_f32(0xFF80) < 0);
    CHECK(isnan(st_bf16_to_f32(0x7FC0)));
    CHECK(st_bf16_to_f32(0x0001) == 0x1p-133f); /* bf16 keeps fp32's subnormals */
    CHECK(st_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(st_f32_to_bf16(bitsf(0x40490FDB)) == 0x4049); /* pi rounds down to 3.140625 */
    /* ties: 0x3F80|8000 is halfway between 0x3F80 and 0x3F81 -> even 0x3F80; 0x3F81|8000 -> 0x3F82 */
    CHECK(st_f32_to_bf16(bitsf(0x3F808000)) == 0x3F80);
    CHECK(st_f32_to_bf16(bitsf(0x3F818000)) == 0x3F82);
    CHECK(st_f32_to_bf16(bitsf(0x3F808001)) == 0x3F81);
    CHECK(st_f32_to_bf16(bitsf(0x7F7FFFFF)) == 0x7F80); /* FLT_MAX rounds to inf */
    CHECK(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    CHECK(isnan(st_bf16_to_f32(st_f32_to_bf16(bitsf(0x7F800001))))); /* payload only in low bits: stays nan */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && st_f32_to_bf16(f) != h) bad++;
    }
    CHECKF(bad == 0, "%d bf16 values do not round trip", bad);
}

static void test_f16(void) {
    CHECK(st_f16_to_f32(0x3C00) == 1.0f);
    CHECK(st_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(st_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(st_f16_to_f32(0x0400) == 0x1p-14f);
    CHECK(st_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(st_f16_to_f32(0xC000) == -2.0f);
    CHECK(st_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(isinf(st_f16_to_f32(0x7C00)) && st_f16_to_f32(0x7C00) > 0);
    CHECK(isinf(st_f16_to_f32(0xFC00)) && st_f16_to_f32(0xFC00) < 0);
    CHECK(isnan(st_f16_to_f32(0x7E00)));
    CHECK(st_f16_to_f32(0x8000) == 0 && signbit(st_f16_to_f32(0x8000)));
    CHECK(st_f32_to_f16(1.0f) == 0x3C00);
    CHECK(st_f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(st_f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(st_f32_to_f16(65520.0f) == 0x7C00); /* halfway to 2^16, ties to even = inf */
    CHECK(st_f32_to_f16(INFINITY) == 0x7C00);
    CHECK(st_f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(st_f32_to_f16(-0.0f) == 0x8000);
    CHECK(st_f32_to_f16(0x1p-24f) == 0x0001);
    CHECK(st_f32_to_f16(0x1p-25f) == 0x0000);        /* half the smallest subnormal: tie to even 0 */
    CHECK(st_f32_to_f16(0x1.8p-25f) == 0x0001);      /* above the tie */
    CHECK(st_f32_to_f16(0x1.8p-24f) == 0x0002);      /* 1.5 ulp: tie to even 2 */
    CHECK(st_f32_to_f16(0x1p-14f) == 0x0400);
    CHECK(st_f32_to_f16(0x1.ff8p-15f) == 0x03FF);    /* largest subnormal */
    CHECK(st_f32_to_f16(0x1.ffap-15f) == 0x03FF);    /* below the tie */
    CHECK(st_f32_to_f16(0x1.ffcp-15f) == 0x0400);    /* tie: rounds up (to even) into the smallest normal */
    CHECK(st_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00); /* tie, even stays */
    CHECK(st_f32_to_f16(1.0f + 0x3p-11f) == 0x3C02); /* tie, odd rounds up */
    CHECK(st_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);
    CHECK(st_f32_to_f16(1e-10f) == 0x0000);
    CHECK(isnan(st_f16_to_f32(st_f32_to_f16(NAN))));
    CHECK(isnan(st_f16_to_f32(st_f32_to_f16(bitsf(0x7F800001)))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if (!isnan(f) && st_f32_to_f16(f) != h) bad++;
    }
    CHECKF(bad == 0, "%d f16 values do not round trip", bad);
}

/* One file holding every stored dtype, read back through the three readers. */
static void test_round_trip(void) {
    enum { N = 8 };
    const float xf[N] = {1.0f, bitsf(0x40490FDB), -2.5f, 1e-8f, 65520.0f, 0.1f, -0.0f, bitsf(0x3F808000)};
    const double xd[N] = {1.0, 3.141592653589793, -2.5, 1e-300, 65520.0, 0.1, -0.0, 1e300};
    const int64_t xi[N] = {0, 1, -1, 127, -128, 42, 1, 0};
    const int64_t big[3] = {INT64_MIN, 0, INT64_MAX};
    st_entry e[] = {
        {"f32", ST_F32, ST_F32, 2, {2, 4}, xf},  {"bf16", ST_BF16, ST_F32, 1, {N}, xf},
        {"f16", ST_F16, ST_F32, 1, {N}, xf},     {"f64", ST_F64, ST_F64, 2, {4, 2}, xd},
        {"f64_as_f32", ST_F32, ST_F64, 1, {N}, xd}, {"i64", ST_I64, ST_I64, 1, {3}, big},
        {"i32", ST_I32, ST_I64, 1, {N}, xi},     {"i8", ST_I8, ST_I64, 1, {N}, xi},
        {"bool", ST_BOOL, ST_I64, 3, {2, 2, 2}, (const int64_t[]){0, 1, 1, 0, 0, 0, 1, 1}},
        {"scalar", ST_F32, ST_F32, 0, {0}, xf},  {"empty", ST_F32, ST_F32, 2, {0, 5}, NULL},
    };
    int ne = (int)(sizeof e / sizeof e[0]);
    const char *path = tmp_path("rt.safetensors");
    const char *md[] = {"producer", "tandem", NULL};
    CHECKF(st_write(path, e, ne, md) == 0, "st_write: %s", tn_errmsg());
    st_file f;
    if (!CHECKF(st_open(&f, path) == 0, "st_open: %s", tn_errmsg())) return;
    CHECK(f.n == ne);
    CHECK(f.data_start % 8 == 0);
    for (int i = 1; i < f.n; i++) CHECK(strcmp(f.tensors[i - 1].name, f.tensors[i].name) < 0); /* sorted */

    float out[N];
    double outd[N];
    int64_t outi[N];
    const st_tensor *t = st_find(&f, "f32");
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 4 && t->numel == N);
    CHECK(st_read_f32(&f, t, out, N) == 0 && memcmp(out, xf, sizeof xf) == 0);
    t = st_find(&f, "bf16");
    CHECK(t && t->dtype == ST_BF16 && t->end - t->begin == 2 * N);
    CHECK(st_read_f32(&f, t, out, N) == 0);
    for (int i = 0; i < N; i++) CHECK(fbits(out[i]) == fbits(st_bf16_to_f32(st_f32_to_bf16(xf[i]))));
    CHECK(out[0] == 1.0f && out[1] == 3.140625f && out[7] == 1.0f);
    t = st_find(&f, "f16");
    CHECK(st_read_f64(&f, t, outd, N) == 0);
    CHECK(outd[0] == 1.0 && isinf(outd[4]) && outd[3] == 0.0); /* 1e-8 is below half of f16's 2^-24 */
    CHECK(outd[1] == 3.140625);
    t = st_find(&f, "f64");
    CHECK(st_read_f64(&f, t, outd, N) == 0 && memcmp(outd, xd, sizeof xd) == 0);
    t = st_find(&f, "f64_as_f32");
    CHECK(t && t->dtype == ST_F32 && st_read_f32(&f, t, out, N) == 0 && out[5] == 0.1f && isinf(out[7]));
    t = st_find(&f, "i64");
    CHECK(st_read_i64(&f, t, outi, 3) == 0 && outi[0] == INT64_MIN && outi[2] == INT64_MAX);
    t = st_find(&f, "i32");
    CHECK(st_read_i64(&f, t, outi, N) == 0 && memcmp(outi, xi, sizeof xi) == 0);
    t = st_find(&f, "i8");
    CHECK(st_read_i64(&f, t, outi, N) == 0 && outi[3] == 127 && outi[4] == -128 && outi[2] == -1);
    t = st_find(&f, "bool");
    CHECK(t && t->dtype == ST_BOOL && st_read_i64(&f, t, outi, N) == 0 && outi[1] == 1 && outi[3] == 0);
    t = st_find(&f, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && st_read_f32(&f, t, out, 1) == 0 && out[0] == 1.0f);
    t = st_find(&f, "empty");
    CHECK(t && t->numel == 0 && t->begin == t->end && st_read_f32(&f, t, out, 0) == 0);
    CHECK(st_find(&f, "nope") == NULL);

    /* wrong kind or count */
    t = st_find(&f, "f32");
    CHECK(st_read_i64(&f, t, outi, N) == -1 && strstr(tn_errmsg(), "'f32'") && strstr(tn_errmsg(), path));
    CHECK(st_read_f32(&f, t, out, N - 1) == -1 && strstr(tn_errmsg(), "elements"));
    CHECK(st_read_f32(&f, st_find(&f, "i64"), out, 3) == -1);
    /* metadata is written with "format" first */
    CHECK(memmem(f.map, f.data_start, "\"__metadata__\":{\"format\":\"pt\",\"producer\":\"tandem\"}", 50) != NULL);
    st_close(&f);
}

/* Big enough for the writer's chunk loop and the readers' parallel path. */
static void test_large(void) {
    const int64_t n = (1 << 20) + 3;
    float *x = tn_xmalloc((size_t)n * sizeof *x), *y = tn_xmalloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 1000) * 0.37f - 100.0f;
    st_entry e[2] = {{"h", ST_F16, ST_F32, 2, {1, n}, x}, {"b", ST_BF16, ST_F32, 1, {n}, x}};
    const char *path = tmp_path("large.safetensors");
    CHECKF(st_write(path, e, 2, NULL) == 0, "%s", tn_errmsg());
    st_file f;
    if (!CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg())) return;
    int bad = 0;
    CHECK(st_read_f32(&f, st_find(&f, "h"), y, n) == 0);
    for (int64_t i = 0; i < n; i++) bad += fbits(y[i]) != fbits(st_f16_to_f32(st_f32_to_f16(x[i])));
    CHECK(st_read_f32(&f, st_find(&f, "b"), y, n) == 0);
    for (int64_t i = 0; i < n; i++) bad += fbits(y[i]) != fbits(st_bf16_to_f32(st_f32_to_bf16(x[i])));
    CHECKF(bad == 0, "%d elements differ", bad);
    st_close(&f);
    free(x);
    free(y);
}

static void test_write_errors(void) {
    const int64_t v[2] = {1, 300};
    const float x[2] = {1, 2};
    const char *path = tmp_path("bad-write.safetensors");
    st_entry e = {"u8", ST_U8, ST_I64, 1, {2}, v};
    CHECK(st_write(path, &e, 1, NULL) == -1 && strstr(tn_errmsg(), "'u8'") && strstr(tn_errmsg(), "300"));
    CHECK(!tn_file_exists(path));
    st_entry two[2] = {{"a", ST_F32, ST_F32, 1, {2}, x}, {"a", ST_F32, ST_F32, 1, {2}, x}};
    CHECK(st_write(path, two, 2, NULL) == -1 && strstr(tn_errmsg(), "twice"));
    st_entry kind = {"k", ST_I64, ST_F32, 1, {2}, x};
    CHECK(st_write(path, &kind, 1, NULL) == -1 && strstr(tn_errmsg(), "'k'"));
    st_entry neg = {"n", ST_F32, ST_F32, 1, {-2}, x};
    CHECK(st_write(path, &neg, 1, NULL) == -1 && strstr(tn_errmsg(), "'n'"));
    CHECK(!tn_file_exists(path));
}

/* The bytes of a tiny file against a header written out by hand. */
static void test_exact_bytes(void) {
    const float b[2] = {1.0f, 2.0f};
    const int64_t a[1] = {7};
    st_entry e[2] = {{"b", ST_F32, ST_F32, 1, {2}, b}, {"a", ST_I64, ST_I64, 1, {1}, a}};
    const char *path = tmp_path("exact.safetensors");
    CHECKF(st_write(path, e, 2, NULL) == 0, "st_write: %s", tn_errmsg());
    static const char header[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                                 "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}     ";
    uint8_t want[8 + 144 + 16] = {0x90, 0, 0, 0, 0, 0, 0, 0}; /* 139 bytes of JSON + 5 spaces = 144 */
    CHECK(sizeof header - 1 == 144);
    memcpy(want + 8, header, 144);
    const uint8_t data[16] = {7, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x40};
    memcpy(want + 152, data, 16);
    size_t len = 0;
    char *got = tn_read_file(path, &len, 0);
    CHECK(got && len == sizeof want && memcmp(got, want, sizeof want) == 0);
    free(got);
}

static int count_files(const char *dir, const char *name) {
    char *p = tn_path_join(dir, name);
    int r = tn_file_exists(p);
    free(p);
    return r;
}

static void write_text(const char *path, const char *text) {
    CHECKF(tn_write_file_atomic(path, text, strlen(text)) == 0, "%s", tn_errmsg());
}

static void test_sharded(void) {
    enum { T = 5, L = 16 };
    static float data[T][L];
    char names[T][16];
    st_entry e[T];
    for (int i = 0; i < T; i++) {
        for (int j = 0; j < L; j++) data[i][j] = (float)(i * 100 + j);
        snprintf(names[i], sizeof names[i], "w.%d", T - 1 - i); /* given out of order */
        e[i] = (st_entry){names[i], ST_F32, ST_F32, 2, {4, 4}, data[i]};
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sharded", tl_tmpdir());
    /* 64 bytes each, 150 per shard: greedy packing gives 2 + 2 + 1 */
    CHECKF(st_set_write(dir, e, T, 150) == 0, "st_set_write: %s", tn_errmsg());
    CHECK(count_files(dir, "model-00001-of-00003.safetensors") && count_files(dir, "model-00003-of-00003.safetensors"));
    CHECK(!count_files(dir, "model-00004-of-00003.safetensors") && !count_files(dir, "model.safetensors"));
    char *ipath = tn_path_join(dir, "model.safetensors.index.json");
    char *itext = tn_read_file(ipath, NULL, 0);
    cJSON *idx = itext ? cJSON_Parse(itext) : NULL;
    const cJSON *wm = cJSON_GetObjectItem(idx, "weight_map");
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(idx, "metadata"), "total_size")->valuedouble == T * L * 4);
    CHECK(cJSON_GetArraySize(wm) == T);
    CHECK(strcmp(cJSON_GetObjectItem(wm, "w.0")->valuestring, "model-00001-of-00003.safetensors") == 0);
    CHECK(strcmp(cJSON_GetObjectItem(wm, "w.4")->valuestring, "model-00003-of-00003.safetensors") == 0);
    cJSON_Delete(idx);
    free(itext);

    st_set s;
    if (CHECKF(st_set_open(&s, dir) == 0, "st_set_open: %s", tn_errmsg())) {
        CHECK(s.nfiles == 3);
        for (int i = 0; i < T; i++) {
            const st_file *f = NULL;
            const st_tensor *t = st_set_find(&s, names[i], &f);
            float out[L];
            CHECK(t && f && st_read_f32(f, t, out, L) == 0 && memcmp(out, data[i], sizeof out) == 0);
        }
        const st_file *f = NULL;
        CHECK(st_set_find(&s, "w.4", &f) && strstr(f->path, "model-00003-of-00003"));
        CHECK(st_set_find(&s, "absent", &f) == NULL);
        st_set_close(&s);
    }

    /* the index promises a tensor its shard lacks; then a shard path leaving the folder */
    write_text(ipath, "{\"metadata\":{\"total_size\":1},\"weight_map\":{\"w.0\":\"model-00001-of-00003.safetensors\","
                      "\"ghost\":\"model-00002-of-00003.safetensors\"}}");
    CHECK(st_set_open(&s, dir) == -1 && strstr(tn_errmsg(), "'ghost'") && strstr(tn_errmsg(), "model-00002-of-00003"));
    CHECK(s.nfiles == 0 && s.files == NULL);
    write_text(ipath, "{\"weight_map\":{\"w.0\":\"../x.safetensors\"}}");
    CHECK(st_set_open(&s, dir) == -1 && strstr(tn_errmsg(), "'w.0'"));
    write_text(ipath, "{\"weight_map\":{\"w.0\":\"missing.safetensors\"}}");
    CHECK(st_set_open(&s, dir) == -1 && strstr(tn_errmsg(), "missing.safetensors"));
    write_text(ipath, "{\"weight_map\":[]}");
    CHECK(st_set_open(&s, dir) == -1 && strstr(tn_errmsg(), "weight_map"));
    free(ipath);

    /* under the limit: one model.safetensors, and the stale index goes away */
    CHECKF(st_set_write(dir, e, T, 0) == 0, "st_set_write: %s", tn_errmsg());
    CHECK(count_files(dir, "model.safetensors") && !count_files(dir, "model.safetensors.index.json"));
    if (CHECKF(st_set_open(&s, dir) == 0, "st_set_open: %s", tn_errmsg())) {
        CHECK(s.nfiles == 1 && s.files[0].n == T);
        st_set_close(&s);
    }
    CHECK(st_set_open(&s, tl_tmpdir()) == -1 && strstr(tn_errmsg(), "model.safetensors"));
}

/* A hand-made file: u64 length, header text, then data_len bytes. */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t data_len) {
    size_t n = strlen(header);
    uint8_t *buf = calloc(1, 8 + n + data_len);
    memcpy(buf, &hlen, 8);
    memcpy(buf + 8, header, n);
    CHECK(tn_write_file_atomic(path, buf, 8 + n + data_len) == 0);
    free(buf);
}

static void expect_bad(const char *header, size_t data_len, const char *want, int line) {
    const char *path = tmp_path("bad.safetensors");
    write_raw(path, strlen(header), header, data_len);
    st_file f;
    int rc = st_open(&f, path);
    tl_checkf(rc == -1 && strstr(tn_errmsg(), path) && strstr(tn_errmsg(), want) && !strchr(tn_errmsg(), '\n'), __FILE__,
              line, "header %s: got rc %d, message '%s', wanted '%s'", header, rc, rc ? tn_errmsg() : "", want);
    if (rc == 0) st_close(&f);
    CHECK(f.map == NULL && f.tensors == NULL && f.path == NULL);
}
#define EXPECT_BAD(h, n, want) expect_bad(h, n, want, __LINE__)

static void expect_ok(const char *header, size_t data_len, int ntensors, int line) {
    const char *path = tmp_path("ok.safetensors");
    write_raw(path, strlen(header), header, data_len);
    st_file f;
    int rc = st_open(&f, path);
    tl_checkf(rc == 0 && f.n == ntensors, __FILE__, line, "header %s: %s", header, rc ? tn_errmsg() : "wrong count");
    if (rc == 0) st_close(&f);
}

static void test_malformed(void) {
    const char *path = tmp_path("bad.safetensors");
    st_file f;
    /* length field problems */
    write_text(path, "abc");
    CHECK(st_open(&f, path) == -1 && strstr(tn_errmsg(), path) && strstr(tn_errmsg(), "too short"));
    write_raw(path, 100, "{\"x\":", 0); /* truncated header */
    CHECK(st_open(&f, path) == -1 && strstr(tn_errmsg(), path) && strstr(tn_errmsg(), "past the end of the file"));
    write_raw(path, (uint64_t)1 << 40, "{}", 0);
    CHECK(st_open(&f, path) == -1 && strstr(tn_errmsg(), path) && strstr(tn_errmsg(), "header length"));
    write_raw(path, UINT64_MAX, "{}", 0);
    CHECK(st_open(&f, path) == -1 && strstr(tn_errmsg(), path));
    CHECK(st_open(&f, tmp_path("does-not-exist")) == -1 && strstr(tn_errmsg(), "does-not-exist"));

    EXPECT_BAD("hello world", 0, "not valid JSON");
    EXPECT_BAD("", 0, "not valid JSON");
    EXPECT_BAD("[1, 2]", 0, "not a JSON object");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "not valid JSON");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, "not valid JSON");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "'x'"); /* offsets past end */
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the end of the data");
    EXPECT_BAD("{\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,100]}}", 128,
               "tensor 'lm_head.weight': data_offsets [0, 100] do not match shape [4, 8] x F32 (128 bytes)");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "unsupported dtype 'F8'");
    EXPECT_BAD("{\"x\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'dtype'");
    EXPECT_BAD("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'dtype'");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "'shape'");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10, "shape[0]");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8, "shape[1]");
    EXPECT_BAD("{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dimensions");
    EXPECT_BAD("{\"x\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,9007199254740992],\"data_offsets\":[0,1]}}", 1,
               "overflows");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,1]}}", 1,
               "overflows"); /* numel fits, bytes do not */
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "'data_offsets'");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, "'data_offsets'");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "do not match");
    EXPECT_BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1e300,1e300]}}", 8, "'data_offsets'");
    EXPECT_BAD("{\"x\":[1,2]}", 8, "'x': entry is not an object");
    EXPECT_BAD("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'x' appears twice");
    EXPECT_BAD("{\"__metadata__\":{\"format\":1}}", 0, "'format'");
    EXPECT_BAD("{\"__metadata__\":[]}", 0, "__metadata__");
    EXPECT_BAD("{\"a\\nb\":{\"dtype\":\"F8\"}}", 0, "'a?b'"); /* control characters masked: still one line */

    /* the data section must be tiled exactly, as the reference's validate() demands (issue 15): two tensors
     * sharing bytes, a range shifted by 2 bytes, bytes before, between or after the tensors */
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}   ", 8,
               "tensors 'a' data_offsets [0, 8] and 'b' [4, 8] overlap");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]}}", 16,
               "tensors 'w' data_offsets [0, 8] and 'v' [6, 14] overlap"); /* v shifted 2 bytes down */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[10,18]}}", 18,
               "tensor 'w': data_offsets [2, 10] are misaligned: bytes [0, 2)"); /* both shifted 2 bytes up */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[10,18]}}", 18,
               "tensor 'v': data_offsets [10, 18] are misaligned: bytes [8, 10)");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
               "bytes [8, 12) at the end of the data belong to no tensor; the last one, 'w'");
    EXPECT_BAD("{\"big\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", 16,
               "tensors 'big' data_offsets [0, 16] and 'e' [8, 8] overlap"); /* even an empty one inside another */
    /* legal oddities: trailing header padding, zero-size, scalar, header order unlike data order, empty header */
    expect_ok("{\"e\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
              "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}   ", 4, 2, __LINE__);
    expect_ok("{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7, 2, __LINE__);
    expect_ok("{}", 0, 0, __LINE__);
    expect_ok("{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0, __LINE__);

    /* NUL inside the header */
    write_raw(path, 12, "{}          ", 0);
    size_t len;
    char *b = tn_read_file(path, &len, 0);
    b[9] = 0;
    CHECK(tn_write_file_atomic(path, b, len) == 0);
    free(b);
    CHECK(st_open(&f, path) == -1 && strstr(tn_errmsg(), "NUL"));
}

/* Random byte damage to a valid file must give a clean accept or a clean error (ASan watches). */
static void test_mutations(void) {
    const float x[6] = {1, 2, 3, 4, 5, 6};
    st_entry e[2] = {{"a", ST_F16, ST_F32, 2, {2, 3}, x}, {"bb", ST_F32, ST_F32, 1, {6}, x}};
    const char *src = tmp_path("mut-src.safetensors");
    CHECK(st_write(src, e, 2, NULL) == 0);
    size_t len;
    char *orig = tn_read_file(src, &len, 0);
    char *buf = tn_xmalloc(len);
    tn_rng r;
    tn_rng_seed(&r, 42);
    int opened = 0, failed = 0;
    const char *path = tmp_path("mut.safetensors");
    for (int it = 0; it < 400; it++) {
        memcpy(buf, orig, len);
        int nflip = 1 + (int)(tn_rng_next(&r) % 3);
        for (int k = 0; k < nflip; k++) {
            size_t pos = tn_rng_next(&r) % (len < 120 ? len : 120); /* mostly the length and header */
            buf[pos] = (char)(tn_rng_next(&r) & 0xff);
        }
        size_t cut = it % 10 == 0 ? (size_t)(tn_rng_next(&r) % len) : len;
        CHECK(tn_write_file_atomic(path, buf, cut) == 0);
        st_file f;
        if (st_open(&f, path) != 0) {
            failed++;
            CHECK(strstr(tn_errmsg(), path) != NULL);
            continue;
        }
        opened++;
        for (int i = 0; i < f.n; i++) {
            const st_tensor *t = &f.tensors[i];
            if (t->numel > 1000) continue;
            double d[1000];
            int64_t q[1000];
            if (st_read_f64(&f, t, d, t->numel) != 0) CHECK(st_read_i64(&f, t, q, t->numel) == 0);
        }
        st_close(&f);
    }
    CHECK(opened + failed == 400 && failed > 0);
    free(buf);
    free(orig);
}

static void test_shared_fixture(void) {
    const char *shared = tl_shared_dir();
    if (!shared) return;
    char path[1100], dir[1024];
    snprintf(dir, sizeof dir, "%s/ref/fixtures/llama-f32/model", shared);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!tn_file_exists(path)) return;
    st_file f;
    if (!CHECKF(st_open(&f, path) == 0, "%s", tn_errmsg())) return;
    const st_tensor *t = st_find(&f, "model.embed_tokens.weight");
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 259 && t->shape[1] == 64);
    if (t) {
        float *w = tn_xmalloc(259 * 64 * sizeof *w);
        CHECK(st_read_f32(&f, t, w, 259 * 64) == 0);
        int finite = 1;
        for (int i = 0; i < 259 * 64; i++) finite &= isfinite(w[i]) != 0;
        CHECK(finite);
        free(w);
    }
    /* all-F32, so the reference's (dtype, name) order is name order: rewriting must give the same bytes */
    st_entry *e = tn_xcalloc((size_t)f.n, sizeof *e);
    for (int i = 0; i < f.n; i++) {
        const st_tensor *ti = &f.tensors[i];
        float *w = tn_xmalloc((size_t)ti->numel * sizeof *w + 1);
        CHECK(st_read_f32(&f, ti, w, ti->numel) == 0);
        e[i] = (st_entry){ti->name, ST_F32, ST_F32, ti->ndim, {0}, w};
        memcpy(e[i].shape, ti->shape, sizeof e[i].shape);
    }
    const char *copy = tmp_path("fixture-copy.safetensors");
    CHECKF(st_write(copy, e, f.n, NULL) == 0, "%s", tn_errmsg());
    size_t la = 0, lb = 0;
    char *a = tn_read_file(path, &la, 0), *b = tn_read_file(copy, &lb, 0);
    CHECKF(a && b && la == lb && memcmp(a, b, la) == 0, "rewritten fixture differs from the reference bytes");
    free(a);
    free(b);
    for (int i = 0; i < f.n; i++) free((void *)e[i].data);
    free(e);
    st_close(&f);
    st_set s;
    CHECKF(st_set_open(&s, dir) == 0, "%s", tn_errmsg());
    CHECK(s.nfiles == 1 && st_set_find(&s, "lm_head.weight", NULL) != NULL);
    st_set_close(&s);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    test_bf16();
    test_f16();
    test_round_trip();
    test_large();
    test_write_errors();
    test_exact_bytes();
    test_sharded();
    test_malformed();
    test_mutations();
    test_shared_fixture();
    nftw(tl_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done("test_unit_safetensors");
}
