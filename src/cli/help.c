/* help.c -- see help.h. */
#include "cli/help.h"

#include <inttypes.h>
#include <string.h>

#include "trainer/replica.h"

typedef struct {
    const char *name, *sub; /* sub: bench's subcommands */
    const char *usage;      /* after "usage: tandem " */
    const char *summary;
    const char *options;    /* one option a line, "  --flag ARG   what it does" */
} page;

/* EXAMPLE: a key the command itself reads */
#define CONFIG_ARGS_EX(EXAMPLE) \
    "  CONFIG.yaml     LLaMA-Factory keys (README: Training your own run)\n" \
    "  key=value       override a key of the YAML (" EXAMPLE ")\n"
#define CONFIG_ARGS CONFIG_ARGS_EX("learning_rate=1e-4")
#define INFER_ARGS CONFIG_ARGS_EX("temperature=0.7")

static const page PAGES[] = {
    {"train", NULL, "train CONFIG.yaml [key=value ...]",
     "train as the YAML says: one process, or every rank of an mpirun/srun job",
     CONFIG_ARGS
     "  --dashboard [HOST:]PORT  rank 0 serves the run's live page there (port 0: a free one; the key dashboard)\n"
     "  --help, -h      this page\n"
     "environment: OMP_NUM_THREADS (threads per rank; default: the machine's cores / its ranks),\n"
     "  TANDEM_CACHE_DIR (tokenized data, default ~/.cache/tandem/data), TANDEM_TTY=0|1 (plain log lines or\n"
     "  a progress bar), OMP_WAIT_POLICY / GOMP_SPINCOUNT (unset: GOMP_SPINCOUNT=1000, docs/performance.md)\n"},
    {"launch", NULL, "launch [-n N | --hostfile FILE] [options] CONFIG.yaml [key=value ...]",
     "the same run on N local ranks or on every host of a hostfile, through Open MPI's mpirun",
     "  -n N, --nproc N       ranks on this machine (default: NPROC_PER_NODE, else 1)\n"
     "  --hostfile FILE       DeepSpeed's hostfile (HOST slots=N a line): every host, started over SSH\n"
     "  --max-restarts N      restart a failed run from the newest complete checkpoint, up to N times\n"
     "  --drop-dead-hosts     on a restart, leave out hosts that no longer answer (the global batch is kept)\n"
     "  --config_file FILE    an accelerate config (accelerate launch --config_file): its num_processes, and its\n"
     "                        FSDP sharding strategy or DeepSpeed zero_stage as zero_stage\n"
     "  --no-bind             do not pin each local rank to its own cores\n"
     "  --dashboard [HOST:]PORT  rank 0 serves the run's live page (dashboard=true: 127.0.0.1, a free port)\n"
     "  --dry-run             check the config and hosts, print the mpirun command, start nothing\n"
     "  --help, -h            this page\n"
     CONFIG_ARGS
     "environment, one command per machine as with torchrun: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT,\n"
     "  NPROC_PER_NODE, FORCE_TORCHRUN=1 (tandem train too), TANDEM_RDZV_TIMEOUT (seconds node 0 waits); RANK for\n"
     "  NODE_RANK when that is unset (older LLaMA-Factory); CUDA_VISIBLE_DEVICES (k devices: k ranks when\n"
     "  NPROC_PER_NODE is unset); NCCL_SOCKET_IFNAME (also MPI's TCP interfaces); NCCL_DEBUG=INFO (communication log)\n"},
    {"env", NULL, "env [--hostfile FILE]",
     "what llamafactory-cli env and ds_report print: versions, BLAS kernel, CPU, memory, NUMA, MPI, CUDA; with\n"
     "several machines (--hostfile, or NNODES per node) one column each, differences marked",
     "  --hostfile FILE       every host of a hostfile, side by side\n"
     "  --help, -h            this page\n"},
    {"topo", NULL, "topo [--ranks N]",
     "what connects this machine's GPUs (NVLink, PCIe switch, host bridge, NUMA node), as nvidia-smi topo -m, and\n"
     "where tandem puts each local rank (its GPU, its cores); one line when there is no GPU or NVIDIA driver",
     "  --ranks N       the placement of N local ranks (tandem launch -n N; default: one per visible GPU)\n"
     "  --help, -h      this page\n"},
    {"plan", NULL, "plan CONFIG.yaml [key=value ...] (--hostfile FILE | --machines M [--ranks-per-machine R]) "
                   "[--link RATE] [--link-cpu NS] [--link-stretch NS] [--refault-ns NS] [--copy-ns NS] [--ranks-per-core K] [--local RATE] [--compute TFLOP/s | --step-time S] [--memory GB] [--seq S] [--json]",
     "before a run: step time, tokens/s, memory per rank and link bytes of ddp, compressed ddp, ZeRO 1-3 and DiLoCo\n"
     "for the config's model and batch on these machines, and which to use (exit 2: none fits)",
     "  --hostfile FILE        the machines (HOST slots=N); the link as bench allreduce measured it between them\n"
     "  --machines M           M machines instead of a hostfile (default 1)\n"
     "  --ranks-per-machine R  ranks on each (default: the hostfile's slots, else 1)\n"
     "  --link RATE            each machine's link: 100mbit, 1gbit, 10gbit, or bytes/s\n"
     "  --latency-ms X         per message on that link (default 0.1)\n"
     "  --link-cpu NS          CPU nanoseconds a machine spends per byte its link carries each way (TCP, MPI),\n"
     "                         taken from its ranks' compute: bench allreduce prints it (default 0)\n"
     "  --link-stretch NS      nanoseconds a rank's backward lengthens per byte its machine's link carries each\n"
     "                         way under DDP's bucket queue (wall time: holds --link-cpu and what CPU seconds\n"
     "                         miss; bench/plan_fresh.py derives it from a DDP step's split); DDP and compressed\n"
     "                         DDP take the larger of the two (default 0)\n"
     "  --refault-ns NS        CPU nanoseconds per byte to write a page ZeRO 2-3 released (the kernel clears\n"
     "                         it again) beyond writing it in place (default: measured here; 0 with --compute)\n"
     "  --copy-ns NS           CPU nanoseconds per byte to copy on the core that computes: the in-machine sum of\n"
     "                         2+ ranks a machine streams 3 bytes a gradient byte there (default: measured here\n"
     "                         with 2+ ranks a machine; 0 with --compute)\n"
     "  --ranks-per-core K     ranks that share each core (machines simulated on one host; the step time given\n"
     "                         was measured so shared): the link's and the codec's CPU land on all K (default 1)\n"
     "  --local RATE           reductions inside a machine (default 5e9 bytes/s: shared memory; GPUs: NVLink's)\n"
     "  --compute TFLOP/s      one rank's sustained rate, for hardware that is not here (default: measure one\n"
     "                         rank's step on this machine with bench train)\n"
     "  --step-time S          one rank's step in seconds, as measured elsewhere\n"
     "  --memory GB            memory one rank may use (default: this machine's, shared by its ranks)\n"
     "  --seq S                tokens a sequence (default cutoff_len; the data's mean length is closer)\n"
     "  --json                 one JSON line per strategy\n"
     "  --help, -h             this page\n"},
    {"dashboard", NULL, "dashboard DIR [DIR...] [--host HOST] [--port PORT]",
     "serve the web page of finished or running runs' output folders (trainer_log.jsonl, tandem_ranks.jsonl),\n"
     "their curves overlaid, as TensorBoard does with several runs; Ctrl-C stops it",
     "  DIR             a run's output_dir\n"
     "  --host HOST     the address to listen on (default 127.0.0.1; another needs TANDEM_DASHBOARD_TOKEN)\n"
     "  --port PORT     the port (default 0: a free one, printed)\n"
     "  --help, -h      this page\n"
     "environment: TANDEM_DASHBOARD_TOKEN (16+ characters; viewers open the page with ?token=TOKEN once),\n"
     "  TANDEM_UPLOT_DIR (uPlot's dist folder; default: where scripts/install-deps.sh installs it)\n"},
    {"export", NULL, "export [CONFIG.yaml] [key=value ...]",
     "merge adapter_name_or_path into model_name_or_path and write an HF model folder to export_dir",
     CONFIG_ARGS_EX("export_size=2")
     "  keys: model_name_or_path, adapter_name_or_path, export_dir, export_size (GB a shard, default 5)\n"
     "  --help, -h      this page\n"},
    {"chat", NULL, "chat CONFIG.yaml [--image FILE ...] [key=value ...]",
     "talk to model_name_or_path (+ adapter_name_or_path) through its template; \"clear\" starts over, \"exit\" leaves",
     "  --image FILE    an image for the first turn (vision-language models; repeatable; <image> in the text places it)\n"
     INFER_ARGS
     "  keys: model_name_or_path, adapter_name_or_path, template, default_system, enable_thinking, do_sample,\n"
     "        temperature, top_p, top_k, repetition_penalty, max_new_tokens (LLaMA-Factory's defaults)\n"
     "  --help, -h      this page\n"},
    {"generate", NULL, "generate CONFIG.yaml --prompt TEXT [--image FILE ...] [--stats] [key=value ...]",
     "one answer to TEXT, through the template (the keys of chat), streamed as it is generated",
     "  --prompt TEXT   the user's message\n"
     "  --image FILE    an image of the prompt (vision-language models; repeatable; <image> in TEXT places it)\n"
     "  --stats         print time to first token and tokens/s to stderr\n"
     INFER_ARGS
     "  --help, -h      this page\n"},
    {"api", NULL, "api CONFIG.yaml [key=value ...]",
     "an OpenAI-compatible server (LLaMA-Factory's api): GET /v1/models, POST /v1/chat/completions, streaming or not",
     INFER_ARGS
     "  --help, -h      this page\n"
     "environment: API_HOST (default 127.0.0.1; another address needs API_KEY), API_PORT (8000), API_KEY (bearer\n"
     "  token), API_MODEL_NAME (gpt-3.5-turbo), MAX_CONCURRENT (sequences decoded together, 8), API_MAX_QUEUE\n"
     "  (waiting requests before 429, 64), API_MAX_BODY (bytes before 413, 1 MiB), API_CONTEXT (tokens, 4096)\n"},
    {"init-model", NULL, "init-model CONFIG.json OUT_DIR [--tokenizer DIR] [--seed N]",
     "a freshly initialised HF model folder (HF's initialisation), to pre-train or to try the examples",
     "  CONFIG.json     an HF config.json (llama, qwen2, qwen3, mistral)\n"
     "  OUT_DIR         the model folder to write\n"
     "  --tokenizer DIR copy the tokenizer files of DIR into OUT_DIR\n"
     "  --seed N        initialisation seed (default 42)\n"
     "  --help, -h      this page\n"},
    {"compare", NULL, "compare A B [--max-rel-l2 X] [--quiet]",
     "per-tensor relative L2 distance of two checkpoints (model folders, adapters or safetensors files)",
     "  --max-rel-l2 X  fail (exit 1) when a tensor differs by more than X\n"
     "  --quiet         only the summary line\n"
     "  --help, -h      this page\n"},
    {"tokenize", NULL, "tokenize TOKENIZER.json [--text S | --file P] [--no-special] [--time]\n"
                       "       tandem tokenize TOKENIZER.json --decode [--skip-special] ID...",
     "text -> token ids (stdin when neither --text nor --file), or ids -> text",
     "  --text S        encode S\n"
     "  --file P        encode the file P\n"
     "  --no-special    no special tokens added (BOS ...)\n"
     "  --time          print load and encode times to stderr\n"
     "  --decode        decode the ids that follow\n"
     "  --skip-special  leave special tokens out of decoded text\n"
     "  --help, -h      this page\n"},
    {"bench", "train", "bench train [--preset tiny|small | --model-config FILE] [--batch B] [--seq S] [--lora] "
                       "[--lora-rank R] [--device cpu|cuda] [--bf16] [--checkpointing] [--peak-tflops X] [--steps N] "
                       "[--warmup N] [--dist] [--trace] [--bucket-mb MB] [--zero N] [--zero-layout L] [--zero-gather] "
                       "[--diloco H] [--outer-lr X] [--outer-momentum X] [--no-overlap] [--compress bf16|int8|int4]",
     "time training steps on random tokens; one JSON line (bench/bench_train.sh compares with PyTorch)",
     "  --preset tiny|small  model and batch of ../shared/ref's presets (default tiny)\n"
     "  --model-config FILE  an HF config.json instead (bench/configs: Qwen3 0.6B, 1.7B, 4B); batch 1, seq 2048\n"
     "  --batch B, --seq S   sequences per step and their length\n"
     "  --lora               LoRA r 8 (alpha 2r) on every projection, base frozen\n"
     "  --lora-rank R        LoRA with rank R\n"
     "  --device cpu|cuda    the backend (default cpu)\n"
     "  --bf16               the CUDA backend's bf16 mode (fp32 master weights)\n"
     "  --checkpointing      gradient checkpointing (keeps each layer's input, recomputes the rest)\n"
     "  --peak-tflops X      report MFU against X TFLOP/s (H100 dense bf16: 989)\n"
     "  --steps N            timed steps (default 10 tiny, 5 small)\n"
     "  --warmup N           untimed steps first (default 2)\n"
     "  --dist               one rank of a data-parallel step, under mpirun\n"
     "  --trace              with --dist: every rank prints each step's phases and each collective's\n"
     "                       queued / started / done times (ms from the step's start) to stderr\n"
     "  --bucket-mb MB       gradient all-reduce bucket size (default 4)\n"
     "  --zero N             with --dist: ZeRO stage N (0-3), the trainer's sharded step\n"
     "  --zero-layout L      ZeRO's shards: balanced (default: a chunk of every unit) or contiguous\n"
     "  --zero-gather        stage 3 on one machine gathers its parameters (default: one shared copy)\n"
     "  --diloco H           with --dist: DiLoCo between machines, H inner steps a round (sync_mode: diloco)\n"
     "  --outer-lr X         DiLoCo's outer learning rate (default 1)\n"
     "  --outer-momentum X   DiLoCo's outer Nesterov momentum (default 0)\n"
     "  --no-overlap         DiLoCo: wait for each round's average (diloco_overlap: false)\n"
     "  --compress bf16|int8|int4 with --dist: what crosses between machines, with error feedback (comm_compression)\n"
     "  --help, -h           this page\n"},
    {"bench", "generate", "bench generate --model-config FILE [--prompt P] [--new N[,N...]] [--batch B] [--prefill P]",
     "generation speed on random weights: copy bandwidth, prefill vs the training forward, decode vs the bandwidth "
     "limit; JSON lines (bench/bench_generate.sh compares with PyTorch)",
     "  --model-config FILE  an HF config.json (bench/configs/qwen3-0.6b.json)\n"
     "  --prompt P           prompt tokens before decoding (default 128)\n"
     "  --new N[,N...]       new tokens per decode run (default 64)\n"
     "  --batch B            sequences decoded together (default 1)\n"
     "  --prefill P          tokens of the prefill measurement, 0 to skip (default 512)\n"
     "  --help, -h           this page\n"},
    {"bench", "vl", "bench vl --model-config FILE [--batch B] [--seq S] [--images K] [--image-size PX] [--full] "
                    "[--lora-rank R] [--steps N] [--warmup N]",
     "time a vision-language training step on random weights, tokens and images; one JSON line with tok/s and the "
     "vision tower's share (bench/bench_vl.sh compares with PyTorch)",
     "  --model-config FILE  a Qwen2-VL, Qwen2.5-VL or Qwen3-VL config.json (bench/configs/qwen2-vl-bench.json)\n"
     "  --batch B, --seq S   rows per step and their length (default 2 x 256)\n"
     "  --images K           images per row (default 1)\n"
     "  --image-size PX      square images of PX pixels, a multiple of patch x merge (default 224)\n"
     "  --full               full fine-tuning, nothing frozen (default: LoRA r 8, tower and projector frozen)\n"
     "  --lora-rank R        LoRA rank (default 8, alpha 2R)\n"
     "  --steps N            timed steps (default 3)\n"
     "  --warmup N           untimed steps first (default 1)\n"
     "  --help, -h           this page\n"},
    {"bench", "resnet", "bench resnet [--batch B] [--steps N] [--warmup N] [--bucket-mb MB | --no-overlap] [--resnet34] "
                        "[--dist]",
     "time the image trainer's ResNet-18 step on random 32x32 batches; one JSON line with images/s (under mpirun with "
     "--dist: data parallel; bench/bench_resnet_dp.sh compares with PyTorch DDP)",
     "  --batch B       images per rank (default 64)\n"
     "  --steps N       timed steps (default 10)\n"
     "  --warmup N      untimed steps first (default 2)\n"
     "  --bucket-mb MB  gradient all-reduce buckets, started during backward (default 4, train's ddp_bucket_cap_mb)\n"
     "  --no-overlap    one all-reduce of every gradient after backward\n"
     "  --resnet34      layers [3,4,6,3]\n"
     "  --dist          one rank of a data-parallel run (mpirun)\n"
     "  --help, -h      this page\n"},
    {"bench", "sgemm", "bench sgemm [--n N]", "measured fp32 sgemm peak (best of 10), one JSON line",
     "  --n N           matrix size (default 2048)\n"
     "  --help, -h      this page\n"},
    {"bench", "allreduce", "bench allreduce [--min SIZE] [--max SIZE] [--iters N] [--warmup N] [--no-mpi]",
     "under mpirun: tandem's all-reduce next to MPI_Allreduce, nccl-tests columns",
     "  --min SIZE      smallest message (default 4K; suffixes K, M, G)\n"
     "  --max SIZE      largest message (default 256M)\n"
     "  --iters N       timed calls per size\n"
     "  --warmup N      untimed calls per size\n"
     "  --no-mpi        only tandem's path\n"
     "  --help, -h      this page\n"},
};
#define N_PAGES ((int)(sizeof PAGES / sizeof PAGES[0]))

static void print_page(const page *p) {
    printf("usage: tandem %s\n\n%s\n\n%s", p->usage, p->summary, p->options);
}

void tn_cli_usage(FILE *f) {
    fprintf(f, "usage: tandem COMMAND [ARGS]     (tandem COMMAND --help: its options)\n\ncommands:\n");
    for (int i = 0; i < N_PAGES; i++) {
        fprintf(f, "  tandem %s\n", PAGES[i].usage);
        for (const char *l = PAGES[i].summary; *l;) { /* every line of a summary indented alike */
            size_t n = strcspn(l, "\n");
            fprintf(f, "      %.*s\n", (int)n, l);
            l += n + (l[n] == '\n');
        }
    }
    fprintf(f, "  tandem help [COMMAND]    this overview, or a command's page\n"
               "  tandem version           version and build fingerprint (also --version)\n\n"
               "launch options: -n N (--nproc N) | --hostfile FILE, --max-restarts N, --drop-dead-hosts, --config_file FILE,\n"
               "  --dashboard [HOST:]PORT, --no-bind, --dry-run; NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT: one command per\n"
               "  machine\n"
               "README.md: the YAML keys, Coming from LLaMA-Factory, several machines, when something goes wrong\n");
}

int tn_cli_help(const char *command, const char *sub) {
    const page *found = NULL;
    for (int i = 0; i < N_PAGES && !found; i++)
        if (strcmp(PAGES[i].name, command) == 0 && (!PAGES[i].sub || (sub && strcmp(PAGES[i].sub, sub) == 0)))
            found = &PAGES[i];
    if (found) {
        print_page(found);
        return 0;
    }
    if (strcmp(command, "bench") == 0) { /* bench alone: its three pages */
        for (int i = 0; i < N_PAGES; i++)
            if (strcmp(PAGES[i].name, "bench") == 0) {
                print_page(&PAGES[i]);
                printf("\n");
            }
        return 0;
    }
    if (strcmp(command, "help") == 0 || strcmp(command, "version") == 0) {
        tn_cli_usage(stdout);
        return 0;
    }
    fprintf(stderr, "tandem: error: no command '%s' (tandem --help lists them)\n", command);
    return 1;
}

int tn_cli_version(void) {
    uint64_t build = tn_build_fingerprint();
    printf("tandem %s (build %016" PRIx64 ")\n", TN_VERSION, build);
    return 0;
}

int tn_cli_wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}
