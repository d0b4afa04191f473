"""ttq_prof.py -- where a short ttq run's CPU goes, per thread, between two steps (issue 27's LoRA step over the link).

For each case it starts one ttq run (bench/ttq.py's commands and work folder), waits until the run's
tandem_ranks.jsonl reaches step --from, snapshots every thread of every tandem process of the run
(/proc/PID/task/TID/schedstat: CPU, run-queue wait, times scheduled in) and each core's softirq + irq time
(/proc/stat), snapshots again at step --to, and prints per step: each thread's CPU ms, wait on the run queue and
wake-ups, the cores' softirq, and the means of the ranks' own phase times (data, compute, wait, optimizer,
from tandem_ranks.jsonl) over the same steps.

Cases (one --case each, run in the order given; CASE+key=v+key=v adds keys to the recipe's for that case):
  one     one machine: one rank on core 0, the other core idle
  pair    two independent one-machine runs at once, one per core (what the busy second core costs)
  netns   two machines: network namespaces over the 100 Mbit/s shaped veth (ttq's headline setting)
  fake    two ranks on this host, each its own "machine" (TANDEM_NODE_NAME), shared memory and loopback TCP

Usage (root for netns): bench/ttq_prof.py --work /tmp/ttq --recipe "lora/NAME:2:key=v,..." --case one --case netns
  [--bin OTHER/build/tandem] [--steps 300 --from 40 --to 240]
The machine count in the recipe is ignored (the case says it). Namespaces use prefix $TANDEM_NETNS (default ttqp),
always torn down.
"""
import argparse, json, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_dp  # noqa: E402
import ttq  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def tandem_pids(out):
    """The tandem processes whose command line names this run's output folder."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            exe = os.readlink(f"/proc/{p}/exe")
        except OSError:
            continue
        if exe == os.path.realpath(ttq.BIN) and f"output_dir={out}".encode() in cmd:
            pids.append(int(p))
    return sorted(pids)


def threads(pids):
    """{(pid, tid): (cpu_ns, runq_wait_ns, timeslices, name, minor faults, user s, system s)} for every thread."""
    snap = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            try:
                cpu, wait, n = map(int, open(f"/proc/{pid}/task/{t}/schedstat").read().split())
                name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
                st = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue
            snap[(pid, int(t))] = (cpu, wait, n, name, int(st[7]), int(st[11]) / HZ, int(st[12]) / HZ)
    return snap


def cores():
    """[softirq + irq seconds] of each core, from /proc/stat."""
    out = []
    for line in open("/proc/stat"):
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            out.append((int(f[6]) + int(f[7])) / HZ)
    return out


def last_step(path, state):
    """The newest step in tandem_ranks.jsonl, reading only what was appended since the last call."""
    try:
        with open(path) as fh:
            fh.seek(state.get("pos", 0))
            data = fh.read()
            state["pos"] = fh.tell()
    except OSError:
        return 0
    buf = state.get("tail", "") + data
    lines = buf.split("\n")
    state["tail"] = lines.pop()
    for line in lines:
        if line.startswith('{"kind": "step"'):
            state["step"] = json.loads(line)["step"]
    return state.get("step", 0)


def wait_step(job, step):
    st = job.setdefault("poll", {})
    path = os.path.join(job["out"], "tandem_ranks.jsonl")
    while last_step(path, st) < step:
        if job["proc"].poll() is not None:
            sys.exit(f"ttq_prof: run {job['name']} ended before step {step} (see {job['out']}.log)")
        time.sleep(0.01)


def phases(out, lo, hi):
    """Per rank: mean data, compute, wait, optimizer (ms) over steps lo+1 .. hi."""
    sums, n = None, 0
    for line in open(os.path.join(out, "tandem_ranks.jsonl")):
        r = json.loads(line)
        if r.get("kind") != "step" or not lo < r["step"] <= hi:
            continue
        rows = [x[:4] for x in r["ranks"]]
        sums = rows if sums is None else [[a + b for a, b in zip(s, x)] for s, x in zip(sums, rows)]
        n += 1
    return [[1e3 * v / n for v in s] for s in sums], n


def report(case, jobs, t0, t1, c0, c1, lo, hi, steps_wall):
    steps = hi - lo
    print(f"\n## {case}: steps {lo}-{hi}, {1e3 * steps_wall / steps:.1f} ms a step (wall, rank 0's clock), "
          f"load {ttq.load():.1f}")
    for job in jobs:
        ph, n = phases(job["out"], lo, hi)
        for r, p in enumerate(ph):
            print(f"  {job['name']} rank {r}: data {p[0]:.2f}  compute {p[1]:.2f}  wait {p[2]:.2f}  optimizer {p[3]:.2f}"
                  f"  ms ({n} steps)")
    for key in sorted(t1):
        if key not in t0:
            continue
        cpu = (t1[key][0] - t0[key][0]) / 1e6 / steps
        rq = (t1[key][1] - t0[key][1]) / 1e6 / steps
        wk = (t1[key][2] - t0[key][2]) / steps
        if cpu < 0.005 and wk < 0.05:
            continue
        kind = "main" if key[0] == key[1] else "thread"
        flt = (t1[key][4] - t0[key][4]) / steps
        usr, sys_ = ((t1[key][i] - t0[key][i]) * 1e3 / steps for i in (5, 6))
        print(f"  pid {key[0]} tid {key[1]} ({t1[key][3]}, {kind}): cpu {cpu:.2f} ms (user {usr:.1f}, system {sys_:.1f}), "
              f"run-queue wait {rq:.2f} ms, {wk:.1f} times scheduled in, {flt:.0f} minor faults, a step")
    print("  softirq+irq a step: " + ", ".join(f"core {i} {1e3 * (b - a) / steps:.2f} ms" for i, (a, b) in
                                              enumerate(zip(c0, c1))))


def measure(a, spec, recipe):
    """spec: CASE or CASE+key=v+key=v (keys added to the recipe's for this case)"""
    case, *more = spec.split("+")
    name, _, keys, kind = recipe
    keys = list(keys) + more
    extra = [f"max_steps={a.steps}", "eval_steps=1000000", "eval_strategy=no", "logging_steps=1000000"]
    if case == "pair":
        jobs = [ttq.launch(a, (f"{name}-p{c}", 1, keys, kind), c, False, extra) for c in (0, 1)]
    elif case == "one":
        jobs = [ttq.launch(a, (f"{name}-one", 1, keys, kind), 0, False, extra)]
    else:
        jobs = [ttq.launch(a, (f"{name}-{case}", 2, keys, kind), 0, case == "netns", extra)]
    try:
        for j in jobs:
            wait_step(j, a.lo)
        pids = [p for j in jobs for p in tandem_pids(j["out"])]
        t0, c0, w0 = threads(pids), cores(), time.time()
        wait_step(jobs[0], a.hi)
        t1, c1, w1 = threads(pids), cores(), time.time()
    finally:
        for j in jobs:
            j["proc"].wait()
            j["fh"].close()
    report(spec, jobs, t0, t1, c0, c1, a.lo, a.hi, w1 - w0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/ttq")
    ap.add_argument("--kind", default="lora", choices=["ft", "lora"])
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--case", action="append", required=True, help="one, pair, netns or fake, +key=v+... to add keys")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--bin", default=ttq.BIN, help="the tandem binary (A/B against another build)")
    ap.add_argument("--from", dest="lo", type=int, default=40)
    ap.add_argument("--to", dest="hi", type=int, default=240)
    a = ttq.ARGS = ap.parse_args()
    ttq.BIN = os.path.abspath(a.bin)
    ttq.ENV["TANDEM_CACHE_DIR"] = os.path.join(a.work, "cache")
    ttq.ENV["TANDEM_NETNS"] = os.environ.get("TANDEM_NETNS", "ttqp")
    recipe = ttq.parse_recipe(a.recipe, a.kind)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# ttq_prof {a.recipe}: CPU {cpu}, load {ttq.load():.1f}, {time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"tandem {os.path.realpath(ttq.BIN)}")
    for case in a.case:
        if case.split("+")[0] not in ("one", "pair", "netns", "fake"):
            sys.exit(f"ttq_prof: --case {case}: expected one, pair, netns or fake (+key=v...)")
        if case.startswith("netns"):
            bench_dp.run([ttq.KIT, "up", *bench_dp.SHAPE])
            try:
                measure(a, case, recipe)
            finally:
                bench_dp.run([ttq.KIT, "down"])
        else:
            measure(a, case, recipe)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
