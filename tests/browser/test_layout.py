"""The layout sphinx-book-theme intends, at a desktop width (1280 px) and a phone's (390 px):

- test_one_search_box: one search control is displayed (the left sidebar's box at 1280 px, the
  article header's search icon at 390 px), and pydata-sphinx-theme's own header bar, which
  brought a second "Search Ctrl+K" box, is not drawn (`navbar_persistent: []`, _config.yml);
- test_no_sideways_scroll: the page itself is no wider than the window, on every page (the
  widest elements are named when it is); at 1280 px the right-hand Contents stays inside the
  window too;
- test_contents_follow_the_reader: on a long chapter, the right-hand Contents highlights the
  section being read (the one whose heading is the last above a line 30% down the window,
  book/_ext/static/toc-highlight.js) while the reader scrolls down, in the middle of long
  sections, and back up, and it keeps a clicked entry highlighted;
- screenshots of the top of every page at both widths go to artifacts/screenshots/layout/.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]


PAGES = toc_pages()
CHAPTERS = [p for p in PAGES if (ROOT / f"{p}.ipynb").is_file()]

SEARCH_CONTROLS = """() => [...document.querySelectorAll(
    '.search-button-field, .search-button, .bd-search, form[role=search], input[type=search]')]
  .filter(el => !el.closest('.search-button__wrapper, #pst-search-dialog, dialog'))
  .filter(el => {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
  })
  .map(el => el.className || el.tagName)"""

HEADER_HEIGHT = """() => {
  const h = document.querySelector('#pst-header');
  return h ? h.getBoundingClientRect().height : 0;
}"""

OVERFLOW = """(width) => {
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 0.5) continue;
    // Only what makes the page scroll: skip what an ancestor clips or scrolls.
    // (A drawer held off screen with position: fixed, such as the phone's Contents, does not.)
    let clipped = getComputedStyle(el).position === 'fixed';
    for (let p = el.parentElement; p && p !== document.body && !clipped; p = p.parentElement) {
      const s = getComputedStyle(p);
      clipped = s.position === 'fixed' ||
        (s.overflowX !== 'visible' && p.getBoundingClientRect().right <= width + 0.5);
    }
    if (!clipped) wide.push(`${el.tagName.toLowerCase()}.${[...el.classList].join('.')} ` +
                            `(right edge ${Math.round(r.right)} px)`);
  }
  return {scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 8)};
}"""

# [heading id, TOC link href] of every Contents entry, and which one is highlighted now.
TOC_STATE = """() => {
  const links = [...document.querySelectorAll('#pst-page-toc-nav a[href^="#"]')];
  return {links: links.map(a => a.getAttribute('href')),
          active: links.filter(a => a.classList.contains('active')).map(a => a.getAttribute('href'))};
}"""

# Where each Contents entry's heading is, in page coordinates.
HEADING_TOPS = """() => [...document.querySelectorAll('#pst-page-toc-nav a[href^="#"]')].map(a => {
  const target = document.getElementById(decodeURIComponent(a.hash.slice(1)));
  const h = target && (target.querySelector('h1,h2,h3,h4,h5,h6') || target);
  return [a.getAttribute('href'), h ? h.getBoundingClientRect().top + window.scrollY : null];
})"""


@pytest.fixture(scope="module", params=list(WIDTHS))
def sized_page(request, browser):
    width, height = WIDTHS[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    yield request.param, width, page
    context.close()


def open_doc(page, site_url, doc):
    page.goto(f"{site_url}{doc}.html", wait_until="networkidle")
    return page


@pytest.mark.parametrize("doc", PAGES)
def test_one_search_box(doc, sized_page, site_url, screenshots):
    name, width, page = sized_page
    open_doc(page, site_url, doc)
    folder = screenshots / "layout"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{doc.replace('/', '__')}_{width}.png"))
    controls = page.evaluate(SEARCH_CONTROLS)
    assert len(controls) == 1, f"{doc} at {width} px: {len(controls)} search controls: {controls}"
    assert page.evaluate(HEADER_HEIGHT) == 0, (
        f"{doc} at {width} px: pydata-sphinx-theme's header bar is drawn")


@pytest.mark.parametrize("doc", PAGES)
def test_no_sideways_scroll(doc, sized_page, site_url):
    name, width, page = sized_page
    open_doc(page, site_url, doc)
    found = page.evaluate(OVERFLOW, width)
    assert found["scrollWidth"] <= width, (
        f"{doc} at {width} px: the page is {found['scrollWidth']} px wide; past the window's "
        "edge: " + "; ".join(found["wide"]))


def active_after_scroll(page, y: float) -> list[str]:
    page.evaluate("(y) => window.scrollTo(0, y)", y)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_timeout(100)
    return page.evaluate(TOC_STATE)["active"]


def expected_at(tops: list[tuple[str, float]], y: float, line: float) -> list[str]:
    above = [href for href, top in tops if top is not None and top - y <= line]
    return above[-1:]


def test_contents_follow_the_reader(browser, site_url):
    width, height = WIDTHS["desktop"]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    try:
        open_doc(page, site_url, CHAPTERS[0])
        page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        tops = sorted(page.evaluate(HEADING_TOPS), key=lambda t: t[1])
        assert len(tops) >= 4, "the first chapter's Contents should list several sections"
        line = 0.3 * height
        # The longest section: its middle is where the theme's own highlight went stale.
        gaps = [(b[1] - a[1], a, b) for a, b in zip(tops, tops[1:])]
        _, start, end = max(gaps)
        positions = [t[1] - 0.1 * height for _, t in zip(range(6), tops[1:])]
        positions += [(start[1] + end[1]) / 2 - line / 2, end[1] - 0.05 * height]
        # ... and back up, into earlier sections again.
        positions += [tops[2][1] + 50 - line, tops[1][1] + 10 - line, 0]
        problems = []
        for y in positions:
            y = max(0.0, y)
            actual_y = page.evaluate("(y) => (window.scrollTo(0, y), window.scrollY)", y)
            got = active_after_scroll(page, actual_y)
            want = expected_at(tops, actual_y, line)
            if got != want:
                problems.append(f"scrolled to {actual_y:.0f} px: highlighted {got}, reading {want}")
        # A click on an entry near the end keeps that entry highlighted.
        last = tops[-1][0]
        page.click(f'#pst-page-toc-nav a[href="{last}"]')
        page.wait_for_timeout(300)
        clicked = page.evaluate(TOC_STATE)["active"]
        if clicked != [last]:
            problems.append(f"clicked {last}: highlighted {clicked}")
        assert not problems, "the Contents highlight the wrong section:\n" + "\n".join(problems)
    finally:
        context.close()
