"""ttq.py -- time to a target eval loss (issue 27): two machines over a 100 Mbit/s link against the best
one-machine recipe, full training (`stage: pt`) and LoRA SFT, on a small Qwen3 and a corpus that does not repeat.

Inputs (bench/ttq_data.py, generated under --work, nothing committed): Qwen3's tokenizer cut to its bytes + 1792
merges (2074 tokens), a fresh Qwen3 (hidden 128, 4 layers, tied embeddings: 1.06M parameters, 4.2 MB of fp32
gradients), the Python 3.11 + Perl 5.36 sources Debian installs as `stage: pt` text (12.6M tokens, 24 rows held
out), and a generated alpaca set for LoRA SFT on top of a base trained by the pt part.

Machines: one machine = one rank pinned to its own core, one thread. Two machines = network namespaces joined by
a veth pair shaped to 100 Mbit/s both ways (bench_dp's shaping, prefix TANDEM_NETNS=tttq), one rank per machine
pinned to its own core (bench_lowcomm's setting), always torn down.

Method. Eval loss against steps does not depend on the machine's load (one thread, fixed reduction orders), so
recipes are compared by loss against steps first (`explore`: two one-machine runs at once, one per core, or
two ranks on this host with their own TANDEM_NODE_NAME, which fakes two machines for the loss), each mode's
step time is measured separately over the shaped link (`steptime`), and time to target = steps to target x step
time. The headline (`headline`) then runs the winners as real wall-clock runs, curves against tokens and wall
time as a PNG. Time is training time: evaluation (and the start-up before step 1) excluded.

Usage (root, for the namespaces):
  bench/ttq.sh setup
  bench/ttq.sh explore  --kind ft|lora --recipe NAME:MACHINES:key=v,key=v ... [--netns]
  bench/ttq.sh steptime --kind ft|lora --recipe ... [--steps 200]
  bench/ttq.sh table    --kind ft|lora [--target LOSS] [--ref NAME]
  bench/ttq.sh headline --recipe [ft/|lora/]NAME:... ... [--png docs/ttq]   (writes docs/ttq_ft.png, _lora.png)
Every run appends one JSON row (its eval curve, step time, bytes) to WORK/results.jsonl.
"""
import argparse, json, os, re, shutil, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_dp  # noqa: E402  (run, iperf_rate, the link shaping)

ROOT = os.path.dirname(HERE)
BIN = os.path.join(ROOT, "build", "tandem")
KIT = os.path.join(ROOT, "scripts", "netns", "netns.sh")
ENV = bench_dp.ENV
ENV["TANDEM_NETNS"] = "tttq"
PIN = ["sh", "-c", 'exec taskset -c "$OMPI_COMM_WORLD_RANK" "$0" "$@"']
# two ranks on this host, each its own "machine" for the comm layer (DiLoCo's rounds, compression between nodes)
FAKE = ["mpirun", "-n", "2", "--bind-to", "core", "--map-by", "core", "-x", "OMP_NUM_THREADS", "--mca", "btl",
        "self,vader,tcp", "sh", "-c", 'TANDEM_NODE_NAME=ttq-m$OMPI_COMM_WORLD_RANK exec "$0" "$@"']
BLOCK = 255  # the pt part's packed samples: cutoff_len 256 blocks train on 255 tokens each (the log says so)

PT_YAML = """model_name_or_path: {model}
stage: pt
finetuning_type: full
dataset: ttq_corpus
dataset_dir: {data}
cutoff_len: 256
val_size: 24
eval_strategy: steps
per_device_eval_batch_size: 16
per_device_train_batch_size: 4
learning_rate: 2.0e-3
lr_scheduler_type: cosine
warmup_steps: 100
max_steps: 3000
disable_gradient_checkpointing: true
overwrite_output_dir: true
save_strategy: "no"
report_to: none
seed: 42
"""

SFT_YAML = """model_name_or_path: {model}
stage: sft
finetuning_type: lora
lora_rank: 8
lora_target: all
template: qwen3_nothink
dataset: ttq_sft
dataset_dir: {data}
cutoff_len: 128
val_size: 256
eval_strategy: steps
per_device_eval_batch_size: 64
per_device_train_batch_size: 8
learning_rate: 2.0e-3
lr_scheduler_type: cosine
warmup_steps: 50
max_steps: 2000
overwrite_output_dir: true
save_strategy: "no"
report_to: none
seed: 42
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load():
    return float(open("/proc/loadavg").read().split()[0])


def paths(a):
    w = a.work
    return dict(data=os.path.join(w, "data"), fresh=os.path.join(w, "qwen3-fresh"), base=os.path.join(w, "qwen3-base"),
                pt=os.path.join(w, "pt.yaml"), sft=os.path.join(w, "sft.yaml"), runs=os.path.join(w, "runs"),
                results=os.path.join(w, "results.jsonl"))


def setup(a):
    p = paths(a)
    os.makedirs(p["runs"], exist_ok=True)
    out = subprocess.run([sys.executable, os.path.join(HERE, "ttq_data.py"), a.work], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    log("data: " + out.strip())
    if not os.path.exists(os.path.join(p["fresh"], "model.safetensors")):
        bench_dp.run([BIN, "init-model", os.path.join(a.work, "config.json"), p["fresh"], "--tokenizer",
                      os.path.join(a.work, "tokenizer")])
    open(p["pt"], "w").write(PT_YAML.format(model=p["fresh"], data=p["data"]))
    open(p["sft"], "w").write(SFT_YAML.format(model=p["base"], data=p["data"]))
    # tokenize once (cached in TANDEM_CACHE_DIR), so that runs started together do not all do it
    bench_dp.run([BIN, "train", p["pt"], "max_steps=1", "eval_strategy=no", f"output_dir={p['runs']}/tok-pt"])


def parse_recipe(s, kind):
    """[KIND/]NAME:MACHINES:key=v,key=v -> (name, machines, [key=v], kind): KIND ft or lora, default --kind"""
    name, machines, keys = (s.split(":", 2) + [""])[:3]
    if "/" in name:
        kind, name = name.split("/", 1)
    if kind not in ("ft", "lora"):
        sys.exit(f"ttq: recipe '{s}': kind must be ft or lora")
    return name, int(machines), [k for k in keys.split(",") if k], kind


def command(a, machines, yaml, out, keys, core=0, netns=False):
    cmd = [BIN, "train", yaml, f"output_dir={out}", *keys]
    if machines == 1:
        return ["taskset", "-c", str(core), *cmd]
    if netns:
        return [KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", *PIN, *cmd]
    return FAKE + cmd


def curve(out, tokens_per_step):
    """[(step, tokens, train_seconds, eval_loss)] and the step lines' times: evaluation time subtracted."""
    times = {}
    for line in open(os.path.join(out, "tandem_ranks.jsonl")):
        r = json.loads(line)
        if r.get("kind") == "step":
            times[r["step"]] = r["time"]
    hist = json.load(open(os.path.join(out, "trainer_state.json")))["log_history"]
    evals = sorted((h["step"], h["eval_loss"], h.get("eval_runtime", 0.0)) for h in hist if "eval_loss" in h)
    pts, spent = [], 0.0
    for step, loss, rt in evals:
        t = times.get(step)
        if t is None:
            continue
        pts.append((step, step * tokens_per_step, t - spent, loss))
        spent += rt
    last = max(times)
    final = os.path.join(out, "eval_results.json")  # the evaluation after the last step (not in log_history)
    if os.path.exists(final) and (not pts or pts[-1][0] != last):
        pts.append((last, last * tokens_per_step, times[last] - spent, json.load(open(final))["eval_loss"]))
    return pts, times, spent


def by_window(times, evals, n=8):
    """Mean ms a step in n windows of the run (steps right after an evaluation left out): a run that met a change of
    the host's speed (another job starting) shows it here, where the whole run's mean hides it (issue 27: the LoRA
    DiLoCo headline ran 46.9 ms a step until its step 1200 and 55 after, every phase slower at once)."""
    d = [(s, times[s] - times[s - 1]) for s in sorted(times) if s - 1 in times and s - 1 not in evals]
    if len(d) < n:
        return []
    w = (len(d) + n - 1) // n
    return [round(1e3 * sum(x for _, x in d[i:i + w]) / len(d[i:i + w]), 1) for i in range(0, len(d), w)]


def finish(a, name, kind, machines, keys, out, text, wall, netns):
    ys = open(out + ".yaml").read()
    bs = int(next(v for k, v in (l.split(": ", 1) for l in ys.splitlines() if ": " in l) if k == "per_device_train_batch_size"))
    for k in keys:
        if k.startswith("per_device_train_batch_size="):
            bs = int(k.split("=")[1])
        if k.startswith("gradient_accumulation_steps="):
            bs *= int(k.split("=")[1])
    samples = bs * machines
    pts, times, spent = curve(out, samples * (BLOCK if kind == "ft" else 1))
    steps = max(times)
    # step time: whole run from step 1, evaluation excluded (DiLoCo: whole rounds, so their ends are counted)
    ms = 1e3 * (times[steps] - times[min(times)] - spent) / max(1, steps - min(times))
    sent = re.findall(r"([0-9.]+) MB per step sent", text)
    windows = by_window(times, {p[0] for p in pts})
    row = dict(name=name, kind=kind, machines=machines, keys=keys, netns=netns, samples=samples, steps=steps,
               curve=pts, ms_step=ms, ms_windows=windows, wall_s=wall, load=load(), sent=float(sent[-1]) if sent else 0.0,
               final=pts[-1][3] if pts else None, when=time.strftime("%Y-%m-%d %H:%M:%S"),
               rev=subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                  text=True).stdout.strip())
    with open(paths(a)["results"], "a") as fh:
        fh.write(json.dumps(row) + "\n")
    log(f"{name}: {steps} steps, eval {row['final']}, {ms:.1f} ms/step (eval excluded), load {row['load']:.1f}")
    if windows:
        log(f"{name}: ms/step by eighth of the run: {windows}" + (
            "  <- differ by over 10%: the host's speed changed during the run" if max(windows) > 1.1 * min(windows) else ""))
    return row


def launch(a, recipe, core, netns, extra=()):
    name, machines, keys, kind = recipe
    p = paths(a)
    out = os.path.join(p["runs"], kind + "-" + name + ("-netns" if netns else ""))
    if os.path.exists(out):
        shutil.rmtree(out)
    yaml = p["pt"] if kind == "ft" else p["sft"]
    if kind == "lora" and not os.path.exists(os.path.join(p["base"], "model.safetensors")):
        sys.exit(f"ttq: LoRA runs need a base model in {p['base']}: copy config.json, model.safetensors and "
                 "tokenizer*.json of a finished full-training run there (docs/performance.md used runs/ft-b4-lr5e-3)")
    shutil.copy(yaml, out + ".yaml")
    keys = list(keys) + list(extra)
    cmd = command(a, machines, yaml, out, keys, core, netns)
    log("  $ " + " ".join(cmd))
    fh = open(out + ".log", "w")
    proc = subprocess.Popen(cmd, env=ENV, stdout=fh, stderr=subprocess.STDOUT, text=True)
    return dict(proc=proc, fh=fh, out=out, name=name, machines=machines, keys=keys, t0=time.time(), netns=netns,
                kind=kind)


def wait(a, job):
    rc = job["proc"].wait()
    job["fh"].close()
    text = open(job["out"] + ".log").read()
    if rc:
        sys.exit(f"ttq: run {job['name']} failed ({rc}):\n{text[-3000:]}")
    return finish(a, job["name"], job["kind"], job["machines"], job["keys"], job["out"], text, time.time() - job["t0"],
                  job["netns"])


def run_all(a, recipes, netns, extra=()):
    """One-machine recipes two at a time (one per core), two-machine recipes alone."""
    rows, ones = [], [r for r in recipes if r[1] == 1]
    for i in range(0, len(ones), 2):
        jobs = [launch(a, r, core, netns, extra) for core, r in enumerate(ones[i:i + 2])]
        rows += [wait(a, j) for j in jobs]
    for r in recipes:
        if r[1] == 2:
            rows.append(wait(a, launch(a, r, 0, netns, extra)))
    return rows


def with_netns(fn):
    bench_dp.run([KIT, "up", *bench_dp.SHAPE])
    try:
        rate = (bench_dp.iperf_rate(), bench_dp.iperf_rate(bidir=True))
        log(f"link: {rate[0]:.2f} MB/s one stream, {rate[1]:.2f} MB/s each way at once")
        with open(os.path.join(ARGS.work, "link.jsonl"), "a") as fh:
            fh.write(json.dumps(dict(MBps=rate[0], bidir_MBps=rate[1], when=time.strftime("%Y-%m-%d %H:%M"))) + "\n")
        return fn()
    finally:
        bench_dp.run([KIT, "down"])


# ------------------------------------------------------------------------------------------------ table

def reach(pts, target):
    """(step, seconds) at which the eval curve first reaches target, interpolated between evaluations."""
    prev = None
    for step, _, sec, e in pts:
        if e <= target:
            if prev is None:
                return step, sec
            f = (prev[3] - target) / (prev[3] - e)
            return prev[0] + f * (step - prev[0]), None if sec is None else prev[2] + f * (sec - prev[2])
        prev = (step, None, sec, e)
    return None, None


def loss_at(pts, sec):
    """The eval loss of a curve at training time sec (linear between evaluations; None past its end)."""
    prev = None
    for p in pts:
        if p[2] >= sec:
            if prev is None:
                return p[3]
            return prev[3] + (p[3] - prev[3]) * (sec - prev[2]) / (p[2] - prev[2])
        prev = p
    return None


def results(a, kind=None):
    rows = [json.loads(l) for l in open(paths(a)["results"])] if os.path.exists(paths(a)["results"]) else []
    last = {}
    for r in rows:  # the newest run of each name and setting
        if r["kind"] == (kind or a.kind):
            last[(r["name"], r["netns"])] = r
    return last


def partial(a, last):
    """Runs stopped before their end (exploration cut short): their eval curve from the log's eval lines."""
    for log_path in sorted(os.listdir(paths(a)["runs"])):
        if not (log_path.startswith(a.kind + "-") and log_path.endswith(".log")) or log_path.endswith("-netns.log"):
            continue
        name = log_path[len(a.kind) + 1:-4]
        if (name, False) in last:
            continue
        text = open(os.path.join(paths(a)["runs"], log_path)).read()
        m = re.search(r"steps of (\d+) rank\(s\) x (\d+) x (\d+) sequences", text)
        if not m:
            continue
        samples = int(m.group(1)) * int(m.group(2)) * int(m.group(3))
        pts = [(int(s), int(s) * samples, None, float(e)) for s, e in re.findall(r"step (\d+) eval_loss ([0-9.]+)", text)]
        if pts:
            last[(name, False)] = dict(name=name, machines=int(m.group(1)), keys=["(stopped)"], samples=samples,
                                       steps=pts[-1][0], curve=pts, final=pts[-1][3], when="~")


def table(a):
    last = results(a)
    partial(a, last)
    loss = {k: v for k, v in last.items() if not k[1]}
    step_ms = {k[0]: v["ms_step"] for k, v in last.items() if k[1]}  # measured over the shaped link
    ref = loss.get((a.ref, False))
    target = a.target or (ref["final"] if ref else None)
    print(f"\n{a.kind}: target eval loss {target}; step times from netns runs where measured\n")
    unit = "tokens to target (M)" if a.kind == "ft" else "samples to target (M)"
    print(f"| run | machines | keys | steps x samples | final eval | steps to target | {unit} | "
          "ms/step (netns) | time to target s | vs ref |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tref = None
    if ref:
        s, _ = reach(ref["curve"], target)
        tref = s * step_ms[a.ref] / 1e3 if s and a.ref in step_ms else None
    for (name, _), r in sorted(loss.items(), key=lambda kv: kv[1]["when"]):
        if name.startswith(("test", "tok")):  # the harness's own checks
            continue
        s, _ = reach(r["curve"], target)
        ms = step_ms.get(name)
        t = s * ms / 1e3 if s and ms else None
        tok = s * r["samples"] * (BLOCK if a.kind == "ft" else 1) / 1e6 if s else None
        f = lambda x, fmt: format(x, fmt) if x is not None else "-"
        print(f"| {name} | {r['machines']} | {' '.join(r['keys'])} | {r['steps']} x {r['samples']} | {r['final']:.4f} | "
              f"{f(s, '.0f')} | {f(tok, '.2f')} | {f(ms, '.1f')} | {f(t, '.0f')} | "
              f"{f(tref / t if t and tref else None, '.2f')}x |")


def plot(a, kind, names, target, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    last = results(a, kind)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    unit = BLOCK if kind == "ft" else 1
    for n in names:
        r = last[(n, True)]
        pts = [p for p in r["curve"] if p[0] > 0]
        ax[0].plot([p[1] / 1e6 if unit > 1 else p[1] / 1e3 for p in pts], [p[3] for p in pts], label=n)
        ax[1].plot([p[2] for p in pts], [p[3] for p in pts], label=n)
    ax[0].set_xlabel("million tokens trained (all machines)" if unit > 1 else "thousand samples trained (all machines)")
    ax[1].set_xlabel("seconds of training (evaluation excluded)")
    for x in ax:
        x.set_ylabel("eval loss (held-out rows)")
        x.axhline(target, color="grey", lw=0.6, ls="--")
        x.grid(alpha=0.3)
        x.legend(fontsize=8)
    what = "full training (stage pt)" if kind == "ft" else "LoRA SFT"
    ax[0].set_title(f"{what}: eval loss against tokens")
    ax[1].set_title(f"{what}: eval loss against training time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    log(f"wrote {path}")


def headline(a, recipes):
    """Real wall-clock runs over the shaped link; one-machine runs two at a time (one per core)."""
    rows = with_netns(lambda: run_all(a, recipes, True))
    for kind in ("ft", "lora"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        ref = min((r for r in mine if r["machines"] == 1), key=lambda r: r["final"])  # the best one-machine recipe
        target = (a.target if kind == "ft" else a.target_lora) or ref["final"]
        if a.png:
            plot(a, kind, [r["name"] for r in mine], target, f"{a.png}_{kind}.png")
        _, tref = reach(ref["curve"], target)
        print(f"\n{kind}: target eval loss {target:.4f} (reference: {ref['name']})\n")
        print("| run | machines | keys | steps x samples | final eval | reference's eval at this run's last "
              "second | ms/step | MB sent per step | time to target s | speed-up | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in mine:
            _, t = reach(r["curve"], target)
            at = loss_at(ref["curve"], r["curve"][-1][2])
            print(f"| {r['name']} | {r['machines']} | {' '.join(r['keys'])} | {r['steps']} x {r['samples']} | "
                  f"{r['final']:.4f} | {'-' if at is None else format(at, '.4f')} | {r['ms_step']:.1f} | {r['sent']} | "
                  f"{'-' if t is None else round(t)} | {tref / t if t else 0:.2f}x | {r['load']:.1f} |")


ARGS = None


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["setup", "explore", "steptime", "table", "headline"])
    ap.add_argument("--work", default="/tmp/ttq")
    ap.add_argument("--kind", default="ft", choices=["ft", "lora"])
    ap.add_argument("--recipe", action="append", default=[])
    ap.add_argument("--netns", action="store_true", help="explore over the shaped link instead of on this host")
    ap.add_argument("--steps", type=int, default=200, help="steptime: steps of each short run")
    ap.add_argument("--target", type=float, default=0)
    ap.add_argument("--target-lora", type=float, default=0)
    ap.add_argument("--ref", default="")
    ap.add_argument("--png", default="")
    a = ARGS = ap.parse_args()
    ENV["TANDEM_CACHE_DIR"] = os.path.join(a.work, "cache")
    recipes = [parse_recipe(r, a.kind) for r in a.recipe]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    log(f"ttq {a.part}: CPU {cpu}, load {load():.1f}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    if a.part == "setup":
        setup(a)
    elif a.part == "explore":
        (with_netns if a.netns else (lambda f: f()))(lambda: run_all(a, recipes, a.netns))
    elif a.part == "steptime":
        rows = with_netns(lambda: run_all(a, recipes, True, [f"max_steps={a.steps}", "eval_steps=1000000"]))
        print("| kind | run | machines | keys | ms/step (mean from step 1, evaluation excluded) | MB sent per step "
              "by each machine | load |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['kind']} | {r['name']} | {r['machines']} | {' '.join(r['keys'][:-2])} | {r['ms_step']:.1f} | "
                  f"{r['sent']} | {r['load']:.1f} |")
    elif a.part == "table":
        table(a)
    elif a.part == "headline":
        headline(a, recipes)


if __name__ == "__main__":
    main()
