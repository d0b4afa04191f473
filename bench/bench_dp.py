"""bench_dp.py -- data-parallel weak scaling of tandem vs PyTorch DDP (gloo), in one invocation.

Weak-scaling efficiency = T1 / T2: median step time of 1 rank (1 thread) over that of 2 ranks (1 thread each),
the same per-rank batch, on the core issue's configs. Phases, every one measured for tandem and then by
../shared/ref/ddp_ref.py for PyTorch, in this same run:
  local   2 ranks on this machine (tandem: mpirun -n 2, one core each; PyTorch: gloo over loopback)
  pair    (tandem only) two independent 1-rank runs at once, one per core: what sharing the machine alone
          costs, to tell it apart from what data parallelism costs on top
  netns   2 simulated machines (network namespaces) joined by a veth pair shaped with
          `tc qdisc ... tbf rate 100mbit burst 32kbit latency 400ms` on both ends (ddp_ref.py's shaping);
          tandem through scripts/netns (rsh agent, hostfile), one rank per machine.
It also measures plain TCP over the shaped link (iperf3: one stream, and one stream each way at once) and
states the physical limit of plain data parallelism next to each netns figure: a 2-machine all-reduce must
move the gradient bytes G across the link in each direction, and no gradient exists before forward and the
lm_head's backward are done (first_grad, measured by tandem), so even fully overlapped with the rest of
backward a step takes at least max(T1, first_grad + G / rate), rate = what one TCP stream carries (strict);
also shown with the two-way rate (two streams, one each way: each direction then carries the other's ACKs;
tandem's ring uses one connection, whose ACKs can ride on its data, so it can beat that rate).
tandem runs --rounds times (default 3), each round measuring 1 rank,
2 local ranks and 2 machines back to back; medians over rounds are reported.

Usage (root, for the namespaces):  bench/bench_dp.sh [--configs tiny,small,small-lora] [--phases local,pair,netns]
                                   [--no-torch] [--json OUT.jsonl] [--steps K] [--rounds R]
"""
import argparse, json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.path.join(ROOT, "build", "tandem")
KIT = os.path.join(ROOT, "scripts", "netns", "netns.sh")
REF = os.path.abspath(os.path.join(ROOT, "..", "shared", "ref"))
SHAPE = ["--rate", "100mbit", "--burst", "32kbit", "--latency", "400ms"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           TANDEM_NETNS="tbench")


def run(cmd, **kw):
    print("  $ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"bench_dp: command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    return p.stdout


def tandem_json(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{\"impl\"")][-1]


def bench_args(cfg, steps):
    preset, lora = (cfg[:-5], ["--lora"]) if cfg.endswith("-lora") else (cfg, [])
    return ["bench", "train", "--preset", preset, *lora, "--steps", str(steps or (10 if preset == "tiny" else 4))]


def pair(cfg, steps):
    """Two independent 1-rank runs at once, one per core (no communication): what sharing this machine's
    memory system and caches alone costs. The mean of their step times."""
    cmd = lambda core: ["taskset", "-c", str(core), BIN, *bench_args(cfg, steps)]
    print("  $ " + " & ".join(" ".join(cmd(c)) for c in (0, 1)), file=sys.stderr, flush=True)
    ps = [subprocess.Popen(cmd(c), env=ENV, stdout=subprocess.PIPE, text=True) for c in (0, 1)]
    outs = [p.communicate()[0] for p in ps]
    if any(p.returncode for p in ps):
        sys.exit(f"bench_dp: a pair run failed: {outs}")
    rs = [tandem_json(o) for o in outs]
    return dict(rs[0], ms_step=sum(r["ms_step"] for r in rs) / 2)


def iperf_rate(bidir=False):
    """MB/s (10^6) of one TCP stream over the shaped link, 10 s, machine 1 -> machine 0 server. bidir: one
    stream each way at once (what an all-reduce does: each direction also carries the other's ACKs), the
    slower direction."""
    srv = subprocess.Popen([KIT, "exec", "0", "iperf3", "-s", "-1", "-B", "10.77.0.1"], env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        out = run([KIT, "exec", "1", "iperf3", "-c", "10.77.0.1", "-t", "10", "-J"] + (["--bidir"] if bidir else []))
    finally:
        srv.wait(timeout=30)
    end = json.loads(out)["end"]
    keys = ["sum_received"] + (["sum_received_bidir_reverse"] if bidir else [])
    return min(end[k]["bits_per_second"] for k in keys) / 8e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="tiny,small,small-lora")
    ap.add_argument("--phases", default="local,pair,netns")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    configs, phases = a.configs.split(","), a.phases.split(",")
    res = {}  # (impl, phase, config) -> ms_step, the median over rounds
    rows = []
    first = {}  # config -> ms from step start to the first complete gradient bucket (netns, median)
    # tandem's runs, one JSON row per phase: every round measures each phase back to back, so slow drifts of
    # this VM (run-to-run +-5%) hit T1 and T2 alike; the median over rounds is reported.
    measure = {
        "base": lambda cfg: tandem_json(run([BIN, *bench_args(cfg, a.steps)])),
        "local": lambda cfg: tandem_json(run(["mpirun", "-n", "2", "--bind-to", "core", "--map-by", "core", "-x",
                                              "OMP_NUM_THREADS", "--mca", "btl", "self,vader", BIN,
                                              *bench_args(cfg, a.steps), "--dist"])),
        "pair": lambda cfg: pair(cfg, a.steps),
        # one core per simulated machine, as a real machine has its own (the kit starts ranks unbound)
        "netns": lambda cfg: tandem_json(run([KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS",
                                              "sh", "-c", 'exec taskset -c "$OMPI_COMM_WORLD_RANK" "$0" "$@"', BIN,
                                              *bench_args(cfg, a.steps), "--dist"])),
    }
    rate = rate2 = None
    if "netns" in phases:
        run([KIT, "up", *SHAPE])
    try:
        if "netns" in phases:
            rate, rate2 = iperf_rate(), iperf_rate(bidir=True)
            print(f"one TCP stream over the shaped link: {rate:.2f} MB/s; one each way at once: {rate2:.2f} MB/s",
                  file=sys.stderr, flush=True)
        samples = {}
        for rnd in range(a.rounds):
            for cfg in configs:
                for ph in ["base"] + phases:
                    r = measure[ph](cfg)
                    samples.setdefault((ph, cfg), []).append(r)
                    rows.append(dict(r, impl="tandem", phase=ph, round=rnd,
                                     **({"link_MBps": rate, "link_bidir_MBps": rate2} if ph == "netns" else {})))
                    print(f"round {rnd + 1}/{a.rounds} tandem {cfg} {ph}: {r['ms_step']:.1f} ms/step", file=sys.stderr,
                          flush=True)
        for (ph, cfg), rs in samples.items():
            res[("tandem", ph, cfg)] = statistics.median([r["ms_step"] for r in rs])
            if ph == "netns":
                first[cfg] = statistics.median([r["first_grad_ms"] for r in rs])
    finally:
        if "netns" in phases:
            run([KIT, "down"])
    grad_mb = {r["config"]: r["grad_mb"] * 1.048576 for r in rows if r["impl"] == "tandem"}
    if not a.no_torch:
        tphases = ["base"] + [{"local": "loopback", "netns": "netns"}[p] for p in phases if p != "pair"]
        jf = "/tmp/bench_dp_torch.jsonl"
        if os.path.exists(jf):
            os.remove(jf)
        run([os.path.join(REF, "run.sh"), "ddp_ref.py", "--phases", ",".join(tphases), "--configs", a.configs,
             "--json", jf] + (["--steps", str(a.steps)] if a.steps else []))
        for line in open(jf):
            r = json.loads(line)
            if r.get("kind") == "train" and r["rank"] == 0:
                ph = {"loopback": "local"}.get(r["phase"], r["phase"])
                res[("torch", ph, r["config"])] = r["ms_step"]
                rows.append(dict(r, impl="torch"))
    print("\nCommand: `bench/bench_dp.sh " + " ".join(sys.argv[1:]) + "`")
    if rate:
        print(f"One TCP stream over the 100 Mbit/s link (iperf3, 10 s): {rate:.2f} MB/s; one stream each way at once "
              f"(iperf3 --bidir, the slower direction): {rate2:.2f} MB/s")
    print("\n| config | grad MB/step | phase | tandem T1 ms | tandem T2 ms | tandem eff | PyTorch T1 ms | PyTorch T2 ms "
          "| PyTorch eff | limit of plain DP |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ph in [p for p in phases if p != "pair"]:
        for cfg in configs:
            t1, t2 = res.get(("tandem", "base", cfg)), res.get(("tandem", ph, cfg))
            p1, p2 = res.get(("torch", "base", cfg)), res.get(("torch", ph, cfg))
            lim = "1.000"
            if ph == "netns" and rate:
                floor, floor2 = (first[cfg] + 1e3 * grad_mb[cfg] / r for r in (rate, rate2))
                lim = (f"{min(1.0, t1 / floor):.3f} (first grad {first[cfg]:.0f} + G/rate "
                       f"{1e3 * grad_mb[cfg] / rate:.0f} = {floor:.0f} ms; tandem at {t2 / max(t1, floor):.2f}x; "
                       f"at the two-way rate {floor2:.0f} ms, tandem at {t2 / max(t1, floor2):.2f}x)")
            f = lambda x: f"{x:.1f}" if x else "-"
            e = lambda x, y: f"{x / y:.3f}" if x and y else "-"
            print(f"| {cfg} | {grad_mb[cfg]:.1f} | {ph} | {f(t1)} | {f(t2)} | {e(t1, t2)} | {f(p1)} | {f(p2)} | "
                  f"{e(p1, p2)} | {lim} |")
    if "pair" in phases and "local" in phases:
        print("\n| config | T1 ms (1 rank alone) | Tpair ms (2 independent 1-rank runs at once) | T2 ms (2 ranks, data "
              "parallel) | machine sharing T1/Tpair | data parallelism Tpair/T2 | efficiency T1/T2 |")
        print("|---|---|---|---|---|---|---|")
        for cfg in configs:
            t1, tp, t2 = (res[("tandem", ph, cfg)] for ph in ("base", "pair", "local"))
            print(f"| {cfg} | {t1:.1f} | {tp:.1f} | {t2:.1f} | {t1 / tp:.3f} | {tp / t2:.3f} | {t1 / t2:.3f} |")
    if a.json:
        with open(a.json, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
