#!/usr/bin/python3
"""omp_wait_policy.py -- which OpenMP wait policy survives a shared machine.

For each variant of the OpenMP wait settings it runs
  OMP_NUM_THREADS=<cores> build/tandem bench train --preset tiny --steps K --warmup 1
twice per round: on the machine as it is ("free"), and while another process holds one core ("busy": a
shell busy loop pinned with taskset to the last core). Rounds interleave the variants so that drift (other
tenants, thermal) spreads over all of them; the report gives the median tok/s per variant and condition,
busy/free, and the foreign load (cores used by other processes than ours, /proc/stat) seen meanwhile.

Variants: libgomp's default (OMP_WAIT_POLICY unset = GOMP_SPINCOUNT=300000, about 3 ms of spinning before a
waiting thread sleeps; set explicitly, because tandem now sets its own default when both are unset),
OMP_WAIT_POLICY=ACTIVE (spin ~5 minutes), PASSIVE (sleep at once), GOMP_SPINCOUNT=10000 and 1000 (short
spins), and "tandem" (neither variable set: what the binary chooses itself).

Usage: bench/omp_wait_policy.sh [--rounds R] [--steps K] [--only NAME,...] [--wait-quiet SECONDS] [--tandem PATH]   (see docs/performance.md)
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import REPO, ForeignLoad, cpu_model, git_rev, last_json, run_child, wait_quiet  # noqa: E402

VARIANTS = [
    ("libgomp default (GOMP_SPINCOUNT=300000)", {"GOMP_SPINCOUNT": "300000"}),
    ("OMP_WAIT_POLICY=ACTIVE", {"OMP_WAIT_POLICY": "ACTIVE"}),
    ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("GOMP_SPINCOUNT=10000", {"GOMP_SPINCOUNT": "10000"}),
    ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
    ("tandem (neither set)", {}),
]


def start_hog(cpu):
    """A process holding one core: a shell busy loop pinned to `cpu`."""
    argv = ["sh", "-c", "while :; do :; done"]
    if shutil.which("taskset"):
        argv = ["taskset", "-c", str(cpu)] + argv
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"))
    ap.add_argument("--only", default="", help="comma list: run only the variants whose name contains one of these")
    ap.add_argument("--wait-quiet", type=float, default=0,
                    help="before each measurement wait up to this many seconds for other tenants to go quiet")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    variants = [v for v in VARIANTS if not a.only or any(w in v[0] for w in a.only.split(","))]
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base["OMP_NUM_THREADS"] = str(cores)
    argv = [a.tandem, "bench", "train", "--preset", "tiny", "--steps", str(a.steps), "--warmup", "1"]
    res = {(name, cond): [] for name, _ in variants for cond in ("free", "busy")}
    foreign = {k: [] for k in res}
    for r in range(a.rounds):
        for name, env in variants:
            for cond in ("free", "busy"):
                wait_quiet(a.wait_quiet)
                hog = start_hog(cores - 1) if cond == "busy" else None
                try:
                    time.sleep(0.2)
                    mon = ForeignLoad().start()
                    out = run_child(argv, dict(base, **env))
                    load = mon.stop()
                finally:
                    if hog:
                        hog.kill()
                        hog.wait()
                j = last_json(out["stdout"]) if out["rc"] == 0 else None
                if not j:
                    print(f"omp_wait_policy: {name} {cond}: failed: {out['stderr'].strip()[-300:]}", file=sys.stderr)
                    return 1
                # the hog is our own child but not reaped until after stop(): its core counts as foreign here
                foreign[(name, cond)].append(max(0.0, load - (1.0 if hog else 0.0)))
                res[(name, cond)].append(j["tok_s"])
                print(f"  round {r + 1} {name:42s} {cond}: {j['tok_s']:8.1f} tok/s (foreign {load:.2f})",
                      file=sys.stderr, flush=True)
    quiet = (f" --wait-quiet {a.wait_quiet:g}" if a.wait_quiet else "") + (f" --only {a.only}" if a.only else "")
    print(f"Command: `bench/omp_wait_policy.sh --rounds {a.rounds} --steps {a.steps}{quiet}`  ")
    print(f"CPU: {cpu_model()}, {cores} cores; tandem {git_rev()}; "
          f"`OMP_NUM_THREADS={cores} tandem bench train --preset tiny --steps {a.steps} --warmup 1`; "
          f"busy = `taskset -c {cores - 1} sh -c 'while :; do :; done'`\n")
    print("| variant | free tok/s | busy tok/s | busy / free | foreign load (other tenants, cores) |")
    print("|---|---|---|---|---|")
    for name, _ in variants:
        f, b = statistics.median(res[(name, "free")]), statistics.median(res[(name, "busy")])
        fl = max(foreign[(name, "free")] + foreign[(name, "busy")])
        print(f"| {name} | {f:.0f} | {b:.0f} | {b / f:.2f} | ≤ {fl:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
