"""Which texts of a chapter's figures will be too small, or printed over each other, on the site.

    python scripts/figure_text.py chapters/05_multi_head_attention.ipynb [more.ipynb ...]
    python scripts/figure_text.py book/images/model_map.svg --width 420
    python scripts/figure_text.py chapters/*.ipynb --all       # every figure, with its sizes

It reads the SVG figures stored in a notebook's outputs (no site build, no kernel) and, for
every figure, reports

- **small** texts: those whose font size will be under 9 CSS pixels on the site in a window
  1280 pixels wide (`--min-px`), and
- **overlapping** texts: two texts whose letters cover each other.

How big a text is on the site. Matplotlib writes each text as glyph outlines in a group
`<g id="text_N">` whose first child is a comment holding the string; a glyph's size is 100 units
of its own coordinates times the scale of the transforms above it (matplotlib draws every glyph
at a font size of 100 and scales it). The SVG's `viewBox` is in points; the page shows the
figure as an image at its natural width (`width` in points, 4/3 of a CSS pixel each) unless the
column is narrower, in which case the browser shrinks it to the column (`max-width: 100%`). So

    font size on the page (px) = font size (SVG units) x shown width (px) / viewBox width

with shown width = min(natural width, COLUMN_PX). COLUMN_PX is the width the site gives a
cell's output at 1280 px (tests/browser/test_legibility.py measures it in the built site and
checks that it equals this number). A label with sub- or superscripts is as big as its largest
glyph (a subscript may be smaller, as in print).

When letters overlap. Each glyph's outline has a box (in the glyph's own frame, turned with the
text); two texts overlap when a glyph of one and a glyph of the other overlap by more than
`--overlap-px` (1 px) in both directions of either box (the separating-axis test on two
rectangles, so rotated tick labels are judged by their letters, not by a loose upright box).

Exit status: 1 if any figure has a small or overlapping text (so a chapter's author, or CI, can
use it as a check), 0 otherwise. `tests/browser/test_legibility.py` runs the same analysis on
every figure of the built site with the width each is really shown at.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: Width in CSS px of a code cell's output area on a chapter page in a 1280 px window (the site's
#: column for figures; measured in the built site by tests/browser/test_legibility.py).
COLUMN_PX = 816.0
#: Smallest font size a figure's text may have on the page, in CSS px.
MIN_PX = 9.0
#: Two glyphs closer than this (in both directions) are not counted as overlapping.
OVERLAP_PX = 1.0

SVG = "{http://www.w3.org/2000/svg}"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
PT_PX = 4.0 / 3.0
#: matplotlib draws every glyph outline at this font size and scales the group to the real one.
GLYPH_EM = 100.0

Matrix = tuple[float, float, float, float, float, float]   # SVG's (a b c d e f)
IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def multiply(m: Matrix, n: Matrix) -> Matrix:
    """m then applied after n: the matrix of `transform="m n"` (n acts first)."""
    a, b, c, d, e, f = m
    a2, b2, c2, d2, e2, f2 = n
    return (a * a2 + c * b2, b * a2 + d * b2, a * c2 + c * d2, b * c2 + d * d2,
            a * e2 + c * f2 + e, b * e2 + d * f2 + f)


def parse_transform(text: str | None) -> Matrix:
    m = IDENTITY
    for name, args in re.findall(r"(\w+)\s*\(([^)]*)\)", text or ""):
        v = [float(x) for x in re.split(r"[\s,]+", args.strip()) if x]
        if name == "translate":
            t = (1.0, 0.0, 0.0, 1.0, v[0], v[1] if len(v) > 1 else 0.0)
        elif name == "scale":
            t = (v[0], 0.0, 0.0, v[1] if len(v) > 1 else v[0], 0.0, 0.0)
        elif name == "rotate":
            r = math.radians(v[0])
            t = (math.cos(r), math.sin(r), -math.sin(r), math.cos(r), 0.0, 0.0)
            if len(v) == 3:
                t = multiply(multiply((1, 0, 0, 1, v[1], v[2]), t), (1, 0, 0, 1, -v[1], -v[2]))
        elif name == "matrix":
            t = tuple(v[:6])
        else:
            raise ValueError(f"unknown SVG transform {name!r}")
        m = multiply(m, t)
    return m


def apply(m: Matrix, x: float, y: float) -> tuple[float, float]:
    a, b, c, d, e, f = m
    return a * x + c * y + e, b * x + d * y + f


def path_box(d: str) -> tuple[float, float, float, float] | None:
    """(xmin, ymin, xmax, ymax) of the points of a path with absolute commands (matplotlib's)."""
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
    if len(numbers) < 2:
        return None
    xs, ys = numbers[0::2], numbers[1::2]
    return min(xs), min(ys), max(xs), max(ys)


Quad = tuple[tuple[float, float], ...]   # four corners, in order


@dataclass
class Text:
    string: str
    size: float = 0.0                  # font size in SVG user units (points)
    glyphs: list[Quad] = field(default_factory=list)

    def box(self) -> tuple[float, float, float, float]:
        xs = [x for q in self.glyphs for x, _ in q]
        ys = [y for q in self.glyphs for _, y in q]
        return min(xs), min(ys), max(xs), max(ys)


@dataclass
class Figure:
    width_pt: float                    # the viewBox's width (SVG user units)
    natural_px: float                  # the width the page gives it when the column allows
    texts: list[Text]


def _length_px(value: str | None, fallback: float) -> float:
    if not value:
        return fallback
    m = re.fullmatch(r"\s*([\d.]+)\s*(pt|px)?\s*", value)
    if not m:
        return fallback
    return float(m.group(1)) * (PT_PX if m.group(2) == "pt" else 1.0)


def read_svg(source: str) -> Figure:
    """The texts of a matplotlib SVG, each with its size and its glyphs' corners."""
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    parser.feed(source.encode() if isinstance(source, str) else source)
    root = parser.close()
    view = [float(x) for x in re.split(r"[\s,]+", root.get("viewBox", "").strip()) if x]
    width_units = view[2] if len(view) == 4 else float(re.sub(r"[a-z]+$", "", root.get("width")))
    natural = _length_px(root.get("width"), width_units)
    glyph_boxes: dict[str, tuple[tuple[float, float, float, float] | None, Matrix]] = {}
    for path in root.iter(SVG + "path"):
        if path.get("id"):
            glyph_boxes[path.get("id")] = (path_box(path.get("d", "")),
                                           parse_transform(path.get("transform")))
    texts: list[Text] = []

    def walk(node: ET.Element, m: Matrix, text: Text | None) -> None:
        m = multiply(m, parse_transform(node.get("transform")))
        if text is None and node.tag == SVG + "g" and re.fullmatch(r"text_\d+", node.get("id", "")):
            comments = [c.text for c in node if c.tag is ET.Comment]
            text = Text((comments[0] or "").strip() if comments else "")
            texts.append(text)
        if text is not None and node.tag == SVG + "use":
            ref = (node.get(XLINK_HREF) or node.get("href") or "").lstrip("#")
            box, own = glyph_boxes.get(ref, (None, IDENTITY))
            if box is not None:
                g = multiply(m, own)
                x0, y0, x1, y1 = box
                text.glyphs.append(tuple(apply(g, x, y) for x, y in
                                         ((x0, y0), (x1, y0), (x1, y1), (x0, y1))))
                a, b, c, d = m[:4]
                text.size = max(text.size, GLYPH_EM * math.sqrt(abs(a * d - b * c)))
            return
        for child in node:
            if child.tag is ET.Comment or child.tag == SVG + "defs":
                continue
            walk(child, m, text)

    walk(root, IDENTITY, None)
    return Figure(width_units, natural, [t for t in texts if t.glyphs])


def _axes(q: Quad) -> list[tuple[float, float]]:
    out = []
    for i in range(2):
        (x0, y0), (x1, y1) = q[i], q[i + 1]
        n = math.hypot(x1 - x0, y1 - y0) or 1.0
        out.append(((x1 - x0) / n, (y1 - y0) / n))
    return out


def overlap_depth(p: Quad, q: Quad) -> float:
    """How far two rectangles overlap along the axis where they overlap least (0 if apart)."""
    depth = math.inf
    for ax, ay in _axes(p) + _axes(q):
        pa = [x * ax + y * ay for x, y in p]
        qa = [x * ax + y * ay for x, y in q]
        depth = min(depth, min(max(pa), max(qa)) - max(min(pa), min(qa)))
        if depth <= 0:
            return 0.0
    return depth


def overlapping(texts: list[Text], tolerance: float) -> list[tuple[Text, Text]]:
    """Pairs of texts with letters overlapping by more than `tolerance` (SVG units)."""
    found = []
    boxes = [t.box() for t in texts]
    for i, (s, a) in enumerate(zip(texts, boxes)):
        for t, b in zip(texts[i + 1:], boxes[i + 1:]):
            if a[0] >= b[2] or b[0] >= a[2] or a[1] >= b[3] or b[1] >= a[3]:
                continue
            if any(overlap_depth(p, q) > tolerance for p in s.glyphs for q in t.glyphs):
                found.append((s, t))
    return found


@dataclass
class Report:
    where: str
    shown_px: float
    scale: float                         # CSS px per SVG unit
    small: list[tuple[str, float]]       # (text, font size in px)
    overlaps: list[tuple[str, str]]
    smallest: float

    def lines(self, every: bool = False) -> list[str]:
        if not (self.small or self.overlaps or every):
            return []
        out = [f"{self.where}: shown {self.shown_px:.0f} px wide, smallest text "
               f"{self.smallest:.1f} px"]
        counts: dict[tuple[str, str], int] = {}
        for s, px in self.small:
            key = (f"{px:.2f}", s)
            counts[key] = counts.get(key, 0) + 1
        out += [f"    small ({px} px): {s!r}" + (f" (x{n})" if n > 1 else "")
                for (px, s), n in sorted(counts.items(), key=lambda kv: float(kv[0][0]))]
        out += [f"    overlapping: {a!r} and {b!r}" for a, b in self.overlaps]
        return out


def check_figure(source: str, where: str, column_px: float = COLUMN_PX, min_px: float = MIN_PX,
                 overlap_px: float = OVERLAP_PX, shown_px: float | None = None) -> Report:
    """Analyse one SVG as the site shows it: `shown_px` wide if given, else at its natural
    width or the column's, whichever is smaller."""
    fig = read_svg(source)
    shown = shown_px if shown_px is not None else min(fig.natural_px, column_px)
    scale = shown / fig.width_pt
    small = [(t.string, t.size * scale) for t in fig.texts if t.size * scale < min_px]
    pairs = overlapping(fig.texts, overlap_px / scale)
    smallest = min((t.size * scale for t in fig.texts), default=math.inf)
    return Report(where, shown, scale, small, [(a.string, b.string) for a, b in pairs], smallest)


def notebook_figures(path: Path) -> list[tuple[str, str]]:
    """(where, SVG source) for every SVG in a notebook's outputs, where = "cell N (code cell
    M, id ...), figure k": N counts every cell, M only code cells, from 0 (the site's browser
    tests count code cells)."""
    nb = json.loads(path.read_text())
    found = []
    code = -1
    for i, cell in enumerate(nb["cells"]):
        code += cell["cell_type"] == "code"
        k = 0
        for output in cell.get("outputs", []):
            svg = output.get("data", {}).get("image/svg+xml")
            if svg is None:
                continue
            k += 1
            source = "".join(svg) if isinstance(svg, list) else svg
            found.append((f"{path.name}: cell {i} (code cell {code}, id {cell.get('id', '?')}), "
                          f"figure {k}",
                          source))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks (.ipynb) or SVG files")
    parser.add_argument("--column", type=float, default=COLUMN_PX,
                        help=f"the column's width in CSS px (default {COLUMN_PX:g})")
    parser.add_argument("--width", type=float, default=None,
                        help="the width an SVG file is shown at, in CSS px (e.g. a figure "
                             "directive's :width:); default: natural width or the column's")
    parser.add_argument("--min-px", type=float, default=MIN_PX)
    parser.add_argument("--overlap-px", type=float, default=OVERLAP_PX)
    parser.add_argument("--all", action="store_true", help="list every figure, not only "
                        "those with a problem")
    args = parser.parse_args(argv)
    problems = figures = 0
    for path in args.paths:
        items = (notebook_figures(path) if path.suffix == ".ipynb"
                 else [(path.name, path.read_text())])
        for where, source in items:
            figures += 1
            report = check_figure(source, where, args.column, args.min_px, args.overlap_px,
                                  args.width if path.suffix != ".ipynb" else None)
            problems += bool(report.small or report.overlaps)
            for line in report.lines(every=args.all):
                print(line)
    print(f"{figures} figures read, {problems} with small or overlapping texts "
          f"(under {args.min_px:g} px at a {args.column:g} px column)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
