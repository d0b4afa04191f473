#!/usr/bin/env python3
"""hf_sampling_ref.py -- the next-token distribution as transformers' generate() builds it, written here in torch from
its logits_process.py (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper) in its _get_logits_processor order: repetition penalty, then (sampling only) temperature, top-k,
top-p, then softmax; greedy is the one-hot argmax. fp32, as HF casts the logits.

Usage: hf_sampling_ref.py CASES.jsonl: lines {"logits", "seen", "do_sample", "temperature", "top_k", "top_p",
"repetition_penalty", "probs"} (probs: tandem's). Prints one line; exit 1 when any probability differs by more
than 2e-6."""
import json, sys

import torch


def hf_probs(c):
    scores = torch.tensor([c["logits"]], dtype=torch.float32)
    seen = torch.tensor([c["seen"]], dtype=torch.long)
    p = c["repetition_penalty"]
    if p != 1.0 and seen.numel():
        s = torch.gather(scores, 1, seen)
        s = torch.where(s < 0, s * p, s / p)
        scores = scores.scatter(1, seen, s)
    if not c["do_sample"] or c["temperature"] <= 0:
        out = torch.zeros_like(scores)
        out[0, int(torch.argmax(scores, dim=-1))] = 1.0
        return out[0]
    if c["temperature"] != 1.0:
        scores = scores / c["temperature"]
    if c["top_k"] > 0:
        k = min(c["top_k"], scores.size(-1))
        remove = scores < torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(remove, -float("inf"))
    if c["top_p"] < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_remove = cum <= (1 - c["top_p"])
        sorted_remove[..., -1:] = 0
        remove = sorted_remove.scatter(1, sorted_idx, sorted_remove)
        scores = scores.masked_fill(remove, -float("inf"))
    return scores.softmax(dim=-1)[0]


worst, n, bad = 0.0, 0, []
for line in open(sys.argv[1]):
    c = json.loads(line)
    want = hf_probs(c).double()
    got = torch.tensor(c["probs"], dtype=torch.float64)
    d = float((want - got).abs().max())
    worst = max(worst, d)
    if d > 2e-6:
        bad.append(f"case {n}: max |diff| {d:.3g}: tandem {[round(x, 5) for x in c['probs']]}, HF {[round(float(x), 5) for x in want]}")
    n += 1
for b in bad[:5]:
    print("FAIL:", b)
print(f"hf_sampling_ref: {n} cases, worst difference {worst:.3g}, {len(bad)} over 2e-6")
sys.exit(1 if bad or n == 0 else 0)
