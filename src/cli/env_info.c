/* env_info.c -- see env_info.h. */
#include "cli/env_info.h"

#include "backend/backend.h"

#include <cblas.h>
#undef I /* <complex.h> via cblas.h */
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <inttypes.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#ifdef TANDEM_HAVE_NCCL
#include <nccl.h>
#endif

#include "core/core.h"
#include "trainer/replica.h"
#include "trainer/trainer.h"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif
#ifndef TANDEM_GIT_REV
#define TANDEM_GIT_REV "unknown"
#endif

static void add(tn_env_row *rows, int *n, const char *key, const char *fmt, ...) TN_PRINTF(4, 5);
static void add(tn_env_row *rows, int *n, const char *key, const char *fmt, ...) {
    if (*n >= TN_ENV_MAX_ROWS) return;
    tn_env_row *r = &rows[(*n)++];
    snprintf(r->key, sizeof r->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->value, sizeof r->value, fmt, ap);
    va_end(ap);
}

/* A /proc or /sys file: read to its end (their reported size is 0 or a page, not their length). NULL when
 * unreadable. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 14, used = 0;
    char *buf = tn_xmalloc(cap);
    for (size_t got; (got = fread(buf + used, 1, cap - 1 - used, f)) > 0;) {
        used += got;
        if (used == cap - 1 && cap < (1u << 24)) buf = tn_xrealloc(buf, cap *= 2);
        else if (used == cap - 1) break;
    }
    fclose(f);
    buf[used] = '\0';
    return buf;
}

/* The value of the first "KEY<sep>value" line of a text file (/proc/cpuinfo, /etc/os-release), unquoted. */
static int file_field(const char *path, const char *key, char sep, char *out, size_t n) {
    char *text = read_text(path);
    out[0] = '\0';
    if (!text) return 0;
    size_t klen = strlen(key);
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, klen) != 0) continue;
        char *v = line + klen;
        while (*v == ' ' || *v == '\t') v++;
        if (*v != sep) continue;
        v++;
        while (*v == ' ' || *v == '"') v++;
        size_t vlen = strcspn(v, "\n");
        while (vlen && (v[vlen - 1] == '"' || v[vlen - 1] == ' ')) vlen--;
        snprintf(out, n, "%.*s", (int)vlen, v);
        break;
    }
    free(text);
    return out[0] != '\0';
}

/* SIMD extensions that decide which kernels OpenBLAS and GCC's vector code can use. */
static void simd_flags(char *out, size_t n) {
    static const char *const wanted[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                         "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", NULL};
    char flags[8192];
    out[0] = '\0';
    if (!file_field("/proc/cpuinfo", "flags", ':', flags, sizeof flags)) {
        snprintf(out, n, "unknown (/proc/cpuinfo has no flags)");
        return;
    }
    size_t used = 0;
    for (int i = 0; wanted[i]; i++) {
        char pat[40];
        snprintf(pat, sizeof pat, " %s ", wanted[i]);
        char padded[8200];
        snprintf(padded, sizeof padded, " %s ", flags);
        if (strstr(padded, pat) && used + strlen(wanted[i]) + 2 < n)
            used += (size_t)snprintf(out + used, n - used, "%s%s", used ? " " : "", wanted[i]);
    }
    if (!used) snprintf(out, n, "none of sse4_2/avx/avx2/avx512");
}

/* Physical cores and sockets: distinct (physical id, core id) pairs of /proc/cpuinfo. */
static void core_counts(int *cores, int *sockets) {
    char *text = read_text("/proc/cpuinfo");
    *cores = *sockets = 0;
    if (!text) return;
    int seen_pairs[4096][2], n_pairs = 0, seen_sock[256], n_sock = 0, phys = 0;
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) {
            phys = v;
            int known = 0;
            for (int i = 0; i < n_sock; i++) known |= seen_sock[i] == v;
            if (!known && n_sock < 256) seen_sock[n_sock++] = v;
        } else if (sscanf(line, "core id : %d", &v) == 1) {
            int known = 0;
            for (int i = 0; i < n_pairs; i++) known |= seen_pairs[i][0] == phys && seen_pairs[i][1] == v;
            if (!known && n_pairs < 4096) seen_pairs[n_pairs][0] = phys, seen_pairs[n_pairs++][1] = v;
        }
    }
    free(text);
    *cores = n_pairs, *sockets = n_sock;
}

static void numa_nodes(char *out, size_t n) {
    char list[200] = "";
    size_t used = 0;
    int count = 0;
    for (int node = 0; node < 1024; node++) {
        char path[96], cpus[64];
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
        char *text = read_text(path);
        if (!text) continue;
        snprintf(cpus, sizeof cpus, "%.*s", (int)strcspn(text, "\n"), text);
        free(text);
        count++;
        if (used + strlen(cpus) + 16 < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%snode%d: %s", used ? ", " : "", node, cpus);
    }
    if (count) snprintf(out, n, "%d (%s)", count, list);
    else snprintf(out, n, "unknown (no /sys/devices/system/node)");
}

static void mpi_library(char *out, size_t n) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(v, &len);
    v[strcspn(v, "\n")] = '\0';
    /* "Open MPI v4.1.4, package: Debian OpenMPI, ident: ...": version and package */
    char *ident = strstr(v, ", ident:");
    if (ident) *ident = '\0';
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    snprintf(out, n, "%.180s (MPI %d.%d)", v, major, minor);
}

/* CUDA through the driver library, when the machine has one (independent of tandem's own CUDA backend). */
static void cuda_rows(tn_env_row *rows, int *n) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        add(rows, n, "CUDA driver", "none (libcuda.so.1 not found)");
        return;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*version)(int *) = (int (*)(int *))dlsym(lib, "cuDriverGetVersion");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(lib, "cuDeviceGet");
    int (*name)(char *, int, int) = (int (*)(char *, int, int))dlsym(lib, "cuDeviceGetName");
    int v = 0, devs = 0;
    if (!init || !version || !count || !get || !name || version(&v) != 0) {
        add(rows, n, "CUDA driver", "libcuda.so.1 present but unusable");
    } else {
        add(rows, n, "CUDA driver", "%d.%d", v / 1000, v % 1000 / 10);
        if (init(0) != 0 || count(&devs) != 0) {
            add(rows, n, "GPUs", "none usable (cuInit failed)");
        } else {
            char list[224] = "";
            size_t used = 0;
            for (int d = 0; d < devs; d++) {
                int dev;
                char nm[96] = "?";
                if (get(&dev, d) == 0) name(nm, (int)sizeof nm, dev);
                if (used + strlen(nm) + 4 < sizeof list) used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", d ? ", " : "", nm);
            }
            add(rows, n, "GPUs", "%d%s%s", devs, devs ? ": " : "", list);
        }
    }
    dlclose(lib);
}

int tn_env_collect(tn_env_row rows[TN_ENV_MAX_ROWS]) {
    int n = 0;
    char buf[1024];
    uint64_t fp = tn_build_fingerprint();
    add(rows, &n, "tandem version", "%s (git %s)", TANDEM_VERSION, TANDEM_GIT_REV);
    add(rows, &n, "tandem build", "%016" PRIx64, fp); /* what the ranks compare at start-up */
#if defined(__clang__)
    add(rows, &n, "compiler", "%s", __VERSION__);
#elif defined(__GNUC__)
    add(rows, &n, "compiler", "GCC %s", __VERSION__);
#endif
    struct utsname u;
    if (uname(&u) == 0) add(rows, &n, "kernel", "%s %s", u.sysname, u.release);
    if (file_field("/etc/os-release", "PRETTY_NAME", '=', buf, sizeof buf)) add(rows, &n, "OS", "%s", buf);
    add(rows, &n, "glibc", "%s", gnu_get_libc_version());
    if (!file_field("/proc/cpuinfo", "model name", ':', buf, sizeof buf)) snprintf(buf, sizeof buf, "unknown");
    add(rows, &n, "CPU model", "%s", buf);
    simd_flags(buf, 224);
    add(rows, &n, "CPU SIMD flags", "%s", buf);
    int cores, sockets;
    core_counts(&cores, &sockets);
    cpu_set_t set;
    int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
    add(rows, &n, "CPUs", "%ld online, %d usable by this process", sysconf(_SC_NPROCESSORS_ONLN), usable);
    if (cores) add(rows, &n, "physical cores", "%d in %d socket(s)", cores, sockets);
    if (file_field("/proc/meminfo", "MemTotal", ':', buf, sizeof buf))
        add(rows, &n, "memory", "%.1f GiB", (double)strtoll(buf, NULL, 10) / (1024.0 * 1024.0));
    numa_nodes(buf, 224);
    add(rows, &n, "NUMA nodes", "%s", buf);
    add(rows, &n, "OpenBLAS", "%s", openblas_get_config());
    /* main.c's choice ("SET:OPENBLAS'S"), when OPENBLAS_CORETYPE is still what it set (not a user's, nor one that
     * came with the variables another machine's tandem forwarded) */
    const char *forced = getenv("OPENBLAS_CORETYPE"), *choice = getenv("TANDEM_OPENBLAS_CHOICE");
    const char *colon = choice ? strchr(choice, ':') : NULL;
    if (forced && colon && strlen(forced) == (size_t)(colon - choice) && strncmp(forced, choice, strlen(forced)) == 0)
        add(rows, &n, "OpenBLAS core type", "%s (OPENBLAS_CORETYPE=%s set by tandem: OpenBLAS chose %s, its fallback "
            "for a CPU model it does not know)", openblas_get_corename(), forced, colon + 1);
    else
        add(rows, &n, "OpenBLAS core type", "%s%s%s%s", openblas_get_corename(), forced ? " (OPENBLAS_CORETYPE=" : "",
            forced ? forced : "", forced ? ")" : "");
    int par = openblas_get_parallel();
    add(rows, &n, "OpenBLAS threads", "%d (%s)", openblas_get_num_threads(),
        par == 0 ? "sequential" : par == 1 ? "pthreads" : par == 2 ? "OpenMP" : "?");
    const char *omp = getenv("OMP_NUM_THREADS"), *wait = getenv("OMP_WAIT_POLICY");
    add(rows, &n, "OpenMP threads", "%d (OMP_NUM_THREADS%s%s, OMP_WAIT_POLICY%s%s)", omp_get_max_threads(),
        omp ? "=" : " unset", omp ? omp : "", wait ? "=" : " unset", wait ? wait : "");
    mpi_library(buf, 224);
    add(rows, &n, "MPI", "%s", buf);
    const char *be = getenv("TANDEM_COMM_BACKEND");
#ifdef TANDEM_HAVE_NCCL
    add(rows, &n, "comm backend", "%s", be && *be ? be : "mpi (nccl between GPUs)");
#else
    add(rows, &n, "comm backend", "%s", be && *be ? be : "mpi");
#endif
    if (tn_backend_have_cuda()) add(rows, &n, "tandem GPU backend", "CUDA, %d device(s) visible", tn_backend_gpu_count());
    else add(rows, &n, "tandem GPU backend", "not built in (nvcc not found at build time)");
#ifdef TANDEM_HAVE_NCCL
    int nv = 0;
    ncclGetVersion(&nv);
    add(rows, &n, "NCCL", "%d.%d.%d (built in)", nv / 10000, nv / 100 % 100, nv % 100);
#else
    add(rows, &n, "NCCL", "not built in (no CUDA toolkit with nccl.h at build time)");
#endif
    cuda_rows(rows, &n);
    tn_trainer_strategies(buf, 224);
    add(rows, &n, "sync strategies", "%s (sync_mode, zero_stage, comm_compression pick one)", buf);
    return n;
}

/* ---- the table ---- */

#define COL_WIDTH 38

/* Line `line` (0-based) of `s` wrapped at `w` columns, preferring to break after a space; "" past the end. */
static void wrapped_line(const char *s, int w, int line, char *out) {
    size_t len = strlen(s), pos = 0;
    for (int l = 0;; l++) {
        size_t take = len - pos;
        if (take > (size_t)w) {
            take = (size_t)w;
            for (size_t k = take; k > (size_t)w / 2; k--)
                if (s[pos + k - 1] == ' ') {
                    take = k;
                    break;
                }
        }
        if (l == line) {
            size_t shown = take;
            while (shown && s[pos + shown - 1] == ' ') shown--;
            snprintf(out, (size_t)w + 1, "%.*s", (int)shown, s + pos);
            return;
        }
        pos += take;
        if (pos >= len) {
            out[0] = '\0';
            return;
        }
    }
}

static int line_count(const char *s, int w) {
    char tmp[256];
    int l = 1;
    while (l < 64) {
        wrapped_line(s, w, l, tmp);
        if (!tmp[0]) break;
        l++;
    }
    return l;
}

int tn_env_print_table(FILE *f, int n_cols, const char *const *titles, const tn_env_row *const *cols, int n_rows) {
    int kw = 4;
    for (int r = 0; r < n_rows; r++) kw = (int)strlen(cols[0][r].key) > kw ? (int)strlen(cols[0][r].key) : kw;
    int *w = tn_xcalloc((size_t)n_cols, sizeof *w);
    for (int c = 0; c < n_cols; c++) {
        w[c] = (int)strlen(titles[c]);
        for (int r = 0; r < n_rows; r++) w[c] = (int)strlen(cols[c][r].value) > w[c] ? (int)strlen(cols[c][r].value) : w[c];
        if (n_cols > 1 && w[c] > COL_WIDTH) w[c] = COL_WIDTH;
        if (w[c] > 200) w[c] = 200;
    }
    fprintf(f, "  %-*s", kw, "host");
    for (int c = 0; c < n_cols; c++) fprintf(f, " | %-*.*s", c + 1 < n_cols ? w[c] : 0, w[c], titles[c]);
    fprintf(f, "\n");
    int differ = 0;
    char names[1024] = "";
    for (int r = 0; r < n_rows; r++) {
        int same = 1;
        for (int c = 1; c < n_cols; c++) same &= strcmp(cols[c][r].value, cols[0][r].value) == 0;
        if (!same && strlen(names) + strlen(cols[0][r].key) + 3 < sizeof names)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", differ ? ", " : "", cols[0][r].key);
        differ += !same;
        int lines = 1;
        for (int c = 0; c < n_cols; c++) lines = line_count(cols[c][r].value, w[c]) > lines ? line_count(cols[c][r].value, w[c]) : lines;
        for (int l = 0; l < lines; l++) {
            fprintf(f, "%c %-*s", l == 0 && !same ? '*' : ' ', kw, l == 0 ? cols[0][r].key : "");
            for (int c = 0; c < n_cols; c++) {
                char part[256];
                wrapped_line(cols[c][r].value, w[c], l, part);
                fprintf(f, " | %-*s", c + 1 < n_cols ? w[c] : 0, part);
            }
            fprintf(f, "\n");
        }
    }
    if (n_cols > 1) {
        if (differ) fprintf(f, "* %d row(s) differ between the %d machines: %s\n", differ, n_cols, names);
        else fprintf(f, "all %d machines agree on every row\n", n_cols);
    }
    free(w);
    return differ;
}
