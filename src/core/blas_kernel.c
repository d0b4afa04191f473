/* blas_kernel.c -- the OpenBLAS kernel to ask for when OpenBLAS fell back to an old one (blas_kernel.h). */
#include "core/blas_kernel.h"

#include <string.h>

void tn_cpu_flags_read(tn_cpu_flags *f) {
    __builtin_cpu_init();
    f->sse42 = __builtin_cpu_supports("sse4.2") != 0;
    f->avx = __builtin_cpu_supports("avx") != 0;
    f->avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f->avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                __builtin_cpu_supports("avx512vl");
}

/* OpenBLAS's x86-64 kernel names by the instruction set they need, oldest first; its generic fallbacks (Prescott
 * and the older Intel names) rank 0 */
static int rank_of(const char *name) {
    static const char *const fallback[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Atom", "Katmai",
                                           "Coppermine", "Northwood", "Banias"};
    for (size_t i = 0; i < sizeof fallback / sizeof *fallback; i++)
        if (strcmp(name, fallback[i]) == 0) return 0;
    if (strcmp(name, "Nehalem") == 0) return 1;
    if (strcmp(name, "Sandybridge") == 0) return 2;
    if (strcmp(name, "Haswell") == 0) return 3;
    if (strcmp(name, "SkylakeX") == 0) return 4;
    return -1; /* Cooperlake, AMD's, newer ones: not ours to change */
}

const char *tn_blas_better_kernel(const char *chosen, const tn_cpu_flags *f) {
    int have = rank_of(chosen ? chosen : "");
    if (have < 0) return NULL;
    const char *best = f->avx512 ? "SkylakeX" : f->avx2_fma ? "Haswell" : f->avx ? "Sandybridge"
                                                                         : f->sse42 ? "Nehalem" : NULL;
    return best && rank_of(best) > have ? best : NULL;
}
