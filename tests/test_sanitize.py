"""The nbval sanitize rules (tests/nbval_sanitize.cfg), loaded and applied exactly as nbval 0.11
does it (`nbval.plugin.get_sanitize_patterns` reads the file line by line; `IPyNbCell.sanitize`
runs every rule, in file order, with `re.sub` on each text output of both the committed and the
re-run notebook), and tried on the text that would fool them: a rule that matches too much hides
a fact from the comparison, one that matches too little makes the check machine-dependent.
"""
from __future__ import annotations

import configparser
import hashlib
import json
import re
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
from nbval.plugin import IPyNbCell, get_sanitize_patterns

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
FIGURE = "<svg>FIGURE</svg>"


def nbval_patterns() -> OrderedDict:
    # As IPyNbFile.setup_sanitize_files does it.
    return OrderedDict(get_sanitize_patterns(SANITIZE.read_text()))


def sanitize(text: str) -> str:
    """nbval's own IPyNbCell.sanitize, on a stand-in for the cell that holds the patterns."""
    cell = SimpleNamespace(parent=SimpleNamespace(sanitize_patterns=nbval_patterns()))
    return IPyNbCell.sanitize(cell, text)


def svg(x: str = "67.113385", body: str = "") -> str:
    """A figure as matplotlib writes it (declaration, DOCTYPE, one path)."""
    return ('<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
            '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n'
            '  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
            '<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="460.8pt" height="345.6pt"'
            ' xmlns="http://www.w3.org/2000/svg" version="1.1">\n'
            f' <g id="patch_1">{body}\n  <path d="M {x} 34.563654 L 414.72 34.5" '
            'style="fill: #1f77b4"/>\n </g>\n</svg>\n')


# --- the file itself ------------------------------------------------------------------------


def test_nbval_reads_one_rule_per_section():
    """nbval's line-based reader silently drops a section whose `regex:` and `replace:` lines
    are not adjacent (or are spelled `regex =`): every section must reach nbval."""
    sections = configparser.ConfigParser(interpolation=None)
    sections.read(SANITIZE)
    patterns = get_sanitize_patterns(SANITIZE.read_text())
    assert len(patterns) == len(sections.sections()) > 0
    assert [p for p, _ in patterns] == [sections[s]["regex"] for s in sections.sections()]
    assert len(nbval_patterns()) == len(patterns), "two sections with the same regex"
    for regex, replace in patterns:
        re.compile(regex)
        assert regex == regex.strip() and replace == replace.strip(), (
            f"trailing space in {regex!r} -> {replace!r}: nbval keeps it as part of the rule")


def test_no_rule_for_bare_hex_runs():
    """A printed hash (md5, sha256) is a fact: no rule may hide it (widget views, which hold
    32-digit model ids, are never compared by nbval)."""
    for digest in (hashlib.md5(b"x").hexdigest(), hashlib.sha256(b"x").hexdigest()):
        text = f"split checksum {digest}\n"
        assert sanitize(text) == text


# --- memory addresses -----------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("<object object at 0x7f3a2b1c9d80>", "<object object at 0xADDRESS>"),
    ("<function f at 0x00007FF6A1B2C3D4>", "<function f at 0xADDRESS>"),  # Windows spelling
    ("(0x55d5c0a1b2c3, 0x55d5c0a1b2d0)", "(0xADDRESS, 0xADDRESS)"),
])
def test_memory_address_is_replaced(text, expected):
    assert sanitize(text) == expected


@pytest.mark.parametrize("text", [
    "a 10x1000000 table",            # a size: "0x1000000" sits inside a longer number
    "ratio 20x123456 of the two",
    "key 0x" + "ab" * 20,            # a 40-digit hex hash is not an address
    "id a0x1234567",                 # inside a word
    "0x1f2e",                        # too short to be an address: a small hex number
])
def test_memory_address_leaves_other_hex_alone(text):
    assert sanitize(text) == text


# --- UUIDs ----------------------------------------------------------------------------------


def test_uuid_is_replaced_as_a_whole_word_only():
    assert sanitize("run 123e4567-e89b-12d3-a456-426614174000 done") == "run UUID done"
    longer = "123e4567-e89b-12d3-a456-4266141740001"  # 13 digits in the last group
    assert sanitize(longer) == longer
    assert sanitize("x123e4567-e89b-12d3-a456-426614174000") == "x123e4567-e89b-12d3-a456-426614174000"


# --- figures --------------------------------------------------------------------------------


def test_svg_document_is_replaced_whole():
    assert sanitize(svg()) == FIGURE
    assert sanitize(svg("67.113385")) == sanitize(svg("67.113384"))  # last digits of a point
    bare = '<svg xmlns="http://www.w3.org/2000/svg"><path d="M 1 2"/></svg>'
    assert sanitize(bare) == FIGURE


def test_text_between_two_figures_is_still_compared():
    """A greedy match (first <svg to last </svg>) would swallow the text between figures."""
    first = svg("1.0") + "loss 0.675 at step 400\n" + svg("2.0")
    second = svg("1.5") + "loss 0.676 at step 400\n" + svg("2.5")
    assert sanitize(first) == FIGURE + "loss 0.675 at step 400\n" + FIGURE
    assert sanitize(first) != sanitize(second)


def test_text_around_a_figure_is_still_compared():
    html = "<p>accuracy 0.99</p>\n" + svg() + "<p>3 of 4 heads</p>"
    assert sanitize(html) == "<p>accuracy 0.99</p>\n" + FIGURE + "<p>3 of 4 heads</p>"


@pytest.mark.parametrize("text", [
    "the <svg> element opens a drawing",                  # no closing tag
    "<svgfoo>1.25</svgfoo>",                              # another element
    '<?xml version="1.0"?>\n<data>0.125</data>',          # an XML declaration without an SVG
    "<Figure size 640x480 with 1 Axes>",                  # checked exactly
    "tensor([1.0000, 0.9999])  loss 0.675  colour #1f77b4",
])
def test_svg_rule_leaves_non_svg_text_alone(text):
    assert sanitize(text) == text


def test_two_documents_give_two_markers():
    assert sanitize(svg() + svg()) == FIGURE * 2


# --- the committed outputs ------------------------------------------------------------------


def committed_texts(path: Path):
    """(cell index, mime or stream name, text) for every text nbval sanitizes and compares."""
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                yield i, out["name"], "".join(out["text"])
            for mime, value in out.get("data", {}).items():
                value = "".join(value) if isinstance(value, list) else value
                if isinstance(value, str):
                    yield i, mime, value


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_committed_figures_are_masked_and_nothing_else_is(path):
    """Every committed SVG becomes exactly one marker (so no coordinate is compared), and no
    other committed output is changed by any rule (so no fact is hidden)."""
    for i, mime, text in committed_texts(path):
        if mime == "image/svg+xml":
            assert sanitize(text) == FIGURE, f"cell {i}: the SVG is not replaced whole"
        else:
            assert sanitize(text) == text, f"cell {i} ({mime}): a sanitize rule changes it"
