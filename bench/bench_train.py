#!/usr/bin/python3
"""bench_train.py -- tandem vs the PyTorch reference: fp32 CPU training steps, side by side.

For every (config, threads) row it runs, each in its own process and one at a time:
  tandem:          OMP_NUM_THREADS=N build/tandem bench train --preset tiny|small [--lora] --steps K --warmup W
  PyTorch tuned:   ../shared/ref/run.sh        (OpenMP OpenBLAS + jemalloc) bench_ref.bench_config(...)
  PyTorch stock:   STOCK=1 ../shared/ref/run.sh (glibc malloc)              -- only with --stock
and, first, for every thread count, the fp32 sgemm 2048^3 peak (tandem's `bench sgemm`, bench_ref.sgemm_peak).
The PyTorch processes import ../shared/ref/bench_ref.py and call the functions its main() calls (same step,
same timing, same FLOP formula); only the sgemm measurement is moved to a process of its own so that its
48 MB of matrices do not count in the training process's peak RSS.  Peak RSS of every process is taken
the same way for both implementations: ru_maxrss of that one child, from os.wait4().

Step = forward + cross-entropy + backward + AdamW (+ zero_grad), random tokens, labels = inputs.
FLOPs per step (PaLM convention, attention counted without the causal-mask discount; bench_ref.py's formula):
  full fine-tuning:   6 * N * T                  + 12 * L * D * S * T
  LoRA (frozen base): (4 * N + 6 * N_lora) * T   + 12 * L * D * S * T
  N = non-embedding params (lm_head counted, also when tied), T = B * S tokens, L layers, D hidden, S seq.

Standard library only; run with /usr/bin/python3 (bench/bench_train.sh does).  See bench/README.md.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("tiny", "tiny-lora", "small", "small-lora")
TARGETS = dict(tuned=1.10, stock=1.25, sgemm_pct=85.0, rss=0.60)
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
OPENBLAS_OMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"

# Runs inside ../shared/ref (run.sh cd's there, so `python3 -c` finds bench_ref on sys.path via '').
# argv: sgemm THREADS | train CONFIG THREADS WARMUP STEPS.  Mirrors bench_ref.main(): interop threads = 1.
TORCH_CHILD = r"""
import json, sys
import torch, bench_ref
torch.set_num_interop_threads(1)
a = sys.argv[1:]
if a[0] == "sgemm":
    r = bench_ref.sgemm_peak(int(a[1]))
else:
    r = bench_ref.bench_config(a[1], int(a[2]), int(a[3]), int(a[4]))
r["env"] = bench_ref.env_info()
print(json.dumps(r), flush=True)
"""


# ----------------------------------------------------------------------------------------------- machine state
class ForeignLoad:
    """Cores used by processes other than this one and its reaped children between start() and stop()
    (same measure as bench_ref.py's ForeignLoad)."""

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK"), own, time.perf_counter()

    def start(self):
        self.b0 = self._busy()
        return self

    def stop(self):
        b1 = self._busy()
        return max(0.0, ((b1[0] - self.b0[0]) - (b1[1] - self.b0[1])) / (b1[2] - self.b0[2]))


def wait_quiet(max_wait, limit=0.15, window=2.0):
    """Wait (up to max_wait s) until other processes use < `limit` cores over a `window`-second sample.
    Returns the last sampled foreign load (None when not waiting at all)."""
    if max_wait <= 0:
        return None
    t0 = time.perf_counter()
    while True:
        m = ForeignLoad().start()
        time.sleep(window)
        load = m.stop()
        if load < limit or time.perf_counter() - t0 > max_wait:
            return load


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_rev():
    try:
        r = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty", "--abbrev=12"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


# ----------------------------------------------------------------------------------------------- child processes
def run_child(argv, env, cwd=None):
    """Runs one child to completion; returns rc, stdout, stderr, its own peak RSS (MB, from wait4), wall, foreign."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        mon = ForeignLoad().start()
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:
            p.kill()
            p.wait()
            raise
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        wall = time.perf_counter() - t0
        foreign = mon.stop()
        out.seek(0)
        err.seek(0)
        return dict(rc=p.returncode, stdout=out.read().decode(errors="replace"),
                    stderr=err.read().decode(errors="replace"), rss_mb=ru.ru_maxrss / 1024.0,
                    wall_s=wall, foreign=foreign)


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


class Runner:
    def __init__(self, a, tandem, ref_dir):
        self.a, self.tandem, self.ref_dir = a, tandem, ref_dir
        self.records, self.failures = [], 0

    def _env(self, threads, stock=False):
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "MALLOC_CONF", "STOCK"):  # run.sh decides these for PyTorch; none for tandem
            env.pop(k, None)
        env["OMP_NUM_THREADS"] = str(threads)
        if stock:
            env["STOCK"] = "1"
        return env

    def measure(self, impl, variant, what, threads, config=None, steps=None):
        """impl tandem|pytorch, variant tuned|stock|None, what sgemm|train. Returns the merged record or None."""
        load = wait_quiet(self.a.wait_quiet)
        if impl == "tandem":
            argv = [self.tandem, "bench", "sgemm"] if what == "sgemm" else \
                [self.tandem, "bench", "train", "--preset", config.removesuffix("-lora"), "--steps", str(steps),
                 "--warmup", str(self.a.warmup)] + (["--lora"] if config.endswith("-lora") else [])
            res = run_child(argv, self._env(threads))
            shown = f"OMP_NUM_THREADS={threads} " + shlex.join(argv)
        else:
            args = ["sgemm", str(threads)] if what == "sgemm" else \
                ["train", config, str(threads), str(self.a.warmup), str(steps)]
            argv = [os.path.join(self.ref_dir, "run.sh"), "-c", TORCH_CHILD] + args
            res = run_child(argv, self._env(threads, stock=variant == "stock"))
            shown = (f"OMP_NUM_THREADS={threads} " + ("STOCK=1 " if variant == "stock" else "")
                     + os.path.join(self.ref_dir, "run.sh") + " -c <bench_ref " + " ".join(args) + ">")
        r = last_json(res["stdout"]) if res["rc"] == 0 else None
        label = f"{impl}{'-' + variant if variant else ''} {what}{' ' + config if config else ''} threads={threads}"
        if r is None:
            self.failures += 1
            tail = "\n".join((res["stderr"] or res["stdout"]).strip().splitlines()[-15:])
            print(f"  FAILED {label} (exit {res['rc']}): {shown}\n{tail}", file=sys.stderr, flush=True)
            if impl == "pytorch" and "No module named 'torch'" in res["stderr"]:
                print("  python3-torch is missing: run ./scripts/install-deps.sh", file=sys.stderr)
            self.records.append(dict(kind="error", impl=impl, variant=variant, what=what, config=config,
                                     threads=threads, rc=res["rc"], stderr_tail=tail, cmd=shown))
            return None
        r = dict(r)
        r.update(kind=what, impl=impl, variant=variant, measured_peak_rss_mb=round(res["rss_mb"], 1),
                 wall_s=round(res["wall_s"], 2), foreign_driver=round(res["foreign"], 3),
                 quiet_before=None if load is None else round(load, 3), cmd=shown)
        if what == "train" and r.get("threads") != threads:
            print(f"  warning: {label} reports threads={r.get('threads')}", file=sys.stderr)
        self.records.append(r)
        if what == "sgemm":
            msg = f"{r['gflops_best']:.1f} GFLOP/s"
        else:
            msg = (f"{r['tok_s']:.0f} tok/s, {r['gflops']:.1f} GFLOP/s, {r['ms_step']:.1f} ms/step, "
                   f"peak RSS {res['rss_mb']:.0f} MB")
        print(f"  {label}: {msg}  ({res['wall_s']:.1f} s, foreign load {res['foreign']:.2f} cores)",
              file=sys.stderr, flush=True)
        return r


# ----------------------------------------------------------------------------------------------- report
def fmt(v, spec, suffix=""):
    return "–" if v is None else format(v, spec) + suffix


def ratio(x, y):
    return None if x is None or y in (None, 0) else x / y


def get(r, k):
    return None if r is None else r.get(k)


def evaluate(row):
    """Target checks that apply to this row: list of (name, passed).  Compared as printed in the table
    (ratios to 2 decimals, % of peak to an integer), so a cell never reads "1.10x" next to BELOW."""
    checks = []
    if row["vs_tuned"] is not None:
        checks.append(("tuned", round(row["vs_tuned"], 2) >= TARGETS["tuned"]))
    if row["vs_stock"] is not None:
        checks.append(("stock", round(row["vs_stock"], 2) >= TARGETS["stock"]))
    if row["threads"] == 1 and not row["config"].endswith("-lora") and row["sgemm_pct"] is not None:
        checks.append(("sgemm", round(row["sgemm_pct"]) >= TARGETS["sgemm_pct"]))
    if row["rss_ratio"] is not None:
        checks.append(("RSS", round(row["rss_ratio"], 2) <= TARGETS["rss"]))
    return checks


def main():
    ap = argparse.ArgumentParser(description="tandem vs PyTorch reference: training-step throughput and memory "
                                 "(markdown table on stdout, progress on stderr)")
    ap.add_argument("--configs", default=None, help="comma list of " + ",".join(CONFIGS) + " (default: all)")
    ap.add_argument("--threads", default=None, help="comma list of thread counts (default: 1,2)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps for both implementations "
                    "(default: 10 for tiny*, 5 for small*)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before timing (default: 2)")
    ap.add_argument("--stock", action="store_true", help="also run PyTorch stock (STOCK=1, glibc malloc)")
    ap.add_argument("--json", default="", help="append every raw result (one JSON object per line) to this file")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny, 1 thread, 3 steps")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                    help="before each measurement wait up to SECONDS until other processes use < 0.15 cores")
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"), help="tandem binary")
    ap.add_argument("--ref-dir", default=None, help="PyTorch reference folder (default: $TANDEM_SHARED_DIR/ref, "
                    "else <repo>/../shared/ref)")
    a = ap.parse_args()
    if a.quick:
        a.configs = a.configs or "tiny"
        a.threads = a.threads or "1"
        a.steps = a.steps or 3
    configs = [c.strip() for c in (a.configs or ",".join(CONFIGS)).split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown config(s) {','.join(bad)}; expected some of {','.join(CONFIGS)}")
    try:
        threads = [int(t) for t in (a.threads or "1,2").split(",") if t.strip()]
    except ValueError:
        ap.error("--threads: expected a comma list of integers")
    if not threads or min(threads) < 1:
        ap.error("--threads: expected positive integers")
    if a.steps is not None and a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")

    # ---- preflight
    if not (os.path.isfile(a.tandem) and os.access(a.tandem, os.X_OK)):
        sys.exit(f"bench_train: {a.tandem} not found: run `make build` first")
    shared = os.environ.get("TANDEM_SHARED_DIR")
    ref_dir = os.path.abspath(a.ref_dir or (os.path.join(shared, "ref") if shared else
                                            os.path.join(REPO, "..", "shared", "ref")))
    for f in ("run.sh", "bench_ref.py", "llama_ref.py"):
        if not os.path.isfile(os.path.join(ref_dir, f)):
            sys.exit(f"bench_train: PyTorch reference not found ({os.path.join(ref_dir, f)} missing); "
                     "set TANDEM_SHARED_DIR or pass --ref-dir")
    if subprocess.run(["/usr/bin/python3", "-c", "import importlib.util, sys; "
                       "sys.exit(importlib.util.find_spec('torch') is None)"]).returncode != 0:
        sys.exit("bench_train: python3-torch is missing for /usr/bin/python3: run ./scripts/install-deps.sh")
    if not (os.path.isfile(JEMALLOC) and os.path.isdir(OPENBLAS_OMP)):
        sys.exit(f"bench_train: the tuned PyTorch runtime needs {JEMALLOC} and {OPENBLAS_OMP} "
                 "(libjemalloc2, libopenblas0-openmp): run ./scripts/install-deps.sh")
    ncpu = os.cpu_count() or 1
    if max(threads) > ncpu:
        print(f"bench_train: warning: {max(threads)} threads on {ncpu} CPUs (oversubscribed)", file=sys.stderr)

    launcher = os.environ.get("BENCH_TRAIN_LAUNCHER") or sys.argv[0]
    command = shlex.join([launcher] + sys.argv[1:])
    meta = dict(kind="meta", date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                command=command, cpu=cpu_model(), nproc=ncpu, kernel=platform.release(), tandem_rev=git_rev(),
                tandem=a.tandem, ref_dir=ref_dir, configs=configs, threads=threads, steps=a.steps,
                warmup=a.warmup, stock=a.stock, wait_quiet=a.wait_quiet)
    print(f"bench_train: {len(configs)} config(s) x {len(threads)} thread count(s), "
          f"PyTorch {'tuned + stock' if a.stock else 'tuned'}", file=sys.stderr, flush=True)
    run = Runner(a, a.tandem, ref_dir)

    # ---- sgemm peaks, per thread count
    peaks = {}
    for th in threads:
        peaks[th] = dict(tandem=run.measure("tandem", None, "sgemm", th),
                         tuned=run.measure("pytorch", "tuned", "sgemm", th),
                         stock=run.measure("pytorch", "stock", "sgemm", th) if a.stock else None)

    # ---- training rows; the order of the implementations alternates from row to row
    rows = []
    order = ["tandem", "tuned"] + (["stock"] if a.stock else [])
    for name in configs:
        for th in threads:
            steps = a.steps or (10 if name.startswith("tiny") else 5)
            idx = len(rows)
            print(f"[{idx + 1}/{len(configs) * len(threads)}] {name}, {th} thread(s), {steps} steps",
                  file=sys.stderr, flush=True)
            res = {}
            for who in (order if idx % 2 == 0 else order[::-1]):
                if who == "tandem":
                    res[who] = run.measure("tandem", None, "train", th, name, steps)
                else:
                    res[who] = run.measure("pytorch", who, "train", th, name, steps)
            t, tu, st = res["tandem"], res["tuned"], res.get("stock")
            peak = get(peaks[th]["tandem"], "gflops_best")
            row = dict(config=name, threads=th, steps=steps, first=order[0] if idx % 2 == 0 else order[-1],
                       tandem_tok_s=get(t, "tok_s"), tuned_tok_s=get(tu, "tok_s"), stock_tok_s=get(st, "tok_s"),
                       tandem_gflops=get(t, "gflops"), tandem_sgemm=peak,
                       tandem_rss=get(t, "measured_peak_rss_mb"), tuned_rss=get(tu, "measured_peak_rss_mb"),
                       stock_rss=get(st, "measured_peak_rss_mb"),
                       tandem_ms=get(t, "ms_step"), tuned_ms=get(tu, "ms_step"), stock_ms=get(st, "ms_step"),
                       tandem_loss=get(t, "loss"), tuned_loss=get(tu, "loss"), acts_mb=get(t, "acts_mb"),
                       tandem_self_rss=get(t, "peak_rss_mb"),
                       flops_match=None if t is None or tu is None else
                       abs(t["flops_per_step"] - tu["flops_per_step"]) <= 1e-6 * tu["flops_per_step"],
                       foreign_max=max([x["foreign_driver"] for x in (t, tu, st) if x] or [0]))
            row["vs_tuned"] = ratio(row["tandem_tok_s"], row["tuned_tok_s"])
            row["vs_stock"] = ratio(row["tandem_tok_s"], row["stock_tok_s"])
            row["sgemm_pct"] = None if ratio(row["tandem_gflops"], peak) is None else \
                100 * row["tandem_gflops"] / peak
            row["rss_ratio"] = ratio(row["tandem_rss"], row["tuned_rss"])
            row["checks"] = evaluate(row)
            if row["flops_match"] is False:
                print(f"  warning: FLOP/step differs (tandem {t['flops_per_step']:.4g}, PyTorch "
                      f"{tu['flops_per_step']:.4g}): not the same model", file=sys.stderr)
            rows.append(row)

    # ---- report (stdout, markdown)
    print()
    print(f"Command: `{command}`  ")
    print(f"CPU: {meta['cpu']} ({ncpu} CPUs), kernel {meta['kernel']}; tandem {meta['tandem_rev']}; "
          f"{meta['date']}  ")
    tenv = next((r.get("env") for r in run.records if r.get("impl") == "pytorch" and r.get("env")), None)
    if tenv:
        print(f"PyTorch {tenv.get('torch')} (Python {tenv.get('python')}), BLAS: "
              f"{', '.join(os.path.basename(b) for b in tenv.get('blas') or []) or '?'}; "
              f"tuned = run.sh (OpenMP OpenBLAS + jemalloc), stock = STOCK=1 run.sh (glibc malloc)  ")
    step_list = ", ".join(f"{r['config']} {r['steps']}" for r in rows if r["threads"] == threads[0])
    print(f"Steps: {step_list} timed after "
          f"{a.warmup} warm-up, medians; every measurement in its own process, one at a time")
    print()
    print("| threads | tandem sgemm GFLOP/s | PyTorch tuned sgemm | PyTorch stock sgemm |")
    print("|---|---|---|---|")
    for th in threads:
        p = peaks[th]
        print(f"| {th} | {fmt(get(p['tandem'], 'gflops_best'), '.1f')} | {fmt(get(p['tuned'], 'gflops_best'), '.1f')}"
              f" | {fmt(get(p['stock'], 'gflops_best'), '.1f')} |")
    print()
    print("| config | threads | tandem tok/s | PyTorch tuned tok/s | ratio vs tuned | PyTorch stock tok/s | "
          "ratio vs stock | tandem GFLOP/s | % of sgemm peak | tandem peak RSS MB | PyTorch peak RSS MB | "
          "RSS ratio | targets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    n_pass = 0
    for r in rows:
        failed = [n for n, ok in r["checks"] if not ok]
        if not r["checks"]:
            verdict = "–"
        elif failed:
            verdict = "BELOW (" + ", ".join(failed) + ")"
        else:
            verdict, n_pass = "PASS", n_pass + 1
        print(f"| {r['config']} | {r['threads']} | {fmt(r['tandem_tok_s'], '.0f')} | {fmt(r['tuned_tok_s'], '.0f')} | "
              f"{fmt(r['vs_tuned'], '.2f', 'x')} | {fmt(r['stock_tok_s'], '.0f')} | {fmt(r['vs_stock'], '.2f', 'x')} | "
              f"{fmt(r['tandem_gflops'], '.1f')} | {fmt(r['sgemm_pct'], '.0f', '%')} | {fmt(r['tandem_rss'], '.0f')} | "
              f"{fmt(r['tuned_rss'], '.0f')} | {fmt(r['rss_ratio'], '.2f')} | {verdict} |")
    print()
    print(f"Targets: >= {TARGETS['tuned']:.2f}x PyTorch tuned, >= {TARGETS['stock']:.2f}x stock"
          f"{'' if a.stock else ' (not measured: --stock)'}, >= {TARGETS['sgemm_pct']:.0f}% of tandem's sgemm peak "
          f"(1-thread full rows), RSS ratio <= {TARGETS['rss']:.2f} (tandem / PyTorch tuned) -- "
          f"{n_pass}/{len(rows)} rows PASS")
    print()
    print("| config | threads | first | tandem ms/step | PyTorch tuned ms/step | PyTorch stock ms/step | tandem loss | "
          "PyTorch loss | tandem acts MB | PyTorch stock RSS MB | FLOP/step equal | foreign load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fm = "–" if r["flops_match"] is None else ("yes" if r["flops_match"] else "NO")
        print(f"| {r['config']} | {r['threads']} | {r['first']} | {fmt(r['tandem_ms'], '.1f')} | "
              f"{fmt(r['tuned_ms'], '.1f')} | {fmt(r['stock_ms'], '.1f')} | {fmt(r['tandem_loss'], '.4f')} | "
              f"{fmt(r['tuned_loss'], '.4f')} | {fmt(r['acts_mb'], '.0f')} | {fmt(r['stock_rss'], '.0f')} | {fm} | "
              f"{r['foreign_max']:.2f} |")
    worst = max([r["foreign_max"] for r in rows] or [0])
    if worst > 0.3:
        print(f"\nWarning: other processes used up to {worst:.2f} cores during a measurement; numbers are "
              "unreliable (use --wait-quiet 120 or rerun on an idle machine).")
    if run.failures:
        print(f"\n{run.failures} measurement(s) failed; see the messages above (stderr).")

    sys.stdout.flush()
    if a.json:
        with open(a.json, "a") as f:
            for rec in [meta] + run.records + [dict(kind="row", **{k: v for k, v in r.items() if k != "checks"},
                                                    targets={n: ok for n, ok in r["checks"]}) for r in rows]:
                f.write(json.dumps(rec) + "\n")
        print(f"bench_train: raw results appended to {a.json}", file=sys.stderr)
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
