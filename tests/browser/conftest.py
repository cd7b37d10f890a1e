"""Fixtures for the browser tests: the built site served on 127.0.0.1, and headless Chromium.

These tests need the built site (`make book`), so plain `pytest` does not collect this folder
(see norecursedirs in pyproject.toml); `make browser-test` runs it. A missing build is an error,
never a skip.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from sitetools import CHROMIUM, launch_chromium, serve  # noqa: E402  (shared with scripts, benchmarks)

# The built site; BOOK_SITE=path tests another build (e.g. one made with --path-output).
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
# axe-core, for the accessibility audit: installed from the npm registry by `make book`
# (scripts/site_js/package.json) and injected into each page from this file. It is not part
# of the site.
AXE = ROOT / "scripts" / "site_js" / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture(scope="session")
def site_url():
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no built site: run `make book` first", pytrace=False)
    with serve(SITE) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium, or set CHROMIUM", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def screenshots():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture(scope="session")
def axe_script():
    if not AXE.is_file():
        pytest.fail(f"{AXE.relative_to(ROOT)} is missing: `make book` installs it with npm", pytrace=False)
    return AXE
