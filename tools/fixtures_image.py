#!/usr/bin/env python3
"""Reference fixtures for the image input pipeline (tests/test_image.c).

Generates deterministic synthetic images in every supported format and
colour mode, runs transformers' Qwen2VLImageProcessor (the PIL "slow"
processor) on Image.open() of each file, and writes into
tests/fixtures/image/:

  <config>/preprocessor_config.json   the processor configs used
  in/<case>.<ext>                      the encoded inputs
  out/<case>.pv.f32                    full pixel_values, float32 LE, for
                                       the small cases
  out/<case>.resized.png               the uint8 image after PIL's bicubic
                                       resize, for the large cases (the
                                       normalisation is checked exactly by
                                       the small cases)
  cases.txt                            one line per case:
      name input config kind grid_t grid_h grid_w tokens resized_h resized_w
    kind is pv, rgb or err:<status>; errors are inputs that PIL or the
    processor reject too, with the status the C code must return.

The processor is called with input_data_format="channels_last": its default
guess takes an image 1 or 3 pixels high for channels-first and fails.
"""

import io
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np
from PIL import Image
from transformers import Qwen2VLImageProcessor

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "image")

CONFIGS = {
    # Qwen2-VL-7B-Instruct's published values
    "qwen2vl": {"min_pixels": 3136, "max_pixels": 12845056,
                "patch_size": 14, "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "rescale_factor": 0.00392156862745098,
                "resample": 3, "do_resize": True, "do_rescale": True,
                "do_normalize": True, "do_convert_rgb": True,
                "image_processor_type": "Qwen2VLImageProcessor"},
    # the same processor with a small max_pixels, for the big inputs
    "small": {"min_pixels": 3136, "max_pixels": 313600,
              "image_processor_type": "Qwen2VLImageProcessor"},
    # another patch size, merge size and normalisation
    "alt": {"min_pixels": 1024, "max_pixels": 65536, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": "Qwen2VLImageProcessor"},
}

# pixel_values are stored in full up to this many patches
PV_MAX_PATCHES = 24


def synth(w, h, seed, noise=24):
    """Gradients, a few hard-edged shapes, waves, a periodic texture and
    (for the small images) noise; big ones stay compressible."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    fx = x / max(w - 1, 1)
    fy = y / max(h - 1, 1)
    r = 255 * fx
    g = 255 * fy
    b = 127 + 100 * np.sin(6.28 * (fx * 3 + fy * 2))
    for _ in range(4):
        x0, x1 = sorted(rng.integers(0, w + 1, 2))
        y0, y1 = sorted(rng.integers(0, h + 1, 2))
        c = rng.integers(0, 256, 3)
        r[y0:y1, x0:x1] = c[0]
        g[y0:y1, x0:x1] = c[1]
        b[y0:y1, x0:x1] = c[2]
    img = np.stack([r, g, b], axis=-1)
    if noise:
        img += (((x.astype(int) // 3 + y.astype(int) // 2) % 2) * 40
                - 20)[..., None]
        img += rng.normal(0, noise, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    c = struct.pack(">I", len(data)) + kind + data
    return c + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def png_raw(w, h, depth, color, rows, interlace=False, extra=b""):
    """A PNG from unfiltered scanlines; rows(x0, dx, y) -> bytes of the
    pixels x0, x0 + dx, ... of row y (Adam7 passes when interlaced)."""
    raw = b""
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                  (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    else:
        passes = [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        if x0 >= w or y0 >= h:
            continue
        for y in range(y0, h, dy):
            raw += b"\0" + rows(x0, dx, y)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0,
                       1 if interlace else 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra
            + png_chunk(b"IDAT", zlib.compress(raw, 9))
            + png_chunk(b"IEND", b""))


def pack_bits(vals, depth):
    out = bytearray()
    per = 8 // depth
    for i in range(0, len(vals), per):
        byte = 0
        for j in range(per):
            v = int(vals[i + j]) if i + j < len(vals) else 0
            byte |= v << (8 - depth * (j + 1))
        out.append(byte)
    return bytes(out)


def png16(arr, color, interlace=False):
    """16-bit PNG of an array [h, w, c] of uint16."""
    h, w = arr.shape[:2]
    be = arr.astype(">u2")
    return png_raw(w, h, 16, color,
                   lambda x0, dx, y: be[y, x0::dx].tobytes(), interlace)


def encode(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def make_inputs():
    """(name, ext, bytes, config, status-if-error)."""
    cases = []

    def add(name, ext, data, config="qwen2vl", err=None):
        cases.append((name, ext, data, config, err))

    def rgb(w, h, s=1, **k):
        k.setdefault("noise", 24 if w * h <= 128 * 128 else 0)
        return Image.fromarray(synth(w, h, s, **k))

    # sizes, RGB PNG
    add("rgb_1x1", "png", encode(rgb(1, 1), "PNG"))
    add("rgb_2x2", "png", encode(rgb(2, 2), "PNG"))
    add("rgb_3x5", "png", encode(rgb(3, 5), "PNG"))
    add("rgb_5x3", "png", encode(rgb(5, 3), "PNG"))
    add("rgb_28x28", "png", encode(rgb(28, 28), "PNG"))
    add("rgb_57x31", "png", encode(rgb(57, 31, 2), "PNG"))
    add("rgb_100x37", "png", encode(rgb(100, 37, 3), "PNG"))
    add("rgb_42x70", "png", encode(rgb(42, 70, 4), "PNG"))   # round-half
    add("rgb_640x480", "png", encode(rgb(640, 480, 5), "PNG"))
    add("rgb_333x1000", "png", encode(rgb(333, 1000, 6), "PNG"))
    add("rgb_300x200_alt", "png", encode(rgb(300, 200, 7), "PNG"), "alt")
    add("rgb_77x50_alt", "png", encode(rgb(77, 50, 8), "PNG"), "alt")
    add("rgb_1200x900_small", "png", encode(rgb(1200, 900, 9), "PNG"),
        "small")
    # extreme aspect ratios (200 is the limit)
    add("wide_2000x10", "png", encode(rgb(2000, 10, 10), "PNG"))
    add("tall_12x2400", "png", encode(rgb(12, 2400, 11), "PNG"))
    add("wide_3000x15_small", "png", encode(rgb(3000, 15, 12), "PNG"),
        "small")
    add("wide_201x1", "png", encode(rgb(201, 1, 13), "PNG"),
        err="invalid")
    add("tall_5x1100", "png", encode(rgb(5, 1100, 14), "PNG"),
        err="invalid")
    # big inputs, smooth so that they compress
    big = Image.fromarray(synth(4000, 3000, 15, noise=0))
    add("big_4000x3000", "jpg", encode(big, "JPEG", quality=40), "small")
    add("big_3000x4000", "png",
        encode(Image.fromarray(synth(3000, 4000, 16, noise=0)), "PNG"),
        "small")
    add("jpeg_1120x700", "jpg",
        encode(rgb(1120, 700, 17), "JPEG", quality=75), "small")

    # JPEG colour modes and subsamplings
    add("jpeg_444_64x48", "jpg", encode(rgb(64, 48, 18), "JPEG",
                                        quality=95, subsampling=0))
    add("jpeg_420_61x47", "jpg", encode(rgb(61, 47, 19), "JPEG",
                                        quality=80, subsampling=2))
    add("jpeg_422_90x33", "jpg", encode(rgb(90, 33, 20), "JPEG",
                                        quality=85, subsampling=1))
    add("jpeg_prog_70x70", "jpg", encode(rgb(70, 70, 21), "JPEG",
                                         quality=85, progressive=True))
    add("jpeg_gray_50x40", "jpg",
        encode(rgb(50, 40, 22).convert("L"), "JPEG", quality=90))
    cmyk = Image.fromarray(np.concatenate(
        [synth(66, 44, 23), synth(66, 44, 24)[..., :1]], axis=-1), "CMYK")
    add("jpeg_cmyk_66x44", "jpg", encode(cmyk, "JPEG", quality=90))

    # PNG colour modes and depths
    add("png_gray_45x30", "png", encode(rgb(45, 30, 25).convert("L"), "PNG"))
    add("png_la_33x45", "png", encode(rgb(33, 45, 26).convert("LA"), "PNG"))
    a = synth(50, 70, 27)
    alpha = np.linspace(0, 255, 50 * 70).reshape(70, 50, 1).astype(np.uint8)
    add("png_rgba_50x70", "png",
        encode(Image.fromarray(np.concatenate([a, alpha], -1), "RGBA"),
               "PNG"))
    pal = rgb(64, 64, 28).quantize(37)
    add("png_palette_64x64", "png", encode(pal, "PNG"))
    add("png_palette_trns_40x40", "png",
        encode(rgb(40, 40, 29).quantize(16), "PNG", transparency=3))
    g16 = (synth(48, 36, 30)[..., 0].astype(np.uint16) * 3)[..., None]
    add("png_gray16_48x36", "png", png16(g16, 0))
    c16 = synth(40, 30, 31).astype(np.uint16) * 257 + 77
    add("png_rgb16_40x30", "png", png16(c16, 2))
    c16a = np.concatenate([c16, c16[..., :1]], -1)
    add("png_rgba16_40x30", "png", png16(c16a, 6))
    add("png_la16_40x30", "png", png16(c16[..., :2], 4))
    add("png_rgb_interlaced_37x29", "png",
        png16(synth(37, 29, 32).astype(np.uint16) * 256, 2, interlace=True))
    for depth in (1, 2, 4):
        v = (synth(30, 20, 33 + depth)[..., 1] >> (8 - depth))
        add("png_gray%d_30x20" % depth, "png",
            png_raw(30, 20, depth, 0,
                    lambda x0, dx, y, v=v, d=depth: pack_bits(v[y, x0::dx],
                                                              d)))

    # WebP
    add("webp_lossy_80x60", "webp", encode(rgb(80, 60, 40), "WEBP",
                                           quality=80))
    wa = np.concatenate([synth(64, 48, 41),
                         np.full((48, 64, 1), 128, np.uint8)], -1)
    wa[:10, :10, 3] = 0
    add("webp_lossless_rgba_64x48", "webp",
        encode(Image.fromarray(wa, "RGBA"), "WEBP", lossless=True,
               exact=True))
    add("webp_lossy_rgba_64x48", "webp",
        encode(Image.fromarray(wa, "RGBA"), "WEBP", quality=70))

    # GIF: first frame; palette, a transparent index, interlace, animation
    add("gif_100x80", "gif", encode(rgb(100, 80, 42).quantize(64), "GIF"))
    add("gif_interlaced_90x50", "gif",
        encode(rgb(90, 50, 43).quantize(200), "GIF", interlace=True))
    f0 = rgb(60, 40, 44).quantize(32)
    f1 = rgb(60, 40, 45).quantize(32)
    add("gif_anim_60x40", "gif",
        encode(f0, "GIF", save_all=True, append_images=[f1], duration=50,
               loop=0))
    add("gif_trns_50x50", "gif",
        encode(rgb(50, 50, 46).quantize(20), "GIF", transparency=5))
    add("gif_gray_40x30", "gif", encode(rgb(40, 30, 47).convert("L"), "GIF"))

    # malformed inputs
    good_png = encode(rgb(64, 64, 50), "PNG")
    good_jpg = encode(rgb(64, 64, 51), "JPEG")
    good_gif = encode(rgb(64, 64, 52).quantize(16), "GIF")
    good_webp = encode(rgb(64, 64, 53), "WEBP")
    add("bad_png_truncated", "png", good_png[:len(good_png) // 2],
        err="format")
    add("bad_png_header_only", "png", good_png[:33], err="format")
    crc = bytearray(good_png)
    crc[29] ^= 0xff                          # the IHDR CRC
    add("bad_png_crc", "png", bytes(crc), err="format")
    add("bad_jpeg_truncated", "jpg", good_jpg[:len(good_jpg) * 2 // 3],
        err="format")
    add("bad_jpeg_no_sof", "jpg", good_jpg[:20], err="format")
    add("bad_gif_truncated", "gif", good_gif[:len(good_gif) // 2],
        err="format")
    add("bad_webp_truncated", "webp", good_webp[:len(good_webp) // 2],
        err="format")
    add("bad_unknown_bmp", "bmp", encode(rgb(8, 8), "BMP"),
        err="unsupported")
    add("bad_empty", "png", b"", err="format")
    ihdr = lambda w, h: png_raw(w, h, 8, 2, lambda *a: b"")[:33]
    bomb = png_raw(1, 1, 8, 2, lambda *a: b"\0\0\0")
    add("bad_png_bomb_50000x50000", "png",
        ihdr(50000, 50000) + bomb[33:], err="limit")
    add("bad_png_zero_width", "png", ihdr(0, 10) + bomb[33:],
        err="invalid")
    add("bad_gif_zero", "gif", b"GIF89a\0\0\0\0\0\0\0;", err="invalid")
    return cases


def grid_line(name, fname, config, kind, grid, merge, rh, rw):
    t, h, w = grid
    return "%s %s %s %s %d %d %d %d %d %d" % (
        name, fname, config, kind, t, h, w, t * h * w // merge ** 2, rh, rw)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    for d in ("in", "out"):
        os.makedirs(os.path.join(OUT, d))
    procs = {}
    for name, cfg in CONFIGS.items():
        os.makedirs(os.path.join(OUT, name))
        with open(os.path.join(OUT, name, "preprocessor_config.json"),
                  "w") as f:
            json.dump(cfg, f, indent=2)
        procs[name] = Qwen2VLImageProcessor.from_pretrained(
            os.path.join(OUT, name))

    lines = []
    for name, ext, data, config, err in make_inputs():
        fname = "in/%s.%s" % (name, ext)
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        proc = procs[config]
        try:
            im = Image.open(io.BytesIO(data))
            res = proc(images=im, return_tensors="np",
                       input_data_format="channels_last")
        except Exception as e:               # PIL or the processor refused
            if err is None:
                raise
            lines.append("%s %s %s err:%s 0 0 0 0 0 0"
                         % (name, fname, config, err))
            print("%-28s rejected: %s" % (name, str(e)[:60]))
            continue
        if err == "unsupported":             # a format PIL has, we do not
            lines.append("%s %s %s err:%s 0 0 0 0 0 0"
                         % (name, fname, config, err))
            print("%-28s unsupported here" % name)
            continue
        if err is not None:
            sys.exit("%s: expected a rejection, transformers accepted it"
                     % name)
        grid = [int(v) for v in res["image_grid_thw"][0]]
        pv = res["pixel_values"].astype("<f4")
        ps = proc.patch_size
        rh, rw = grid[1] * ps, grid[2] * ps
        if grid[1] * grid[2] <= PV_MAX_PATCHES:
            pv.tofile(os.path.join(OUT, "out", name + ".pv.f32"))
            kind = "pv"
        else:
            # the resized uint8 image exactly as the processor made it
            rgbim = Image.open(io.BytesIO(data)).convert("RGB")
            arr = np.array(rgbim)
            if arr.shape[:2] != (rh, rw):
                resized = Image.fromarray(arr).resize(
                    (rw, rh), Image.Resampling.BICUBIC)
            else:
                resized = Image.fromarray(arr)
            resized.save(os.path.join(OUT, "out", name + ".resized.png"),
                         optimize=True)
            kind = "rgb"
            check = np.asarray(resized, np.float64) * proc.rescale_factor
            check = (check.astype(np.float32)
                     - np.array(proc.image_mean, np.float32)) \
                / np.array(proc.image_std, np.float32)
            assert abs(float(check.mean()) - float(pv.mean())) < 1e-4, name
        lines.append(grid_line(name, fname, config, kind, grid,
                               proc.merge_size, rh, rw))
        print("%-28s %s %s" % (name, kind, grid))

    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
