"""Code that fits the page (issue 20, point 6): in a 1280-pixel-wide window, as a reader's
browser shows the built book (headless Chromium, `make book` first; `make browser-test` runs
it), no code cell of any chapter scrolls sideways.

- test_no_code_cell_scrolls: on every chapter page, with every collapsed cell opened (the
  setup cell is folded away on the site), no code cell's input, nor any box around its code,
  is wider inside than it is on screen. The chapters keep their code lines within 88
  characters (tests/lint/test_code_width.py); this checks that the site shows them whole.
- test_88_characters_fit: the width the site promises, independent of today's code: a line of
  exactly 88 characters, put into the first code cell of a chapter page, fits without
  scrolling, and a line of 100 does scroll (so the measurement can fail).

A screenshot of the first chapter at 1280 pixels, at its code cell with the longest line,
goes to artifacts/screenshots/.
"""
from __future__ import annotations

import pytest

from test_site import CHAPTERS

WIDTH = 1280
CODE_WIDTH = 88  # characters: [tool.ruff] line-length, the chapters' limit

# Every element of a code cell's input that could scroll sideways, with its two widths. A box
# scrolls when its content is wider than the box (scrollWidth > clientWidth) and it does not
# hide the overflow.
OVERFLOWING_CODE = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const found = [];
  const cells = document.querySelectorAll('div.cell_input');
  let widest = 0, widestLength = -1;
  cells.forEach((cell, i) => {
    const length = Math.max(...(cell.innerText || '').split('\\n').map(l => l.length));
    if (length > widestLength) { widest = i; widestLength = length; }
    const boxes = [cell, ...cell.querySelectorAll('div, pre')];
    for (const box of boxes) {
      if (box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== 'hidden') {
        const line = (box.innerText || '').split('\\n')
          .reduce((a, b) => (b.length > a.length ? b : a), '');
        found.push({cell: i, box: box.tagName.toLowerCase() + '.' + box.className,
                    scroll: box.scrollWidth, client: box.clientWidth,
                    longest: line.length, line: line.slice(0, 60)});
        break;
      }
    }
  });
  return {cells: cells.length, found, widest};
}"""

# Replace the code of the first cell by one line of n characters; report whether it scrolls.
LINE_SCROLLS = """(n) => {
  const pre = document.querySelector('div.cell_input div.highlight pre');
  if (!pre) return null;
  pre.textContent = 'x'.repeat(n);
  const boxes = [pre, ...[pre.parentElement, pre.parentElement.parentElement]];
  return boxes.some(b => b.scrollWidth > b.clientWidth + 1);
}"""


def open_chapter(browser, site_url: str, page: str):
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    tab = context.new_page()
    response = tab.goto(f"{site_url}{page}.html", wait_until="load")
    if response is None or not response.ok:
        context.close()
        pytest.fail(f"{page}.html is not in the built site: run `make book` again", pytrace=False)
    return context, tab


@pytest.mark.parametrize("page", CHAPTERS)
def test_no_code_cell_scrolls(browser, site_url, screenshots, page):
    context, tab = open_chapter(browser, site_url, page)
    try:
        result = tab.evaluate(OVERFLOWING_CODE)
        if page == CHAPTERS[0]:  # the cell with the longest line, as a reader sees it
            tab.evaluate("i => document.querySelectorAll('div.cell_input')[i]"
                         ".scrollIntoView({block: 'center'})", result["widest"])
            tab.screenshot(path=str(screenshots / f"code_width_{page.replace('/', '_')}.png"))
    finally:
        context.close()
    assert result["cells"] > 0, f"{page}: no code cell found (div.cell_input)"
    shown = "\n".join(f"  code cell {f['cell']}: {f['box']} is {f['scroll']} px wide inside, "
                      f"{f['client']} px on screen; longest line {f['longest']} characters: "
                      f"{f['line']!r}" for f in result["found"][:10])
    assert not result["found"], (f"{page}: {len(result['found'])} of {result['cells']} code cells "
                                 f"scroll sideways at {WIDTH} px:\n{shown}")


def test_88_characters_fit(browser, site_url):
    context, tab = open_chapter(browser, site_url, CHAPTERS[0])
    try:
        fits = not tab.evaluate(LINE_SCROLLS, CODE_WIDTH)
        too_long_scrolls = tab.evaluate(LINE_SCROLLS, 100)
    finally:
        context.close()
    assert too_long_scrolls, "a 100-character line does not scroll: the measurement cannot fail"
    assert fits, f"a code line of {CODE_WIDTH} characters scrolls sideways at {WIDTH} px"
