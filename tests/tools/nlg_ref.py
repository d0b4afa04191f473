#!/usr/bin/env python3
"""nlg_ref.py -- an independent check of tandem's predict metrics (src/infer/nlg_metrics.c).

Usage: nlg_ref.py CASES.jsonl   (lines {"pred", "label", "bleu", "rouge1", "rouge2", "rougel"} written by
test_unit_nlg_metrics, scores in [0, 1]). For each: BLEU-4 from Debian's python3-nltk (3.8) exactly as
LLaMA-Factory calls it, sentence_bleu([list(label)], list(pred), smoothing_function=SmoothingFunction().method3);
ROUGE-1/2/L written here from rouge-chinese's / pltrdy's definitions (distinct n-grams; summary-level union LCS of
words, rebuilt as rouge_score._recon_lcs does) on tandem's segmentation, re-implemented here with a regex.
Prints one line; exit 1 if any score differs by more than 1e-9."""
import json, re, sys

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

WORD = re.compile(r"[0-9A-Za-z]+(?:\.[0-9]+)?%?|\S", re.S)
END = set("。！？!?")


def words(text):
    """tandem's segmentation: (words, sentence ends after word i)."""
    out, ends = [], []
    for m in re.finditer(r"[0-9A-Za-z]+(?:\.[0-9]+)?%?|\n|\s|.", text, re.S):
        w = m.group(0)
        if w == "\n":
            if ends:
                ends[-1] = True
            continue
        if w.isspace():
            continue
        out.append(w)
        ends.append(w in END)
    return out, ends


def sentences(ws, ends):
    s, cur = [], []
    for w, e in zip(ws, ends):
        cur.append(w)
        if e:
            s.append(cur)
            cur = []
    if cur:
        s.append(cur)
    return s


def ngrams(ws, n):
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def f(overlap, nh, nr):
    p = overlap / nh if nh else 0.0
    r = overlap / nr if nr else 0.0
    return 2.0 * ((p * r) / (p + r + 1e-8))


def lcs_words(x, y):
    t = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            t[i][j] = t[i - 1][j - 1] + 1 if x[i - 1] == y[j - 1] else max(t[i - 1][j], t[i][j - 1])
    i, j, got = len(x), len(y), set()
    while i > 0 and j > 0:
        if x[i - 1] == y[j - 1]:
            got.add(x[i - 1])
            i, j = i - 1, j - 1
        elif t[i - 1][j] > t[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return got


def rouge(pred, label):
    hw, he = words(pred)
    rw, re_ = words(label)
    if not hw or not rw:
        return 0.0, 0.0, 0.0
    r1 = f(len(ngrams(hw, 1) & ngrams(rw, 1)), len(ngrams(hw, 1)), len(ngrams(rw, 1)))
    r2 = f(len(ngrams(hw, 2) & ngrams(rw, 2)), len(ngrams(hw, 2)), len(ngrams(rw, 2)))
    union = set()
    for rs in sentences(rw, re_):
        for hs in sentences(hw, he):
            union |= lcs_words(rs, hs)
    p, r = len(union) / len(set(hw)), len(union) / len(set(rw))
    return r1, r2, 2.0 * ((p * r) / (p + r + 1e-8))


worst, n, bad = 0.0, 0, []
for line in open(sys.argv[1], encoding="utf-8"):
    c = json.loads(line)
    want = [sentence_bleu([list(c["label"])], list(c["pred"]), smoothing_function=SmoothingFunction().method3),
            *rouge(c["pred"], c["label"])]
    got = [c["bleu"], c["rouge1"], c["rouge2"], c["rougel"]]
    for name, a, b in zip(("bleu-4", "rouge-1", "rouge-2", "rouge-l"), got, want):
        d = abs(a - b)
        worst = max(worst, d)
        if d > 1e-9:
            bad.append(f"{name}: tandem {a!r}, reference {b!r} for pred {c['pred'][:60]!r} label {c['label'][:60]!r}")
    n += 1
for b in bad[:10]:
    print("FAIL:", b)
print(f"nlg_ref: {n} pairs, worst difference {worst:.3g}, {len(bad)} over 1e-9")
sys.exit(1 if bad or n == 0 else 0)
