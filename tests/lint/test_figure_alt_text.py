"""Lint: every figure in the chapters has alt text. A code cell whose outputs hold an image
(an `image/*` output, as a matplotlib SVG is) carries it in its metadata,
`"mystnb": {"image": {"alt": "..."}}`, which myst-nb puts on the <img> of the page: one or two
sentences saying what the figure shows and what to notice.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def draws_image(cell: dict) -> bool:
    return any(mime.startswith("image/")
               for out in cell.get("outputs", []) for mime in out.get("data", {}))


def alt_text(cell: dict) -> str:
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
    return alt.strip() if isinstance(alt, str) else ""


def figures_without_alt(path: Path) -> list[str]:
    """The cells that draw an image and have no alt text, as "code cell N (id ...)", N counted
    among the code cells as nbval counts them."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    return [f"code cell {i} (id {cell.get('id', '?')})" for i, cell in enumerate(cells)
            if draws_image(cell) and not alt_text(cell)]


def test_the_check_reads_mystnb_metadata():
    svg = {"output_type": "display_data", "data": {"image/svg+xml": "<svg/>", "text/plain": "x"}}
    drawn = {"cell_type": "code", "outputs": [svg], "metadata": {}}
    assert draws_image(drawn) and not alt_text(drawn)
    for alt in ("", "   ", None):
        drawn["metadata"] = {"mystnb": {"image": {"alt": alt}}}
        assert not alt_text(drawn)
    drawn["metadata"] = {"mystnb": {"image": {"alt": "Loss falls with steps."}}}
    assert alt_text(drawn) == "Loss falls with steps."
    assert not draws_image({"cell_type": "code", "outputs": [], "metadata": {}})


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_every_figure_has_alt_text(path):
    missing = figures_without_alt(path)
    assert not missing, (f"{len(missing)} code cells draw a figure without alt text "
                         f"(metadata.mystnb.image.alt): {', '.join(missing)}")
