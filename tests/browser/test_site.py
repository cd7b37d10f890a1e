"""Every page of the built book, loaded in headless Chromium from a server on 127.0.0.1.

For each page listed in _toc.yml: no console error, no failed request, no request to any other
host, maths typeset by the site's own MathJax (no raw TeX left in the text), every image
loaded and described, every saved widget rendered. A full-page screenshot of each page is saved
in artifacts/screenshots/ to look at.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [entry["file"] for entry in part.get("chapters", [])]
    return pages


PAGES = toc_pages()
# TeX that MathJax should have replaced; looked for in the text outside code.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\frac|\\sqrt|\\mathrm")

VISIBLE_PROSE = """() => {
  const main = document.querySelector("main") || document.body;
  const copy = main.cloneNode(true);
  copy.querySelectorAll("pre, code, .highlight, script, style, mjx-container").forEach(e => e.remove());
  return copy.textContent;
}"""

IMAGES = """async () => {
  const out = [];
  for (const img of document.querySelectorAll("img")) {
    try { await img.decode(); } catch (e) {}
    out.push({src: img.getAttribute("src"), width: img.naturalWidth, alt: img.getAttribute("alt")});
  }
  return out;
}"""


@pytest.fixture
def visit(browser, site_url):
    """Open a page and record what it asked for and what went wrong while loading it."""
    contexts = []

    def _visit(path: str):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        log = {"errors": [], "failed": [], "foreign": []}

        def on_route(route):
            url = route.request.url
            if url.startswith(site_url) or url.startswith(("data:", "blob:")):
                route.continue_()
            else:
                log["foreign"].append(url)
                route.abort()

        page.route("**/*", on_route)
        page.on("console", lambda m: m.type == "error" and log["errors"].append(f"console: {m.text}"))
        page.on("pageerror", lambda e: log["errors"].append(f"page error: {e}"))
        page.on("requestfailed", lambda r: log["failed"].append(f"{r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and log["failed"].append(f"{r.url} (HTTP {r.status})"))
        page.goto(site_url + path, wait_until="networkidle")
        return page, log

    yield _visit
    for context in contexts:
        context.close()


def test_index_leads_to_intro(visit):
    page, log = visit("index.html")
    page.wait_for_url(re.compile(r"book/intro\.html$"))
    assert not log["errors"] and not log["failed"] and not log["foreign"], log


@pytest.mark.parametrize("doc", PAGES)
def test_page(doc, visit, screenshots):
    page, log = visit(f"{doc}.html")

    # Maths: wherever Sphinx left a math node, the site's MathJax must have typeset it.
    n_math = page.locator(".math").count()
    if n_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        typeset = page.locator("mjx-container").count()
        assert typeset >= n_math, f"{typeset} of {n_math} formulas typeset"
    raw = RAW_TEX.findall(page.evaluate(VISIBLE_PROSE))
    assert not raw, f"raw TeX left in the page: {raw[:5]}"

    # Saved widgets: each view in the page's saved state is rendered by the HTML manager.
    n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        page.wait_for_function(
            f"() => document.querySelectorAll('.widget-subarea > .lm-Widget').length >= {n_views}",
            timeout=15_000,
        )

    for img in page.evaluate(IMAGES):
        assert img["width"] > 0, f"image did not load: {img['src']}"
        assert (img["alt"] or "").strip(), f"image without alt text: {img['src']}"

    page.screenshot(path=str(screenshots / (doc.replace("/", "__") + ".png")), full_page=True)
    assert not log["foreign"], f"requests to other hosts: {log['foreign']}"
    assert not log["failed"], f"failed requests: {log['failed']}"
    assert not log["errors"], f"errors: {log['errors']}"
