"""Copy the JavaScript the built site serves itself into book/_vendor/ (the site's no-CDN folder).

Run by `make book` after `npm ci --prefix scripts/site_js`. book/_vendor/ is listed in
_config.yml as a Sphinx static path, so its contents land in _build/html/_static/:

  mathjax/                    MathJax 3 (es5 build: the tex-mml-chtml bundle and what it loads lazily)
  requirejs/require.js        the AMD loader the Jupyter widgets HTML manager expects
  jupyter-widgets/embed-amd.js  the HTML manager that renders saved widget state, with its fonts
                              (only for a page whose widgets book/_ext/static_widgets.py's small
                              loader cannot draw; today no page loads it)
  jupyter-widgets/widgets-config.js  tells require.js where the modules below are
  jupyter-widgets/anywidget/index.js  anywidget's front end, from the installed Python package
  onnxruntime/                onnxruntime-web's WebAssembly build (ort.wasm.min.mjs, the .mjs glue
                              and the .wasm it loads; MIT licence, named in each file's header): the attention explorer
                              imports it only when a reader runs a model in the browser

Nothing here is committed; delete book/_vendor/ and run `make book` to make it again.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "scripts" / "site_js" / "node_modules"
VENDOR = ROOT / "book" / "_vendor"
#: What the attention explorer's browser runs load (book/_ext/static_widgets.py adds up their sizes).
ONNXRUNTIME_FILES = ("dist/ort.wasm.min.mjs", "dist/ort-wasm-simd-threaded.mjs", "dist/ort-wasm-simd-threaded.wasm")


def copy_tree(src: Path, dst: Path, skip_suffixes: tuple[str, ...] = ()) -> None:
    shutil.copytree(src, dst, ignore=lambda _d, names: [n for n in names if n.endswith(skip_suffixes)])


def main() -> int:
    if not NODE_MODULES.is_dir():
        print(f"missing {NODE_MODULES}: run `npm ci --prefix scripts/site_js` first", file=sys.stderr)
        return 1
    import anywidget  # the Python package ships its classic-notebook (AMD) front end

    anywidget_js = Path(anywidget.__file__).parent / "nbextension" / "index.js"
    if not anywidget_js.is_file():
        print(f"anywidget's front end is not where expected: {anywidget_js}", file=sys.stderr)
        return 1

    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    VENDOR.mkdir(parents=True)

    copy_tree(NODE_MODULES / "mathjax" / "es5", VENDOR / "mathjax")

    (VENDOR / "requirejs").mkdir()
    shutil.copy2(NODE_MODULES / "requirejs" / "require.js", VENDOR / "requirejs" / "require.js")

    widgets = VENDOR / "jupyter-widgets"
    dist = NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist"
    widgets.mkdir()
    shutil.copy2(dist / "embed-amd.js", widgets / "embed-amd.js")
    # The fonts (Font Awesome, for widget icons) are loaded relative to embed-amd.js.
    for font in dist.iterdir():
        if font.suffix in {".woff2", ".woff", ".ttf", ".eot", ".svg"}:
            shutil.copy2(font, widgets / font.name)
    shutil.copy2(ROOT / "scripts" / "site_js" / "widgets-config.js", widgets / "widgets-config.js")
    (widgets / "anywidget").mkdir()
    shutil.copy2(anywidget_js, widgets / "anywidget" / "index.js")

    # onnxruntime-web: only the WebAssembly CPU build (no WebGPU, WebGL or JSPI variants).
    ort = VENDOR / "onnxruntime"
    ort.mkdir()
    for name in ONNXRUNTIME_FILES:
        shutil.copy2(NODE_MODULES / "onnxruntime-web" / name, ort / Path(name).name)

    size = sum(f.stat().st_size for f in VENDOR.rglob("*") if f.is_file())
    print(f"vendored the site's JavaScript into {VENDOR.relative_to(ROOT)}/ ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
