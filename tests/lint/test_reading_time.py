"""Each chapter states its reading time for both paths, as scripts/reading_time.py computes it,
and its first path stays short (issue: two ways through every chapter)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
spec = importlib.util.spec_from_file_location("reading_time", ROOT / "scripts" / "reading_time.py")
reading_time = importlib.util.module_from_spec(spec)
sys.modules["reading_time"] = reading_time  # dataclasses look their module up
spec.loader.exec_module(reading_time)

#: The first path's prose, at most (about 2,000 words: twenty minutes with its code).
MAX_FIRST_WORDS = 2200


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_the_opening_states_the_computed_reading_time(path):
    nb = json.loads(path.read_text())
    want = reading_time.count(nb).line()
    got = reading_time.stated(nb)
    assert got == want, (f"the opening cell should say\n  {want}\nit says\n  {got}\n"
                         f"(run: python scripts/reading_time.py --write {path.relative_to(ROOT)})")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_the_first_path_is_short_and_the_deeper_blocks_are_marked(path):
    nb = json.loads(path.read_text())
    c = reading_time.count(nb)
    assert c.first_words <= MAX_FIRST_WORDS, (
        f"the first path has {c.first_words} words of prose (at most {MAX_FIRST_WORDS}): move "
        "measurements, history and side-studies into 'Going deeper' blocks")
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        if reading_time.DEEPER_TAG in tags:
            assert cell["cell_type"] == "code" and "hide-cell" in tags, (
                f"cell {i}: a '{reading_time.DEEPER_TAG}' cell is a code cell tagged hide-cell too")


def test_the_counter_tells_the_paths_apart():
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# T\n\nOne two three.\n"]},
        {"cell_type": "code", "metadata": {}, "source": ["import x\n"]},  # the setup cell
        {"cell_type": "code", "metadata": {}, "source": ["a = 1\n# a comment\nb = 2\n"]},
        {"cell_type": "markdown", "metadata": {},
         "source": [":::{dropdown} Going deeper: more\nFour five six seven.\n:::\n\n"
                    "```{dropdown} Answer\nEight nine.\n```\nTen $x^2$ `code`.\n"]},
        {"cell_type": "code", "metadata": {"tags": ["going-deeper", "hide-cell"]}, "source": ["c = 3\n"]},
    ]}
    c = reading_time.count(nb)
    assert (c.first_words, c.first_code, c.deeper_words, c.deeper_code) == (7, 2, 7, 1)
