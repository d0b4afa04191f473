/* dash_view.c -- see dash_view.h. */
#include "serve/dash_view.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "outputs/pyfmt.h"
#include "outputs/rank_log.h"

#define READ_PER_POLL ((size_t)8 << 20) /* bytes of one file read in one poll (a long finished run takes several) */
#define ETA_STEPS 20
#define PLAN_NAME "tandem_plan.json"

typedef struct {
    char *path;
    dev_t dev;
    ino_t ino;
    off_t off;
    tn_strbuf partial; /* a line not yet ended */
} tail;

typedef struct {
    char **v;
    int n, cap;
} batch;

struct tn_view {
    tn_store *s;
    int run, live;
    char *dir, *name, *plan_path, *results_path;
    tail log, ranks;
    struct timespec plan_mtime;
    off_t plan_size;
    int plan_seen;
    char status[16];
    double updated, shown_updated;
    char shown_status[16];
    /* the job */
    int world, total_steps;
    char **hosts;           /* [world] */
    /* per rank, the newest RANK_WINDOW complete steps: [RANK_WINDOW][world][5] (data, compute, wait, optimizer,
     * samples), and their steps */
    double *win;
    int *win_step, win_n, win_head;
    /* straggler windows */
    double *acc;            /* [world][2]: compute, samples */
    int acc_steps, strag_rank, strag_streak, strag_since, strag_named;
    double strag_ratio;
    /* memory and links, newest per rank / machine */
    double *mem;            /* [world][4], < 0: none yet */
    int mem_step, n_machines;
    double *link;           /* [machines][2] */
    int link_step;
    double link_time;
    /* eta */
    int eta_step[ETA_STEPS];
    double eta_time[ETA_STEPS];
    int eta_n;
    /* what this poll found */
    batch points, evals, extras, steps, checkpoints;
    int dirty_job, dirty_ranks, dirty_strag, dirty_mem, dirty_link, dirty_eta;
    char *job_line;
};

static void push(batch *b, char *s) {
    if (b->n == b->cap) b->v = tn_xrealloc(b->v, (size_t)(b->cap = b->cap ? 2 * b->cap : 64) * sizeof *b->v);
    b->v[b->n++] = s;
}

static void flush_batch(tn_view *v, batch *b, const char *part, int cap) {
    tn_store_append(v->s, v->run, part, (const char *const *)b->v, b->n, cap);
    for (int i = 0; i < b->n; i++) free(b->v[i]);
    b->n = 0;
}

static char *print(cJSON *o) { /* consumes o */
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) tn_die("out of memory formatting the dashboard's JSON");
    return s;
}

static void set_part(tn_view *v, const char *part, cJSON *o) {
    char *s = print(o);
    tn_store_set(v->s, v->run, part, s);
    free(s);
}

/* "H:MM:SS" or "N day(s), H:MM:SS" (Python's str(timedelta)) as seconds; -1 when not that. */
static double parse_elapsed(const char *t) {
    int d = 0, h, m, s;
    const char *comma = strchr(t, ',');
    if (comma && sscanf(t, "%d day", &d) == 1) t = comma + 1;
    if (sscanf(t, " %d:%d:%d", &h, &m, &s) != 3) return -1;
    return d * 86400.0 + h * 3600.0 + m * 60.0 + s;
}

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* ", "key": v with v written back exactly as the file had it (the shortest digits that read back to the same
 * double: cJSON's own printing rounds some to 15 digits); null when not finite. */
static void put_num(tn_strbuf *b, const char *key, double v) {
    tn_sb_printf(b, ", \"%s\": ", key);
    if (isfinite(v)) tn_sb_py_float(b, v);
    else tn_sb_puts(b, "null");
}

/* ---- the job's shape and the per-rank state sized by it */

static void free_job(tn_view *v) {
    for (int r = 0; r < v->world && v->hosts; r++) free(v->hosts[r]);
    free(v->hosts), free(v->win), free(v->win_step), free(v->acc), free(v->mem), free(v->link);
    v->hosts = NULL, v->win = NULL, v->win_step = NULL, v->acc = NULL, v->mem = NULL, v->link = NULL;
    v->world = 0, v->n_machines = 0;
}

static void size_for(tn_view *v, int world, int machines) {
    if (world == v->world && machines <= v->n_machines) return;
    free_job(v);
    v->world = world, v->n_machines = machines > 0 ? machines : 1;
    v->hosts = tn_xcalloc((size_t)world, sizeof *v->hosts);
    v->win = tn_xcalloc((size_t)RANK_WINDOW * world * 5, sizeof *v->win);
    v->win_step = tn_xcalloc(RANK_WINDOW, sizeof *v->win_step);
    v->acc = tn_xcalloc((size_t)world * 2, sizeof *v->acc);
    v->mem = tn_xmalloc((size_t)world * 4 * sizeof *v->mem);
    for (int i = 0; i < world * 4; i++) v->mem[i] = -1;
    v->link = tn_xmalloc((size_t)v->n_machines * 2 * sizeof *v->link);
    for (int i = 0; i < v->n_machines * 2; i++) v->link[i] = -1;
    v->win_n = v->win_head = v->acc_steps = 0;
    v->strag_rank = -1, v->strag_streak = 0, v->strag_named = 0, v->strag_ratio = 0;
}

static void take_job(tn_view *v, const cJSON *o, const char *line) {
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    int world = (int)num(o, "world", 0);
    if (world < 1 || world > 1 << 20 || !cJSON_IsArray(ranks)) return;
    size_for(v, world, (int)num(o, "machines", 1));
    v->total_steps = (int)num(o, "total_steps", 0);
    const cJSON *r;
    cJSON_ArrayForEach(r, ranks) {
        int k = (int)num(r, "rank", -1);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(r, "host");
        if (k >= 0 && k < world && cJSON_IsString(h)) free(v->hosts[k]), v->hosts[k] = tn_xstrdup(h->valuestring);
    }
    free(v->job_line);
    v->job_line = tn_xstrdup(line);
    v->dirty_job = 1;
}

/* ---- step lines */

/* A window of STRAGGLER_STEPS complete steps ended: who was slowest per sample, and by how much over the median. */
static void straggler_window(tn_view *v, int step) {
    int n = v->world, slow = 0;
    double *per = tn_xmalloc((size_t)n * sizeof *per);
    for (int r = 0; r < n; r++) {
        double c = v->acc[2 * r], s = v->acc[2 * r + 1];
        per[r] = s > 0 ? c / s : c;
        if (per[r] > per[slow]) slow = r;
    }
    double slowest = per[slow];
    for (int i = 1; i < n; i++) /* sorted, for the (lower) median */
        for (int k = i; k > 0 && per[k] < per[k - 1]; k--) {
            double x = per[k];
            per[k] = per[k - 1], per[k - 1] = x;
        }
    double median = per[(n - 1) / 2], ratio = median > 0 ? slowest / median : 1;
    free(per);
    if (ratio >= STRAGGLER_RATIO) {
        if (slow != v->strag_rank) v->strag_streak = 0, v->strag_since = step - STRAGGLER_STEPS + 1;
        v->strag_streak++, v->strag_rank = slow;
    } else {
        v->strag_streak = 0, v->strag_rank = -1;
    }
    v->strag_named = v->strag_streak >= STRAGGLER_WINDOWS;
    v->strag_ratio = ratio;
    memset(v->acc, 0, (size_t)n * 2 * sizeof *v->acc);
    v->acc_steps = 0;
    v->dirty_strag = 1;
}

static void take_step(tn_view *v, const cJSON *o, const char *line) {
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    int step = (int)num(o, "step", 0), n = cJSON_GetArraySize(ranks);
    if (!cJSON_IsArray(ranks) || n < 1) return;
    if (n != v->world) size_for(v, n, v->n_machines); /* a run without its job line */
    push(&v->steps, tn_xstrdup(line));
    double *row = v->win + (size_t)v->win_head * n * 5;
    int complete = 1, r = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ranks) {
        if (cJSON_GetArraySize(e) < 5) {
            complete = 0;
            break;
        }
        for (int k = 0; k < 5; k++) row[r * 5 + k] = cJSON_GetArrayItem(e, k)->valuedouble;
        r++;
    }
    if (complete) {
        v->win_step[v->win_head] = step;
        v->win_head = (v->win_head + 1) % RANK_WINDOW;
        if (v->win_n < RANK_WINDOW) v->win_n++;
        for (int q = 0; q < n; q++) v->acc[2 * q] += row[q * 5 + 1], v->acc[2 * q + 1] += row[q * 5 + 4];
        if (++v->acc_steps == STRAGGLER_STEPS) straggler_window(v, step);
        v->dirty_ranks = 1;
    }
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(o, "memory"), *links = cJSON_GetObjectItemCaseSensitive(o, "links");
    r = 0;
    cJSON_ArrayForEach(e, mem) {
        if (r < n && cJSON_GetArraySize(e) == 4)
            for (int k = 0; k < 4; k++) v->mem[r * 4 + k] = cJSON_GetArrayItem(e, k)->valuedouble;
        r++;
    }
    if (cJSON_IsArray(mem)) v->mem_step = step, v->dirty_mem = 1;
    if (cJSON_IsArray(links) && cJSON_GetArraySize(links) > v->n_machines) {
        v->link = tn_xrealloc(v->link, (size_t)cJSON_GetArraySize(links) * 2 * sizeof *v->link);
        for (int m = v->n_machines; m < cJSON_GetArraySize(links); m++) v->link[2 * m] = v->link[2 * m + 1] = -1;
        v->n_machines = cJSON_GetArraySize(links);
    }
    r = 0;
    cJSON_ArrayForEach(e, links) {
        if (cJSON_GetArraySize(e) == 2)
            for (int k = 0; k < 2; k++) v->link[r * 2 + k] = cJSON_GetArrayItem(e, k)->valuedouble;
        r++;
    }
    if (cJSON_IsArray(links)) v->link_step = step, v->link_time = num(o, "time", 0), v->dirty_link = 1;
    if (v->eta_n == ETA_STEPS) { /* the oldest goes */
        memmove(v->eta_step, v->eta_step + 1, (ETA_STEPS - 1) * sizeof *v->eta_step);
        memmove(v->eta_time, v->eta_time + 1, (ETA_STEPS - 1) * sizeof *v->eta_time);
        v->eta_n--;
    }
    v->eta_step[v->eta_n] = step, v->eta_time[v->eta_n] = num(o, "time", 0), v->eta_n++;
    v->dirty_eta = 1;
}

static void take_ranks_line(tn_view *v, const char *line, size_t len) {
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (!cJSON_IsString(kind)) {
        cJSON_Delete(o);
        return;
    }
    char *text = tn_xmalloc(len + 1);
    memcpy(text, line, len);
    text[len] = 0;
    const char *k = kind->valuestring;
    if (!strcmp(k, "job")) {
        take_job(v, o, text);
    } else if (!strcmp(k, "step")) {
        take_step(v, o, text);
    } else if (!strcmp(k, "log")) {
        tn_strbuf b = {0};
        double g = num(o, "grad_norm", -1);
        tn_sb_printf(&b, "{\"step\": %.0f", num(o, "step", 0));
        put_num(&b, "time", num(o, "time", 0));
        put_num(&b, "grad_norm", g >= 0 ? g : NAN); /* < 0: clipping off, no norm (HF logs none either) */
        put_num(&b, "tokens_per_s", num(o, "tokens_per_s", 0));
        tn_sb_puts(&b, "}");
        push(&v->extras, b.s);
    } else if (!strcmp(k, "checkpoint")) {
        push(&v->checkpoints, tn_xstrdup(text));
    } else if (!strcmp(k, "end")) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
        snprintf(v->status, sizeof v->status, "%s", cJSON_IsString(st) ? st->valuestring : "finished");
    }
    free(text);
    cJSON_Delete(o);
}

static void take_log_line(tn_view *v, const char *line, size_t len) {
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss"), *ev = cJSON_GetObjectItemCaseSensitive(o, "eval_loss"),
                *el = cJSON_GetObjectItemCaseSensitive(o, "elapsed_time");
    double step = num(o, "current_steps", -1), elapsed = cJSON_IsString(el) ? parse_elapsed(el->valuestring) : -1;
    if (step >= 0 && (cJSON_IsNumber(loss) || cJSON_IsNumber(ev))) {
        tn_strbuf b = {0};
        tn_sb_printf(&b, "{\"step\": %.0f", step);
        if (cJSON_IsNumber(loss)) put_num(&b, "loss", loss->valuedouble), put_num(&b, "lr", num(o, "lr", 0));
        else put_num(&b, "eval_loss", ev->valuedouble);
        put_num(&b, "epoch", num(o, "epoch", 0));
        put_num(&b, "elapsed", elapsed);
        tn_sb_puts(&b, "}");
        push(cJSON_IsNumber(loss) ? &v->points : &v->evals, b.s);
        if (!v->total_steps) v->total_steps = (int)num(o, "total_steps", 0);
    }
    cJSON_Delete(o);
}

/* ---- following the files */

static void tail_init(tail *t, const char *dir, const char *name) {
    memset(t, 0, sizeof *t);
    t->path = tn_path_join(dir, name);
}

/* 1: the file is another one than last time (rewritten) or shorter: read it again from the start. */
static int tail_replaced(tail *t, const struct stat *st) {
    return t->ino && (st->st_ino != t->ino || st->st_dev != t->dev || st->st_size < t->off);
}

/* The complete lines the file gained, each to fn. */
static void tail_read(tn_view *v, tail *t, void (*fn)(tn_view *, const char *, size_t)) {
    struct stat st;
    if (stat(t->path, &st) != 0 || st.st_size <= t->off) return;
    t->dev = st.st_dev, t->ino = st.st_ino;
    FILE *f = fopen(t->path, "rb");
    if (!f) return;
    size_t want = (size_t)(st.st_size - t->off) < READ_PER_POLL ? (size_t)(st.st_size - t->off) : READ_PER_POLL;
    char *buf = tn_xmalloc(want);
    size_t got = fseeko(f, t->off, SEEK_SET) == 0 ? fread(buf, 1, want, f) : 0;
    fclose(f);
    t->off += (off_t)got;
    size_t start = 0;
    for (size_t i = 0; i < got; i++) {
        if (buf[i] != '\n') continue;
        if (t->partial.n) { /* the line began in an earlier read */
            tn_sb_putn(&t->partial, buf + start, i - start);
            fn(v, t->partial.s, t->partial.n);
            t->partial.n = 0;
        } else {
            fn(v, buf + start, i - start);
        }
        start = i + 1;
    }
    if (start < got) tn_sb_putn(&t->partial, buf + start, got - start);
    free(buf);
    if (st.st_mtime > v->updated) v->updated = (double)st.st_mtime;
}

static void tail_restart(tail *t) {
    t->ino = 0, t->dev = 0, t->off = 0, t->partial.n = 0;
}

static void read_plan(tn_view *v) {
    struct stat st;
    int there = stat(v->plan_path, &st) == 0;
    if (there && v->plan_seen && st.st_mtim.tv_sec == v->plan_mtime.tv_sec &&
        st.st_mtim.tv_nsec == v->plan_mtime.tv_nsec && st.st_size == v->plan_size)
        return;
    if (!there && v->plan_seen == 1) return; /* still none */
    if (!there) {
        v->plan_seen = 1;
        tn_store_set(v->s, v->run, "plan", "null");
        return;
    }
    v->plan_seen = 2, v->plan_mtime = st.st_mtim, v->plan_size = st.st_size;
    size_t n = 0;
    char *text = tn_read_file(v->plan_path, &n, (size_t)1 << 20);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", PLAN_NAME " is not a JSON object");
    }
    set_part(v, "plan", o);
}

/* ---- publishing what changed */

static void publish_ranks(tn_view *v) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "ranks");
    int first = (v->win_head - v->win_n + RANK_WINDOW) % RANK_WINDOW, last = (v->win_head - 1 + RANK_WINDOW) % RANK_WINDOW;
    cJSON_AddNumberToObject(o, "from", v->win_step[first]);
    cJSON_AddNumberToObject(o, "to", v->win_step[last]);
    static const char *const names[] = {"data", "compute", "wait", "optimizer", "samples"};
    for (int r = 0; r < v->world; r++) {
        double sum[5] = {0, 0, 0, 0, 0};
        for (int i = 0; i < v->win_n; i++)
            for (int k = 0; k < 5; k++) sum[k] += v->win[((size_t)i * v->world + r) * 5 + k];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "rank", r);
        for (int k = 0; k < 5; k++) cJSON_AddNumberToObject(x, names[k], sum[k] / v->win_n);
        cJSON_AddNumberToObject(x, "per_sample", sum[4] > 0 ? sum[1] / sum[4] : 0);
        cJSON_AddItemToArray(arr, x);
    }
    set_part(v, "ranks", o);
}

static void publish_straggler(tn_view *v) {
    cJSON *o = cJSON_CreateObject();
    int r = v->strag_named ? v->strag_rank : -1;
    cJSON_AddNumberToObject(o, "rank", r);
    if (r >= 0 && v->hosts[r]) cJSON_AddStringToObject(o, "host", v->hosts[r]);
    cJSON_AddNumberToObject(o, "ratio", v->strag_ratio);
    if (r >= 0) cJSON_AddNumberToObject(o, "since", v->strag_since);
    cJSON_AddNumberToObject(o, "window", STRAGGLER_STEPS);
    set_part(v, "straggler", o);
}

static cJSON *rows(const double *x, int n, int width) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        if (x[i * width] < 0) {
            cJSON_AddItemToArray(arr, cJSON_CreateNull());
            continue;
        }
        cJSON *row = cJSON_CreateArray();
        for (int k = 0; k < width; k++) cJSON_AddItemToArray(row, cJSON_CreateNumber(x[i * width + k]));
        cJSON_AddItemToArray(arr, row);
    }
    return arr;
}

static void publish(tn_view *v) {
    flush_batch(v, &v->points, "points", 200000);
    flush_batch(v, &v->evals, "evals", 100000);
    flush_batch(v, &v->extras, "extras", 200000);
    flush_batch(v, &v->steps, "steps", STEPS_KEPT);
    flush_batch(v, &v->checkpoints, "checkpoints", 10000);
    if (v->dirty_job) tn_store_set(v->s, v->run, "job", v->job_line);
    if (v->dirty_ranks && v->win_n) publish_ranks(v);
    if (v->dirty_strag) publish_straggler(v);
    if (v->dirty_mem) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", v->mem_step);
        cJSON_AddItemToObject(o, "ranks", rows(v->mem, v->world, 4));
        set_part(v, "memory", o);
    }
    if (v->dirty_link) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", v->link_step);
        cJSON_AddNumberToObject(o, "time", v->link_time);
        cJSON_AddItemToObject(o, "machines", rows(v->link, v->n_machines, 2));
        set_part(v, "links", o);
    }
    if (v->dirty_eta && v->eta_n) {
        int a = 0, b = v->eta_n - 1;
        double step_s = b > a && v->eta_step[b] > v->eta_step[a]
                            ? (v->eta_time[b] - v->eta_time[a]) / (v->eta_step[b] - v->eta_step[a]) : 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", v->eta_step[b]);
        cJSON_AddNumberToObject(o, "total", v->total_steps);
        cJSON_AddNumberToObject(o, "time", v->eta_time[b]);
        cJSON_AddNumberToObject(o, "step_s", step_s);
        cJSON_AddNumberToObject(o, "remaining_s", v->total_steps > v->eta_step[b] ? step_s * (v->total_steps - v->eta_step[b]) : 0);
        set_part(v, "eta", o);
    }
    v->dirty_job = v->dirty_ranks = v->dirty_strag = v->dirty_mem = v->dirty_link = v->dirty_eta = 0;
    if (strcmp(v->status, v->shown_status) != 0 || v->updated > v->shown_updated + 10) { /* each change, or 10 s on */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddStringToObject(o, "dir", v->dir);
        cJSON_AddBoolToObject(o, "live", v->live);
        cJSON_AddStringToObject(o, "status", v->status);
        cJSON_AddNumberToObject(o, "updated", v->updated);
        set_part(v, "info", o);
        snprintf(v->shown_status, sizeof v->shown_status, "%s", v->status);
        v->shown_updated = v->updated;
    }
}

static void forget(tn_view *v) { /* the run starts over */
    free_job(v);
    free(v->job_line);
    v->job_line = NULL;
    v->total_steps = 0, v->eta_n = 0, v->plan_seen = 0, v->updated = 0;
    v->shown_status[0] = 0;
    snprintf(v->status, sizeof v->status, "running");
    tail_restart(&v->log), tail_restart(&v->ranks);
    tn_store_reset(v->s, v->run);
}

tn_view *tn_view_new(tn_store *s, int run, const char *dir, const char *name, int live) {
    tn_view *v = tn_xcalloc(1, sizeof *v);
    v->s = s, v->run = run, v->live = live;
    v->dir = tn_xstrdup(dir), v->name = tn_xstrdup(name);
    tail_init(&v->log, dir, "trainer_log.jsonl");
    tail_init(&v->ranks, dir, TN_RANK_LOG_NAME);
    v->plan_path = tn_path_join(dir, PLAN_NAME);
    v->results_path = tn_path_join(dir, "train_results.json");
    snprintf(v->status, sizeof v->status, "running");
    return v;
}

void tn_view_poll(tn_view *v) {
    struct stat a, b;
    if ((stat(v->log.path, &a) == 0 && tail_replaced(&v->log, &a)) || (stat(v->ranks.path, &b) == 0 && tail_replaced(&v->ranks, &b)))
        forget(v);
    tail_read(v, &v->log, take_log_line);
    tail_read(v, &v->ranks, take_ranks_line);
    /* a run without tandem's log (LLaMA-Factory's own, or older): its results file says it finished */
    if (!strcmp(v->status, "running") && !v->ranks.ino && !v->live && tn_file_exists(v->results_path))
        snprintf(v->status, sizeof v->status, "finished");
    read_plan(v);
    publish(v);
}

void tn_view_free(tn_view *v) {
    if (!v) return;
    free_job(v);
    batch *bs[] = {&v->points, &v->evals, &v->extras, &v->steps, &v->checkpoints};
    for (int i = 0; i < 5; i++) {
        for (int k = 0; k < bs[i]->n; k++) free(bs[i]->v[k]);
        free(bs[i]->v);
    }
    free(v->log.path), free(v->ranks.path), tn_sb_free(&v->log.partial), tn_sb_free(&v->ranks.partial);
    free(v->job_line), free(v->dir), free(v->name), free(v->plan_path), free(v->results_path);
    free(v);
}
