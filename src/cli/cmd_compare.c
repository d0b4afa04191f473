/* cmd_compare.c -- `tandem compare A B [--max-rel-l2 X]`: how far apart two checkpoints are.
 *
 * A and B are safetensors files or folders holding model.safetensors or adapter_model.safetensors. Prints
 * each common tensor's relative L2 difference |a - b| / |b| and max |a - b|, then the worst; exits 1 when
 * the tensor names or shapes differ, or when --max-rel-l2 is given and a tensor exceeds it. Used to check
 * that runs which must agree (different rank counts, resumed vs uninterrupted) do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "core/core.h"
#include "model/safetensors.h"

static char *weights_file(const char *p) {
    struct stat st;
    if (stat(p, &st) != 0) {
        tn_err("%s: no such file or folder", p);
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) return tn_xstrdup(p);
    const char *names[] = {"model.safetensors", "adapter_model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char *f = tn_path_join(p, names[i]);
        if (stat(f, &st) == 0) return f;
        free(f);
    }
    tn_err("%s: holds neither model.safetensors nor adapter_model.safetensors", p);
    return NULL;
}

static int compare(const char *pa, const char *pb, double max_rel, int quiet) {
    char *fa = weights_file(pa), *fb = fa ? weights_file(pb) : NULL;
    st_file a = {0}, b = {0};
    int rc = (!fa || !fb || st_open(&a, fa) != 0 || st_open(&b, fb) != 0) ? -1 : 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; rc == 0 && i < a.n; i++) {
        const st_tensor *ta = &a.tensors[i], *tb = st_find(&b, ta->name);
        if (!tb || tb->numel != ta->numel) {
            rc = tn_err("%s: tensor %s %s in %s", fa, ta->name, tb ? "has another shape" : "is missing", fb);
            break;
        }
        double *x = tn_xmalloc((size_t)ta->numel * sizeof *x), *y = tn_xmalloc((size_t)ta->numel * sizeof *y);
        if (st_read_f64(&a, ta, x, ta->numel) != 0 || st_read_f64(&b, tb, y, tb->numel) != 0) rc = -1;
        double d2 = 0, n2 = 0, md = 0;
        for (int64_t k = 0; rc == 0 && k < ta->numel; k++) {
            double d = x[k] - y[k];
            d2 += d * d, n2 += y[k] * y[k];
            md = fmax(md, fabs(d));
        }
        free(x), free(y);
        double rel = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
        if (!(rel <= worst)) worst = rel, worst_name = ta->name; /* NaN counts as worst */
        if (!quiet) printf("%-64s rel L2 %.3e  max|diff| %.3e\n", ta->name, rel, md);
    }
    if (rc == 0 && a.n != b.n) rc = tn_err("%s has %d tensors, %s has %d", fa, a.n, fb, b.n);
    if (rc == 0) {
        printf("compare: %d tensors, worst rel L2 %.3e (%s)\n", a.n, worst, worst_name);
        if (max_rel >= 0 && !(worst <= max_rel))
            rc = tn_err("%s differs from %s: rel L2 %.3e > %.3e on %s", pa, pb, worst, max_rel, worst_name);
    }
    st_close(&a);
    st_close(&b);
    free(fa), free(fb);
    return rc;
}

int tn_cmd_compare(int argc, char **argv) {
    double max_rel = -1;
    int quiet = 0;
    const char *paths[2] = {NULL, NULL};
    int np = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--max-rel-l2") == 0 && i + 1 < argc) {
            char *end;
            max_rel = strtod(argv[++i], &end);
            if (*end || !(max_rel >= 0)) {
                fprintf(stderr, "tandem: error: compare: --max-rel-l2 '%s': expected a number >= 0\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (np < 2 && argv[i][0] != '-') {
            paths[np++] = argv[i];
        } else {
            fprintf(stderr, "tandem: error: compare: unexpected argument '%s' (usage: tandem compare A B "
                            "[--max-rel-l2 X] [--quiet])\n", argv[i]);
            return 1;
        }
    }
    if (np != 2) {
        fprintf(stderr, "tandem: error: compare needs two checkpoints: tandem compare A B [--max-rel-l2 X]\n");
        return 1;
    }
    if (compare(paths[0], paths[1], max_rel, quiet) != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
