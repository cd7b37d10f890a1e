"""The weight of each page of the built book, as a static host with gzip sends it (issue 14):
the HTML and every file a browser with an empty cache requests for it, counted in headless
Chromium, text files compressed with gzip -6 (benchmarks/run.py measures it the same way, with
the same code, for the performance report).

- test_heaviest_chapter_within_budget: no chapter page weighs more than 1.5 MB compressed.
- test_every_page_within_budget: nor does any other page.

Needs the built site (`make book`); `make browser-test` runs it.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from test_site import CHAPTERS, PAGES

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html")).resolve()
_spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
BUDGET = bench.PAGE_GZIP_BYTES


@pytest.fixture(scope="module")
def weights(browser, site_url):
    return {doc: bench.page_weight(browser, site_url, SITE, doc) for doc in PAGES}


def describe(row) -> str:
    return (f"{row['page']}: {row['gzip_bytes'] / 1e6:.2f} MB compressed ({row['total_bytes'] / 1e6:.1f} MB raw,"
            f" {row['files']} files); largest: " + ", ".join(f"{u} {n / 1e6:.2f} MB" for u, n in row["largest_gzip"]))


def test_heaviest_chapter_within_budget(weights):
    chapters = [weights[doc] for doc in CHAPTERS]
    assert chapters, "no chapter page was measured"
    heaviest = max(chapters, key=lambda r: r["gzip_bytes"])
    print(describe(heaviest))
    assert heaviest["html_bytes"] > 0, f"{heaviest['page']}: the page itself was not counted"
    assert heaviest["gzip_bytes"] <= BUDGET, f"over {BUDGET / 1e6:.1f} MB: {describe(heaviest)}"


def test_every_page_within_budget(weights):
    over = [describe(r) for r in weights.values() if r["gzip_bytes"] > BUDGET]
    assert not over, "pages over budget:\n" + "\n".join(over)
