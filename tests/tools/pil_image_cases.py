#!/usr/bin/python3
"""Reference cases for tandem's image code (tests/unit/test_unit_vl_image.c), computed by PIL itself.

    /usr/bin/python3 pil_image_cases.py OUTDIR SEED N

Writes into OUTDIR image files of every mode tandem decodes (PNG written by PIL and by the small PNG writer
below for the bit depths and colour types PIL cannot write: 2/4-bit grey and palette, 16-bit RGB / RGBA /
grey+alpha, Adam7 interlacing; JPEG grey / RGB / CMYK, baseline and progressive, several subsamplings; WebP
lossy and lossless, with and without alpha), raw images for PIL's resize, and manifest.txt:

    decode FILE MODE W H            FILE.rgb: Image.open(FILE).convert("RGB") bytes; MODE = PIL's mode
    prep FILE LFMAX LFMIN PATCH MERGE MINPX MAXPX H W
                                    FILE.prep: LLaMA-Factory's Qwen2-VL _preprocess_image, then transformers'
                                    smart_resize + PIL BICUBIC (H x W x 3); H W = 0 0 when they raise
    resize RAW MODE W H OW OH       RAW.out: Image.resize((OW, OH)) (default filter) of the raw W x H image in
                                    MODE, as bytes in tandem's layout ("1": one byte 0/255, "I": int32 LE);
                                    RAW.rgb: that result .convert("RGB")

The pre-processing below follows LLaMA-Factory's mm_plugin.py (MMPluginMixin._preprocess_image and
Qwen2VLPlugin._preprocess_image, commit ff6d4d1) and transformers' smart_resize, with PIL doing every resize
and conversion, so what the C code is compared against is PIL's arithmetic, not a re-implementation of it.
"""
import io
import math
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image


def smart_resize(height, width, factor, min_pixels, max_pixels):
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def lf_preprocess(image, image_max_pixels, image_min_pixels):
    if (image.width * image.height) > image_max_pixels:
        resize_factor = math.sqrt(image_max_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))
    if (image.width * image.height) < image_min_pixels:
        resize_factor = math.sqrt(image_min_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))
    if image.mode != "RGB":
        image = image.convert("RGB")
    if min(image.width, image.height) < 28:  # Qwen2VLPlugin
        width, height = max(image.width, 28), max(image.height, 28)
        image = image.resize((width, height))
    if image.width / image.height > 200:
        width, height = image.height * 180, image.height
        image = image.resize((width, height))
    if image.height / image.width > 200:
        width, height = image.width, image.width * 180
        image = image.resize((width, height))
    return image


def prepare(path, lf_max, lf_min, patch, merge, min_px, max_px):
    image = lf_preprocess(Image.open(path), lf_max, lf_min)
    h, w = smart_resize(image.height, image.width, patch * merge, min_px, max_px)
    arr = np.asarray(image, dtype=np.uint8)  # transformers: to numpy, then PIL resize of the uint8 array
    return np.asarray(Image.fromarray(arr).resize((w, h), resample=Image.BICUBIC), dtype=np.uint8)


# ---- a minimal PNG writer (inputs PIL cannot write) ----
def _chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def _pack_rows(samples, depth):
    """samples: [h, w*channels] ints -> raw rows with filter byte 0."""
    out = bytearray()
    for row in samples:
        out.append(0)
        if depth == 16:
            out += row.astype(">u2").tobytes()
        elif depth == 8:
            out += row.astype(np.uint8).tobytes()
        else:
            per = 8 // depth
            padded = np.zeros(-(-len(row) // per) * per, dtype=np.int64)
            padded[: len(row)] = row
            for k in range(0, len(padded), per):
                byte = 0
                for v in padded[k:k + per]:
                    byte = (byte << depth) | int(v)
                out.append(byte)
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, samples, depth, ctype, palette=None, interlace=False):
    """samples: uint array [h, w, channels]."""
    h, w, ch = samples.shape
    raw = b""
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                raw += _pack_rows(sub.reshape(sub.shape[0], -1), depth)
    else:
        raw = _pack_rows(samples.reshape(h, -1), depth)
    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, int(interlace)))
    if palette is not None:
        data += _chunk(b"PLTE", bytes(palette))
    data += _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


# ---- random content ----
def content(rng, h, w, ch, maxv=255):
    kind = rng.integers(0, 3)
    if kind == 0:  # noise: every clipping path of the filters
        return rng.integers(0, maxv + 1, (h, w, ch))
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * rng.uniform(0.5, 3) + y * rng.uniform(0.5, 3) + rng.uniform(0, maxv)) % (maxv + 1)
                     for _ in range(ch)], axis=-1)
    if kind == 1:  # gradients
        return base.astype(np.int64)
    block = rng.integers(1, 6)  # hard edges
    return (((x // block + y // block) % 2)[..., None] * maxv).repeat(ch, -1).astype(np.int64)


def size(rng):
    r = rng.uniform()
    if r < 0.1:
        return int(rng.integers(1, 4)), int(rng.integers(1, 300))
    if r < 0.2:
        return int(rng.integers(1, 300)), int(rng.integers(1, 4))
    return int(rng.integers(4, 260)), int(rng.integers(4, 260))


def write_image(rng, path_base, k):
    """One file in some mode; returns its path."""
    h, w = size(rng)
    kind = int(rng.integers(0, 16))
    if kind <= 5:  # PIL-written PNG
        mode = ["1", "L", "P", "LA", "RGB", "RGBA"][kind]
        if mode == "1":
            im = Image.fromarray(content(rng, h, w, 1)[..., 0] > 127)
        elif mode == "P":
            n = int(rng.integers(2, 257))
            im = Image.fromarray(rng.integers(0, 256, (h, w)).astype(np.uint8), "P")  # indices may pass the palette
            im.putpalette(rng.integers(0, 256, 3 * n).astype(np.uint8).tobytes())
        else:
            ch = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
            arr = content(rng, h, w, ch).astype(np.uint8)
            im = Image.fromarray(arr[..., 0] if ch == 1 else arr, mode)
        path = f"{path_base}.png"
        im.save(path, "PNG")
    elif kind == 6:  # 16-bit grey (PIL: mode I)
        path = f"{path_base}.png"
        write_png(path, content(rng, h, w, 1, 65535), 16, 0, interlace=bool(rng.integers(0, 2)))
    elif kind == 7:  # 16-bit RGB / RGBA / grey+alpha
        ctype = [2, 6, 4][int(rng.integers(0, 3))]
        ch = {2: 3, 6: 4, 4: 2}[ctype]
        path = f"{path_base}.png"
        write_png(path, content(rng, h, w, ch, 65535), 16, ctype, interlace=bool(rng.integers(0, 2)))
    elif kind == 8:  # 1/2/4-bit grey, interlaced or not
        depth = [1, 2, 4][int(rng.integers(0, 3))]
        path = f"{path_base}.png"
        write_png(path, content(rng, h, w, 1, (1 << depth) - 1), depth, 0, interlace=bool(rng.integers(0, 2)))
    elif kind == 9:  # 1/2/4/8-bit palette, short palette
        depth = [1, 2, 4, 8][int(rng.integers(0, 4))]
        n = int(rng.integers(1, (1 << depth) + 1))
        path = f"{path_base}.png"
        write_png(path, content(rng, h, w, 1, (1 << depth) - 1), depth, 3,
                  palette=rng.integers(0, 256, 3 * n).astype(np.uint8), interlace=bool(rng.integers(0, 2)))
    elif kind == 10:  # 8-bit RGB / RGBA / grey interlaced
        ctype = [0, 2, 6, 4][int(rng.integers(0, 4))]
        ch = {0: 1, 2: 3, 6: 4, 4: 2}[ctype]
        path = f"{path_base}.png"
        write_png(path, content(rng, h, w, ch), 8, ctype, interlace=True)
    elif kind <= 13:  # JPEG
        mode = ["L", "RGB", "CMYK"][kind - 11]
        ch = {"L": 1, "RGB": 3, "CMYK": 4}[mode]
        arr = content(rng, h, w, ch).astype(np.uint8)
        im = Image.fromarray(arr[..., 0] if ch == 1 else arr, mode)
        path = f"{path_base}.jpg"
        opts = dict(quality=int(rng.integers(30, 100)), progressive=bool(rng.integers(0, 2)))
        if mode == "RGB":
            opts["subsampling"] = int(rng.integers(0, 3))
        try:
            im.save(path, "JPEG", **opts)
        except OSError:  # PIL's progressive encoder can run out of buffer on wide images ("encoder error -2")
            opts["progressive"] = False
            im.save(path, "JPEG", **opts)
    else:  # WebP
        alpha = kind == 15
        arr = content(rng, h, w, 4 if alpha else 3).astype(np.uint8)
        im = Image.fromarray(arr, "RGBA" if alpha else "RGB")
        path = f"{path_base}.webp"
        lossless = bool(rng.integers(0, 2))
        im.save(path, "WEBP", lossless=lossless, quality=int(rng.integers(30, 100)))
    return path


def raw_image(rng, mode, h, w):
    if mode == "1":
        return Image.fromarray(content(rng, h, w, 1)[..., 0] > 127)
    if mode == "I":
        return Image.fromarray(content(rng, h, w, 1, 65535)[..., 0].astype(np.int32), "I")
    if mode == "P":
        im = Image.fromarray(rng.integers(0, 256, (h, w)).astype(np.uint8), "P")
        im.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())
        return im
    ch = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "CMYK": 4}[mode]
    arr = content(rng, h, w, ch).astype(np.uint8)
    return Image.fromarray(arr[..., 0] if ch == 1 else arr, mode)


def layout_bytes(im):
    if im.mode == "1":
        return (np.asarray(im).astype(np.uint8) * 255).tobytes()
    if im.mode == "I":
        return np.asarray(im).astype("<i4").tobytes()
    return np.asarray(im).tobytes()  # "P": the indices


def main():
    out, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    procs = [(14, 2, 3136, 12845056), (16, 2, 3136, 16777216), (14, 2, 3136, 28 * 28 * 12), (16, 2, 65536, 16777216)]
    for k in range(n):
        path = write_image(rng, os.path.join(out, f"img{k}"), k)
        im = Image.open(path)
        rgb = im.convert("RGB")
        with open(path + ".rgb", "wb") as f:
            f.write(rgb.tobytes())
        lines.append(f"decode {os.path.basename(path)} {im.mode} {im.width} {im.height}")
        r = rng.uniform()
        lf_max = 768 * 768 if r < 0.4 else int(rng.integers(200, 20000))
        lf_min = 32 * 32 if r < 0.7 else int(rng.integers(1000, 40000))
        lf_min = min(lf_min, lf_max)
        patch, merge, min_px, max_px = procs[int(rng.integers(0, len(procs)))]
        try:
            prep = prepare(path, lf_max, lf_min, patch, merge, min_px, max_px)
            ph, pw = prep.shape[:2]
            with open(path + ".prep", "wb") as f:
                f.write(prep.tobytes())
        except ValueError:
            ph = pw = 0
        lines.append(f"prep {os.path.basename(path)} {lf_max} {lf_min} {patch} {merge} {min_px} {max_px} {ph} {pw}")
    modes = ["1", "L", "P", "LA", "RGB", "RGBA", "CMYK", "I"]
    for k in range(n):
        mode = modes[k % len(modes)]
        h, w = size(rng)
        r = rng.uniform()
        if r < 0.3:  # downscale up to 12x
            oh, ow = max(1, int(h / rng.uniform(1, 12))), max(1, int(w / rng.uniform(1, 12)))
        elif r < 0.6:  # upscale up to 8x
            oh, ow = int(h * rng.uniform(1, 8)) + 1, int(w * rng.uniform(1, 8)) + 1
        elif r < 0.8:  # one axis only
            oh, ow = (h, int(rng.integers(1, 400))) if rng.uniform() < 0.5 else (int(rng.integers(1, 400)), w)
        else:
            oh, ow = int(rng.integers(1, 400)), int(rng.integers(1, 400))
        im = raw_image(rng, mode, h, w)
        name = f"raw{k}"
        with open(os.path.join(out, name), "wb") as f:
            f.write(layout_bytes(im))
        if mode == "P":
            with open(os.path.join(out, name + ".pal"), "wb") as f:
                f.write(bytes(im.getpalette()[:768]).ljust(768, b"\0"))
        res = im.resize((ow, oh))
        with open(os.path.join(out, name + ".out"), "wb") as f:
            f.write(layout_bytes(res))
        with open(os.path.join(out, name + ".rgb"), "wb") as f:
            f.write(res.convert("RGB").tobytes())
        lines.append(f"resize {name} {mode} {w} {h} {ow} {oh}")
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
