/* test_unit_dashboard -- the dashboard's parts without a server: the store's event ring (serve/dash_store.h: order,
 * caps, a viewer that falls behind, the byte bound, the stop), the run view over hand-written files
 * (serve/dash_view.h: trainer_log points written back exactly, the straggler named by compute per sample over windows
 * of ten steps, ETA, a line torn across two reads, a rewritten file, the plan), tandem_ranks.jsonl's resume filter
 * (outputs/rank_log.h), the link capacity record (outputs/link_capacity.h), the dashboard key, and the dashboard's
 * CPU account (serve/dashboard.h: a thread of its own that burns a known CPU time is counted to below a clock tick).
 * Every expected value is worked out by hand in the comments. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "config/train_config.h"
#include "core/core.h"
#include "outputs/link_capacity.h"
#include "outputs/rank_log.h"
#include "serve/dash_store.h"
#include "serve/dashboard.h"
#include "serve/dash_view.h"
#include "testlib.h"

static char *tmp_path(const char *name) { return tn_path_join(tl_tmpdir(), name); }

static void write_text(const char *path, const char *text, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) tn_die("%s: cannot write", path);
    fputs(text, f);
    fclose(f);
}

/* the run `run` of the store's snapshot, parsed (the caller deletes the returned root) */
static cJSON *snapshot_run(tn_store *s, int run, cJSON **root) {
    uint64_t seq;
    size_t n;
    char *text = tn_store_snapshot(s, &seq, &n);
    *root = cJSON_Parse(text);
    CHECKF(*root != NULL, "the snapshot is JSON: %.200s", text);
    free(text);
    return cJSON_GetArrayItem(cJSON_GetObjectItem(*root, "runs"), run);
}

static double num_at(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : -12345;
}

static void test_store(void) {
    tn_store *s = tn_store_new(2, "files");
    tn_store_set(s, 0, "job", "{\"world\": 2}");
    const char *items[] = {"1", "2", "3"};
    tn_store_append(s, 1, "points", items, 3, 2); /* cap 2: the newest two, 2 and 3 */
    tn_store_set(s, 0, "job", "{\"world\": 3}");  /* a set replaces */
    CHECK(tn_store_seq(s) == 0);                  /* nothing committed yet */
    tn_store_commit(s);                           /* the three changes: one event */
    tn_store_commit(s);                           /* nothing new: no event */
    CHECK(tn_store_seq(s) == 1);
    cJSON *root;
    cJSON *r0 = snapshot_run(s, 0, &root), *r1 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "runs"), 1);
    CHECK(num_at(cJSON_GetObjectItem(r0, "job"), "world") == 3);
    const cJSON *pts = cJSON_GetObjectItem(r1, "points");
    CHECK(cJSON_GetArraySize(pts) == 2 && cJSON_GetArrayItem(pts, 0)->valueint == 2 && cJSON_GetArrayItem(pts, 1)->valueint == 3);
    CHECK(num_at(root, "seq") == 1);
    cJSON_Delete(root);
    /* a viewer from 0 gets event 1 as a server-sent event holding the three changes in order */
    uint64_t seq = 0;
    char *text;
    size_t n;
    CHECK(tn_store_next(s, &seq, &text, &n, 10) == 1 && seq == 1);
    const char *want = "id: 1\ndata: {\"seq\": 1, \"ops\": [{\"run\": 0, \"part\": \"job\", \"op\": \"set\", \"data\": {\"world\": 2}}, "
                       "{\"run\": 1, \"part\": \"points\", \"op\": \"append\", \"data\": [1,2,3]}, "
                       "{\"run\": 0, \"part\": \"job\", \"op\": \"set\", \"data\": {\"world\": 3}}]}\n\n";
    CHECKF(strlen(text) == n && !strcmp(text, want), "event 1 as SSE: %s", text);
    free(text);
    CHECK(tn_store_next(s, &seq, &text, &n, 10) == 0 && seq == 1); /* nothing new: the wait times out */
    /* a snapshot commits what is pending, so that its number covers it */
    tn_store_set(s, 1, "eta", "{}");
    uint64_t snap_seq;
    free(tn_store_snapshot(s, &snap_seq, &n));
    CHECK(snap_seq == 2 && tn_store_seq(s) == 2);
    /* 1100 more events: the ring holds 1024, so a viewer still at 2 has fallen behind and jumps to the newest */
    for (int i = 0; i < 1100; i++) tn_store_set(s, 0, "eta", "{}"), tn_store_commit(s);
    uint64_t slow = 2;
    CHECK(tn_store_next(s, &slow, &text, &n, 10) == -1 && slow == 1102 && tn_store_behind(s) == 1);
    uint64_t recent = 1102 - 1000; /* 1000 back: still in the ring */
    CHECK(tn_store_next(s, &recent, &text, &n, 10) == 1 && recent == 103);
    free(text);
    /* the byte bound: 20 events of 1 MiB; the ring keeps at most 16 MiB, so at most 15 of them (each is 1 MiB plus
     * its header): a viewer 16 back has fallen behind, one 15 back has not */
    char *big = tn_xmalloc((1 << 20) + 3);
    memset(big, 'x', 1 << 20);
    big[0] = '"', big[(1 << 20) + 1] = '"', big[(1 << 20) + 2] = 0;
    for (int i = 0; i < 20; i++) tn_store_set(s, 1, "big", big), tn_store_commit(s);
    free(big);
    uint64_t newest = tn_store_seq(s), a = newest - 16, b = newest - 15;
    CHECK(tn_store_next(s, &a, &text, &n, 10) == -1);
    CHECK(tn_store_next(s, &b, &text, &n, 10) == 1 && n > (1 << 20));
    free(text);
    /* the stop: what is pending becomes the last event, still delivered, then -2 */
    tn_store_set(s, 0, "info", "{\"status\": \"finished\"}");
    tn_store_stop(s);
    uint64_t last = newest;
    CHECK(tn_store_next(s, &last, &text, &n, 10) == 1 && strstr(text, "finished"));
    free(text);
    CHECK(tn_store_next(s, &last, &text, &n, 10) == -2);
    /* a reset empties the run */
    tn_store_reset(s, 1);
    snapshot_run(s, 0, &root);
    CHECK(cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "runs"), 1)) == 0);
    cJSON_Delete(root);
    tn_store_free(s);
}

/* A step line: compute c[r] and samples k[r] per rank (data, wait, optimizer fixed), at time t. */
static void step_line(char *buf, size_t cap, int step, double t, const double *c, const int *k, int world) {
    int w = snprintf(buf, cap, "{\"kind\": \"step\", \"step\": %d, \"time\": %g, \"ranks\": [", step, t);
    for (int r = 0; r < world; r++)
        w += snprintf(buf + w, cap - (size_t)w, "%s[0.001,%g,0.01,0.002,%d]", r ? ", " : "", c[r], k[r]);
    snprintf(buf + w, cap - (size_t)w, "]}\n");
}

static const char JOB3[] = "{\"kind\": \"job\", \"step\": 0, \"world\": 3, \"machines\": 1, \"total_steps\": 100, \"ranks\": "
                           "[{\"rank\": 0, \"host\": \"ha\"}, {\"rank\": 1, \"host\": \"hb\"}, {\"rank\": 2, \"host\": \"hc\"}]}\n";

/* The straggler after `steps` steps whose per-rank compute and samples are c[] / k[] (per window w: cw[w]). */
static cJSON *run_with(const char *dir, int steps, const double (*cw)[3], const int *k, cJSON **root) {
    char *ranks = tn_path_join(dir, TN_RANK_LOG_NAME);
    tn_mkdirs(dir);
    write_text(ranks, JOB3, "w");
    char line[512];
    for (int s = 1; s <= steps; s++) {
        step_line(line, sizeof line, s, 0.5 * s, cw[(s - 1) / STRAGGLER_STEPS], k, 3);
        write_text(ranks, line, "a");
    }
    free(ranks);
    tn_store *st = tn_store_new(1, "files");
    tn_view *v = tn_view_new(st, 0, dir, "r", 0);
    tn_view_poll(v);
    cJSON *r = snapshot_run(st, 0, root);
    cJSON *copy = cJSON_Duplicate(r, 1);
    cJSON_Delete(*root);
    *root = copy;
    tn_view_free(v);
    tn_store_free(st);
    return copy;
}

static void test_straggler(void) {
    cJSON *r;
    /* rank 2 computes 0.2 s for 4 samples, the others 0.1 s: per sample 0.05 against the median 0.025 = 2.0x, in
     * every window; named once three windows of ten steps (30 steps) say so, not after two */
    const double slow2[4][3] = {{0.1, 0.1, 0.2}, {0.1, 0.1, 0.2}, {0.1, 0.1, 0.2}, {0.1, 0.1, 0.2}};
    const int four[3] = {4, 4, 4};
    char *dir = tmp_path("strag20");
    run_with(dir, 20, slow2, four, &r);
    const cJSON *s = cJSON_GetObjectItem(r, "straggler");
    CHECKF(num_at(s, "rank") == -1 && num_at(s, "ratio") == 2.0, "after 20 steps: not named yet (%g, %g)", num_at(s, "rank"), num_at(s, "ratio"));
    cJSON_Delete(r);
    free(dir);
    dir = tmp_path("strag30");
    run_with(dir, 30, slow2, four, &r);
    s = cJSON_GetObjectItem(r, "straggler");
    const cJSON *host = cJSON_GetObjectItem(s, "host");
    CHECKF(num_at(s, "rank") == 2 && cJSON_IsString(host) && !strcmp(host->valuestring, "hc") && num_at(s, "ratio") == 2.0 &&
           num_at(s, "since") == 1, "after 30 steps: rank 2 on hc, 2.0x, since step 1 (%g)", num_at(s, "rank"));
    /* ETA: 0.5 s a step (times 0.5 s apart), 70 steps left: 35 s */
    const cJSON *eta = cJSON_GetObjectItem(r, "eta");
    CHECK(num_at(eta, "step") == 30 && num_at(eta, "step_s") == 0.5 && num_at(eta, "remaining_s") == 35.0);
    /* the ranks' means over the newest 20 steps */
    const cJSON *ranks = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "ranks"), "ranks");
    CHECK(num_at(cJSON_GetObjectItem(r, "ranks"), "from") == 11 && num_at(cJSON_GetObjectItem(r, "ranks"), "to") == 30);
    CHECK_NEAR(num_at(cJSON_GetArrayItem(ranks, 2), "compute"), 0.2, 1e-12);
    CHECK_NEAR(num_at(cJSON_GetArrayItem(ranks, 2), "per_sample"), 0.05, 1e-12);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "steps")) == 30);
    cJSON_Delete(r);
    free(dir);
    /* balanced: rank 2 gets 2 samples in 0.1 s, the others 6 in 0.15 s: its step is the shortest, but per sample it
     * takes 0.05 against 0.025 -- the straggler all the same */
    const double bal[3][3] = {{0.15, 0.15, 0.1}, {0.15, 0.15, 0.1}, {0.15, 0.15, 0.1}};
    const int shares[3] = {6, 6, 2};
    dir = tmp_path("stragbal");
    run_with(dir, 30, bal, shares, &r);
    s = cJSON_GetObjectItem(r, "straggler");
    CHECKF(num_at(s, "rank") == 2 && num_at(s, "ratio") == 2.0, "balanced shares: rank 2 named (%g, %g)", num_at(s, "rank"), num_at(s, "ratio"));
    cJSON_Delete(r);
    free(dir);
    /* the slowest changes from window to window (0, 1, 0): never three in a row, nobody named */
    const double alt[3][3] = {{0.2, 0.1, 0.1}, {0.1, 0.2, 0.1}, {0.2, 0.1, 0.1}};
    dir = tmp_path("stragalt");
    run_with(dir, 30, alt, four, &r);
    CHECK(num_at(cJSON_GetObjectItem(r, "straggler"), "rank") == -1);
    cJSON_Delete(r);
    free(dir);
    /* 10% slower: below the 1.15 threshold */
    const double near[3][3] = {{0.1, 0.1, 0.11}, {0.1, 0.1, 0.11}, {0.1, 0.1, 0.11}};
    dir = tmp_path("stragnear");
    run_with(dir, 30, near, four, &r);
    s = cJSON_GetObjectItem(r, "straggler");
    CHECK(num_at(s, "rank") == -1);
    CHECK_NEAR(num_at(s, "ratio"), 1.1, 1e-12);
    cJSON_Delete(r);
    free(dir);
}

static void test_view_files(void) {
    char *dir = tmp_path("run"), *log = tn_path_join(dir, "trainer_log.jsonl"), *ranks = tn_path_join(dir, TN_RANK_LOG_NAME),
         *plan = tn_path_join(dir, "tandem_plan.json");
    tn_mkdirs(dir);
    /* LLaMA-Factory's lines: the lr 7.500000000000001e-05 has 16 significant digits (cJSON would print 7.5e-05) */
    write_text(log,
               "{\"current_steps\": 2, \"total_steps\": 6, \"loss\": 2.3457, \"lr\": 7.500000000000001e-05, \"epoch\": 0.5, \"percentage\": 33.33, \"elapsed_time\": \"0:01:01\", \"remaining_time\": \"0:02:03\"}\n"
               "{\"current_steps\": 4, \"total_steps\": 6, \"loss\": 1.0, \"lr\": 0.0001, \"epoch\": 1.0, \"percentage\": 66.67, \"elapsed_time\": \"1 day, 2:03:04\", \"remaining_time\": \"0:31:02\"}\n"
               "{\"current_steps\": 4, \"total_steps\": 6, \"eval_loss\": 1.6410622596740723, \"epoch\": 1.0, \"percentage\": 66.67, \"elapsed_time\": \"1:02:10\", \"remaining_time\": \"0:31:05\"}\n"
               "{\"current_steps\": 6, \"total_steps\": 6, \"epoch\": 2.0, \"percentage\": 100.0, \"elapsed_time\": \"1:33:11\", \"remaining_time\": \"0:00:00\"}\n",
               "w");
    write_text(ranks, "{\"kind\": \"log\", \"step\": 2, \"time\": 1.5, \"grad_norm\": 0.75, \"tokens_per_s\": 123.5}\n"
                      "{\"kind\": \"log\", \"step\": 4, \"time\": 3.5, \"grad_norm\": -1, \"tokens_per_s\": 99}\n"
                      "{\"kind\": \"checkpoint\", \"step\": 4, \"time\": 3.6, \"dir\": \"checkpoint-4\"}\n"
                      "{\"kind\": \"step\", \"step\": 4, \"time\": 3.5, \"ranks\": [[0,1,0,0,2], null], \"memory\": [[4,4,8,100], null], "
                      "\"links\": [[10,20], null]}\n{\"kind\": \"st", /* torn: its rest comes later */
               "w");
    tn_store *st = tn_store_new(1, "files");
    tn_view *v = tn_view_new(st, 0, dir, "run", 0);
    tn_view_poll(v);
    uint64_t seq;
    size_t n;
    char *snap = tn_store_snapshot(st, &seq, &n);
    CHECKF(strstr(snap, "{\"step\": 2, \"loss\": 2.3457, \"lr\": 7.500000000000001e-05, \"epoch\": 0.5, \"elapsed\": 61.0}") != NULL,
           "the first point written back exactly: %.600s", snap);
    CHECK(strstr(snap, "\"eval_loss\": 1.6410622596740723") != NULL);
    free(snap);
    cJSON *root, *r = snapshot_run(st, 0, &root);
    const cJSON *pts = cJSON_GetObjectItem(r, "points"), *ex = cJSON_GetObjectItem(r, "extras");
    CHECK(cJSON_GetArraySize(pts) == 2 && cJSON_GetArraySize(cJSON_GetObjectItem(r, "evals")) == 1);
    CHECK(num_at(cJSON_GetArrayItem(pts, 1), "elapsed") == 93784); /* 1 day, 2:03:04 */
    CHECK(cJSON_GetArraySize(ex) == 2 && num_at(cJSON_GetArrayItem(ex, 0), "grad_norm") == 0.75 &&
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(ex, 1), "grad_norm")));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "checkpoints")) == 1);
    const cJSON *mem = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "memory"), "ranks");
    CHECK(cJSON_GetArraySize(mem) == 2 && num_at(cJSON_GetObjectItem(r, "memory"), "step") == 4 &&
          cJSON_GetArrayItem(cJSON_GetArrayItem(mem, 0), 3)->valuedouble == 100 && cJSON_IsNull(cJSON_GetArrayItem(mem, 1)));
    CHECK(cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "links"), "machines"), 0), 1)->valuedouble == 20);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "steps")) == 1); /* the torn line is not read yet */
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(r, "plan")));
    const cJSON *info = cJSON_GetObjectItem(r, "info");
    CHECK(!strcmp(cJSON_GetObjectItem(info, "status")->valuestring, "running"));
    cJSON_Delete(root);
    /* the rest of the torn line, a plan, the end */
    write_text(ranks, "ep\", \"step\": 6, \"time\": 5.5, \"ranks\": [[0,1,0,0,2], [0,1,0,0,2]]}\n"
                      "{\"kind\": \"end\", \"step\": 6, \"time\": 6, \"status\": \"finished\"}\n", "a");
    write_text(plan, "{\"step_s\": 0.25, \"bytes_per_step\": 1e6}", "w");
    tn_view_poll(v);
    r = snapshot_run(st, 0, &root);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "steps")) == 2 &&
          num_at(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "steps"), 1), "step") == 6);
    CHECK(num_at(cJSON_GetObjectItem(r, "plan"), "step_s") == 0.25);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "info"), "status")->valuestring, "finished"));
    cJSON_Delete(root);
    /* a rewritten file (a resumed run: a new file by rename) starts the run over: two points become one */
    char *tmp = tn_path_join(dir, "new.tmp");
    write_text(tmp, "{\"current_steps\": 2, \"total_steps\": 6, \"loss\": 2.5, \"lr\": 1e-05, \"epoch\": 0.5, \"elapsed_time\": \"0:00:01\"}\n", "w");
    CHECK(rename(tmp, log) == 0);
    write_text(plan, "[1, 2]", "w");
    tn_view_poll(v);
    r = snapshot_run(st, 0, &root);
    pts = cJSON_GetObjectItem(r, "points");
    CHECK(cJSON_GetArraySize(pts) == 1 && num_at(cJSON_GetArrayItem(pts, 0), "loss") == 2.5);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "steps")) == 2); /* tandem_ranks.jsonl read again */
    CHECK(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "plan"), "error")));
    cJSON_Delete(root);
    tn_view_free(v);
    tn_store_free(st);
    free(tmp), free(dir), free(log), free(ranks), free(plan);
}

static void test_rank_log(void) {
    char *dir = tmp_path("ranklog");
    tn_rank_log *l = tn_rank_log_open(dir, 0);
    CHECK(l != NULL);
    for (int s = 0; s <= 5; s++) {
        char line[64];
        snprintf(line, sizeof line, "{\"kind\": \"%s\", \"step\": %d}", s ? "step" : "job", s);
        CHECK(tn_rank_log_line(l, line) == 0);
    }
    tn_rank_log_close(l);
    char *path = tn_path_join(dir, TN_RANK_LOG_NAME);
    write_text(path, "{\"kind\": \"step\", \"ste", "a"); /* torn by a crash */
    l = tn_rank_log_open(dir, 3); /* resume at 3: the job line and steps 1-3 stay */
    tn_rank_log_close(l);
    size_t n;
    char *text = tn_read_file(path, &n, 0);
    CHECKF(text && !strcmp(text, "{\"kind\": \"job\", \"step\": 0}\n{\"kind\": \"step\", \"step\": 1}\n{\"kind\": \"step\", \"step\": 2}\n"
                                 "{\"kind\": \"step\", \"step\": 3}\n"), "kept up to step 3: %s", text);
    free(text);
    l = tn_rank_log_open(dir, 0); /* a fresh run: empty */
    tn_rank_log_close(l);
    text = tn_read_file(path, &n, 0);
    CHECK(text && n == 0);
    free(text), free(path), free(dir);
}

static void test_link_capacity(void) {
    char *path = tmp_path("bench.jsonl");
    setenv("TANDEM_BENCH_LOG", path, 1);
    const char *one[] = {"a", "a"}, *three[] = {"b", "a", "b"}, *ab[] = {"a", "b"}, *ac[] = {"a", "c"};
    CHECK(tn_link_capacity_record(one, 2, 1e8, 2, 0) == 0 && !tn_file_exists(path)); /* one machine: nothing */
    /* 2 machines, 1e8 bytes in 2 s: each leader sends 2 (2-1)/2 x 1e8 = 1e8 bytes per call: 5e7 bytes/s */
    CHECK(tn_link_capacity_record(three, 3, 1e8, 2, 0) == 0);
    CHECK(tn_link_capacity_record(ab, 2, 1e8, 4, 20e-9) == 0); /* the newer one wins: 2.5e7 */
    double bps = 0, when = 0, cpu = -1;
    CHECK(tn_link_capacity_find(ab, 2, &bps, &when, &cpu) == 1 && bps == 2.5e7 && when > 1.6e9 &&
          fabs(cpu - 20e-9) < 1e-15);
    CHECK(tn_link_capacity_find(ac, 2, &bps, &when, NULL) == 0);
    CHECK(tn_link_capacity_record(ab, 2, 1e8, 1, 0) == 0); /* newest again, its CPU not measured: 0, not the older 20 */
    CHECK(tn_link_capacity_find(ab, 2, &bps, &when, &cpu) == 1 && bps == 1e8 && cpu == 0);
    unsetenv("TANDEM_BENCH_LOG");
    free(path);
}

static void test_key(void) {
    tn_train_config c;
    tn_train_config_defaults(&c);
    CHECK(c.dashboard == 0 && tn_train_config_override(&c, "dashboard=true") == 0 && c.dashboard == 1 &&
          c.dashboard_port == 0 && !c.dashboard_host[0]);
    CHECK(tn_train_config_override(&c, "dashboard=false") == 0 && c.dashboard == 0);
    CHECK(tn_train_config_override(&c, "dashboard=6006") == 0 && c.dashboard == 1 && c.dashboard_port == 6006);
    CHECK(tn_train_config_override(&c, "dashboard=0.0.0.0:7000") == 0 && c.dashboard_port == 7000 &&
          !strcmp(c.dashboard_host, "0.0.0.0"));
    CHECK(tn_train_config_override(&c, "dashboard=[::1]:0") == 0 && c.dashboard_port == 0 && !strcmp(c.dashboard_host, "::1"));
    const char *bad[] = {"dashboard=70000", "dashboard=host:", "dashboard=:80", "dashboard=maybe", "dashboard=http://x:1"};
    for (int i = 0; i < 5; i++) {
        int rc = tn_train_config_override(&c, bad[i]);
        CHECKF(rc != 0 && strstr(tn_errmsg(), "key 'dashboard' expects true, false, PORT or HOST:PORT"), "%s: %s", bad[i], tn_errmsg());
    }
}

/* ---- the CPU account */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int burnt, done;
    double cpu;
} burner;

static double own_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A thread named as the dashboard's are: burns 25 ms of its CPU, says how much, and stays until told (an ended
 * thread is gone from /proc). */
static void *burn(void *arg) {
    burner *b = arg;
    prctl(PR_SET_NAME, "tandem-dash", 0, 0, 0);
    volatile double x = 0;
    while (own_cpu() < 0.025) x += 1;
    pthread_mutex_lock(&b->mu);
    b->cpu = own_cpu(), b->burnt = 1;
    pthread_cond_broadcast(&b->cv);
    while (!b->done) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void test_cpu_account(void) {
    const char *dirs[1] = {tl_tmpdir()};
    tn_dash_opts o = {.dirs = dirs, .n_dirs = 1};
    tn_dash *d = tn_dash_start(&o);
    CHECKF(d != NULL, "a dashboard on a free loopback port starts: %s", tn_errmsg());
    if (!d) return;
    double before = tn_dash_cpu(d); /* its file thread's, so far */
    burner b = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, burn, &b) == 0);
    pthread_mutex_lock(&b.mu);
    while (!b.burnt) pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    double after = tn_dash_cpu(d);
    /* the burner's 25.0x ms are all counted: a count in clock ticks (10 ms) would say 20 ms. The file thread wakes
     * twice a second to find no files: far under 10 ms of CPU between the two readings. */
    CHECKF(after - before >= b.cpu - 1e-6 && after - before < b.cpu + 0.010,
           "the dashboard's threads used %.6f s more, the burner alone %.6f s", after - before, b.cpu);
    pthread_mutex_lock(&b.mu);
    b.done = 1;
    pthread_cond_broadcast(&b.cv);
    pthread_mutex_unlock(&b.mu);
    pthread_join(th, NULL);
    tn_dash_stop(d);
}

int main(void) {
    test_store();
    test_straggler();
    test_view_files();
    test_rank_log();
    test_link_capacity();
    test_key();
    test_cpu_account();
    return tl_done("test_unit_dashboard");
}
