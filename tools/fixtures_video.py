"""Video references for the tiny Qwen2-VL and Qwen2.5-VL checkpoints.

Reads the checkpoints tools/fixtures_models.py wrote to
tests/fixtures/models and writes tests/fixtures/video/:

- t/data/video-h264.mp4, t/data/video-vp9.webm: two small video files
  (PyAV's encoders; the webm's 16-byte segment UID is random, the rest
  of both files the same every run), and <name>_frames.npy, the frames fps 2 samples from
  each as PyAV decodes them to RGB24; in/, links to the files (the
  seed corpus of fuzz/fuzz_video.c);
- resize_<k>_in.npy, resize_<k>_out.npy: random RGB images and what
  torchvision's resize (bicubic, antialias, on uint8, as the torch video
  processors call it) makes of them, up and down, six sizes;
- sample.npy: Qwen2VLVideoProcessor.sample_frames' indices for a table
  of (frames, source fps, requested fps, max frames) rows;
- frames_<k>.npy: the decoded RGB frames of video k ([n, h, w, 3], the
  uint8 values stored as int32),
  pixel_values_<k>.npy: the video processor's pixel_values_videos of
  them; image_pixel_values.npy: an image's pixel_values;
- <model>/ref/<case>/: media.npy, the prompt's images and videos in order
  (-1: the image, k: video k), grid_thw.npy of each,
  second_per_grid_t.npy (Qwen2.5-VL's, 0 for images), the input ids with
  <|video_pad|> expanded as the processor does, get_rope_index's
  positions, the last logits and a 32-token greedy continuation, in
  float32;
- qwen3vl-f32/ref/video1/ and qwen3vl_pixel_values.npy: the same for
  Qwen3-VL (its video processor, patch 16), a video written as one
  <|vision_start|> block a temporal patch, each after its timestamp.

`fixtures_video.py qwen3vl` writes only what Qwen3-VL's processor makes
(Qwen3VLVideoProcessor, Qwen3VLProcessor), leaving the rest as it is:

- t/data/video-64x48.mp4: 20 frames of 64x48 at 8 frames a second
  (H.264; Qwen3-VL's resize wants 32 pixels a side, more than the other
  files have);
- qwen3vl/sample.npy: Qwen3VLVideoProcessor.sample_frames for the rows
  of SAMPLES; qwen3vl/resize.npy: its smart_resize (frames, height,
  width, shortest_edge, longest_edge, resized height, width);
  qwen3vl/timestamps.txt: "total sampled fps" and the video's text as
  Qwen3VLProcessor writes it (_calculate_timestamps, "<t seconds>"
  before each temporal patch's block);
- qwen3vl/file_pixel_values.npy and file_grid.npy: the processor's
  pixel_values_videos and video_grid_thw of video-64x48.mp4's frames
  (PyAV's RGB24), sampled at fps 2 with the file's metadata, with
  tests/fixtures/serving-qwen3vl/video_preprocessor_config.json, which
  it writes (Qwen3-VL's published sizes);
- tests/fixtures/serving-qwen3vl/ref/video1, image_video, video1_fps4:
  a chat with the video (and a picture before it; at fps 4, vLLM's
  mm_processor_kwargs), the prompt ids of the whole processor
  (template, both processors, the timestamps, the pads) and 8 greedy
  tokens of whole forwards, as t/097-video-qwen3vl.t expects.

The processor is transformers 4.57.6's, torch-based: frames resized by
torchvision's antialiased bicubic and normalised in float32 with the mean
and std scaled by 255.  Deterministic (fixed seeds).
"""

import json
import os
import shutil
import sys

import av
import numpy as np
import torch
from transformers import (Qwen2VLForConditionalGeneration,
                          Qwen2_5_VLForConditionalGeneration,
                          Qwen3VLForConditionalGeneration)
from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
    Qwen3VLVideoProcessor)
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    Qwen2VLImageProcessor)
from transformers.models.qwen2_vl.video_processing_qwen2_vl import (
    Qwen2VLVideoProcessor)
from transformers.video_utils import VideoMetadata

MODELS_DIR = os.path.join("tests", "fixtures", "models")
OUT = os.path.join("tests", "fixtures", "video")

from fixtures_models import (IM_END, IM_START, IMAGE_PAD, N_NEW,
                             VIDEO_PAD, VISION_END, VISION_START)

MODELS = [
    ("qwen2vl-f32", Qwen2VLForConditionalGeneration),
    ("qwen25vl-f32", Qwen2_5_VLForConditionalGeneration),
]

# (frames, height, width): 3 frames are padded to 4 by the last one
VIDEOS = [(3, 40, 60), (4, 56, 30)]

# (total frames, source fps, requested fps, max_frames)
SAMPLES = [(10, 2.0, 2.0, 768), (30, 30.0, 2.0, 768), (90, 30.0, 2.0, 768),
           (301, 29.97, 2.0, 768), (17, 10.0, 2.0, 768),
           (1000, 25.0, 2.0, 16), (7, 1.0, 2.0, 768), (250, 24.0, 1.0, 768),
           (3, 1.0, 2.0, 768), (121, 60.0, 4.0, 10)]


def processors():
    kw = dict(min_pixels=28 * 28, max_pixels=140 * 140, patch_size=14,
              temporal_patch_size=2, merge_size=2)
    return Qwen2VLImageProcessor(**kw), Qwen2VLVideoProcessor(**kw)


def make_frames(rng, n, h, w):
    f = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    # smooth a little in space and time so that resizing sees structure
    f = (f.astype(np.int32) + np.roll(f, 1, 1) + np.roll(f, 1, 0)) // 3
    return f.astype(np.uint8)


def video_inputs(vproc, frames):
    r = vproc(videos=[frames], return_tensors="pt", do_sample_frames=False)
    return (r["pixel_values_videos"].numpy().astype(np.float32),
            r["video_grid_thw"].numpy().astype(np.int64)[0])


def image_inputs(iproc, rng):
    img = rng.integers(0, 256, size=(28, 56, 3), dtype=np.uint8)
    r = iproc(images=[img], return_tensors="np")
    return (r["pixel_values"].astype(np.float32),
            r["image_grid_thw"].astype(np.int64)[0])


def prompt_ids(rng, media):
    ids = [IM_START] + list(rng.integers(0, 290, size=5))
    for kind, _, thw, _, _ in media:
        n = int(thw[0] * thw[1] * thw[2]) // 4
        pad = VIDEO_PAD if kind == "video" else IMAGE_PAD
        ids += [VISION_START] + [pad] * n + [VISION_END]
        ids += list(rng.integers(0, 290, size=4))
    ids += [IM_END, IM_START] + list(rng.integers(0, 290, size=3))
    return np.array(ids, dtype=np.int64)


def save(d, name, arr):
    np.save(os.path.join(d, name), np.ascontiguousarray(arr))


def reference(model, qwen25, ids, media, d):
    os.makedirs(d, exist_ok=True)
    kw = {}
    imgs = [m for m in media if m[0] == "image"]
    vids = [m for m in media if m[0] == "video"]
    if imgs:
        kw["pixel_values"] = torch.tensor(np.concatenate([m[1]
                                                          for m in imgs]))
        kw["image_grid_thw"] = torch.tensor(np.stack([m[2] for m in imgs]))
    if vids:
        kw["pixel_values_videos"] = torch.tensor(
            np.concatenate([m[1] for m in vids]))
        kw["video_grid_thw"] = torch.tensor(np.stack([m[2] for m in vids]))
    spg = [0.0 if m[0] == "image" else 2 / 2.0 for m in media]
    if qwen25 and vids:
        kw["second_per_grid_ts"] = torch.tensor(
            [s for m, s in zip(media, spg) if m[0] == "video"])

    save(d, "media.npy", np.array([m[4] for m in media], dtype=np.int32))
    save(d, "grid_thw.npy", np.stack([m[2] for m in media]).astype(np.int32))
    save(d, "second_per_grid_t.npy", np.array(spg, dtype=np.float32))
    save(d, "input_ids.npy", ids.astype(np.int32))

    input_ids = torch.tensor(ids)[None]
    with torch.no_grad():
        if qwen25:
            pos, _ = model.model.get_rope_index(
                input_ids, kw.get("image_grid_thw"),
                kw.get("video_grid_thw"), kw.get("second_per_grid_ts"))
        else:
            pos, _ = model.model.get_rope_index(
                input_ids, kw.get("image_grid_thw"),
                kw.get("video_grid_thw"))
        save(d, "position_ids.npy", pos[:, 0, :].numpy().astype(np.int32))

        out = model(input_ids=input_ids, **kw)
        logits = out.logits[0].float().numpy()
        save(d, "logits_last.npy", logits[-1])

        gen = model.generate(input_ids=input_ids, **kw, do_sample=False,
                             max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                             eos_token_id=None, pad_token_id=0)
        new = gen[0, len(ids):].numpy().astype(np.int32)
        assert len(new) == N_NEW
        save(d, "greedy.npy", new)

    top = np.sort(logits[-1])[::-1]
    return float(top[0] - top[1])


# torchvision's uint8 resize (the video processors'): (h, w) -> (oh, ow)
RESIZES = [(40, 61, 28, 56), (31, 47, 28, 84), (17, 23, 56, 28),
           (60, 19, 28, 28), (25, 90, 28, 56), (9, 70, 28, 56)]


def resizes():
    from torchvision.transforms.v2 import functional as F
    rng = np.random.default_rng(5)
    for k, (h, w, oh, ow) in enumerate(RESIZES):
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        t = torch.from_numpy(img).permute(2, 0, 1)[None]
        r = F.resize(t, [oh, ow], interpolation=F.InterpolationMode.BICUBIC,
                     antialias=True)[0].permute(1, 2, 0).numpy()
        save(OUT, "resize_%d_in.npy" % k, img.astype(np.int32))
        save(OUT, "resize_%d_out.npy" % k, r.astype(np.int32))


def sample_table(sample):
    """rows of (frames, source fps, fps, max frames, kept, indices) of
    sample(metadata, fps, max_frames), padded with -1"""
    rows = []
    for total, src_fps, fps, max_frames in SAMPLES:
        md = VideoMetadata(total_num_frames=total, fps=src_fps)
        idx = [int(i) for i in sample(md, fps, max_frames)]
        rows.append([total, int(round(src_fps * 1000)), int(fps * 1000),
                     max_frames, len(idx)] + idx)
    width = max(len(r) for r in rows)
    table = np.full((len(rows), width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table


def samples(vproc):
    np.save(os.path.join(OUT, "sample.npy"), sample_table(
        lambda md, fps, mf: vproc.sample_frames(
            md, temporal_patch_size=2, min_frames=4, max_frames=mf,
            fps=fps, num_frames=None)))


# the files: 12 frames of 32x24 at 6 frames a second (2 s), a square
# moving over a gradient; fps 2 samples frames 0, 3, 6 and 9
FILES = [("video-h264.mp4", "libx264", "mp4"),
         ("video-vp9.webm", "libvpx-vp9", "webm")]
FILE_FRAMES, FILE_W, FILE_H, FILE_FPS = 12, 32, 24, 6


def file_frames():
    y, x = np.mgrid[0:FILE_H, 0:FILE_W]
    out = []
    for i in range(FILE_FRAMES):
        f = np.zeros((FILE_H, FILE_W, 3), dtype=np.uint8)
        f[..., 0] = (x * 8) % 256
        f[..., 1] = (y * 10) % 256
        f[..., 2] = 64
        x0 = 2 + 2 * i
        f[8:16, x0:x0 + 8] = (250, 240, 20)
        out.append(f)
    return out


def encode(path, codec, fmt, frames, fps):
    """frames written to path, and read back as PyAV decodes them (RGB24
    by swscale, as the server converts them), with the stream's rate"""
    h, w = frames[0].shape[:2]
    with av.open(path, "w", format=fmt) as c:
        st = c.add_stream(codec, rate=fps)
        st.width, st.height, st.pix_fmt = w, h, "yuv420p"
        if codec == "libx264":
            st.options = {"preset": "ultrafast", "qp": "10"}
        for f in frames:
            for pkt in st.encode(av.VideoFrame.from_ndarray(f, "rgb24")):
                c.mux(pkt)
        for pkt in st.encode():
            c.mux(pkt)
    with av.open(path) as c:
        st = c.streams.video[0]
        rate = float(st.average_rate)
        rgb = [fr.to_ndarray(format="rgb24") for fr in c.decode(st)]
    return rgb, rate


def write_files():
    """The video files of t/data, and the mp4's frames as PyAV decodes
    them"""
    for name, codec, fmt in FILES:
        path = os.path.join("t", "data", name)
        rgb, _ = encode(path, codec, fmt, file_frames(), FILE_FPS)
        assert len(rgb) == FILE_FRAMES, (name, len(rgb))
        base = os.path.splitext(name)[0].replace("-", "_")
        np.save(os.path.join(OUT, base + "_frames.npy"),
                np.stack([rgb[i] for i in (0, 3, 6, 9)]).astype(np.int32))
        print("%s: %d bytes" % (path, os.path.getsize(path)))
        # the seed corpus of fuzz/fuzz_video.c (make fuzz)
        os.makedirs(os.path.join(OUT, "in"), exist_ok=True)
        os.symlink(os.path.join("..", "..", "..", "..", "t", "data", name),
                   os.path.join(OUT, "in", name))


def main():
    torch.manual_seed(0)
    iproc, vproc = processors()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    samples(vproc)
    resizes()
    write_files()

    rng = np.random.default_rng(3)
    videos = []
    for k, (n, h, w) in enumerate(VIDEOS):
        frames = make_frames(rng, n, h, w)
        pv, thw = video_inputs(vproc, frames)
        save(OUT, "frames_%d.npy" % k, frames.astype(np.int32))
        save(OUT, "pixel_values_%d.npy" % k, pv)
        videos.append(("video", pv, thw, frames, k))
    pv, thw = image_inputs(iproc, rng)
    save(OUT, "image_pixel_values.npy", pv)
    image = ("image", pv, thw, None, -1)

    for name, cls in MODELS:
        model = cls.from_pretrained(os.path.join(MODELS_DIR, name),
                                    dtype=torch.float32,
                                    attn_implementation="eager").eval()
        qwen25 = cls is Qwen2_5_VLForConditionalGeneration
        prng = np.random.default_rng(11)
        cases = [("video1", videos[:1]),
                 ("image_video", [image, videos[1]]),
                 ("video2", videos[::-1])]
        for case, media in cases:
            ids = prompt_ids(prng, media)
            gap = reference(model, qwen25, ids, media,
                            os.path.join(OUT, name, "ref", case))
            print("%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))

    qwen3vl_case(videos[0][3])


def qwen3vl_case(frames):
    """Qwen3-VL: one <|vision_start|> block a temporal patch, each after
    its timestamp's text (random text tokens stand for "<0.5 seconds>":
    the fixture's vocabulary has no digits), the vision tower over the
    whole video, get_rope_index giving each block t = 0"""
    name = "qwen3vl-f32"
    vproc = Qwen3VLVideoProcessor(size={"shortest_edge": 1024,
                                        "longest_edge": 25600 * 4},
                                  patch_size=16, temporal_patch_size=2,
                                  merge_size=2)
    r = vproc(videos=[frames], return_tensors="pt", do_sample_frames=False)
    pv = r["pixel_values_videos"].numpy().astype(np.float32)
    thw = r["video_grid_thw"].numpy().astype(np.int64)[0]
    t, h, w = (int(x) for x in thw)
    n = h * w // 4

    rng = np.random.default_rng(13)
    ids = [IM_START] + list(rng.integers(0, 290, size=5))
    for _ in range(t):
        ids += list(rng.integers(0, 290, size=3))
        ids += [VISION_START] + [VIDEO_PAD] * n + [VISION_END]
    ids += list(rng.integers(0, 290, size=4))
    ids += [IM_END, IM_START] + list(rng.integers(0, 290, size=3))
    ids = np.array(ids, dtype=np.int64)

    d = os.path.join(OUT, name, "ref", "video1")
    os.makedirs(d, exist_ok=True)
    save(OUT, "qwen3vl_pixel_values.npy", pv)
    save(d, "grid_thw.npy", thw[None].astype(np.int32))
    save(d, "input_ids.npy", ids.astype(np.int32))

    model = Qwen3VLForConditionalGeneration.from_pretrained(
        os.path.join(MODELS_DIR, name), dtype=torch.float32,
        attn_implementation="eager").eval()
    kw = dict(pixel_values_videos=torch.tensor(pv),
              video_grid_thw=torch.tensor(thw[None]))
    input_ids = torch.tensor(ids)[None]
    with torch.no_grad():
        pos, _ = model.model.get_rope_index(input_ids, None,
                                            kw["video_grid_thw"])
        save(d, "position_ids.npy", pos[:, 0, :].numpy().astype(np.int32))
        out = model(input_ids=input_ids, **kw)
        logits = out.logits[0].float().numpy()
        save(d, "logits_last.npy", logits[-1])
        # the greedy continuation by whole forwards: generate() (with its
        # KV cache) leaves it at token 4 here, where the whole forward of
        # its own tokens says otherwise by a margin of 0.17
        seq = input_ids
        for _ in range(N_NEW):
            nxt = model(input_ids=seq, **kw).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
        save(d, "greedy.npy", seq[0, len(ids):].numpy().astype(np.int32))
    top = np.sort(logits[-1])[::-1]
    print("%s/video1: %d tokens, grid %dx%dx%d, top-2 gap %.4f"
          % (name, len(ids), t, h, w, top[0] - top[1]))


QWEN3_FILE = os.path.join("t", "data", "video-64x48.mp4")
QWEN3_OUT = os.path.join(OUT, "qwen3vl")
SERVING = os.path.join("tests", "fixtures", "serving-qwen3vl")
QWEN3_FRAMES, QWEN3_W, QWEN3_H, QWEN3_FPS = 20, 64, 48, 8
N_SERVE = 8
# Qwen3-VL's video_preprocessor_config.json as published
QWEN3_SIZE = {"shortest_edge": 4096, "longest_edge": 25165824}
# (frames, height, width, shortest_edge, longest_edge)
QWEN3_RESIZES = [(4, 48, 64, 4096, 25165824), (5, 48, 64, 4096, 25165824),
                 (4, 24 * 4, 32, 4096, 25165824), (4, 40, 60, 65536, 1 << 24),
                 (30, 720, 1280, 4096, 25165824), (600, 720, 1280, 4096,
                                                   25165824),
                 (7, 100, 33, 16384, 98304), (2, 33, 6500, 4096, 1 << 22)]
# (total frames, source fps): timestamps at fps 2
QWEN3_STAMPS = [(20, 8.0), (12, 6.0), (301, 29.97), (17, 10.0), (7, 1.0),
                (1000, 25.0), (9, 2.0), (121, 60.0)]


def qwen3_file_frames():
    y, x = np.mgrid[0:QWEN3_H, 0:QWEN3_W]
    out = []
    for i in range(QWEN3_FRAMES):
        f = np.zeros((QWEN3_H, QWEN3_W, 3), dtype=np.uint8)
        f[..., 0] = (x * 4) % 256
        f[..., 1] = (y * 5) % 256
        f[..., 2] = (i * 12) % 256
        x0 = 2 + 2 * i
        f[10:26, x0:x0 + 12] = (250, 240, 20)
        out.append(f)
    return out


def qwen3_write_file():
    """video-64x48.mp4 and its frames as PyAV decodes them (RGB24)"""
    rgb, fps = encode(QWEN3_FILE, "libx264", "mp4", qwen3_file_frames(),
                      QWEN3_FPS)
    assert len(rgb) == QWEN3_FRAMES and fps == QWEN3_FPS, (len(rgb), fps)
    print("%s: %d bytes" % (QWEN3_FILE, os.path.getsize(QWEN3_FILE)))
    return np.stack(rgb)


def qwen3_video_processor():
    return Qwen3VLVideoProcessor(size=dict(QWEN3_SIZE), patch_size=16,
                                 temporal_patch_size=2, merge_size=2,
                                 image_mean=[0.5, 0.5, 0.5],
                                 image_std=[0.5, 0.5, 0.5])


def qwen3_text(total, fps, vproc):
    """the video's text as Qwen3VLProcessor writes it"""
    from transformers.models.qwen3_vl.processing_qwen3_vl import (
        Qwen3VLProcessor)
    md = VideoMetadata(total_num_frames=total, fps=fps)
    idx = vproc.sample_frames(md)
    n = len(idx)
    grid_t = (n + 1) // 2
    ts = Qwen3VLProcessor._calculate_timestamps(None, idx, fps, 2)
    return n, "".join("<%s seconds>" % format(ts[t], ".1f")
                      + VISION_BLOCK for t in range(grid_t))


VISION_BLOCK = "<|vision_start|><|video_pad|><|vision_end|>"


def qwen3_tables(vproc):
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
        smart_resize)
    save(QWEN3_OUT, "sample.npy", sample_table(
        lambda md, fps, mf: Qwen3VLVideoProcessor(
            max_frames=mf, fps=fps).sample_frames(md)))

    rows = []
    for n, h, w, lo, hi in QWEN3_RESIZES:
        rh, rw = smart_resize(n, h, w, temporal_factor=2, factor=32,
                              min_pixels=lo, max_pixels=hi)
        rows.append([n, h, w, lo, hi, rh, rw])
    save(QWEN3_OUT, "resize.npy", np.array(rows, dtype=np.int32))

    with open(os.path.join(QWEN3_OUT, "timestamps.txt"), "w") as f:
        for total, src_fps in QWEN3_STAMPS:
            n, text = qwen3_text(total, src_fps, vproc)
            f.write("%d %d %r\t%s\n" % (total, n, src_fps, text))


def qwen3_serving_cases(frames, vproc):
    """the serving fixture's video chats through Qwen3VLProcessor"""
    from PIL import Image
    from transformers import Qwen2TokenizerFast
    from transformers.models.qwen3_vl.processing_qwen3_vl import (
        Qwen3VLProcessor)
    from fixtures_serving_qwen3vl import token_bytes

    tok = Qwen2TokenizerFast.from_pretrained(SERVING)
    with open(os.path.join(SERVING, "chat_template.json")) as f:
        template = json.load(f)["chat_template"]
    iproc = Qwen2VLImageProcessor.from_pretrained(SERVING)
    proc = Qwen3VLProcessor(image_processor=iproc, tokenizer=tok,
                            video_processor=vproc, chat_template=template)
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        SERVING, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(17)
    img = rng.integers(0, 256, size=(60, 90, 3), dtype=np.uint8)

    for case, with_image, question, fps in [
            ("video1", False, "Describe the video.", None),
            ("image_video", True, "Compare the picture and the video.",
             None),
            ("video1_fps4", False, "Describe the video.", 4)]:
        d = os.path.join(SERVING, "ref", case)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        content = ([{"type": "image"}] if with_image else [])
        content += [{"type": "video"}, {"type": "text", "text": question}]
        prompt = proc.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False,
            add_generation_prompt=True)
        md = VideoMetadata(total_num_frames=len(frames), fps=QWEN3_FPS)
        kw = {} if fps is None else {"fps": fps}
        r = proc(text=[prompt], images=[img] if with_image else None,
                 videos=[frames], video_metadata=[md], do_sample_frames=True,
                 return_tensors="pt", **kw)
        kw = {k: r[k] for k in ("pixel_values", "image_grid_thw",
                                "pixel_values_videos", "video_grid_thw")
              if k in r}
        ids = r["input_ids"]
        print(tok.decode(ids[0]).replace("<|video_pad|>", "V")
              .replace("<|image_pad|>", "I"))
        with torch.no_grad():
            seq = ids
            gaps = []
            for _ in range(N_SERVE):
                lg = model(input_ids=seq, **kw).logits[0, -1]
                top = torch.topk(lg, 2).values
                gaps.append(float(top[0] - top[1]))
                seq = torch.cat([seq, lg.argmax().view(1, 1)], dim=1)
        new = seq[0, ids.shape[1]:]
        if with_image:
            Image.fromarray(img).save(os.path.join(d, "image_0.png"))
        with open(os.path.join(d, "question.txt"), "w") as f:
            f.write(question)
        with open(os.path.join(d, "expect.json"), "w") as f:
            json.dump({"prompt_ids": ids[0].tolist(),
                       "greedy_ids": new.tolist(),
                       "greedy_bytes": [token_bytes(tok, t)
                                        for t in new.tolist()],
                       "video_grid_thw": r["video_grid_thw"][0].tolist()}, f)
            f.write("\n")
        print("serving-qwen3vl/%s: %d prompt tokens, grid %s, answer %s, "
              "smallest top-2 gap %.4f"
              % (case, ids.shape[1], r["video_grid_thw"][0].tolist(),
                 new.tolist(), min(gaps)))


def qwen3vl_main():
    torch.manual_seed(0)
    if os.path.isdir(QWEN3_OUT):
        shutil.rmtree(QWEN3_OUT)
    os.makedirs(QWEN3_OUT)
    vproc = qwen3_video_processor()
    vproc.save_pretrained(SERVING)
    qwen3_tables(vproc)
    frames = qwen3_write_file()
    md = VideoMetadata(total_num_frames=len(frames), fps=QWEN3_FPS)
    r = vproc(videos=[frames], video_metadata=[md], do_sample_frames=True,
              return_tensors="pt")
    save(QWEN3_OUT, "file_pixel_values.npy",
         r["pixel_values_videos"].numpy().astype(np.float32))
    save(QWEN3_OUT, "file_grid.npy",
         r["video_grid_thw"].numpy().astype(np.int32)[0])
    qwen3_serving_cases(frames, vproc)


if __name__ == "__main__":
    if sys.argv[1:] == ["qwen3vl"]:
        qwen3vl_main()
    else:
        main()
