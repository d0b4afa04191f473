/* cmd_bench_allreduce.c -- `tandem bench allreduce`: nccl-tests-style table of tandem's allreduce path
 * (tn_comm_allreduce_f32) next to plain MPI_Allreduce, same ranks, same run; rank 0 prints.
 *
 *   tandem bench allreduce [--min 4K] [--max 256M] [--iters N] [--warmup N] [--no-mpi]
 *
 * Sizes double from --min to --max bytes (suffix K/M/G = 2^10/2^20/2^30). Per size and path: warmup
 * calls, a barrier, N timed calls back to back; time = the slowest rank's mean per call.
 * algbw = size/time, busbw = algbw * 2(n-1)/n (n = ranks), as nccl-tests report it. cpu = CPU seconds
 * the whole process used during the timed calls per second of them (1.0 = one core busy: Open MPI spins
 * while it waits; tandem's caller sleeps and only the progress thread runs; "-" below 50 ms of calls).
 * #wrong = elements (all ranks) that differ from the closed-form sum after a checked call.
 * Between machines it also prints the link's CPU cost at the largest size: CPU nanoseconds one machine spends per
 * byte its link carries each way (its ranks' processes, and the kernel's interrupt and softirq time from
 * /proc/stat, which no process is charged for: the TCP stack's receive path), what `tandem plan --link-cpu`
 * takes. Machines that share one kernel (network namespaces on one host: the same boot_id) split its time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"
#include "outputs/link_capacity.h"

typedef struct {
    double us, algbw, busbw, cpu, wrong;
    double proc_s, kernel_s; /* this rank's process CPU and the kernel's irq + softirq time over the timed calls */
} row;

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Seconds of interrupt and softirq time over all CPUs since boot (/proc/stat's irq and softirq), or 0. */
static double kernel_irq_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[7] = {0};
    int got = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) : 0;
    if (f) fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return got == 7 && hz > 0 ? (double)(v[5] + v[6]) / (double)hz : 0;
}

static void cpu_str(char *s, size_t n, double cpu) {
    if (cpu < 0) snprintf(s, n, "-");
    else snprintf(s, n, "%.2f", cpu);
}

static int parse_bytes(const char *s, size_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (end == s || *end || v == 0 || v > (1ull << 40) >> shift)
        return tn_err("bench allreduce: '%s' is not a size in bytes (e.g. 4096, 4K, 256M)", s);
    *out = (size_t)(v << shift);
    if (*out % sizeof(float)) return tn_err("bench allreduce: size %s is not a whole number of floats", s);
    return 0;
}

static int parse_count(const char *s, const char *what, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > 1000000)
        return tn_err("bench allreduce: %s '%s' is not an integer in [%d, 1000000]", what, s, lo);
    *out = (int)v;
    return 0;
}

/* Rank r's data and the sum over all ranks: small integers, exact in float in any order. */
static void fill(float *b, size_t n, int r) {
    for (size_t i = 0; i < n; i++) b[i] = (float)(r + 1 + (int)(i % 61));
}

static size_t count_wrong(const float *b, size_t n, int P) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != (float)(P * (P + 1) / 2 + P * (int)(i % 61));
    return bad;
}

/* One size on one path; collective. Like nccl-tests: warmup calls, a barrier, then `iters` calls back to
 * back (in place, so the values grow; timing does not depend on them), then one call on fresh data that
 * is checked. */
static int measure(tn_comm *c, int mpi, float *buf, size_t n, int iters, int warmup, row *out) {
    const tn_comm_info *in = tn_comm_get_info(c);
#define CALL() (mpi ? tn_comm_allreduce_f32_mpi(c, buf, n) : tn_comm_allreduce_f32(c, buf, n))
    fill(buf, n, in->rank);
    for (int it = 0; it < warmup; it++)
        if (CALL() != 0) return -1;
    if (tn_comm_barrier(c) != 0) return -1;
    double c0 = cpu_now(), k0 = kernel_irq_s(), t0 = tn_now();
    for (int it = 0; it < iters; it++)
        if (CALL() != 0) return -1;
    double wall = tn_now() - t0, cpu = cpu_now() - c0;
    out->proc_s = cpu, out->kernel_s = kernel_irq_s() - k0;
    fill(buf, n, in->rank);
    if (CALL() != 0) return -1;
#undef CALL
    int64_t slowest = (int64_t)(wall * 1e9);
    /* getrusage is too coarse for a few milliseconds: no cpu figure below 50 ms of timed calls */
    double sums[2] = {(double)count_wrong(buf, n, in->size), wall >= 0.05 ? cpu / wall / in->size : -1e9};
    if (tn_comm_allreduce_max_i64(c, &slowest, 1) != 0 || tn_comm_allreduce_f64(c, sums, 2) != 0) return -1;
    double sec = (double)slowest * 1e-9 / iters, bytes = (double)n * sizeof(float), P = in->size;
    out->us = sec * 1e6;
    out->algbw = bytes / sec / 1e9;
    out->busbw = out->algbw * 2.0 * (P - 1) / P;
    out->cpu = sums[1]; /* mean over ranks */
    out->wrong = sums[0];
    return 0;
}

/* Rank 0: the largest size's rate between these machines, for the dashboard of later jobs on them. */
static void record_capacity(const tn_comm *c, double bytes, double sec, double cpu_s_per_byte) {
    int n = tn_comm_get_info(c)->size;
    const char **hosts = tn_xmalloc((size_t)n * sizeof *hosts);
    for (int r = 0; r < n; r++) hosts[r] = tn_comm_host_of(c, r);
    char *path = tn_link_capacity_path();
    if (tn_link_capacity_record(hosts, n, bytes, sec, cpu_s_per_byte) == 0)
        printf("# link capacity between these machines (%.0f MB in %.4f s) recorded in %s (tandem's dashboard shows it)\n",
               bytes / 1e6, sec, path);
    else
        printf("# could not record the link capacity: %s\n", tn_errmsg());
    free(path), free(hosts);
}

/* How many machines share this rank's kernel (the same boot_id): network namespaces on one host. 1 when unknown. */
static int machines_sharing_kernel(tn_comm *c) {
    const tn_comm_info *in = tn_comm_get_info(c);
    struct {
        char id[40];
        int node;
    } me = {"", in->node}, *all = tn_xcalloc((size_t)in->size, sizeof *all);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(me.id, sizeof me.id, f)) snprintf(me.id, sizeof me.id, "rank %d", in->rank); /* counts alone */
    if (f) fclose(f);
    int n = 0;
    if (tn_comm_allgather(c, &me, sizeof me, all) == 0) {
        for (int r = 0; r < in->size; r++) {
            int first = strcmp(all[r].id, me.id) == 0;
            for (int q = 0; q < r && first; q++) first = !(all[q].node == all[r].node && strcmp(all[q].id, me.id) == 0);
            n += first; /* each machine with my kernel once */
        }
    }
    free(all);
    return n > 0 ? n : 1;
}

/* Rank 0 prints the link's CPU ns a byte (see the top): every machine's processes and its kernel share, over the
 * bytes each machine's link carried each way (a ring all-reduce: 2 (M-1)/M of the buffer), the mean machine.
 * Every rank gets it in *cpu_s_per_byte (0 when nothing crossed), which rank 0 records with the link's rate. */
static int report_link_cpu(tn_comm *c, const row *t, double bytes, int iters, double *cpu_s_per_byte) {
    const tn_comm_info *in = tn_comm_get_info(c);
    int sharing = machines_sharing_kernel(c); /* collective: every rank */
    double kernel = in->local_rank == 0 ? t->kernel_s / sharing : 0;
    double sums[2] = {t->proc_s, kernel};
    if (tn_comm_allreduce_f64(c, sums, 2) != 0) return -1;
    double M = in->n_nodes, each_way = 2 * (M - 1) / M * bytes * iters * M; /* over all machines */
    if (in->rank == 0 && each_way > 0)
        printf("# link CPU at %.0f MB: %.1f ns a byte each way per machine (processes %.1f, kernel irq+softirq %.1f): "
               "tandem plan --link-cpu %.1f\n", bytes / 1e6, 1e9 * (sums[0] + sums[1]) / each_way,
               1e9 * sums[0] / each_way, 1e9 * sums[1] / each_way, 1e9 * (sums[0] + sums[1]) / each_way);
    *cpu_s_per_byte = each_way > 0 ? (sums[0] + sums[1]) / each_way : 0;
    return 0;
}

int tn_cmd_bench_allreduce(int argc, char **argv) {
    size_t lo = 4096, hi = 256u << 20;
    int iters = 10, warmup = 2, with_mpi = 1;
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        if (strcmp(argv[i], "--min") == 0 && i + 1 < argc) rc = parse_bytes(argv[++i], &lo);
        else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) rc = parse_bytes(argv[++i], &hi);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) rc = parse_count(argv[++i], "--iters", 1, &iters);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) rc = parse_count(argv[++i], "--warmup", 0, &warmup);
        else if (strcmp(argv[i], "--no-mpi") == 0) with_mpi = 0;
        else rc = tn_err("bench allreduce: unexpected argument '%s' (expected --min, --max, --iters, --warmup, --no-mpi)", argv[i]);
        if (rc != 0) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            return 1;
        }
    }
    if (lo > hi) {
        fprintf(stderr, "tandem: error: bench allreduce: --min %zu is above --max %zu\n", lo, hi);
        return 1;
    }
    tn_comm *c = tn_comm_init(NULL, NULL);
    if (!c) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    const tn_comm_info *in = tn_comm_get_info(c);
    float *buf = tn_xalloc_floats(hi / sizeof(float));
    int64_t most_local = in->local_size;
    if (tn_comm_allreduce_max_i64(c, &most_local, 1) != 0) goto fail;
    if (in->rank == 0) {
        printf("# tandem bench allreduce: %d ranks on %d machine(s) (up to %lld per machine), backend %s, "
               "iters %d, warmup %d\n", in->size, in->n_nodes, (long long)most_local, tn_comm_backend_name(c),
               iters, warmup);
        printf("# %10s %11s %5s | %38s %7s | %38s %7s\n", "", "", "", "tandem (tn_comm_allreduce_f32)", "",
               with_mpi ? "plain MPI_Allreduce" : "(skipped)", "");
        printf("# %10s %11s %5s | %10s %9s %9s %5s %7s | %10s %9s %9s %5s %7s\n", "size(B)", "count", "type",
               "time(us)", "algbw", "busbw", "cpu", "#wrong", "time(us)", "algbw", "busbw", "cpu", "#wrong");
        printf("# %10s %11s %5s | %10s %9s %9s %5s %7s | %10s %9s %9s %5s %7s\n", "", "", "", "", "(GB/s)",
               "(GB/s)", "", "", "", "(GB/s)", "(GB/s)", "", "");
        fflush(stdout);
    }
    double wrong = 0, tandem_wall = 0, top_bytes = 0, top_sec = 0; /* the largest size, for link_capacity.h */
    row top = {0};
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
        size_t n = bytes / sizeof(float);
        row t, m = {0};
        double w0 = tn_now();
        if (measure(c, 0, buf, n, iters, warmup, &t) != 0) goto fail;
        tandem_wall += tn_now() - w0;
        top_bytes = (double)bytes, top_sec = t.us * 1e-6, top = t;
        if (with_mpi && measure(c, 1, buf, n, iters, warmup, &m) != 0) goto fail;
        wrong += t.wrong + m.wrong;
        if (in->rank == 0) {
            char tc[16], mc[16];
            cpu_str(tc, sizeof tc, t.cpu), cpu_str(mc, sizeof mc, m.cpu);
            printf("  %10zu %11zu %5s | %10.1f %9.4f %9.4f %5s %7.0f", bytes, n, "float", t.us, t.algbw, t.busbw, tc,
                   t.wrong);
            if (with_mpi) printf(" | %10.1f %9.4f %9.4f %5s %7.0f\n", m.us, m.algbw, m.busbw, mc, m.wrong);
            else printf(" |\n");
            fflush(stdout);
        }
        if (bytes > hi / 2) break; /* no overflow past hi */
    }
    double link_cpu = 0; /* s a byte, for link_capacity.h */
    if (in->n_nodes > 1 && report_link_cpu(c, &top, top_bytes, iters, &link_cpu) != 0) goto fail;
    tn_comm_stats st;
    tn_comm_get_stats(c, &st);
    double cpu_busy[2] = {st.progress_cpu_s, st.progress_busy_s};
    if (tn_comm_allreduce_f64(c, cpu_busy, 2) != 0) goto fail;
    if (in->rank == 0) {
        if (cpu_busy[1] / in->size >= 0.05)
            printf("# progress thread (mean over ranks): %.3f s CPU over %.3f s with an op in flight = %.1f%% of a "
                   "core; tandem phase wall %.1f s\n", cpu_busy[0] / in->size, cpu_busy[1] / in->size,
                   100.0 * cpu_busy[0] / cpu_busy[1], tandem_wall);
        printf("# %s: %.0f wrong elements\n", wrong == 0 ? "check ok" : "CHECK FAILED", wrong);
        if (wrong == 0 && in->n_nodes > 1) record_capacity(c, top_bytes, top_sec, link_cpu);
    }
    tn_free_aligned(buf);
    tn_comm_finalize(c);
    return wrong == 0 ? 0 : 1;
fail:
    fprintf(stderr, "tandem: error: rank %d: %s\n", in->rank, tn_errmsg());
    tn_comm_abort(c, 1);
    return 1;
}
