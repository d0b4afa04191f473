#!/usr/bin/python3
"""plan_validate.py -- `tandem plan`'s predictions against step times measured by the benchmarks.

Each row below is a measurement recorded in docs/performance.md (the section is named), with the one-rank step
time T1 and the link rate measured in the same invocation. The plan gets T1 as --step-time and the link as
bytes/s, predicts the multi-rank step, and this prints predicted / measured per row (target: within 15%).
--fresh measures instead, every input and every step in this invocation (plan_fresh.py; root, for the network
namespaces; about 15 minutes).

--recorded 2026-11-28 takes instead the rows that --fresh measured on 2026-11-28 05:56-06:17 (docs/performance.md,
"Validation in one invocation with the pinning fixed"): the plan of today against that quiet run, without
running it again; 2026-11-28T09:25, 2026-11-28T12:15 and 2026-11-28T16:13 the later quiet runs of that day.

Usage: bench/plan_validate.py [--bin build/tandem] [--markdown] [--fresh local,netns [--rounds R] | --recorded DAY]
       [--refault-ns NS] [--copy-ns NS] [--link-stretch NS]

--link-stretch NS gives the recorded rows between machines the stretch of DDP's backward per link byte (tandem plan
--link-stretch; the recorded runs did not measure it: 53 is what bench train's split of a DDP step measured over
the 2-machine netns link at 08:18 on 2026-11-28, docs/performance.md); --fresh derives it from its own DDP rows.
"""
import argparse, json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
# (preset, strategy row, machines, ranks per machine, overrides, T1 s, link B/s, measured s, where recorded)
LOWCOMM = "Low-communication training: weak scaling over the 100 Mbit/s link (2026-11-25, AMD EPYC)"
ZERO_NETNS = "ZeRO: step time by stage, netns 2 machines x 1 rank (2026-11-25, AMD EPYC)"
ZERO_LOCAL = "ZeRO: step time by stage, 1 machine, 2 ranks on 2 cores (2026-11-25, AMD EPYC)"
BOTH_WAYS = 11.44e6  # one TCP stream each way at once over the shaped veth (bench_dp.py's iperf3)
ONE_WAY = 11.95e6
CONTIGUOUS = ["zero_shard_layout=contiguous"]  # the ZeRO rows of 2026-11-25 ran before balanced shards existed
# every run recorded here measured stage 3 on one machine gathering its parameters (before 2026-12-07's shared copy)
GATHERED = ["zero_shared_params=false"]
ROWS = [
    ("tiny", "ddp", 2, 1, [], 0.612, BOTH_WAYS, 2.143, LOWCOMM),
    ("tiny", "ddp+bf16", 2, 1, [], 0.612, BOTH_WAYS, 1.243, LOWCOMM),
    ("tiny", "ddp+int8", 2, 1, [], 0.612, BOTH_WAYS, 0.895, LOWCOMM),
    ("tiny", "diloco", 2, 1, [], 0.612, BOTH_WAYS, 0.691, LOWCOMM),
    ("tiny", "diloco+int8", 2, 1, [], 0.612, BOTH_WAYS, 0.639, LOWCOMM),
    ("small", "ddp", 2, 1, [], 5.434, BOTH_WAYS, 22.987, LOWCOMM),
    ("small", "ddp+bf16", 2, 1, [], 5.434, BOTH_WAYS, 13.219, LOWCOMM),
    ("small", "ddp+int8", 2, 1, [], 5.434, BOTH_WAYS, 8.360, LOWCOMM),
    ("small", "diloco", 2, 1, [], 5.434, BOTH_WAYS, 6.080, LOWCOMM),
    ("small", "diloco+int8", 2, 1, [], 5.434, BOTH_WAYS, 5.649, LOWCOMM),
    ("tiny", "ddp", 2, 1, [], 0.615, ONE_WAY, 2.130, ZERO_NETNS),
    ("tiny", "zero2", 2, 1, CONTIGUOUS, 0.615, ONE_WAY, 2.450, ZERO_NETNS),
    ("tiny", "zero3", 2, 1, CONTIGUOUS, 0.615, ONE_WAY, 4.295, ZERO_NETNS),
    ("small", "ddp", 1, 2, [], 5.434, ONE_WAY, 5.600, ZERO_LOCAL),
    ("small", "zero1", 1, 2, CONTIGUOUS, 5.434, ONE_WAY, 5.589, ZERO_LOCAL),
    ("small", "zero2", 1, 2, CONTIGUOUS, 5.434, ONE_WAY, 5.654, ZERO_LOCAL),
    ("small", "zero3", 1, 2, CONTIGUOUS + GATHERED, 5.434, ONE_WAY, 5.703, ZERO_LOCAL),
]

# --fresh of 2026-11-28 05:56-06:17, 2-core Intel Xeon, quiet: (setup, preset, machines, ranks, T1, link, link CPU
# ns a byte, ranks a core, {strategy: measured s}[, link stretch ns a byte: runs that measured it])
FRESH_1128 = [
    ("netns", "tiny", 2, 1, 0.627, 11.45e6, 12.7, 1,
     {"ddp": 2.211, "ddp+bf16": 1.419, "ddp+int8": 1.192, "ddp+int4": 0.966, "zero1": 2.128, "zero2": 2.093,
      "zero3": 2.529, "diloco": 0.750, "diloco+int8": 0.646, "diloco+int4": 0.670}),
    ("netns4", "tiny", 4, 1, 1.119, 11.42e6, 34.5, 2,
     {"ddp": 3.818, "ddp+bf16": 3.769, "ddp+int8": 2.619, "ddp+int4": 2.233, "zero1": 3.973, "zero2": 3.886,
      "zero3": 4.546, "diloco": 1.688, "diloco+int8": 1.369, "diloco+int4": 1.203}),
    ("local", "small", 1, 2, 4.358, 11.95e6, 0.0, 1, {"ddp": 4.772, "zero1": 4.767, "zero2": 5.021, "zero3": 5.002}),
]
# --fresh of 2026-11-28 09:25-09:48 and 12:15-12:37 (the lead's quiet windows; docs/performance.md, "Validation in
# one invocation with bucket readiness ..." and "The quiet run after the cut")
FRESH_1128_0925 = [
    ("netns", "tiny", 2, 1, 0.654, 11.44e6, 12.0, 1,
     {"ddp": 2.273, "ddp+bf16": 1.287, "ddp+int8": 0.999, "ddp+int4": 0.926, "zero1": 2.150, "zero2": 2.132,
      "zero3": 2.552, "diloco": 0.682, "diloco+int8": 0.650, "diloco+int4": 0.587}),
    ("netns4", "tiny", 4, 1, 1.279, 11.43e6, 30.8, 2,
     {"ddp": 3.943, "ddp+bf16": 4.138, "ddp+int8": 2.805, "ddp+int4": 2.453, "zero1": 4.127, "zero2": 4.191,
      "zero3": 5.003, "diloco": 1.911, "diloco+int8": 1.385, "diloco+int4": 1.441}),
    ("local", "small", 1, 2, 5.007, 11.95e6, 0.0, 1, {"ddp": 5.611, "zero1": 5.286, "zero2": 5.062, "zero3": 6.306}),
]
FRESH_1128_1215 = [
    ("netns", "tiny", 2, 1, 0.637, 11.48e6, 12.8, 1,
     {"ddp": 2.190, "ddp+bf16": 1.287, "ddp+int8": 0.982, "ddp+int4": 0.848, "zero1": 2.022, "zero2": 2.038,
      "zero3": 2.539, "diloco": 0.630, "diloco+int8": 0.613, "diloco+int4": 0.601}),
    ("netns4", "tiny", 4, 1, 1.206, 11.48e6, 39.8, 2,
     {"ddp": 3.736, "ddp+bf16": 3.743, "ddp+int8": 2.728, "ddp+int4": 2.293, "zero1": 3.805, "zero2": 4.089,
      "zero3": 4.737, "diloco": 1.687, "diloco+int8": 1.345, "diloco+int4": 1.295}),
    ("local", "small", 1, 2, 4.731, 11.95e6, 0.0, 1, {"ddp": 5.466, "zero1": 5.644, "zero2": 5.502, "zero3": 5.747}),
]
# --fresh of 2026-11-28 16:13-16:33 (the lead's quiet window after the copy and refault terms and z3's paged layout;
# docs/performance.md, "The quiet run after these terms")
FRESH_1128_1613 = [
    ("netns", "tiny", 2, 1, 0.576, 11.41e6, 13.2, 1,
     {"ddp": 2.156, "ddp+bf16": 1.295, "ddp+int8": 0.993, "ddp+int4": 0.824, "zero1": 2.023, "zero2": 1.998,
      "zero3": 2.527, "diloco": 0.617, "diloco+int8": 0.591, "diloco+int4": 0.608}),
    ("netns4", "tiny", 4, 1, 1.185, 11.45e6, 34.8, 2,
     {"ddp": 3.814, "ddp+bf16": 3.640, "ddp+int8": 2.686, "ddp+int4": 2.245, "zero1": 4.060, "zero2": 3.849,
      "zero3": 4.491, "diloco": 1.626, "diloco+int8": 1.214, "diloco+int4": 1.187}),
    ("local", "small", 1, 2, 4.193, 11.95e6, 0.0, 1, {"ddp": 4.489, "zero1": 4.531, "zero2": 4.574, "zero3": 5.163}),
]
# --fresh of 2026-11-28 19:20-19:41 (the lead's quiet window with the link stretch; docs/performance.md, "The quiet
# run with the stretch term"): each multi-machine setup's derived stretch last
FRESH_1128_1920 = [
    ("netns", "tiny", 2, 1, 0.567, 11.43e6, 12.7, 1,
     {"ddp": 2.198, "ddp+bf16": 1.330, "ddp+int8": 0.951, "ddp+int4": 0.819, "zero1": 2.000, "zero2": 1.974,
      "zero3": 2.509, "diloco": 0.613, "diloco+int8": 0.597, "diloco+int4": 0.568}, 61.9),
    ("netns4", "tiny", 4, 1, 1.161, 11.44e6, 34.9, 2,
     {"ddp": 4.050, "ddp+bf16": 3.972, "ddp+int8": 2.795, "ddp+int4": 2.518, "zero1": 4.158, "zero2": 4.127,
      "zero3": 4.603, "diloco": 1.776, "diloco+int8": 1.275, "diloco+int4": 1.252}, 68.9),
    ("local", "small", 1, 2, 4.527, 11.95e6, 0.0, 1, {"ddp": 5.139, "zero1": 5.336, "zero2": 5.598, "zero3": 5.708}),
]
# --fresh of 2026-12-06 23:14-23:39 on the 2-core AMD EPYC (quiet; docs/performance.md, "The quiet run on the AMD
# EPYC"): each multi-machine setup's derived stretch last
FRESH_1206_2314 = [
    ("netns", "tiny", 2, 1, 0.640, 11.39e6, 18.6, 1,
     {"ddp": 2.163, "ddp+bf16": 1.283, "ddp+int8": 1.087, "ddp+int4": 0.900, "zero1": 1.989, "zero2": 2.014,
      "zero3": 2.535, "diloco": 0.706, "diloco+int8": 0.675, "diloco+int4": 0.664}, 37.1),
    ("netns4", "tiny", 4, 1, 1.355, 11.48e6, 24.7, 2,
     {"ddp": 3.783, "ddp+bf16": 3.783, "ddp+int8": 2.683, "ddp+int4": 2.296, "zero1": 4.064, "zero2": 4.115,
      "zero3": 4.584, "diloco": 1.871, "diloco+int8": 1.523, "diloco+int4": 1.567}, 58.3),
    ("local", "small", 1, 2, 5.754, 11.95e6, 0.0, 1, {"ddp": 5.844, "zero1": 6.117, "zero2": 6.041, "zero3": 6.235}),
]
# --fresh of 2026-12-07 07:03-07:29 on the same AMD EPYC (quiet, after the CI; the plan at e674e9a, ZeRO-3's backward
# gathering the layers only; docs/performance.md, "A fresh run with the change")
FRESH_1207_0703 = [
    ("netns", "tiny", 2, 1, 0.687, 11.38e6, 19.6, 1,
     {"ddp": 2.212, "ddp+bf16": 1.317, "ddp+int8": 1.028, "ddp+int4": 0.903, "zero1": 2.014, "zero2": 2.056,
      "zero3": 2.528, "diloco": 0.800, "diloco+int8": 0.733, "diloco+int4": 0.713}, 34.5),
    ("netns4", "tiny", 4, 1, 1.367, 11.43e6, 25.6, 2,
     {"ddp": 3.745, "ddp+bf16": 3.740, "ddp+int8": 2.593, "ddp+int4": 2.169, "zero1": 3.819, "zero2": 3.969,
      "zero3": 4.653, "diloco": 1.987, "diloco+int8": 1.587, "diloco+int4": 1.591}, 56.8),
    ("local", "small", 1, 2, 5.667, 11.95e6, 0.0, 1, {"ddp": 6.053, "zero1": 5.909, "zero2": 5.961, "zero3": 6.201}),
]
RECORDED = {"2026-11-28": FRESH_1128, "2026-11-28T09:25": FRESH_1128_0925, "2026-11-28T12:15": FRESH_1128_1215,
            "2026-11-28T16:13": FRESH_1128_1613, "2026-11-28T19:20": FRESH_1128_1920,
            "2026-12-06T23:14": FRESH_1206_2314, "2026-12-07T07:03": FRESH_1207_0703}


def recorded_rows(day):
    if day not in RECORDED:
        sys.exit(f"plan_validate: no recorded run '{day}' (expected one of {', '.join(RECORDED)})")
    out = []
    for setup, preset, m, r, t1, link, cpu, per_core, measured, *stretch in RECORDED[day]:
        # a run recorded with the link's stretch (plan_fresh.py derives it since 2026-11-28 18:00) has it last
        extra = GATHERED + (["--link-cpu", f"{cpu:.2f}"] if cpu > 0 else []) + (["--ranks-per-core", str(per_core)] if per_core > 1 else [])
        extra += ["--link-stretch", f"{stretch[0]:.2f}"] if stretch and stretch[0] > 0 else []
        where = (f"recorded {day} ({setup}, link CPU {cpu:.1f} ns/B{f', link stretch {stretch[0]:.1f} ns/B' if stretch else ''}"
                 f"{f', {per_core} ranks a core' if per_core > 1 else ''})")
        out += [(preset, s, m, r, extra, t1, link, v, where) for s, v in measured.items()]
    return out


def load():
    return float(open("/proc/loadavg").read().split()[0])


def predict(binary, preset, machines, ranks, overrides, t1, link, fixed=()):
    cmd = [binary, "plan", os.path.join(HERE, "plan", preset + ".yaml"), *overrides, *fixed, "--machines",
           str(machines), "--ranks-per-machine", str(ranks), "--link", repr(link), "--step-time", repr(t1), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {r["strategy"]: r for r in map(json.loads, out.splitlines())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "tandem"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--fresh", default="", help="setups to measure now: local,netns (plan_fresh.py)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--refault-ns", type=float, help="give the plan this instead of measuring it where it runs")
    ap.add_argument("--copy-ns", type=float, help="give the plan this instead of measuring it where it runs")
    ap.add_argument("--link-stretch", type=float, help="the recorded rows' stretch of DDP's backward, ns a link byte")
    ap.add_argument("--recorded", default="", help="a --fresh run recorded in docs/performance.md: "
                    + ", ".join(RECORDED))
    args = ap.parse_args()
    table = recorded_rows(args.recorded) if args.recorded else ROWS
    if args.fresh:
        import plan_fresh
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        print(f"plan_validate --fresh: {cpu}, {os.cpu_count()} cores, load {load():.1f} at the start")
        table = plan_fresh.rows(args.fresh.split(","), args.rounds, load)
    print("| preset | strategy | machines x ranks | T1 s | link MB/s | measured s | predicted s | error | recorded in |")
    print("|---|---|---|---|---|---|---|---|---|")
    fixed = []  # the costs the plan would otherwise measure where it runs (the host's load moves them)
    for k in ("refault_ns", "copy_ns"):
        if getattr(args, k) is not None:
            fixed += ["--" + k.replace("_", "-"), str(getattr(args, k))]
    worst = 0.0
    for preset, strategy, m, r, ov, t1, link, measured, where in table:
        if args.link_stretch is not None and m > 1 and "--link-stretch" not in ov:
            ov = ov + ["--link-stretch", str(args.link_stretch)]
            where += f", link stretch {args.link_stretch:.1f} ns/B given"
        p = predict(args.bin, preset, m, r, ov, t1, link, fixed)[strategy]["step_s"]
        err = p / measured - 1
        worst = max(worst, abs(err))
        print(f"| {preset} | {strategy} | {m} x {r} | {t1:.3f} | {link / 1e6:.2f} | {measured:.3f} | {p:.3f} | "
              f"{err * 100:+.1f}% | {where} |")
    print(f"\nworst error {worst * 100:.1f}% over {len(table)} rows (target 15%)")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
