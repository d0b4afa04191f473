/* test_unit_image_set -- data/image_set.h on files generated here in the real formats:
 *  1. CIFAR-10 binary: data_batch_1..5.bin + test_batch.bin of a few records each (1 label byte + R, G, B planes of
 *     32x32) and batches.meta.txt: counts, labels, plane order, class names; a truncated file, a label of 10, a
 *     missing batch file and a meta file with 9 names are each one line naming the file (and record).
 *  2. ImageFolder (PNG and JPEG written by Debian's PIL when present): classes sorted, files sorted, non-images
 *     skipped, pixels of an exact-size PNG byte for byte, a file that does not decode named.
 *  3. torchvision's CIFAR transform: without augmentation exactly (x / 255 - mean) / std; with it, every output is
 *     one of the 9 x 9 x 2 crops of the zero-padded image (flipped or not) computed here from the definition, all 9
 *     offsets and both flips occur, draws depend on (seed, epoch, index) alone (a batch split differently gives
 *     the same images), another epoch draws again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/image_set.h"
#include "testlib.h"

#define REC 3073

static void write_batch(const char *dir, const char *name, int n, int first, int bad_label_at) {
    uint8_t *b = tn_xmalloc((size_t)n * REC);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = b + (size_t)r * REC;
        int id = first + r;
        rec[0] = (uint8_t)(r == bad_label_at ? 10 : id % 10);
        for (int i = 0; i < 3072; i++) rec[1 + i] = (uint8_t)((i / 1024) * 80 + id * 3 + i % 7); /* plane c: 80 c + ... */
    }
    char *p = tn_path_join(dir, name);
    if (tn_write_file_atomic(p, b, (size_t)n * REC)) tn_die("%s", tn_errmsg());
    free(p), free(b);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char *p = tn_path_join(dir, name);
    if (tn_write_file_atomic(p, text, strlen(text))) tn_die("%s", tn_errmsg());
    free(p);
}

static const char *META = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";

static char *make_cifar(const char *name) {
    char *dir = tn_path_join(tl_tmpdir(), name);
    tn_mkdirs(dir);
    for (int b = 1; b <= 5; b++) {
        char f[32];
        snprintf(f, sizeof f, "data_batch_%d.bin", b);
        write_batch(dir, f, 3, (b - 1) * 3, -1);
    }
    write_batch(dir, "test_batch.bin", 2, 100, -1);
    write_text(dir, "batches.meta.txt", META);
    return dir;
}

static void expect_error(int rc, const char *a, const char *b) {
    const char *e = tn_errmsg();
    CHECKF(rc == -1 && strstr(e, a) && (!b || strstr(e, b)) && !strchr(e, '\n'), "expected one line naming '%s' %s, got '%s'",
           a, b ? b : "", e);
}

static void check_cifar(void) {
    char *dir = make_cifar("cifar");
    tn_image_set s;
    if (!CHECKF(tn_cifar10_load(dir, 1, &s) == 0, "%s", tn_errmsg())) return;
    CHECK(s.n == 15 && s.C == 3 && s.H == 32 && s.W == 32 && s.num_classes == 10);
    int bad = 0;
    for (int i = 0; i < s.n; i++) {
        bad += s.labels[i] != i % 10;
        for (int c = 0; c < 3; c++) bad += s.px[((size_t)i * 3 + c) * 1024 + 5] != (uint8_t)(c * 80 + i * 3 + (c * 1024 + 5) % 7);
    }
    CHECKF(bad == 0, "CIFAR records: %d labels or pixels differ from what was written", bad);
    CHECK(strcmp(s.class_names[0], "airplane") == 0 && strcmp(s.class_names[9], "truck") == 0);
    tn_image_set_free(&s);
    CHECK(tn_cifar10_load(dir, 0, &s) == 0 && s.n == 2 && s.labels[1] == 101 % 10);
    tn_image_set_free(&s);
    /* bad files: each one line naming it */
    write_batch(dir, "data_batch_4.bin", 3, 0, 2);
    expect_error(tn_cifar10_load(dir, 1, &s), "data_batch_4.bin", "record 2");
    write_batch(dir, "data_batch_4.bin", 3, 0, -1);
    char *p = tn_path_join(dir, "data_batch_2.bin");
    size_t n;
    char *b = tn_read_file(p, &n, 0);
    tn_write_file_atomic(p, b, n - 100);
    expect_error(tn_cifar10_load(dir, 1, &s), "data_batch_2.bin", "whole number");
    remove(p);
    expect_error(tn_cifar10_load(dir, 1, &s), "data_batch_2.bin", "not found");
    tn_write_file_atomic(p, b, n);
    write_text(dir, "batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\n");
    expect_error(tn_cifar10_load(dir, 1, &s), "batches.meta.txt", "9 class names");
    free(b), free(p), free(dir);
}

static int have_pil(void) { return system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") == 0; }

static void check_image_folder(void) {
    if (!have_pil()) {
        printf("  ImageFolder part skipped: /usr/bin/python3 with PIL (python3-pil) is absent\n");
        return;
    }
    char *dir = tn_path_join(tl_tmpdir(), "folder"), cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"\nfrom PIL import Image\nimport os\nd='%s'\n"
             "for c in ('zebra', 'ant'): os.makedirs(d + '/' + c, exist_ok=True)\n"
             "im = Image.new('RGB', (32, 32))\nim.putdata([(x, y, (x * y) %% 256) for y in range(32) for x in range(32)])\n"
             "im.save(d + '/ant/b.png')\nImage.new('RGB', (40, 30), (200, 10, 50)).save(d + '/ant/a.JPG')\n"
             "Image.new('L', (32, 32), 77).save(d + '/zebra/z.png')\nopen(d + '/zebra/notes.txt', 'w').write('x')\n\"",
             dir);
    if (!CHECK(system(cmd) == 0)) return;
    tn_image_set s;
    if (!CHECKF(tn_image_folder_load(dir, 32, &s) == 0, "%s", tn_errmsg())) return;
    CHECK(s.num_classes == 2 && strcmp(s.class_names[0], "ant") == 0 && strcmp(s.class_names[1], "zebra") == 0);
    CHECK(s.n == 3 && s.labels[0] == 0 && s.labels[1] == 0 && s.labels[2] == 1);
    /* sample 1 is ant/b.png (a.JPG sorts first): R = x, G = y, B = x y mod 256 */
    int bad = 0;
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            const uint8_t *px = s.px + (size_t)1 * 3 * 1024;
            bad += px[y * 32 + x] != x || px[1024 + y * 32 + x] != y || px[2048 + y * 32 + x] != (x * y) % 256;
        }
    CHECKF(bad == 0, "ImageFolder PNG: %d pixels differ", bad);
    CHECK(abs(s.px[0] - 200) <= 3 && s.px[2 * 3 * 1024] == 77 && s.px[2 * 3 * 1024 + 2048] == 77); /* JPEG, L -> RGB */
    tn_image_set_free(&s);
    char *bad_png = tn_path_join(dir, "zebra/broken.png");
    tn_write_file_atomic(bad_png, "\x89PNG\r\n\x1a\nxx", 10);
    expect_error(tn_image_folder_load(dir, 32, &s), "broken.png", NULL);
    free(bad_png), free(dir);
}

static void check_augment(void) {
    char *dir = make_cifar("cifar_aug");
    tn_image_set s;
    if (!CHECKF(tn_cifar10_load(dir, 1, &s) == 0, "%s", tn_errmsg())) return;
    free(dir);
    const int n = s.n, D = 3 * 1024;
    int64_t idx[15];
    for (int i = 0; i < n; i++) idx[i] = i;
    float *out = tn_xmalloc((size_t)n * D * sizeof *out), *out2 = tn_xmalloc((size_t)n * D * sizeof *out2);
    int32_t lab[15];
    tn_image_aug plain = tn_image_aug_cifar(0), aug = tn_image_aug_cifar(1);
    tn_image_batch(&s, idx, n, &plain, 1, 0, out, lab);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < D; k++) bad += out[(size_t)i * D + k] != (s.px[(size_t)i * D + k] / 255.0f - plain.mean[k / 1024]) /
                                                                      plain.std[k / 1024];
    CHECKF(bad == 0 && lab[3] == s.labels[3], "no augmentation: %d values differ from (x/255 - mean)/std", bad);
    int seen_dy[9] = {0}, flips = 0, draws = 0;
    for (int64_t epoch = 0; epoch < 14; epoch++) {
        tn_image_batch(&s, idx, n, &aug, 5, epoch, out, NULL);
        for (int i = 0; i < n; i++) {
            int found = 0;
            for (int dy = 0; dy <= 8 && !found; dy++)
                for (int dx = 0; dx <= 8 && !found; dx++)
                    for (int f = 0; f <= 1 && !found; f++) {
                        int ok = 1;
                        for (int c = 0; c < 3 && ok; c++)
                            for (int y = 0; y < 32 && ok; y++)
                                for (int x = 0; x < 32 && ok; x++) { /* pad 4 with zeros, crop at (dy, dx), flip */
                                    int sy = y + dy - 4, sx = (f ? 31 - x : x) + dx - 4;
                                    float v = sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? s.px[(size_t)i * D + c * 1024 + sy * 32 + sx] / 255.0f : 0.0f;
                                    ok = out[(size_t)i * D + c * 1024 + y * 32 + x] == (v - aug.mean[c]) / aug.std[c];
                                }
                        if (ok) found = 1, seen_dy[dy]++, flips += f, draws++;
                    }
            bad += !found;
        }
    }
    CHECKF(bad == 0, "%d augmented images are no padded crop / flip of their source", bad);
    int all = 1;
    for (int k = 0; k < 9; k++) all &= seen_dy[k] > 0;
    CHECKF(all, "not every crop offset 0..8 occurred in %d draws", draws);
    CHECKF(abs(2 * flips - draws) < 5 * (int)sqrt((double)draws), "%d flips in %d draws", flips, draws); /* 5 sigma */
    /* draws depend on (seed, epoch, index): images 7..9 alone equal them inside the full batch */
    tn_image_batch(&s, idx, n, &aug, 5, 3, out, NULL);
    tn_image_batch(&s, idx + 7, 3, &aug, 5, 3, out2, NULL);
    CHECK(memcmp(out + (size_t)7 * D, out2, (size_t)3 * D * sizeof *out) == 0);
    tn_image_batch(&s, idx, n, &aug, 5, 4, out2, NULL);
    CHECK(memcmp(out, out2, (size_t)n * D * sizeof *out) != 0);
    free(out), free(out2);
    tn_image_set_free(&s);
}

int main(void) {
    check_cifar();
    check_image_folder();
    check_augment();
    return tl_done("test_unit_image_set");
}
