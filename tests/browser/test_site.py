"""Every page of the built book, as a reader's browser sees it: headless Chromium (Debian's, or
the one CHROMIUM names: scripts/sitetools.py) loading the site from a server on 127.0.0.1.

For each page listed in _toc.yml (each page is loaded once, and these checks run on it in turn):

- test_maths_typeset: every math node is typeset by the site's own MathJax; no raw TeX is left
  in the text outside code.
- test_widgets_render: every saved widget view is drawn, by the site's small widget loader
  (book/_ext/static_widgets.py), with neither the widgets' HTML manager (embed-amd.js, 3.6 MB)
  nor require.js loaded; and no page loads the theme's Font Awesome script (its stylesheet and
  web fonts draw the icons). The page weight itself is checked in test_page_weight.py.
- test_figures_described: every image loads and has alternative text that describes it (not
  the file name Sphinx falls back to); every inline SVG in a cell's output (outside a button
  or link) is named (role="img", or "group"/"figure", with aria-label, aria-labelledby or
  <title>) or hidden from screen readers.
- test_links_resolve: every internal link (<a href> to the local server) answers 200, and the
  #anchor it names exists on the target page.
- test_screenshot: a full-page screenshot goes to artifacts/screenshots/ (kept out of git).
- test_accessibility: axe-core (from npm, injected from scripts/site_js/node_modules) finds no
  serious or critical violation. All its findings, of any impact, are written to
  artifacts/accessibility/ for reading.
- test_no_error_and_nothing_foreign (last, so that it also covers what the checks above
  triggered): no console error, no uncaught exception, no failed request, no request to any
  host but the local server (such requests are blocked and recorded).

And, for the site as a whole:

- test_index_leads_to_intro: the root redirects to the intro page, cleanly.
- test_launch_buttons: every chapter page's launch menu opens that chapter's notebook on Binder
  and on Colab, from the repository and branch in _config.yml, and links the repository.
- test_search_finds_chapter: the search page (search.html?q=...) finds each chapter by a word
  of its prose that no other page uses.
"""
from __future__ import annotations

import collections
import html
import html.parser
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The built site; BOOK_SITE=path tests another build (e.g. one made with --path-output).
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html")).resolve()


def toc_pages() -> list[str]:
    """Every page of the book, in the order of _toc.yml (the root first)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [entry["file"] for entry in part.get("chapters", [])]
    return pages


PAGES = toc_pages()
CHAPTERS = [page for page in PAGES if (ROOT / f"{page}.ipynb").is_file()]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"].get("branch", "main")

# TeX that MathJax should have replaced; looked for in the text outside code.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\frac|\\sqrt|\\mathrm")
# The impacts axe-core reports, most severe first; the test fails on the first two.
FAILING_IMPACTS = ("critical", "serious")
ARTIFACTS = ROOT / "artifacts"
# What the site no longer loads: the widgets' HTML manager and its AMD loader (the small widget
# loader draws the saved widgets), and the theme's Font Awesome script (its CSS draws the icons).
HEAVY_SCRIPTS = r"/(embed-amd|require|fontawesome)\.js$"
TIMEOUT_MS = 30_000

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
    out.push({
      src: img.getAttribute("src"), width: img.naturalWidth, alt: img.getAttribute("alt"),
      decorative: ["presentation", "none"].includes(img.getAttribute("role"))
        || img.getAttribute("aria-hidden") === "true",
    });
  }
  return out;
}"""

# Inline SVG in a notebook cell's output (myst-nb shows image/svg+xml with <img>, but an HTML
# output or a widget may draw one inline). An icon inside a button or link is named by its
# control (axe-core checks those).
OUTPUT_SVGS = """() => [...document.querySelectorAll(".cell_output svg, .output svg")]
  .filter(svg => !svg.parentElement.closest("svg, button, a"))
  .map(svg => {
    const hidden = svg.closest("[aria-hidden='true']") !== null;
    const title = svg.querySelector(":scope > title");
    const labelledby = (svg.getAttribute("aria-labelledby") || "").split(/\\s+/).filter(Boolean)
      .map(id => (document.getElementById(id) || {}).textContent || "").join(" ");
    const name = (svg.getAttribute("aria-label") || labelledby || (title && title.textContent) || "").trim();
    return {hidden, role: svg.getAttribute("role"), name, html: svg.outerHTML.slice(0, 120)};
  })"""
# Roles under which a named inline SVG is announced as a whole.
SVG_ROLES = {"img", "figure", "group", "graphics-document"}

LINKS = """() => [...document.querySelectorAll("a[href]")].map(a => ({
  href: a.href, raw: a.getAttribute("href"), text: a.textContent.trim().slice(0, 60)}))"""

AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    nodes: v.nodes.map(n => ({target: n.target.join(" "), html: n.html.slice(0, 200),
                              summary: n.failureSummary}))}));
}"""


def open_page(browser, site_url: str, path: str, height: int = 900):
    """Open a page; record console errors, failed requests and requests to other hosts (which
    are blocked). Returns (context, page, log)."""
    context = browser.new_context(viewport={"width": 1280, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    log = {"errors": [], "failed": [], "foreign": [], "requests": []}

    def on_route(route):
        url = route.request.url
        if url.startswith(site_url) or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            log["foreign"].append(url)
            route.abort()

    page.route("**/*", on_route)
    page.on("console", lambda m: m.type == "error"
            and log["errors"].append(f"console: {m.text} ({m.location.get('url')})"))
    page.on("pageerror", lambda e: log["errors"].append(f"page error: {e}"))
    page.on("request", lambda r: log["requests"].append(r.url))
    page.on("requestfailed", lambda r: log["failed"].append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and log["failed"].append(f"{r.url} (HTTP {r.status})"))
    page.goto(site_url + path, wait_until="networkidle")
    return context, page, log


# The site as a whole --------------------------------------------------------------------


def test_index_leads_to_intro(browser, site_url):
    context, page, log = open_page(browser, site_url, "index.html")
    try:
        page.wait_for_url(re.compile(r"book/intro\.html$"))
        assert not log["errors"] and not log["failed"] and not log["foreign"], log
    finally:
        context.close()


class LinkParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


@pytest.mark.parametrize("doc", CHAPTERS)
def test_launch_buttons(doc):
    """The built chapter page (static HTML) offers Binder and Colab for this very notebook."""
    built = SITE / f"{doc}.html"
    assert built.is_file(), f"{built.relative_to(ROOT)} was not built: run `make book`"
    parser = LinkParser()
    parser.feed(built.read_text(encoding="utf-8"))
    owner_repo = urllib.parse.urlparse(REPOSITORY).path.strip("/")
    notebook = f"{doc}.ipynb"
    binder = f"https://mybinder.org/v2/gh/{owner_repo}/{BRANCH}?urlpath=lab/tree/{notebook}"
    colab = f"https://colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/{notebook}"
    hrefs = set(parser.hrefs)
    assert binder in hrefs, f"no Binder launch link {binder}; launch links: {[h for h in hrefs if 'binder' in h]}"
    assert colab in hrefs, f"no Colab launch link {colab}; launch links: {[h for h in hrefs if 'colab' in h]}"
    assert REPOSITORY in hrefs, f"no link to the repository {REPOSITORY}"
    assert (ROOT / notebook).is_file(), f"the launch links open {notebook}, which is not in the repository"


class ProseParser(html.parser.HTMLParser):
    """The words of a page's article prose: outside code, maths, scripts and cell outputs."""

    SKIP_TAGS = {"pre", "code", "script", "style", "nav"}
    SKIP_CLASSES = {"math", "cell_output", "highlight", "headerlink"}

    def __init__(self):
        super().__init__()
        self.depth = 0  # inside the article
        self.skip: list[int] = []  # depths of the elements being skipped
        self.words: collections.Counter = collections.Counter()

    def handle_starttag(self, tag, attrs):
        if tag in {"br", "img", "hr", "meta", "link", "input", "wbr", "source"}:
            return
        self.depth += 1
        classes = set((dict(attrs).get("class") or "").split())
        if tag in self.SKIP_TAGS or classes & self.SKIP_CLASSES:
            self.skip.append(self.depth)

    def handle_endtag(self, tag):
        if tag in {"br", "img", "hr", "meta", "link", "input", "wbr", "source"}:
            return
        if self.skip and self.skip[-1] == self.depth:
            self.skip.pop()
        self.depth -= 1

    def handle_data(self, data):
        if not self.skip:
            self.words.update(w.lower() for w in re.findall(r"\b[A-Za-z]{7,}\b", data))


def prose_words(doc: str) -> collections.Counter:
    text = (SITE / f"{doc}.html").read_text(encoding="utf-8")
    m = re.search(r'<article class="bd-article"[^>]*>(.*?)</article>', text, re.S)
    parser = ProseParser()
    parser.feed(m.group(1) if m else "")
    return parser.words


def distinctive_word(doc: str) -> str:
    """The word this page's prose uses most that no other page's prose uses at all."""
    counts = {page: prose_words(page) for page in PAGES if (SITE / f"{page}.html").is_file()}
    elsewhere = set().union(*(words for page, words in counts.items() if page != doc))
    own = sorted(((-n, w) for w, n in counts.get(doc, {}).items() if w not in elsewhere))
    assert own, f"{doc}: no word of its prose is unique to it (is the page built?)"
    return own[0][1]


@pytest.mark.parametrize("doc", CHAPTERS)
def test_search_finds_chapter(doc, browser, site_url):
    word = distinctive_word(doc)
    context, page, log = open_page(browser, site_url, f"search.html?q={urllib.parse.quote(word)}")
    try:
        results = page.locator("#search-results ul.search li a")
        # Sphinx's search lists its results one by one, then says it has finished.
        page.wait_for_function(
            "() => /Search finished|did not match/.test("
            "(document.querySelector('#search-results .search-summary') || {}).textContent || '')"
        )
        hrefs = [urllib.parse.urlparse(h).path for h in results.evaluate_all("els => els.map(e => e.href)")]
        assert any(h.endswith(f"/{doc}.html") for h in hrefs), f"searching {word!r} did not find {doc}: {hrefs}"
        assert not log["errors"] and not log["failed"] and not log["foreign"], log
    finally:
        context.close()


# Each page, loaded once --------------------------------------------------------------------


@pytest.fixture(scope="class")
def loaded(doc, browser, site_url):
    """The page `doc`, open in its own browser context for all the checks of TestPage."""
    context, page, log = open_page(browser, site_url, f"{doc}.html")
    yield page, log
    context.close()


# Shared across pages: what each internal URL answered, and the ids of each HTML page.
_fetched: dict[str, tuple[int, set[str]]] = {}


def fetch(url: str) -> tuple[int, set[str]]:
    if url not in _fetched:
        ids: set[str] = set()
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status = response.status
                if "html" in response.headers.get("Content-Type", ""):
                    text = response.read().decode("utf-8", "replace")
                    ids = {html.unescape(i) for i in re.findall(r'\s(?:id|name)="([^"]+)"', text)}
        except urllib.error.HTTPError as err:
            status = err.code
        _fetched[url] = (status, ids)
    return _fetched[url]


@pytest.mark.parametrize("doc", PAGES, scope="class")
class TestPage:
    def test_maths_typeset(self, loaded):
        page, _ = loaded
        n_math = page.locator(".math").count()
        if n_math:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            page.evaluate("() => MathJax.startup.promise")
            typeset = page.locator("mjx-container").count()
            assert typeset >= n_math, f"{typeset} of {n_math} formulas typeset"
        raw = RAW_TEX.findall(page.evaluate(VISIBLE_PROSE))
        assert not raw, f"raw TeX left in the page: {raw[:5]}"

    def test_widgets_render(self, loaded):
        page, log = loaded
        n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if n_views:
            page.wait_for_function(
                f"() => document.querySelectorAll('.widget-subarea > .widget-lite[data-rendered]').length >= {n_views}",
                timeout=TIMEOUT_MS,
            )
        heavy = [u for u in log["requests"] if re.search(HEAVY_SCRIPTS, urllib.parse.urlparse(u).path)]
        assert not heavy, f"the page loads scripts the site does without: {heavy}"

    def test_figures_described(self, loaded):
        page, _ = loaded
        problems = []
        for img in page.evaluate(IMAGES):
            alt = (img["alt"] or "").strip()
            if img["width"] == 0:
                problems.append(f"image did not load: {img['src']}")
            if img["decorative"]:
                continue
            if not alt:
                problems.append(f"image without alt text: {img['src']}")
            elif alt == img["src"] or re.search(r"\.(svg|png|jpe?g|gif|webp)$", alt, re.I) or "_images/" in alt:
                problems.append(f"alt text is a file name, not a description: {img['src']} (alt={alt!r})")
        for svg in page.evaluate(OUTPUT_SVGS):
            if not svg["hidden"] and not (svg["role"] in SVG_ROLES and svg["name"]):
                problems.append(f"inline SVG in an output without role=img and a name: {svg['html']}")
        assert not problems, "\n".join(problems)

    def test_links_resolve(self, loaded, site_url):
        page, _ = loaded
        problems = []
        for link in page.evaluate(LINKS):
            url = link["href"]
            if not url.startswith(site_url):
                continue  # another site, mailto:, javascript:
            target, _, fragment = url.partition("#")
            status, ids = fetch(target)
            if status != 200:
                problems.append(f"{link['raw']} ({link['text']!r}): HTTP {status}")
            elif fragment and urllib.parse.unquote(fragment) not in ids:
                problems.append(f"{link['raw']} ({link['text']!r}): no element with id {fragment!r} there")
        assert not problems, "broken internal links:\n" + "\n".join(sorted(set(problems)))

    def test_screenshot_shows_a_page(self, loaded, doc, screenshots):
        """The page as a reader sees it, kept under artifacts/ for review; it must show a page:
        as wide as the window, at least a screen tall, and not one flat colour."""
        from PIL import Image

        page, _ = loaded
        path = screenshots / (doc.replace("/", "__") + ".png")
        page.screenshot(path=str(path), full_page=True)
        with Image.open(path) as image:
            width, height = image.size
            grey = image.convert("L")
            counts = sorted((n for n, _ in grey.getcolors(maxcolors=256)), reverse=True)
        window = page.viewport_size
        assert width == window["width"] and height >= window["height"], (width, height, window)
        assert len(counts) > 8 and counts[0] < 0.995 * width * height, "the screenshot is (nearly) blank"

    def test_accessibility(self, loaded, doc, axe_script):
        page, _ = loaded
        page.add_script_tag(path=str(axe_script))
        violations = page.evaluate(AXE_RUN)
        report = ARTIFACTS / "accessibility" / (doc.replace("/", "__") + ".json")
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(violations, indent=1))
        failing = [v for v in violations if v["impact"] in FAILING_IMPACTS]
        message = "\n".join(
            f"{v['impact']} {v['id']}: {v['help']} ({v['helpUrl']})\n"
            + "\n".join(f"    {n['target']}: {n['html']}" for n in v["nodes"][:5])
            for v in failing
        )
        assert not failing, f"axe-core found serious or critical violations:\n{message}"

    def test_no_error_and_nothing_foreign(self, loaded):
        _, log = loaded
        assert not log["foreign"], f"requests to other hosts: {log['foreign']}"
        assert not log["failed"], f"failed requests: {log['failed']}"
        assert not log["errors"], f"errors: {log['errors']}"
