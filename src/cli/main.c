/* tandem -- command-line entry point: `tandem COMMAND [ARGS]`; `tandem --help` lists the commands, `tandem
 * COMMAND --help` (help.c) a command's options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/help.h"
#include "core/core.h"
#include "core/oom.h"
#include "serve/api.h"

/* libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded, before main() runs. Its default
 * (spin ~3 ms before sleeping) collapses throughput when another process holds a core (docs/performance.md,
 * bench/omp_wait_policy.sh), so when the user set neither, tandem re-executes itself once with a short spin.
 * If the exec fails, the run goes on with libgomp's default. */
#define TN_GOMP_SPINCOUNT "1000"
static void default_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", TN_GOMP_SPINCOUNT, 1) != 0) return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    tn_json_oom_reset(); /* cJSON's allocation hooks, before any thread may parse (core/oom.h) */
    if (argc < 2) {
        tn_cli_usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        tn_cli_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help")) return argc > 2 ? tn_cli_help(argv[2], argc > 3 ? argv[3] : NULL) : (tn_cli_usage(stdout), 0);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) return tn_cli_version();
    if (tn_cli_wants_help(argc - 2, argv + 2)) return tn_cli_help(cmd, argc > 2 && argv[2][0] != '-' ? argv[2] : NULL);
    default_wait_policy(argv);
    if (strcmp(cmd, "train") == 0) return tn_cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return tn_cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0) return tn_cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "chat") == 0) return tn_cmd_chat(argc - 2, argv + 2);
    if (strcmp(cmd, "generate") == 0) return tn_cmd_generate(argc - 2, argv + 2);
    if (strcmp(cmd, "api") == 0) return tn_api_main(argc - 2, argv + 2);
    if (strcmp(cmd, "init-model") == 0) return tn_cmd_init_model(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return tn_cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "launch") == 0) return tn_cmd_launch(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0) return tn_cmd_compare(argc - 2, argv + 2);
    if (strcmp(cmd, "env") == 0) return tn_cmd_env(argc - 2, argv + 2);
    if (strcmp(cmd, "topo") == 0) return tn_cmd_topo(argc - 2, argv + 2);
    if (strcmp(cmd, "dashboard") == 0) return tn_cmd_dashboard(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return tn_cmd_plan(argc - 2, argv + 2);
    fprintf(stderr, "tandem: error: unknown command '%s' (expected train, launch, chat, generate, api, export, init-model, "
                    "tokenize, compare, env, topo, dashboard, plan, bench, help or version; see tandem --help)\n", cmd);
    return 1;
}
