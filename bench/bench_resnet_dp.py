"""bench_resnet_dp.py -- data-parallel efficiency of ResNet-18 on CIFAR-sized batches (64 x 3 x 32 x 32 per rank):
tandem's image trainer against PyTorch DDP (gloo), in one invocation, over the links a placement study compares.

Per link (--links, in this order by default):
  local    2 ranks on this machine, no namespaces (tandem: mpirun, shared memory; PyTorch: gloo over loopback)
  10gbit   2 simulated machines: network namespaces joined by a veth pair shaped with tbf on both ends
  100mbit  (scripts/netns, bench_dp.py's kit and 100 Mbit/s shaping; 10 Gbit/s with a burst that covers a timer
           tick at that rate); tandem through the kit's mpirun (plm_rsh_agent = `ip netns exec`), PyTorch as one
           process per namespace, MASTER_ADDR = machine 0's veth address, GLOO_SOCKET_IFNAME = its veth
and per round (--rounds) within a link, each measured back to back with the order of the two systems alternating
from round to round: tandem 1 rank, PyTorch 1 process (both pinned to the first --threads cores), tandem 2 ranks
(`tandem bench resnet --dist`), PyTorch DDP 2 processes (rank r pinned to cores [r t, r t + t - 1], t = --threads).
Step (both): broadcast of the BN buffers from rank 0, forward, cross-entropy, backward with the gradient all-reduce
overlapped in buckets (tandem: ddp_bucket_cap_mb 4 as `tandem train`; DDP: its 25 MB default), clip at norm 1,
AdamW; torchvision's resnet18(num_classes=10) on PyTorch's side. Weak scaling: the same per-rank batch, so
efficiency = 2-rank images/s / (2 x 1-rank images/s) of the same round; the table gives the median and the range
over rounds, the ratio of the two systems' efficiencies and of their 2-rank images/s. Over a shaped link the
physical limit of plain data parallelism is stated too: a 2-machine all-reduce moves the G gradient bytes each way,
and no gradient exists before forward and fc's backward (first_grad, measured by tandem), so a step takes at
least max(T1, first_grad + G / rate), rate = one TCP stream's (iperf3, 10 s, measured once per link).

Usage (root for the namespaces; bench_resnet_dp.sh sets both sides on the same OpenBLAS kernel):
  bench/bench_resnet_dp.sh [--links local,10gbit,100mbit] [--rounds 2] [--steps 20] [--slow-steps 6]
                           [--warmup 2] [--batch 64] [--threads 1] [--no-torch] [--bucket-mb MB] [--json OUT.jsonl]
--slow-steps: timed steps over links under 1 Gbit/s (a 100 Mbit/s step takes seconds).
(internally re-invokes itself with --worker for every PyTorch process)
"""
import argparse, json, os, re, signal, socket, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_dp  # noqa: E402  (the kit, its runner, its 100 Mbit/s shaping and iperf3 helper)

bench_dp.ENV["TANDEM_NETNS"] = "tresdp"  # our own namespaces, whatever else runs
ENV, KIT = bench_dp.ENV, bench_dp.KIT
VETH = [bench_dp.ENV["TANDEM_NETNS"][:12] + f"v{i}" for i in (0, 1)]  # netns.sh's veth names
ADDR0 = "10.77.0.1"
# link -> netns.sh up arguments (None: no namespaces). tbf's burst must hold what the rate sends in one timer tick
# (10 Gbit/s x 1 ms = 1.25 MB), else the shaper, not the rate, sets the speed.
LINKS = {"local": None, "100mbit": bench_dp.SHAPE,
         "10gbit": ["--rate", "10gbit", "--burst", "4mb", "--latency", "50ms"]}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def rate_bits(link):
    """bits/s of a link name ('100mbit', '10gbit'); None for local."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)bit", link)
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] if m else None


def parse_args(argv):
    ap = argparse.ArgumentParser(description="ResNet-18 data-parallel efficiency, tandem vs PyTorch DDP (gloo)")
    ap.add_argument("--links", default="local,10gbit,100mbit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--slow-steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--bucket-mb", type=float, default=None, help="tandem's gradient buckets (0: one all-reduce after "
                    "backward; default train's ddp_bucket_cap_mb, 4)")
    ap.add_argument("--json", default="")
    ap.add_argument("--tandem", default=bench_dp.BIN)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--addr", default="127.0.0.1", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    links = a.links.split(",")
    bad = [l for l in links if l not in LINKS and rate_bits(l) is None]
    if bad:
        ap.error(f"--links: '{bad[0]}' is not local or a rate like 100mbit / 10gbit")
    if min(a.rounds, a.steps, a.slow_steps, a.batch, a.threads) < 1 or a.warmup < 0 or a.batch < 2:
        ap.error("--rounds, --steps, --slow-steps, --threads must be >= 1, --batch >= 2, --warmup >= 0")
    a.links = links
    return a


def shape(link):
    return LINKS.get(link, ["--rate", link, "--burst", "4mb" if rate_bits(link) >= 1e9 else "32kbit",
                            "--latency", "50ms" if rate_bits(link) >= 1e9 else "400ms"])


def cores(rank, t):
    """the cores of a rank with t threads: rank r on [r t, r t + t - 1]"""
    return f"{rank * t}-{rank * t + t - 1}"


def pin(t):
    """prefix that pins an mpirun rank to its cores (the kit starts ranks unbound; the same rule on one machine)"""
    return ["sh", "-c", f'r=$OMPI_COMM_WORLD_RANK; exec taskset -c "$((r * {t}))-$((r * {t} + {t - 1}))" "$0" "$@"']


def steps_for(a, link):
    r = rate_bits(link)
    return a.slow_steps if r is not None and r < 1e9 else a.steps


# ------------------------------------------------------------------------------------------------ PyTorch worker

def worker(a):
    """One PyTorch process: torchvision's resnet18 step, timed; rank 0 prints one JSON line."""
    import torch
    import torch.distributed as dist
    import torchvision
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.world > 1:
        from datetime import timedelta
        dist.init_process_group("gloo", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank, world_size=a.world,
                                timeout=timedelta(minutes=10))
    torch.manual_seed(1)
    m = torchvision.models.resnet18(num_classes=10).train()
    if a.world > 1:
        m = torch.nn.parallel.DistributedDataParallel(m)  # bucket_cap_mb 25, broadcast_buffers: DDP's defaults
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(2 + a.rank)  # each rank its own batch
    x, y = torch.randn(a.batch, 3, 32, 32, generator=g), torch.randint(0, 10, (a.batch,), generator=g)
    ts = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if s >= a.warmup:
            ts.append(time.perf_counter() - t0)
    med = statistics.median(ts)
    if a.rank == 0:
        print(json.dumps(dict(impl="torch", config="resnet18", threads=a.threads, batch=a.batch, steps=a.steps,
                              ms_step=1e3 * med, ms_min=1e3 * min(ts), images_s=a.batch * a.world / med, ranks=a.world,
                              loss=float(loss), torch=torch.__version__)), flush=True)
    if a.world > 1:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ launches

def result(out, impl):
    rows = [json.loads(l) for l in out.splitlines() if l.startswith('{"impl"')]
    if not rows or rows[-1].get("impl") != impl:
        sys.exit(f"bench_resnet_dp: no {impl} result line in:\n{out}")
    return rows[-1]


def tandem(a, link, ranks):
    args = [a.tandem, "bench", "resnet", "--batch", str(a.batch), "--steps", str(steps_for(a, link)), "--warmup",
            str(a.warmup)] + ([] if a.bucket_mb is None else ["--bucket-mb", f"{a.bucket_mb:g}"])
    if ranks == 1:
        return result(bench_dp.run(["taskset", "-c", cores(0, a.threads), *args]), "tandem")
    if LINKS.get(link, 1) is None:
        cmd = ["mpirun", "-n", "2", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "--mca", "btl", "self,vader",
               *pin(a.threads), *args, "--dist"]
    else:  # one rank per simulated machine
        cmd = [KIT, "mpirun", "-n", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", *pin(a.threads), *args, "--dist"]
    return result(bench_dp.run(cmd), "tandem")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_run(a, link, ranks):
    me = ["/usr/bin/python3", os.path.abspath(__file__), "--worker", "--batch", str(a.batch), "--threads",
          str(a.threads), "--steps", str(steps_for(a, link)), "--warmup", str(a.warmup), "--world", str(ranks)]
    netns = ranks > 1 and LINKS.get(link, 1) is not None
    port = 29500 if netns else free_port()  # loopback is shared with whatever else runs here
    cmds = []
    for r in range(ranks):
        env = dict(ENV, GLOO_SOCKET_IFNAME=VETH[r] if netns else "lo")
        pre = [KIT, "exec", str(r)] if netns else []
        addr = ADDR0 if netns else "127.0.0.1"
        cmds.append((pre + ["taskset", "-c", cores(r, a.threads)] + me + ["--rank", str(r), "--addr", addr, "--port",
                                                                         str(port)], env))
    log("  $ " + " & ".join(" ".join(c) for c, _ in cmds))
    ps = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, text=True) for c, e in cmds]
    outs = [p.communicate()[0] for p in ps]
    if any(p.returncode for p in ps):
        sys.exit(f"bench_resnet_dp: a PyTorch process failed: {[p.returncode for p in ps]}\n{outs}")
    return result(outs[0], "torch")


# ------------------------------------------------------------------------------------------------ report

def load():
    return float(open("/proc/loadavg").read().split()[0])


def span(xs, fmt="{:.3f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def efficiencies(rounds, impl):
    """per round: 2-rank images/s / (2 x 1-rank images/s)"""
    return [r[(impl, 2)]["images_s"] / (2 * r[(impl, 1)]["images_s"]) for r in rounds]


def limit(rounds, tcp):
    """images/s of 2 ranks at the physical limit of plain data parallelism (median over rounds), tandem's T1"""
    t = rounds[0][("tandem", 2)]
    g = t["grad_mb"] * 1.048576  # MB (10^6)
    lim = []
    for r in rounds:
        t1, first = r[("tandem", 1)]["ms_step"], r[("tandem", 2)]["first_grad_ms"]
        lim.append(2 * r[("tandem", 1)]["batch"] / (max(t1, first + 1e3 * g / tcp) / 1e3))
    return statistics.median(lim), g


def report(a, res, tcp, loads):
    impls = ["tandem"] + ([] if a.no_torch else ["torch"])
    print("\nCommand: `bench/bench_resnet_dp.sh " + " ".join(sys.argv[1:]) + "`")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; load average (1 min) at the measurements "
          f"{min(loads):.1f}-{max(loads):.1f}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(default)')}; "
          f"batch {a.batch} per rank, {a.threads} thread(s) per rank, {a.rounds} round(s); median (range) over rounds")
    print("\n| link | one TCP stream MB/s | system | 1 rank images/s | 2 ranks images/s | efficiency | "
          "tandem / PyTorch efficiency | tandem / PyTorch 2-rank images/s | limit of plain DP, images/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for link in a.links:
        rounds = res[link]
        eff = {i: efficiencies(rounds, i) for i in impls}
        rel = [e / p for e, p in zip(eff["tandem"], eff["torch"])] if "torch" in impls else []
        thr = ([r[("tandem", 2)]["images_s"] / r[("torch", 2)]["images_s"] for r in rounds] if "torch" in impls else [])
        lim = "-"
        if tcp.get(link):
            v, g = limit(rounds, tcp[link])
            lim = f"{v:.1f} (G {g:.1f} MB / {tcp[link]:.2f} MB/s)"
        for k, i in enumerate(impls):
            one = span([r[(i, 1)]["images_s"] for r in rounds], "{:.1f}")
            two = span([r[(i, 2)]["images_s"] for r in rounds], "{:.1f}")
            extra = (f"**{span(rel)}** | {span(thr)}" if rel else "- | -") if k == 0 else " | "
            rate = f"{tcp[link]:.2f}" if tcp.get(link) else "-"
            print(f"| {link} | {rate} | {'PyTorch DDP' if i == 'torch' else i} | "
                  f"{one} | {two} | **{span(eff[i])}** | {extra} | {lim if k == 0 else ''} |")


def main():
    a = parse_args(sys.argv[1:])
    if a.worker:
        return worker(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below removes the namespaces
    if 2 * a.threads > (os.cpu_count() or 1):
        sys.exit(f"bench_resnet_dp: 2 ranks x {a.threads} threads need {2 * a.threads} cores, this machine has "
                 f"{os.cpu_count()}")
    ENV["OMP_NUM_THREADS"] = str(a.threads)  # tandem's ranks (bench_dp's default is 1)
    impls = ["tandem"] + ([] if a.no_torch else ["torch"])
    res, tcp, loads, rows = {}, {}, [], []
    for link in a.links:
        up = LINKS.get(link, 1) is not None
        try:
            if up:
                bench_dp.run([KIT, "up", *shape(link)])
                tcp[link] = bench_dp.iperf_rate()
                log(f"{link}: one TCP stream {tcp[link]:.2f} MB/s")
            res[link] = []
            for rnd in range(a.rounds):
                got = {}
                order = impls if rnd % 2 == 0 else impls[::-1]
                for ranks in (1, 2):
                    for i in order:
                        loads.append(load())
                        r = tandem(a, link, ranks) if i == "tandem" else torch_run(a, link, ranks)
                        got[(i, ranks)] = r
                        rows.append(dict(r, link=link, round=rnd, load=loads[-1], link_MBps=tcp.get(link)))
                        log(f"round {rnd + 1}/{a.rounds} {link} {i} {ranks} rank(s): {r['ms_step']:.1f} ms/step, "
                            f"{r['images_s']:.1f} images/s (load {loads[-1]:.1f})")
                res[link].append(got)
        finally:
            if up:
                subprocess.run([KIT, "down"], env=ENV)
    report(a, res, tcp, loads)
    if a.json:
        with open(a.json, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
