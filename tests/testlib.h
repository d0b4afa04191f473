/* testlib -- minimal assertions for tandem's C tests. Each test executable calls CHECK* macros;
 * tl_done() prints "name: N checks, M failed" and returns the exit code (0, 1, or 77 = skipped). */
#ifndef TN_TESTLIB_H
#define TN_TESTLIB_H

#include <stdint.h>
#include <stdio.h>

extern int tl_checks, tl_failures;

#define CHECK(cond) tl_check((cond) != 0, #cond, __FILE__, __LINE__)
#define CHECKF(cond, ...) tl_checkf((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_NEAR(a, b, tol) tl_near((double)(a), (double)(b), (double)(tol), #a, #b, __FILE__, __LINE__)

int tl_check(int ok, const char *what, const char *file, int line);
int tl_checkf(int ok, const char *file, int line, const char *fmt, ...);
int tl_near(double a, double b, double tol, const char *an, const char *bn, const char *file, int line);
int tl_done(const char *name);

/* Paths to test inputs: tests/ (always present) and ../shared (may be absent). tl_shared_dir returns NULL
 * when absent; tl_skip_or_fail_without_shared() then exits 77 (skipped) or, with CI=true, 1. */
const char *tl_tests_dir(void);
const char *tl_shared_dir(void);
void tl_require_shared(const char *test_name);
/* A fresh temporary folder for this test (removed by the caller if it wishes). */
const char *tl_tmpdir(void);

/* Relative L2 error ||a - b|| / max(||b||, tiny), a in fp32 against b in fp64. */
double tl_rel_l2(const float *a, const double *b, int64_t n);

/* A 2-layer qwen2 with tied embeddings (vocab 301, hidden 16, 4 heads / 2 KV heads), CPU backend, random weights:
 * the model the optimizer and sharding tests cut into groups. Exits the test when it cannot be made. */
struct tn_model *tl_tiny_qwen2(void);

#endif
