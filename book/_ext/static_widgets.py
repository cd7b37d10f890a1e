"""A lighter site: saved widgets drawn by a small loader, and no Font Awesome JavaScript.

1. Widgets. myst-nb puts a notebook's saved widget state into its page and loads what
   `nb_ipywidgets_js` lists (_config.yml): require.js and the Jupyter widgets HTML manager,
   embed-amd.js, 3.6 MB (0.9 MB compressed), the heaviest file of the site. Every anywidget
   model also carries its own copy of its front end (`_esm`, `_css`: 34 kB per attention
   explorer) in that state. On a page whose saved models are all ones that
   static/widget-loader.js draws (anywidget models; the HBox, HTML, Label and progress bar a
   tqdm progress bar is made of; layouts and styles), this extension, as the page is written:

   - moves each anywidget front end out of the state into one file under _static/widgets/,
     named by its content's hash, so that a page (and the whole site) loads each front end
     once, and the browser caches it across pages; the state says where it is (`_esm_url`,
     `_css_url`, relative to the page). The attention explorer's front end is taken from
     transformer_lib/book/static/ (the library that builds the site), not from the copy saved with
     the notebook, so a fix to it reaches the site without re-executing the chapters; its
     data format is the one `explorer_state.py` writes into the state (`data.version`).
   - loads widget-loader.js (a few kB) instead of require.js, widgets-config.js and
     embed-amd.js.

   A page with any other widget model keeps the full HTML manager, unchanged (the build says
   so in its log).

   On the pages of BROWSER_MODELS, each attention explorer also gets `_browser` in its state:
   the model that the page's explorer shows, exported to ONNX by scripts/export_onnx.py
   (transformer_lib/book/browser_models/, copied into _static/models/ as the build finishes),
   its vocabulary and limits, the site's copy of onnxruntime-web (_static/onnxruntime/, vendored
   by scripts/vendor_js.py) and the bytes a first run downloads. The explorer then offers a text
   box that runs the model in the reader's browser; nothing is fetched before the reader asks.

2. Font Awesome. The theme (pydata-sphinx-theme) loads scripts/fontawesome.js (1.5 MB, 0.54
   MB compressed) on every page "so that users can add custom icons": it replaces each
   `<i class="fa-...">` with an inline SVG. Its stylesheet already carries Font Awesome's CSS
   and web fonts, which draw the same icons from the same <i> elements, so the script tag is
   removed from every page after the build, and each icon <i> is hidden from screen readers
   (aria-hidden="true", as the script did for its SVGs): the buttons are named by their text
   or their own labels.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from sphinx.util import logging

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOGGER = logging.getLogger(__name__)

STATE_MIME = "application/vnd.jupyter.widget-state+json"
LOADER = "_static/widget-loader.js"
WIDGETS_DIR = "_static/widgets"

# The attention explorer's id (every chapter is executed with transformer_lib.book).
EXPLORER_IDS = ("transformer_lib.book.explorer.AttentionExplorer",)
EXPLORER_FRONT_END = {
    "_esm": ROOT / "transformer_lib" / "book" / "static" / "explorer.js",
    "_css": ROOT / "transformer_lib" / "book" / "static" / "explorer.css",
}
# anywidget front ends the site serves from the library's own files (by _anywidget_id).
FRONT_ENDS = {explorer_id: EXPLORER_FRONT_END for explorer_id in EXPLORER_IDS}

# Pages whose explorer shows a model the site ships, and that model (a name of
# transformer_lib.book.explorer_browser.MODELS). Chapter 14 trains the first steps of its model
# and loads the rest of the run the site ships (the manifest's "about" says so on the page).
BROWSER_MODELS = {
    "chapters/12_inference": "transformer_dates",
    "chapters/14_decoder_only": "char_lm",
}
MODELS_DIR = ROOT / "transformer_lib" / "book" / "browser_models"
MODELS_URL = "_static/models"
RUNTIME_DIR = ROOT / "book" / "_vendor" / "onnxruntime"
RUNTIME_URL = "_static/onnxruntime/ort.wasm.min.mjs"

# Models widget-loader.js draws (or that need no drawing: layouts and styles).
DRAWN = {
    ("@jupyter-widgets/controls", name)
    for name in ("HBoxModel", "VBoxModel", "BoxModel", "HTMLModel", "LabelModel", "FloatProgressModel",
                 "IntProgressModel", "HTMLStyleModel", "LabelStyleModel", "ProgressStyleModel",
                 "DescriptionStyleModel")
} | {("@jupyter-widgets/base", "LayoutModel")}


def drawn_by_loader(model: dict) -> bool:
    """Whether widget-loader.js draws this saved model (an entry of the state's "state")."""
    key = (model.get("model_module"), model.get("model_name"))
    return key in DRAWN or key == ("anywidget", "AnyModel")


def _write_asset(outdir: Path, stem: str, suffix: str, text: str) -> str:
    """Write `text` once as _static/widgets/<stem>.<hash><suffix>; returns its path in the site."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    name = f"{WIDGETS_DIR}/{stem}.{digest}{suffix}"
    path = outdir / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return name


def _check_line(check: dict) -> str:
    """The export's own check, in one sentence for the reader."""
    if "dates" in check:
        same = (f"the same greedy answer on {check['greedy_answers_equal']:,} of the {check['dates']:,} "
                f"test dates")
    else:
        same = f"the same greedy continuation of {check['greedy_continuations_equal']} of {check['prompts']} prompts"
    return (f"The export's check: onnxruntime and PyTorch give {same}, and logits within "
            f"{check['max_logit_difference']:.1g} (attention weights within {check['max_attention_difference']:.1g}).")


def browser_state(name: str, pathto) -> dict:
    """What the explorer needs to run the model `name` in the reader's browser (see the module's
    docstring). Raises FileNotFoundError when the model or the runtime is missing."""
    manifest_path = MODELS_DIR / f"{name}.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} is missing: run `python scripts/export_onnx.py`")
    m = json.loads(manifest_path.read_text(encoding="utf-8"))
    runtime = sorted(RUNTIME_DIR.glob("*")) if RUNTIME_DIR.is_dir() else []
    if not runtime:
        raise FileNotFoundError(f"{RUNTIME_DIR} is empty: `make vendor` copies onnxruntime-web there")
    return {
        "kind": m["kind"],
        "manifest": pathto(f"{MODELS_URL}/{name}.json", 1),
        "runtime": pathto(RUNTIME_URL, 1),
        "bytes": sum(f["bytes"] for f in m["files"].values()) + manifest_path.stat().st_size
        + sum(p.stat().st_size for p in runtime),
        "tokens": m.get("src_tokens", m.get("tokens")),
        "max_chars": m["max_chars"],
        "placeholder": m["placeholder"],
        "about": f"{m['about']} {_check_line(m['check'])}",
    }


def _copy_models(app, exception):
    """The exported models (and their manifests) into _static/models/ of the built site."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.builder.outdir) / MODELS_URL
    out.mkdir(parents=True, exist_ok=True)
    for path in MODELS_DIR.iterdir():
        if path.suffix in {".onnx", ".json"}:
            shutil.copy2(path, out / path.name)


def lighten_state(state: dict, outdir: Path, pathto, browser: dict | None = None) -> dict:
    """The saved widget state with each anywidget front end moved into a file of the site, and
    `browser` (from `browser_state`), if given, added to each attention explorer's state."""
    models = {}
    for model_id, model in state.get("state", {}).items():
        model = dict(model)
        attrs = dict(model.get("state", {}))
        if model.get("model_module") == "anywidget":
            own = FRONT_ENDS.get(attrs.get("_anywidget_id"), {})
            stem = re.sub(r"[^A-Za-z0-9_-]+", "-", str(attrs.get("_anywidget_id") or "anywidget")).strip("-")
            for key, suffix in (("_esm", ".js"), ("_css", ".css")):
                text = own[key].read_text(encoding="utf-8") if key in own else attrs.get(key)
                if isinstance(text, str) and text and not re.match(r"^https?://", text):
                    attrs.pop(key, None)
                    attrs[f"{key}_url"] = pathto(_write_asset(outdir, stem, suffix, text), 1)
            if browser is not None and attrs.get("_anywidget_id") in EXPLORER_IDS:
                attrs["_browser"] = browser
            model["state"] = attrs
        models[model_id] = model
    return {**state, "state": models}


def _use_loader(app, pagename, templatename, context, doctree):
    """On a page with saved widget state that the loader can draw: a light state and the loader
    instead of the HTML manager."""
    scripts = context.get("script_files")
    if not scripts:
        return
    state_script = next((s for s in scripts if s.attributes.get("type") == STATE_MIME), None)
    if state_script is None:
        return
    from myst_nb.core.render import sanitize_script_content

    state = json.loads(state_script.attributes["body"])
    unknown = sorted({f"{m.get('model_module')}.{m.get('model_name')}"
                      for m in state.get("state", {}).values() if not drawn_by_loader(m)})
    if unknown:
        LOGGER.info(f"{pagename}: widgets {', '.join(unknown)} need the Jupyter widgets HTML manager")
        return
    manager = {f"_static/{path}" for path in app.config.nb_ipywidgets_js}
    browser = None
    if pagename in BROWSER_MODELS:
        browser = browser_state(BROWSER_MODELS[pagename], context["pathto"])
    light = lighten_state(state, Path(app.builder.outdir), context["pathto"], browser)
    js = type(state_script)
    attributes = {**state_script.attributes, "body": sanitize_script_content(json.dumps(light))}
    new = []
    for script in scripts:
        if script is state_script:
            new.append(js(script.filename, priority=script.priority, **attributes))
        elif script.filename in manager:
            if not any(s.filename == LOADER for s in new):
                new.append(js(LOADER, priority=script.priority, defer="defer"))
        else:
            new.append(script)
    scripts[:] = new


# 2. Font Awesome -------------------------------------------------------------------------

FONTAWESOME_JS = re.compile(r'[ \t]*<script[^>]*\bsrc="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*></script>\n?')
# An <i> whose classes name a Font Awesome style (fa, fas, far, fab) or icon (fa-...), and that is
# not already hidden from screen readers.
ICON = re.compile(r'<i\b(?![^>]*\baria-hidden=)([^>]*\bclass="(?:[^"]*\s)?(?:fa[bsr]?|fa-[\w-]+)(?:\s[^"]*)?"[^>]*)>')


def strip_fontawesome_js(html: str) -> str:
    """A page without the Font Awesome script, its icon <i> elements hidden from screen readers."""
    html = FONTAWESOME_JS.sub("", html)
    return ICON.sub(r'<i aria-hidden="true"\1>', html)


def _strip_fontawesome(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.builder.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        light = strip_fontawesome_js(text)
        if light != text:
            page.write_text(light, encoding="utf-8")


def _add_static_path(app, config):
    static = str(HERE / "static")
    if static not in config.html_static_path:
        config.html_static_path.append(static)


def setup(app):
    app.connect("config-inited", _add_static_path)
    # After myst-nb (priority 500) added the page's widget state and scripts.
    app.connect("html-page-context", _use_loader, priority=600)
    app.connect("build-finished", _strip_fontawesome)
    app.connect("build-finished", _copy_models)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
