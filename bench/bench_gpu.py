#!/usr/bin/env python3
"""bench_gpu.py -- tandem's CUDA backend against PyTorch on the same GPU, same shapes, same tokens per step.

Cases (seq 2048, random weights, random tokens with labels = inputs):
  qwen3-0.6b full fine-tuning, qwen3-1.7b full fine-tuning, qwen3-4b LoRA (r 16, alpha 32, every projection).
For each case and implementation the largest batch that fits (tried from --batches, largest first), then
--warmup untimed and --steps timed optimizer steps (forward, loss, backward, clip to norm 1, AdamW).

  tandem          tandem bench train --device cuda --bf16: bf16 products, fp32 accumulation, fp32 master weights and
                  AdamW state; LoRA: frozen base in bf16
  torch-eager     transformers' Qwen3ForCausalLM (attn_implementation="sdpa": flash attention), fp32 weights under
                  torch.autocast(bfloat16), torch.optim.AdamW(fused=True); LoRA: PEFT on the base cast to bf16
                  (adapters fp32, PEFT's default)
  torch-compile   the same model through torch.compile (compilation is in the warm-up, not the timing)

Reported: ms per step (median), tokens/s, MFU = FLOPs / time / peak (FLOPs: 6 N T + 12 L H hd S T; LoRA: (4 N +
6 N_lora) T + 12 L H hd S T; N the parameters without the embedding lookup, the tied lm_head counted; peak: H100 dense
bf16 989 TFLOP/s, --peak-tflops), and peak GPU memory (torch.cuda.max_memory_allocated; tandem: its allocator's
high-water mark, the same notion). One JSON line per measurement (--json FILE) and one table row on stdout, each
written the moment it is measured: a run killed from outside (the GPU verification's fixed time) keeps what it had.

Time: with --deadline SECONDS no attempt starts when fewer than --min-attempt seconds are left, and every attempt
runs in a child process (tandem, or this script with --child for PyTorch) killed at the deadline, so a long one is
stopped instead of running past it. A failed attempt (out of memory, also at compile time inside torch.compile's
BackendCompilerFailed; a timeout; a crash) is reported for its case and the next attempt goes on.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {
    "qwen3-0.6b": dict(config="qwen3-0.6b.json", lora=0),
    "qwen3-1.7b": dict(config="qwen3-1.7b.json", lora=0),
    "qwen3-4b-lora": dict(config="qwen3-4b.json", lora=16),
}


def flops_per_step(cfg, tokens, seq, lora_rank):
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, KV, hd, I = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["intermediate_size"]
    per_layer = D * (H + 2 * KV) * hd + H * hd * D + 3 * D * I + 2 * D + 2 * hd
    n = L * per_layer + D + V * D  # + final norm + lm_head (tied or not, its product is done once)
    attn = 12.0 * L * H * hd * seq * tokens
    if not lora_rank:
        return 6.0 * n * tokens + attn
    q, kv, o = H * hd, KV * hd, D
    n_lora = L * lora_rank * ((D + q) + 2 * (D + kv) + (q + o) + 2 * (D + I) + (I + D))
    return (4.0 * n + 6.0 * n_lora) * tokens + attn


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Clock:
    """The deadline: seconds left, and the time an attempt may take (None: no deadline)."""

    def __init__(self, deadline, min_attempt):
        self.t0, self.deadline, self.min_attempt = time.time(), deadline, min_attempt

    def left(self):
        return self.deadline - (time.time() - self.t0) if self.deadline else None

    def attempt_timeout(self, cap):
        left = self.left()
        return cap if left is None else min(cap, left)

    def too_late(self):
        left = self.left()
        return left is not None and left < self.min_attempt


def run_tandem(binary, case, batch, seq, steps, warmup, peak, timeout):
    c = CASES[case]
    cmd = [binary, "bench", "train", "--model-config", os.path.join(HERE, "configs", c["config"]), "--device", "cuda",
           "--bf16", "--batch", str(batch), "--seq", str(seq), "--steps", str(steps), "--warmup", str(warmup),
           "--peak-tflops", str(peak)]
    if c["lora"]:
        cmd += ["--lora-rank", str(c["lora"])]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "stopped after %.0f s (deadline)" % timeout
    if p.returncode != 0:
        if "out of GPU memory" in p.stderr:
            return None, "oom"
        lines = p.stderr.strip().splitlines()
        return None, lines[-1] if lines else "exit %d" % p.returncode
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None, "no result line from tandem bench train"
    return {"impl": "tandem", "case": case, "batch": batch, "seq": seq, "ms_step": r["ms_step"],
            "tok_s": r["tok_s"], "mfu": r["mfu"], "peak_mem_gib": r["peak_device_mb"] / 1024.0,
            "loss": r["loss"], "wall_s": time.time() - t0, "device": r["device"]}, None


def torch_case(case, batch, seq, steps, warmup, peak, compiled):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    c = CASES[case]
    cfg_json = json.load(open(os.path.join(HERE, "configs", c["config"])))
    cfg = Qwen3Config(**{k: v for k, v in cfg_json.items() if k not in ("architectures", "torch_dtype")})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg)
    if c["lora"]:
        from peft import LoraConfig, get_peft_model
        model = model.to(torch.bfloat16)
        model = get_peft_model(model, LoraConfig(r=c["lora"], lora_alpha=2 * c["lora"], lora_dropout=0.0,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if compiled else model
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    for _ in range(warmup):
        loss = step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ms = times[len(times) // 2]
    tokens = batch * seq
    fl = flops_per_step(cfg_json, tokens, seq, c["lora"])
    out = {"impl": "torch-compile" if compiled else "torch-eager", "case": case, "batch": batch, "seq": seq,
           "ms_step": ms, "tok_s": tokens / (ms / 1e3), "mfu": fl / (ms / 1e3) / (peak * 1e12),
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": float(loss),
           "wall_s": time.time() - t0, "torch": torch.__version__}
    del model, step_model, opt, params
    torch.cuda.empty_cache()
    return out


def failure(exc):
    """What an attempt's exception means: "oom" (try a smaller batch) or one line for the report. torch.compile
    wraps an out-of-memory during compilation (autotuning) in BackendCompilerFailed."""
    name = type(exc).__name__
    text = str(exc)
    if name == "OutOfMemoryError" or "out of memory" in text.lower():
        return "oom"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return "%s: %s" % (name, first[:200])


def child(a):
    """--child: one PyTorch attempt in this process; its result (or failure) as the last stdout line."""
    try:
        r = torch_case(a.cases, a.batches_one, a.seq, a.steps, a.warmup, a.peak_tflops, a.child == "torch-compile")
        why = None
    except Exception as e:  # every failure is the attempt's result, reported by the parent
        r, why = None, failure(e)
    print(json.dumps({"result": r, "why": why}), flush=True)


def run_torch(case, batch, seq, steps, warmup, peak, compiled, timeout):
    """One attempt in a child process: a hang or a long compile is killed at the deadline, and GPU memory is handed
    back whatever happened."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "torch-compile" if compiled else "torch-eager",
           "--cases", case, "--batches", str(batch), "--seq", str(seq), "--steps", str(steps), "--warmup",
           str(warmup), "--peak-tflops", str(peak)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "stopped after %.0f s (deadline)" % timeout
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
        return out["result"], out["why"]
    except (IndexError, ValueError, KeyError):
        lines = (p.stderr or "").strip().splitlines()
        return None, "exit %d: %s" % (p.returncode, lines[-1][:200] if lines else "no output")


def largest(fn, batches, label, clock):
    for b in batches:
        if clock.too_late():
            log("  %-14s batch %3d: skipped (deadline: %.0f s left)" % (label, b, clock.left()))
            return None
        r, why = fn(b)
        if r:
            log("  %-14s batch %3d: %8.1f ms/step, %9.0f tok/s, MFU %.1f%%, peak %.1f GiB" %
                (label, b, r["ms_step"], r["tok_s"], 100 * r["mfu"], r["peak_mem_gib"]))
            return r
        log("  %-14s batch %3d: %s" % (label, b, why))
        if why != "oom":
            return None
    return None


ROW = "| %s | %s | %d | %.1f | %.0f | %.1f%% | %.1f |"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="qwen3-1.7b,qwen3-0.6b,qwen3-4b-lora")
    ap.add_argument("--impls", default="tandem,torch-eager,torch-compile")
    ap.add_argument("--batches", default="16,8,4,2,1", help="tried largest first (the largest that fits is kept)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM_BIN", os.path.join(HERE, "..", "build", "tandem")))
    ap.add_argument("--json", default=None)
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds from start: no attempt starts, and a running one is stopped, after it")
    ap.add_argument("--min-attempt", type=float, default=45,
                    help="with --deadline: the fewest seconds left for an attempt to start")
    ap.add_argument("--child", choices=("torch-eager", "torch-compile"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        a.batches_one = int(a.batches)
        return child(a)
    clock = Clock(a.deadline, a.min_attempt)
    batches = [int(x) for x in a.batches.split(",")]
    out = open(a.json, "a") if a.json else None
    print("| case | impl | batch | ms/step | tok/s | MFU | peak GiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for case in a.cases.split(","):
        if clock.too_late():
            log("%s: skipped (deadline of %.0f s reached)" % (case, a.deadline))
            continue
        log("%s, seq %d:" % (case, a.seq))
        found = {}
        for impl in a.impls.split(","):
            if impl == "tandem":
                r = largest(lambda b: run_tandem(a.tandem, case, b, a.seq, a.steps, a.warmup, a.peak_tflops,
                                                 clock.attempt_timeout(900)), batches, impl, clock)
            else:
                # compile at the batch eager found (recompiling per tried batch would cost minutes)
                tried = batches if impl == "torch-eager" or "torch-eager" not in found else \
                    [b for b in batches if b <= found["torch-eager"]["batch"]]
                r = largest(lambda b: run_torch(case, b, a.seq, a.steps, a.warmup, a.peak_tflops,
                                                impl == "torch-compile", clock.attempt_timeout(1800)), tried, impl,
                            clock)
            if r:
                found[impl] = r
                print(ROW % (r["case"], r["impl"], r["batch"], r["ms_step"], r["tok_s"], 100 * r["mfu"],
                             r["peak_mem_gib"]), flush=True)
                if out:
                    out.write(json.dumps(r) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
