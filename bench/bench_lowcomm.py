"""bench_lowcomm.py -- low-communication training over a 100 Mbit/s link and unequal ranks (issue 18), in one
invocation, tandem's plain data parallelism and PyTorch DDP beside every mode.

Two simulated machines: network namespaces joined by a veth pair shaped with `tc qdisc ... tbf rate 100mbit
burst 32kbit latency 400ms` on both ends (bench_dp.py's shaping), one rank per machine, each pinned to its own
core (taskset: core = rank), one thread each. Parts (--parts, all by default):

  link     iperf3 over the shaped link: one TCP stream, and one each way at once (the slower direction).
  scaling  weak scaling on the bench presets, full fine-tuning (`tandem bench train --dist`, random tokens):
           T1 = one rank alone, T2 = two machines over the link, same per-rank batch, for plain DP, DP with
           bf16 / int8 gradients and DiLoCo (fp32 / int8 pseudo-gradients, H inner steps, overlapped);
           efficiency T1 / T2 with T2 the MEAN step over whole DiLoCo rounds (a round's end costs more than its
           other steps); bytes each machine sends per step next to the link rate. PyTorch DDP (gloo):
           ../shared/ref/ddp_ref.py --phases base,netns in the same invocation.
  task     a real task: `stage: pt` on LLaMA-Factory's c4_demo with a fresh Qwen3 (examples/tiny-qwen3 through
           `tandem init-model`, the real Qwen3 tokenizer), full training, evaluated on the held-out 5% every
           80 samples: one machine (batch 4) and two machines over the link (batch 4 each, global 8) with plain
           DP and each mode, every run to the same number of tokens. Reports each mode's final eval loss
           against plain DP's (target: within 2%), the time each run needs to reach the eval loss every run
           reaches, and the mean step time against the one-machine step (efficiency); the eval loss curves of
           every run as a PNG (--png).
  balance  unequal ranks on this machine: two ranks on cores 0 and 1, the same pt task; a busy loop shares core
           1 with rank 1 (a shell `while :; do :; done` pinned there). The ranks' individual throughputs are
           measured alone (rank 0 on core 0; rank 1 on core 1 beside the busy loop); then data parallelism
           without balance_ranks (busy loop on from the start) and with it (the busy loop starts mid-run: the
           log names the slowed rank and its new share). Throughput = tokens/s of the last logging windows.

Usage (root, for the namespaces):
  bench/bench_lowcomm.sh [--parts link,scaling,task,balance] [--configs tiny,small] [--json OUT.jsonl]
                         [--png docs/lowcomm_loss.png] [--epochs 2] [--no-torch]
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_dp  # noqa: E402  (its link helpers and the shaping)

ROOT = os.path.dirname(HERE)
BIN = os.path.join(ROOT, "build", "tandem")
KIT = os.path.join(ROOT, "scripts", "netns", "netns.sh")
REF = os.path.abspath(os.path.join(ROOT, "..", "shared", "ref"))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared"))
bench_dp.ENV["TANDEM_NETNS"] = "tlowc"  # our own namespaces, whatever else runs
ENV = bench_dp.ENV
PIN = ["sh", "-c", 'exec taskset -c "$OMPI_COMM_WORLD_RANK" "$0" "$@"']

# mode -> (tandem bench train flags, tandem train keys); H per preset for the scaling part
MODES = {
    "ddp": ([], []),
    "ddp-bf16": (["--compress", "bf16"], ["comm_compression=bf16"]),
    "ddp-int8": (["--compress", "int8"], ["comm_compression=int8"]),
    "diloco": (["--diloco", "{H}"], ["sync_mode=diloco", "diloco_inner_steps={H}"]),
    "diloco-int8": (["--diloco", "{H}", "--compress", "int8"],
                    ["sync_mode=diloco", "diloco_inner_steps={H}", "comm_compression=int8"]),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load():
    """The 1-minute load average: this machine's other tenants show up in it (ours adds up to 2)."""
    return float(open("/proc/loadavg").read().split()[0])


def expand(args, H):
    return [a.replace("{H}", str(H)) for a in args]


# ---------------------------------------------------------------------------------------------- scaling

def scaling(a, rate):
    rows, res = [], {}
    for cfg in a.configs.split(","):
        H = {"tiny": a.inner_tiny, "small": a.inner_small}[cfg]
        rounds = ["--steps", str(3 * H)]  # DiLoCo: three whole rounds; plain DP: bench_dp's counts
        plain = ["--steps", "10" if cfg == "tiny" else "4"]
        bench = [BIN, "bench", "train", "--preset", cfg]
        t1 = bench_dp.tandem_json(bench_dp.run(["taskset", "-c", "0"] + bench + rounds))
        t1["load"] = load()
        res[(cfg, "T1")] = t1
        log(f"{cfg}: one rank {t1['ms_mean']:.0f} ms/step")
        for mode in a.modes.split(","):
            flags = expand(MODES[mode][0], H)
            steps = rounds if "diloco" in mode else plain
            r = bench_dp.tandem_json(bench_dp.run([KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS",
                                                   *PIN, *bench, *steps, "--dist", *flags]))
            r["load"] = load()
            res[(cfg, mode)] = r
            rows.append(dict(r, part="scaling", mode=mode, H=H if "diloco" in mode else 0, t1_ms=t1["ms_mean"],
                             link_MBps=rate[0], link_bidir_MBps=rate[1]))
            log(f"{cfg} {mode}: {r['ms_mean']:.0f} ms/step (median {r['ms_step']:.0f}), efficiency "
                f"{t1['ms_mean'] / r['ms_mean']:.3f}, {r['sent_mb_step']:.2f} MB/step")
    torch = {}
    if not a.no_torch:
        jf = os.path.join(a.tmp, "ddp_ref.jsonl")
        bench_dp.run([os.path.join(REF, "run.sh"), "ddp_ref.py", "--phases", "base,netns", "--configs", a.configs,
                      "--json", jf])
        for line in open(jf):
            r = json.loads(line)
            if r.get("kind") == "train" and r["rank"] == 0:
                torch[(r["config"], r["phase"])] = r["ms_step"]
                rows.append(dict(r, part="scaling", impl="torch"))
    print("\n### Weak scaling over the 100 Mbit/s link (2 machines, 1 rank each, full fine-tuning)\n")
    print(f"Link: one TCP stream {rate[0]:.2f} MB/s; one each way at once {rate[1]:.2f} MB/s.\n")
    print("| config | mode | T1 ms (1 rank) | T2 ms (2 machines, mean) | efficiency T1/T2 | MB sent per step "
          "by each machine | link time of those bytes ms | PyTorch DDP T1 / T2 ms, efficiency | load average |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cfg in a.configs.split(","):
        t1 = res[(cfg, "T1")]["ms_mean"]
        p1, p2 = torch.get((cfg, "base")), torch.get((cfg, "netns"))
        pt = f"{p1:.0f} / {p2:.0f}, {p1 / p2:.3f}" if p1 and p2 else "-"
        for mode in a.modes.split(","):
            r = res[(cfg, mode)]
            H = {"tiny": a.inner_tiny, "small": a.inner_small}[cfg]
            name = mode + (f" (H {H})" if "diloco" in mode else "")
            print(f"| {cfg} | {name} | {t1:.0f} | {r['ms_mean']:.0f} | **{t1 / r['ms_mean']:.3f}** | "
                  f"{r['sent_mb_step']:.2f} | {1e3 * r['sent_mb_step'] / rate[0]:.0f} | {pt if mode == 'ddp' else ''} | "
                  f"{res[(cfg, 'T1')]['load']:.1f} / {r['load']:.1f} |")
    return rows


# ------------------------------------------------------------------------------------------------- task

TASK_YAML = """model_name_or_path: {model}
stage: pt
finetuning_type: full
dataset: c4_demo
dataset_dir: {data}
cutoff_len: 256
val_size: 0.05
eval_strategy: steps
per_device_eval_batch_size: 8
per_device_train_batch_size: 4
learning_rate: 2.0e-3
lr_scheduler_type: cosine
warmup_ratio: 0.05
num_train_epochs: {epochs}
disable_gradient_checkpointing: true
overwrite_output_dir: true
save_steps: 0
seed: 42
"""


def task_setup(a):
    d = os.path.join(a.tmp, "task")
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    for f in ("c4_demo.jsonl", "dataset_info.json"):
        shutil.copy(os.path.join(SHARED, "data", "llamafactory", f), os.path.join(d, "data", f))
    model = os.path.join(d, "qwen3")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        bench_dp.run([BIN, "init-model", os.path.join(ROOT, "examples", "tiny-qwen3", "config.json"), model,
                      "--tokenizer", os.path.join(SHARED, "data", "tokenizers", "qwen3")])
    y = os.path.join(d, "pt.yaml")
    with open(y, "w") as fh:
        fh.write(TASK_YAML.format(model=model, data=os.path.join(d, "data"), epochs=a.epochs))
    return d, y


def parse_hms(s):
    h, m, sec = (int(x) for x in s.split(":"))
    return 3600 * h + 60 * m + sec


def task_run(a, yaml, out, machines, keys, samples=0):
    """One training run; its eval curve as [(step, tokens_seen, train_seconds, eval_loss)] and step time."""
    if os.path.exists(out):
        shutil.rmtree(out)
    samples = samples or 4 * machines  # per optimizer step, all machines
    eval_steps = 80 // samples  # every 80 samples either way
    cmd = [BIN, "train", yaml, f"output_dir={out}", f"eval_steps={eval_steps}", f"logging_steps={eval_steps}", *keys]
    t0 = time.time()
    if machines == 1:
        text = bench_dp.run(["taskset", "-c", "0", *cmd])
    else:
        text = bench_dp.run([KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", *PIN, *cmd])
    wall = time.time() - t0
    with open(out + ".log", "w") as fh:
        fh.write(text)
    hist = json.load(open(os.path.join(out, "trainer_state.json")))["log_history"]
    runtime = {h["step"]: h["eval_runtime"] for h in hist if "eval_runtime" in h and "eval_loss" in h}
    curve, spent = [], 0.0
    for line in open(os.path.join(out, "trainer_log.jsonl")):
        r = json.loads(line)
        if "eval_loss" not in r:
            continue
        spent += runtime.get(r["current_steps"], 0.0)
        seen = r["current_steps"] * samples
        curve.append((r["current_steps"], seen, parse_hms(r["elapsed_time"]) - spent, r["eval_loss"]))
    final = re.search(r"eval_loss ([0-9.]+) on", text)
    trained = re.search(r"trained (\d+) steps in ([0-9.]+) s", text)
    steps, secs = int(trained.group(1)), float(trained.group(2))
    evals = sum(runtime.values())
    curve.append((steps, steps * samples, secs - evals, float(final.group(1))))  # the final evaluation
    return dict(curve=curve, final=float(final.group(1)), steps=steps, samples=samples, train_s=secs, wall_s=wall, load=load(),
                ms_step=1e3 * (secs - evals) / steps, sent=re.search(r"([0-9.]+) MB per step sent", text))


def task(a):
    d, yaml = task_setup(a)
    runs = {}
    runs["1 machine"] = task_run(a, yaml, os.path.join(d, "one"), 1, [])
    log(f"task: one machine: eval {runs['1 machine']['final']:.4f}, {runs['1 machine']['ms_step']:.0f} ms/step")
    # the same recipe as the two-machine runs (global batch 8 through accumulation 2): what a user who adds a
    # machine and halves gradient_accumulation_steps compares with
    runs["1 machine, batch 8"] = task_run(a, yaml, os.path.join(d, "one-b8"), 1, ["gradient_accumulation_steps=2"],
                                          samples=8)
    log(f"task: one machine, batch 8: eval {runs['1 machine, batch 8']['final']:.4f}")
    for mode in a.modes.split(","):
        keys = expand(MODES[mode][1], a.inner_task)
        runs[mode] = task_run(a, yaml, os.path.join(d, mode), 2, keys)
        log(f"task: {mode}: eval {runs[mode]['final']:.4f}, {runs[mode]['ms_step']:.0f} ms/step")
    # the eval loss every run reaches, and when each reaches it (interpolated between evaluations)
    target = max(min(e for *_, e in r["curve"]) for r in runs.values())

    def reach(r):
        prev = None
        for step, seen, sec, e in r["curve"]:
            if e <= target:
                if prev is None or prev[3] == e:
                    return sec
                return prev[2] + (sec - prev[2]) * (prev[3] - target) / (prev[3] - e)
            prev = (step, seen, sec, e)
        return r["train_s"]
    ddp = runs.get("ddp")
    one, same = runs["1 machine"], runs["1 machine, batch 8"]
    print("\n### Real task: `stage: pt` on c4_demo, fresh Qwen3 (hidden 64, 2 layers, vocab 151936: 9.83M "
          "parameters, 39 MB of gradients), full training, the same tokens in every run\n")
    print(f"Eval loss every run reaches: {target:.4f}.\n")
    print("| run | steps x samples | final eval loss | vs plain DP | mean step ms (eval excluded) | efficiency vs 1 "
          "machine | MB sent per step by each machine | time to eval loss " + f"{target:.3f} s | speed-up vs 1 machine, "
          "batch 8 | vs 1 machine, batch 4 | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        alone = name.startswith("1 machine")
        rel = f"{100 * (r['final'] / ddp['final'] - 1):+.2f}%" if ddp and not alone else "-"
        # efficiency: the step of one machine computing the same micro-batch of 4, over this run's step
        eff = f"{one['ms_step'] / r['ms_step'] * (r['samples'] // 4 if alone else 1):.3f}"
        t = reach(r)
        print(f"| {name} | {r['steps']} x {r['samples']} | {r['final']:.4f} | {rel} | "
              f"{r['ms_step']:.0f} | {eff} | {r['sent'].group(1) if r['sent'] else '0'} | {t:.0f} | "
              f"{reach(same) / t:.2f}x | {reach(one) / t:.2f}x | {r['load']:.1f} |")
    if a.png:
        plot(runs, target, a.png)
    return [dict(part="task", run=name, **{k: v for k, v in r.items() if k != "sent"},
                 sent_mb=float(r["sent"].group(1)) if r["sent"] else 0.0) for name, r in runs.items()]


def plot(runs, target, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in runs.items():
        xs = [s * 256 / 1e3 for _, s, _, _ in r["curve"]]
        ax[0].plot(xs, [e for *_, e in r["curve"]], marker="o", ms=2.5, label=name)
        ax[1].plot([t for _, _, t, _ in r["curve"]], [e for *_, e in r["curve"]], marker="o", ms=2.5, label=name)
    ax[0].set_xlabel("thousand tokens trained (all machines)")
    ax[1].set_xlabel("seconds of training (evaluation excluded)")
    for x in ax:
        x.set_ylabel("eval loss (held-out 5% of c4_demo)")
        x.axhline(target, color="grey", lw=0.6, ls="--")
        x.grid(alpha=0.3)
        x.legend()
    ax[0].set_title("eval loss against tokens: parity")
    ax[1].set_title("eval loss against time over 100 Mbit/s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    log(f"wrote {path}")


# ---------------------------------------------------------------------------------------------- balance

def balance(a):
    d, yaml = task_setup(a)
    # global batch 16 (2 ranks x 4 x 2 accumulation): a share moves in steps of one sample, 1/16 of the batch
    keys = [f"max_steps={a.balance_steps}", "logging_steps=10", "eval_strategy=no", "val_size=0", "gradient_accumulation_steps=2"]

    def tps(text, last=2):
        v = [float(x) for x in re.findall(r"\| ([0-9.]+) tok/s \|", text)]
        return statistics.mean(v[-last:]), v

    def busy(core):
        return subprocess.Popen(["taskset", "-c", str(core), "sh", "-c", "while :; do :; done"])

    out = lambda name: [f"output_dir={os.path.join(d, name)}"]
    alone0, _ = tps(bench_dp.run(["taskset", "-c", "0", BIN, "train", yaml, *keys, *out("b0")]))
    hog = busy(1)
    try:
        alone1, _ = tps(bench_dp.run(["taskset", "-c", "1", BIN, "train", yaml, *keys, *out("b1")]))
        plain, _ = tps(bench_dp.run(["mpirun", "-n", "2", "--bind-to", "core", "--map-by", "core", "-x",
                                     "OMP_NUM_THREADS", BIN, "train", yaml, *keys,
                                     *out("bplain")]))
    finally:
        hog.kill()
        hog.wait()
    # balanced: the busy loop starts once the run is under way
    p = subprocess.Popen(["mpirun", "-n", "2", "--bind-to", "core", "--map-by", "core", "-x", "OMP_NUM_THREADS", BIN,
                          "train", yaml, *keys, "balance_ranks=true",
                          f"max_steps={a.balance_steps * 5 // 3}", *out("bbal")], env=ENV, stdout=subprocess.PIPE, text=True)
    time.sleep(a.balance_delay)
    hog = busy(1)
    try:
        text = p.communicate()[0]
    finally:
        hog.kill()
        hog.wait()
    if p.returncode:
        sys.exit(f"bench_lowcomm: balanced run failed:\n{text}")
    bal, series = tps(text)
    notes = [l for l in text.splitlines() if "balance:" in l]
    print("\n### Unequal ranks: balance_ranks (2 ranks on this machine, rank 1's core shared with a busy loop)\n")
    print("| run | tokens/s |\n|---|---|")
    print(f"| rank 0 alone (core 0) | {alone0:.0f} |\n| rank 1 alone (core 1, beside the busy loop) | {alone1:.0f} |")
    print(f"| sum of the two | {alone0 + alone1:.0f} |")
    print(f"| data parallel, global batch 16, equal shares | {plain:.0f} ({plain / (alone0 + alone1):.3f} of the sum) |")
    print(f"| data parallel, balance_ranks, after rebalancing | **{bal:.0f} ({bal / (alone0 + alone1):.3f} of the sum)** |")
    print("\nThe balanced run's log (the busy loop started " + f"{a.balance_delay:.0f} s into it; tokens/s per window: "
          + ", ".join(f"{x:.0f}" for x in series) + "):\n")
    print("```\n" + "\n".join(notes) + "\n```")
    return [dict(part="balance", alone0=alone0, alone1=alone1, plain=plain, balanced=bal, windows=series, notes=notes)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="link,scaling,task,balance")
    ap.add_argument("--configs", default="tiny,small")
    ap.add_argument("--modes", default="ddp,ddp-bf16,ddp-int8,diloco,diloco-int8")
    ap.add_argument("--inner-tiny", type=int, default=8)
    ap.add_argument("--inner-small", type=int, default=8)
    ap.add_argument("--inner-task", type=int, default=8)
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--balance-delay", type=float, default=25)
    ap.add_argument("--balance-steps", type=int, default=60)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--png", default="")
    a = ap.parse_args()
    parts = a.parts.split(",")
    a.tmp = tempfile.mkdtemp(prefix="bench-lowcomm-")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
    print(f"Command: `bench/bench_lowcomm.sh {' '.join(sys.argv[1:])}`; CPU: {cpu} ({os.cpu_count()} cores); "
          f"tandem {rev}; {time.strftime('%Y-%m-%d %H:%M')}; load average at start "
          f"{open('/proc/loadavg').read().split()[0]}")
    rows, rate = [], (None, None)
    netns = any(p in parts for p in ("link", "scaling", "task"))
    if netns:
        bench_dp.run([KIT, "up", *bench_dp.SHAPE])
    try:
        if netns:
            rate = (bench_dp.iperf_rate(), bench_dp.iperf_rate(bidir=True))
            log(f"link: {rate[0]:.2f} MB/s one stream, {rate[1]:.2f} MB/s each way at once")
            rows.append(dict(part="link", MBps=rate[0], bidir_MBps=rate[1]))
        if "scaling" in parts:
            rows += scaling(a, rate)
        if "task" in parts:
            rows += task(a)
    finally:
        if netns:
            bench_dp.run([KIT, "down"])
    if "balance" in parts:
        rows += balance(a)
    print(f"\nLoad average at the end: {open('/proc/loadavg').read().split()[0]}")
    if a.json:
        with open(a.json, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r, default=str) + "\n")
    shutil.rmtree(a.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
