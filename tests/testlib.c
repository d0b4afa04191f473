/* testlib.c -- see testlib.h. */
#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "model/model.h"

int tl_checks, tl_failures;

int tl_check(int ok, const char *what, const char *file, int line) {
    tl_checks++;
    if (!ok) {
        tl_failures++;
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
    return ok;
}

int tl_checkf(int ok, const char *file, int line, const char *fmt, ...) {
    tl_checks++;
    if (!ok) {
        tl_failures++;
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s:%d: check failed: ", file, line);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    return ok;
}

int tl_near(double a, double b, double tol, const char *an, const char *bn, const char *file, int line) {
    int ok = fabs(a - b) <= tol;
    return tl_checkf(ok, file, line, "%s = %.9g, %s = %.9g, |diff| %.3g > %.3g", an, a, bn, b, fabs(a - b), tol);
}

int tl_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, tl_checks, tl_failures);
    return tl_failures ? 1 : 0;
}

const char *tl_tests_dir(void) {
    const char *d = getenv("TANDEM_TESTS_DIR");
    return d ? d : "tests";
}

const char *tl_shared_dir(void) {
    const char *d = getenv("TANDEM_SHARED_DIR");
    if (!d) d = "../shared";
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode) ? d : NULL;
}

void tl_require_shared(const char *test_name) {
    if (tl_shared_dir()) return;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        printf("%s: FAILED: ../shared is absent and CI=true\n", test_name);
        exit(1);
    }
    printf("%s: skipped (../shared is absent)\n", test_name);
    exit(77);
}

const char *tl_tmpdir(void) {
    static char path[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/tandem-test-XXXXXX");
        if (!mkdtemp(path)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return path;
}

double tl_rel_l2(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-300);
}

struct tn_model *tl_tiny_qwen2(void) {
    tn_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "qwen2");
    c.vocab_size = 301, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 4, c.max_position_embeddings = 64;
    c.rope_theta = 10000.0, c.rms_norm_eps = 1e-6, c.initializer_range = 0.02, c.tie_word_embeddings = 1;
    c.bos_token_id = c.eos_token_id = -1;
    if (!CHECKF(tn_model_config_finish(&c, "test") == 0, "%s", tn_errmsg())) exit(1);
    return tn_model_create(&c, NULL, tn_backend_cpu());
}
