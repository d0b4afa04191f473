/* demo_shapes -- the image-classification demo's data, generated on the fly (nothing downloaded): 32x32 RGB images
 * of 4 classes, each drawn with a random colour on a random dark background with pixel noise:
 *   0 horizontal stripes, 1 vertical stripes, 2 a filled square, 3 a diagonal band
 * with random period, phase, size and position, so a classifier must learn the shape, not a colour or a place.
 * Deterministic in (seed, split): split 0 trains, split 1 is held out (different draws). */
#include "data/image_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static const char *const NAMES[4] = {"horizontal", "vertical", "square", "diagonal"};

static int on_shape(int cls, int y, int x, int period, int phase, int y0, int x0, int side) {
    switch (cls) {
    case 0: return (y + phase) % period < period / 2;
    case 1: return (x + phase) % period < period / 2;
    case 2: return y >= y0 && y < y0 + side && x >= x0 && x < x0 + side;
    default: return abs(x - y - (phase - period)) < 3;
    }
}

static void draw(uint8_t *px, int cls, tn_rng *r) {
    int period = 4 + (int)(tn_rng_next(r) % 6), phase = (int)(tn_rng_next(r) % 12);
    int side = 8 + (int)(tn_rng_next(r) % 12), y0 = (int)(tn_rng_next(r) % (uint64_t)(33 - side)),
        x0 = (int)(tn_rng_next(r) % (uint64_t)(33 - side));
    uint8_t fg[3], bg[3];
    for (int c = 0; c < 3; c++) fg[c] = (uint8_t)(120 + tn_rng_next(r) % 136), bg[c] = (uint8_t)(tn_rng_next(r) % 90);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            int on = on_shape(cls, y, x, period, phase, y0, x0, side);
            for (int c = 0; c < 3; c++) {
                int v = (on ? fg[c] : bg[c]) + (int)(tn_rng_next(r) % 41) - 20;
                px[(c * 32 + y) * 32 + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
}

int tn_demo_shapes(int n, int split, uint64_t seed, tn_image_set *s) {
    memset(s, 0, sizeof *s);
    if (n < 1) return tn_err("demo_shapes: %d images asked for", n);
    s->n = n, s->C = 3, s->H = s->W = 32, s->num_classes = 4;
    s->px = tn_xmalloc((size_t)n * 3 * 1024);
    s->labels = tn_xmalloc((size_t)n * sizeof *s->labels);
    s->class_names = tn_xcalloc(4, sizeof *s->class_names);
    for (int k = 0; k < 4; k++) s->class_names[k] = tn_xstrdup(NAMES[k]);
    tn_rng r;
    tn_rng_seed(&r, seed * 2 + (uint64_t)split + 0x5a4e5);
    for (int i = 0; i < n; i++) {
        s->labels[i] = (int32_t)(tn_rng_next(&r) % 4);
        draw(s->px + (size_t)i * 3 * 1024, s->labels[i], &r);
    }
    return 0;
}
