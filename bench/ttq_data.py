"""ttq_data.py -- the inputs of bench/ttq.py (time to a target eval loss, issue 27), generated reproducibly:

  tokenizer  Qwen3's byte-level BPE cut to its byte alphabet + the first K merges (Qwen's ids are in merge
             order, so ids 0 .. 255+K are a complete smaller BPE), its added tokens renumbered after them: a
             small vocabulary, so the lm_head does not dominate a small model's step.
  config     a Qwen3 config.json for `tandem init-model` sized to that vocabulary.
  corpus     `stage: pt` text: the Python 3.11 standard library and Perl 5.36's modules as Debian 12 installs
             them (libpython3.11-minimal/-stdlib, perl-modules-5.36: present on every Debian machine with
             python3 and perl), every *.py / *.pm / *.pod / *.pl file in sorted path order, exact duplicates and
             non-UTF-8 files dropped, cut into rows of ~4 KB at line ends; manifest.json records the file
             count, bytes and one SHA-256 over the (path, file SHA-256) list, so another machine can tell
             whether it has the same corpus.
  sft        an alpaca-format instruction set for the LoRA part: word-list tasks (sort, reverse, upper-case,
             count, first/last word) and additions over identifiers drawn from the corpus, from a seeded
             generator, every instruction distinct (checked), so no example repeats.

Usage: python3 bench/ttq_data.py OUT_DIR [--merges 1792] [--sft-rows 140000]
"""
import argparse, hashlib, json, os, random, sys

SHARED = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
QWEN = os.path.join(SHARED, "data", "tokenizers", "qwen3")
ROOTS = [("/usr/lib/python3.11", (".py",)), ("/usr/share/perl/5.36", (".pm", ".pod", ".pl"))]
ROW_BYTES = 4096


def tokenizer(out, merges):
    """Qwen3's tokenizer.json with the byte alphabet + the first `merges` merges; returns the vocab size."""
    t = json.load(open(os.path.join(QWEN, "tokenizer.json")))
    keep = 256 + merges
    vocab = {s: i for s, i in t["model"]["vocab"].items() if i < keep}
    if sorted(vocab.values()) != list(range(keep)):
        sys.exit("ttq_data: Qwen3's vocab ids 0..%d are not contiguous" % (keep - 1))
    kept = t["model"]["merges"][:merges]
    for k, m in enumerate(kept):  # merge k makes token 256 + k from two older tokens: a closed sub-BPE
        a, b = m.split(" ") if isinstance(m, str) else m
        if vocab.get(a + b) != 256 + k or vocab.get(a, keep) >= 256 + k or vocab.get(b, keep) >= 256 + k:
            sys.exit(f"ttq_data: Qwen3 merge {k} ({a!r} {b!r}) does not make id {256 + k} from older ids")
    t["model"]["vocab"], t["model"]["merges"] = vocab, kept
    remap = {}
    for i, a in enumerate(t["added_tokens"]):
        remap[str(a["id"])] = str(keep + i)
        a["id"] = keep + i
    cfg = json.load(open(os.path.join(QWEN, "tokenizer_config.json")))
    cfg["added_tokens_decoder"] = {remap[k]: v for k, v in cfg["added_tokens_decoder"].items()}
    os.makedirs(out, exist_ok=True)
    json.dump(t, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump(cfg, open(os.path.join(out, "tokenizer_config.json"), "w"), ensure_ascii=False, indent=1)
    ids = {a["content"]: a["id"] for a in t["added_tokens"]}
    return keep + len(t["added_tokens"]), ids


def model_config(path, vocab, eos, hidden, layers, inter, heads, kv):
    vocab = (vocab + 63) // 64 * 64  # the embedding's rows padded to a multiple of 64, as Qwen pads its own
    c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab, "hidden_size": hidden,
         "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
         "num_key_value_heads": kv, "head_dim": hidden // heads, "max_position_embeddings": 4096,
         "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "attention_bias": False, "use_sliding_window": False,
         "sliding_window": None, "tie_word_embeddings": True, "initializer_range": 0.02, "bos_token_id": None,
         "eos_token_id": eos, "torch_dtype": "float32"}
    json.dump(c, open(path, "w"), indent=1)


def corpus_files():
    files = []
    for root, exts in ROOTS:
        for d, subs, names in os.walk(root):
            subs[:] = sorted(s for s in subs if s not in ("__pycache__", "site-packages", "dist-packages"))
            files += [os.path.join(d, n) for n in names if n.endswith(exts)]
    return sorted(files)


def corpus(out):
    """pt rows {"text": ...} into corpus.jsonl, and the manifest; returns the manifest."""
    seen, h, rows, nbytes, skipped = set(), hashlib.sha256(), 0, 0, []
    tmp = os.path.join(out, "corpus.jsonl.tmp")
    with open(tmp, "w") as fh:
        for path in corpus_files():
            raw = open(path, "rb").read()
            digest = hashlib.sha256(raw).hexdigest()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped.append(path)
                continue
            if digest in seen or not text.strip():
                continue
            seen.add(digest)
            h.update(f"{path}\0{digest}\n".encode())
            nbytes += len(raw)
            row = []
            for line in text.splitlines(keepends=True):
                row.append(line)
                if sum(map(len, row)) >= ROW_BYTES:
                    fh.write(json.dumps({"text": "".join(row)}, ensure_ascii=False) + "\n")
                    rows, row = rows + 1, []
            if row:
                fh.write(json.dumps({"text": "".join(row)}, ensure_ascii=False) + "\n")
                rows += 1
    os.replace(tmp, os.path.join(out, "corpus.jsonl"))
    return dict(files=len(seen), bytes=nbytes, rows=rows, sha256=h.hexdigest(), roots=[r for r, _ in ROOTS],
                skipped_non_utf8=len(skipped))


def identifiers(out, n=4000):
    """The corpus's most frequent identifier-like words (letters only, 3-10 long): the SFT tasks' vocabulary."""
    import re
    count = {}
    for line in open(os.path.join(out, "corpus.jsonl")):
        for w in re.findall(r"\b[a-z]{3,10}\b", json.loads(line)["text"]):
            count[w] = count.get(w, 0) + 1
    return sorted(sorted(count), key=lambda w: -count[w])[:n]


def sft(out, rows, words, seed=27):
    """Alpaca rows, every (instruction, input) distinct."""
    rng = random.Random(seed)
    tasks = [
        ("Sort these words alphabetically.", lambda ws: " ".join(sorted(ws))),
        ("Write these words in reverse order.", lambda ws: " ".join(reversed(ws))),
        ("Write these words in upper case.", lambda ws: " ".join(w.upper() for w in ws)),
        ("How many words are there?", lambda ws: str(len(ws))),
        ("Which word comes first alphabetically?", lambda ws: min(ws)),
        ("Write the last word, then the first.", lambda ws: f"{ws[-1]} {ws[0]}"),
    ]
    seen, data = set(), []
    while len(data) < rows:
        k = rng.randrange(len(tasks) + 1)
        if k == len(tasks):
            a, b = rng.randrange(10000), rng.randrange(10000)
            ins, inp, outp = "Add the two numbers.", f"{a} + {b}", str(a + b)
        else:
            ws = [rng.choice(words) for _ in range(rng.randint(3, 7))]
            ins, inp, outp = tasks[k][0], " ".join(ws), tasks[k][1](ws)
        if (ins, inp) in seen:
            continue
        seen.add((ins, inp))
        data.append({"instruction": ins, "input": inp, "output": outp})
    tmp = os.path.join(out, "sft.json.tmp")
    json.dump(data, open(tmp, "w"), indent=0)
    os.replace(tmp, os.path.join(out, "sft.json"))
    return len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--merges", type=int, default=1792)
    ap.add_argument("--sft-rows", type=int, default=140000)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--inter", type=int, default=384)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv", type=int, default=2)
    a = ap.parse_args()
    data = os.path.join(a.out, "data")
    os.makedirs(data, exist_ok=True)
    vocab, ids = tokenizer(os.path.join(a.out, "tokenizer"), a.merges)
    model_config(os.path.join(a.out, "config.json"), vocab, ids["<|im_end|>"], a.hidden, a.layers, a.inter, a.heads,
                 a.kv)
    if not os.path.exists(os.path.join(data, "manifest.json")):
        man = corpus(data)
        man["sft_rows"] = sft(data, a.sft_rows, identifiers(data))
        json.dump(man, open(os.path.join(data, "manifest.json"), "w"), indent=1)
    info = {"ttq_corpus": {"file_name": "corpus.jsonl", "columns": {"prompt": "text"}},
            "ttq_sft": {"file_name": "sft.json"}}
    json.dump(info, open(os.path.join(data, "dataset_info.json"), "w"), indent=1)
    print(json.dumps(dict(json.load(open(os.path.join(data, "manifest.json"))), vocab=vocab)))


if __name__ == "__main__":
    main()
