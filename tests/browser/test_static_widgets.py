"""The build-time half of the light site (book/_ext/static_widgets.py): the saved widget state
loses its copies of each front end, which the site serves once as a file, and the pages lose
the Font Awesome script. The first tests need no build; the last reads the built site.
"""
from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html")).resolve()
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import static_widgets  # noqa: E402

STATE_SCRIPT = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S)
EXPLORER = "transformer_lib.book.explorer.AttentionExplorer"


def anywidget(anywidget_id, esm="export default { render() {} };", css=".x {}"):
    return {"model_module": "anywidget", "model_name": "AnyModel",
            "state": {"_anywidget_id": anywidget_id, "_esm": esm, "_css": css, "value": 1}}


def test_state_carries_each_front_end_once(tmp_path):
    layout = {"model_module": "@jupyter-widgets/base", "model_name": "LayoutModel", "state": {"width": None}}
    state = {"version_major": 2, "state": {
        "a": anywidget(EXPLORER, esm="old saved copy"), "b": anywidget(EXPLORER, esm="old saved copy"),
        "c": anywidget("other.Widget"), "d": anywidget("remote.Widget", esm="https://example.org/w.js"),
        "l": layout}}
    light = static_widgets.lighten_state(state, tmp_path, lambda name, resource: "../" + name)
    models = light["state"]
    assert light["version_major"] == 2 and models["l"] == layout
    for key in "abc":
        attrs = models[key]["state"]
        assert "_esm" not in attrs and "_css" not in attrs and attrs["value"] == 1, key
    # Both explorers point at one file: the library's current front end, not the saved copy.
    assert models["a"]["state"]["_esm_url"] == models["b"]["state"]["_esm_url"]
    served = tmp_path / models["a"]["state"]["_esm_url"].removeprefix("../")
    assert served.read_text() == (ROOT / "transformer_lib" / "book" / "static" / "explorer.js").read_text()
    other = tmp_path / models["c"]["state"]["_esm_url"].removeprefix("../")
    assert other.read_text() == "export default { render() {} };"
    # A front end given as an address stays as it is.
    assert models["d"]["state"]["_esm"] == "https://example.org/w.js"
    # explorer .js and .css, the other .js and .css, the remote one's .css
    assert len(list((tmp_path / "_static" / "widgets").iterdir())) == 5


def test_browser_models_reach_explorers_only(tmp_path):
    """On a page of BROWSER_MODELS, each explorer's state gets what a run in the browser needs."""
    from transformer_lib.book import explorer_browser

    assert set(static_widgets.BROWSER_MODELS.values()) <= set(explorer_browser.MODELS)
    for page in static_widgets.BROWSER_MODELS:
        assert (ROOT / f"{page}.ipynb").is_file(), f"BROWSER_MODELS names {page}, which is not a chapter"
    runtime = static_widgets.RUNTIME_DIR
    if not runtime.is_dir():  # vendored by `make book`; a fake one stands in here
        static_widgets.RUNTIME_DIR = tmp_path / "ort"
        static_widgets.RUNTIME_DIR.mkdir()
        (static_widgets.RUNTIME_DIR / "ort.wasm").write_bytes(b"\0" * 1000)
    try:
        browser = static_widgets.browser_state("transformer_dates", lambda name, resource: "../" + name)
        files = sum(f.stat().st_size for f in static_widgets.RUNTIME_DIR.iterdir())
    finally:
        static_widgets.RUNTIME_DIR = runtime
    m = explorer_browser.manifest("transformer_dates")
    assert browser["manifest"] == "../_static/models/transformer_dates.json"
    assert browser["runtime"] == "../_static/onnxruntime/ort.wasm.min.mjs"
    assert browser["tokens"] == m["src_tokens"] and browser["kind"] == "encoder-decoder"
    model_bytes = sum(f["bytes"] for f in m["files"].values())
    manifest = explorer_browser.MODELS_DIR / "transformer_dates.json"
    assert browser["bytes"] == model_bytes + manifest.stat().st_size + files
    assert "3,652 of the 3,652 test dates" in browser["about"] and "ONNX" in browser["about"]
    state = {"state": {"a": anywidget(EXPLORER), "c": anywidget("other.Widget")}}
    light = static_widgets.lighten_state(state, tmp_path, lambda name, resource: "../" + name, browser)
    assert light["state"]["a"]["state"]["_browser"] == browser
    assert "_browser" not in light["state"]["c"]["state"]
    plain = static_widgets.lighten_state(state, tmp_path, lambda name, resource: "../" + name)
    assert "_browser" not in plain["state"]["a"]["state"]
    served = tmp_path / light["state"]["a"]["state"]["_esm_url"].removeprefix("../")
    assert served.read_text() == (ROOT / "transformer_lib" / "book" / "static" / "explorer.js").read_text()


def test_missing_model_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="export_onnx"):
        static_widgets.browser_state("no_such_model", lambda name, resource: name)


def test_which_models_the_loader_draws():
    assert static_widgets.drawn_by_loader(anywidget(EXPLORER))
    controls = "@jupyter-widgets/controls"
    assert static_widgets.drawn_by_loader({"model_module": controls, "model_name": "FloatProgressModel"})
    assert not static_widgets.drawn_by_loader({"model_module": controls, "model_name": "IntSliderModel"})
    assert not static_widgets.drawn_by_loader({"model_module": "bqplot", "model_name": "FigureModel"})


def test_fontawesome_script_removed_and_icons_hidden():
    page = ('  <script defer src="../_static/scripts/fontawesome.js?digest=1"></script>\n'
            '<i class="fa-solid fa-bars"></i><i class="fab fa-github"></i>'
            '<i class="theme-switch fa-solid fa-sun" aria-hidden="true"></i><i class="fancy">x</i><i>y</i>')
    light = static_widgets.strip_fontawesome_js(page)
    assert "fontawesome.js" not in light
    assert light.count('aria-hidden="true"') == 3
    assert '<i class="fancy">x</i><i>y</i>' in light


def built_pages():
    return sorted(p for p in SITE.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


def test_built_pages_are_light():
    pages = built_pages()
    if not pages:
        pytest.fail(f"{SITE} has no built site: run `make book` first", pytrace=False)
    with_state = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(SITE).as_posix()
        assert "fontawesome.js" not in text, f"{name} loads the Font Awesome script"
        m = STATE_SCRIPT.search(text)
        if not m:
            continue
        with_state += 1
        assert "embed-amd.js" not in text and "widget-loader.js" in text, f"{name}: not drawn by the small loader"
        for model_id, model in json.loads(html.unescape(m.group(1)))["state"].items():
            attrs = model["state"]
            if model["model_module"] == "anywidget":
                assert "_esm" not in attrs and "_css" not in attrs, f"{name}: {model_id} carries its front end"
                for key in ("_esm_url", "_css_url"):
                    assert (page.parent / attrs[key]).resolve().is_file(), f"{name}: {attrs[key]} is missing"
    assert with_state, "no built page has saved widget state"
