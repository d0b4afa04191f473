/* test_unit_backend_profile -- TANDEM_PROFILE's wrapped backend (backend_profile.h): every timed entry calls the
 * inner one with the same arguments (results equal to the bit), counts each call once, charges it time, keeps
 * matrix products by shape, and leaves the entries it does not time as the inner ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_profile.h"
#include "core/core.h"
#include "testlib.h"

static void fill(float *x, size_t n, unsigned seed) {
    tn_rng r;
    tn_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(tn_rng_uniform(&r) * 2 - 1);
}

int main(void) {
    const tn_backend *cpu = tn_backend_cpu(), *p = tn_backend_profiled(cpu);
    CHECK(p != cpu && strcmp(p->name, cpu->name) == 0);
    CHECK(tn_backend_profiled(cpu) == p); /* once per process */
    CHECK(p->alloc == cpu->alloc && p->sync == cpu->sync && p->describe == cpu->describe); /* not timed */
    CHECK(p->matmul != cpu->matmul && p->cross_entropy_add != cpu->cross_entropy_add);

    enum { M = 13, N = 7, K = 29, T = 5, V = 11 };
    float *A = p->alloc(M * K), *B = p->alloc(K * N), *C1 = p->alloc(M * N), *C2 = p->alloc(M * N);
    fill(A, M * K, 1), fill(B, K * N, 2);
    cpu->matmul(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);
    for (int i = 0; i < 3; i++) p->matmul(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C2, N);
    p->matmul(1, 0, K, N, M, 1.0f, A, K, C2, N, 0.0f, B, N); /* a second shape, transposed A */
    CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0);
    double s = 0;
    CHECKF(tn_backend_profile_calls("matmul", &s) == 4 && s > 0, "matmul calls %ld, %.3g s",
           tn_backend_profile_calls("matmul", NULL), s);

    float *l1 = p->alloc(T * V), *l2 = p->alloc(T * V);
    fill(l1, T * V, 3);
    memcpy(l2, l1, sizeof(float) * T * V);
    int32_t tg[T] = {1, -100, 10, 0, 4};
    int64_t n1 = 0, n2 = 0;
    double a = cpu->cross_entropy(l1, tg, T, V, 1.0f, &n1);
    p->cross_entropy_add(l2, tg, T, V, 1.0f);
    double b = p->cross_entropy_total(&n2);
    CHECK(a == b && n1 == n2 && memcmp(l1, l2, sizeof(float) * T * V) == 0);
    CHECK(tn_backend_profile_calls("cross_entropy_add", NULL) == 1 &&
          tn_backend_profile_calls("cross_entropy_total", NULL) == 1);
    CHECK(tn_backend_profile_calls("cross_entropy", NULL) == 0 && tn_backend_profile_calls("no_such_op", NULL) == 0);

    /* the report: ops by time and the two shapes */
    char path[] = "/tmp/tandem-profile-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    CHECK(f != NULL);
    if (f) {
        tn_backend_profile_report(f);
        rewind(f);
        char text[8192];
        size_t len = fread(text, 1, sizeof text - 1, f);
        text[len] = 0;
        CHECKF(strstr(text, "matmul") && strstr(text, "cross_entropy_add") && strstr(text, "cpu backend"), "%s", text);
        CHECKF(strstr(text, "NN          13        7       29       3") != NULL, "%s", text);
        CHECKF(strstr(text, "TN          29        7       13       1") != NULL, "%s", text);
        fclose(f);
    }
    unlink(path);
    p->free(A), p->free(B), p->free(C1), p->free(C2), p->free(l1), p->free(l2);
    printf("test_unit_backend_profile: %d checks, %d failed\n", tl_checks, tl_failures);
    return tl_failures ? 1 : 0;
}
