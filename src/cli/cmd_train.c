/* cmd_train.c -- `tandem train CONFIG.yaml [key=value ...]`, one process or every rank of an mpirun/srun
 * launch (`tandem launch` starts it that way). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "config/deepspeed_config.h"
#include "config/train_config.h"
#include "core/core.h"
#include "infer/predict.h"
#include "launch/pernode.h"
#include "launch/rank_watch.h"
#include "trainer/job.h"
#include "trainer/family.h"
#include "trainer/replica.h"

/* Threads per rank: the launcher's OMP_NUM_THREADS when set, else this machine's cores shared by its ranks. */
static void set_threads(const tn_comm_info *in) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && *env) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores > 0 ? cores : 1) / (in->local_size > 0 ? in->local_size : 1);
    omp_set_num_threads(n > 0 ? n : 1);
}

/* Same YAML bytes and the same overrides on every rank (checked before training). */
static uint64_t config_fingerprint(const char *path, const char *deepspeed, int argc, char **argv) {
    size_t n = 0;
    char *text = tn_read_file(path, &n, 0);
    uint64_t h = text ? tn_hash64(text, n, 17) : 0;
    free(text);
    if (deepspeed[0] && (text = tn_read_file(deepspeed, &n, 0)) != NULL) { /* the JSON it names, too */
        h = tn_hash64(text, n, h);
        free(text);
    }
    for (int i = 1; i < argc; i++) h = tn_hash64(argv[i], strlen(argv[i]) + 1, h);
    return h;
}

/* The ZeRO stage from whichever of zero_stage, the DeepSpeed JSON and fsdp name one; two that disagree are
 * refused rather than one silently winning. */
static int pick_zero_stage(tn_train_config *cfg, int ds_stage) {
    const char *names[3] = {"zero_stage", "deepspeed", "fsdp"};
    int given[3] = {cfg->zero_stage, ds_stage, cfg->fsdp_stage}, first = -1;
    for (int i = 0; i < 3; i++) {
        if (given[i] < 0) continue;
        if (first >= 0 && given[i] != given[first])
            return tn_err("%s: key '%s' asks for ZeRO stage %d but '%s' for stage %d: make them agree (or keep one)",
                          cfg->source_path, names[first], given[first], names[i], given[i]);
        if (first < 0) first = i;
    }
    cfg->zero_stage = first >= 0 ? given[first] : 0;
    return 0;
}

/* The YAML, its overrides, and the DeepSpeed JSON it names (its notes join the YAML's). */
int tn_cli_load_train_config(int argc, char **argv, int world, tn_train_config *cfg) {
    int rc = tn_train_config_load(argv[0], cfg);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (!strchr(argv[i], '=')) return tn_err("command line: '%s' is not key=value", argv[i]);
        rc = tn_train_config_override(cfg, argv[i]);
    }
    if (rc == 0) rc = tn_train_config_finish(cfg);
    int ds_stage = -1;
    if (rc == 0 && cfg->deepspeed[0]) {
        static tn_deepspeed_config ds;
        rc = tn_deepspeed_config_load(cfg->deepspeed, cfg, world, &ds);
        size_t used = strlen(cfg->notices);
        if (rc == 0) snprintf(cfg->notices + used, sizeof cfg->notices - used, "%s", ds.notes);
        ds_stage = ds.zero_stage;
    }
    if (rc == 0) rc = pick_zero_stage(cfg, ds_stage);
    if (rc == 0) { /* bf16's note: what the backend this run gets does with it, one line */
        char line[256];
        tn_backend_precision(cfg->device, cfg->bf16, line, sizeof line);
        tn_train_config_reword_note(cfg, "bf16", line);
    }
    return rc;
}

/* do_predict: with the model just trained when do_train ran too (its output_dir: the adapter, or the whole model
 * after full fine-tuning), else with the YAML's model and adapter. */
static int predict_after(const tn_train_config *cfg, tn_comm *comm) {
    static tn_train_config p;
    p = *cfg;
    if (cfg->do_train && cfg->finetuning_type == TN_FT_LORA)
        snprintf(p.adapter_name_or_path, sizeof p.adapter_name_or_path, "%s", cfg->output_dir);
    else if (cfg->do_train)
        snprintf(p.model_name_or_path, sizeof p.model_name_or_path, "%s", cfg->output_dir);
    return tn_predict(&p, comm);
}

int tn_cmd_train(int argc, char **argv) {
    if (tn_cli_dashboard_flag(&argc, &argv) != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    if (argc < 1) {
        fprintf(stderr, "tandem: error: train needs a config file: tandem train CONFIG.yaml [key=value ...]\n");
        return 1;
    }
    if (tn_pernode_forced()) return tn_launch(argc, argv, "train"); /* FORCE_TORCHRUN: as llamafactory-cli does */
    tn_rank_watch_start(); /* a rank whose launcher or mpirun dies stops by itself (before MPI: its parent) */
    tn_comm *comm = tn_comm_init(NULL, NULL);
    if (!comm) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    const tn_comm_info *in = tn_comm_get_info(comm);
    set_threads(in);
    static tn_train_config cfg;
    int rc = tn_cli_load_train_config(argc, argv, in->size, &cfg);
    if (rc == 0) rc = tn_train_config_check_model_paths(&cfg);
    /* a config error is the same on every rank: rank 0 reports it; the fingerprint check comes after, so
     * a rank with a different file is named by it */
    int first = tn_replica_first_failure(comm, rc != 0);
    if (first >= 0) rc = first == in->rank ? -1 : -2;
    int collective = rc != 0; /* the same error on every rank: no rank prefix */
    uint64_t cfg_fp = rc == 0 ? config_fingerprint(argv[0], cfg.deepspeed, argc, argv) : 0;
    if (rc == 0 && in->size > 1) {
        uint64_t build = tn_build_fingerprint();
        const char *secret = getenv("TANDEM_JOB_SECRET");
        uint64_t secret_fp = tn_hash64(secret ? secret : "", secret ? strlen(secret) : 0, 0x5EC12E7);
        rc = build ? tn_replica_check_fingerprints(comm, build, cfg_fp, secret_fp) : -1;
        if (rc != 0 && in->rank != 0) rc = -2; /* every rank sees the mismatch; rank 0 reports it */
        collective = rc != 0;
    }
    if (rc == 0 && in->rank == 0) tn_train_config_print_notices(&cfg, stdout); /* keys of the Python world */
    if (rc == 0 && cfg.do_train) rc = tn_family_train(&cfg, comm, cfg_fp); /* the model family's job (family.h) */
    if (rc == 0 && cfg.do_predict) rc = predict_after(&cfg, comm);
    if (rc == -1) {
        if (in->size > 1 && !collective)
            fprintf(stderr, "tandem: error: rank %d on host %s: %s\n", in->rank, in->host, tn_errmsg());
        else
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
    }
    tn_comm_finalize(comm);
    return rc == 0 ? 0 : 1;
}
