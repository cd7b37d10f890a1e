"""Can a reader read every page? Each page of _toc.yml in a 1280 x 900 window:

- test_figure_texts_are_readable: every text of every SVG figure in the article is at least 9 CSS
  pixels tall as the page shows it, and no two texts are printed over each other. The figure is
  read from its file (the page shows it as an <img>, whose texts the DOM does not expose) by
  scripts/figure_text.py, at the width the browser really gives the image;
- test_output_lines_fit: no printed output (a text output's <pre>, an HTML table) is wider than
  its column, so none scrolls sideways;
- test_one_box_per_printed_output: a cell that prints several times shows one output box, not
  one per print (myst-nb's nb_merge_streams, _config.yml);
- test_equations_render: every formula is typeset by MathJax without an error and without a TeX
  command left as text (such as `\\_` inside `\\text{...}`, which MathJax's text mode prints as a
  backslash and an underscore), and no `$$` or `\\_` is left in the prose.

And test_output_column_is_figure_texts: the column a cell's output gets at 1280 px is the width
scripts/figure_text.py assumes (COLUMN_PX), so that a chapter's author who runs the script
without building the site gets the answer these tests give.
"""
from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import figure_text  # noqa: E402

WIDTH, HEIGHT = 1280, 900


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]


PAGES = toc_pages()
CHAPTERS = [p for p in PAGES if (ROOT / f"{p}.ipynb").is_file()]

ARTICLE_SVGS = """() => [...document.querySelectorAll('.bd-article img')]
  .filter(img => /\\.svg(\\?|#|$)/.test(img.currentSrc || img.src))
  .map(img => {
    const cell = img.closest('.cell');
    const cells = [...document.querySelectorAll('.cell')];
    return {src: img.currentSrc || img.src, width: img.getBoundingClientRect().width,
            cell: cell ? cells.indexOf(cell) : -1, alt: (img.alt || '').slice(0, 60)};
  })"""

WIDE_OUTPUTS = """() => {
  const found = [];
  const cells = [...document.querySelectorAll('.cell')];
  for (const el of document.querySelectorAll(
      '.cell_output pre, .cell_output .output.text_html, .cell_output table')) {
    if (el.scrollWidth > el.clientWidth + 1) {
      const cell = el.closest('.cell');
      const lines = (el.innerText || '').split('\\n');
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
      found.push({cell: cells.indexOf(cell), over: el.scrollWidth - el.clientWidth,
                  line: longest.slice(0, 100), chars: longest.length});
    }
  }
  return found;
}"""

SPLIT_OUTPUTS = """() => {
  const cells = [...document.querySelectorAll('.cell')];
  return [...document.querySelectorAll('.cell_output .output.stream + .output.stream')]
    .map(el => cells.indexOf(el.closest('.cell')));
}"""

MATH_PROBLEMS = """async () => {
  if (!window.MathJax || !MathJax.startup) return [];
  await MathJax.startup.promise;
  const problems = [];
  for (const item of MathJax.startup.document.math) {
    const mml = MathJax.startup.toMML(item.root);
    const texts = [...mml.matchAll(/<(mtext|mi|mo|mn)[^>]*>([^<]*)</g)].map(m => m[2]);
    if (/<merror/.test(mml)) problems.push(`error: ${item.math.slice(0, 80)}`);
    else if (texts.some(t => /\\\\/.test(t))) problems.push(`TeX left as text: ${item.math.slice(0, 80)}`);
  }
  return problems;
}"""

VISIBLE_PROSE = """() => {
  const root = document.querySelector('.bd-article');
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {acceptNode: node =>
    node.parentElement.closest('pre, code, script, style, mjx-container, .MathJax, .math')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  let text = '';
  while (walker.nextNode()) text += walker.currentNode.nodeValue + ' ';
  return text;
}"""


@pytest.fixture(scope="module")
def page_at_1280(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    yield page
    context.close()


def open_doc(page, site_url: str, doc: str):
    page.goto(f"{site_url}{doc}.html", wait_until="networkidle")
    return page


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode("utf-8")


@pytest.mark.parametrize("doc", PAGES)
def test_figure_texts_are_readable(doc, page_at_1280, site_url):
    page = open_doc(page_at_1280, site_url, doc)
    problems = []
    for img in page.evaluate(ARTICLE_SVGS):
        where = f"code cell {img['cell']}" if img["cell"] >= 0 else f"figure {img['alt']!r}"
        if img["width"] <= 0:
            problems.append(f"{where}: not shown ({img['src']})")
            continue
        report = figure_text.check_figure(fetch_text(img["src"]), where, shown_px=img["width"])
        problems += report.lines()
    assert not problems, (f"{doc}: figure texts under {figure_text.MIN_PX:g} px or printed "
                          "over each other (code cells counted from 0, as "
                          "`python scripts/figure_text.py` counts them in the notebook):\n" + "\n".join(problems))


@pytest.mark.parametrize("doc", PAGES)
def test_output_lines_fit(doc, page_at_1280, site_url):
    page = open_doc(page_at_1280, site_url, doc)
    wide = page.evaluate(WIDE_OUTPUTS)
    assert not wide, f"{doc}: outputs wider than their column (they scroll sideways):\n" + "\n".join(
        f"  code cell {w['cell']}: {w['over']} px too wide; longest line ({w['chars']} characters): "
        f"{w['line']!r}" for w in wide)


@pytest.mark.parametrize("doc", CHAPTERS)
def test_one_box_per_printed_output(doc, page_at_1280, site_url):
    page = open_doc(page_at_1280, site_url, doc)
    split = page.evaluate(SPLIT_OUTPUTS)
    assert not split, f"{doc}: cells whose printed output is split into several boxes: {split}"


@pytest.mark.parametrize("doc", PAGES)
def test_equations_render(doc, page_at_1280, site_url):
    page = open_doc(page_at_1280, site_url, doc)
    problems = page.evaluate(MATH_PROBLEMS)
    prose = page.evaluate(VISIBLE_PROSE)
    problems += [f"in the prose: {m!r}" for m in re.findall(r".{0,30}(?:\$\$|\\_).{0,30}", prose)]
    assert not problems, f"{doc}: formulas that do not render cleanly:\n" + "\n".join(
        f"  {p}" for p in problems)


def test_output_column_is_figure_texts(page_at_1280, site_url):
    page = open_doc(page_at_1280, site_url, CHAPTERS[0])
    widths = page.evaluate("""() => [...document.querySelectorAll('.cell_output')]
        .map(el => el.getBoundingClientRect().width).filter(w => w > 0)""")
    assert widths, "no cell output on the first chapter"
    assert max(widths) == pytest.approx(figure_text.COLUMN_PX, abs=1.0), (
        f"a cell's output is {max(widths):.0f} px wide at {WIDTH} px; set COLUMN_PX in "
        "scripts/figure_text.py to it")
