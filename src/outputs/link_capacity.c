/* link_capacity.c -- see link_capacity.h. */
#include "outputs/link_capacity.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

char *tn_link_capacity_path(void) {
    const char *env = getenv("TANDEM_BENCH_LOG"), *home = getenv("HOME");
    if (env && *env) return tn_xstrdup(env);
    return tn_path_join(home && *home ? home : "/tmp", ".cache/tandem/bench_allreduce.jsonl");
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The distinct names of hosts, sorted, as a JSON array. */
static cJSON *machine_set(const char *const *hosts, int n) {
    const char **s = tn_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    memcpy(s, hosts, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, by_name);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(s[i], s[i - 1]) != 0) cJSON_AddItemToArray(arr, cJSON_CreateString(s[i]));
    free(s);
    return arr;
}

int tn_link_capacity_record(const char *const *hosts, int n_ranks, double bytes, double seconds, double cpu_s_per_byte) {
    cJSON *set = machine_set(hosts, n_ranks);
    int m = cJSON_GetArraySize(set);
    if (m < 2 || seconds <= 0) { /* one machine: no link between machines was measured */
        cJSON_Delete(set);
        return 0;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "hosts", set);
    cJSON_AddNumberToObject(o, "ranks", n_ranks);
    cJSON_AddNumberToObject(o, "bytes", bytes);
    cJSON_AddNumberToObject(o, "seconds", seconds);
    cJSON_AddNumberToObject(o, "machine_Bps", 2.0 * (m - 1) / m * bytes / seconds);
    cJSON_AddNumberToObject(o, "time", (double)time(NULL));
    if (cpu_s_per_byte > 0) cJSON_AddNumberToObject(o, "link_cpu_ns", cpu_s_per_byte * 1e9);
    char *line = cJSON_PrintUnformatted(o), *path = tn_link_capacity_path();
    cJSON_Delete(o);
    char *dir = tn_xstrdup(path), *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int rc = slash && dir[0] ? tn_mkdirs(dir) : 0;
    FILE *f = rc == 0 ? fopen(path, "a") : NULL;
    if (rc == 0 && !f) rc = tn_err("%s: %s", path, strerror(errno));
    if (f && (fprintf(f, "%s\n", line ? line : "") < 0 || !line)) rc = tn_err("%s: write failed", path);
    if (f && fclose(f) != 0 && rc == 0) rc = tn_err("%s: %s", path, strerror(errno));
    free(line), free(path), free(dir);
    return rc;
}

int tn_link_capacity_find(const char *const *hosts, int n_ranks, double *machine_Bps, double *when,
                          double *cpu_s_per_byte) {
    char *path = tn_link_capacity_path();
    size_t len = 0;
    char *text = tn_file_exists(path) ? tn_read_file(path, &len, (size_t)64 << 20) : NULL;
    free(path);
    if (!text) return 0;
    cJSON *want = machine_set(hosts, n_ranks);
    int found = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *o = cJSON_Parse(line);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hosts"),
                    *r = cJSON_GetObjectItemCaseSensitive(o, "machine_Bps"), *t = cJSON_GetObjectItemCaseSensitive(o, "time"),
                    *cpu = cJSON_GetObjectItemCaseSensitive(o, "link_cpu_ns");
        if (h && cJSON_Compare(h, want, 1) && cJSON_IsNumber(r) && r->valuedouble > 0) { /* the newest wins */
            *machine_Bps = r->valuedouble, *when = cJSON_IsNumber(t) ? t->valuedouble : 0;
            if (cpu_s_per_byte) *cpu_s_per_byte = cJSON_IsNumber(cpu) && cpu->valuedouble > 0 ? cpu->valuedouble * 1e-9 : 0;
            found = 1;
        }
        cJSON_Delete(o);
    }
    cJSON_Delete(want);
    free(text);
    return found;
}
