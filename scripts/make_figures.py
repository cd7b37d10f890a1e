"""Draw the book's figures that live outside the notebooks (pages in book/), with transformer_lib.

    python scripts/make_figures.py     # writes book/images/model_map.svg

Re-run it after changing `transformer_lib.book.diagrams`; commit the files it writes.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from transformer_lib import book  # noqa: E402
from transformer_lib.book import diagrams  # noqa: E402

IMAGES = Path(__file__).resolve().parent.parent / "book" / "images"


def main() -> None:
    book.setup(seed=0)
    ax = diagrams.model_map("all")
    path = IMAGES / "model_map.svg"
    ax.figure.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
    print(f"wrote {path.relative_to(IMAGES.parent.parent)}")


if __name__ == "__main__":
    main()
