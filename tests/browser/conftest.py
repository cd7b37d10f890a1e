"""Fixtures for the browser tests: the built site served on 127.0.0.1, and headless Chromium.

These tests need the built site (`make book`), so plain `pytest` does not collect this folder
(see norecursedirs in pyproject.toml); `make browser-test` runs it. A missing build is an error,
never a skip.
"""
from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The built site; BOOK_SITE=path tests another build (e.g. one made with --path-output).
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
# axe-core, for the accessibility audit: installed from the npm registry by `make book`
# (scripts/site_js/package.json) and injected into each page from this file. It is not part
# of the site.
AXE = ROOT / "scripts" / "site_js" / "node_modules" / "axe-core" / "axe.min.js"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # The browser dropping a connection it no longer needs (a page closed while a file was
        # still being sent) is not an error of the site; anything else is still printed.
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site_url():
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no built site: run `make book` first", pytrace=False)
    handler = functools.partial(QuietHandler, directory=str(SITE))
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
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
