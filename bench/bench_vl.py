#!/usr/bin/python3
"""bench_vl.py -- tandem vs the PyTorch reference (../shared/ref/vl_ref.py): a vision-language training step on CPU.

One invocation, every measurement in its own process, one at a time, the order alternating round by round:
  tandem:   OMP_NUM_THREADS=N build/tandem bench vl --model-config CFG --batch B --seq S --images K --image-size PX
  PyTorch:  OMP_NUM_THREADS=N ../shared/ref/run.sh -c <TORCH_CHILD>   (OpenMP OpenBLAS + jemalloc, fp32, same
            config.json through vl_ref.VLConfig.from_hf, same batch layout, same threads, interop threads 1)
Step = forward (vision tower, image features scattered at <|image_pad|>, decoder) + cross-entropy + backward +
clip_grad_norm(1.0) + AdamW (lr 1e-4, betas 0.9/0.95, wd 0.1) + zero_grad.  Default: LLaMA-Factory's VL LoRA
(r 8, alpha 16 on the language model's q/k/v/o/gate/up/down; tower and projector frozen, so the tower runs forward
only); --full: full fine-tuning, nothing frozen.  Batch: each of B rows holds K images of PX x PX pixels
(<|vision_start|>, pads, <|vision_end|> after one text token), random text to S; labels = ids with the pads -100.
tok/s counts all B x S positions, image tokens included.  Vision share = the tower's forward (+ backward with
--full) wall time over the step's: tandem times it inside the tower (tn_acts_vision_seconds); PyTorch with a
forward pre-hook / hook on model.model.visual and, for backward, tensor hooks from the gradient of the tower's
output to the gradient of the patch embedding's output (the patch-weight gradient after it is not counted).

Standard library only; run with /usr/bin/python3 (bench/bench_vl.sh does).  See docs/performance.md.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import REPO, cpu_model, git_rev, last_json, run_child, wait_quiet  # noqa: E402

# Runs inside ../shared/ref (run.sh cd's there).  argv: CONFIG THREADS WARMUP STEPS B S K PX FULL RANK
TORCH_CHILD = r"""
import json, statistics, sys, time
import torch, vl_ref, bench_ref
from llama_ref import set_threads
a = sys.argv[1:]
cfg_path, threads, warmup, steps, B, S, K, px, full, rank = a[0], *map(int, a[1:])
torch.set_num_interop_threads(1)
set_threads(threads)
c = vl_ref.VLConfig.from_hf(json.load(open(cfg_path)))
torch.manual_seed(0)
model = vl_ref.VLForConditionalGeneration(c)
if not full:
    vl_ref.add_lm_lora(model, r=rank, alpha=2 * rank)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
v = c.vision
g = px // v.patch_size
n_tok = g * g // v.spatial_merge_size ** 2
lo = min(c.text.vocab_size, c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id,
         c.vision_token_id)
gen = torch.Generator().manual_seed(1)
ids = torch.randint(0, lo, (B, S), generator=gen)
for b in range(B):
    at = 1
    for i in range(K):
        ids[b, at] = c.vision_start_token_id
        ids[b, at + 1:at + 1 + n_tok] = c.image_token_id
        ids[b, at + 1 + n_tok] = c.vision_end_token_id
        at += n_tok + 2
labels = ids.masked_fill(ids == c.image_token_id, -100)
N = B * K * g * g
pv = torch.randn(N, v.in_channels * v.temporal_patch_size * v.patch_size ** 2, generator=gen)
grid = torch.tensor([[1, g, g]] * (B * K))
t = dict(fwd=0.0, bwd=0.0)
vis = model.model.visual
def pre(mod, inp):
    t["f0"] = time.perf_counter()
def post(mod, inp, out):
    t["fwd"] += time.perf_counter() - t["f0"]
    if out[0].requires_grad:
        out[0].register_hook(lambda grad: t.__setitem__("b0", time.perf_counter()))
def patch_post(mod, inp, out):
    if out.requires_grad:
        out.register_hook(lambda grad: t.__setitem__("bwd", t["bwd"] + time.perf_counter() - t["b0"]))
vis.register_forward_pre_hook(pre)
vis.register_forward_hook(post)
vis.patch_embed.register_forward_hook(patch_post)
ms, share, vf, vb = [], [], 0.0, 0.0
for i in range(warmup + steps):
    f0, b0 = t["fwd"], t["bwd"]
    t0 = time.perf_counter()
    _, loss = model(ids, labels=labels, pixel_values=pv, image_grid_thw=grid)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    dt = time.perf_counter() - t0
    if i >= warmup:
        ms.append(1e3 * dt)
        share.append((t["fwd"] - f0 + t["bwd"] - b0) / dt)
        vf, vb = vf + t["fwd"] - f0, vb + t["bwd"] - b0
nv = len(ms)
med = statistics.median(ms)
print(json.dumps(dict(impl="pytorch", config=cfg_path, mode="full" if full else "lora", threads=threads, batch=B,
                      seq=S, images=B * K, image_size=px, patches=N, image_tokens=int((ids == c.image_token_id).sum()),
                      steps=steps, ms_step=med, ms_min=min(ms), tok_s=B * S / (med / 1e3),
                      vision_fwd_ms=1e3 * vf / nv, vision_bwd_ms=1e3 * vb / nv,
                      vision_share=sum(share) / nv, loss=loss.item(),
                      params=sum(p.numel() for p in model.parameters()), trainable=sum(p.numel() for p in params),
                      env=bench_ref.env_info())), flush=True)
"""


def openblas_core(tandem):
    """The GEMM kernel OpenBLAS picked (tandem env), and OPENBLAS_CORETYPE when set: on a VM that hides the CPU
    model OpenBLAS 0.3.21 may fall back to Prescott (SSE3) on an AVX-512 CPU, 10x and more below its peak."""
    try:
        out = subprocess.run([tandem, "env"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    core = next((l.split("|", 1)[1].strip() for l in out.splitlines() if "OpenBLAS core type" in l), "?")
    return core


def measure(impl, a, ref_dir, cfg):
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "MALLOC_CONF", "STOCK"):
        env.pop(k, None)
    env["OMP_NUM_THREADS"] = str(a.threads)
    if impl == "pytorch" and a.torch_spincount is not None:  # tandem's own default (main.c); unset: libgomp's
        env["GOMP_SPINCOUNT"] = str(a.torch_spincount)
    if impl == "tandem":
        argv = [a.tandem, "bench", "vl", "--model-config", cfg, "--batch", str(a.batch), "--seq", str(a.seq),
                "--images", str(a.images), "--image-size", str(a.image_size), "--steps", str(a.steps),
                "--warmup", str(a.warmup)] + (["--full"] if a.full else [])
        shown = f"OMP_NUM_THREADS={a.threads} " + shlex.join(argv)
    else:
        args = [cfg, a.threads, a.warmup, a.steps, a.batch, a.seq, a.images, a.image_size, int(a.full), 8]
        argv = [os.path.join(ref_dir, "run.sh"), "-c", TORCH_CHILD] + [str(x) for x in args]
        spin = "" if a.torch_spincount is None else f"GOMP_SPINCOUNT={a.torch_spincount} "
        shown = f"OMP_NUM_THREADS={a.threads} {spin}{os.path.join(ref_dir, 'run.sh')} -c <bench_vl TORCH_CHILD> " + \
            " ".join(str(x) for x in args)
    wait_quiet(a.wait_quiet)
    res = run_child(argv, env)
    r = last_json(res["stdout"]) if res["rc"] == 0 else None
    if r is None:
        tail = "\n".join((res["stderr"] or res["stdout"]).strip().splitlines()[-15:])
        print(f"  FAILED {impl} (exit {res['rc']}): {shown}\n{tail}", file=sys.stderr, flush=True)
        return None
    r.update(measured_peak_rss_mb=round(res["rss_mb"], 1), wall_s=round(res["wall_s"], 2),
             foreign=round(res["foreign"], 3), cmd=shown)
    print(f"  {impl}: {r['ms_step']:.0f} ms/step, {r['tok_s']:.0f} tok/s, vision {100 * r['vision_share']:.1f}% "
          f"(fwd {r['vision_fwd_ms']:.0f} ms, bwd {r['vision_bwd_ms']:.0f} ms), loss {r['loss']:.4f}, "
          f"peak RSS {res['rss_mb']:.0f} MB, foreign load {res['foreign']:.2f} cores", file=sys.stderr, flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description="tandem vs PyTorch (vl_ref.py): a VL training step on CPU, side by side")
    ap.add_argument("--model-config", default=os.path.join(REPO, "bench", "configs", "qwen2-vl-bench.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--images", type=int, default=1, help="images per row (default 1)")
    ap.add_argument("--image-size", type=int, default=224, help="square images of this many pixels (default 224)")
    ap.add_argument("--full", action="store_true", help="full fine-tuning, nothing frozen (default: LF's VL LoRA)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per measurement (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    ap.add_argument("--rounds", type=int, default=2, help="tandem/PyTorch pairs, order alternating (default 2)")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                    help="before each measurement wait up to SECONDS until other processes use < 0.15 cores")
    ap.add_argument("--torch-spincount", type=int, default=None, metavar="N",
                    help="run PyTorch with GOMP_SPINCOUNT=N (tandem runs with 1000 unless OMP_WAIT_POLICY or "
                    "GOMP_SPINCOUNT is set; default: PyTorch with libgomp's own default)")
    ap.add_argument("--json", default="", help="append every raw result (one JSON object per line) to this file")
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"))
    ap.add_argument("--ref-dir", default=None, help="PyTorch reference folder (default: $TANDEM_SHARED_DIR/ref, "
                    "else <repo>/../shared/ref)")
    a = ap.parse_args()
    if min(a.threads, a.batch, a.seq, a.images, a.image_size, a.steps, a.rounds) < 1 or a.warmup < 0:
        ap.error("sizes, --steps and --rounds must be positive, --warmup >= 0")
    if not (os.path.isfile(a.tandem) and os.access(a.tandem, os.X_OK)):
        sys.exit(f"bench_vl: {a.tandem} not found: run `make build` first")
    shared = os.environ.get("TANDEM_SHARED_DIR")
    ref_dir = os.path.abspath(a.ref_dir or (os.path.join(shared, "ref") if shared else
                                            os.path.join(REPO, "..", "shared", "ref")))
    for f in ("run.sh", "vl_ref.py", "llama_ref.py", "bench_ref.py"):
        if not os.path.isfile(os.path.join(ref_dir, f)):
            sys.exit(f"bench_vl: PyTorch reference not found ({os.path.join(ref_dir, f)} missing); "
                     "set TANDEM_SHARED_DIR or pass --ref-dir")
    cfg = os.path.abspath(a.model_config)
    if not os.path.isfile(cfg):
        sys.exit(f"bench_vl: {cfg}: no such config.json")
    command = shlex.join([os.environ.get("BENCH_VL_LAUNCHER") or sys.argv[0]] + sys.argv[1:])
    load0 = os.getloadavg()
    pairs, raw = [], []
    for rnd in range(a.rounds):
        order = ("tandem", "pytorch") if rnd % 2 == 0 else ("pytorch", "tandem")
        print(f"[round {rnd + 1}/{a.rounds}] {' then '.join(order)}", file=sys.stderr, flush=True)
        got = {who: measure(who, a, ref_dir, cfg) for who in order}
        raw += [r for r in got.values() if r]
        if got["tandem"] and got["pytorch"]:
            pairs.append((got["tandem"], got["pytorch"]))
    load1 = os.getloadavg()
    if a.json:
        with open(a.json, "a") as f:
            for r in raw:
                f.write(json.dumps(r) + "\n")
    if not pairs:
        print("bench_vl: no complete tandem/PyTorch pair; see the messages above", file=sys.stderr)
        return 1
    t0, p0 = pairs[0]
    print(f"Command: `{command}`  ")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} CPUs); OpenBLAS core type {openblas_core(a.tandem)} (both sides load "
          f"the same libopenblas); load average {load0[0]:.2f} before, {load1[0]:.2f} after; tandem {git_rev()}  ")
    print(f"Model: {os.path.basename(cfg)} ({t0['params'] / 1e6:.1f} M parameters, {t0['mode']}: "
          f"{t0['trainable'] / 1e6:.2f} M trainable in tandem, {p0['trainable'] / 1e6:.2f} M in PyTorch); "
          f"batch {a.batch} x {a.seq} tokens, {t0['images']} image(s) of {a.image_size}x{a.image_size} "
          f"({t0['patches']} patches, {t0['image_tokens']} image tokens); {a.threads} thread(s); "
          f"{a.steps} timed steps after {a.warmup} warm-up, medians; PyTorch's OpenMP waits: "
          f"{'libgomp default' if a.torch_spincount is None else 'GOMP_SPINCOUNT=%d' % a.torch_spincount}, "
          f"tandem's: {os.environ.get('GOMP_SPINCOUNT') or os.environ.get('OMP_WAIT_POLICY') or 'GOMP_SPINCOUNT=1000'}  ")
    print()
    print("| round | tandem ms/step | PyTorch ms/step | tandem tok/s | PyTorch tok/s | ratio | tandem vision | "
          "PyTorch vision | tandem loss | PyTorch loss | foreign load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for i, (t, p) in enumerate(pairs):
        ratios.append(t["tok_s"] / p["tok_s"])
        print(f"| {i + 1} | {t['ms_step']:.0f} | {p['ms_step']:.0f} | {t['tok_s']:.0f} | {p['tok_s']:.0f} | "
              f"{ratios[-1]:.2f}x | {100 * t['vision_share']:.1f}% | {100 * p['vision_share']:.1f}% | "
              f"{t['loss']:.4f} | {p['loss']:.4f} | {max(t['foreign'], p['foreign']):.2f} |")
    print()
    print(f"tandem / PyTorch tok/s: median {statistics.median(ratios):.2f}x, range {min(ratios):.2f}-"
          f"{max(ratios):.2f}x (target >= 1.00x: {'met' if statistics.median(ratios) >= 1.0 else 'NOT met'})")
    worst = max(max(t["foreign"], p["foreign"]) for t, p in pairs)
    if worst > 0.3:
        print(f"Warning: other processes used up to {worst:.2f} cores during a measurement; rerun with --wait-quiet.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
