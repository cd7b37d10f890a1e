"""The contract that makes committed notebook outputs verify on any machine (CONTRIBUTING.md,
"Committed outputs: what is compared, what is asserted"), checked on the notebooks as committed.

- Every chapter was run once, top to bottom, and stores no error.
- At most one output cell in ten is a measurement cell (tagged `nbval-ignore-output`), each such
  cell asserts its claim, and no cell is skipped.
- Figures are SVG, and the nbval sanitize rules replace an SVG (and only an SVG) by a marker.
- No timing or progress bar sits in an output that is compared.
"""
from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
MEASUREMENT = "nbval-ignore-output"


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append("".join(out["text"]))
        for key in ("text/plain", "text/html"):
            parts.append("".join(out.get("data", {}).get(key, "")))
    return "".join(parts)


def sanitize(text: str) -> str:
    """Apply tests/nbval_sanitize.cfg as nbval does (every section's regex, in order)."""
    config = configparser.ConfigParser()
    config.read(SANITIZE)
    for section in config.sections():
        text = re.sub(config[section]["regex"], config[section]["replace"], text)
    return text


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_run_once_top_to_bottom_without_errors(path):
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-execute the chapter: make notebooks NB=" + path.name
    errors = [o.get("ename") for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"stored errors: {errors}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_measurement_cells_are_few_and_assert_their_claim(path):
    cells = code_cells(path)
    with_output = [c for c in cells if c.get("outputs")]
    measured = [c for c in cells if MEASUREMENT in tags(c)]
    assert 10 * len(measured) <= len(with_output), (
        f"{len(measured)} of {len(with_output)} output cells are exempt from comparison; at most one in ten may be")
    for cell in measured:
        source = "".join(cell["source"])
        assert re.search(r"^\s*assert\b", source, re.M), f"a measurement cell asserts no claim:\n{source[:300]}"
    skipped = [c for c in cells if {"nbval-skip", "skip-execution"} & set(tags(c))]
    assert not skipped, "cells that nbval would skip: every cell must run"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_figures_are_svg(path):
    for cell in code_cells(path):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert "image/png" not in data and "image/jpeg" not in data, (
                "a bitmap figure: tl.setup() draws SVG (crisp on the site, checked by nbval as a figure)")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_no_timings_in_compared_outputs(path):
    timing = re.compile(r"\d\s*(it|step|steps)/s\b|\d+:\d\d<\d+:\d\d|\belapsed\b", re.I)
    for cell in code_cells(path):
        if MEASUREMENT in tags(cell):
            continue
        text = output_text(cell)
        assert not timing.search(text), f"a timing or progress bar in a compared output:\n{text[:300]}"


def test_sanitize_replaces_svg_figures_only():
    svg = ('<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
           '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
           '<svg xmlns="http://www.w3.org/2000/svg" width="460.8pt">\n<path d="M 67.113385 34.563654"/>\n</svg>\n')
    moved = svg.replace("67.113385", "67.113384")
    assert sanitize(svg) == sanitize(moved) == "<svg>FIGURE</svg>"
    # Printed numbers are facts: the sanitizer must leave them alone.
    text = "loss 0.675 at step 400; tensor([1.0000, 0.9999])"
    assert sanitize(text) == text
    assert sanitize("object at 0x7f3a2b1c9d80") == "object at 0xADDRESS"
