#!/usr/bin/python3
"""plan_scale.py -- `tandem plan`'s predictions beyond these machines: 8 to 256 machines of 8 GPUs each over
100 Mbit/s, 1, 10 and 100 Gbit/s, for Qwen3-0.6B / 1.7B / 8B full fine-tuning and Qwen3-8B LoRA (rank 8).

Stated assumptions (all passed to the plan, none measured here): each GPU sustains COMPUTE TFLOP/s (default 400:
an H100's 989 dense bf16 at 40% MFU), holds 80 GB, reduces over NVLink inside a machine at 150 GB/s; sequences
of 4096 tokens, one per GPU per micro-batch, 4 micro-batches a step; fp32 master state (16 bytes per trainable
parameter) as tandem keeps it. Each cell is the strategy the plan picks and its predicted scaling efficiency:
one GPU's compute time over the predicted step (1.00 = no time lost to communication). A prediction, not a
measurement.

Usage: bench/plan_scale.py [--bin build/tandem] [--compute 400]
"""
import argparse, json, os, subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [("Qwen3-0.6B full", "qwen3-0.6b.json", "full"), ("Qwen3-1.7B full", "qwen3-1.7b.json", "full"),
          ("Qwen3-8B full", "qwen3-8b.json", "full"), ("Qwen3-8B LoRA r8", "qwen3-8b.json", "lora")]
LINKS = ["100mbit", "1gbit", "10gbit", "100gbit"]
MACHINES = [8, 16, 32, 64, 128, 256]


def plan(binary, config, ft, machines, link, compute):
    cmd = [binary, "plan", os.path.join(HERE, "plan", "tiny.yaml"), f"model_config={os.path.join(HERE, 'configs', config)}",
           f"finetuning_type={ft}", "cutoff_len=4096", "per_device_train_batch_size=1", "gradient_accumulation_steps=4",
           "disable_gradient_checkpointing=false", "--machines", str(machines), "--ranks-per-machine", "8",
           "--link", link, "--local", "150e9", "--compute", str(compute), "--memory", "80", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    best = [r for r in rows if r["best"]]
    return (best[0]["strategy"], best[0]["compute_s"] / best[0]["step_s"]) if best else ("none fits", 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "tandem"))
    ap.add_argument("--compute", type=float, default=400)
    a = ap.parse_args()
    print("| model | link | " + " | ".join(f"{m} machines" for m in MACHINES) + " |")
    print("|---|---|" + "---|" * len(MACHINES))
    for name, config, ft in MODELS:
        for link in LINKS:
            cells = [plan(a.bin, config, ft, m, link, a.compute) for m in MACHINES]
            print(f"| {name} | {link} | " + " | ".join(f"{s} {e:.2f}" for s, e in cells) + " |")


if __name__ == "__main__":
    main()
