#!/usr/bin/env python3
"""check_predict.py -- LLaMA-Factory's predict outputs as tandem wrote them, checked independently.

Usage: check_predict.py OUTPUT_DIR DATASET_DIR DATASETS MAX_SAMPLES
 - generated_predictions.jsonl: one line per example in dataset order, keys exactly prompt, predict, label (in that
   order), json.dumps(ensure_ascii=False) byte for byte; each prompt holds its example's user text, each label is
   its example's answer (the template's end-of-turn token is special and decoded away);
 - predict_results.json: exactly LF's eight keys, json.dump(indent=4, sort_keys=True); the four scores equal the
   mean over the lines of BLEU-4 (nltk sentence_bleu, method3, characters) and ROUGE (tests/tools/nlg_ref.py) per
   example x 100 rounded to 4 decimals; runtime and rates consistent with each other.
Prints one line; exit 1 with FAIL lines."""
import importlib.util, json, math, os, sys

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

out, data_dir, names, max_samples = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
here = os.path.dirname(os.path.abspath(__file__))
fails = []
info = json.load(open(os.path.join(data_dir, "dataset_info.json")))
examples = []
for name in names:
    rows = json.load(open(os.path.join(data_dir, info[name]["file_name"]), encoding="utf-8"))[:max_samples]
    for r in rows:
        user = r["instruction"] + ("\n" + r["input"] if r.get("input") else "")
        examples.append((user, r["output"]))

raw = open(os.path.join(out, "generated_predictions.jsonl"), encoding="utf-8").read().split("\n")
if raw[-1] != "":
    fails.append("the file does not end with a newline")
lines = raw[:-1]
if len(lines) != len(examples):
    fails.append(f"{len(lines)} lines for {len(examples)} examples")

sys.argv = [sys.argv[0], "/dev/null"]
ref = {}
exec(open(os.path.join(here, "nlg_ref.py")).read().split("worst, n, bad")[0], ref)
scores = [[], [], [], []]
for i, (line, (user, answer)) in enumerate(zip(lines, examples)):
    j = json.loads(line)
    if list(j) != ["prompt", "predict", "label"]:
        fails.append(f"line {i}: keys {list(j)}")
        continue
    if json.dumps(j, ensure_ascii=False) != line:
        fails.append(f"line {i} is not json.dumps(ensure_ascii=False) of itself")
    if user not in j["prompt"]:
        fails.append(f"line {i}: the prompt does not hold its example's user text {user[:40]!r}")
    if j["label"] != answer and j["label"] != "<think>\n\n</think>\n\n" + answer:
        fails.append(f"line {i}: label {j['label'][:60]!r} is not the answer {answer[:60]!r}")
    p, l = j["predict"], j["label"]
    b = sentence_bleu([list(l)], list(p), smoothing_function=SmoothingFunction().method3)
    r1, r2, rl = ref["rouge"](p, l)
    for k, v in enumerate((b, r1, r2, rl)):
        scores[k].append(round(v * 100, 4))

res_text = open(os.path.join(out, "predict_results.json")).read()
res = json.loads(res_text)
want_keys = ["predict_bleu-4", "predict_model_preparation_time", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l",
             "predict_runtime", "predict_samples_per_second", "predict_steps_per_second"]
if list(res) != want_keys:
    fails.append(f"predict_results.json keys {list(res)}")
if json.dumps(res, indent=4, sort_keys=True) != res_text:
    fails.append("predict_results.json is not json.dump(indent=4, sort_keys=True)")
for k, name in enumerate(("bleu-4", "rouge-1", "rouge-2", "rouge-l")):
    if scores[k]:
        mean = sum(scores[k]) / len(scores[k])
        if abs(res["predict_" + name] - mean) > 1e-9:
            fails.append(f"predict_{name} {res['predict_' + name]} vs the lines' mean {mean}")
rt = res.get("predict_runtime", 0)
# runtime is rounded to 4 decimals (off by <= 5e-5 s) and the rate to 3 (<= 5e-4): n / rt moves by <= n 5e-5 / rt^2
bound = len(lines) * 5e-5 / max(rt * (rt - 5e-5), 1e-12) + 5e-4 + 1e-9
if not (rt > 0 and abs(res["predict_samples_per_second"] - len(lines) / rt) <= bound):
    fails.append(f"samples per second {res.get('predict_samples_per_second')} for {len(lines)} in {rt} s")
for f in fails[:10]:
    print("FAIL:", f)
print(f"check_predict: {len(lines)} lines, scores {[round(res.get('predict_' + n, -1), 3) for n in ('bleu-4', 'rouge-1', 'rouge-2', 'rouge-l')]}, "
      f"{len(fails)} failures")
sys.exit(1 if fails else 0)
