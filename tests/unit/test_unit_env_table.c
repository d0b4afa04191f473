/* test_unit_env_table -- `tandem env`'s side-by-side table (src/cli/env_info.h) on hand-made rows: rows whose
 * values differ between machines, and only those, start with '*' and are named in the last line; a value
 * wider than its column wraps without losing a character; one machine gets no marks and no verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/env_info.h"
#include "core/core.h"
#include "testlib.h"

static char *render(int n_cols, const char *const *titles, const tn_env_row *const *cols, int n_rows, int *differ) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    *differ = tn_env_print_table(f, n_cols, titles, cols, n_rows);
    fclose(f);
    return buf;
}

/* The first line of `text` whose key column (after the 2-character mark) starts with `key`. */
static const char *row_line(const char *text, const char *key, char *out, size_t n) {
    out[0] = '\0';
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strlen(l) > 2 && strncmp(l + 2, key, strlen(key)) == 0) {
            snprintf(out, n, "%.*s", (int)strcspn(l, "\n"), l);
            return out;
        }
    return NULL;
}

static void strip_spaces(char *s) {
    char *o = s;
    for (; *s; s++)
        if (*s != ' ') *o++ = *s;
    *o = '\0';
}

static int same_but_spaces(const char *a, const char *b) {
    char x[1024], y[1024];
    snprintf(x, sizeof x, "%s", a), snprintf(y, sizeof y, "%s", b);
    strip_spaces(x), strip_spaces(y);
    return strcmp(x, y) == 0;
}

/* Concatenates the wrapped pieces of column `col` (0-based) of every line from `key`'s row onwards while the
 * key column is blank, so a wrapped value can be compared with the original. */
static void unwrap(const char *text, const char *key, int col, char *out, size_t n) {
    char line[512];
    out[0] = '\0';
    const char *l = strstr(text, key);
    while (l && l > text && l[-1] != '\n') l--;
    for (int first = 1; l && *l; first = 0) {
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l, "\n"), l);
        if (!first && line[2] != ' ') break;
        char *cell = line;
        for (int c = 0; c <= col && cell; c++) cell = strstr(cell + 1, " | ");
        if (!cell) break;
        cell += 3;
        char *end = strstr(cell, " | ");
        if (end) *end = '\0';
        size_t cl = strlen(cell);
        while (cl && cell[cl - 1] == ' ') cell[--cl] = '\0';
        if (*out && *cell) strncat(out, " ", n - strlen(out) - 1);
        strncat(out, cell, n - strlen(out) - 1);
        l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
    }
}

int main(void) {
    const char *keys[] = {"tandem version", "OpenBLAS core type", "OpenBLAS threads", "CPU model", "memory"};
    const char *a[] = {"0.1.0 (git abc)", "Haswell", "2 (OpenMP)",
                       "Intel(R) Xeon(R) Platinum 8480+ with a rather long model name that must wrap", "31.2 GiB"};
    const char *b[] = {"0.1.0 (git abc)", "Sandybridge (OPENBLAS_CORETYPE=Sandybridge)", "2 (OpenMP)",
                       "Intel(R) Xeon(R) Platinum 8480+ with a rather long model name that must wrap", "15.6 GiB"};
    tn_env_row ra[5], rb[5];
    for (int i = 0; i < 5; i++) {
        snprintf(ra[i].key, sizeof ra[i].key, "%s", keys[i]), snprintf(ra[i].value, sizeof ra[i].value, "%s", a[i]);
        snprintf(rb[i].key, sizeof rb[i].key, "%s", keys[i]), snprintf(rb[i].value, sizeof rb[i].value, "%s", b[i]);
    }
    const char *titles[] = {"host0", "host1"};
    const tn_env_row *cols[] = {ra, rb};
    int differ;
    char *t = render(2, titles, cols, 5, &differ);
    char line[512], joined[1024];
    CHECKF(differ == 2, "2 rows differ (core type, memory), got %d:\n%s", differ, t);
    CHECK(row_line(t, "OpenBLAS core type", line, sizeof line) && line[0] == '*');
    CHECK(row_line(t, "memory", line, sizeof line) && line[0] == '*');
    CHECK(row_line(t, "tandem version", line, sizeof line) && line[0] == ' ');
    CHECK(row_line(t, "OpenBLAS threads", line, sizeof line) && line[0] == ' ');
    CHECK(row_line(t, "CPU model", line, sizeof line) && line[0] == ' ');
    CHECK(strstr(t, "* 2 row(s) differ between the 2 machines: OpenBLAS core type, memory\n") != NULL);
    CHECK(row_line(t, "host", line, sizeof line) && strstr(line, "host0") && strstr(line, "host1"));
    /* wrapped cells give back every character of the value, in order (a break at a space drops that space) */
    unwrap(t, "CPU model", 0, joined, sizeof joined);
    CHECKF(same_but_spaces(joined, a[3]), "column 0 of CPU model unwraps to '%s'", joined);
    unwrap(t, "CPU model", 1, joined, sizeof joined);
    CHECKF(same_but_spaces(joined, b[3]), "column 1 of CPU model unwraps to '%s'", joined);
    unwrap(t, "OpenBLAS core type", 1, joined, sizeof joined);
    CHECKF(same_but_spaces(joined, b[1]), "column 1 of the core type unwraps to '%s'", joined);
    for (const char *l = t; *l; l = strchr(l, '\n') + 1) /* every line fits two columns of at most 38 */
        CHECKF(strcspn(l, "\n") <= 2 + 18 + 2 * (3 + 38), "line too wide: %.*s", (int)strcspn(l, "\n"), l);
    free(t);

    /* all equal: no marks, the verdict says so */
    const tn_env_row *same[] = {ra, ra, ra};
    const char *three[] = {"a", "b", "c"};
    t = render(3, three, same, 5, &differ);
    CHECK(differ == 0);
    CHECK(strstr(t, "all 3 machines agree on every row\n") != NULL);
    CHECK(strchr(t, '*') == NULL);
    free(t);

    /* one machine: values in full, no verdict */
    const tn_env_row *one[] = {rb};
    t = render(1, titles, one, 5, &differ);
    CHECK(differ == 0);
    CHECK(strstr(t, b[3]) != NULL && strstr(t, "agree") == NULL && strstr(t, "differ") == NULL);
    free(t);

    /* the collector itself: the rows every report needs, OpenBLAS's kernel as OpenBLAS names it */
    tn_env_row mine[TN_ENV_MAX_ROWS];
    int n = tn_env_collect(mine);
    const char *need[] = {"tandem version", "tandem build", "CPU model", "CPUs", "memory", "NUMA nodes", "OpenBLAS",
                          "OpenBLAS core type", "OpenBLAS threads", "MPI", "NCCL", "CUDA driver"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        int found = 0;
        for (int r = 0; r < n; r++) found |= strcmp(mine[r].key, need[i]) == 0 && mine[r].value[0];
        CHECKF(found, "tn_env_collect reports '%s'", need[i]);
    }
    return tl_done("test_unit_env_table");
}
