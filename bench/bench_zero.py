"""bench_zero.py -- sharded data parallelism (ZeRO stages 0-3): memory and step time, in one invocation.

Phases (every stage of a phase measured back to back, --rounds times; medians over rounds). Round r runs the
stages rotated by r places (round 0: 0, 1, 2, 3, 3g; round 1: 1, 2, 3, 3g, 0; ...), so over as many rounds as
stages each one runs once in every position: a host whose speed drifts within a round (seen on the KVM EPYC)
favours no stage. "paired" is the median over rounds of each round's own ratio to its own stage 0.
  local  `tandem bench train --dist --zero S` under mpirun on this machine, 1, 2 and 4 ranks of one thread,
         the small preset, full fine-tuning. Per rank: peak RSS, and the model state it holds after the last
         step (trainable parameters + gradients + AdamW moments, page residency), next to the ZeRO formula
         for P trainable parameters in fp32: stage 0 16P, 1 8P + 8P/N, 2 4P + 12P/N, 3 16P/N. Step time as a
         ratio to stage 0 at the same number of ranks (the ranks share this machine's cores, so only ratios
         within one N mean anything).
  netns  2 simulated machines (network namespaces, scripts/netns) with one rank each, joined by a veth pair
         shaped to 100 Mbit/s as bench_dp.py does; the tiny preset. Stage 2 moves the bytes of the plain
         all-reduce (reduce-scatter + all-gather = G each way for gradients of G bytes), stage 3 one and a half
         times that (the parameters are gathered twice, for forward and again for backward). The physical
         limit of a step is max(T1, first gradient + B / rate) with B the bytes one direction carries,
         rate one TCP stream's (iperf3), as in bench_dp.py, and the first gradient stage 0's (a sharded
         stage's own includes its waits for parameters).
  layout ZeRO's two shard layouts side by side (zero_shard_layout, src/trainer/shard_layout.h) over 100 Mbit/s
         links, 2 and 4 simulated machines (scripts/netns: 4 are wired through a switch namespace, each machine on
         its own shaped link) with one rank each; the tiny preset. Per machine count, in one invocation: DDP
         (stage 0), then stages 2 and 3 with contiguous shards (a bucket lies in one owner's shard: its one
         non-empty block travels the ring to the owner, B on each link it crosses, and the owner's own link
         idles in one direction) and with balanced ones (FSDP's layout: every unit split into M chunks,
         (M-1)/M B each way on every link). Step time as a ratio to DDP's.
PyTorch's FSDP is not measured beside it: Debian's torch 1.13 cannot import torch.distributed.fsdp under
Python 3.11 (a dataclass in its sharded-tensor metadata has a mutable default: ValueError at import).

Usage (root, for the namespaces):  bench/bench_zero.sh [--phases local,netns,layout] [--machines 2,4] [--rate R]
                                   [--rounds R] [--steps K] [--layout-batch B] [--local-ranks 1,2,4]
                                   [--layout-runs 0:balanced,2:balanced,...] [--json OUT.jsonl]
"""
import argparse, json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_dp import BIN, ENV, KIT, SHAPE, iperf_rate, run, tandem_json  # noqa: E402

ENV["TANDEM_NETNS"] = "tbzero"  # its own namespaces: a bench_dp.py run beside it keeps "tbench"

FORMULA = {0: lambda p, n: 16 * p, 1: lambda p, n: 8 * p + 8 * p / n, 2: lambda p, n: 4 * p + 12 * p / n,
           3: lambda p, n: 16 * p / n}


def local(preset, n, stage, steps):
    """stage 0-3, or "3g": stage 3 gathering its parameters as across machines instead of mapping one shared copy"""
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS", BIN, "bench",
           "train", "--preset", preset, "--steps", str(steps), "--warmup", "1", "--dist", "--zero", str(stage)[0]]
    return tandem_json(run(cmd + (["--zero-gather"] if stage == "3g" else [])))


def netns(preset, stage, steps):
    cmd = [KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", BIN, "bench", "train", "--preset",
           preset, "--steps", str(steps), "--warmup", "1", "--dist", "--zero", str(stage)]
    return tandem_json(run(cmd))


def netns_layout(machines, stage, layout, steps, batch):
    cmd = [KIT, "mpirun", "-n", str(machines), "--map-by", "node", "-x", "OMP_NUM_THREADS", BIN, "bench", "train",
           "--preset", "tiny", "--steps", str(steps), "--warmup", "1", "--dist", "--zero", str(stage),
           "--zero-layout", layout]
    return tandem_json(run(cmd + (["--batch", str(batch)] if batch else [])))


LAYOUT_RUNS = [(0, "balanced"), (2, "contiguous"), (2, "balanced"), (3, "contiguous"), (3, "balanced")]


def rotated(runs, r):
    """The round's order: the list turned r places, so drift within a round lands on every entry in turn."""
    k = r % len(runs)
    return list(runs[k:]) + list(runs[:k])


def paired(rs, base):
    """Median over rounds of a run's ratio to the same round's baseline (rounds hold one run of each)."""
    return statistics.median(x["ms_step"] / b["ms_step"] for x, b in zip(rs, base))


def layouts(a, out):
    """Contiguous vs balanced shards at each machine count, every configuration back to back per round."""
    for machines in (int(m) for m in a.machines.split(",")):
        shape = [a.rate if x == "100mbit" else x for x in SHAPE]
        subprocess.run([KIT, "up", "--machines", str(machines), *shape], env=ENV, check=True)
        try:
            rows = {}
            for r in range(a.rounds):
                for s, lay in rotated(a.layout_runs, r):
                    rows.setdefault((s, lay), []).append(netns_layout(machines, s, lay, a.steps + 2, a.layout_batch))
        finally:
            subprocess.run([KIT, "down"], env=ENV)
        load = open("/proc/loadavg").read().split()[0]
        first = rows[(0, "balanced")][0]
        g = first["grad_mb"] * 1048576.0 / 1e6
        print(f"\nlayout, {machines} machines x 1 rank over {a.rate}, tiny preset ({g:.1f} MB of gradients), "
              f"batch {first['batch']} x {first['seq']} tokens a rank, {a.rounds} round(s), load average {load} "
              "after the runs")
        print("| machines | stage | shards | ms/step | vs DDP | paired | per link and unit of B bytes |")
        print("|---|---|---|---|---|---|---|")
        base = statistics.median(x["ms_step"] for x in rows[(0, "balanced")])
        for (s, lay), rs in rows.items():
            ms = statistics.median(x["ms_step"] for x in rs)
            link = "2 (M-1)/M B each way" if s == 0 else "B, one way" if lay == "contiguous" else "(M-1)/M B each way"
            pr = paired(rs, rows[(0, "balanced")])
            print(f"| {machines} | {s} | {'-' if s == 0 else lay} | {ms:.0f} | {ms / base:.3f} | {pr:.3f} | {link} |")
            if out:
                for i, x in enumerate(rs):
                    out.write(json.dumps(dict(x, round=i, phase="layout", machines=machines)) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", default="local,netns,layout")
    ap.add_argument("--machines", default="2,4", help="machine counts of the layout phase")
    ap.add_argument("--rate", default="100mbit", help="the layout phase's link rate (tc's units); a slower one "
                    "stands for faster compute where the cores are too few for the ranks")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layout-batch", type=int, default=0, help="the layout phase's sequences a rank and step "
                    "(default the tiny preset's 8); fewer make a step link-bound at the real rate where the cores "
                    "are too few for the ranks: the compute shrinks, the bytes do not")
    ap.add_argument("--layout-runs", default=",".join(f"{s}:{lay}" for s, lay in LAYOUT_RUNS),
                    help="the layout phase's configurations, STAGE:LAYOUT,... (default all five; 0:balanced, DDP, is "
                         "the baseline and must be one: e.g. 0:balanced,2:balanced for more rounds of the one ratio)")
    ap.add_argument("--json", default="")
    ap.add_argument("--local-ranks", default="1,2,4", help="rank counts of the local phase (2 alone: more rounds "
                    "of the issue's one-machine comparison in the same time)")
    a = ap.parse_args()
    phases = a.phases.split(",")
    try:
        a.layout_runs = [(int(x.split(":")[0]), x.split(":")[1]) for x in a.layout_runs.split(",")]
    except (IndexError, ValueError):
        sys.exit(f"bench_zero: --layout-runs '{a.layout_runs}': expected STAGE:LAYOUT,... (e.g. 0:balanced,2:balanced)")
    if (0, "balanced") not in a.layout_runs or any(x not in LAYOUT_RUNS for x in a.layout_runs):
        sys.exit("bench_zero: --layout-runs must name 0:balanced (the baseline) and only these: "
                 + ",".join(f"{s}:{lay}" for s, lay in LAYOUT_RUNS))
    out = open(a.json, "a") if a.json else None
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    try:  # stage 3's shared copy gets 2 MB pages only where this allows them (comm_share.c)
        shmem = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        shmem = "unknown"
    print(f"bench_zero: {cpu}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, shmem THP {shmem}")
    if "local" in phases:
        rows = {}
        for r in range(a.rounds):
            for n in (int(x) for x in a.local_ranks.split(",")):
                for s in ((0,) if n == 1 else rotated((0, 1, 2, 3, "3g"), r)):
                    rows.setdefault((n, s), []).append(local("small", n, s, a.steps))
        print("\nlocal, small preset (full fine-tuning), 1 thread per rank; model state per rank after the last step")
        print("(stage 3: the ranks map one shared copy of the parameters, the default; 3g: stage 3 gathering them as "
              "across machines, --zero-gather)")
        print("| ranks | stage | ms/step | vs stage 0 | paired | peak RSS MB | model state MB after the step | "
              "ZeRO formula MB | ratio | peak model state MB in the step | peak / formula |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for (n, s), rs in rows.items():
            ms = statistics.median(x["ms_step"] for x in rs)
            base = statistics.median(x["ms_step"] for x in rows[(n, 0)])
            rss = statistics.median(x["peak_rss_mb"] for x in rs)
            state = statistics.median(x["state_mb"] for x in rs)
            f = FORMULA[int(str(s)[0])](rs[0]["trainable"], n) / 1048576.0
            # in the step: parameters + gradients sampled at every layer boundary, plus the (constant) AdamW shard
            opt = 8.0 * rs[0]["trainable"] / (n if s else 1) / 1048576.0
            peak = max(statistics.median(x["peak_params_grads_mb"] for x in rs) + opt, state) if s else state
            pr = paired(rs, rows[(n, 0)])
            print(f"| {n} | {s} | {ms:.0f} | {ms / base:.3f} | {pr:.3f} | {rss:.0f} | {state:.1f} | {f:.1f} | "
                  f"{state / f:.3f} | {peak:.1f} | {peak / f:.3f} |")
            if out:
                for i, x in enumerate(rs):
                    out.write(json.dumps(dict(x, round=i, phase="local", formula_mb=f)) + "\n")
    if "netns" in phases:
        subprocess.run([KIT, "up", *SHAPE], env=ENV, check=True)
        try:
            rate = iperf_rate()
            one = [tandem_json(run([BIN, "bench", "train", "--preset", "tiny", "--steps", str(a.steps + 2)]))
                   for _ in range(a.rounds)]
            rows = {}
            for r in range(a.rounds):
                for s in rotated((0, 2, 3), r):
                    rows.setdefault(s, []).append(netns("tiny", s, a.steps + 2))
        finally:
            subprocess.run([KIT, "down"], env=ENV)
        t1 = statistics.median(x["ms_step"] for x in one)
        g = one[0]["grad_mb"] * 1048576.0 / 1e6  # MB (10^6) of gradients
        print(f"\nnetns, 2 machines x 1 rank over 100 Mbit/s (one TCP stream {rate:.2f} MB/s), tiny preset; T1 = {t1:.0f} ms")
        print("| stage | ms/step | vs stage 0 | bytes each way MB | limit ms | vs limit | first gradient ms |")
        print("|---|---|---|---|---|---|---|")
        base = statistics.median(x["ms_step"] for x in rows[0])
        # the compute before the first gradient exists is stage 0's first gradient: a stage's own includes its
        # waits for gathered parameters, which the limit must not excuse
        first0 = statistics.median(x["first_grad_ms"] for x in rows[0])
        for s, rs in rows.items():
            ms = statistics.median(x["ms_step"] for x in rs)
            first = statistics.median(x["first_grad_ms"] for x in rs)
            b = g * (1.5 if s == 3 else 1.0)
            lim = max(t1, first0 + b / rate * 1000.0)
            print(f"| {s} | {ms:.0f} | {ms / base:.3f} | {b:.1f} | {lim:.0f} | {ms / lim:.3f} | {first:.0f} |")
            if out:
                for i, x in enumerate(rs):
                    out.write(json.dumps(dict(x, round=i, phase="netns", link_MBps=rate, limit_ms=lim)) + "\n")
    if "layout" in phases:
        layouts(a, out)


if __name__ == "__main__":
    main()
