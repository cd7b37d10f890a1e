"""Check the attention explorer live, with a kernel, in JupyterLab (and Notebook 7 if installed).

    .venv/bin/python scripts/check_explorer_live.py            # JupyterLab 4
    .venv/bin/python scripts/check_explorer_live.py --notebook # Notebook 7 (needs `notebook`)

Not part of `make test` or CI (it starts a Jupyter server and a kernel; about a minute). It
writes a small notebook into a temporary folder, starts the server on 127.0.0.1 with a random
token, opens the notebook in headless Chromium (see scripts/sitetools.py), runs every cell, and checks:
three explorer views render (one widget shown twice, and another); the text box appears only
for the explorer that has a text callback; choosing a map in one view shows it in the other
view and in the kernel (explorer.kind, explorer.layer); typing a new input and pressing Enter
re-runs the model and redraws both views; no console error; nothing requested from another
host. Screenshots go to artifacts/explorer/. The server is stopped at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from sitetools import launch_chromium

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "artifacts" / "explorer"

CELLS = [
    """import torch
import transformer_lib as tl
from transformer_lib import book
book.setup(seed=0, threads=1)
words = "the cat sat on a mat dog ran".split()
vocab = {w: i + 4 for i, w in enumerate(words)}
config = tl.TransformerConfig(src_vocab=16, tgt_vocab=16, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
model = tl.Transformer(config)

def encode(text):
    toks = [w for w in text.lower().split() if w in vocab] or ["the"]
    return torch.tensor([[vocab[w] for w in toks]]), torch.tensor([[1, 5, 6]]), toks, ["<bos>", "le", "chat"]

explorer = book.AttentionExplorer.from_model(model, *encode("the cat sat"), encode_fn=encode,
                                           text_placeholder="words from: " + " ".join(words))
explorer""",
    "explorer",
    "book.AttentionExplorer(torch.rand(2, 3, 3).softmax(-1), tokens=['x', 'y', 'z'])",
]

KERNEL_STATE = """async () => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  let out = "";
  const future = kernel.requestExecute(
    {code: "print(explorer.kind, explorer.layer, explorer.data['kinds'][2]['keys'])"});
  future.onIOPub = (msg) => { if (msg.header.msg_type === "stream") out += msg.content.text; };
  await future.done;
  return out.trim();
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(folder: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in CELLS]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    (folder / "live.ipynb").write_text(json.dumps(nb))


def check(base: str, path: str, name: str) -> list[str]:
    from playwright.sync_api import sync_playwright

    problems, errors, foreign = [], [], []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        local = (base, "data:", "blob:", "ws://127.0.0.1")
        page.on("request", lambda r: r.url.startswith(local) or foreign.append(r.url))
        page.on("console", lambda m: m.type == "error" and errors.append(m.text[:300]))
        page.on("pageerror", lambda e: errors.append(str(e)[:300]))
        page.goto(base + path, wait_until="domcontentloaded")
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session", timeout=120_000)
        page.wait_for_timeout(2000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function("() => document.querySelectorAll('.tlx table.tlx-heat td[data-weight]').length > 0"
                               " && document.querySelectorAll('.tlx').length >= 3", timeout=120_000)
        roots = page.locator(".tlx")
        if roots.count() != 3:
            problems.append(f"{roots.count()} explorer views, expected 3")
        page.wait_for_function("() => !document.querySelector('.tlx form.tlx-input').hidden", timeout=30_000)
        shown = [not roots.nth(i).locator("form.tlx-input").is_hidden() for i in range(3)]
        if shown != [True, True, False]:
            problems.append(f"text boxes shown {shown}, expected [True, True, False]")
        first, second = roots.nth(0), roots.nth(1)
        first.locator("select.tlx-kind").select_option("cross")
        first.locator("select.tlx-layer").select_option("1")
        page.wait_for_timeout(500)
        if (second.get_attribute("data-kind"), second.get_attribute("data-layer")) != ("cross", "1"):
            problems.append("the second view of the widget did not follow the first")
        first.locator("input.tlx-text-input").fill("a dog ran on the mat")
        first.locator("input.tlx-text-input").press("Enter")
        page.wait_for_function("() => document.querySelectorAll('.tlx table.tlx-heat thead th[title=dog]').length >= 2",
                               timeout=30_000)
        kernel = page.evaluate(KERNEL_STATE)
        if kernel != "cross 1 ['a', 'dog', 'ran', 'on', 'the', 'mat']":
            problems.append(f"the kernel sees {kernel!r}")
        first.locator('td[data-row="1"][data-col="2"]').hover()
        OUT.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(OUT / f"live_{name}.png"))
        browser.close()
    # Notebook 7 run from a --target install lacks some settings schemas: not the explorer's errors.
    harmless = ("chema", "Failed to load resource", "layout restorer")
    errors = [e for e in errors if not any(h in e for h in harmless)]
    if errors:
        problems.append(f"console errors: {errors}")
    if foreign:
        problems.append(f"requests to other hosts: {foreign}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebook", action="store_true", help="Notebook 7 instead of JupyterLab")
    args = parser.parse_args()
    port, token = free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_notebook(folder)
        app = ["-m", "notebook"] if args.notebook else ["-m", "jupyterlab"]
        expose = ("--JupyterNotebookApp.expose_app_in_browser=True" if args.notebook
                  else "--LabApp.expose_app_in_browser=True")
        log = open(folder / "server.log", "w")
        server = subprocess.Popen(
            [sys.executable, *app, "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}", expose],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "JUPYTER_PLATFORM_DIRS": "1"})
        try:
            for _ in range(60):
                try:
                    urllib.request.urlopen(f"{base}/api?token={token}", timeout=2)
                    break
                except OSError:
                    time.sleep(1)
            path = ("/notebooks/live.ipynb" if args.notebook else "/lab/tree/live.ipynb") + f"?token={token}"
            name = "notebook7" if args.notebook else "jupyterlab"
            problems = check(base, path, name)
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print(f"OK: the explorer works live in {'Notebook 7' if args.notebook else 'JupyterLab'} "
          f"(screenshot: {OUT.relative_to(ROOT)}/live_{name}.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
