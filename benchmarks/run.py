"""The book's performance report: measures each part and writes its own section of RESULTS.md.

    .venv/bin/python benchmarks/run.py                        # every part (`make bench`), quiet machine
    .venv/bin/python benchmarks/run.py --only chapters        # one part; repeatable (see PARTS below)
    .venv/bin/python benchmarks/run.py --report               # re-write the sections from the JSON; measure nothing
    .venv/bin/python benchmarks/run.py --quick                # small settings, to try the script (a few minutes);
                                                              # writes under artifacts/bench-quick/, never the report
    .venv/bin/python benchmarks/run.py --page-weights [SITE]  # print each page's weight of a built site

Each part writes one JSON file beside this script (`chapters.json`, `make_test.json`, `step.json`,
`attention.json`, `site.json`), holding every measurement with the date, the commit, the command,
the machine, the thread count, OpenMP's wait policy and the load average as each measurement
began; then it replaces only its own section of RESULTS.md, between the markers
`<!-- NAME: begin -->` and `<!-- NAME: end -->`, and the one-minute summary at the top. The other
sections (written by recipe.py, parallel.py, modern_decoder.py, sweep_claims.py and gpu.py) are
left as they are. A part with no JSON yet shows the command that measures it.

The statistics. Every time is the median of at least 5 timed repetitions after a warm-up,
printed with its spread (the lowest and highest repetition); a ratio of two times is the ratio
of their medians, printed as "≈1" when their interquartile ranges overlap (the repetitions
cannot tell them apart). Wall time on a machine that other jobs share is inflated: each
JSON keeps the load average, and a section measured at a load average above --max-load says so.
The processes are run as a reader runs them: OpenMP's default wait policy (OMP_WAIT_POLICY
unset; the step part also times OMP_WAIT_POLICY=PASSIVE, in its own rows).

The parts:

- chapters: each chapters/*.ipynb run top to bottom in a fresh kernel (nbclient, as `make
  notebooks` does; the notebook file is not written), each from its own wrapper process, with
  the chapter's own thread settings. Wall time from starting the kernel to the end of the last
  cell, and each cell's time (the three heaviest cells are reported). Peak memory: the larger of
  the kernel's peak resident set (VmHWM) and the peak of the summed proportional set size (PSS,
  shared pages counted once) of the kernel and any process it starts, polled every 50 ms.
  Budgets: 75 s a chapter, 6 minutes in all (issue 29), 1.5 GB a chapter.
- make-test: as on a fresh clone: `make env` into a new, empty virtual environment, then `make
  lint`, `make test-unit` and `make test-notebooks` (what `make test` runs, in that order) in that
  environment, each timed, with its result line.
- step: one training step of the date model (chapter 11's size; batch 64 date pairs, forward,
  label-smoothed loss, backward, gradient clipping, Adam), transformer_lib.Transformer against
  the same-size torch.nn.Transformer (its masks boolean and built before the clock starts, like
  ours), on 1 and 2 threads, each in a fresh process: the bare step (median of 30 steps after 3
  warm-up steps), and the step inside the book's loop `tl.train` (what chapter 11 and
  parallel.py measure; median of 5 runs of 10 steps). Wait policy: default, and PASSIVE.
- attention: forward plus backward of one self-attention call (batch 32, 8 heads, d_model 128
  and 512, T = 64 to 2048, float32, 2 threads): transformer_lib.MultiHeadAttention (fused=False:
  the explicit scores and softmax; fused=True: PyTorch's fused kernel) against
  torch.nn.MultiheadAttention (need_weights=False and True) and the bare kernel
  F.scaled_dot_product_attention (no projections: a floor). Each configuration in a fresh
  process. Time: median of at least 5 steps (up to 30 while they take under 6 s) after a
  warm-up. Memory, on a steady step (after the warm-up and the timed steps), two ways:
  (1) the bytes of the tensors the step creates, at their peak, counted by the library's
  `transformer_lib.memory.peak_tensor_memory` (deterministic, the same on every machine; it
  cannot see scratch space a fused kernel allocates and frees inside one operation);
  (2) the peak resident memory of the step over what the process held before it (VmHWM, reset
  through /proc/self/clear_refs), with glibc told to give every block of 64 KiB or more its own
  mapping (mallopt M_MMAP_THRESHOLD), so that freed tensors leave the resident set and the
  figure follows the step's own memory, scratch space included (one step to settle, then the
  larger of two steps). A configuration whose estimated
  peak exceeds 8 GB is skipped and listed.
- site: time to build the site from the committed outputs (`jupyter-book build --all`, as `make
  book` runs it, into a temporary folder; run `make book` once first for the vendored scripts),
  and the weight of each page as a browser with an empty cache loads it (HTML plus every file
  it requests, counted by headless Chromium from a local server), raw and as a static host with
  gzip sends it. Budget: 1.5 MB compressed for the heaviest page.
"""
from __future__ import annotations

import argparse
import ctypes
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
HERE = SCRIPT.parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "scripts"))
import sitetools  # noqa: E402  (Chromium, the local server, the kernel: shared with the tests)

RESULTS = HERE / "RESULTS.md"
QUICK_DIR = ROOT / "artifacts" / "bench-quick"
PY = ".venv/bin/python"

#: Each part: its JSON file, its section's marker name, and the command that re-measures it.
PARTS = {
    "chapters": ("chapters.json", "chapters", f"{PY} benchmarks/run.py --only chapters"),
    "make-test": ("make_test.json", "make test", f"{PY} benchmarks/run.py --only make-test"),
    "step": ("step.json", "training step", f"{PY} benchmarks/run.py --only step"),
    "attention": ("attention.json", "attention", f"{PY} benchmarks/run.py --only attention"),
    "site": ("site.json", "site", f"make book && {PY} benchmarks/run.py --only site"),
}
SUMMARY = "summary"
GPU_JSON = "gpu.json"  # written by benchmarks/gpu.py; the summary quotes it

# Budgets (on the 2-core machine the book targets). Missed budgets are reported, not relaxed.
CHAPTER_SECONDS = 75
BOOK_SECONDS = 360  # issue 29: the whole book within 6 minutes
CHAPTER_BYTES = 1.5e9
FUSED_RATIO = 1.1  # the fused path against torch.nn.MultiheadAttention(need_weights=False)
SKIP_BYTES = 8e9
MAX_LOAD = 1.5  # above this 1-minute load average a section says that its times are inflated

MIN_REPS = 5
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


def malloc_returns_memory(threshold: int = 64 * 1024) -> bool:
    """Tell glibc to serve every allocation of `threshold` bytes or more with its own mapping,
    which `free` returns to the system at once, and give back what its heap holds now: from
    then on the resident set follows the live tensors instead of the allocator's cache."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        libc.malloc_trim(0)
        return bool(ok)
    except (OSError, AttributeError):
        return False


def spread(values: list[float]) -> dict:
    """The statistics every timing keeps: n, median, lowest, highest and the quartiles."""
    values = sorted(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"n": len(values), "median": statistics.median(values), "min": values[0], "max": values[-1],
            "q1": q1, "q3": q3, "values": values}


def timed(step, min_reps: int = MIN_REPS, max_reps: int = 30, max_seconds: float = 6.0, sync=None) -> list[float]:
    """Seconds of each call of `step()`: at least `min_reps` calls, more (up to `max_reps`)
    while they take less than `max_seconds` in all."""
    times = []
    begun = time.perf_counter()
    while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() - begun < max_seconds):
        start = time.perf_counter()
        step()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return times


def fmt_time(s: dict | None, scale: float = 1000.0, digits: int = 1) -> str:
    """'median (lowest-highest)' of a `spread`, in ms by default."""
    if not s:
        return ""
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'] * scale)} ({f.format(s['min'] * scale)}-{f.format(s['max'] * scale)})"


def same_within_spread(a: dict, b: dict) -> bool:
    """True when the interquartile ranges of two `spread`s overlap."""
    return a["q1"] <= b["q3"] and b["q1"] <= a["q3"]


def fmt_ratio(a: dict, b: dict) -> str:
    r = a["median"] / b["median"]
    return f"≈1 ({r:.2f}x)" if same_within_spread(a, b) else f"{r:.2f}x"


def fmt_gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


def fmt_mb(n: float) -> str:
    return f"{n / MB:,.0f} MB" if n >= 10 * MB else f"{n / MB:.1f} MB"


def verdict(ok: bool) -> str:
    return "within budget" if ok else "**over budget**"


class TreePeak(threading.Thread):
    """Polls the summed PSS (proportional set size: a page shared by n processes counts 1/n in
    each) of this process's descendants; keeps the peak, and the peak of the summed RSS."""

    def __init__(self, interval: float = 0.05):
        super().__init__(daemon=True)
        import psutil

        self.me = psutil.Process()
        self.interval = interval
        self.peak_pss = self.peak_rss = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            pss = rss = 0
            for child in self.me.children(recursive=True):
                try:
                    info = child.memory_full_info()
                    pss, rss = pss + info.pss, rss + info.rss
                except Exception:  # it ended between listing and reading
                    pass
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            self.stop.wait(self.interval)


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("unknown CPU" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine() -> dict:
    cpu = cpu_name()
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

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 2**30, 1), "os": os_name,
            "kernel": platform.release(), "python": platform.python_version(), "torch": torch.__version__,
            "kernels": torch.backends.cpu.get_cpu_capability()}


def git_commit() -> dict:
    """The commit measured, and whether tracked files differed from it."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "--short=10", "HEAD")
    if not commit:  # a copy without .git (a GPU machine's): the caller may say which commit it is
        return {"commit": os.environ.get("BENCH_COMMIT", "unknown"), "dirty": False}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def wait_policy(env: dict | None = None) -> str:
    value = (env if env is not None else os.environ).get("OMP_WAIT_POLICY")
    return value.upper() if value else "default (OMP_WAIT_POLICY unset)"


def reader_env(**changes) -> dict:
    """The environment a reader runs with: OMP_WAIT_POLICY unset unless asked for."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def new_meta(part: str, args, argv: list[str]) -> dict:
    return {"part": part, "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), **git_commit(),
            "command": PARTS[part][2], "argv": " ".join(["benchmarks/run.py", *argv]),
            "quick": bool(args.quick), "machine": machine(), "wait_policy": wait_policy(reader_env()),
            "load_start": [round(x, 2) for x in load_average()], "max_load": args.max_load}


def finish_meta(meta: dict, began: float, rows: list[dict]) -> dict:
    meta["load_end"] = [round(x, 2) for x in load_average()]
    meta["seconds"] = round(time.perf_counter() - began, 1)
    loads = [r["load"] for r in rows if "load" in r] + [meta["load_start"][0], meta["load_end"][0]]
    meta["load_median"], meta["load_max"] = round(statistics.median(loads), 2), round(max(loads), 2)
    return meta


# 1. Chapters --------------------------------------------------------------------------------


def cell_seconds(cell) -> float | None:
    """A cell's run time from the timestamps nbclient records (record_timing=True)."""
    timing = cell.get("metadata", {}).get("execution", {})
    try:
        begun = dt.datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        ended = dt.datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return (ended - begun).total_seconds()


def execute_notebook_child(path: str) -> None:
    """In a fresh wrapper process: run one notebook in a fresh kernel; print JSON."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=sitetools.this_interpreter_kernels())
    client = NotebookClient(nb, km=km, timeout=1200, kernel_name="python3", record_timing=True,
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
    cells = []
    for i, cell in enumerate(nb.cells):
        seconds = cell_seconds(cell) if cell.cell_type == "code" else None
        if seconds is not None:
            first = next((ln for ln in cell.source.splitlines() if ln.strip() and not ln.startswith("#")), "")
            cells.append({"cell": i, "seconds": round(seconds, 2), "first_line": first[:70]})
    print(json.dumps({"seconds": elapsed, "kernel_peak_bytes": kernel_hwm, "tree_peak_pss_bytes": poll.peak_pss,
                      "tree_peak_rss_bytes": poll.peak_rss, "cells": cells, "error": error}))


def bench_chapters(paths: list[Path], done: dict, save) -> list[dict]:
    rows = []
    for path in paths:
        if path.name in done:
            rows.append(done[path.name])
            print(f"  {path.relative_to(ROOT)}: measured before", flush=True)
            continue
        print(f"  {path.relative_to(ROOT)} ...", end=" ", flush=True)
        load = load_average()[0]
        proc = subprocess.run([sys.executable, str(SCRIPT), "--execute-notebook", str(path)],
                              capture_output=True, text=True, cwd=path.parent, env=reader_env())
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {"seconds": float("nan"), "kernel_peak_bytes": 0, "tree_peak_pss_bytes": 0, "cells": [],
                   "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
        row["notebook"] = path.name
        row["peak_bytes"] = max(row["kernel_peak_bytes"], row["tree_peak_pss_bytes"])
        row["load"] = round(load, 2)
        rows.append(row)
        done[path.name] = row
        save()
        print(f"{row['seconds']:.1f} s, {row['peak_bytes'] / GB:.2f} GB"
              + (f"  ERROR {row['error']}" if row["error"] else ""), flush=True)
    return rows


# 2. make test -------------------------------------------------------------------------------

MAKE_TEST = ("lint", "test-unit", "test-notebooks")  # what `make test` runs, in this order
FRESH_ENV = "env"  # timed first: making the environment, what a fresh clone's `make test` adds


def bench_make_test(targets, log_dir: Path, fresh: bool = True) -> list[dict]:
    """Time each of `targets`; with `fresh`, all of them in one new virtual environment made from
    nothing (VENV=...), as on a fresh clone."""
    rows = []
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fresh-venv-") as folder:
        venv = [f"VENV={folder}/venv"] if fresh else []
        for target in targets:
            print(f"  make {target} ...", end=" ", flush=True)
            load = load_average()[0]
            log = log_dir / f"make-{target}.log"
            start = time.perf_counter()
            with log.open("w") as out:
                proc = subprocess.run(["make", target, *venv], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                      env=reader_env())
            seconds = time.perf_counter() - start
            text = log.read_text(errors="replace")
            results = re.findall(r"^=+ (.*(?:passed|failed|error).*?) =+$", text, re.M)
            rows.append({"target": target, "seconds": round(seconds, 1), "returncode": proc.returncode,
                         "result": "; ".join(results), "load": round(load, 2)})  # one line per pytest run
            print(f"{seconds:.0f} s, exit {proc.returncode}: {rows[-1]['result']}", flush=True)
            if target == FRESH_ENV and proc.returncode:  # the next target would try to make it again
                break
    return rows


# 3. One training step of the date model ----------------------------------------------------


def torch_date_model(src_vocab: int, tgt_vocab: int, d_model: int, n_heads: int, d_ff: int, n_layers: int, **_):
    """The date model built from `torch.nn.Transformer`, the same size as `tl.Transformer`:
    embeddings times sqrt(d_model) plus the sinusoidal encoding, then the output layer. Its
    forward takes the masks in PyTorch's convention (boolean, True = blocked), made beforehand."""
    import torch
    from torch import nn

    import transformer_lib as tl

    class TorchDateModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
            self.pos = tl.PositionalEncoding(d_model, 128, 0.0)
            self.core = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.0, batch_first=True)
            self.out = nn.Linear(d_model, tgt_vocab)
            self.scale = d_model**0.5

        def forward(self, src, tgt_in, causal, src_pad, tgt_pad):
            h = self.core(self.pos(self.src_embed(src) * self.scale), self.pos(self.tgt_embed(tgt_in) * self.scale),
                          tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                          memory_key_padding_mask=src_pad, tgt_is_causal=True)
            return self.out(h)

    torch.manual_seed(0)
    return TorchDateModel()


def date_step(impl: str, device: str = "cpu", batch_size: int = 64, n_batches: int = 8):
    """One training step of the date model (chapter 11's size), ready to time: returns
    (step, n_parameters), where step(i) runs forward, the label-smoothed loss, backward,
    gradient clipping at 1 and Adam on the i-th of `n_batches` batches of `batch_size` date
    pairs, collated and moved to `device` beforehand. `impl` is "transformer_lib" or
    "nn.Transformer" (the same size; its masks boolean and made beforehand too)."""
    import torch

    import transformer_lib as tl
    from transformer_lib.data import date_vocabs, make_date_splits
    from transformer_lib.losses import LabelSmoothingLoss
    from transformer_lib.training import Batch

    src_vocab, tgt_vocab = date_vocabs()
    pairs = make_date_splits(seed=0).train
    config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
    batches = [Batch.from_ids(*tl.vocab.collate(pairs[i * batch_size:(i + 1) * batch_size], src_vocab, tgt_vocab))
               for i in range(n_batches)]
    batches = [Batch(*(t.to(device) for t in (b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask))) for b in batches]
    torch.manual_seed(0)
    if impl == "transformer_lib":
        model = tl.Transformer(tl.TransformerConfig(**config)).to(device)
        inputs = [(b.src, b.tgt_in, b.src_mask, b.tgt_mask) for b in batches]
    elif impl == "nn.Transformer":
        model = torch_date_model(**config).to(device)
        inputs = []
        for b in batches:
            t = b.tgt_in.shape[1]
            causal = torch.ones(t, t, dtype=torch.bool, device=device).triu(1)  # True = blocked
            inputs.append((b.src, b.tgt_in, causal, b.src == 0, b.tgt_in == 0))
    else:
        raise ValueError(f"impl must be 'transformer_lib' or 'nn.Transformer', got {impl!r}")
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = LabelSmoothingLoss(0.1)
    targets = [b.tgt_out for b in batches]

    def step(i: int):
        loss = loss_fn(model(*inputs[i % n_batches]), targets[i % n_batches])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step, sum(p.numel() for p in model.parameters())


def step_child(impl: str, method: str, threads: int, reps: int) -> None:
    """In a fresh process (its OMP_WAIT_POLICY set by the parent): time one configuration; print JSON."""
    import torch

    import transformer_lib as tl

    tl.runtime.setup(seed=0, threads=threads)
    if method == "bare":
        step, n_params = date_step(impl)
        counter = iter(range(10**9))
        for _ in range(3):  # warm-up
            step(next(counter))
        times = timed(lambda: step(next(counter)), min_reps=reps, max_reps=reps)
    elif method == "tl.train":
        from transformer_lib.data import date_vocabs, make_date_splits

        steps = 10
        src_vocab, tgt_vocab = date_vocabs()
        config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
        pairs = tl.recipes.evenly_spaced(make_date_splits(seed=0).train, 64 * (steps + 2))
        loader = tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=64, shuffle=False)
        cfg = tl.recipes.recipe_config(max_steps=steps, target_accuracy=None)
        model = tl.Transformer(tl.TransformerConfig(**config))
        n_params = tl.count_parameters(model)
        tl.train(model, loader, None, tl.recipes.recipe_config(max_steps=2, target_accuracy=None))  # warm-up
        times = [t / steps for t in timed(lambda: tl.train(model, loader, None, cfg), min_reps=reps, max_reps=reps)]
    else:
        raise ValueError(f"method must be 'bare' or 'tl.train', got {method!r}")
    print(json.dumps({"times": times, "n_parameters": n_params, "threads": torch.get_num_threads(),
                      "wait_policy": wait_policy()}))


STEP_CONFIGS = [  # (impl, method, threads, OMP_WAIT_POLICY)
    *[(impl, "bare", threads, None) for threads in (1, 2) for impl in ("transformer_lib", "nn.Transformer")],
    *[("transformer_lib", "tl.train", threads, None) for threads in (1, 2)],
    *[(impl, "bare", threads, "PASSIVE") for threads in (1, 2) for impl in ("transformer_lib", "nn.Transformer")],
]


def bench_step(quick: bool, done: dict, save) -> list[dict]:
    rows = []
    for impl, method, threads, policy in STEP_CONFIGS:
        key = f"{impl}/{method}/{threads}/{policy}"
        label = f"  {impl}, {method}, {threads} thread(s), {wait_policy({'OMP_WAIT_POLICY': policy} if policy else {})}"
        if key in done:
            rows.append(done[key])
            print(f"{label}: measured before", flush=True)
            continue
        reps = (MIN_REPS if method == "tl.train" else 30) if not quick else MIN_REPS
        row = {"impl": impl, "method": method, "threads": threads, "wait_policy": policy or "default",
               "load": round(load_average()[0], 2)}
        proc = subprocess.run([sys.executable, str(SCRIPT), "--step-config", json.dumps([impl, method, threads, reps])],
                              capture_output=True, text=True, cwd=ROOT, env=reader_env(OMP_WAIT_POLICY=policy))
        try:
            out = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row["error"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
            print(f"{label}: ERROR {row['error']}", flush=True)
        else:
            row.update(time=spread(out["times"]), n_parameters=out["n_parameters"])
            print(f"{label}: {fmt_time(row['time'])} ms", flush=True)
        rows.append(row)
        done[key] = row
        save()
    return rows


# 4. Attention -------------------------------------------------------------------------------


def estimate_bytes(impl: str, d_model: int, length: int, batch: int = BATCH, heads: int = HEADS) -> float:
    """Rough peak extra memory of one forward+backward step, to skip what would not fit."""
    linear = 16 * batch * length * d_model * 4  # projections, heads, outputs and their grads
    scores = batch * heads * length * length * 4
    if impl in ("tl_explicit", "torch_mha_weights"):
        return linear + 3 * scores  # scores, softmax weights and their gradient, kept at once
    return linear


def attention_step(impl: str, d_model: int, length: int, batch: int = BATCH, heads: int = HEADS):
    """One forward+backward self-attention step, ready to time: returns (step, clear), where
    clear() drops the gradients the step made."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import transformer_lib as tl

    torch.manual_seed(0)
    d_k = d_model // heads
    if impl == "sdpa":
        q, k, v = (torch.randn(batch, heads, length, d_k, requires_grad=True) for _ in range(3))
        params = [q, k, v]

        def step():
            F.scaled_dot_product_attention(q, k, v).sum().backward()
    else:
        x = torch.randn(batch, length, d_model, requires_grad=True)
        if impl.startswith("tl_"):
            module = tl.MultiHeadAttention(d_model, heads, fused=impl == "tl_fused")

            def forward():
                return module(x, x, x), None
        else:
            module = nn.MultiheadAttention(d_model, heads, batch_first=True)
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

    return step, clear


def attention_child(impl: str, d_model: int, length: int, threads: int, max_reps: int, max_seconds: float) -> None:
    """In a fresh process: time and measure one configuration; print JSON."""
    import torch

    from transformer_lib.memory import peak_tensor_memory

    torch.set_num_threads(threads)
    step, clear = attention_step(impl, d_model, length)

    def step_and_clear():
        step()
        clear()

    start = time.perf_counter()
    step_and_clear()  # warm-up: PyTorch pages in its code and sizes its buffers
    warmup = time.perf_counter() - start
    times = timed(step_and_clear, MIN_REPS, max_reps, max_seconds)
    # Memory on a steady step, after the timed ones: the tensors (deterministic), then the
    # resident set with every large block its own mapping (see malloc_returns_memory).
    with peak_tensor_memory() as mem:
        step()
    clear()
    exact = malloc_returns_memory() and reset_peak_rss()
    step()  # one step to settle under the new allocation policy (the first still finds the old heap)
    clear()
    rss = []
    for _ in range(2):
        baseline = read_status()["VmRSS"]
        reset_peak_rss()
        step()
        rss.append(max(read_status()["VmHWM"] - baseline, 0))
        clear()
    print(json.dumps({"time": spread(times), "warmup_seconds": warmup, "tensor_peak_bytes": mem.peak,
                      "rss_peak_bytes": max(rss), "rss_peaks": rss, "rss_exact": exact,
                      "threads": torch.get_num_threads()}))


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
                       "estimate_bytes": estimate_bytes(impl, d_model, length), "load": round(load_average()[0], 2)}
                if row["estimate_bytes"] > SKIP_BYTES:
                    row["skipped"] = f"estimated {row['estimate_bytes'] / GB:.1f} GB > {SKIP_BYTES / GB:.0f} GB"
                    print(f"{label}: skipped ({row['skipped']})", flush=True)
                    rows.append(row)
                    continue
                proc = subprocess.run(
                    [sys.executable, str(SCRIPT), "--attention-config",
                     json.dumps([impl, d_model, length, threads, max_reps, max_seconds])],
                    capture_output=True, text=True, cwd=ROOT, env=reader_env())
                try:
                    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                except (IndexError, json.JSONDecodeError):
                    row["error"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
                    print(f"{label}: ERROR {row['error']}", flush=True)
                else:
                    print(f"{label}: {fmt_time(row['time'])} ms, tensors {fmt_mb(row['tensor_peak_bytes'])},"
                          f" resident +{fmt_mb(row['rss_peak_bytes'])}", flush=True)
                rows.append(row)
                done[key] = row
                save()
    return rows


# 5. The site --------------------------------------------------------------------------------


def bench_site() -> dict:
    jb = ROOT / ".venv" / "bin" / "jupyter-book"
    if not jb.exists():
        jb = Path(shutil.which("jupyter-book") or "jupyter-book")
    if not (ROOT / "book" / "_vendor" / ".vendored").exists():
        return {"error": "book/_vendor/ is missing: run `make book` once first"}
    out = Path(tempfile.mkdtemp(prefix="bench-site-"))
    load = round(load_average()[0], 2)
    try:
        start = time.perf_counter()
        proc = subprocess.run([str(jb), "build", "--all", "--warningiserror", "--nitpick", "--keep-going",
                               "--path-output", str(out), "."], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode:
            return {"error": f"the build failed: {proc.stdout[-500:]}{proc.stderr[-500:]}", "build_seconds": seconds,
                    "load": load}
        return {"build_seconds": seconds, "load": load, "pages": page_weights(out / "_build" / "html")}
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

    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith((base, "data:", "blob:"))
               else route.abort())
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


def heaviest_and_median(pages: list[dict]) -> tuple[dict, dict]:
    ordered = sorted(pages, key=lambda r: r.get("gzip_bytes", r["total_bytes"]))
    return ordered[-1], ordered[len(ordered) // 2]


def print_page_weights(site: Path) -> int:
    """`run.py --page-weights [SITE]`: the weight of each page of an already built site."""
    if not (site / "index.html").is_file():
        print(f"{site} has no built site: run `make book` first", file=sys.stderr)
        return 1
    pages = page_weights(site)
    print("\n".join(weights_table(pages)))
    biggest, median = heaviest_and_median(pages)
    print(f"heaviest page: {biggest['page']}, {biggest['gzip_bytes'] / MB:.2f} MB gzip-compressed"
          f" ({fmt_mb(biggest['total_bytes'])} raw, {biggest['files']} files); largest compressed files: "
          + ", ".join(f"{u} {n / MB:.2f} MB" for u, n in biggest["largest_gzip"]))
    print(f"median page: {median['page']}, {median['gzip_bytes'] / MB:.2f} MB gzip-compressed")
    return 0


# The report ---------------------------------------------------------------------------------


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def replace_section(text: str, name: str, body: str) -> str:
    """`text` with what lies between the markers of section `name` replaced by `body`; every
    other line is kept. A report without those markers gets the section at its end."""
    begin, end = markers(name)
    section = f"{begin}\n{body.strip()}\n{end}"
    if text.count(begin) > 1 or text.count(end) > 1:
        raise ValueError(f"the markers of section {name!r} appear more than once")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        if end not in rest:
            raise ValueError(f"the end marker of section {name!r} comes before its begin marker")
        _, tail = rest.split(end, 1)
        return head + section + tail
    if begin in text or end in text:
        raise ValueError(f"section {name!r} has only one of its two markers")
    return text.rstrip("\n") + "\n\n" + section + "\n"


def cpu_of(meta: dict) -> str:
    """The CPU a measurement ran on, as its JSON recorded it."""
    return (meta.get("machine") or {}).get("cpu") or "an unrecorded CPU"


def provenance(meta: dict, what: str = "Measured") -> str:
    """The line under each table: when, at which commit, with which command, under what load."""
    dirty = " plus uncommitted changes" if meta.get("dirty") else ""
    m = meta["machine"]
    line = (f"{what} {meta['date']} at commit `{meta['commit']}`{dirty} on {m['cpu']} ({m['cores']} cores,"
            f" torch {m['torch']}, {m['kernels']} kernels); wait policy {meta['wait_policy']}; load average"
            f" (1 min) median {meta['load_median']}, highest {meta['load_max']}. Re-measure: `{meta['command']}`.")
    if meta.get("quick"):
        line += " **Quick settings (`--quick`): a trial of the script, not the report.**"
    if meta["load_max"] > meta.get("max_load", MAX_LOAD):
        line += (f" The load average exceeded {meta.get('max_load', MAX_LOAD)}. It counts the benchmark's own"
                 " processes too (a job on both cores reads about 2 by itself, and for a minute after it ends), so"
                 " it does not show by itself that other processes shared the cores; where they did, times are"
                 " inflated (counts and bytes are not).")
    return line


def awaiting(part: str, what: str) -> list[str]:
    return [f"**Awaiting the final run on a quiet machine** (load average below {MAX_LOAD}): {what}. Measure it with",
            "", f"    {PARTS[part][2]}", ""]


def check_same_cpu(table: dict, meta: dict) -> None:
    """The rows of one chapters table come from one CPU: refuse to merge in rows measured on another."""
    if cpu_of(table) != cpu_of(meta):
        raise ValueError(f"the table was measured on {cpu_of(table)} and these chapters on"
                         f" {cpu_of(meta)}: re-measure every chapter on one CPU (no --notebooks)")


def merge_chapters(earlier: dict, now: dict) -> dict:
    """The chapters table of `earlier` with the rows of the chapters measured `now` replaced (a run
    with --notebooks); the earlier run's provenance stays, and `now`'s is listed under "remeasured",
    with the times it replaced."""
    check_same_cpu(earlier["meta"], now["meta"])
    measured = {r["notebook"]: r for r in now["rows"]}
    replaced = {r["notebook"]: r["seconds"] for r in earlier["rows"] if r["notebook"] in measured}
    rows = [measured.pop(r["notebook"], r) for r in earlier["rows"]] + list(measured.values())
    meta = dict(earlier["meta"])
    m = now["meta"]
    meta["remeasured"] = meta.get("remeasured", []) + [{
        "notebooks": [r["notebook"] for r in now["rows"]], "date": m["date"], "commit": m["commit"],
        "dirty": m.get("dirty"), "load_median": m["load_median"], "load_max": m["load_max"], "replaced": replaced}]
    return {"meta": meta, "rows": sorted(rows, key=lambda r: r["notebook"])}


def keep_earlier_run(earlier: dict, now: dict) -> dict:
    """A full run of the chapters (`now`) becomes the table; the table it replaces (`earlier`) is
    kept, summed up, under "earlier_full_runs" (with its own earlier runs and re-measurements)."""
    rows, m = earlier["rows"], earlier["meta"]
    summary = {key: m.get(key) for key in ("date", "commit", "dirty", "load_median", "load_max", "remeasured")}
    summary["cpu"] = (m.get("machine") or {}).get("cpu")
    summary.update(total=round(sum(r["seconds"] for r in rows), 1),
                   over={r["notebook"]: round(r["seconds"], 1) for r in rows if not r["seconds"] <= CHAPTER_SECONDS},
                   seconds={r["notebook"]: round(r["seconds"], 1) for r in rows})
    meta = dict(now["meta"], earlier_full_runs=m.get("earlier_full_runs", []) + [summary])
    return {"meta": meta, "rows": now["rows"]}


def keep_earlier_make_test(earlier: dict, now: dict) -> dict:
    """A new `make test` measurement (`now`) becomes the table; the one it replaces is kept, summed
    up (when, where, its total with and without `make env`, and whether a target failed), under
    "earlier_runs"."""
    m = earlier["meta"]
    tests, fresh = split_fresh_env(earlier["rows"])
    total = sum(r["seconds"] for r in tests)
    summary = {key: m.get(key) for key in ("date", "commit", "dirty", "load_median", "load_max")}
    summary.update(cpu=(m.get("machine") or {}).get("cpu"), seconds=round(total, 1),
                   fresh_seconds=None if fresh is None else round(total + fresh, 1),
                   failed=[r["target"] for r in earlier["rows"] if r["returncode"]])
    return {"meta": dict(now["meta"], earlier_runs=m.get("earlier_runs", []) + [summary]), "rows": now["rows"]}


def earlier_make_test_text(meta: dict) -> str:
    """A sentence per earlier `make test` measurement."""
    runs = meta.get("earlier_runs", [])
    parts = [f"{o['date']} at commit `{o['commit']}`{' plus uncommitted changes' if o.get('dirty') else ''} on"
             f" {o.get('cpu') or 'an unrecorded CPU'} (load median {o['load_median']}): {o['seconds'] / 60:.1f} min"
             + ("" if o.get("fresh_seconds") is None else f", {o['fresh_seconds'] / 60:.1f} min on a fresh clone")
             + (f", failed: {', '.join(o['failed'])}" if o.get("failed") else "") for o in runs]
    return (" Earlier measurements (kept in `make_test.json`): " + "; ".join(parts) + ".") if parts else ""


def remeasured_text(m: dict) -> str:
    """When, where and what a re-measurement measured, and the times it replaced."""
    dirty = " plus uncommitted changes" if m.get("dirty") else ""
    replaced = m.get("replaced", {})
    was = "; ".join(f"{nb} {sec:.1f} s" if len(replaced) > 1 else f"{sec:.1f} s" for nb, sec in replaced.items())
    return (f"{m['date']} at commit `{m['commit']}`{dirty} (load median {m['load_median']}, highest"
            f" {m['load_max']}): {', '.join(m['notebooks'])}" + (f" (in place of {was})" if was else ""))


def earlier_runs_text(meta: dict) -> str:
    """A sentence per earlier full run: when, at which commit, its total and its chapters over budget."""
    runs = meta.get("earlier_full_runs", [])
    if not runs:
        return ""
    parts = []
    for o in runs:
        over = ", ".join(f"{nb} ({sec:.0f} s)" for nb, sec in o["over"].items())
        parts.append(f"{o['date']} at commit `{o['commit']}`{' plus uncommitted changes' if o.get('dirty') else ''}"
                     f" on {o.get('cpu') or 'an unrecorded CPU'} (load median {o['load_median']}):"
                     f" {o['total']:.0f} s in all, "
                     + (f"over the {BOOK_SECONDS / 60:g}-minute budget, " if o["total"] > BOOK_SECONDS else "")
                     + (f"over {CHAPTER_SECONDS} s: {over}" if over else f"every chapter within {CHAPTER_SECONDS} s")
                     + "".join(f"; re-measured {remeasured_text(r)}" for r in o.get("remeasured") or []))
    return (" Earlier full runs (their rows are in `chapters.json`): " + "; ".join(parts) + "."
            " The same chapters took different times from run to run at similar load averages (on the Intel Xeon,"
            " up to 1.3 times from one hour to the next); we put it down to the shared host these two cores belong"
            " to, which the load average does not see. The machine a session gets is not always the same model:"
            " where two runs name different CPUs, the CPU and the host's hour cannot be told apart.")


def chapters_section(data: dict | None) -> list[str]:
    out = ["## The chapters", ""]
    if data is None:
        return out + awaiting("chapters", "each chapter's time, heaviest cells and peak memory")
    rows, meta = data["rows"], data["meta"]
    total = sum(r["seconds"] for r in rows)
    worst = max((r["peak_bytes"] for r in rows), default=0)
    out += [
        "Each chapter run top to bottom in a fresh kernel with its own settings (most call"
        " `book.setup(threads=1)`; chapter 11's live run uses 2 threads and chapter 17 starts 2 worker"
        " processes). Time: kernel start to the end of the last cell; the three heaviest cells with"
        " their seconds. Peak memory: the larger of the kernel's peak resident set and the peak of the"
        " summed PSS of the kernel and the processes it starts (shared pages counted once).",
        "",
        provenance(meta) + "".join(f" Re-measured {remeasured_text(m)}." for m in meta.get("remeasured", []))
        + earlier_runs_text(meta),
        "",
        f"| chapter | wall time | heaviest cells (cell: s) | peak memory | budget ({CHAPTER_SECONDS} s,"
        f" {CHAPTER_BYTES / GB:.1f} GB) | load |",
        "| --- | ---: | --- | ---: | --- | ---: |",
    ]
    for r in rows:
        ok = r["seconds"] <= CHAPTER_SECONDS and r["peak_bytes"] <= CHAPTER_BYTES and not r["error"]
        heaviest = sorted(r["cells"], key=lambda c: -c["seconds"])[:3]
        heavy = ", ".join(f"{c['cell']}: {c['seconds']:.1f}" for c in heaviest)
        status = verdict(ok) + (f": failed, {r['error']}" if r["error"] else "")
        out.append(f"| {r['notebook']} | {r['seconds']:.1f} s | {heavy} | {fmt_gb(r['peak_bytes'])} | {status} |"
                   f" {r['load']:.2f} |")
    out += [f"| **all {len(rows)} chapters** | **{total:.0f} s ({total / 60:.1f} min)** | | **max {fmt_gb(worst)}** |"
            f" {verdict(total <= BOOK_SECONDS)} ({BOOK_SECONDS / 60:g} min in all) | |", ""]
    over = [r for r in rows if not r["seconds"] <= CHAPTER_SECONDS or r["peak_bytes"] > CHAPTER_BYTES or r["error"]]
    if over:
        out.append("Over budget or failed: " + "; ".join(
            f"{r['notebook']} ({r['seconds']:.0f} s, {fmt_gb(r['peak_bytes'])}"
            f"{', ' + r['error'] if r['error'] else ''})" for r in over) + ".")
    else:
        out.append("Every chapter is within its time and memory budget.")
    return out + [""]


def split_fresh_env(rows: list[dict]) -> tuple[list[dict], float | None]:
    """The rows of what `make test` runs, and the seconds `make env` took from nothing (None if not timed)."""
    fresh = [r["seconds"] for r in rows if r["target"] == FRESH_ENV]
    return [r for r in rows if r["target"] != FRESH_ENV], (fresh[0] if fresh else None)


def make_test_section(data: dict | None) -> list[str]:
    out = ["## `make test`", ""]
    if data is None:
        return out + awaiting("make-test", "how long `make test` takes")
    rows, meta = data["rows"], data["meta"]
    tests, fresh = split_fresh_env(rows)
    total = sum(r["seconds"] for r in tests)
    out += ["`make test` runs `make lint`, `make test-unit` and `make test-notebooks` in this order; each was"
            " timed on its own (the sum is `make test`'s time; each runs even where an earlier one failed, where"
            " `make test` would stop). The unit tests and the chapters run two at a time (`JOBS=2`, pytest-xdist; the"
            " Makefile's two rounds keep the chapters that time something apart from those that use both cores)."
            " The kernel-set check (`make test-kernels`, two"
            " more notebook passes) and the site are not part of it. A target's load is read as it starts, so it"
            " includes the two workers of the target before (the run itself keeps both cores busy).", ""]
    if fresh is not None:
        out += ["Measured as on a fresh clone: `make test` first makes the environment (`make env`: a virtual"
                " environment, the locked packages and torch from the package index, this package editable), and"
                " the first row times that from nothing, into a new, empty folder; the other targets then ran in"
                " that environment. pip's own download cache is as this machine left it; here the package index is"
                " a local folder of wheels (pip's find-links, torch its CPU build), so the first row is making"
                " the virtual environment, reading the index, unpacking, installing and compiling the modules, and"
                " `pip check`; a fresh clone that downloads the packages adds the download.",
                ""]
    out += [provenance(meta) + earlier_make_test_text(meta), "", "| target | wall time | result | load |",
            "| --- | ---: | --- | ---: |"]
    out += [f"| `make {r['target']}`{', from nothing' if r['target'] == FRESH_ENV else ''}"
            f" | {r['seconds'] / 60:.1f} min"
            f" | {r['result'] or ('made' if r['target'] == FRESH_ENV else 'exit ' + str(r['returncode']))}"
            f"{'' if r['returncode'] == 0 else ' (**failed**)'} | {r['load']:.2f} |" for r in rows]
    out += [f"| **`make test`**{'' if fresh is None else ' (without `make env`)'} | **{total / 60:.1f} min** | | |"]
    if fresh is not None:
        out += [f"| **`make test` on a fresh clone** (with `make env`) | **{(total + fresh) / 60:.1f} min** | | |"]
    return out + [""]


def step_section(data: dict | None) -> list[str]:
    out = ["## One training step of the date model", ""]
    if data is None:
        return out + awaiting("step", "the step time of chapter 11's model, ours against nn.Transformer")
    rows, meta = data["rows"], data["meta"]
    ok = [r for r in rows if "time" in r]
    params = {r["impl"]: r["n_parameters"] for r in ok}
    out += [
        "This is the report's one step-time table; the other sections quote it. The date model of chapter"
        " 11 (d_model 64, 4 heads, 2+2 layers, d_ff 128), batch 64 date pairs: forward, label-smoothed loss,"
        " backward, clipping at 1, Adam. `transformer_lib.Transformer` against the same-size"
        " `torch.nn.Transformer` with its own embeddings, sinusoidal encoding and output layer"
        + (f" ({params.get('transformer_lib', 0):,} against {params.get('nn.Transformer', 0):,} parameters: PyTorch's"
           " adds a final LayerNorm to each stack)" if len(params) == 2 else "")
        + "; both take boolean masks made before the clock starts. Bare step: median (lowest-highest) of"
        " 30 steps after 3 warm-up steps, with Adam as PyTorch picks it (on a CPU, its loop over the"
        " parameters). `tl.train`: the book's loop (batches collated as it runs, the learning-rate"
        " schedule, and Adam's multi-tensor update, `foreach`: the same arithmetic), the median of 5 runs"
        " of 10 steps, per step. Each row in a fresh process.",
        "",
        provenance(meta),
        "",
        "| threads | OMP_WAIT_POLICY | transformer_lib, bare step (ms) | nn.Transformer, bare step (ms) |"
        " ours / PyTorch's | transformer_lib in `tl.train` (ms per step) | load |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    by = {(r["impl"], r["method"], r["threads"], r["wait_policy"]): r for r in rows}
    for policy in ("default", "PASSIVE"):
        for threads in sorted({r["threads"] for r in rows}):
            ours = by.get(("transformer_lib", "bare", threads, policy), {})
            theirs = by.get(("nn.Transformer", "bare", threads, policy), {})
            loop = by.get(("transformer_lib", "tl.train", threads, policy), {})
            if not (ours or theirs or loop):
                continue
            ratio = fmt_ratio(ours["time"], theirs["time"]) if "time" in ours and "time" in theirs else ""
            loads = ", ".join(str(r["load"]) for r in (ours, theirs, loop) if r)
            out.append(f"| {threads} | {policy} | {fmt_time(ours.get('time')) or ours.get('error', '')} |"
                       f" {fmt_time(theirs.get('time')) or theirs.get('error', '')} | {ratio} |"
                       f" {fmt_time(loop.get('time')) or ('' if not loop else loop.get('error', ''))} | {loads} |")
    out.append("")
    b1 = by.get(("transformer_lib", "bare", 1, "default"), {})
    b2 = by.get(("transformer_lib", "bare", 2, "default"), {})
    p2 = by.get(("transformer_lib", "bare", 2, "PASSIVE"), {})
    if "time" in b1 and "time" in b2:
        out.append(f"Two threads against one, default policy: {fmt_ratio(b2['time'], b1['time'])} the time."
                   + (f" PASSIVE against default at 2 threads: {fmt_ratio(p2['time'], b2['time'])} the time. (PASSIVE"
                      " puts an idle thread to sleep at once instead of letting it spin: that frees the core when"
                      " other jobs want it, and costs a wake-up at every parallel region when they do not.)"
                      if "time" in p2 else ""))
        out.append("")
    return out


def attention_section(data: dict | None) -> list[str]:
    out = ["## Attention: transformer_lib against PyTorch", ""]
    if data is None:
        return out + awaiting("attention", "time and memory of one attention step against T")
    rows, meta = data["rows"], data["meta"]
    by = {(r["impl"], r["d_model"], r["length"]): r for r in rows}
    lengths = sorted({r["length"] for r in rows})
    d_models = sorted({r["d_model"] for r in rows})
    threads = next((r["threads"] for r in rows if "threads" in r), meta.get("threads"))
    out += [
        f"Forward plus backward of one self-attention call, batch {BATCH}, {HEADS} heads, float32, {threads} threads,"
        " each configuration in a fresh process. Time: median (lowest-highest) of at least 5 steps after a"
        " warm-up, in ms. Memory, on a steady step after the timed ones: the peak bytes of the tensors the"
        " step creates (`transformer_lib.memory.peak_tensor_memory`: the same on every machine; blind to"
        " scratch space inside one fused operation), and the step's peak resident memory over the process's"
        " before it, with every block of 64 KiB or more in its own mapping so that freed tensors leave the"
        " resident set (it includes that scratch space). Ratios are to"
        " `torch.nn.MultiheadAttention(need_weights=False)`, the like-for-like module (projections"
        " included), from medians; \"≈1\" where the interquartile ranges overlap. The bare"
        " `scaled_dot_product_attention` kernel has no projections and is a floor.",
        "",
        provenance(meta),
        "",
    ]
    goal_misses = []
    for d_model in d_models:
        out += [f"### d_model = {d_model}", "", "Time per step, ms: median (lowest-highest), and ratio of medians:", ""]
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
                    cell = fmt_time(r["time"])
                    if "time" in ref and impl != "torch_mha":
                        cell += f"; {fmt_ratio(r['time'], ref['time'])}"
                    cells.append(cell)
            out.append(f"| {length} | " + " | ".join(cells) + " |")
        out += ["", "Peak memory of a steady step: tensors (ratio), resident:", ""]
        out += ["| T | " + " | ".join(IMPLEMENTATIONS.values()) + " |", "| ---: |" + " ---: |" * len(IMPLEMENTATIONS)]
        for length in lengths:
            ref = by.get(("torch_mha", d_model, length), {})
            cells = []
            for impl in IMPLEMENTATIONS:
                r = by.get((impl, d_model, length))
                if r is None or "tensor_peak_bytes" not in r:
                    cells.append("skipped" if r and "skipped" in r else "")
                    continue
                cell = fmt_mb(r["tensor_peak_bytes"])
                if ref.get("tensor_peak_bytes") and impl != "torch_mha":
                    cell += f" ({r['tensor_peak_bytes'] / ref['tensor_peak_bytes']:.2f}x)"
                cells.append(cell + f", {fmt_mb(r['rss_peak_bytes'])}")
            out.append(f"| {length} | " + " | ".join(cells) + " |")
        out.append("")
        for length in lengths:
            fused, ref = by.get(("tl_fused", d_model, length), {}), by.get(("torch_mha", d_model, length), {})
            if "time" in fused and "time" in ref:
                t = fused["time"]["median"] / ref["time"]["median"]
                m = fused["tensor_peak_bytes"] / max(ref["tensor_peak_bytes"], 1)
                if t > FUSED_RATIO and not same_within_spread(fused["time"], ref["time"]):
                    goal_misses.append(f"time {t:.2f}x at d_model {d_model}, T {length}")
                if m > FUSED_RATIO:
                    goal_misses.append(f"tensor memory {m:.2f}x at d_model {d_model}, T {length}")
    out += growth_section(by, d_models, lengths)
    out += [f"### The goal: the fused path within {FUSED_RATIO}x of PyTorch's time and tensor memory at every length",
            ""]
    out.append("**Missed** at: " + "; ".join(goal_misses) + "." if goal_misses
               else "Met at every measured length and both widths (time on medians).")
    out.append("")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        out += ["### Skipped configurations", "",
                f"Configurations whose estimated peak memory exceeds {SKIP_BYTES / GB:.0f} GB were not run (the"
                " estimate counts three B x h x T x T float32 tensors, the scores, the softmax weights and their"
                " gradient, plus the linear-size activations):", ""]
        out += [f"- {IMPLEMENTATIONS[r['impl']]}, d_model {r['d_model']}, T {r['length']}: {r['skipped']}"
                for r in skipped]
        out.append("")
    out += explicit_explanation(by, d_models, lengths)
    return out


def growth_section(by, d_models, lengths, start: int = 256) -> list[str]:
    """How time and memory grow with length: the exponent k of a power law cost ~ T^k, fitted
    (least squares on the logs) over the lengths from `start` up to the longest that every
    implementation of a width ran, so that the exponents side by side share their range."""
    import math

    def slope(xs, ys):
        if min(ys) <= 0:  # a zero (a resident-memory delta can be 0) has no logarithm: no fit
            return float("nan")
        lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]  # times in seconds, often below 1
        mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
        return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)

    out = ["### How cost grows with length", "",
           f"Growth exponent k in cost ~ T^k (k = 2: quadratic in T, k = 1: linear), fitted over T = {start} up to"
           " the longest length that every implementation ran at that width (one range per width), on median"
           " times, tensor bytes and the steady step's resident memory. At short lengths the projections,"
           " linear in T, dominate every implementation.",
           "", "| implementation | d_model | time k | tensor memory k | resident memory k | lengths |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for d_model in d_models:
        common = [L for L in lengths if L >= start
                  and all("time" in by.get((impl, d_model, L), {}) for impl in IMPLEMENTATIONS)]
        if len(common) < 2:
            continue
        for impl, name in IMPLEMENTATIONS.items():
            kt = slope(common, [by[(impl, d_model, L)]["time"]["median"] for L in common])
            km = slope(common, [by[(impl, d_model, L)]["tensor_peak_bytes"] for L in common])
            kr = slope(common, [by[(impl, d_model, L)]["rss_peak_bytes"] for L in common])
            out.append(f"| {name} | {d_model} | {kt:.2f} | {km:.2f} | {kr:.2f} | {common[0]} to {common[-1]} |")
    out.append("")
    return out


def explicit_explanation(by, d_models, lengths) -> list[str]:
    mb = lambda n: f"{n / MB:.1f} MB" if n < GB else f"{n / GB:.2f} GB"  # noqa: E731
    sizes = ", ".join(f"{mb(BATCH * HEADS * L * L * 4)} at T = {L}" for L in (64, 1024, 2048))
    out = ["### Why the explicit path costs more", "",
           "`MultiHeadAttention(fused=False)` computes the paper's equation as written: the scores"
           " Q K^T / sqrt(d_k), a (B, h, T, T) tensor, then their softmax, another (B, h, T, T) tensor,"
           " then the weighted sum. Autograd keeps the softmax output for the backward pass, and the"
           " backward pass makes (B, h, T, T) gradients of the weights and of the scores, so the"
           " step's memory grows with T^2: each such tensor is B x h x T^2 x 4 bytes"
           f" ({BATCH} x {HEADS} x T^2 x 4: {sizes})."
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
            if "tensor_peak_bytes" in e and "tensor_peak_bytes" in f:
                tensor = BATCH * HEADS * length * length * 4
                rows.append(f"| {d_model} | {length} | {fmt_mb(e['tensor_peak_bytes'])} |"
                            f" {fmt_mb(f['tensor_peak_bytes'])} |"
                            f" {(e['tensor_peak_bytes'] - f['tensor_peak_bytes']) / tensor:.2f} |"
                            f" {fmt_ratio(e['time'], f['time'])} |")
    if rows:
        out += ["Measured: the explicit path's extra tensor memory over the fused path, in units of one"
                " B x h x T x T float32 tensor, and its time relative to the fused path (ratio of medians):", "",
                "| d_model | T | explicit, tensors | fused, tensors | (explicit - fused) / (B h T^2 x 4 bytes) |"
                " time, explicit / fused |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |", *rows, ""]
    return out


def site_section(data: dict | None) -> list[str]:
    out = ["## The site", ""]
    if data is None:
        return out + awaiting("site", "the build time and the weight of every page")
    site, meta = data["rows"], data["meta"]
    if "error" in site:
        return out + [f"Not measured: {site['error']}", "", provenance(meta, "Tried"), ""]
    pages = site["pages"]
    biggest, median = heaviest_and_median(pages)
    out += [
        provenance(meta),
        "",
        f"- Build from the committed outputs (`jupyter-book build --all`, as `make book` runs it; notebooks are not"
        f" executed): **{site['build_seconds']:.0f} s** (one build; load average {site['load']} as it began).",
        f"- Heaviest page: **{biggest['page']}**, **{biggest['gzip_bytes'] / MB:.2f} MB compressed**"
        f" ({verdict(biggest['gzip_bytes'] <= PAGE_GZIP_BYTES)}: {PAGE_GZIP_BYTES / MB:.1f} MB),"
        f" {fmt_mb(biggest['total_bytes'])} raw, in {biggest['files']} files; its largest files, compressed: "
        + ", ".join(f"`{u}` {n / MB:.2f} MB" for u, n in biggest["largest_gzip"]) + ".",
        f"- Median page: {median['page']}, {median['gzip_bytes'] / MB:.2f} MB compressed.",
        "",
        "Bytes a browser with an empty cache receives for each page: the HTML plus every file it requests,"
        " counted in headless Chromium from a local server; raw, and as a static host with gzip sends them"
        f" (text files compressed with gzip -{GZIP_LEVEL}, fonts and images as they are). A reader's cache makes"
        " later pages lighter, as they share the theme, fonts and MathJax. An already built site is weighed"
        f" with `{PY} benchmarks/run.py --page-weights` (prints this table).",
        "",
        *weights_table(pages),
        "",
    ]
    return out


SECTIONS = {"chapters": chapters_section, "make-test": make_test_section, "step": step_section,
            "attention": attention_section, "site": site_section}


def load_json(directory: Path, name: str) -> dict | None:
    path = directory / name
    return json.loads(path.read_text()) if path.is_file() else None


def summary_section(directory: Path) -> list[str]:
    """The one-minute summary: one line per question a reader asks, each with its date and section."""
    data = {part: load_json(directory, PARTS[part][0]) for part in PARTS}
    gpu = load_json(directory, GPU_JSON)
    out = ["## The one-minute summary", "",
           "Each line comes from the section named beside it, where the table, the command that re-measures"
           " it and the load during the run are. Times are medians; a range is the lowest and highest run.", "",
           "| question | answer | measured | section |", "| --- | --- | --- | --- |"]

    def line(question, part, answer, section):
        d = data.get(part) if part else None
        when = f"{d['meta']['date'][:10]}, `{d['meta']['commit']}`, {cpu_of(d['meta'])}" if d else ""
        if part and d is None:
            answer = f"awaiting the quiet run: `{PARTS[part][2]}`"
        out.append(f"| {question} | {answer} | {when} | {section} |")

    ch = data["chapters"]
    if ch:
        rows = ch["rows"]
        total = sum(r["seconds"] for r in rows)
        over = [r["notebook"][:2] for r in rows if not r["seconds"] <= CHAPTER_SECONDS or r["error"]]
        worst = max(rows, key=lambda r: r["seconds"])
        heavy = [r["notebook"][:2] for r in rows if r["peak_bytes"] > CHAPTER_BYTES]
        answer = (f"{total / 60:.1f} min for all {len(rows)} chapters on {cpu_of(ch['meta'])};"
                  f" slowest chapter {worst['notebook'][:2]},"
                  f" {worst['seconds']:.0f} s; " + (f"over {CHAPTER_SECONDS} s: {', '.join(over)}" if over
                                                     else f"every chapter within {CHAPTER_SECONDS} s")
                  + f"; peak memory at most {fmt_gb(max(r['peak_bytes'] for r in rows))}"
                  + (f"; over {fmt_gb(CHAPTER_BYTES)}: {', '.join(heavy)}" if heavy else "")
                  + "".join(f"; the earlier full run of {o['date'][:-6]} {o['date'][-5:]}"
                            f" ({o.get('cpu') or 'an unrecorded CPU'}): {o['total'] / 60:.1f} min"
                            + (f", over {BOOK_SECONDS / 60:g} min" if o["total"] > BOOK_SECONDS else "")
                            + (f", over {CHAPTER_SECONDS} s: {', '.join(nb[:2] for nb in o['over'])}" if o["over"]
                               else "")
                            for o in ch["meta"].get("earlier_full_runs", [])))
    line("How long does the whole book take to run?", "chapters", answer if ch else "", "The chapters")
    mt = data["make-test"]
    if mt:
        tests, fresh = split_fresh_env(mt["rows"])
        total = sum(r["seconds"] for r in tests)
        failed = [r["target"] for r in mt["rows"] if r["returncode"]]
        answer = (f"{total / 60:.1f} min (" + ", ".join(f"{r['target']} {r['seconds'] / 60:.1f}" for r in tests)
                  + ")" + ("" if fresh is None else f"; {(total + fresh) / 60:.1f} min on a fresh clone"
                                                     f" ({fresh / 60:.1f} of them making the environment)")
                  + (f"; **failed: {', '.join(failed)}**" if failed else ""))
    line("How long does `make test` take?", "make-test", answer if mt else "", "`make test`")
    st = data["step"]
    if st:
        by = {(r["impl"], r["method"], r["threads"], r["wait_policy"]): r for r in st["rows"] if "time" in r}
        parts = []
        for threads in (1, 2):
            ours, theirs = by.get(("transformer_lib", "bare", threads, "default")), by.get(
                ("nn.Transformer", "bare", threads, "default"))
            if ours and theirs:
                parts.append(f"{threads} thread{'s' if threads > 1 else ''}: {ours['time']['median'] * 1000:,.1f} ms,"
                             f" nn.Transformer {theirs['time']['median'] * 1000:,.1f} ms")
        answer = "; ".join(parts) + " (default wait policy)"
    line("How long does one training step of the date model take?", "step", answer if st else "",
         "One training step of the date model")
    at = data["attention"]
    if at:
        by = {(r["impl"], r["d_model"], r["length"]): r for r in at["rows"] if "time" in r}
        fused = [by[("tl_fused", d, L)]["time"]["median"] / by[("torch_mha", d, L)]["time"]["median"]
                 for (i, d, L) in by if i == "tl_fused" and ("torch_mha", d, L) in by]
        expl = [(by[("tl_explicit", d, L)], by[("tl_fused", d, L)]) for (i, d, L) in by
                if i == "tl_explicit" and ("tl_fused", d, L) in by]
        answer = (f"fused path {min(fused):.2f}-{max(fused):.2f}x nn.MultiheadAttention's time at every measured"
                  " length" if fused else "")
        if expl:
            t = max(e["time"]["median"] / f["time"]["median"] for e, f in expl)
            m = max(e["tensor_peak_bytes"] / f["tensor_peak_bytes"] for e, f in expl)
            answer += f"; explicit path up to {t:.1f}x the fused path's time and {m:.0f}x its tensor memory"
    line("How does the library's attention compare with PyTorch's?", "attention", answer if at else "",
         "Attention: transformer_lib against PyTorch")
    si = data["site"]
    if si and "pages" in si["rows"]:
        biggest, _ = heaviest_and_median(si["rows"]["pages"])
        answer = (f"built in {si['rows']['build_seconds']:.0f} s; heaviest page {biggest['page']},"
                  f" {biggest['gzip_bytes'] / MB:.2f} MB compressed")
    elif si:
        answer = f"not measured: {si['rows'].get('error', '')[:80]}"
    line("How long does the site take to build, and how heavy is a page?", "site", answer if si else "", "The site")
    live = "its steps and test exact match, per seed and kernel set, are in the recipe section"
    if ch and any(r["notebook"].startswith("11") for r in ch["rows"]):
        r11 = next(r for r in ch["rows"] if r["notebook"].startswith("11"))
        top = max(r11["cells"], key=lambda c: c["seconds"], default=None)
        live += (f"; chapter 11 ran in {r11['seconds']:.0f} s on {cpu_of(ch['meta'])}"
                 + (f", its heaviest cell (cell {top['cell']}) {top['seconds']:.0f} s" if top else ""))
    shipped = ROOT / "transformer_lib" / "checkpoints" / "transformer_dates.json"
    if shipped.is_file():  # the shipped run is the live run on the machine that made it
        rec = json.loads(shipped.read_text())
        per_step = rec["train_seconds"] / rec["steps_run"]  # evaluations included
        cap = rec["recipe"]["max_steps"]
        live = (f"the shipped run ({rec['date']}, {rec['threads']} threads, load {rec['load_average']}): stopped by"
                f" the rule at {rec['steps_run']:,} steps in {rec['train_seconds']:.0f} s ({1000 * per_step:.0f} ms a"
                f" step, evaluations included), {100 * rec['test_exact_match']:.2f}% test exact match; at that step"
                f" time the cap of {cap:,} steps bounds a run at {cap * per_step:.0f} s; " + live)
    line("What does chapter 11's live run give?", None, live, "Training recipe; The chapters")
    if gpu:
        out.append(f"| And on a GPU? | {gpu.get('summary', 'see the section')} | {gpu['meta']['date'][:10]},"
                   f" `{gpu['meta']['commit']}` | On a GPU |")
    else:
        out.append("| And on a GPU? | awaiting a run on a CUDA machine: `python3 benchmarks/gpu.py --report` | |"
                   " On a GPU |")
    return out + [""]


def write_sections(directory: Path, results: Path, parts) -> None:
    """Replace the sections of `parts` (from their JSON in `directory`) and the summary in `results`."""
    text = results.read_text() if results.is_file() else "# Performance report\n"
    for part in parts:
        text = replace_section(text, PARTS[part][1], "\n".join(SECTIONS[part](load_json(directory, PARTS[part][0]))))
    text = replace_section(text, SUMMARY, "\n".join(summary_section(directory)))
    results.write_text(text.rstrip("\n") + "\n")


# Main ---------------------------------------------------------------------------------------


def wait_for_quiet(max_load: float, max_wait: float) -> None:
    """Wait (up to max_wait seconds) for the 1-minute load average to fall below max_load."""
    waited = 0.0
    while max_wait > 0 and load_average()[0] >= max_load and waited < max_wait:
        print(f"load average {load_average()[0]:.2f} >= {max_load}: waiting ({waited:.0f} of {max_wait:.0f} s)",
              flush=True)
        time.sleep(60)
        waited += 60


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=list(PARTS), action="append", help="run only these parts (repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help=f"small settings to try the script; writes under {QUICK_DIR.relative_to(ROOT)}/")
    parser.add_argument("--report", action="store_true", help="only re-write the report's sections from the JSON files")
    parser.add_argument("--notebooks", nargs="*", type=Path, help="chapters to run (default: chapters/*.ipynb)")
    parser.add_argument("--output-dir", type=Path,
                        help="where the JSON files and RESULTS.md go (default: benchmarks/; with --quick: "
                             f"{QUICK_DIR.relative_to(ROOT)}/)")
    parser.add_argument("--wait-for-load", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the load average to fall below --max-load")
    parser.add_argument("--max-load", type=float, default=MAX_LOAD)
    parser.add_argument("--resume", action="store_true", help="go on from the measurements an interrupted run saved")
    parser.add_argument("--page-weights", nargs="?", type=Path, const=ROOT / "_build" / "html", metavar="SITE",
                        help="only print each page's weight (raw and gzip-compressed) of a built site"
                             " (default _build/html), and write nothing")
    parser.add_argument("--execute-notebook", help=argparse.SUPPRESS)
    parser.add_argument("--attention-config", help=argparse.SUPPRESS)
    parser.add_argument("--step-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.page_weights:
        return print_page_weights(args.page_weights.resolve())
    if args.execute_notebook:
        execute_notebook_child(args.execute_notebook)
        return 0
    if args.attention_config:
        attention_child(*json.loads(args.attention_config))
        return 0
    if args.step_config:
        step_child(*json.loads(args.step_config))
        return 0

    directory = (args.output_dir or (QUICK_DIR if args.quick else HERE)).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / "RESULTS.md"
    if not results.exists() and RESULTS.exists():
        shutil.copy(RESULTS, results)  # a trial run replaces its sections in a copy of the report
    parts = [p for p in PARTS if p in (args.only or PARTS)]
    if args.report:
        write_sections(directory, results, parts)
        print(f"rewrote {', '.join(parts)} and the summary in {results}")
        return 0

    wait_for_quiet(args.max_load, args.wait_for_load)
    for part in parts:
        print(f"{part}:", flush=True)
        progress_path = directory / f".{part}-progress.json"
        progress = json.loads(progress_path.read_text()) if args.resume and progress_path.is_file() else {}
        done = progress.setdefault("done", {})
        began = time.perf_counter()
        meta = progress.get("meta") or new_meta(part, args, argv)
        progress["meta"] = meta

        def save():
            progress_path.write_text(json.dumps(progress, indent=1))

        if part == "chapters":
            paths = [p.resolve() for p in (args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb")))]
            table = directory / PARTS[part][0]
            if args.notebooks and table.is_file():  # refuse before measuring, not after
                try:
                    check_same_cpu(json.loads(table.read_text())["meta"], meta)
                except ValueError as err:
                    raise SystemExit(f"--notebooks: {err}") from None
            if args.quick and not args.notebooks:
                paths = paths[2:4]
            rows = bench_chapters(paths, done, save)
        elif part == "make-test":
            rows = (bench_make_test(("lint",), directory / "logs", fresh=False) if args.quick
                    else bench_make_test((FRESH_ENV, *MAKE_TEST), directory / "logs"))
        elif part == "step":
            rows = bench_step(args.quick, done, save)
        elif part == "attention":
            meta["threads"] = os.cpu_count() or 1
            rows = bench_attention((64, 256) if args.quick else LENGTHS, (128,) if args.quick else D_MODELS,
                                   meta["threads"], 5 if args.quick else 30, 1.0 if args.quick else 6.0, done, save)
        else:
            rows = bench_site()
            print(f"  built in {rows.get('build_seconds', float('nan')):.0f} s"
                  + (f"  ERROR {rows['error']}" if "error" in rows else ""), flush=True)
        finish_meta(meta, began, rows if isinstance(rows, list) else [rows])
        out = {"meta": meta, "rows": rows}
        earlier = directory / PARTS[part][0]
        if part == "chapters" and earlier.is_file():  # some chapters: update their rows; all: keep the old table
            before = json.loads(earlier.read_text())
            out = merge_chapters(before, out) if args.notebooks else keep_earlier_run(before, out)
        elif part == "make-test" and earlier.is_file() and not args.quick:  # keep the old run, summed up
            before = json.loads(earlier.read_text())
            out = out if before["meta"].get("quick") else keep_earlier_make_test(before, out)
        earlier.write_text(json.dumps(out, indent=1) + "\n")
        progress_path.unlink(missing_ok=True)
        write_sections(directory, results, [part])
        print(f"wrote {PARTS[part][0]} and its section of {results}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
