"""plan_fresh.py -- `tandem plan` against step times measured in the same invocation (bench/plan_validate.py
--fresh). The recorded rows in plan_validate.py mix a measurement of one day and machine with the codec costs
the plan measures where it runs; here every input the plan gets comes from this run:

  T1    one rank's step with the machine shared as in the multi-rank run: as many independent one-rank runs at
        once as the setup has ranks, each on one thread (bench_dp.py's "pair" when there are two), the mean of
        their step times (the plan models compute per rank, not the machine's sharing). The slowest of them is
        printed beside it: a synchronous step waits for its slowest rank at every exchange, so a core that runs
        slower paces them all, which the mean does not carry (DDP on one machine measured 1.00-1.155x this T1)
  link  one TCP stream each way at once over the shaped veth (iperf3 --bidir, the slower direction): what an
        exchange that keeps both directions busy gets
  link CPU  what `tandem bench allreduce` of 16 MB between the machines reports: CPU ns a machine spends per byte
        its link carries each way (processes + the kernel's softirq), passed as `tandem plan --link-cpu`
  link stretch  what the DDP row's own step says its backward lost per byte under the link (link_stretch_ns
        below), passed as `tandem plan --link-stretch`: wall time, which CPU seconds undercount
Then each strategy's step under mpirun, as `tandem bench train --dist` runs the trainer's step, rounds
interleaved so a drift of this VM hits every row alike; medians over rounds. Beside each mean step the run's own
split (medians over its steps): first_grad_ms, from the step's start to the first bucket's launch, and
comm_wait_ms, what the step waited for the exchange after backward (DDP and compressed DDP; ZeRO's waits inside
its passes are not in it).

Setups: local (1 machine x 2 ranks, small preset: shared-memory exchange), netns (2 machines x 1 rank over 100
Mbit/s, tiny preset: link-bound), netns4 (4 machines x 1 rank, each on its own 100 Mbit/s link to a switch
namespace; two ranks share each of this machine's cores, and T1 is measured sharing them the same way). Needs root
for the namespaces.
"""
import os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_dp  # noqa: E402
from bench_dp import BIN, ENV, KIT, SHAPE, run, tandem_json  # noqa: E402

ENV["TANDEM_NETNS"] = "tplan"  # its own namespaces: another bench's kit (bench_dp.py's "tbench") may be up
DILOCO_H = 8  # the config default (train_config.c): the plan reads it from the preset's YAML
FLAGS = {"ddp": [], "ddp+bf16": ["--compress", "bf16"], "ddp+int8": ["--compress", "int8"],
         "ddp+int4": ["--compress", "int4"], "zero1": ["--zero", "1"], "zero2": ["--zero", "2"],
         "zero3": ["--zero", "3"], "diloco": ["--diloco", str(DILOCO_H)],
         "diloco+int8": ["--diloco", str(DILOCO_H), "--compress", "int8"],
         "diloco+int4": ["--diloco", str(DILOCO_H), "--compress", "int4"]}
# (setup, preset, machines, ranks per machine, strategies)
SETUPS = {
    "local": ("small", 1, 2, ["ddp", "zero1", "zero2", "zero3"]),
    "netns": ("tiny", 2, 1, list(FLAGS)),
    "netns4": ("tiny", 4, 1, list(FLAGS)),
}
# a core per rank, as a machine's own (rank mod cores: two per core for netns4). Not `nproc` in the rank's shell:
# it prints OMP_NUM_THREADS (1 here), which put every rank on core 0 in the runs of 2026-11-28 (pin-rank.sh).
PIN = [os.path.join(os.path.dirname(HERE), "scripts", "pin-rank.sh")]
CORES = sorted(os.sched_getaffinity(0))


def steps_for(preset, strategy):
    if strategy.startswith("diloco"):
        return 2 * DILOCO_H  # two whole rounds: the round end and its exchange are in the mean
    return 6 if preset == "tiny" else 3


def one_rank_shared(preset, ranks, steps):
    """`ranks` independent one-rank runs at once, one per core (wrapping when there are more ranks than cores)."""
    cmd = lambda i: ["taskset", "-c", str(CORES[i % len(CORES)]), BIN, "bench", "train", "--preset", preset,
                     "--steps", str(steps)]
    print("  $ " + " & ".join(" ".join(cmd(i)) for i in range(ranks)), file=sys.stderr, flush=True)
    ps = [subprocess.Popen(cmd(i), env=ENV, stdout=subprocess.PIPE, text=True) for i in range(ranks)]
    outs = [p.communicate()[0] for p in ps]
    if any(p.returncode for p in ps):
        sys.exit(f"plan_fresh: a one-rank run failed: {outs}")
    steps = [tandem_json(o)["ms_mean"] / 1e3 for o in outs]
    print(f"  one-rank steps side by side: {', '.join(f'{t:.3f}' for t in steps)} s", file=sys.stderr, flush=True)
    return max(steps), statistics.mean(steps)


def link_cpu_ns(machines, ranks):
    """CPU ns a byte each way per machine, from tandem bench allreduce between the namespaces (pinned as the runs)."""
    log = os.path.join("/tmp", f"plan_fresh_bench_{os.getpid()}.jsonl")  # its link record: not the user's cache
    ENV["TANDEM_BENCH_LOG"] = log
    try:
        out = run([KIT, "mpirun", "-n", str(machines * ranks), "--map-by", "node", "-x", "OMP_NUM_THREADS", "-x",
                   "TANDEM_BENCH_LOG", *PIN, BIN, "bench", "allreduce", "--min", "16M", "--max", "16M", "--iters", "3",
                   "--warmup", "1", "--no-mpi"])
    finally:
        del ENV["TANDEM_BENCH_LOG"]
        if os.path.exists(log):
            os.remove(log)
    for line in out.splitlines():
        if line.startswith("# link CPU at "):
            return float(line.rsplit("--link-cpu", 1)[1])
    sys.exit(f"plan_fresh: bench allreduce printed no link CPU line:\n{out}")


def check_pinning(machines, ranks):
    """Every rank on the core pin-rank.sh promises (rank mod this process's cores), read back from the ranks."""
    n = machines * ranks
    show = ["sh", "-c", 'echo "pinned $OMPI_COMM_WORLD_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"']
    if machines > 1:
        out = run([KIT, "mpirun", "-n", str(n), "--map-by", "node", *PIN, *show])
    else:
        out = run(["mpirun", "-n", str(n), "--bind-to", "none", *PIN, *show])
    got = {int(f[1]): f[2] for f in (l.split() for l in out.splitlines() if l.startswith("pinned "))}
    want = {r: str(CORES[r % len(CORES)]) for r in range(n)}
    if got != want:
        sys.exit(f"plan_fresh: ranks are not pinned as intended: got rank -> cores {got}, expected {want}")


def multi_rank(setup, preset, machines, ranks, strategy):
    bench = [BIN, "bench", "train", "--preset", preset, "--steps", str(steps_for(preset, strategy)), "--dist",
             *FLAGS[strategy]]
    n = str(machines * ranks)
    if machines > 1:
        cmd = [KIT, "mpirun", "-n", n, "--map-by", "node", "-x", "OMP_NUM_THREADS", *PIN, *bench]
    else:
        cmd = ["mpirun", "-n", n, "--bind-to", "core", "--map-by", "core", "-x", "OMP_NUM_THREADS", "--mca", "btl",
               "self,vader", *bench]
    return tandem_json(run(cmd))


SPLIT = ("ms_mean", "ms_step", "first_grad_ms", "comm_wait_ms")


def link_stretch_ns(ddp, t1, link):
    """Compute a rank loses per byte its machine's link carries each way under DDP's bucket queue, from the DDP row's
    own split: its forward + backward + update took ms_step - comm_wait_ms against T1 alone; from the first bucket
    (first_grad_ms) to backward's end the link carried DDP's queue (2 (M-1)/M G: more than that time's worth, so
    the link was busy throughout), link B/s x that long. The update (~10 ms of the tiny preset) is counted as under
    the link: a slight underestimate. Wall time: what CPU seconds miss (wake-ups, softirq, cache) is in it."""
    compute = (ddp["ms_step"] - ddp["comm_wait_ms"]) / 1e3
    under = compute - ddp["first_grad_ms"] / 1e3
    ns = max(0.0, (compute - t1) / (under * link) * 1e9) if under > 0 else 0.0
    print(f"  link stretch: DDP's forward + backward + update {compute:.3f} s against T1 {t1:.3f} s, {under:.3f} s "
          f"of it after the first bucket at {link / 1e6:.2f} MB/s: {ns:.1f} ns a byte (0: none seen; the plan then "
          f"charges the link's CPU alone)", file=sys.stderr, flush=True)
    return ns


def measure(setup, rounds):
    """{strategy: {SPLIT key: median}}, T1 s (the one-rank runs' mean), the slowest of them s, link B/s, link CPU ns
    a byte."""
    preset, machines, ranks, strategies = SETUPS[setup]
    link, cpu = 11.95e6, 0.0  # unused by a one-machine plan, but it asks for a rate
    if machines > 1:
        run([KIT, "up", "--machines", str(machines), *SHAPE])
    try:
        if machines > 1:
            check_pinning(machines, ranks)
            link = bench_dp.iperf_rate(bidir=True) * 1e6
            cpu = link_cpu_ns(machines, ranks)
        t1s, slowests, got = [], [], {s: [] for s in strategies}
        for _ in range(rounds):
            slowest, mean = one_rank_shared(preset, machines * ranks, steps_for(preset, "ddp"))
            t1s.append(mean), slowests.append(slowest)
            for s in strategies:
                got[s].append(multi_rank(setup, preset, machines, ranks, s))
    finally:
        if machines > 1:
            subprocess.run([KIT, "down"], env=ENV)
    medians = {s: {k: statistics.median(j[k] for j in v) for k in SPLIT} for s, v in got.items()}
    for s, m in medians.items():
        print(f"  {setup} {s}: ms_mean {m['ms_mean']:.1f}, median {m['ms_step']:.1f}, first bucket at "
              f"{m['first_grad_ms']:.1f} ms, wait after backward {m['comm_wait_ms']:.1f} ms", file=sys.stderr, flush=True)
    return medians, statistics.median(t1s), statistics.median(slowests), link, cpu


def rows(setups, rounds, load):
    """(preset, strategy, machines, ranks, overrides, T1, link, measured, where) as plan_validate.py's ROWS."""
    out = []
    for setup in setups:
        if setup not in SETUPS:
            sys.exit(f"plan_fresh: unknown setup '{setup}' (expected one of {', '.join(SETUPS)})")
        preset, machines, ranks, _ = SETUPS[setup]
        measured, t1, t1_slowest, link, cpu = measure(setup, rounds)
        per_core = -(-machines * ranks // len(CORES))  # ranks a core, as pin-rank.sh places them
        stretch = link_stretch_ns(measured["ddp"], t1, link) if machines > 1 else 0.0
        where = (f"measured now ({setup}, link CPU {cpu:.1f} ns/B, link stretch {stretch:.1f} ns/B, {per_core} "
                 f"rank(s) a core, slowest one-rank run {t1_slowest:.3f} s, load {load():.1f})")
        extra = ["--link-cpu", f"{cpu:.2f}"] if cpu > 0 else []  # the plan's options, passed with the overrides
        extra += ["--link-stretch", f"{stretch:.2f}"] if stretch > 0 else []
        extra += ["--ranks-per-core", str(per_core)] if per_core > 1 else []
        for s, m in measured.items():
            split = (f"; first bucket {m['first_grad_ms']:.0f} ms, wait {m['comm_wait_ms']:.0f} ms"
                     if s.startswith("ddp") and machines > 1 else "")
            out.append((preset, s, machines, ranks, extra, t1, link, m["ms_mean"] / 1e3, where + split))
    return out
