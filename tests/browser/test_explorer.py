"""The attention explorer (transformer_lib.book.explorer) on the built site, in headless Chromium.

For every page of the built book whose saved widget state holds an `AttentionExplorer`:
each explorer renders from the saved state with no kernel; choosing the kind, the layer and the
head (from the menus and from the grid of thumbnails) draws exactly the saved weights (read
back from the cells' data-weight attributes); pointing at a cell highlights its row and shows
the row's numbers; the keyboard moves between cells, and between the grid's thumbnails (to its
edges and no further: issue 15, a single-head explorer threw a TypeError on ArrowLeft); two views
of one widget follow each other; the text box for live input stays hidden (except where the site
runs the model in the browser: test_live_explorer.py); nothing is requested from another host and
no error is logged. Screenshots of each explorer go to artifacts/screenshots/.

Needs the built site (`make book`); `make browser-test` runs it.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

import test_site as site_pages  # the shared page opener: console errors, failed and foreign requests

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
# today's id, and the one in notebooks executed before transformer_lib.book existed
EXPLORER_IDS = ("transformer_lib.book.explorer.AttentionExplorer",)
STATE_SCRIPT = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S)
VIEW_SCRIPT = re.compile(r'<script type="application/vnd\.jupyter\.widget-view\+json">(.*?)</script>', re.S)
# At most this many layers and heads of each kind are clicked through (the first and the last).
MAX_CHECKED = 3


def explorer_pages() -> dict[str, list[dict]]:
    """page path -> the saved state of each explorer view on it, in the order of the page."""
    pages = {}
    if not SITE.is_dir():
        return pages
    for path in sorted(SITE.rglob("*.html")):
        if "_static" in path.parts or "_sources" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        m = STATE_SCRIPT.search(text)
        if not m:
            continue
        state = json.loads(html.unescape(m.group(1)))["state"]
        views = []
        for v in VIEW_SCRIPT.findall(text):
            model_id = json.loads(html.unescape(v))["model_id"]
            model = state.get(model_id, {}).get("state", {})
            if model.get("_anywidget_id") in EXPLORER_IDS:
                views.append({"model_id": model_id, **model})
        if views:
            pages[path.relative_to(SITE).as_posix()] = views
    return pages


PAGES = explorer_pages()


def parse_rows(rows):
    return [[float(x) for x in row.split()] for row in rows]


def saved_matrix(state, kind, layer, head):
    k = next(k for k in state["data"]["kinds"] if k["id"] == kind)
    if k["total_heads"] == 1:
        head = 0
    return parse_rows(k["mean"][layer] if head == -1 else k["weights"][layer][head])


def spread(n: int) -> list[int]:
    """Indices 0 .. n-1 to check: all of them, or the first few and the last."""
    return list(range(n)) if n <= MAX_CHECKED else [*range(MAX_CHECKED - 1), n - 1]


DRAWN = """root => {
  const rows = [...root.querySelectorAll("table.tlx-heat tbody tr")];
  return {
    kind: root.dataset.kind, layer: Number(root.dataset.layer), head: Number(root.dataset.head),
    queries: rows.map(r => r.querySelector("th").getAttribute("title")),
    keys: [...root.querySelectorAll("table.tlx-heat thead th")].map(th => th.getAttribute("title")),
    weights: rows.map(r => [...r.querySelectorAll("td")].map(td => Number(td.dataset.weight))),
    colours: rows.map(r => [...r.querySelectorAll("td")].map(td => td.style.backgroundColor)),
  };
}"""


def drawn(root):
    return root.evaluate(DRAWN)


def assert_same(drawn_weights, expected, what):
    assert len(drawn_weights) == len(expected), f"{what}: {len(drawn_weights)} rows drawn, {len(expected)} saved"
    for i, (a, b) in enumerate(zip(drawn_weights, expected)):
        assert a == pytest.approx(b, abs=1e-9), f"{what}: row {i} drawn {a}, saved {b}"


def test_the_site_shows_explorers():
    assert SITE.is_dir(), f"{SITE} has no built site: run `make book` first"
    assert PAGES, "no page of the built site shows an AttentionExplorer (book/attention_explorer has one)"


@pytest.fixture
def open_page(browser, site_url):
    """test_site.open_page with a window tall enough that an explorer fits on screen (hovering and
    its screenshot need no scrolling); every context is closed after the test."""
    contexts = []

    def _open(path):
        context, page, log = site_pages.open_page(browser, site_url, path, height=1800)
        contexts.append(context)
        return page, log

    yield _open
    for context in contexts:
        context.close()


@pytest.mark.parametrize("path", sorted(PAGES))
def test_explorers_on_page(path, open_page, screenshots):
    views = PAGES[path]
    page, log = open_page(path)
    page.wait_for_function(
        f"() => document.querySelectorAll('.tlx table.tlx-heat td[data-weight]').length > 0 && "
        f"document.querySelectorAll('.tlx').length >= {len(views)}",
        timeout=20_000,
    )
    roots = page.locator(".tlx")
    assert roots.count() == len(views), f"{roots.count()} explorers drawn, {len(views)} saved"
    # The theme's sticky header would cover the top of an explorer in its screenshot.
    page.add_style_tag(content=".bd-header, .bd-header-article, .skip-link { display: none !important; }")
    stem = path.removesuffix(".html").replace("/", "__")

    # As saved: each view first draws the map its state names, with the saved tokens and weights.
    for n, state in enumerate(views):
        root, what = roots.nth(n), f"{path} explorer {n}"
        d = drawn(root)
        assert (d["kind"], d["layer"], d["head"]) == (state["kind"], state["layer"], state["head"]), what
        k = next(k for k in state["data"]["kinds"] if k["id"] == state["kind"])
        assert d["queries"] == k["queries"] and d["keys"] == k["keys"], f"{what}: tokens differ from the saved ones"
        assert_same(d["weights"], saved_matrix(state, state["kind"], state["layer"], state["head"]), what)
        if "_browser" in state:  # the site ships this model: the box runs it in the browser (test_live_explorer.py)
            assert root.locator("form.tlx-input button").text_content().startswith("Run in your browser"), what
        else:
            assert root.locator("form.tlx-input").is_hidden(), f"{what}: the live text box shows without a kernel"

    seen = set()
    for n, state in enumerate(views):
        if state["model_id"] in seen:  # another view of a widget already explored: see the end
            continue
        seen.add(state["model_id"])
        root = roots.nth(n)
        root.evaluate("r => r.scrollIntoView({block: 'start'})")
        what = f"{path} explorer {n}"
        kinds = state["data"]["kinds"]

        # Every kind, some layers and heads, from the menus: the drawn map is the saved one.
        for k in kinds:
            if len(kinds) > 1:
                root.locator("select.tlx-kind").select_option(k["id"])
            heads = [-1] + spread(k["n_heads"]) if k["total_heads"] > 1 else [0]
            for layer in spread(k["n_layers"]):
                if k["n_layers"] > 1:
                    root.locator("select.tlx-layer").select_option(str(layer))
                for head in heads:
                    if len(heads) > 1:
                        root.locator("select.tlx-head").select_option(str(head))
                    d = drawn(root)
                    label = f"{what}, {k['id']} layer {layer} head {head}"
                    assert (d["kind"], d["layer"], d["head"]) == (k["id"], layer, head), label
                    assert d["queries"] == k["queries"] and d["keys"] == k["keys"], label
                    assert_same(d["weights"], saved_matrix(state, k["id"], layer, head), label)

            # A thumbnail of the grid opens its map (the last layer, head 0).
            layer, head = k["n_layers"] - 1, 0
            root.locator(f'button.tlx-thumb[data-layer="{layer}"][data-head="{head}"]').click()
            d = drawn(root)
            assert (d["layer"], d["head"]) == (layer, head), f"{what}: clicking a thumbnail did not open it"
            assert root.locator("select.tlx-layer").input_value() == str(layer)
            assert_same(d["weights"], saved_matrix(state, k["id"], layer, head), f"{what}, thumbnail")

        # Pointing at a cell highlights its row and shows that row's weights as numbers.
        k = next(k for k in kinds if k["id"] == drawn(root)["kind"])
        d = drawn(root)
        r, c = len(k["queries"]) // 2, len(k["keys"]) // 2
        root.locator(f'td[data-row="{r}"][data-col="{c}"]').hover()
        active = root.locator("table.tlx-heat tbody tr.tlx-active")
        assert active.count() == 1 and active.get_attribute("data-row") == str(r), f"{what}: row {r} not highlighted"
        readout = root.locator(".tlx-readout")
        assert readout.get_attribute("data-row") == str(r)
        decimals = state["data"]["decimals"]
        numbers = [float(x) for x in re.findall(r"\d+\.\d+", " ".join(readout.locator(".tlx-w").all_inner_texts()))]
        assert numbers == pytest.approx([round(v, decimals) for v in d["weights"][r]]), f"{what}: readout {numbers}"
        label = root.locator(f'td[data-row="{r}"][data-col="{c}"]').get_attribute("aria-label")
        assert label.endswith(f"{d['weights'][r][c]:.{decimals}f}"), f"{what}: aria-label {label!r}"
        page.screenshot(path=str(screenshots / f"explorer__{stem}__{n}.png"), clip=root.bounding_box())

        # Pointing at a query token, in the map's row labels or in the lines, highlights its row.
        last = len(k["queries"]) - 1
        root.locator(f'table.tlx-heat tbody tr[data-row="{last}"] th').hover()
        assert active.get_attribute("data-row") == str(last), f"{what}: hovering a row's token"
        root.locator('svg.tlx-lines text.tlx-q[data-row="0"]').hover()
        assert active.get_attribute("data-row") == "0", f"{what}: hovering a query token in the lines"
        assert root.locator("svg.tlx-lines text.tlx-q.tlx-active").get_attribute("data-row") == "0"
        strong = [float(x) for x in root.locator("svg.tlx-lines line:not(.tlx-dim)").evaluate_all(
            "ls => ls.map(l => l.dataset.row)")]
        assert strong and set(strong) == {0.0}, f"{what}: the lines of other rows are not dimmed"

        # The keyboard: focus a cell, arrow down, and the next row is the active one.
        root.locator('td[data-row="0"][data-col="0"]').focus()
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowRight")
        focused = page.evaluate("() => [document.activeElement.dataset.row, document.activeElement.dataset.col]")
        expected = [str(min(1, len(k["queries"]) - 1)), str(min(1, len(k["keys"]) - 1))]
        assert focused == expected, f"{what}: the arrow keys moved the focus to {focused}, not {expected}"
        assert active.get_attribute("data-row") == expected[0], f"{what}: the focused row is not highlighted"
        assert root.locator(".tlx-details li").count() == len(k["queries"]), f"{what}: text description"
        page.mouse.move(0, 0)

    # Two views of one widget share its state: a change in one shows in the other.
    by_model = {}
    for n, state in enumerate(views):
        by_model.setdefault(state["model_id"], []).append(n)
    for model_id, ns in by_model.items():
        if len(ns) < 2:
            continue
        state = views[ns[0]]
        first, other = roots.nth(ns[0]), roots.nth(ns[1])
        first.locator("button.tlx-thumb").last.click()
        a, b = drawn(first), drawn(other)
        assert (a["kind"], a["layer"], a["head"]) == (b["kind"], b["layer"], b["head"]), (
            f"{path}: views of {model_id} differ")
        assert a["weights"] == b["weights"], f"{path}: two views of {model_id} draw different maps"

    assert not log["foreign"], f"requests to other hosts: {log['foreign']}"
    assert not log["failed"], f"failed requests: {log['failed']}"
    assert not log["errors"], f"errors: {log['errors']}"


GRID_FOCUS = """root => {
  const b = document.activeElement;
  return root.contains(b) && b.matches("button.tlx-thumb")
    ? [Number(b.dataset.layer), Number(b.dataset.head), b.tabIndex] : null;
}"""


@pytest.mark.parametrize("path", sorted(PAGES))
def test_grid_keyboard(path, open_page):
    """The arrow keys move the focus between the grid's thumbnails and stop at its edges: the
    first column is the mean of the heads, or head 0 where there is a single head (chapters 2
    and 8; ArrowLeft there used to look for a mean thumbnail and throw a TypeError)."""
    views = PAGES[path]
    page, log = open_page(path)
    page.wait_for_function(
        f"() => document.querySelectorAll('.tlx button.tlx-thumb').length > 0 && "
        f"document.querySelectorAll('.tlx').length >= {len(views)}",
        timeout=20_000,
    )
    roots = page.locator(".tlx")
    for n, state in enumerate(views):
        root, what = roots.nth(n), f"{path} explorer {n}"
        kind = root.evaluate("r => r.dataset.kind")
        k = next(k for k in state["data"]["kinds"] if k["id"] == kind)
        first = -1 if k["total_heads"] > 1 else 0
        last_layer, last_head = k["n_layers"] - 1, k["n_heads"] - 1
        corner = root.locator(f'button.tlx-thumb[data-layer="0"][data-head="{first}"]')
        assert corner.count() == 1, f"{what}: no thumbnail for layer 0, head {first}"
        corner.focus()
        # At the top-left corner, ArrowLeft and ArrowUp keep the focus where it is.
        for key in ("ArrowLeft", "ArrowUp"):
            page.keyboard.press(key)
            assert root.evaluate(GRID_FOCUS) == [0, first, 0], f"{what}: {key} at the grid's corner"
        # ArrowRight and ArrowDown walk to the opposite corner and stop there.
        for _ in range(last_head - first + 1):
            page.keyboard.press("ArrowRight")
        for _ in range(last_layer + 1):
            page.keyboard.press("ArrowDown")
        assert root.evaluate(GRID_FOCUS) == [last_layer, last_head, 0], f"{what}: arrows to the last thumbnail"
        # Back to the left edge, past it, and Enter opens the map there.
        for _ in range(last_head - first + 1):
            page.keyboard.press("ArrowLeft")
        assert root.evaluate(GRID_FOCUS) == [last_layer, first, 0], f"{what}: ArrowLeft to the first column"
        page.keyboard.press("Enter")
        d = drawn(root)
        assert (d["layer"], d["head"]) == (last_layer, first), f"{what}: Enter did not open the focused thumbnail"
        assert_same(d["weights"], saved_matrix(state, kind, last_layer, first), f"{what}, opened from the keyboard")
        # The map opened is the only tab stop of the grid (roving tabindex).
        stops = root.locator("button.tlx-thumb[tabindex='0']")
        assert stops.count() == 1, f"{what}: {stops.count()} thumbnails are tab stops"
    assert not log["errors"], f"errors: {log['errors']}"
