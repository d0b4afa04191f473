/* plan_check.c -- a run's first steps against the plan (plan_check.h). */
#include "trainer/plan_check.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/model_config.h"
#include "outputs/link_capacity.h"
#include "trainer/memory_check.h"
#include "trainer/plan.h"


/* The link as bench allreduce recorded it between these machines, and the CPU a byte of it cost; 0 when never
 * measured. */
static double recorded_link(const tn_comm *comm, int world, double *cpu_s_per_byte) {
    const char **hosts = tn_xmalloc((size_t)world * sizeof *hosts);
    for (int r = 0; r < world; r++) hosts[r] = tn_comm_host_of(comm, r);
    double bps = 0, when = 0;
    if (tn_link_capacity_find(hosts, world, &bps, &when, cpu_s_per_byte) != 1) bps = 0, *cpu_s_per_byte = 0;
    free(hosts);
    return bps;
}

void tn_plan_verdict(const tn_train_config *cfg, const tn_plan_row rows[TN_PLAN_N], double step_s, double compute_s,
                     FILE *out) {
    tn_plan_strategy mine = tn_plan_config_strategy(cfg);
    int best = tn_plan_best(rows);
    fprintf(out, "tandem: plan: %.3f s a step measured (%.3f s of it compute), %.3f s predicted for %s (`tandem plan %s` "
            "shows every strategy)\n", step_s, compute_s, rows[mine].step_s, tn_plan_name(mine), cfg->source_path);
    if (best < 0 || best == (int)mine || step_s <= 2 * rows[best].step_s) return;
    fprintf(out, "tandem: warning: this run is %s: %s (%s) is predicted %.3f s a step, %.1fx faster than measured\n",
            step_s - compute_s > compute_s ? "link-bound" : "slower than the best plan", tn_plan_name(rows[best].strategy),
            tn_plan_keys(rows[best].strategy), rows[best].step_s, step_s / rows[best].step_s);
}

/* output_dir/tandem_plan.json: the prediction for this run's strategy, which the dashboard shows beside what it
 * measures (serve/dash_view.c reads step_s, bytes_per_step, memory_per_rank). A failed write costs the page its
 * plan panel only: said once, the run goes on. */
static void write_plan_file(const tn_train_config *cfg, const tn_plan_row rows[TN_PLAN_N]) {
    tn_plan_strategy mine = tn_plan_config_strategy(cfg);
    int best = tn_plan_best(rows);
    char text[512], *path = tn_path_join(cfg->output_dir, "tandem_plan.json");
    int n = snprintf(text, sizeof text,
                     "{\"step_s\": %.6g, \"bytes_per_step\": %.6g, \"memory_per_rank\": %.6g, \"strategy\": \"%s\", "
                     "\"best\": \"%s\", \"best_step_s\": %.6g}\n", rows[mine].step_s, rows[mine].link_bytes,
                     rows[mine].memory_bytes, tn_plan_name(mine), best >= 0 ? tn_plan_name(rows[best].strategy) : "none",
                     best >= 0 ? rows[best].step_s : 0.0);
    if (tn_write_file_atomic(path, text, (size_t)n) != 0)
        fprintf(stderr, "tandem: warning: the dashboard's plan panel stays empty: %s\n", tn_errmsg());
    free(path);
}

void tn_plan_check(const tn_train_config *cfg, const tn_comm *comm, double step_s, double compute_s, double seq,
                   FILE *out) {
    const tn_comm_info *in = comm ? tn_comm_get_info(comm) : NULL;
    if (!in || in->size < 2 || !(step_s > 0) || !(seq >= 1)) return;
    char *path = cfg->model_name_or_path[0] ? tn_path_join(cfg->model_name_or_path, "config.json")
                                            : tn_xstrdup(cfg->model_config);
    tn_model_config mc;
    int rc = tn_model_config_load(path, &mc);
    free(path);
    if (rc != 0) return; /* a model family the plan does not know: nothing to say */
    tn_plan_cluster c = {.machines = in->n_nodes, .ranks_per_machine = in->local_size, .link_latency_s = 1e-4,
                         .local_Bps = TN_PLAN_LOCAL_BPS};
    c.link_Bps = in->n_nodes > 1 ? recorded_link(comm, in->size, &c.link_cpu_s_per_byte) : TN_PLAN_LOCAL_BPS;
    if (c.link_Bps <= 0) {
        fprintf(out, "tandem: plan: %.3f s a step measured (%.3f s of it compute); the link between these machines "
                "was never measured (`tandem bench allreduce` records it), so no prediction\n", step_s, compute_s);
        return;
    }
    tn_memory_need need;
    tn_memory_estimate(cfg, &mc, (int)(seq + 0.5), &need);
    tn_plan_job job;
    tn_plan_job_from_config(cfg, &need, (int)(seq + 0.5), &job);
    tn_plan_job_set_groups(&job, cfg, &mc, (int)(seq + 0.5));
    job.compute_s = compute_s;
    tn_plan_row rows[TN_PLAN_N];
    tn_plan_predict(&job, &c, rows);
    tn_plan_verdict(cfg, rows, step_s, compute_s, out);
    write_plan_file(cfg, rows);
}
