/* monitor.c -- see monitor.h. */
#include "trainer/monitor.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/compress.h"
#include "core/core.h"
#include "outputs/link_capacity.h"
#include "outputs/pyfmt.h"
#include "outputs/rank_log.h"

#define RING 128          /* steps rank 0 holds while notes come in */
#define SLACK 64          /* steps after which a missing note is given up */
#define MEMORY_EVERY_S 2.0
#define LINK_EVERY_S 0.5
#define TOPO_MAX 3072     /* bytes of one machine's `tandem topo` report */
#define TOPO_TIMEOUT_S 10.0
#define RANKS_PER_LINE 16 /* a step line for every step up to this many ranks; beyond, for every ceil(ranks/16)th */

/* One rank's step, as it travels to rank 0 (a few bytes: floats are plenty for seconds and byte counts). */
typedef struct {
    int32_t step, samples;
    float times[4];   /* data, compute, wait, optimizer (tn_step_times) */
    float mem[4];     /* parameters, gradients, optimizer state, resident bytes; mem[3] < 0: not sampled */
    float link[2];    /* this machine's bytes/s in, out; < 0: not sampled (or not its first rank) */
    float cost;       /* seconds this rank has spent in the monitor */
} note;

typedef struct {
    int step, have, own; /* own: rank 0's note is in (it gives the time) */
    double time;
    note *notes;         /* [world] */
    unsigned char *got;  /* [world] */
} pending;

typedef struct {
    char host[64];
    int32_t node, local_rank, threads, pad;
    char device[96];
} rank_shape;

struct tn_monitor {
    const tn_trainer *t;
    const tn_trainer_info *in; /* t's, kept current by the trainer */
    tn_comm *comm;
    int rank, world, n_nodes, first_of_machine;
    int32_t *node_of;     /* [world], rank 0 */
    double t0, cost, worst_cost, last_mem, last_link;
    double link_rx, link_tx; /* the previous counter reading */
    int have_link;
    int every;            /* steps between two step lines (and notes) */
    tn_rank_log *log;     /* rank 0 */
    pending ring[RING];
    int newest;           /* rank 0's newest step */
    int log_failed;
};

/* ---- samples */

/* Bytes received and sent through this machine's network interfaces other than the loopback. */
static int read_net_dev(double *rx, double *tx) {
    FILE *f = fopen("/proc/net/dev", "r");
    if (!f) return -1;
    char line[512];
    double r = 0, s = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue; /* the two header lines */
        *colon = 0;
        const char *name = line + strspn(line, " ");
        unsigned long long v[9];
        if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7], &v[8]) != 9 || strcmp(name, "lo") == 0)
            continue;
        r += (double)v[0], s += (double)v[8];
    }
    fclose(f);
    *rx = r, *tx = s;
    return 0;
}

static double resident_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

static void sample_memory(const tn_trainer *t, note *n) {
    const tn_model *md = tn_trainer_get_info(t)->model;
    const tn_backend *be = md->be;
    const tn_adamw *o = tn_trainer_optimizer(t);
    n->mem[0] = (float)tn_model_param_resident(md);
    n->mem[1] = (float)be->resident(md->grad, md->n_trainable);
    n->mem[2] = (float)(be->resident(o->m, o->n) + be->resident(o->v, o->n));
    n->mem[3] = (float)resident_bytes();
}

static void sample_link(tn_monitor *m, note *n, double now) {
    double rx, tx;
    if (read_net_dev(&rx, &tx) != 0) return;
    if (m->have_link && now > m->last_link) {
        n->link[0] = (float)((rx - m->link_rx) / (now - m->last_link));
        n->link[1] = (float)((tx - m->link_tx) / (now - m->last_link));
    }
    m->link_rx = rx, m->link_tx = tx, m->have_link = 1, m->last_link = now;
}

/* ---- the job line */

/* `tandem topo --ranks N` of this machine into buf (at most cap - 1 bytes), run as a child of this program. */
static void run_topo(int local_ranks, char *buf, size_t cap) {
    snprintf(buf, cap, "(tandem topo did not run)");
    int fds[2];
    if (pipe(fds) != 0) return;
    char ranks[16], exe[] = "/proc/self/exe", cmd[] = "topo", opt[] = "--ranks";
    snprintf(ranks, sizeof ranks, "%d", local_ranks);
    char *argv[] = {exe, cmd, opt, ranks, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    extern char **environ;
    pid_t pid;
    int rc = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return;
    }
    size_t got = 0;
    double until = tn_now() + TOPO_TIMEOUT_S;
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int left = (int)((until - tn_now()) * 1000);
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        char tmp[1024];
        ssize_t k = read(fds[0], tmp, sizeof tmp);
        if (k <= 0) break;
        size_t take = got + (size_t)k < cap - 1 ? (size_t)k : cap - 1 - got;
        memcpy(buf + got, tmp, take);
        got += take;
    }
    buf[got] = 0;
    close(fds[0]);
    if (waitpid(pid, NULL, WNOHANG) == 0) kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ZeRO's model state per rank for P trainable parameters over N ranks (docs/performance.md): 4 bytes of
 * parameters, 4 of gradients and 8 of AdamW moments per parameter, the sharded parts divided by N. */
static double zero_formula(int stage, double P, int N, const char **text) {
    static const char *const texts[] = {"16P", "8P + 8P/N", "4P + 12P/N", "16P/N"};
    *text = texts[stage < 0 || stage > 3 ? 0 : stage];
    switch (stage) {
    case 1: return 8 * P + 8 * P / N;
    case 2: return 4 * P + 12 * P / N;
    case 3: return 16 * P / N;
    default: return 16 * P;
    }
}

static void add_capacity(cJSON *job, const tn_comm *comm, int world, int n_nodes) {
    const char **hosts = tn_xmalloc((size_t)world * sizeof *hosts);
    for (int r = 0; r < world; r++) hosts[r] = tn_comm_host_of(comm, r);
    double bps = 0, when = 0;
    char *path = tn_link_capacity_path(), note_text[TN_PATH_MAX + 200];
    if (n_nodes < 2) {
        snprintf(note_text, sizeof note_text, "one machine: the ranks exchange through shared memory, no network link");
        cJSON_AddNullToObject(job, "capacity");
    } else if (tn_link_capacity_find(hosts, world, &bps, &when, NULL)) {
        cJSON *c = cJSON_AddObjectToObject(job, "capacity");
        cJSON_AddNumberToObject(c, "machine_Bps", bps);
        cJSON_AddNumberToObject(c, "time", when);
        snprintf(note_text, sizeof note_text, "measured by tandem bench allreduce between these machines (%s)", path);
    } else {
        snprintf(note_text, sizeof note_text, "not measured: run `tandem bench allreduce` on these machines (it records "
                 "the capacity in %s)", path);
        cJSON_AddNullToObject(job, "capacity");
    }
    cJSON_AddStringToObject(job, "capacity_note", note_text);
    free(path), free(hosts);
}

static char *job_line(const tn_monitor *m, const rank_shape *shapes, const char *topo) {
    const tn_trainer_info *t = m->in;
    const tn_model *md = t->model;
    cJSON *job = cJSON_CreateObject();
    cJSON_AddStringToObject(job, "kind", "job");
    cJSON_AddNumberToObject(job, "step", t->step);
    cJSON_AddNumberToObject(job, "version", 1);
    cJSON_AddNumberToObject(job, "unix_time", (double)time(NULL));
    cJSON_AddNumberToObject(job, "total_steps", t->total_steps);
    cJSON_AddNumberToObject(job, "world", m->world);
    cJSON_AddNumberToObject(job, "machines", m->n_nodes);
    cJSON_AddStringToObject(job, "model", md->cfg.model_type);
    cJSON_AddStringToObject(job, "output_dir", t->cfg->output_dir);
    cJSON_AddStringToObject(job, "config", t->cfg->source_path);
    cJSON_AddStringToObject(job, "sync", t->sync); /* the strategy that runs, as the log's banner names it */
    cJSON_AddStringToObject(job, "compression", tn_codec_name((tn_codec)t->cfg->comm_compression));
    cJSON_AddBoolToObject(job, "balance_ranks", t->balance);
    cJSON_AddNumberToObject(job, "zero_stage", t->zero_stage);
    cJSON_AddNumberToObject(job, "trainable", (double)md->n_trainable);
    cJSON_AddNumberToObject(job, "frozen", (double)(md->n_total - md->n_trainable));
    cJSON_AddNumberToObject(job, "global_batch", (double)t->world * t->micro_batch * t->accum);
    cJSON_AddNumberToObject(job, "bytes_per_step", tn_trainer_bytes_per_step(m->t));
    const char *text;
    double formula = zero_formula(t->zero_stage, (double)md->n_trainable, m->world, &text);
    cJSON *f = cJSON_AddObjectToObject(job, "memory_formula");
    cJSON_AddNumberToObject(f, "bytes", formula);
    cJSON_AddStringToObject(f, "text", text);
    add_capacity(job, m->comm, m->world, m->n_nodes);
    cJSON *ranks = cJSON_AddArrayToObject(job, "ranks");
    for (int r = 0; r < m->world; r++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddStringToObject(o, "host", shapes[r].host);
        cJSON_AddNumberToObject(o, "node", shapes[r].node);
        cJSON_AddNumberToObject(o, "local_rank", shapes[r].local_rank);
        cJSON_AddNumberToObject(o, "threads", shapes[r].threads);
        cJSON_AddStringToObject(o, "device", shapes[r].device);
        cJSON_AddItemToArray(ranks, o);
    }
    if (topo) {
        cJSON *tp = cJSON_AddArrayToObject(job, "topology");
        for (int r = 0; r < m->world; r++) {
            if (shapes[r].local_rank != 0) continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "node", shapes[r].node);
            cJSON_AddStringToObject(o, "host", shapes[r].host);
            cJSON_AddStringToObject(o, "text", topo + (size_t)r * TOPO_MAX);
            cJSON_AddItemToArray(tp, o);
        }
    } else {
        cJSON_AddNullToObject(job, "topology");
    }
    char *s = cJSON_PrintUnformatted(job);
    cJSON_Delete(job);
    if (!s) tn_die("out of memory formatting the job line");
    return s;
}

/* ---- start */

tn_monitor *tn_monitor_start(const tn_trainer *tr, tn_comm *comm, int topology) {
    const tn_comm_info *in = tn_comm_get_info(comm);
    const tn_trainer_info *t = tn_trainer_get_info(tr);
    tn_monitor *m = tn_xcalloc(1, sizeof *m);
    m->t = tr, m->in = t, m->comm = comm, m->t0 = tn_now();
    m->rank = in->rank, m->world = in->size, m->n_nodes = in->n_nodes, m->first_of_machine = in->local_rank == 0;
    m->last_mem = -1e9, m->last_link = -1e9;
    m->every = (m->world + RANKS_PER_LINE - 1) / RANKS_PER_LINE; /* the log grows by about 16 ranks' worth a step */
    rank_shape mine = {.node = in->node, .local_rank = in->local_rank, .threads = t->model->be->num_threads()};
    snprintf(mine.host, sizeof mine.host, "%s", in->host);
    snprintf(mine.device, sizeof mine.device, "%s", t->model->be->describe());
    rank_shape *shapes = tn_xmalloc((size_t)m->world * sizeof *shapes);
    char *topo = NULL, *my_topo = NULL;
    int rc = m->world > 1 ? tn_comm_allgather(comm, &mine, sizeof mine, shapes) : (shapes[0] = mine, 0);
    if (rc == 0 && topology) {
        my_topo = tn_xcalloc(1, TOPO_MAX);
        topo = tn_xcalloc((size_t)m->world, TOPO_MAX);
        if (m->first_of_machine) run_topo(in->local_size, my_topo, TOPO_MAX);
        rc = m->world > 1 ? tn_comm_allgather(comm, my_topo, TOPO_MAX, topo) : (memcpy(topo, my_topo, TOPO_MAX), 0);
    }
    if (rc != 0) tn_err("job monitor: the start-up exchange failed: %s", tn_errmsg());
    if (rc == 0 && m->rank == 0) {
        m->node_of = tn_xmalloc((size_t)m->world * sizeof *m->node_of);
        for (int r = 0; r < m->world; r++) m->node_of[r] = shapes[r].node;
        for (int i = 0; i < RING; i++) {
            m->ring[i].notes = tn_xcalloc((size_t)m->world, sizeof(note));
            m->ring[i].got = tn_xcalloc((size_t)m->world, 1);
            m->ring[i].step = -1;
        }
        m->newest = t->step;
        char *line = job_line(m, shapes, topo);
        if (!(m->log = tn_rank_log_open(t->cfg->output_dir, t->step)) || tn_rank_log_line(m->log, line) != 0) rc = -1;
        free(line);
    }
    free(shapes), free(topo), free(my_topo);
    if (rc != 0) {
        tn_monitor_free(m);
        return NULL;
    }
    return m;
}

void tn_monitor_clock(tn_monitor *m, double t0) {
    if (m) m->t0 = t0;
}

/* ---- rank 0: the step lines */

static void put_times(tn_strbuf *b, const note *n) {
    tn_sb_printf(b, "[%.4g,%.4g,%.4g,%.4g,%d]", n->times[0], n->times[1], n->times[2], n->times[3], n->samples);
}

static void write_line(tn_monitor *m, const char *line) {
    if (m->log_failed || !m->log) return;
    if (tn_rank_log_line(m->log, line) != 0) { /* the run goes on: this log is tandem's extra */
        fprintf(stderr, "tandem: warning: %s; " TN_RANK_LOG_NAME " stops here\n", tn_errmsg());
        m->log_failed = 1;
    }
}

/* The line of a pending step (missing notes as null), then the slot is free. */
static void flush(tn_monitor *m, pending *p) {
    if (p->step < 0) return;
    tn_strbuf b = {0};
    tn_sb_printf(&b, "{\"kind\": \"step\", \"step\": %d, \"time\": %.6g, \"ranks\": [", p->step, p->time);
    int any_mem = 0, any_link = 0;
    for (int r = 0; r < m->world; r++) {
        if (r) tn_sb_puts(&b, ", ");
        if (p->got[r]) put_times(&b, &p->notes[r]);
        else tn_sb_puts(&b, "null");
        any_mem |= p->got[r] && p->notes[r].mem[3] >= 0;
        any_link |= p->got[r] && p->notes[r].link[0] >= 0;
    }
    tn_sb_puts(&b, "]");
    if (any_mem) {
        tn_sb_puts(&b, ", \"memory\": [");
        for (int r = 0; r < m->world; r++) {
            const float *x = p->notes[r].mem;
            if (r) tn_sb_puts(&b, ", ");
            if (p->got[r] && x[3] >= 0) tn_sb_printf(&b, "[%.0f,%.0f,%.0f,%.0f]", x[0], x[1], x[2], x[3]);
            else tn_sb_puts(&b, "null");
        }
        tn_sb_puts(&b, "]");
    }
    if (any_link && m->n_nodes > 1) {
        tn_sb_puts(&b, ", \"links\": [");
        for (int nd = 0; nd < m->n_nodes; nd++) {
            int from = -1;
            for (int r = 0; r < m->world && from < 0; r++)
                if (m->node_of[r] == nd && p->got[r] && p->notes[r].link[0] >= 0) from = r;
            if (nd) tn_sb_puts(&b, ", ");
            if (from >= 0) tn_sb_printf(&b, "[%.0f,%.0f]", p->notes[from].link[0], p->notes[from].link[1]);
            else tn_sb_puts(&b, "null");
        }
        tn_sb_puts(&b, "]");
    }
    tn_sb_puts(&b, "}");
    write_line(m, b.s);
    tn_sb_free(&b);
    p->step = -1, p->have = 0, p->own = 0;
    memset(p->got, 0, (size_t)m->world);
}

static void take(tn_monitor *m, int from, const note *n, double now) {
    if (from < 0 || from >= m->world || n->step <= 0) return;
    if (from != 0 && n->cost > m->worst_cost) m->worst_cost = n->cost;
    pending *p = &m->ring[(n->step / m->every) % RING];
    if (p->step != n->step) {
        if (p->step > n->step) return; /* a note so late that its slot has moved on */
        flush(m, p);
        p->step = n->step;
    }
    if (p->got[from]) return;
    p->notes[from] = *n, p->got[from] = 1, p->have++;
    if (from == 0) p->own = 1, p->time = now - m->t0;
    if (p->have == m->world && p->own) flush(m, p);
}

/* Rank 0 after its own step: what has arrived, then the steps given up on. */
static void collect(tn_monitor *m, const note *own, double now) {
    take(m, 0, own, now);
    note n;
    int from, k;
    while ((k = tn_comm_note_recv(m->comm, &n, sizeof n, &from)) > 0)
        if ((size_t)k == sizeof n) take(m, from, &n, now);
    m->newest = own->step;
    for (int i = 0; i < RING; i++)
        if (m->ring[i].step >= 0 && m->ring[i].step <= m->newest - SLACK * m->every) flush(m, &m->ring[i]);
}

/* ---- per step */

void tn_monitor_step(tn_monitor *m, const tn_step_stats *st) {
    if (!m || m->in->step % m->every != 0) return;
    double now = tn_now();
    note n = {.step = m->in->step, .samples = (int32_t)st->samples,
              .times = {(float)st->times.data, (float)st->times.compute, (float)st->times.wait, (float)st->times.optimizer},
              .mem = {-1, -1, -1, -1}, .link = {-1, -1}};
    if (now - m->last_mem >= MEMORY_EVERY_S) sample_memory(m->t, &n), m->last_mem = now;
    if (m->first_of_machine && m->n_nodes > 1 && now - m->last_link >= LINK_EVERY_S) sample_link(m, &n, now);
    n.cost = (float)m->cost;
    if (m->rank == 0) collect(m, &n, now);
    else if (tn_comm_note_send(m->comm, &n, sizeof n) < 0)
        fprintf(stderr, "tandem: warning: rank %d: job monitor note: %s\n", m->rank, tn_errmsg());
    m->cost += tn_now() - now;
}

void tn_monitor_log(tn_monitor *m, int step, double grad_norm, double tokens_per_s) {
    if (!m || m->rank != 0) return;
    double now = tn_now();
    char line[256];
    snprintf(line, sizeof line, "{\"kind\": \"log\", \"step\": %d, \"time\": %.6g, \"grad_norm\": %.8g, \"tokens_per_s\": %.8g}",
             step, now - m->t0, isfinite(grad_norm) && grad_norm >= 0 ? grad_norm : -1, tokens_per_s);
    write_line(m, line);
    m->cost += tn_now() - now;
}

void tn_monitor_checkpoint(tn_monitor *m, int step, const char *dir) {
    if (!m || m->rank != 0) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "checkpoint");
    cJSON_AddNumberToObject(o, "step", step);
    cJSON_AddNumberToObject(o, "time", tn_now() - m->t0);
    cJSON_AddStringToObject(o, "dir", dir);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s) write_line(m, s);
    free(s);
}

void tn_monitor_end(tn_monitor *m, int failed) {
    if (!m || m->rank != 0) return;
    note n;
    int from, k;
    while ((k = tn_comm_note_recv(m->comm, &n, sizeof n, &from)) > 0) /* the last steps' notes */
        if ((size_t)k == sizeof n) take(m, from, &n, tn_now());
    for (int k = 0; k < RING; k++) { /* oldest first */
        int s = (m->newest / m->every - RING + 1 + k) * m->every;
        pending *p = &m->ring[(s / m->every % RING + RING) % RING];
        if (s > 0 && p->step == s) flush(m, p);
    }
    char line[160];
    snprintf(line, sizeof line, "{\"kind\": \"end\", \"step\": %d, \"time\": %.6g, \"status\": \"%s\"}", m->in->step,
             tn_now() - m->t0, failed ? "failed" : "finished");
    write_line(m, line);
}

double tn_monitor_cost(const tn_monitor *m, double *worst) {
    if (worst) *worst = m && m->worst_cost > m->cost ? m->worst_cost : m ? m->cost : 0;
    return m ? m->cost : 0;
}

void tn_monitor_free(tn_monitor *m) {
    if (!m) return;
    tn_rank_log_close(m->log);
    for (int i = 0; i < RING; i++) free(m->ring[i].notes), free(m->ring[i].got);
    free(m->node_of);
    free(m);
}
