/* test_unit_blas_kernel -- which OpenBLAS kernel tandem asks for (core/blas_kernel.h): OpenBLAS's generic fallback
 * replaced by the newest kernel the CPU's flags allow, never by one the CPU cannot execute, and a kernel OpenBLAS
 * chose for a CPU it knows (or one this table does not know) kept. Cases written from the kernels' instruction
 * sets (Nehalem SSE4.2, Sandybridge AVX, Haswell AVX2+FMA, SkylakeX AVX-512 F/CD/BW/DQ/VL). */
#include <stdio.h>
#include <string.h>

#include "core/blas_kernel.h"
#include "testlib.h"

static int is(const char *got, const char *want) { return want ? got && strcmp(got, want) == 0 : got == NULL; }

int main(void) {
    const tn_cpu_flags sse = {1, 0, 0, 0}, avx = {1, 1, 0, 0}, avx2 = {1, 1, 1, 0}, avx512 = {1, 1, 1, 1},
                       none = {0, 0, 0, 0};
    struct {
        const char *chosen;
        const tn_cpu_flags *flags;
        const char *want;
    } cases[] = {
        {"Prescott", &avx512, "SkylakeX"},  /* this machine: model 207 unknown to OpenBLAS 0.3.21 */
        {"Prescott", &avx2, "Haswell"},     /* an AVX2-only CPU it does not know */
        {"Prescott", &avx, "Sandybridge"},
        {"Prescott", &sse, "Nehalem"},
        {"Prescott", &none, NULL},          /* nothing better can run */
        {"Core2", &avx2, "Haswell"},
        {"Nehalem", &avx512, "SkylakeX"},
        {"Sandybridge", &avx2, "Haswell"},
        {"Haswell", &avx2, NULL},           /* already the best the flags allow */
        {"Haswell", &avx, NULL},            /* never down */
        {"SkylakeX", &avx512, NULL},
        {"Cooperlake", &avx512, NULL},      /* newer than the table: kept */
        {"Zen", &avx2, NULL},               /* AMD's own choice: kept */
        {"", &avx512, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = tn_blas_better_kernel(cases[i].chosen, cases[i].flags);
        CHECKF(is(got, cases[i].want), "%s with flags %d%d%d%d: got %s, want %s", cases[i].chosen,
               cases[i].flags->sse42, cases[i].flags->avx, cases[i].flags->avx2_fma, cases[i].flags->avx512,
               got ? got : "(keep)", cases[i].want ? cases[i].want : "(keep)");
    }
    CHECK(tn_blas_better_kernel(NULL, &avx512) == NULL);
    /* this CPU: whatever it asks for, the CPU has the instructions for */
    tn_cpu_flags me;
    tn_cpu_flags_read(&me);
    const char *mine = tn_blas_better_kernel("Prescott", &me);
    CHECK(!mine || (strcmp(mine, "SkylakeX") == 0 && me.avx512) || (strcmp(mine, "Haswell") == 0 && me.avx2_fma) ||
          (strcmp(mine, "Sandybridge") == 0 && me.avx) || (strcmp(mine, "Nehalem") == 0 && me.sse42));
    printf("test_unit_blas_kernel: %d checks, %d failed (this CPU: Prescott -> %s)\n", tl_checks, tl_failures,
           mine ? mine : "kept");
    return tl_failures ? 1 : 0;
}
