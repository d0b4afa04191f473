/* test_unit_data_image -- src/data/image_*.c and vl_processor.c against PIL itself, and on bad input.
 *  1. Property test: tests/tools/pil_image_cases.py (Debian's python3-pil 9.4, the Pillow LLaMA-Factory would
 *     run here) writes random images of every mode tandem decodes -- PNG 1/2/4/8/16-bit grey, palette with short
 *     palettes, grey+alpha, RGB(A) 8/16-bit, Adam7; JPEG grey/RGB/CMYK, baseline/progressive, 4:4:4/4:2:2/4:2:0;
 *     WebP lossy/lossless with and without alpha -- with PIL's decode + convert("RGB"), LLaMA-Factory's Qwen2-VL
 *     pre-processing + smart_resize + BICUBIC for random image_max/min_pixels and processor settings, and PIL's
 *     Image.resize of raw images in all 8 modes to random up- and downscales (1 px to 12x). Every byte must be
 *     equal: tandem reproduces PIL's fixed-point arithmetic, so the bound is 0. TANDEM_TEST_PIL_RUNS=N runs N
 *     seeds of 150 cases each (default 2).
 *  2. smart_resize by hand (round half to even), LLaMA-Factory's pre-resize arithmetic by hand.
 *  3. Bad input: truncated JPEG, PNG with a bad CRC, zero-size and huge PNG/JPEG/WebP headers (refused before
 *     any pixel memory), other formats, empty files: one line naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/image.h"
#include "data/vl_processor.h"
#include "testlib.h"

static uint8_t *read_all(const char *dir, const char *name, const char *ext, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    char *b = tn_read_file(path, n, (size_t)1 << 30);
    if (!b) fprintf(stderr, "%s\n", tn_errmsg());
    return (uint8_t *)b;
}

/* Bytes equal; on a difference, where and by how much. */
static int same_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what, const char *name) {
    size_t bad = 0, first = n;
    int worst = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (first == n) first = i;
            bad++;
            int d = abs((int)got[i] - (int)want[i]);
            worst = d > worst ? d : worst;
        }
    return CHECKF(bad == 0, "%s %s: %zu of %zu bytes differ from PIL (max %d, first at byte %zu: %d vs %d)", name, what, bad, n,
                  worst, first, bad ? got[first] : 0, bad ? want[first] : 0);
}

static tn_img_mode mode_of(const char *s) {
    static const char *const names[] = {"1", "L", "P", "LA", "RGB", "RGBA", "CMYK", "I"};
    for (int m = 0; m < 8; m++)
        if (strcmp(s, names[m]) == 0) return (tn_img_mode)m;
    return TN_IMG_RGB;
}

static void check_decode(const char *dir, const char *file, const char *mode, int w, int h, int *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tn_image im;
    if (!CHECKF(tn_image_load(path, &im) == 0, "%s: %s", file, tn_errmsg())) return;
    CHECKF(strcmp(tn_image_mode_name(im.mode), mode) == 0 && im.w == w && im.h == h, "%s: decoded as %s %dx%d, PIL: %s %dx%d",
           file, tn_image_mode_name(im.mode), im.w, im.h, mode, w, h);
    size_t len;
    uint8_t *want = read_all(dir, file, ".rgb", &len);
    tn_image_to_rgb(&im);
    if (want && CHECKF(len == (size_t)im.w * im.h * 3, "%s: size", file)) same_bytes(im.px, want, len, "decoded RGB", file);
    free(want);
    tn_image_free(&im);
    (*n)++;
}

static void check_prep(const char *dir, const char *file, const int64_t v[6], int ph, int pw, int *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tn_vl_proc p = {.patch_size = (int)v[2], .temporal_patch_size = 2, .merge_size = (int)v[3], .min_pixels = v[4],
                    .max_pixels = v[5], .do_rescale = 1, .do_normalize = 1, .rescale_factor = 1.0 / 255};
    CHECK(tn_vl_proc_set_lf_limits(&p, v[0], v[1]) == 0);
    tn_image im, out;
    if (!CHECKF(tn_image_load(path, &im) == 0, "%s: %s", file, tn_errmsg())) return;
    int rc = tn_vl_prepare(&p, &im, file, &out);
    if (ph == 0) { /* PIL / transformers raise */
        CHECKF(rc != 0 && strstr(tn_errmsg(), file), "%s: pre-processing should fail as in transformers (got %s)", file,
               rc ? tn_errmsg() : "success");
        return;
    }
    if (!CHECKF(rc == 0, "%s: %s", file, tn_errmsg())) return;
    CHECKF(out.h == ph && out.w == pw && out.mode == TN_IMG_RGB, "%s: prepared %dx%d, PIL %dx%d", file, out.h, out.w, ph, pw);
    size_t len;
    uint8_t *want = read_all(dir, file, ".prep", &len);
    if (want && out.h == ph && out.w == pw) same_bytes(out.px, want, len, "prepared (LF pre-resize, smart_resize, BICUBIC)", file);
    free(want);
    tn_image_free(&out);
    (*n)++;
}

static void check_resize(const char *dir, const char *raw, const char *mode, int w, int h, int ow, int oh, int *n) {
    size_t len, olen, rlen;
    uint8_t *in = read_all(dir, raw, "", &len), *want = read_all(dir, raw, ".out", &olen), *want_rgb = read_all(dir, raw, ".rgb", &rlen);
    tn_image im = {.w = w, .h = h, .mode = mode_of(mode)};
    static const int nch[] = {1, 1, 1, 2, 3, 4, 4, 0};
    im.nch = nch[im.mode];
    if (im.mode == TN_IMG_I) im.ipx = (int32_t *)in;  /* little-endian int32, as written */
    else im.px = in;
    if (im.mode == TN_IMG_P) {
        size_t pl;
        uint8_t *pal = read_all(dir, raw, ".pal", &pl);
        if (pal && pl == 768) memcpy(im.pal, pal, 768);
        free(pal);
    }
    tn_image out;
    char what[128];
    snprintf(what, sizeof what, "mode %s %dx%d -> %dx%d", mode, w, h, ow, oh);
    if (in && want && want_rgb && CHECKF(tn_image_resize(&im, ow, oh, &out) == 0, "%s: %s", raw, tn_errmsg())) {
        size_t got_len = im.mode == TN_IMG_I ? (size_t)ow * oh * 4 : (size_t)ow * oh * im.nch;
        if (CHECKF(got_len == olen, "%s %s: %zu bytes, PIL %zu", raw, what, got_len, olen))
            same_bytes(im.mode == TN_IMG_I ? (const uint8_t *)out.ipx : out.px, want, olen, what, raw);
        tn_image_to_rgb(&out);
        snprintf(what + strlen(what), sizeof what - strlen(what), " then RGB");
        if (CHECKF(rlen == (size_t)ow * oh * 3, "%s rgb size", raw)) same_bytes(out.px, want_rgb, rlen, what, raw);
        tn_image_free(&out);
        (*n)++;
    }
    free(in), free(want), free(want_rgb);
}

static int have_pil(void) {
    return system("/usr/bin/python3 -c 'import PIL, numpy' >/dev/null 2>&1") == 0;
}

static void pil_property_test(int seed, int n_cases) {
    char dir[512], cmd[2048];
    snprintf(dir, sizeof dir, "%s/pil%d", tl_tmpdir(), seed);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/pil_image_cases.py %s %d %d", tl_tests_dir(), dir, seed, n_cases);
    if (!CHECKF(system(cmd) == 0, "%s failed", cmd)) return;
    char mpath[600];
    snprintf(mpath, sizeof mpath, "%s/manifest.txt", dir);
    FILE *f = fopen(mpath, "r");
    if (!CHECKF(f != NULL, "no %s", mpath)) return;
    char line[512];
    int n_dec = 0, n_prep = 0, n_res = 0, fails0 = tl_failures;
    while (fgets(line, sizeof line, f)) {
        char file[128], mode[8];
        int64_t v[6];
        int a, b, c, d;
        if (sscanf(line, "decode %127s %7s %d %d", file, mode, &a, &b) == 4) check_decode(dir, file, mode, a, b, &n_dec);
        else if (sscanf(line, "prep %127s %ld %ld %ld %ld %ld %ld %d %d", file, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &a, &b) == 9)
            check_prep(dir, file, v, a, b, &n_prep);
        else if (sscanf(line, "resize %127s %7s %d %d %d %d", file, mode, &a, &b, &c, &d) == 6)
            check_resize(dir, file, mode, a, b, c, d, &n_res);
        else CHECKF(0, "bad manifest line: %s", line);
    }
    fclose(f);
    printf("PIL property test (seed %d): %d files decoded, %d pre-processed, %d resizes; %s\n", seed, n_dec, n_prep, n_res,
           tl_failures == fails0 ? "all bytes equal to PIL's" : "DIFFERENCES");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- hand-derived cases ---- */
static void smart_resize_cases(void) {
    struct { int64_t h, w, f, minp, maxp; int oh, ow; } c[] = {
        {70, 70, 28, 3136, 12845056, 56, 56},      /* 2.5 -> 2: half to even (half up would give 84) */
        {42, 42, 28, 3136, 12845056, 56, 56},      /* 1.5 -> 2 */
        {98, 98, 28, 3136, 12845056, 112, 112},    /* 3.5 -> 4 */
        {126, 182, 28, 3136, 12845056, 112, 168},  /* 4.5 -> 4, 6.5 -> 6 */
        {80, 48, 32, 3136, 12845056, 64, 64},      /* 2.5 -> 2, 1.5 -> 2 */
        {28, 28, 28, 3136, 12845056, 56, 56},      /* 784 < 3136: ceil(28 * 2 / 28) * 28 */
        {168, 300, 28, 3136, 12845056, 168, 308},  /* mllm_demo 1.jpg, Qwen2-VL */
        {168, 300, 32, 3136, 16777216, 160, 288},  /* the same, Qwen3-VL */
        /* 1008^2 > 802816: beta = sqrt(1e6 / 802816) = 1.1160714..., 1000 / beta / 28 = 32.0 exactly: 896 */
        {1000, 1000, 28, 3136, 802816, 896, 896},
        {10, 2000, 28, 3136, 12845056, 28, 812},   /* round(10 / 28) = 0: area 0 < min_pixels: ceil path */
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        int oh = -1, ow = -1, rc = tn_smart_resize(c[i].h, c[i].w, c[i].f, c[i].minp, c[i].maxp, &oh, &ow);
        CHECKF(rc == 0 && oh == c[i].oh && ow == c[i].ow,
               "smart_resize(%ld, %ld, %ld) = %d x %d, expected %d x %d", (long)c[i].h, (long)c[i].w, (long)c[i].f, oh, ow, c[i].oh,
               c[i].ow);
    }
    int oh, ow;
    CHECK(tn_smart_resize(10, 2011, 28, 3136, 12845056, &oh, &ow) != 0 && strstr(tn_errmsg(), "over 200"));
    CHECK(tn_smart_resize(10, 2000, 28, 3136, 12845056, &oh, &ow) == 0);  /* exactly 200 is allowed */
}

/* LF's pre-resize by hand: 1000 x 700 over 768*768? no; 1200 x 700 = 840000 > 589824: f = sqrt(589824 / 840000)
 * = 0.83796..., int(1200 f) = 1005, int(700 f) = 586. Then a 10 x 10 grey image: 100 < 1024: f = sqrt(10.24) = 3.2,
 * 32 x 32, then >= 28 so no stretch; smart_resize(32, 32, 28): round(1.14) = 1 -> 28 x 28 = 784 < 3136 ->
 * ceil(32 * sqrt(3136 / 1024) / 28) = ceil(32 * 1.75 / 28) = 2 -> 56. */
static void lf_preresize_cases(void) {
    tn_vl_proc p = {.patch_size = 14, .temporal_patch_size = 2, .merge_size = 2, .min_pixels = 3136, .max_pixels = 12845056,
                    .do_rescale = 1, .do_normalize = 1, .rescale_factor = 1.0 / 255};
    CHECK(tn_vl_proc_set_lf_limits(&p, 0, 0) == 0 && p.lf_max_pixels == 589824 && p.lf_min_pixels == 1024);
    tn_image im = {.w = 1200, .h = 700, .mode = TN_IMG_RGB, .nch = 3}, out;
    im.px = tn_xcalloc((size_t)1200 * 700 * 3, 1);
    CHECK(tn_vl_prepare(&p, &im, "big", &out) == 0);
    /* 1005 x 586 -> smart_resize: round(586/28 = 20.93) = 21 -> 588, round(1005/28 = 35.89) = 36 -> 1008 */
    CHECKF(out.w == 1008 && out.h == 588, "1200x700 prepared to %dx%d, expected 1008x588", out.w, out.h);
    tn_image_free(&out);
    tn_image g = {.w = 10, .h = 10, .mode = TN_IMG_L, .nch = 1};
    g.px = tn_xcalloc(100, 1);
    CHECK(tn_vl_prepare(&p, &g, "small", &out) == 0);
    CHECKF(out.w == 56 && out.h == 56 && out.mode == TN_IMG_RGB, "10x10 grey prepared to %dx%d", out.w, out.h);
    CHECK(tn_vl_image_tokens(&p, out.h, out.w) == 4);
    tn_image_free(&out);
    CHECK(tn_vl_proc_set_lf_limits(&p, 1000, 2000) != 0 && strstr(tn_errmsg(), "image_min_pixels"));
}

/* ---- bad input ---- */
static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG signature + IHDR chunk (valid CRC) for w x h 8-bit RGB, an IDAT of 2 junk bytes (valid CRC: the
 * header is read up to it), then IEND: 59 bytes. */
static size_t png_header(uint8_t *b, uint32_t w, uint32_t h) {
    memcpy(b, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    put32(b + 16, w), put32(b + 20, h);
    memcpy(b + 24, "\x08\x02\0\0\0", 5);
    put32(b + 29, crc32_of(b + 12, 17));
    memcpy(b + 33, "\0\0\0\x02IDAT\x78\x9c", 10);
    put32(b + 43, crc32_of(b + 37, 6));
    memcpy(b + 47, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
    return 59;
}

static void expect_refusal(const uint8_t *b, size_t n, const char *name, const char *what) {
    tn_image im;
    int rc = tn_image_decode(b, n, name, &im);
    CHECKF(rc != 0 && strstr(tn_errmsg(), name) && strstr(tn_errmsg(), what) && !strchr(tn_errmsg(), '\n'),
           "%s: expected a one-line refusal mentioning '%s', got %s", name, what, rc ? tn_errmsg() : "success");
    if (rc == 0) tn_image_free(&im);
}

static void bad_inputs(void) {
    uint8_t b[256];
    size_t n = png_header(b, 100000, 100000);
    expect_refusal(b, n, "huge.png", "over PIL's limit");
    n = png_header(b, 0, 10);
    expect_refusal(b, n, "zero.png", "cannot decode PNG");
    n = png_header(b, 4, 4);
    expect_refusal(b, n, "noidat.png", "cannot decode PNG");
    n = png_header(b, 4, 4);
    b[20] ^= 1;  /* height changed, CRC not: bad CRC in IHDR */
    expect_refusal(b, n, "badcrc.png", "CRC");
    /* JPEG: SOI, SOF0 of 60000 x 60000 x 3 (216 x 10^7 pixels), then nothing */
    static const uint8_t sof[] = {0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0xEA, 0x60, 0xEA, 0x60, 0x03, 0x01, 0x22, 0x00,
                                  0x02, 0x11, 0x00, 0x03, 0x11, 0x00, 0xFF, 0xDA};
    expect_refusal(sof, sizeof sof, "huge.jpg", "cannot decode JPEG");
    /* WebP: VP8X canvas of 16384 x 16384 (over the pixel limit) */
    uint8_t wp[30] = "RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0";
    wp[24] = 0xFF, wp[25] = 0x3F, wp[26] = 0, wp[27] = 0xFF, wp[28] = 0x3F, wp[29] = 0;
    expect_refusal(wp, sizeof wp, "huge.webp", "WebP");
    expect_refusal((const uint8_t *)"GIF89a\x01\0\x01\0", 10, "anim.gif", "GIF images are not supported");
    expect_refusal((const uint8_t *)"", 0, "empty.png", "empty file");
    expect_refusal((const uint8_t *)"hello world", 11, "notes.txt", "not an image");
}

/* Truncated and corrupted real files written by PIL (from the property test's generator). */
static void truncated_files(void) {
    char dir[300], cmd[2048];
    snprintf(dir, sizeof dir, "%s/trunc", tl_tmpdir());
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && /usr/bin/python3 -c \"import numpy as np; from PIL import Image; "
             "a = np.random.default_rng(3).integers(0, 256, (40, 50, 3), dtype=np.uint8); im = Image.fromarray(a); "
             "im.save('%s/a.jpg', quality=90); im.save('%s/a.png'); im.save('%s/a.webp')\"",
             dir, dir, dir, dir);
    if (!CHECKF(system(cmd) == 0, "%s", cmd)) return;
    const char *files[] = {"a.jpg", "a.png", "a.webp"};
    for (int k = 0; k < 3; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        size_t n;
        uint8_t *b = (uint8_t *)tn_read_file(path, &n, 1 << 24);
        if (!CHECK(b != NULL)) continue;
        tn_image im;
        CHECKF(tn_image_decode(b, n, files[k], &im) == 0, "%s: %s", files[k], tn_errmsg());
        tn_image_free(&im);
        /* 50 x 40 = 2000 pixels over a limit of 1999: refused from the header */
        CHECKF(tn_image_decode_max(b, n, files[k], 1999, &im) != 0 && strstr(tn_errmsg(), "50 x 40 pixels is over the limit"),
               "%s with a 1999-pixel limit: %s", files[k], tn_errmsg());
        CHECKF(tn_image_decode_max(b, n, files[k], 2000, &im) == 0, "%s with a 2000-pixel limit: %s", files[k], tn_errmsg());
        tn_image_free(&im);
        /* PIL reads a PNG whose IEND is cut (2 bytes) and stops with "truncated" on the others; tandem too */
        size_t cuts[] = {2, n / 3, n - 20};
        for (int c = 0; c < 3; c++) {
            if (k == 1 && c == 0) {
                CHECKF(tn_image_decode(b, n - 2, files[k], &im) == 0, "a PNG without its last 2 bytes: %s", tn_errmsg());
                tn_image_free(&im);
                continue;
            }
            char name[64];
            snprintf(name, sizeof name, "%s cut by %zu bytes", files[k], cuts[c]);
            expect_refusal(b, n - cuts[c], name, files[k]);
        }
        uint8_t *idat = k == 1 ? memmem(b, n, "IDAT", 4) : NULL;
        if (k == 1 && CHECK(idat != NULL)) {
            /* an IDAT CRC byte flipped: refused (stricter than PIL, which does not check IDAT's CRC) */
            uint32_t len = (uint32_t)idat[-4] << 24 | (uint32_t)idat[-3] << 16 | (uint32_t)idat[-2] << 8 | idat[-1];
            idat[4 + len] ^= 1;
            expect_refusal(b, n, "a.png with a bad IDAT CRC", "CRC");
            idat[4 + len] ^= 1;
            idat[10] ^= 0x55;  /* a data byte flipped: the zlib stream breaks (PIL: "broken data stream") */
            expect_refusal(b, n, "a.png with a flipped IDAT byte", "cannot decode PNG");
        }
        free(b);
    }
}

int main(void) {
    smart_resize_cases();
    lf_preresize_cases();
    bad_inputs();
    if (!have_pil()) {
        const char *ci = getenv("CI");
        printf("test_unit_data_image: python3-pil is missing (scripts/install-deps.sh installs it): PIL checks %s\n",
               ci && strcmp(ci, "true") == 0 ? "FAILED" : "skipped");
        if (ci && strcmp(ci, "true") == 0) return 1;
        return tl_failures ? tl_done("test_unit_data_image") : 77;
    }
    truncated_files();
    /* TANDEM_TEST_PIL_RUNS=N: N seeds of 150 cases (default 2) for longer runs */
    const char *runs = getenv("TANDEM_TEST_PIL_RUNS");
    int n_runs = runs && atoi(runs) > 0 ? atoi(runs) : 2;
    for (int seed = 1; seed <= n_runs; seed++) pil_property_test(seed, 150);
    return tl_done("test_unit_data_image");
}
