#!/usr/bin/env python3
"""nlg_segmentation.py -- how far predict's ROUGE moves because tandem segments words without jieba.

LLaMA-Factory's ComputeSimilarity splits predictions and labels into words with jieba (Debian python3-jieba 0.42.1:
a dictionary plus an HMM); tandem (src/infer/nlg_metrics.c) takes each Han character as a word. BLEU-4 works on
characters in both, so only ROUGE moves. On alpaca_zh_demo (LF's data/alpaca_zh_demo.json, 1000 records) this scores
three kinds of (prediction, label) pairs, as LF would (jieba) and as tandem does, with the same ROUGE code
(tests/tools/nlg_ref.py, which test_unit_nlg_metrics holds equal to tandem's C on 600 random pairs):
  half:      the first half of an answer against the answer (a partly right prediction)
  neighbour: the next record's answer against an answer (a wrong prediction on the same topic mix)
  question:  the instruction + input against the answer
Usage: /usr/bin/python3 bench/nlg_segmentation.py [../shared/data/llamafactory/alpaca_zh_demo.json]"""
import json, os, sys

import jieba

here = os.path.dirname(os.path.abspath(__file__))
ref = {}
sys.argv, argv = [sys.argv[0], "/dev/null"], sys.argv
exec(open(os.path.join(here, "..", "tests", "tools", "nlg_ref.py")).read().split("worst, n, bad")[0], ref)
path = argv[1] if len(argv) > 1 else os.path.join(here, "..", "..", "shared", "data", "llamafactory", "alpaca_zh_demo.json")
rows = json.load(open(path, encoding="utf-8"))
jieba.setLogLevel(60)


def rouge_with(words_fn, pred, label):
    saved = ref["words"]
    ref["words"] = words_fn
    try:
        return ref["rouge"](pred, label)
    finally:
        ref["words"] = saved


def jieba_words(text):
    """LF: list(jieba.cut(text)), joined by spaces and split again (whitespace tokens vanish); sentences as tandem
    (the split is the same for both: only the words differ)."""
    ws, ends = [], []
    for w in jieba.cut(text):
        if w == "\n":
            if ends:
                ends[-1] = True
            continue
        for piece in w.split():
            ws.append(piece)
            ends.append(piece in ref["END"])
    return ws, ends


answers = [r["output"] for r in rows]
questions = [r["instruction"] + ("\n" + r["input"] if r.get("input") else "") for r in rows]
pairs = {"half": [(a[: len(a) // 2], a) for a in answers],
         "neighbour": [(answers[(i + 1) % len(answers)], a) for i, a in enumerate(answers)],
         "question": list(zip(questions, answers))}
print(f"{len(rows)} records of {os.path.basename(path)}; ROUGE f x 100, mean over the pairs; |diff| = mean per-pair "
      "absolute difference")
print(f"{'pairs':10} {'metric':8} {'jieba (LF)':>11} {'tandem':>8} {'diff':>7} {'|diff|':>7}")
for kind, ps in pairs.items():
    tot = [[0.0, 0.0, 0.0] for _ in range(3)]
    for p, l in ps:
        a = [round(x * 100, 4) for x in rouge_with(jieba_words, p, l)]
        b = [round(x * 100, 4) for x in ref["rouge"](p, l)]
        for k in range(3):
            tot[k][0] += a[k]
            tot[k][1] += b[k]
            tot[k][2] += abs(a[k] - b[k])
    n = len(ps)
    for k, name in enumerate(("rouge-1", "rouge-2", "rouge-l")):
        print(f"{kind:10} {name:8} {tot[k][0] / n:11.2f} {tot[k][1] / n:8.2f} {(tot[k][1] - tot[k][0]) / n:+7.2f} "
              f"{tot[k][2] / n:7.2f}")
