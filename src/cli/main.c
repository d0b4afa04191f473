/* tandem -- command-line entry point: `tandem COMMAND [ARGS]`; `tandem --help` lists the commands, `tandem
 * COMMAND --help` (help.c) a command's options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h> /* openblas_get_corename */

#include "cli/commands.h"
#include "cli/help.h"
#include "core/blas_kernel.h"
#include "core/core.h"
#include "core/oom.h"
#include "serve/api.h"

/* Settings that libraries read once, when they are loaded, before main() runs: tandem sets its defaults where the
 * user set nothing and re-executes itself once (if the exec fails, the run goes on with the libraries' defaults).
 * libgomp's default wait (spin ~3 ms before sleeping) collapses throughput when another process holds a core
 * (docs/performance.md, bench/omp_wait_policy.sh): a short spin. OpenBLAS's kernel, where it fell back to an old one
 * for a CPU model it does not know (core/blas_kernel.h): the newest the CPU's flags allow; TANDEM_OPENBLAS_CHOICE
 * ("SkylakeX:Prescott", what tandem set and what OpenBLAS had chosen) tells `tandem env` why. */
#define TN_GOMP_SPINCOUNT "1000"
static void default_library_settings(char **argv) {
    int changed = 0;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
        changed |= setenv("GOMP_SPINCOUNT", TN_GOMP_SPINCOUNT, 1) == 0;
    if (!getenv("OPENBLAS_CORETYPE")) {
        tn_cpu_flags f;
        tn_cpu_flags_read(&f);
        const char *chosen = openblas_get_corename(), *better = tn_blas_better_kernel(chosen, &f);
        char note[96];
        snprintf(note, sizeof note, "%s:%s", better ? better : "", chosen);
        if (better && setenv("TANDEM_OPENBLAS_CHOICE", note, 1) == 0)
            changed |= setenv("OPENBLAS_CORETYPE", better, 1) == 0;
    }
    if (changed) execv("/proc/self/exe", argv);
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
    default_library_settings(argv);
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
