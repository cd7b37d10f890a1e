"""Lint: every code line of every chapter is at most 88 characters (`[tool.ruff] line-length` in
pyproject.toml), the width a code cell shows on the book's site without scrolling sideways.
(ruff's E501 holds the package's own code to the wider `pycodestyle.max-line-length`.)

Counted in characters, as written in the cell (magics and comments included; a notebook shows
them too).
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
LIMIT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]


def long_lines(path: Path) -> list[tuple[str, int, str]]:
    """("code cell N (id ...)", line number in the cell, line) for each line over LIMIT, N
    counted among the code cells as nbval counts them."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    return [(f"code cell {i} (id {cell.get('id', '?')})", n, line)
            for i, cell in enumerate(cells)
            for n, line in enumerate("".join(cell["source"]).splitlines(), start=1)
            if len(line) > LIMIT]


def test_limit_is_the_books():
    assert LIMIT == 88


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_code_lines_fit_the_page(path):
    found = long_lines(path)
    shown = "\n".join(f"  {i}, line {n} ({len(line)} chars): {line.strip()[:60]}"
                      for i, n, line in found[:10])
    assert not found, f"{len(found)} code lines longer than {LIMIT} characters:\n{shown}"
