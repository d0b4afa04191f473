#!/usr/bin/python3
"""make_vl_data.py -- small synthetic image datasets in LLaMA-Factory's layout (sharegpt `messages` + `images`,
dataset_info.json), for tandem's vision-language tests and the learning check of issue 25. Needs Pillow only
(Debian's python3-pil: run it with /usr/bin/python3). Deterministic for a given --seed.

  make_vl_data.py ocr DIR [--n 24] [--name meisu_img_recognize]
      digit strings (3 to 6 digits, so the images differ in width and in image-token count) drawn black on
      white, PNG and JPEG mixed; the answer is the string: the layout of the issue's
      data/20250106_visionocr_meisutrain.
  make_vl_data.py shapes DIR [--train 240] [--eval 60]
      one shape (circle, square, triangle) of one colour (red, green, blue, yellow) at a random place and size
      on a light background; the question asks what is in the picture, the answer is "<colour> <shape>".
      Writes shapes_train.json (dataset vl_shapes) and shapes_eval.json (vl_shapes_eval, never trained on), each
      image different; chance is 1 in 12. Also shapes_words.json (vl_shapes_words): the question without an image
      and the 12 answers in turn, for a random base model to learn the words first (examples/vl_shapes/).
"""
import argparse
import json
import os
import random
import sys

from PIL import Image, ImageDraw, ImageFont

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 60, 220), "yellow": (230, 200, 20)}
SHAPES = ("circle", "square", "triangle")
QUESTION = "<image>What is in the picture? Answer with the colour and the shape."


def sharegpt_entry(file_name):
    return {"file_name": file_name, "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def record(question, answer, image):
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
            "images": [image]}


def ocr(args):
    rng = random.Random(args.seed)
    os.makedirs(os.path.join(args.dir, "images"), exist_ok=True)
    font = ImageFont.load_default()
    rows = []
    for i in range(args.n):
        text = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 6)))
        small = Image.new("RGB", (8 * len(text) + 4, 16), (255, 255, 255))
        ImageDraw.Draw(small).text((2, 2), text, fill=(0, 0, 0), font=font)
        img = small.resize((small.width * 4, small.height * 4), Image.NEAREST)  # 3 digits: 112 x 64 pixels
        ext = "jpg" if i % 3 == 2 else "png"
        name = "images/%04d.%s" % (i, ext)
        img.save(os.path.join(args.dir, name), quality=95) if ext == "jpg" else img.save(os.path.join(args.dir, name))
        rows.append(record("<image>识别图片中的文字", text, name))
    write_json(os.path.join(args.dir, args.name + ".json"), rows)
    write_json(os.path.join(args.dir, "dataset_info.json"), {args.name: sharegpt_entry(args.name + ".json")})


def shape_image(rng, colour, shape, side):
    bg = tuple(rng.randint(225, 255) for _ in range(3))
    img = Image.new("RGB", (side, side), bg)
    d = ImageDraw.Draw(img)
    size = rng.randint(side // 3, side * 3 // 4)
    x0, y0 = rng.randint(0, side - size), rng.randint(0, side - size)
    box = (x0, y0, x0 + size - 1, y0 + size - 1)
    fill = tuple(min(255, max(0, c + rng.randint(-20, 20))) for c in COLOURS[colour])
    if shape == "circle":
        d.ellipse(box, fill=fill)
    elif shape == "square":
        d.rectangle(box, fill=fill)
    else:
        d.polygon([(x0 + size // 2, y0), (x0, y0 + size - 1), (x0 + size - 1, y0 + size - 1)], fill=fill)
    return img


def shapes(args):
    rng = random.Random(args.seed)
    os.makedirs(os.path.join(args.dir, "shapes"), exist_ok=True)
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    for split, n in (("train", args.train), ("eval", args.eval)):
        rows = []
        for i in range(n):
            colour, shape = combos[i % len(combos)] if split == "eval" else rng.choice(combos)
            name = "shapes/%s_%04d.png" % (split, i)
            shape_image(rng, colour, shape, args.side).save(os.path.join(args.dir, name))
            rows.append(record(QUESTION, "%s %s" % (colour, shape), name))
        write_json(os.path.join(args.dir, "shapes_%s.json" % split), rows)
    # the words alone (no image): a random base model first learns to answer with one of the 12 phrases
    words = [record(QUESTION.replace("<image>", ""), "%s %s" % combos[i % len(combos)], None) for i in range(args.train)]
    for w in words:
        del w["images"]
    write_json(os.path.join(args.dir, "shapes_words.json"), words)
    info = {"vl_shapes": sharegpt_entry("shapes_train.json"), "vl_shapes_eval": sharegpt_entry("shapes_eval.json"),
            "vl_shapes_words": sharegpt_entry("shapes_words.json")}
    del info["vl_shapes_words"]["columns"]["images"]
    write_json(os.path.join(args.dir, "dataset_info.json"), info)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="task", required=True)
    o = sub.add_parser("ocr")
    o.add_argument("dir")
    o.add_argument("--n", type=int, default=24)
    o.add_argument("--name", default="meisu_img_recognize")
    s = sub.add_parser("shapes")
    s.add_argument("dir")
    s.add_argument("--train", type=int, default=240)
    s.add_argument("--eval", type=int, default=60)
    s.add_argument("--side", type=int, default=56)
    for q in (o, s):
        q.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if getattr(args, "n", 1) < 1 or getattr(args, "train", 1) < 1 or getattr(args, "eval", 1) < 1:
        sys.exit("make_vl_data.py: counts must be >= 1")
    ocr(args) if args.task == "ocr" else shapes(args)


if __name__ == "__main__":
    main()
