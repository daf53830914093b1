"""Synthetic visual question answering on simple shapes: the task the
default model (models/default/) is trained on.

A scene is an image of 112 to 224 pixels a side (aspect ratio up to 1.3,
so that the image processor's smart_resize rounds, shrinks or grows
it) on a pale, varied background (flat, gradient or noisy), with one to
three shapes.  The image is divided into a 3x3 grid; each shape sits inside
its own cell, so its position is one of nine unambiguous names ("top left",
"top", ..., "center", ..., "bottom right").  In about a third of the
scenes with two or three shapes, two of them are the same (say two blue
triangles); otherwise no two shapes share both colour and kind.

Questions and their exact answers (lower case, no final period):

    colour    What colour is the circle?      -> red
              (asked only when the scene has exactly one circle)
              What colour are the triangles?  -> blue
              (asked only when it has two or more, all of one colour)
    shape     What shape is the red one?      -> circle
              (asked only when exactly one shape is red)
    count     How many shapes are there?      -> two
    position  Where is the red circle?        -> top left
              (asked only when there is one red circle)
    describe  Describe the image.             -> a red circle and a blue star
              (shapes in reading order: grid row by row, left to right;
              two alike are named together where the first one comes:
              two blue triangles and a red circle)

Everything is a pure function of the seed (Python's random.Random, PIL
drawing), so the end-to-end tests can regenerate the ground truth.

Importable:

    import shapes_dataset as sd
    scene = sd.make_scene(random.Random(1))
    for qtype, question, answer in sd.questions(scene): ...
    items = sd.eval_items(seed=2, count=150)
    sd.normalize_answer(" Red.\n") == "red"

Run as a script to write a few example images and their questions:

    python tools/shapes_dataset.py --seed 1 --count 8 --out /tmp/shapes

or to draw one picture to order (PNG, 160x160 unless --size says
otherwise) and print the questions it answers:

    python tools/shapes_dataset.py --out /tmp/two.png \
        --draw "blue triangle top left" "blue triangle bottom right"
"""

import argparse
import json
import math
import os
import random

import numpy as np
from PIL import Image, ImageDraw


COLOURS = {
    "red": (215, 35, 35),
    "green": (35, 155, 55),
    "blue": (35, 70, 215),
    "yellow": (235, 205, 25),
    "orange": (240, 125, 20),
    "purple": (135, 50, 175),
    "black": (25, 25, 25),
}

SHAPES = ["circle", "square", "triangle", "star", "diamond"]

ROWS = ["top", "", "bottom"]
COLS = ["left", "", "right"]

NUMBERS = ["zero", "one", "two", "three"]

# the share of scenes with two or three shapes where two are alike
TWIN_RATE = 0.35

QTYPES = ["colour", "shape", "count", "position", "describe"]

MIN_SIDE = 112
MAX_SIDE = 224
MAX_ASPECT = 1.3
SUPERSAMPLE = 3


def position_name(row, col):
    """The name of grid cell (row, col): "top left", "top", "center"..."""
    words = [w for w in (ROWS[row], COLS[col]) if w]
    return " ".join(words) if words else "center"


POSITIONS = [position_name(r, c) for r in range(3) for c in range(3)]


class Scene:
    """One image and what is in it: objects are dicts with keys shape,
    colour, row, col, cx, cy, size (pixels of the final image)."""

    def __init__(self, image, objects, background):
        self.image = image
        self.objects = objects
        self.background = background

    @property
    def width(self):
        return self.image.width

    @property
    def height(self):
        return self.image.height


def _background(rng, w, h):
    """A pale background: flat, a two-colour gradient, or flat with noise."""
    def pale():
        return tuple(rng.randint(200, 255) for _ in range(3))

    kind = rng.choice(["flat", "gradient", "noise"])
    a = pale()
    img = Image.new("RGB", (w, h), a)
    if kind == "gradient":
        b = pale()
        horizontal = rng.random() < 0.5
        n = w if horizontal else h
        draw = ImageDraw.Draw(img)
        for i in range(n):
            t = i / max(1, n - 1)
            c = tuple(int(round(a[k] + (b[k] - a[k]) * t)) for k in range(3))
            if horizontal:
                draw.line([(i, 0), (i, h - 1)], fill=c)
            else:
                draw.line([(0, i), (w - 1, i)], fill=c)
    elif kind == "noise":
        amp = rng.randint(6, 20)
        noise = np.random.default_rng(rng.getrandbits(32)).integers(
            -amp, amp + 1, size=(h, w, 1))
        px = np.clip(np.array(a, dtype=np.int32) + noise, 0, 255)
        img = Image.fromarray(px.astype(np.uint8), "RGB")
    return img, kind


def _polygon(shape, cx, cy, r, rot):
    """Vertices of a polygonal shape of circumradius r centred on (cx, cy)."""
    if shape == "square":
        n, start, radii = 4, math.pi / 4 + rot, [r]
    elif shape == "diamond":
        n, start, radii = 4, rot, [r]
    elif shape == "triangle":
        n, start, radii = 3, -math.pi / 2 + rot, [r]
    elif shape == "star":
        n, start, radii = 10, -math.pi / 2 + rot, [r, r * 0.45]
    else:
        raise ValueError("not a polygon: %s" % shape)
    pts = []
    for i in range(n):
        a = start + 2 * math.pi * i / n
        rr = radii[i % len(radii)]
        pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
    return pts


def _draw_shape(draw, shape, colour, cx, cy, size, rot):
    s = SUPERSAMPLE
    cx, cy, r = cx * s, cy * s, size * s / 2
    fill = COLOURS[colour]
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        # a square of side `size` has circumradius size / sqrt(2)
        draw.polygon(_polygon(shape, cx, cy, r * math.sqrt(2), rot),
                     fill=fill)
    else:
        draw.polygon(_polygon(shape, cx, cy, r * 1.1, rot), fill=fill)


def make_scene(rng, count=None):
    """A random scene drawn with `rng` (a random.Random)."""
    while True:
        w = rng.randint(MIN_SIDE, MAX_SIDE)
        h = rng.randint(MIN_SIDE, MAX_SIDE)
        if max(w, h) <= MAX_ASPECT * min(w, h):
            break
    if count is None:
        count = rng.randint(1, 3)

    cells = rng.sample(range(9), count)
    # the shape (by index) that repeats the first one, if any
    twin = rng.randrange(1, count) if (count > 1
                                       and rng.random() < TWIN_RATE) else 0
    pairs = set()
    objects = []
    for k, cell in enumerate(cells):
        if k and k == twin:
            shape, colour = objects[0]["shape"], objects[0]["colour"]
        else:
            while True:
                shape = rng.choice(SHAPES)
                colour = rng.choice(list(COLOURS))
                if (shape, colour) not in pairs:
                    pairs.add((shape, colour))
                    break
        row, col = divmod(cell, 3)
        cw, ch = w / 3, h / 3
        size = rng.uniform(0.7, 0.95) * min(cw, ch)
        cx = col * cw + cw / 2 + rng.uniform(-1, 1) * (cw - size) / 2
        cy = row * ch + ch / 2 + rng.uniform(-1, 1) * (ch - size) / 2
        rot = rng.uniform(-0.2, 0.2) if shape != "circle" else 0.0
        objects.append(dict(shape=shape, colour=colour, row=row, col=col,
                            cx=round(cx, 2), cy=round(cy, 2),
                            size=round(size, 2), rot=round(rot, 4)))

    bg, kind = _background(rng, w, h)
    img = _render(w, h, bg, objects)

    objects.sort(key=lambda o: (o["row"], o["col"]))
    return Scene(img, objects, kind)


def _render(w, h, background, objects):
    big = background.resize((w * SUPERSAMPLE, h * SUPERSAMPLE), Image.NEAREST)
    draw = ImageDraw.Draw(big)
    for o in objects:
        _draw_shape(draw, o["shape"], o["colour"], o["cx"], o["cy"],
                    o["size"], o["rot"])
    return big.resize((w, h), Image.BOX)


def parse_object(spec):
    """'blue triangle top left' -> ("blue", "triangle", row 0, col 0)."""
    words = spec.lower().split()
    if len(words) < 3 or words[0] not in COLOURS or words[1] not in SHAPES:
        raise ValueError("expected 'COLOUR SHAPE POSITION', got %r" % spec)
    where = " ".join(words[2:])
    if where not in POSITIONS:
        raise ValueError("position %r is none of: %s"
                         % (where, ", ".join(POSITIONS)))
    row, col = divmod(POSITIONS.index(where), 3)
    return words[0], words[1], row, col


def draw_scene(specs, width=160, height=160, background=(240, 240, 235)):
    """A scene drawn to order: specs like 'blue triangle top left', one
    shape per grid cell, each centred in its cell at 80 % of its shorter
    side, on a flat background."""
    objects, cells = [], set()
    for spec in specs:
        colour, shape, row, col = parse_object(spec)
        if (row, col) in cells:
            raise ValueError("two shapes in the %s cell"
                             % position_name(row, col))
        cells.add((row, col))
        cw, ch = width / 3, height / 3
        objects.append(dict(shape=shape, colour=colour, row=row, col=col,
                            cx=col * cw + cw / 2, cy=row * ch + ch / 2,
                            size=0.8 * min(cw, ch), rot=0.0))
    img = _render(width, height,
                  Image.new("RGB", (width, height), background), objects)
    objects.sort(key=lambda o: (o["row"], o["col"]))
    return Scene(img, objects, "flat")


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def plural(shape):
    return shape + "s"


def describe(objects):
    """'a red circle', 'a red circle and a blue star',
    'a red circle, an orange star and a green square',
    'two blue triangles and a red circle'."""
    groups = []
    for o in objects:
        key = (o["colour"], o["shape"])
        for g in groups:
            if g[0] == key:
                g[1] += 1
                break
        else:
            groups.append([key, 1])
    parts = [("%s %s %s" % (article(c), c, s)) if n == 1
             else ("%s %s %s" % (NUMBERS[n], c, plural(s)))
             for (c, s), n in groups]
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def questions(scene):
    """Every question the scene answers unambiguously, as
    (qtype, question, answer) tuples, in a fixed order."""
    objs = scene.objects
    out = []
    for shape in SHAPES:
        match = [o for o in objs if o["shape"] == shape]
        if len(match) == 1:
            out.append(("colour", "What colour is the %s?" % shape,
                        match[0]["colour"]))
        elif match and len({o["colour"] for o in match}) == 1:
            out.append(("colour", "What colour are the %s?" % plural(shape),
                        match[0]["colour"]))
    for colour in COLOURS:
        match = [o for o in objs if o["colour"] == colour]
        if len(match) == 1:
            out.append(("shape", "What shape is the %s one?" % colour,
                        match[0]["shape"]))
    out.append(("count", "How many shapes are there?", NUMBERS[len(objs)]))
    for o in objs:
        if sum(1 for p in objs if (p["colour"], p["shape"])
               == (o["colour"], o["shape"])) > 1:
            continue
        out.append(("position",
                    "Where is the %s %s?" % (o["colour"], o["shape"]),
                    position_name(o["row"], o["col"])))
    out.append(("describe", "Describe the image.", describe(objs)))
    return out


def eval_items(seed, count):
    """`count` held-out items: one scene and one question each, question
    types in turn (colour, shape, count, position, describe, colour...),
    the question picked at random among the scene's questions of that
    type."""
    rng = random.Random(seed)
    items = []
    while len(items) < count:
        qtype = QTYPES[len(items) % len(QTYPES)]
        scene = make_scene(rng)
        cands = [q for q in questions(scene) if q[0] == qtype]
        if not cands:
            continue
        t, q, a = rng.choice(cands)
        items.append(dict(scene=scene, qtype=t, question=q, answer=a))
    return items


def normalize_answer(text):
    """Lower case, surrounding white space and a final period removed."""
    t = text.strip().lower()
    while t.endswith("."):
        t = t[:-1].rstrip()
    return t


def corpus():
    """Every question and answer string the task can produce (for the
    tokenizer), in a fixed order."""
    lines = []
    for shape in SHAPES:
        lines.append("What colour is the %s?" % shape)
        lines.append("What colour are the %s?" % plural(shape))
    for colour in COLOURS:
        lines.append("What shape is the %s one?" % colour)
        for shape in SHAPES:
            lines.append("Where is the %s %s?" % (colour, shape))
            lines.append("%s %s %s" % (article(colour), colour, shape))
            lines.append("two %s %s" % (colour, plural(shape)))
    lines.append("How many shapes are there?")
    lines.append("Describe the image.")
    lines.extend(POSITIONS)
    lines.extend(NUMBERS)
    lines.extend(COLOURS)
    lines.extend(SHAPES)
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--out", required=True,
                    help="a folder; with --draw, the PNG file")
    ap.add_argument("--draw", nargs="+", metavar="'COLOUR SHAPE POSITION'",
                    help="draw these shapes, one per grid cell")
    ap.add_argument("--size", default="160x160", help="WxH, with --draw")
    args = ap.parse_args()

    if args.draw:
        w, h = (int(v) for v in args.size.lower().split("x"))
        try:
            scene = draw_scene(args.draw, w, h)
        except ValueError as e:
            ap.error(str(e))
        scene.image.save(args.out)
        for qtype, question, answer in questions(scene):
            print(json.dumps(dict(type=qtype, question=question,
                                  answer=answer)))
        return

    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    for i in range(args.count):
        scene = make_scene(rng)
        name = "%03d.png" % i
        scene.image.save(os.path.join(args.out, name))
        print(json.dumps(dict(image=name, width=scene.width,
                              height=scene.height,
                              questions=questions(scene))))


if __name__ == "__main__":
    main()
