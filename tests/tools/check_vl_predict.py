#!/usr/bin/env python3
"""check_vl_predict.py -- checks a predict run on a sharegpt dataset with images (template qwen2_vl) against what
LLaMA-Factory writes, computed here without tandem: one line per example in dataset order; each prompt is
batch_decode(input_ids, skip_special_tokens=False) of LF's UnsupervisedDatasetProcessor, i.e. the qwen2_vl template
(default system, every turn but the last, the assistant header) with each <image> tag expanded by the mm_plugin into
<|vision_start|> + n <|image_pad|> + <|vision_end|>, n from the image's size: LF's image_max_pixels /
image_min_pixels pre-resize (int(w * f), int(h * f)), transformers' smart_resize, (h / patch) * (w / patch) / merge^2;
the label starts with the last answer. JPEG and PNG sizes are read from the file headers.
Usage: check_vl_predict.py PRED_DIR DATASET_DIR FILE.json PREPROCESSOR_CONFIG.json IMAGE_MAX_PIXELS IMAGE_MIN_PIXELS"""
import json
import math
import struct
import sys


def image_size(path):
    b = open(path, "rb").read()
    if b[:8] == b"\x89PNG\r\n\x1a\n":
        w, h = struct.unpack(">II", b[16:24])
        return h, w
    i = 2
    while i < len(b):
        while b[i] == 0xFF:
            i += 1
        m = b[i]
        i += 1
        if m in (0xD8, 0x01) or 0xD0 <= m <= 0xD7:
            continue
        n = struct.unpack(">H", b[i:i + 2])[0]
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", b[i + 3:i + 7])
            return h, w
        i += n
    raise SystemExit(f"{path}: no image size found")


def smart_resize(h, w, factor, min_pixels, max_pixels):  # transformers' qwen2_vl image processor
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb, wb = math.floor(h / beta / factor) * factor, math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def image_tokens(path, pp, lf_max, lf_min):
    h, w = image_size(path)
    if w * h > lf_max:  # LF mm_plugin _preprocess_image
        f = math.sqrt(lf_max / (w * h))
        w, h = int(w * f), int(h * f)
    if w * h < lf_min:
        f = math.sqrt(lf_min / (w * h))
        w, h = int(w * f), int(h * f)
    patch, merge = pp.get("patch_size", 14), pp.get("merge_size", 2)
    lo = pp.get("min_pixels", pp.get("size", {}).get("shortest_edge", 56 * 56))
    hi = pp.get("max_pixels", pp.get("size", {}).get("longest_edge", 28 * 28 * 1280))
    hb, wb = smart_resize(h, w, patch * merge, lo, hi)
    return (hb // patch) * (wb // patch) // (merge * merge)


def main():
    pred_dir, data_dir, file, pp_path, lf_max, lf_min = sys.argv[1:7]
    pp = json.load(open(pp_path))
    records = json.load(open(f"{data_dir}/{file}"))
    lines = [json.loads(l) for l in open(f"{pred_dir}/generated_predictions.jsonl", encoding="utf-8")]
    bad = 0
    if len(lines) != len(records):
        print(f"{len(lines)} lines for {len(records)} records")
        return 1
    for i, (r, l) in enumerate(zip(records, lines)):
        imgs = [image_tokens(f"{data_dir}/{p}", pp, int(lf_max), int(lf_min)) for p in r.get("images", [])]
        prompt, k = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n", 0
        for m in r["messages"][:-1]:
            text = m["content"]
            while "<image>" in text:
                run = "<|vision_start|>" + "<|image_pad|>" * imgs[k] + "<|vision_end|>"
                text, k = text.replace("<image>", run, 1), k + 1
            if m["role"] == "user":
                prompt += f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
            else:
                prompt += f"{text}<|im_end|>\n"
        if l["prompt"] != prompt:
            print(f"line {i}: prompt differs:\n  got  {l['prompt']!r}\n  want {prompt!r}")
            bad += 1
        if not l["label"].startswith(r["messages"][-1]["content"]):
            print(f"line {i}: label {l['label']!r} does not start with the last answer")
            bad += 1
        if not isinstance(l["predict"], str):
            print(f"line {i}: no predict")
            bad += 1
    print(f"check_vl_predict: {len(lines)} lines, {bad} problems")
    return 1 if bad else 0


sys.exit(main())
