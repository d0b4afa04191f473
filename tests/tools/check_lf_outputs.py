"""check_lf_outputs.py OUTPUT_DIR MODEL_DIR [--no-eval] -- the files of a LoRA SFT run are what LLaMA-Factory leaves.

--no-eval: the run had no evaluation (no val_size), so, as in LLaMA-Factory, there must be no eval_results.json,
no eval entries and no training_eval_loss.png, and all_results.json is the train results alone.

Checks, independently of tandem's code: every JSON file parses and has HF's/LF's keys; trainer_log.jsonl
lines carry LF's LogCallback keys in order; the PNG files are PNGs; the adapter is PEFT's: adapter_config.json
(peft_type LORA, r, lora_alpha, target_modules) and adapter_model.safetensors with base_model.model. names,
lora_A [r, in] / lora_B [out, r] shapes derived from the base model's config.json, float32."""
import json, os, re, struct, sys

out, model = sys.argv[1], sys.argv[2]
with_eval = "--no-eval" not in sys.argv[3:]
errors = []


def need(cond, what):
    if not cond:
        errors.append(what)


def load_json(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


for name in ("train_results.json", "all_results.json", "trainer_state.json", "adapter_config.json"):
    need(os.path.exists(os.path.join(out, name)), f"missing {name}")
need(os.path.exists(os.path.join(out, "eval_results.json")) == with_eval,
     "eval_results.json " + ("missing" if with_eval else "written by a run without evaluation"))
tr = load_json("train_results.json")
for k in ("epoch", "total_flos", "train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second"):
    need(k in tr, f"train_results.json lacks {k}")
ev = load_json("eval_results.json") if with_eval else {}
for k in ("epoch", "eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second") if with_eval else ():
    need(k in ev, f"eval_results.json lacks {k}")
# an evaluation step is one batch of at least one sample: never more steps than samples (issue 24, item 11: the
# gradient accumulation steps once entered the count)
for e in ([ev] if with_eval else []) + [e for e in load_json("trainer_state.json")["log_history"] if "eval_loss" in e]:
    need(e["eval_steps_per_second"] <= e["eval_samples_per_second"] + 0.001,
         f"eval_steps_per_second {e['eval_steps_per_second']} > eval_samples_per_second {e['eval_samples_per_second']}")
allr = load_json("all_results.json")
need(set(tr) | set(ev) == set(allr), "all_results.json is not train + eval results")
st = load_json("trainer_state.json")
for k in ("global_step", "max_steps", "log_history", "epoch", "logging_steps", "save_steps", "train_batch_size"):
    need(k in st, f"trainer_state.json lacks {k}")
need(any("loss" in e for e in st["log_history"]), "log_history has no loss entries")
need(any("eval_loss" in e for e in st["log_history"]) == with_eval, "log_history's eval_loss entries")
lines = [json.loads(l) for l in open(os.path.join(out, "trainer_log.jsonl"))]
need(len(lines) >= 2, "trainer_log.jsonl has fewer than 2 lines")
train_lines = [l for l in lines if "loss" in l]
need(train_lines and list(train_lines[0])[:3] == ["current_steps", "total_steps", "loss"], "trainer_log.jsonl key order")
for png in ("training_loss.png", "training_eval_loss.png") if with_eval else ("training_loss.png",):
    with open(os.path.join(out, png), "rb") as f:
        need(f.read(8) == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG")
need(with_eval or not os.path.exists(os.path.join(out, "training_eval_loss.png")), "training_eval_loss.png without eval")

cfg = json.load(open(os.path.join(model, "config.json")))
ac = load_json("adapter_config.json")
need(ac.get("peft_type") == "LORA", "adapter_config.json peft_type")
r = ac["r"]
D, I = cfg["hidden_size"], cfg["intermediate_size"]
hd = cfg.get("head_dim") or D // cfg["num_attention_heads"]  # Qwen3: head_dim need not be D / heads
q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
dims = {"q_proj": (D, q), "k_proj": (D, kv), "v_proj": (D, kv), "o_proj": (q, D), "gate_proj": (D, I),
        "up_proj": (D, I), "down_proj": (I, D)}  # (in, out)
need(sorted(ac["target_modules"]) == sorted(dims), f"target_modules {ac['target_modules']} (lora_target: all)")
b = open(os.path.join(out, "adapter_model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = {k: v for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"}
pat = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")
seen = 0
for name, t in hdr.items():
    m = pat.match(name)
    need(m is not None, f"adapter tensor {name} is not named as PEFT names it")
    if not m:
        continue
    i, o = dims[m.group(3)]
    want = [r, i] if m.group(4) == "A" else [o, r]
    need(t["shape"] == want, f"{name}: shape {t['shape']}, PEFT's is {want}")
    need(t["dtype"] == "F32", f"{name}: dtype {t['dtype']}")
    seen += 1
need(seen == 2 * 7 * cfg["num_hidden_layers"], f"{seen} adapter tensors, expected {2 * 7 * cfg['num_hidden_layers']}")
for e in errors:
    print("check_lf_outputs:", e)
print(f"check_lf_outputs: {len(lines)} log lines, {seen} adapter tensors, {len(errors)} problems")
sys.exit(1 if errors else 0)
