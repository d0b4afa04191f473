/* cpu_vec -- the generic vector type of the decode kernels (cpu_decode.c, cpu_decode_attention.c): GCC's (and
 * Clang's) vector extension, not intrinsics, so that the width follows the ISA the file is built for (16 floats
 * with AVX-512, 8 with AVX, 4 on plain x86-64) and the same source is vectorised on every x86-64. Loads and
 * stores are unaligned (rows of weights, activations and the cache start anywhere). */
#ifndef TN_CPU_VEC_H
#define TN_CPU_VEC_H

#include <string.h>

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float))));

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline float vsum(vf a) {
    float s = 0.0f;
    for (int k = 0; k < VL; k++) s += a[k];
    return s;
}

#endif
