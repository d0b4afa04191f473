/* tandem -- command-line entry point: `tandem train CONFIG.yaml [key=value ...]`, `tandem bench ...`. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/core.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem train CONFIG.yaml [key=value ...]   train as the YAML says (LLaMA-Factory keys)\n"
            "       tandem bench train --preset tiny|small [--lora] [--steps N] [--warmup N]\n"
            "       tandem tokenize TOKENIZER.json [--text S | --file P] [--no-special]   text -> token ids\n"
            "       tandem tokenize TOKENIZER.json --decode [--skip-special] ID...      token ids -> text\n"
            "       tandem launch [-n N | --hostfile FILE] CONFIG.yaml [key=value ...]\n"
            "                                                    the same run on N local ranks or every host\n"
            "       tandem export [CONFIG.yaml] [key=value ...]  merge adapter_name_or_path into model_name_or_path -> export_dir\n"
            "       tandem chat CONFIG.yaml [key=value ...]      talk to model_name_or_path (+ adapter_name_or_path)\n"
            "       tandem generate CONFIG.yaml --prompt TEXT    one answer, through the template\n"
            "       tandem init-model CONFIG.json OUT_DIR [--tokenizer DIR]  a freshly initialised HF model folder\n"
            "       tandem compare A B [--max-rel-l2 X]          per-tensor difference of two checkpoints\n"
            "       tandem env [--hostfile FILE]                 versions, BLAS kernel, CPU, memory of every machine\n"
            "       tandem bench sgemm [--n N]                   measured fp32 sgemm peak\n"
            "       mpirun -n N tandem bench allreduce [--min 4K] [--max 256M]   tandem's all-reduce vs MPI_Allreduce\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (strcmp(argv[1], "train") == 0) return tn_cmd_train(argc - 2, argv + 2);
    if (strcmp(argv[1], "bench") == 0) return tn_cmd_bench(argc - 2, argv + 2);
    if (strcmp(argv[1], "tokenize") == 0) return tn_cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(argv[1], "chat") == 0) return tn_cmd_chat(argc - 2, argv + 2);
    if (strcmp(argv[1], "generate") == 0) return tn_cmd_generate(argc - 2, argv + 2);
    if (strcmp(argv[1], "init-model") == 0) return tn_cmd_init_model(argc - 2, argv + 2);
    if (strcmp(argv[1], "export") == 0) return tn_cmd_export(argc - 2, argv + 2);
    if (strcmp(argv[1], "launch") == 0) return tn_cmd_launch(argc - 2, argv + 2);
    if (strcmp(argv[1], "compare") == 0) return tn_cmd_compare(argc - 2, argv + 2);
    if (strcmp(argv[1], "env") == 0) return tn_cmd_env(argc - 2, argv + 2);
    fprintf(stderr, "tandem: error: unknown command '%s' (expected train, launch, chat, generate, export, init-model, tokenize, compare, env or bench; see tandem --help)\n", argv[1]);
    return 1;
}
