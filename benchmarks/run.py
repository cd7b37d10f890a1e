"""The book's performance report: writes benchmarks/RESULTS.md. Not a test; run it by hand
(`make bench`, about 25 minutes on 2 cores) on a quiet machine, and commit the report.

    python benchmarks/run.py                    # everything, into benchmarks/RESULTS.md
    python benchmarks/run.py --quick            # small settings, to try the script (~2 min)
    python benchmarks/run.py --only notebooks   # one part: notebooks, attention or site
    python benchmarks/run.py --resume           # go on after an interruption
    python benchmarks/run.py --page-weights     # only the weight of each page of _build/html

What it measures, and how:

1. Chapters. Each chapters/*.ipynb is run top to bottom in a fresh kernel (nbclient, as
   `make notebooks` does, but the notebook file is not written), each from its own wrapper
   process. Wall time: from starting the kernel to the end of the last cell. Peak memory: the
   kernel's peak resident set (VmHWM in /proc, read just before it is shut down) and the peak
   of the summed RSS of the whole process tree under the wrapper, polled every 20 ms; the
   larger is reported. Budgets: 90 s a chapter, 10 minutes in all, 1.5 GB a chapter.

2. Attention, forward plus backward (batch 32, 8 heads, d_model 128 and 512, lengths 64 to
   2048, float32, torch threads = number of cores): transformer_lib.MultiHeadAttention
   (fused=False: explicit scores and softmax; fused=True: PyTorch's fused kernel) against
   torch.nn.MultiheadAttention (batch_first, need_weights=False and True) and the bare kernel
   torch.nn.functional.scaled_dot_product_attention on (B, h, T, d_k) tensors (no
   projections: a floor, not a like-for-like module). Each configuration runs in a fresh
   subprocess. Time: one warm-up step, then the best of the timed steps: at least 2, and up
   to 30 while they take less than 6 s in all; the best is the least disturbed by other
   processes on the machine. Memory: the extra peak
   resident memory of a step over what the process held before it (inputs and parameters
   included in the baseline): the kernel's peak counter (VmHWM) is reset through
   /proc/self/clear_refs just before the warm-up step and read after it. tracemalloc is no
   use here (PyTorch's CPU allocations bypass Python's allocator). A configuration whose
   estimated peak exceeds 8 GB is skipped and listed as such.

3. The site. Time to build it from the committed outputs (`jupyter-book build --all`, the
   command of `make book`, into a temporary folder so the working tree's _build/ is left
   alone; the environment and the vendored JavaScript must exist, so run `make book` once
   first), and the weight of each page as a browser with an empty cache loads it (HTML plus
   every file it requests, counted by headless Chromium from a local server), raw and as a
   static host with gzip sends it (text files gzip -6, fonts and images as they are); the
   heaviest page's budget is 1.5 MB compressed. `--page-weights [SITE]` measures an already
   built site and prints the table (tests/browser/test_page_weight.py checks the budget with
   the same code).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import sitetools  # noqa: E402  (Chromium, the local server, the kernel: shared with the tests)
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
# Measurements so far, saved after each one, so that `--resume` goes on after an interruption.
PROGRESS = ROOT / "artifacts" / "bench-progress.json"

# Budgets (on the 2-core machine the book targets). Missed budgets are reported, not relaxed.
CHAPTER_SECONDS = 90
BOOK_SECONDS = 600
CHAPTER_BYTES = 1.5e9
FUSED_RATIO = 1.1  # the fused path against torch.nn.MultiheadAttention(need_weights=False)
SKIP_BYTES = 8e9

BATCH, HEADS = 32, 8
D_MODELS = (128, 512)
LENGTHS = (64, 128, 256, 512, 1024, 2048)
IMPLEMENTATIONS = {
    "tl_explicit": "transformer_lib, fused=False",
    "tl_fused": "transformer_lib, fused=True",
    "torch_mha": "nn.MultiheadAttention, need_weights=False",
    "torch_mha_weights": "nn.MultiheadAttention, need_weights=True",
    "sdpa": "F.scaled_dot_product_attention (kernel only)",
}
GB = 1e9
MB = 1e6
PAGE_GZIP_BYTES = 1.5 * MB  # the heaviest page, compressed (issue 14)


# Measurement helpers ------------------------------------------------------------------------


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def read_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, VmHWM, ... of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        m = re.match(r"(Vm\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class TreePeak(threading.Thread):
    """Polls the summed RSS of this process's descendants; keeps the peak."""

    def __init__(self, interval: float = 0.02):
        super().__init__(daemon=True)
        import psutil

        self.me = psutil.Process()
        self.interval = interval
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            total = 0
            for child in self.me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except Exception:  # it ended between listing and reading
                    pass
            self.peak = max(self.peak, total)
            self.stop.wait(self.interval)


def machine() -> dict:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) * 1024
    except (OSError, AttributeError):
        pass
    os_name = platform.platform()
    try:
        os_name = re.search(r'PRETTY_NAME="([^"]+)"', Path("/etc/os-release").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem / 2**30, 1),
        "os": os_name,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


# 1. Chapters --------------------------------------------------------------------------------


def execute_notebook_child(path: str) -> None:
    """In a fresh wrapper process: run one notebook in a fresh kernel; print JSON."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=sitetools.this_interpreter_kernels())
    client = NotebookClient(nb, km=km, timeout=1200, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(Path(path).parent)}})
    poll = TreePeak()
    poll.start()
    start = time.perf_counter()
    kernel_hwm, error = 0, None
    try:
        client.execute()  # a kernel manager it was handed is left running: read its peak first
    except Exception as err:  # a failing cell: report it, with what was measured
        lines = str(err).strip().splitlines()
        error = f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
    elapsed = time.perf_counter() - start
    try:
        kernel_hwm = read_status(km.provisioner.process.pid).get("VmHWM", 0)
    except Exception:
        kernel_hwm = 0
    poll.stop.set()
    poll.join()
    if km.has_kernel:
        km.shutdown_kernel(now=True)
    print(json.dumps({
        "seconds": elapsed,
        "kernel_peak_bytes": kernel_hwm,
        "tree_peak_bytes": poll.peak,
        "error": error,
    }))


def bench_notebooks(paths: list[Path], done: dict, save) -> list[dict]:
    rows = []
    for path in paths:
        if path.name in done:
            rows.append(done[path.name])
            print(f"  {path.relative_to(ROOT)}: measured before", flush=True)
            continue
        print(f"  {path.relative_to(ROOT)} ...", end=" ", flush=True)
        load = load_average()[0]
        proc = subprocess.run([sys.executable, str(SCRIPT), "--execute-notebook", str(path)],
                              capture_output=True, text=True, cwd=path.parent)
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {"seconds": float("nan"), "kernel_peak_bytes": 0, "tree_peak_bytes": 0,
                   "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
        row["notebook"] = path.name
        row["peak_bytes"] = max(row["kernel_peak_bytes"], row["tree_peak_bytes"])
        row["load"] = load
        rows.append(row)
        done[path.name] = row
        save()
        print(f"{row['seconds']:.1f} s, {row['peak_bytes'] / GB:.2f} GB" + (f"  ERROR {row['error']}" if row["error"] else ""), flush=True)
    return rows


# 2. Attention -------------------------------------------------------------------------------


def estimate_bytes(impl: str, d_model: int, length: int) -> float:
    """Rough peak extra memory of one forward+backward step, to skip what would not fit."""
    linear = 16 * BATCH * length * d_model * 4  # projections, heads, outputs and their grads
    scores = BATCH * HEADS * length * length * 4
    if impl in ("tl_explicit", "torch_mha_weights"):
        return linear + 3 * scores  # scores, softmax weights and their gradient, kept at once
    return linear


def attention_child(impl: str, d_model: int, length: int, threads: int, max_reps: int, max_seconds: float) -> None:
    """In a fresh process: time and measure one configuration; print JSON."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import transformer_lib as tl

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d_k = d_model // HEADS
    if impl == "sdpa":
        q, k, v = (torch.randn(BATCH, HEADS, length, d_k, requires_grad=True) for _ in range(3))
        params = [q, k, v]

        def step():
            F.scaled_dot_product_attention(q, k, v).sum().backward()
    else:
        x = torch.randn(BATCH, length, d_model, requires_grad=True)
        if impl.startswith("tl_"):
            module = tl.MultiHeadAttention(d_model, HEADS, fused=impl == "tl_fused")

            def forward():
                return module(x, x, x), None
        else:
            module = nn.MultiheadAttention(d_model, HEADS, batch_first=True)
            need_weights = impl == "torch_mha_weights"

            def forward():
                return module(x, x, x, need_weights=need_weights)

        module.train()
        params = [x, *module.parameters()]

        def step():
            out, weights = forward()  # the weights (need_weights=True) stay alive, as for a caller
            out.sum().backward()
            del weights

    def clear():
        for p in params:
            p.grad = None

    clear()
    baseline = read_status()["VmRSS"]
    exact = reset_peak_rss()
    if not exact:
        import resource
    start = time.perf_counter()
    step()
    warmup = time.perf_counter() - start
    status = read_status()
    peak = status["VmHWM"] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    clear()
    times = []
    begun = time.perf_counter()
    # At least 2 timed steps; more while they are short (up to max_reps within max_seconds), so
    # that a fast configuration's best is taken over many steps and a burst of other work on
    # the machine does not decide it.
    while len(times) < 2 or (len(times) < max_reps and time.perf_counter() - begun < max_seconds):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
        clear()
    print(json.dumps({
        "best_seconds": min(times), "median_seconds": statistics.median(times), "reps": len(times),
        "warmup_seconds": warmup, "extra_peak_bytes": max(peak - baseline, 0), "exact_peak": exact,
    }))


def bench_attention(lengths, d_models, threads: int, max_reps: int, max_seconds: float, done: dict, save) -> list[dict]:
    rows = []
    for d_model in d_models:
        for length in lengths:
            for impl in IMPLEMENTATIONS:
                key = f"{impl}/{d_model}/{length}"
                label = f"  d_model={d_model} T={length} {impl}"
                if key in done:
                    rows.append(done[key])
                    print(f"{label}: measured before", flush=True)
                    continue
                row = {"impl": impl, "d_model": d_model, "length": length,
                       "estimate_bytes": estimate_bytes(impl, d_model, length), "load": load_average()[0]}
                if row["estimate_bytes"] > SKIP_BYTES:
                    row["skipped"] = f"estimated {row['estimate_bytes'] / GB:.1f} GB > {SKIP_BYTES / GB:.0f} GB"
                    print(f"{label}: skipped ({row['skipped']})", flush=True)
                    rows.append(row)
                    continue
                proc = subprocess.run(
                    [sys.executable, str(SCRIPT), "--attention-config",
                     json.dumps([impl, d_model, length, threads, max_reps, max_seconds])],
                    capture_output=True, text=True, cwd=ROOT,
                )
                try:
                    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                except (IndexError, json.JSONDecodeError):
                    row["error"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
                    print(f"{label}: ERROR {row['error']}", flush=True)
                else:
                    print(f"{label}: {row['best_seconds'] * 1000:.1f} ms, +{row['extra_peak_bytes'] / MB:.0f} MB", flush=True)
                rows.append(row)
                done[key] = row
                save()
    return rows


# 3. The site --------------------------------------------------------------------------------


def bench_site() -> dict:
    jb = ROOT / ".venv" / "bin" / "jupyter-book"
    if not jb.exists():
        jb = Path(shutil.which("jupyter-book") or "jupyter-book")
    if not (ROOT / "book" / "_vendor" / ".vendored").exists():
        return {"error": "book/_vendor/ is missing: run `make book` once first"}
    out = Path(tempfile.mkdtemp(prefix="bench-site-"))
    try:
        start = time.perf_counter()
        proc = subprocess.run([str(jb), "build", "--all", "--warningiserror", "--nitpick", "--keep-going",
                               "--path-output", str(out), "."], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode:
            return {"error": f"the build failed: {proc.stdout[-500:]}{proc.stderr[-500:]}", "build_seconds": seconds}
        return {"build_seconds": seconds, "pages": page_weights(out / "_build" / "html")}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# What a static host compresses (gzip) when it serves a file: text. Fonts (woff2) and images
# are compressed already and are sent as they are.
COMPRESSED_SUFFIXES = {".html", ".js", ".mjs", ".css", ".svg", ".json", ".txt", ".xml", ".map", ".ttf", ".eot", ".otf"}
GZIP_LEVEL = 6  # gzip's default, and what nginx or Apache are usually set to


def transfer_bytes(path: Path) -> tuple[int, int]:
    """(raw, compressed) bytes of one file as a static host with gzip sends it: text files
    compressed with gzip -6, others as they are."""
    import gzip

    data = path.read_bytes()
    if path.suffix.lower() in COMPRESSED_SUFFIXES:
        return len(data), len(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))
    return len(data), len(data)


def toc_pages() -> list[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]


def page_weight(browser, base: str, site: Path, doc: str) -> dict:
    """What a browser with an empty cache receives for one page: the HTML and every file it
    requests (scripts, styles, fonts, images, and what those load in turn), counted raw and as
    a static host with gzip sends them (`transfer_bytes`)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    files: dict[str, tuple[int, int]] = {}

    def on_response(response):
        # The bytes served are the file's: the local server sends files as they are.
        if response.url.startswith(base) and response.status == 200:
            path = site / urllib.parse.unquote(urllib.parse.urlparse(response.url).path.lstrip("/"))
            if path.is_dir():
                path = path / "index.html"
            if path.is_file():
                files[response.url.split("?")[0].split("#")[0]] = transfer_bytes(path)

    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith((base, "data:", "blob:")) else route.abort())
    page.on("response", on_response)
    try:
        page.goto(base + doc + ".html", wait_until="networkidle")
        page.wait_for_timeout(1000)
    finally:
        context.close()
    html_raw, html_gz = files.get(base + doc + ".html", (0, 0))
    largest = sorted(files.items(), key=lambda kv: -kv[1][1])[:3]
    return {"page": doc, "html_bytes": html_raw, "html_gzip_bytes": html_gz,
            "total_bytes": sum(raw for raw, _ in files.values()),
            "gzip_bytes": sum(gz for _, gz in files.values()), "files": len(files),
            "largest": [(u[len(base):], raw) for u, (raw, _) in sorted(files.items(), key=lambda kv: -kv[1][0])[:3]],
            "largest_gzip": [(u[len(base):], gz) for u, (_, gz) in largest],
            "urls": sorted(u[len(base):] for u in files)}


def page_weights(site: Path) -> list[dict]:
    """Bytes a browser receives for each page of _toc.yml (HTML and every file it requests),
    raw and gzip-compressed."""
    from playwright.sync_api import sync_playwright

    with sitetools.serve(site) as base:
        with sync_playwright() as p:
            browser = sitetools.launch_chromium(p)
            try:
                return [page_weight(browser, base, site, doc) for doc in toc_pages()]
            finally:
                browser.close()


def weights_table(pages: list[dict]) -> list[str]:
    """The per-page table of the report, heaviest (compressed) first."""
    lines = ["| page | HTML (gzip) | HTML + assets, raw | HTML + assets, gzip | files |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in sorted(pages, key=lambda r: -r.get("gzip_bytes", r["total_bytes"])):
        lines.append(f"| {r['page']} | {r.get('html_gzip_bytes', 0) / MB:.2f} MB | {fmt_mb(r['total_bytes'])}"
                     f" | {r.get('gzip_bytes', 0) / MB:.2f} MB | {r['files']} |")
    return lines


def print_page_weights(site: Path) -> int:
    """`run.py --page-weights [SITE]`: the weight of each page of an already built site."""
    if not (site / "index.html").is_file():
        print(f"{site} has no built site: run `make book` first", file=sys.stderr)
        return 1
    pages = page_weights(site)
    print("\n".join(weights_table(pages)))
    biggest = max(pages, key=lambda r: r["gzip_bytes"])
    print(f"heaviest page: {biggest['page']}, {biggest['gzip_bytes'] / MB:.2f} MB gzip-compressed"
          f" ({fmt_mb(biggest['total_bytes'])} raw, {biggest['files']} files); largest compressed files: "
          + ", ".join(f"{u} {n / MB:.2f} MB" for u, n in biggest["largest_gzip"]))
    return 0


# The report ---------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "within budget" if ok else "**over budget**"


def fmt_gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


def fmt_mb(n: float) -> str:
    return f"{n / MB:,.0f} MB" if n >= 10 * MB else f"{n / MB:.1f} MB"


def write_report(info: dict, notebooks, attention, site, path: Path, quick: bool) -> None:
    lines = ["# Performance report", ""]
    lines += [
        f"Written by `benchmarks/run.py`{' --quick (small settings: not the real report)' if quick else ''}"
        f" on {info['date']}. Re-run it with `make bench` (about 25 minutes) on a quiet machine.",
        "",
        "## The machine",
        "",
        f"- CPU: {info['machine']['cpu']}, {info['machine']['cores']} cores; memory {info['machine']['memory_gb']} GiB",
        f"- {info['machine']['os']} (Linux {info['machine']['kernel']}), Python {info['machine']['python']}, torch {info['machine']['torch']}",
        f"- Load average (1, 5, 15 min) when the run started: {', '.join(f'{x:.2f}' for x in info['load_start'])};"
        f" when it ended: {', '.join(f'{x:.2f}' for x in info['load_end'])}.",
    ]
    if info.get("loads"):
        loads = sorted(info["loads"])
        lines.append(f"- 1-minute load average as each measurement began: median {statistics.median(loads):.2f},"
                     f" highest {loads[-1]:.2f} (each measurement's is in RESULTS.json).")
    if info.get("resumed"):
        lines.append(f"- The run was interrupted and resumed ({', '.join(info['resumed'])}); measurements already"
                     " taken were kept.")
    if info.get("load_note"):
        lines.append(f"- {info['load_note']}")
    lines.append(f"- Total run time of this script: {info['seconds'] / 60:.1f} minutes.")
    lines.append("")

    if notebooks is not None:
        total = sum(r["seconds"] for r in notebooks)
        worst = max((r["peak_bytes"] for r in notebooks), default=0)
        over = [r for r in notebooks if not r["seconds"] <= CHAPTER_SECONDS or r["peak_bytes"] > CHAPTER_BYTES or r["error"]]
        lines += [
            "## The chapters",
            "",
            "Each notebook run top to bottom in a fresh kernel (its own threads setting: the chapters call",
            "`book.setup(threads=1)`). Time: kernel start to the end of the last cell. Peak memory: the larger",
            "of the kernel's peak resident set and the polled peak of the kernel's process tree.",
            "",
            "| chapter | wall time | peak memory | budget (90 s, 1.5 GB) |",
            "| --- | ---: | ---: | --- |",
        ]
        for r in notebooks:
            ok = r["seconds"] <= CHAPTER_SECONDS and r["peak_bytes"] <= CHAPTER_BYTES and not r["error"]
            status = verdict(ok) + (f": failed, {r['error']}" if r["error"] else "")
            lines.append(f"| {r['notebook']} | {r['seconds']:.1f} s | {fmt_gb(r['peak_bytes'])} | {status} |")
        lines += [
            f"| **all {len(notebooks)} chapters** | **{total:.0f} s ({total / 60:.1f} min)** | **max {fmt_gb(worst)}** | {verdict(total <= BOOK_SECONDS)} (10 min in all) |",
            "",
        ]
        if over:
            lines.append("Missed: " + "; ".join(
                f"{r['notebook']} ({r['seconds']:.0f} s, {fmt_gb(r['peak_bytes'])}{', ' + r['error'] if r['error'] else ''})" for r in over) + ".")
        else:
            lines.append("Every chapter is within its time and memory budget.")
        lines.append("")

    if attention is not None:
        lines += attention_section(attention, info)

    if site is not None:
        lines += ["## The site", ""]
        if "error" in site:
            lines += [f"Not measured: {site['error']}", ""]
        else:
            pages = site["pages"]
            biggest = max(pages, key=lambda r: r.get("gzip_bytes", r["total_bytes"]))
            typical = sorted(pages, key=lambda r: r.get("gzip_bytes", r["total_bytes"]))[len(pages) // 2]
            lines += [
                f"- Build from the committed outputs (`jupyter-book build --all`, as `make book` runs it; "
                f"notebooks are not executed): **{site['build_seconds']:.0f} s**.",
                f"- Heaviest page: **{biggest['page']}**, **{biggest.get('gzip_bytes', 0) / MB:.2f} MB compressed**"
                f" ({verdict(biggest.get('gzip_bytes', 0) <= PAGE_GZIP_BYTES)}: {PAGE_GZIP_BYTES / MB:.1f} MB),"
                f" {fmt_mb(biggest['total_bytes'])} raw, in {biggest['files']} files; its largest files, compressed: "
                + ", ".join(f"`{u}` {n / MB:.2f} MB" for u, n in biggest.get("largest_gzip", biggest["largest"])) + ".",
                f"- Median page: {typical['page']}, {typical.get('gzip_bytes', 0) / MB:.2f} MB compressed.",
                "",
                "Bytes a browser with an empty cache receives for each page: the HTML plus every file it",
                "requests, counted in headless Chromium from a local server; raw, and as a static host",
                f"with gzip sends them (text files compressed with gzip -{GZIP_LEVEL}, fonts and images as they",
                "are). A reader's cache makes later pages lighter, as they share the theme, fonts and MathJax.",
                "`python benchmarks/run.py --page-weights` measures an already built site (`_build/html`).",
                "",
            ]
            lines += weights_table(pages)
            lines.append("")
    path.write_text("\n".join(lines).rstrip() + "\n")


def attention_section(rows: list[dict], info: dict) -> list[str]:
    by = {(r["impl"], r["d_model"], r["length"]): r for r in rows}
    lengths = sorted({r["length"] for r in rows})
    d_models = sorted({r["d_model"] for r in rows})
    out = [
        "## Attention: transformer_lib against PyTorch",
        "",
        f"Forward plus backward of one self-attention call, batch {BATCH}, {HEADS} heads, float32, "
        f"{info['threads']} threads. Time: the best of the timed steps after a warm-up: at least 2, and"
        f" more, up to {info['max_reps']}, while they take less than {info['max_seconds']:.0f} s in all. Memory: extra peak resident memory"
        " of the warm-up step over the process's memory before it (fresh process per configuration; peak"
        " counter reset through /proc/self/clear_refs; tracemalloc does not see PyTorch's allocations).",
        "Ratios are to `torch.nn.MultiheadAttention(need_weights=False)`, the like-for-like module"
        " (projections included); the bare `scaled_dot_product_attention` kernel has no projections and"
        " is a floor.",
        "",
    ]
    goal_misses = []
    for d_model in d_models:
        out += [f"### d_model = {d_model}", "", "Time per step (ms), and ratio to nn.MultiheadAttention(need_weights=False):", ""]
        out += ["| T | " + " | ".join(IMPLEMENTATIONS.values()) + " |", "| ---: |" + " ---: |" * len(IMPLEMENTATIONS)]
        for length in lengths:
            ref = by.get(("torch_mha", d_model, length), {})
            cells = []
            for impl in IMPLEMENTATIONS:
                r = by.get((impl, d_model, length))
                if r is None:
                    cells.append("")
                elif "skipped" in r:
                    cells.append(f"skipped ({r['skipped']})")
                elif "error" in r:
                    cells.append(f"error: {r['error'][:60]}")
                else:
                    cell = f"{r['best_seconds'] * 1000:,.1f}"
                    if "best_seconds" in ref and impl != "torch_mha":
                        cell += f" ({r['best_seconds'] / ref['best_seconds']:.2f}x)"
                    cells.append(cell)
            out.append(f"| {length} | " + " | ".join(cells) + " |")
        out += ["", "Extra peak memory of a step, and ratio to nn.MultiheadAttention(need_weights=False):", ""]
        out += ["| T | " + " | ".join(IMPLEMENTATIONS.values()) + " |", "| ---: |" + " ---: |" * len(IMPLEMENTATIONS)]
        for length in lengths:
            ref = by.get(("torch_mha", d_model, length), {})
            cells = []
            for impl in IMPLEMENTATIONS:
                r = by.get((impl, d_model, length))
                if r is None or "extra_peak_bytes" not in r:
                    cells.append("skipped" if r and "skipped" in r else "")
                    continue
                cell = fmt_mb(r["extra_peak_bytes"])
                if ref.get("extra_peak_bytes") and impl != "torch_mha":
                    cell += f" ({r['extra_peak_bytes'] / ref['extra_peak_bytes']:.2f}x)"
                cells.append(cell)
            out.append(f"| {length} | " + " | ".join(cells) + " |")
        out.append("")
        for length in lengths:
            fused, ref = by.get(("tl_fused", d_model, length), {}), by.get(("torch_mha", d_model, length), {})
            if "best_seconds" in fused and "best_seconds" in ref:
                t = fused["best_seconds"] / ref["best_seconds"]
                m = fused["extra_peak_bytes"] / max(ref["extra_peak_bytes"], 1)
                if t > FUSED_RATIO:
                    goal_misses.append(f"time {t:.2f}x at d_model {d_model}, T {length}")
                if m > FUSED_RATIO:
                    goal_misses.append(f"memory {m:.2f}x at d_model {d_model}, T {length}"
                                       f" ({fmt_mb(fused['extra_peak_bytes'])} against {fmt_mb(ref['extra_peak_bytes'])})")
    out += growth_section(by, d_models, lengths)
    out += ["### The goal: the fused path within 1.1x of PyTorch's time and memory at every length", ""]
    if goal_misses:
        out.append("**Missed** at: " + "; ".join(goal_misses) + ".")
    else:
        out.append("Met at every measured length and both widths.")
    out.append("")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        out += ["### Skipped configurations", "",
                "Configurations whose estimated peak memory exceeds 8 GB were not run (the estimate counts"
                " three B x h x T x T float32 tensors, the scores, the softmax weights and their gradient, plus"
                " the linear-size activations):", ""]
        out += [f"- {IMPLEMENTATIONS[r['impl']]}, d_model {r['d_model']}, T {r['length']}: {r['skipped']}" for r in skipped]
        out.append("")
    out += explicit_explanation(by, d_models, lengths)
    return out


def growth_section(by, d_models, lengths) -> list[str]:
    """How time and memory grow with length: the exponent k of a power law cost ~ T^k, fitted
    (least squares on the logs) over the lengths from 256 up that each configuration ran."""
    import math

    def slope(xs, ys):
        lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-12)) for y in ys]
        mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
        return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)

    out = ["### How cost grows with length", "",
           "Growth exponent k in cost ~ T^k, fitted over the lengths from 256 up that each configuration"
           " ran (k = 2: quadratic in T, k = 1: linear). At short lengths the projections, linear in T,"
           " dominate every implementation.", "",
           "| implementation | d_model | time k | memory k | lengths |", "| --- | ---: | ---: | ---: | --- |"]
    for d_model in d_models:
        for impl, name in IMPLEMENTATIONS.items():
            ran = [L for L in lengths if L >= 256 and "best_seconds" in by.get((impl, d_model, L), {})]
            if len(ran) < 2:
                continue
            kt = slope(ran, [by[(impl, d_model, L)]["best_seconds"] for L in ran])
            km = slope(ran, [by[(impl, d_model, L)]["extra_peak_bytes"] for L in ran])
            out.append(f"| {name} | {d_model} | {kt:.2f} | {km:.2f} | {ran[0]} to {ran[-1]} |")
    out.append("")
    return out


def explicit_explanation(by, d_models, lengths) -> list[str]:
    out = ["### Why the explicit path costs more", "",
           "`MultiHeadAttention(fused=False)` computes the paper's equation as written: the scores"
           " Q K^T / sqrt(d_k), a (B, h, T, T) tensor, then their softmax, another (B, h, T, T) tensor,"
           " then the weighted sum. Autograd keeps the softmax output for the backward pass, and the"
           " backward pass makes (B, h, T, T) gradients of the weights and of the scores, so the"
           " step's memory grows with T^2: each such tensor is B x h x T^2 x 4 bytes"
           f" ({BATCH} x {HEADS} x T^2 x 4: 4.3 MB at T = 64, 1.07 GB at T = 1024, 4.3 GB at T = 2048)."
           " Its time is dominated by writing and reading those tensors (the softmax and its backward"
           " are memory-bound) rather than by arithmetic. The fused kernel (scaled_dot_product_attention,"
           " a flash-attention style kernel on CPU) walks over blocks of keys with a running softmax and"
           " never stores the T x T matrix; the backward pass recomputes the blocks, so memory stays"
           " linear in T. nn.MultiheadAttention(need_weights=True) has to return the (averaged) weights,"
           " so it too materialises them and pays the same quadratic cost. The gap in time is smaller at"
           " d_model 512 than at 128: the four projections, which cost the same in both paths and grow"
           " only linearly in T (T x d_model^2), are a larger share of the step.", ""]
    rows = []
    for d_model in d_models:
        for length in lengths:
            e = by.get(("tl_explicit", d_model, length), {})
            f = by.get(("tl_fused", d_model, length), {})
            if "extra_peak_bytes" in e and "extra_peak_bytes" in f:
                tensor = BATCH * HEADS * length * length * 4
                rows.append(f"| {d_model} | {length} | {fmt_mb(e['extra_peak_bytes'])} | {fmt_mb(f['extra_peak_bytes'])} |"
                            f" {(e['extra_peak_bytes'] - f['extra_peak_bytes']) / tensor:.1f} | {e['best_seconds'] / f['best_seconds']:.1f}x |")
    if rows:
        out += ["Measured: the explicit path's extra memory over the fused path, in units of one"
                " B x h x T x T float32 tensor, and its time relative to the fused path:", "",
                "| d_model | T | explicit | fused | (explicit - fused) / (B h T^2 x 4 bytes) | time, explicit / fused |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |", *rows, ""]
    return out


# Main ---------------------------------------------------------------------------------------


def wait_for_quiet(max_load: float, max_wait: float) -> str:
    """Wait (up to max_wait seconds) for the 1-minute load average to fall below max_load."""
    if max_wait <= 0:
        return ""
    waited = 0.0
    while load_average()[0] >= max_load and waited < max_wait:
        print(f"load average {load_average()[0]:.2f} >= {max_load}: waiting ({waited:.0f} of {max_wait:.0f} s)", flush=True)
        time.sleep(60)
        waited += 60
    if load_average()[0] >= max_load:
        return (f"The machine did not get quieter than a load average of {max_load} within {max_wait / 60:.0f} minutes:"
                " other processes shared its cores, so times are inflated.")
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small settings to try the script")
    parser.add_argument("--only", choices=("notebooks", "attention", "site"), action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--notebooks", nargs="*", type=Path, help="chapters to run (default: chapters/*.ipynb)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--wait-for-load", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the load average to fall below --max-load")
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--resume", action="store_true",
                        help=f"go on from the measurements an interrupted run saved in {PROGRESS.relative_to(ROOT)}")
    parser.add_argument("--page-weights", nargs="?", type=Path, const=ROOT / "_build" / "html", metavar="SITE",
                        help="only print each page's weight (raw and gzip-compressed) of a built site"
                             " (default _build/html), and write nothing")
    parser.add_argument("--execute-notebook", help=argparse.SUPPRESS)
    parser.add_argument("--attention-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.page_weights:
        return print_page_weights(args.page_weights.resolve())
    if args.execute_notebook:
        execute_notebook_child(args.execute_notebook)
        return 0
    if args.attention_config:
        attention_child(*json.loads(args.attention_config))
        return 0

    parts = set(args.only or ("notebooks", "attention", "site"))
    note = wait_for_quiet(args.max_load, args.wait_for_load)
    settings = {"quick": args.quick, "parts": sorted(parts)}
    progress = json.loads(PROGRESS.read_text()) if args.resume and PROGRESS.is_file() else {}
    if progress.get("settings") != settings:
        if args.resume:
            print("nothing to resume with these settings: starting afresh", flush=True)
        progress = {}
    if progress:
        info = progress["info"]
        info["load_note"] = " ".join(filter(None, [info.get("load_note"), note]))
        info["resumed"] = info.get("resumed", []) + [dt.datetime.now().strftime("%Y-%m-%d %H:%M")]
        info["seconds_before"] = info.get("seconds", 0.0)
        print(f"resuming the run of {info['date']}", flush=True)
    else:
        info = {"date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "load_start": load_average(),
                "machine": machine(), "threads": os.cpu_count() or 1, "seconds_before": 0.0,
                "max_reps": 5 if args.quick else 30, "max_seconds": 1.0 if args.quick else 6.0, "load_note": note}
        progress = {"settings": settings, "info": info, "notebooks": {}, "attention": {}}
    begun = time.perf_counter()

    def save():
        info["seconds"] = info["seconds_before"] + time.perf_counter() - begun
        PROGRESS.parent.mkdir(parents=True, exist_ok=True)
        PROGRESS.write_text(json.dumps(progress, indent=1, default=str))

    notebooks = attention = site = None
    if "notebooks" in parts:
        print("chapters:", flush=True)
        paths = [p.resolve() for p in (args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb")))]
        if args.quick and not args.notebooks:
            paths = paths[:2]
        notebooks = bench_notebooks(paths, progress["notebooks"], save)
    if "attention" in parts:
        print("attention:", flush=True)
        attention = bench_attention((64, 256) if args.quick else LENGTHS, (128,) if args.quick else D_MODELS,
                                    info["threads"], info["max_reps"], info["max_seconds"], progress["attention"], save)
    if "site" in parts:
        print("site:", flush=True)
        site = bench_site()
        print(f"  built in {site.get('build_seconds', float('nan')):.0f} s" + (f"  ERROR {site['error']}" if "error" in site else ""), flush=True)

    info["seconds"] = info["seconds_before"] + time.perf_counter() - begun
    info["load_end"] = load_average()
    loads = [r["load"] for r in (notebooks or []) + (attention or []) if "load" in r]
    info["loads"] = loads
    if max([info["load_start"][0], info["load_end"][0], *loads]) >= args.max_load and not info["load_note"]:
        info["load_note"] = (f"The load average reached {args.max_load} or more during the run: other processes shared"
                             " the cores at times, so some times are inflated (memory is not affected).")
    write_report(info, notebooks, attention, site, args.output, args.quick)
    (args.output.with_suffix(".json")).write_text(json.dumps(
        {"info": info, "notebooks": notebooks, "attention": attention, "site": site}, indent=1, default=str))
    PROGRESS.unlink(missing_ok=True)
    print(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
