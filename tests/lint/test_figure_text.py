"""scripts/figure_text.py measures what it says: figures drawn here with known font sizes and
positions, saved as SVG the way the chapters save theirs (glyphs as paths), give the sizes and
overlaps that the geometry implies."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import figure_text as ft  # noqa: E402


def svg(draw, size=(4, 3)) -> str:
    with matplotlib.rc_context({"svg.fonttype": "path"}):
        fig = plt.figure(figsize=size)
        draw(fig)
        out = io.StringIO()
        fig.savefig(out, format="svg")
        plt.close(fig)
    return out.getvalue()


def test_font_size_is_read_in_points_and_shown_in_pixels():
    source = svg(lambda f: (f.text(0.1, 0.2, "six", fontsize=6), f.text(0.1, 0.6, "nine",
                                                                          fontsize=9)))
    fig = ft.read_svg(source)
    sizes = {t.string: t.size for t in fig.texts}
    assert sizes == pytest.approx({"six": 6.0, "nine": 9.0}, rel=1e-3)
    assert fig.natural_px == pytest.approx(4 * 72 * 4 / 3)
    # 288 pt wide, shown at its natural 384 px: 6 pt is 8 px (small), 9 pt is 12 px.
    report = ft.check_figure(source, "f")
    assert report.shown_px == pytest.approx(384)
    assert [(s, round(px, 2)) for s, px in report.small] == [("six", 8.0)]


def test_a_wide_figure_is_shrunk_to_the_column():
    source = svg(lambda f: f.text(0.1, 0.5, "ten", fontsize=10), size=(20, 3))
    report = ft.check_figure(source, "f", column_px=816)
    assert report.shown_px == 816
    # 1440 pt shown at 816 px: 10 pt becomes 10 * 816 / 1440 = 5.67 px
    assert [(s, round(px, 2)) for s, px in report.small] == [("ten", 5.67)]
    assert ft.check_figure(source, "f", column_px=3000).small == []


def test_a_label_with_a_subscript_is_as_big_as_its_base():
    source = svg(lambda f: f.text(0.1, 0.5, "$W^Q_i$ weights", fontsize=12))
    (text,) = ft.read_svg(source).texts
    assert text.size == pytest.approx(12.0, rel=1e-3)


def test_rotated_text_keeps_its_size():
    source = svg(lambda f: f.text(0.5, 0.5, "turned", fontsize=8, rotation=45))
    (text,) = ft.read_svg(source).texts
    assert text.size == pytest.approx(8.0, rel=1e-3)


def test_overprinted_texts_are_found_and_separate_ones_are_not():
    def draw(f):
        f.text(0.1, 0.5, "first label", fontsize=12)
        f.text(0.15, 0.5, "second label", fontsize=12)     # starts inside the first
        f.text(0.1, 0.1, "alone", fontsize=12)
        f.text(0.6, 0.1, "far away", fontsize=12)
    report = ft.check_figure(svg(draw), "f")
    assert report.overlaps == [("first label", "second label")]


def test_tilted_neighbours_are_judged_by_their_letters():
    # Two 45-degree labels side by side: their upright boxes overlap, their letters do not.
    def draw(f):
        f.text(0.30, 0.5, "alpha", fontsize=10, rotation=45)
        f.text(0.36, 0.5, "gamma", fontsize=10, rotation=45)
    fig = ft.read_svg(svg(draw))
    a, b = fig.texts
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = a.box(), b.box()
    assert ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1   # upright boxes overlap
    assert ft.overlapping(fig.texts, 0.5) == []


def test_notebook_figures_and_exit_status(tmp_path, capsys):
    bad = svg(lambda f: f.text(0.1, 0.5, "tiny", fontsize=5))
    good = svg(lambda f: f.text(0.1, 0.5, "fine", fontsize=11))
    cells = [{"cell_type": "code", "id": "c1", "metadata": {}, "source": "", "execution_count": 1,
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"image/svg+xml": source.splitlines(True),
                                    "text/plain": ["<Figure>"]}}]}
             for source in (good, bad)]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    assert [w for w, _ in ft.notebook_figures(path)] == [
        "nb.ipynb: cell 0 (code cell 0, id c1), figure 1",
        "nb.ipynb: cell 1 (code cell 1, id c1), figure 1"]
    assert ft.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "cell 1 (code cell 1, id c1)" in out and "'tiny'" in out and "cell 0" not in out
    path.write_text(json.dumps({"cells": cells[:1], "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    assert ft.main([str(path)]) == 0
