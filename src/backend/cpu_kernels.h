/* cpu_kernels -- CPU backend internals shared between its files (not part of the backend interface). */
#ifndef TN_CPU_KERNELS_H
#define TN_CPU_KERNELS_H

#include <stddef.h>

void tn_cpu_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc);
void tn_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int S, int H, int KV, int hd,
                              int ld);
void tn_cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse,
                               const float *qkv, int B, int S, int H, int KV, int hd, int ld);
/* Per-OpenMP-thread scratch of at least n floats (grown on demand, kept for the process lifetime). */
float *tn_cpu_thread_scratch(int slot, size_t n);

#endif
