/* commands -- the subcommands of the tandem program; each returns the process exit code. */
#ifndef TN_COMMANDS_H
#define TN_COMMANDS_H

#include "config/train_config.h"

int tn_cmd_train(int argc, char **argv);
int tn_cmd_bench(int argc, char **argv);
int tn_cmd_bench_allreduce(int argc, char **argv); /* `tandem bench allreduce` */
int tn_cmd_bench_generate(int argc, char **argv);  /* `tandem bench generate` (cmd_bench_generate.c) */
int tn_cmd_bench_vl(int argc, char **argv);        /* `tandem bench vl` (cmd_bench_vl.c) */
int tn_cmd_bench_resnet(int argc, char **argv);    /* `tandem bench resnet` (cmd_bench_resnet.c) */
int tn_cmd_tokenize(int argc, char **argv);
int tn_cmd_compare(int argc, char **argv);
int tn_cmd_launch(int argc, char **argv);
/* `tandem launch` running `tandem COMMAND` on every rank: "train" (CONFIG.yaml ...) or "env" (one rank per machine). */
int tn_launch(int argc, char **argv, const char *command);
int tn_cmd_env(int argc, char **argv);
int tn_cmd_topo(int argc, char **argv); /* `tandem topo`: GPU interconnect and rank placement (cmd_topo.c) */
int tn_cmd_dashboard(int argc, char **argv); /* `tandem dashboard DIR...` (cmd_dashboard.c) */
/* train and launch: `--dashboard [HOST:]PORT` among the config arguments becomes the override dashboard=[HOST:]PORT
 * (dashboard_flag.c). The array is replaced by a new one (the strings are kept). -1 + tn_err when the value is
 * missing. */
int tn_cli_dashboard_flag(int *argc, char ***argv);
int tn_cmd_export(int argc, char **argv);
int tn_cmd_init_model(int argc, char **argv);
int tn_cmd_chat(int argc, char **argv);
int tn_cmd_generate(int argc, char **argv);
int tn_cmd_plan(int argc, char **argv); /* `tandem plan CONFIG.yaml ...` (cmd_plan.c) */
/* CONFIG.yaml [key=value ...] and the DeepSpeed JSON it names, for `world` ranks (cmd_train.c). 0, or -1 + tn_err. */
int tn_cli_load_train_config(int argc, char **argv, int world, tn_train_config *cfg);

#endif
