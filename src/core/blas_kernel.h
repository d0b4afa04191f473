/* blas_kernel -- which OpenBLAS kernel to ask for when OpenBLAS has fallen back to an old one.
 *
 * OpenBLAS (DYNAMIC_ARCH) picks its GEMM kernel from the CPU's family and model numbers. A CPU newer than the
 * library (Debian's OpenBLAS 0.3.21 and an Intel Xeon of model 207, as KVM machines report it) gets its generic
 * fallback, Prescott (SSE3): sgemm ran 5x slower there than with the AVX-512 kernel the CPU can execute
 * (docs/performance.md). tandem's numerics hold under every kernel (tests/CMakeLists.txt runs the parity tests
 * under each), so when the user has not chosen one (OPENBLAS_CORETYPE unset) and OpenBLAS's choice is older than
 * the CPU's instruction flags allow, main() asks for the newest kernel those flags allow and re-executes itself
 * once (OpenBLAS reads the variable when it is loaded; src/cli/main.c). */
#ifndef TN_BLAS_KERNEL_H
#define TN_BLAS_KERNEL_H

typedef struct {
    int sse42, avx, avx2_fma, avx512; /* avx512: F, CD, BW, DQ and VL, what OpenBLAS's SkylakeX kernel uses */
} tn_cpu_flags;

/* This CPU's flags (as the compiler's cpuid reading sees them). */
void tn_cpu_flags_read(tn_cpu_flags *f);
/* The kernel to ask for instead of `chosen` (OpenBLAS's corename), or NULL to keep it: only a fallback name that
 * is older than the flags allow is replaced (Nehalem, Sandybridge, Haswell or SkylakeX); a kernel this table does
 * not know (AMD's, a newer Intel one) is kept. */
const char *tn_blas_better_kernel(const char *chosen, const tn_cpu_flags *f);

#endif
