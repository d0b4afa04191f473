/* bench_resnet_step -- tandem's ResNet-18 training step on the CPU backend (forward, cross-entropy, backward, AdamW) on
 * a random CIFAR-sized batch (64 x 3 x 32 x 32, 10 classes), as bench/bench_resnet.py times torchvision's. Prints the
 * median step time and images/s over STEPS steps after 2 warm-up steps. Built and run by bench/bench_resnet.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/core.h"
#include "model/resnet.h"

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 64, steps = argc > 2 ? atoi(argv[2]) : 10;
    tn_resnet_config c;
    if (tn_resnet_config_parse("{\"model_type\": \"resnet\", \"layers\": [2,2,2,2], \"base_width\": 64, \"num_classes\": 10}",
                               "resnet18", &c)) tn_die("%s", tn_errmsg());
    const tn_backend *be = tn_backend_cpu();
    tn_resnet *m = tn_resnet_create(&c, be);
    tn_resnet_init_random(m, 1);
    if (tn_resnet_reserve(m, B, 32, 32)) tn_die("%s", tn_errmsg());
    size_t n = tn_resnet_n_params(m), ni = (size_t)B * 3 * 32 * 32;
    float *img = tn_xmalloc(ni * sizeof *img), *mo = be->alloc(n), *v = be->alloc(n);
    int32_t *lab = tn_xmalloc((size_t)B * sizeof *lab);
    tn_rng r;
    tn_rng_seed(&r, 2);
    for (size_t i = 0; i < ni; i++) img[i] = (float)tn_rng_normal(&r);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)(tn_rng_next(&r) % 10);
    double *t = tn_xmalloc((size_t)(steps + 2) * sizeof *t);
    for (int s = 0; s < steps + 2; s++) {
        double t0 = tn_now();
        be->zero(tn_resnet_grad(m), n);
        tn_resnet_forward_backward(m, img, lab, B, 1.0f / B, 0.0f, NULL);
        be->adamw(tn_resnet_params(m), tn_resnet_grad(m), mo, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0 - 0.9, 1.0 - 0.999);
        t[s] = tn_now() - t0;
    }
    qsort(t + 2, (size_t)steps, sizeof *t, cmp);
    double med = t[2 + steps / 2];
    printf("tandem   resnet18 batch %d: median step %.1f ms, %.1f images/s (%d steps)\n", B, med * 1e3, B / med, steps);
    free(t), free(img), free(lab), be->free(mo), be->free(v);
    tn_resnet_free(m);
    return 0;
}
