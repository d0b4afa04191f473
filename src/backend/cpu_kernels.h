/* cpu_kernels -- CPU backend internals shared between its files (not part of the backend interface). */
#ifndef TN_CPU_KERNELS_H
#define TN_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/image_kernels.h"

void tn_cpu_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc);
void tn_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd,
                              int ld);
void tn_cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse,
                               const float *qkv, int B, int S, int H, int KV, int hd, int ld);
/* generation (cpu_decode.c, cpu_attention.c): see backend.h linear_rows, rope_at, attention_cached */
void tn_cpu_linear_rows(float *y, int ldy, const float *x, int ldx, const float *W, int N, int K, int M, float alpha,
                        float beta);
void tn_cpu_rope_at(float *x, int T, int nheads, int hd, int ld, const int32_t *pos, const float *cos,
                    const float *sin);
void tn_cpu_attention_cached(float *out, const float *q, int ldq, const float *const *k, const float *const *v,
                             const int32_t *pos, int T, int H, int KV, int hd);
/* one decode row (q: its H heads) against cached rows [j0, j1) of K and V (row stride ldk, group g at g hd): part
 * [H][hd + 2] gets each head's unnormalised P.V, max score and sum of exp (S: scratch of H (j1 - j0) floats, the
 * caller's); merge writes head h of out from n_chunks such partials (cpu_decode_attention.c) */
void tn_cpu_attend_chunk(float *part, float *S, const float *q, const float *K, const float *V, int j0, int j1, int ldk,
                         int H, int KV, int hd);
void tn_cpu_attend_merge(float *out, const float *parts, int n_chunks, int h, int H, int hd);
/* convolution (cpu_conv_dnnl.c, on oneDNN; shapes with dead taps on im2col + GEMM): see image_kernels.h; scratch
 * is used only by the latter (oneDNN's layouts live in the kernel's own arena) */
void tn_cpu_conv2d_forward(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch);
void tn_cpu_conv2d_backward(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x, const float *w,
                            const tn_conv_shape *s, float *scratch);
/* the same contract as im2col + one OpenBLAS GEMM (cpu_conv.c), scratch of tn_cpu_conv_gemm_scratch_floats: the
 * second, independent implementation test_unit_image_kernels checks and bench_conv times oneDNN against */
size_t tn_cpu_conv_gemm_scratch_floats(const tn_conv_shape *s);
/* 1 when some kernel tap of s only ever reads padding (e.g. 3x3 pad 1 on a 1x1 map): im2col leaves those out, where
 * oneDNN computes all of them, so the backend runs such shapes on im2col + GEMM (faster there: bench_conv) */
int tn_cpu_conv_has_dead_taps(const tn_conv_shape *s);
void tn_cpu_conv2d_gemm_forward(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch);
void tn_cpu_conv2d_gemm_backward(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x,
                                 const float *w, const tn_conv_shape *s, float *scratch);
extern const tn_image_kernels tn_cpu_image_table; /* cpu_image.c */
/* Per-OpenMP-thread scratch of at least n floats (grown on demand, kept for the process lifetime). */
float *tn_cpu_thread_scratch(int slot, size_t n);

#endif
