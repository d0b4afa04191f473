/* bench_conv -- the convolutions of torchvision's ResNet-18 on CIFAR-sized input (batch 64, 3x32x32), timed with
 * tandem's im2col + OpenBLAS kernels (backend/cpu_conv.c), with the CPU backend's (oneDNN behind reorders from and
 * to tandem's [C, N, H, W], backend/cpu_conv_dnnl.c) and with oneDNN alone (Debian's libdnnl, the library PyTorch's
 * CPU convolutions run on), forward + input gradient + weight gradient per layer. oneDNN alone is its best case: each
 * primitive picks its own (blocked) layouts and no reorder is timed. Built and run by bench/bench_conv.sh.
 * Output: one line per layer shape with milliseconds per pass for each, and the totals over the network (each
 * shape weighted by how often ResNet-18 has it). */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"
#include "core/core.h"

typedef struct { int C, OC, HW, k, stride, pad, count; const char *what; } layer;

static const layer L[] = {
    {3, 64, 32, 7, 2, 3, 1, "stem 7x7/2"},       {64, 64, 8, 3, 1, 1, 4, "layer1 3x3"},
    {64, 128, 8, 3, 2, 1, 1, "layer2.0 3x3/2"},  {128, 128, 4, 3, 1, 1, 3, "layer2 3x3"},
    {64, 128, 8, 1, 2, 0, 1, "layer2 ds 1x1/2"}, {128, 256, 4, 3, 2, 1, 1, "layer3.0 3x3/2"},
    {256, 256, 2, 3, 1, 1, 3, "layer3 3x3"},     {128, 256, 4, 1, 2, 0, 1, "layer3 ds 1x1/2"},
    {256, 512, 2, 3, 2, 1, 1, "layer4.0 3x3/2"}, {512, 512, 1, 3, 1, 1, 3, "layer4 3x3"},
    {256, 512, 2, 1, 2, 0, 1, "layer4 ds 1x1/2"},
};
#define BATCH 64
#define REPS 5

#define DN(x) do { if ((x) != dnnl_success) { fprintf(stderr, "bench_conv: %s failed\n", #x); exit(1); } } while (0)

/* gemm: im2col + OpenBLAS (cpu_conv.c); else the backend's table (oneDNN with reorders) */
static double time_tandem(const layer *l, int gemm) {
    const tn_backend *be = tn_backend_cpu();
    tn_conv_shape s = {.N = BATCH, .C = l->C, .H = l->HW, .W = l->HW, .OC = l->OC, .KH = l->k, .KW = l->k,
                       .stride = l->stride, .pad = l->pad};
    tn_conv_shape_finish(&s);
    size_t nx = (size_t)s.C * BATCH * s.H * s.W, ny = (size_t)s.OC * BATCH * s.OH * s.OW, nw = (size_t)s.OC * s.C * l->k * l->k;
    float *x = be->alloc(nx), *y = be->alloc(ny), *w = be->alloc(nw), *dw = be->alloc(nw), *dx = be->alloc(nx);
    float *sc = be->alloc((gemm ? tn_cpu_conv_gemm_scratch_floats(&s) : tn_conv_scratch_floats(&s)) + 1);
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = tn_now();
        if (gemm) {
            tn_cpu_conv2d_gemm_forward(y, x, w, &s, sc);
            tn_cpu_conv2d_gemm_backward(dx, 0, dw, y, x, w, &s, sc);
        } else {
            be->image->conv2d_forward(y, x, w, &s, sc);
            be->image->conv2d_backward(dx, 0, dw, y, x, w, &s, sc);
        }
        double t = tn_now() - t0;
        best = t < best ? t : best;
    }
    float *p[] = {x, y, w, dw, dx, sc};
    for (int i = 0; i < 6; i++) be->free(p[i]);
    return best * 1e3;
}

static dnnl_memory_t mem(dnnl_primitive_desc_t pd, dnnl_query_t q, dnnl_engine_t eng) {
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, dnnl_primitive_desc_query_md(pd, q, 0), eng, DNNL_MEMORY_ALLOCATE));
    return m;
}

/* plain: activations in tandem's [C, N, H, W] (strides) and weights in torch's [OC, C, KH, KW], as tandem would hand
 * them over without any reorder; else each primitive's preferred (blocked) layouts */
static void md(dnnl_memory_desc_t *m, const dnnl_dims_t d, int plain, int act) {
    if (!plain) {
        DN(dnnl_memory_desc_init_by_tag(m, 4, d, dnnl_f32, dnnl_format_tag_any));
    } else if (act) {
        dnnl_dims_t st = {d[2] * d[3], d[0] * d[2] * d[3], d[3], 1};
        DN(dnnl_memory_desc_init_by_strides(m, 4, d, dnnl_f32, st));
    } else {
        DN(dnnl_memory_desc_init_by_tag(m, 4, d, dnnl_f32, dnnl_oihw));
    }
}

static double time_onednn(const layer *l, dnnl_engine_t eng, dnnl_stream_t st, int plain) {
    int OHW = (l->HW + 2 * l->pad - l->k) / l->stride + 1;
    dnnl_dims_t xd = {BATCH, l->C, l->HW, l->HW}, wd = {l->OC, l->C, l->k, l->k}, yd = {BATCH, l->OC, OHW, OHW};
    dnnl_dims_t strides = {l->stride, l->stride}, pad = {l->pad, l->pad};
    dnnl_memory_desc_t xm, wm, ym;
    md(&xm, xd, plain, 1), md(&wm, wd, plain, 0), md(&ym, yd, plain, 1);
    dnnl_convolution_desc_t fd, bd, wdsc;
    DN(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xm, &wm, NULL, &ym,
                                          strides, pad, pad));
    DN(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &xm, &wm, &ym, strides, pad, pad));
    DN(dnnl_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_direct, &xm, &wm, NULL, &ym, strides, pad,
                                                   pad));
    dnnl_primitive_desc_t fpd, bpd, wpd;
    DN(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    DN(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    DN(dnnl_primitive_desc_create(&wpd, &wdsc, NULL, eng, fpd));
    dnnl_memory_t fx = mem(fpd, dnnl_query_src_md, eng), fw = mem(fpd, dnnl_query_weights_md, eng),
                  fy = mem(fpd, dnnl_query_dst_md, eng);
    dnnl_memory_t by = mem(bpd, dnnl_query_diff_dst_md, eng), bw = mem(bpd, dnnl_query_weights_md, eng),
                  bx = mem(bpd, dnnl_query_diff_src_md, eng);
    dnnl_memory_t wx = mem(wpd, dnnl_query_src_md, eng), wy = mem(wpd, dnnl_query_diff_dst_md, eng),
                  ww = mem(wpd, dnnl_query_diff_weights_md, eng);
    dnnl_primitive_t fp, bp, wp;
    DN(dnnl_primitive_create(&fp, fpd));
    DN(dnnl_primitive_create(&bp, bpd));
    DN(dnnl_primitive_create(&wp, wpd));
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, fx}, {DNNL_ARG_WEIGHTS, fw}, {DNNL_ARG_DST, fy}};
    dnnl_exec_arg_t ba[] = {{DNNL_ARG_DIFF_DST, by}, {DNNL_ARG_WEIGHTS, bw}, {DNNL_ARG_DIFF_SRC, bx}};
    dnnl_exec_arg_t wa[] = {{DNNL_ARG_SRC, wx}, {DNNL_ARG_DIFF_DST, wy}, {DNNL_ARG_DIFF_WEIGHTS, ww}};
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = tn_now();
        DN(dnnl_primitive_execute(fp, st, 3, fa));
        DN(dnnl_primitive_execute(bp, st, 3, ba));
        DN(dnnl_primitive_execute(wp, st, 3, wa));
        DN(dnnl_stream_wait(st));
        double t = tn_now() - t0;
        best = t < best ? t : best;
    }
    dnnl_primitive_t prims[] = {fp, bp, wp};
    for (int i = 0; i < 3; i++) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t ms[] = {fx, fw, fy, by, bw, bx, wx, wy, ww};
    for (int i = 0; i < 9; i++) dnnl_memory_destroy(ms[i]);
    dnnl_primitive_desc_destroy(fpd), dnnl_primitive_desc_destroy(bpd), dnnl_primitive_desc_destroy(wpd);
    return best * 1e3;
}

int main(void) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    double tt = 0, tb = 0, to = 0, tp = 0;
    int plain = getenv("BENCH_CONV_PLAIN") != NULL; /* the plain-layout oneDNN column: minutes (reference kernel) */
    printf("%-18s %5s %5s %4s  %9s %9s %9s %9s  (ms per forward + input grad + weight grad, best of %d, batch %d)\n",
           "layer", "C", "OC", "HW", "im2col", "backend", "oneDNN", "oneDNN-p", REPS, BATCH);
    for (size_t i = 0; i < sizeof L / sizeof *L; i++) {
        double a = time_tandem(&L[i], 1), d = time_tandem(&L[i], 0), b = time_onednn(&L[i], eng, st, 0);
        double c = plain ? time_onednn(&L[i], eng, st, 1) : 0;
        printf("%-18s %5d %5d %4d  %9.2f %9.2f %9.2f %9.2f  x%d\n", L[i].what, L[i].C, L[i].OC, L[i].HW, a, d, b, c,
               L[i].count);
        tt += a * L[i].count, tb += d * L[i].count, to += b * L[i].count, tp += c * L[i].count;
    }
    printf("%-18s %17s %9.1f %9.1f %9.1f %9.1f  ms per ResNet-18 step's convolutions\n", "total", "", tt, tb, to, tp);
    printf("im2col: im2col + OpenBLAS; backend: the CPU backend's (oneDNN + reorders from/to [C, N, H, W]); oneDNN: "
           "blocked layouts of its choice, no reorder timed; oneDNN-p: tandem's plain layouts as they are%s\n",
           plain ? "" : " (not run: BENCH_CONV_PLAIN=1)");
    dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
    return 0;
}
