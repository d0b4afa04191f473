/* image_augment -- torchvision's CIFAR training transform on uint8 images (contract: data/image_set.h):
 * RandomCrop(H, padding=p) (zero fill: a padded pixel is 0 before ToTensor), RandomHorizontalFlip(0.5), ToTensor
 * (x / 255), Normalize((x - mean) / std). Random draws come from (seed, epoch, sample index) alone. */
#include "data/image_set.h"

#include <string.h>

#include "core/core.h"

tn_image_aug tn_image_aug_cifar(int train) {
    tn_image_aug a = {.crop_pad = train ? 4 : 0, .flip = train,
                      .mean = {0.4914f, 0.4822f, 0.4465f}, .std = {0.2470f, 0.2435f, 0.2616f}};
    return a;
}

/* crop offsets (dy, dx) in [0, 2 pad] and the flip of one sample */
static void draw(uint64_t seed, int64_t epoch, int64_t index, int pad, int *dy, int *dx, int *flip) {
    uint64_t key[3] = {seed, (uint64_t)epoch, (uint64_t)index};
    uint64_t h = tn_hash64(key, sizeof key, 0x43494641523130ULL); /* "CIFAR10" */
    tn_rng r;
    tn_rng_seed(&r, h);
    *dy = pad ? (int)(tn_rng_next(&r) % (uint64_t)(2 * pad + 1)) : 0;
    *dx = pad ? (int)(tn_rng_next(&r) % (uint64_t)(2 * pad + 1)) : 0;
    *flip = (int)(tn_rng_next(&r) >> 63);
}

void tn_image_batch(const tn_image_set *s, const int64_t *idx, int n, const tn_image_aug *aug, uint64_t seed,
                    int64_t epoch, float *out, int32_t *labels) {
    const int C = s->C, H = s->H, W = s->W, pad = aug->crop_pad;
    for (int i = 0; i < n; i++) {
        int dy, dx, flip;
        draw(seed, epoch, idx[i], pad, &dy, &dx, &flip);
        if (!aug->flip) flip = 0;
        const uint8_t *src = s->px + (size_t)idx[i] * C * H * W;
        float *dst = out + (size_t)i * C * H * W;
        for (int c = 0; c < C; c++) {
            float m = aug->mean[c < 3 ? c : 2], sd = aug->std[c < 3 ? c : 2];
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    /* output (y, x) reads padded (y + dy, x' + dx), x' = flipped x: source row y + dy - pad */
                    int sy = y + dy - pad, sx = (flip ? W - 1 - x : x) + dx - pad;
                    float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? src[((size_t)c * H + sy) * W + sx] / 255.0f : 0.0f;
                    dst[((size_t)c * H + y) * W + x] = (v - m) / sd;
                }
        }
        if (labels) labels[i] = s->labels[idx[i]];
    }
}
