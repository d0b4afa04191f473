/* test_unit_resnet -- the ResNet's layout, config and files (model/resnet.h) without ../shared:
 *  - ResNet-18 and -34 at base width 64 have torchvision's parameter counts (resnet18: 11,689,512 with 1000
 *    classes, 11,181,642 with 10; resnet34: 21,797,672 / 21,289,802), its state_dict entries (102 / 182 without
 *    num_batches_tracked) and running-statistic floats (9,600 / 17,024) -- figures of torchvision 0.14's models;
 *  - torchvision's names in its order (first, a downsample, last);
 *  - a config error is one line naming the file and the key; bottleneck blocks are refused;
 *  - save then load gives back every tensor bit for bit, num_batches_tracked included, and a missing tensor or a
 *    wrong shape is one line naming the file and tensor;
 *  - torchvision's init: conv std sqrt(2 / fan_out), BN 1/0, fc within 1/sqrt(in);
 *  - a backend without image kernels (the CUDA one, for now) is refused in one line naming it;
 *  - backward's grad-ready hook (what data parallelism starts exchanging while backward runs): the offsets come in
 *    decreasing order and end at 0, and at each call the gradients [from, n) are already their final values, bit for
 *    bit (a bucket sent early would carry a partial gradient). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/resnet.h"
#include "model/safetensors.h"
#include "testlib.h"

static tn_resnet_config cfg_of(const char *layers, int width, int classes) {
    char json[256];
    snprintf(json, sizeof json, "{\"model_type\": \"resnet\", \"block\": \"basic\", \"layers\": %s, \"base_width\": %d, "
             "\"num_classes\": %d}", layers, width, classes);
    tn_resnet_config c;
    if (tn_resnet_config_parse(json, "cfg.json", &c)) tn_die("%s", tn_errmsg());
    return c;
}

static void check_counts(const char *layers, int classes, size_t params, int entries, size_t stats) {
    tn_resnet_config c = cfg_of(layers, 64, classes);
    tn_resnet *m = tn_resnet_create(&c, tn_backend_cpu());
    size_t nb = 0;
    for (int i = 0; i < tn_resnet_n_tensors(m); i++)
        if (tn_resnet_tensor_at(m, i)->buffer) nb += tn_resnet_tensor_at(m, i)->numel;
    CHECKF(tn_resnet_n_params(m) == params, "layers %s, %d classes: %zu parameters, torchvision has %zu", layers,
           classes, tn_resnet_n_params(m), params);
    CHECKF(tn_resnet_n_tensors(m) == entries, "layers %s: %d tensors, torchvision's state_dict has %d", layers,
           tn_resnet_n_tensors(m), entries);
    CHECK(nb == stats);
    tn_resnet_free(m);
}

static void check_config_errors(void) {
    tn_resnet_config c;
    const char *cases[][2] = {
        {"{\"model_type\": \"resnet\", \"block\": \"bottleneck\", \"layers\": [3,4,6,3], \"num_classes\": 10}", "'block'"},
        {"{\"model_type\": \"resnet\", \"layers\": [2,2,2], \"num_classes\": 10}", "'layers'"},
        {"{\"model_type\": \"resnet\", \"layers\": [2,2,2,2]}", "'num_classes'"},
        {"{\"model_type\": \"resnet\", \"layers\": [2,2,2,2], \"num_classes\": 10, \"bn_momentum\": -1}", "'bn_momentum'"},
        {"{\"model_type\": \"llama\", \"layers\": [2,2,2,2], \"num_classes\": 10}", "'model_type'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = tn_resnet_config_parse(cases[i][0], "bad.json", &c);
        const char *e = tn_errmsg();
        CHECKF(rc == -1 && strstr(e, "bad.json") && strstr(e, cases[i][1]) && !strchr(e, '\n'),
               "case %zu: '%s' should name bad.json and %s in one line", i, e, cases[i][1]);
    }
    c = cfg_of("[2,2,2,2]", 8, 10);
    CHECK(c.bn_eps == 1e-5 && c.bn_momentum == 0.1 && c.in_channels == 3); /* torch's defaults */
}

static void check_names_init_and_files(void) {
    tn_resnet_config c = cfg_of("[2,2,2,2]", 8, 10);
    tn_resnet *m = tn_resnet_create(&c, tn_backend_cpu()), *m2 = tn_resnet_create(&c, tn_backend_cpu());
    int n = tn_resnet_n_tensors(m);
    CHECK(strcmp(tn_resnet_tensor_at(m, 0)->name, "conv1.weight") == 0);
    CHECK(strcmp(tn_resnet_tensor_at(m, n - 1)->name, "fc.bias") == 0);
    const tn_resnet_tensor *ds = tn_resnet_find(m, "layer2.0.downsample.0.weight");
    CHECK(ds && ds->ndim == 4 && ds->shape[0] == 16 && ds->shape[1] == 8 && ds->shape[2] == 1);
    CHECK(tn_resnet_find(m, "layer1.0.downsample.0.weight") == NULL);
    CHECK(tn_resnet_find(m, "layer4.1.bn2.running_var") != NULL);
    tn_resnet_init_random(m, 7);
    const tn_resnet_tensor *w = tn_resnet_find(m, "layer3.0.conv1.weight"), *fc = tn_resnet_find(m, "fc.weight");
    float *h = tn_xmalloc(w->numel * sizeof *h);
    tn_resnet_get(m, w, h);
    double ss = 0;
    for (size_t i = 0; i < w->numel; i++) ss += (double)h[i] * h[i];
    double sd = sqrt(ss / w->numel), want = sqrt(2.0 / (32 * 9)); /* 4608 samples: sd within ~3% (5 sigma) */
    CHECKF(fabs(sd - want) < 0.05 * want, "conv init std %.4f, kaiming fan_out wants %.4f", sd, want);
    free(h);
    h = tn_xmalloc(fc->numel * sizeof *h);
    tn_resnet_get(m, fc, h);
    int out = 0;
    for (size_t i = 0; i < fc->numel; i++) out += fabs(h[i]) > 1.0 / sqrt(64.0);
    CHECK(out == 0);
    free(h);

    char *dir = tn_path_join(tl_tmpdir(), "rn");
    CHECKF(tn_resnet_save(m, dir) == 0, "%s", tn_errmsg());
    CHECKF(tn_resnet_load(m2, dir) == 0, "%s", tn_errmsg());
    int diff = 0;
    for (int i = 0; i < n; i++) {
        const tn_resnet_tensor *t = tn_resnet_tensor_at(m, i);
        float *a = tn_xmalloc(t->numel * sizeof *a), *b = tn_xmalloc(t->numel * sizeof *b);
        tn_resnet_get(m, t, a), tn_resnet_get(m2, t, b);
        diff += memcmp(a, b, t->numel * sizeof *a) != 0;
        free(a), free(b);
    }
    CHECKF(diff == 0, "%d tensors differ after save and load", diff);
    char *st = tn_path_join(dir, "model.safetensors");
    st_file f;
    if (CHECK(st_open(&f, st) == 0)) {
        const st_tensor *nb = st_find(&f, "layer2.0.downsample.1.num_batches_tracked");
        CHECK(nb && nb->dtype == ST_I64 && nb->ndim == 0);
        st_close(&f);
    }
    /* a model of another width reading this file: one line naming the file and the tensor */
    tn_resnet_config c16 = cfg_of("[2,2,2,2]", 16, 10);
    tn_resnet *m16 = tn_resnet_create(&c16, tn_backend_cpu());
    CHECK(tn_resnet_load(m16, dir) == -1 && strstr(tn_errmsg(), "model.safetensors") && strstr(tn_errmsg(), "conv1.weight"));
    tn_resnet_config c34 = cfg_of("[3,4,6,3]", 8, 10);
    tn_resnet *m34 = tn_resnet_create(&c34, tn_backend_cpu());
    CHECK(tn_resnet_load(m34, dir) == -1 && strstr(tn_errmsg(), "layer1.2.conv1.weight") && strstr(tn_errmsg(), "missing"));
    tn_resnet_free(m16), tn_resnet_free(m34);
    free(st), free(dir);
    tn_resnet_free(m), tn_resnet_free(m2);
}

static void check_backend_refusal(void) {
    tn_backend nogpu = *tn_backend_cpu(); /* as the CUDA backend's table: no image kernels */
    nogpu.name = "cuda", nogpu.image = NULL;
    tn_resnet_config c = cfg_of("[2,2,2,2]", 8, 10);
    tn_resnet *m = tn_resnet_create(&c, &nogpu);
    const char *e = tn_errmsg();
    CHECKF(m == NULL && strstr(e, "cuda backend has no image kernels") && !strchr(e, '\n'), "got '%s'", e);
}

typedef struct {
    tn_resnet *m;
    float *snap;   /* the gradient slab as each call saw it, [calls][n] */
    size_t from[16];
    int calls;
} ready_log;

static void on_ready(void *ctx, size_t from) {
    ready_log *r = ctx;
    if (r->calls == 16) return;
    size_t n = tn_resnet_n_params(r->m);
    memcpy(r->snap + (size_t)r->calls * n, tn_resnet_grad(r->m), n * sizeof(float));
    r->from[r->calls++] = from;
}

static void check_grad_ready(void) {
    tn_resnet_config c = cfg_of("[2,2,2,2]", 4, 10);
    tn_resnet *m = tn_resnet_create(&c, tn_backend_cpu());
    size_t n = tn_resnet_n_params(m);
    int N = 4;
    float *img = tn_xmalloc((size_t)N * 3 * 32 * 32 * sizeof *img);
    int32_t lab[4] = {0, 3, 7, 9};
    tn_rng g;
    tn_rng_seed(&g, 5);
    for (int i = 0; i < N * 3 * 32 * 32; i++) img[i] = (float)tn_rng_normal(&g);
    tn_resnet_init_random(m, 3);
    CHECK(tn_resnet_reserve(m, N, 32, 32) == 0);
    ready_log r = {.m = m, .snap = tn_xmalloc(16 * n * sizeof(float))};
    tn_resnet_set_grad_ready(m, on_ready, &r);
    memset(tn_resnet_grad(m), 0, n * sizeof(float));
    tn_resnet_forward_backward(m, img, lab, N, 0.25f, 0.0f, NULL);
    /* fc, 8 blocks, stem */
    CHECKF(r.calls == 10, "%d grad-ready calls, expected 10 (fc, each of 8 blocks, stem)", r.calls);
    const float *fin = tn_resnet_grad(m);
    for (int k = 0; k < r.calls; k++) {
        CHECKF(k == 0 || r.from[k] < r.from[k - 1], "call %d: from %zu after %zu (not decreasing)", k, r.from[k],
               k ? r.from[k - 1] : 0);
        size_t bad = n;
        for (size_t i = r.from[k]; i < n && bad == n; i++)
            if (memcmp(&r.snap[(size_t)k * n + i], &fin[i], sizeof(float))) bad = i;
        CHECKF(bad == n, "call %d (from %zu): gradient %zu was not final yet", k, r.from[k], bad);
    }
    CHECK(r.calls > 0 && r.from[r.calls - 1] == 0 && r.from[0] == tn_resnet_find(m, "fc.weight")->offset);
    tn_resnet_set_grad_ready(m, NULL, NULL);
    free(r.snap), free(img);
    tn_resnet_free(m);
}

int main(void) {
    check_backend_refusal();
    check_grad_ready();
    check_counts("[2,2,2,2]", 1000, 11689512, 102, 9600);
    check_counts("[2,2,2,2]", 10, 11181642, 102, 9600);
    check_counts("[3,4,6,3]", 1000, 21797672, 182, 17024);
    check_counts("[3,4,6,3]", 10, 21289802, 182, 17024);
    check_config_errors();
    check_names_init_and_files();
    return tl_done("test_unit_resnet");
}
