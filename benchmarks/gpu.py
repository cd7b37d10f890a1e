"""The book's timings on a GPU (issue 35): attention against length, the KV cache, a training step.

    python3 benchmarks/gpu.py                           # every part on CUDA: writes benchmarks/gpu.json
    python3 benchmarks/gpu.py --report                  # the same, then the GPU section of RESULTS.md
    python3 benchmarks/gpu.py --quick                   # small settings (under 30 s on an H100)
    python3 benchmarks/gpu.py --from-json               # only re-write the GPU section from gpu.json
    .venv/bin/python benchmarks/gpu.py --device cpu --quick --output-dir /tmp/gpu   # the same code on the CPU

The whole run takes under 3 minutes on an H100. It measures, on one device (`--device`, default
cuda), each in float32:

(a) Attention, forward plus backward, on (batch 32, 8 heads, T, d_k) query, key and value tensors
    (the batch and heads of benchmarks/run.py; d_k 16 and 64, its d_model 128 and 512), T = 64 to
    8192: the plain explicit path `transformer_lib.scaled_dot_product_attention`, which
    materialises the T x T scores and weights; the from-scratch FlashAttention
    `transformer_lib.flash.flash_attention` (tiles of `--flash-block` queries and keys, a Python
    loop over them, so its time is mostly the launching of small kernels); and PyTorch's fused
    `torch.nn.functional.scaled_dot_product_attention`. Time: median and spread of at least 5
    steps after a warm-up step, timed with CUDA events. Peak memory: after the warm-up,
    `torch.cuda.reset_peak_memory_stats()`, one step, then `torch.cuda.max_memory_allocated()`
    less what was allocated before the step (on the CPU: the library's tensor counter
    `transformer_lib.memory.peak_tensor_memory`). A size that does not fit (by estimate, or an
    out-of-memory error) or that would take too long (estimated from the last length, times 4)
    is skipped and listed, and so are the longer lengths of that implementation.
(b) The KV cache in generation: `transformer_lib.lm.generate` with and without the cache, an
    untrained model of chapter 14's size (d_model 64, 4 heads, d_ff 256, 2 layers, max_len 512,
    its character vocabulary), a 16-token prompt, batch 1, several lengths: tokens per second
    (median of 5 runs) and the speed-up.
(c) One training step of the date model (benchmarks/run.py's `date_step`: batch 64, forward,
    label-smoothed loss, backward, clipping, Adam), `transformer_lib.Transformer` against the
    same-size `torch.nn.Transformer`: median and spread of 30 steps after 3 warm-up steps. It
    needs Babel (the date data); without it the part is skipped with that reason.
(d) The card's name, memory and multiprocessors; the torch, CUDA and cuDNN versions.

Nothing is downloaded. On a GPU machine without this repository's virtual environment, run it
with the machine's `python3` from the repository root (`PYTHONPATH=.`); if Babel is missing there,
carry its wheel (`pip download --no-deps babel==2.18.0 -d .whl` here, the pin of requirements.txt;
`pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and `PYTHONPATH=.:/tmp/site`
there). Without a .git folder there, `BENCH_COMMIT=<commit>` names the commit measured.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("bench_run", HERE / "run.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import lm  # noqa: E402
from transformer_lib.flash import flash_attention  # noqa: E402

GPU_JSON = bench.GPU_JSON
SECTION = "gpu"
COMMAND = "python3 benchmarks/gpu.py --report"
BATCH, HEADS = bench.BATCH, bench.HEADS
HEAD_WIDTHS = (16, 64)  # d_k of run.py's d_model 128 and 512 with 8 heads
LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
IMPLS = {
    "explicit": "explicit (transformer_lib.scaled_dot_product_attention)",
    "flash": "from-scratch FlashAttention (transformer_lib.flash)",
    "sdpa": "F.scaled_dot_product_attention",
}
GEN_LENGTHS = (32, 128, 256, 480)
PROMPT = 16
MIN_REPS = bench.MIN_REPS


# Timing and memory on either device ----------------------------------------------------------


class Device:
    """Timing and peak memory on CUDA (events, the allocator's peak counter) or on the CPU
    (perf_counter, the library's tensor counter)."""

    def __init__(self, name: str):
        self.device = torch.device(name)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available here (try --device cpu)")

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, fn) -> float:
        """Seconds of one call of fn(), measured on the device's own clock."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000
        began = time.perf_counter()
        fn()
        return time.perf_counter() - began

    def times(self, fn, reps: int = MIN_REPS, max_reps: int = 30, max_seconds: float = 2.0) -> list[float]:
        """At least `reps` timed calls, more (up to `max_reps`) while they take under `max_seconds`."""
        out, begun = [], time.perf_counter()
        while len(out) < reps or (len(out) < max_reps and time.perf_counter() - begun < max_seconds):
            out.append(self.seconds(fn))
        return out

    def peak_bytes(self, fn) -> int:
        """Peak memory of one call of fn() over what was allocated before it."""
        if self.cuda:
            self.sync()
            before = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            fn()
            self.sync()
            return torch.cuda.max_memory_allocated(self.device) - before
        from transformer_lib.memory import peak_tensor_memory

        with peak_tensor_memory() as mem:
            fn()
        return mem.peak

    def free_bytes(self) -> float:
        if self.cuda:
            return torch.cuda.mem_get_info(self.device)[0]
        return float("inf")

    def release(self):
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))) or (
        isinstance(err, RuntimeError) and ("out of memory" in str(err) or "can't allocate memory" in str(err)))


def card(dev: Device) -> dict:
    """(d) What ran it."""
    info = {"device": str(dev.device), "torch": torch.__version__, "python": platform.python_version()}
    if dev.cuda:
        p = torch.cuda.get_device_properties(dev.device)
        info.update(name=p.name, memory_gb=round(p.total_memory / 2**30, 1), multiprocessors=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version(), tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
    else:
        info.update(name=bench.machine()["cpu"], threads=torch.get_num_threads(), cuda=None,
                    kernels=torch.backends.cpu.get_cpu_capability())
    return info


# (a) Attention against length -----------------------------------------------------------------


def attention_bytes(impl: str, length: int, d_k: int, itemsize: int = 4) -> float:
    """Rough peak of one forward+backward step: q, k, v, the output and their gradients, and
    for the explicit path four B x h x T x T tensors (scores, weights and their gradients)."""
    linear = 8 * BATCH * HEADS * length * d_k * itemsize
    return linear + (4 * BATCH * HEADS * length * length * itemsize if impl == "explicit" else 0)


def attention_fn(impl: str, block: int):
    if impl == "explicit":
        return lambda q, k, v: tl.scaled_dot_product_attention(q, k, v)[0]
    if impl == "flash":
        return lambda q, k, v: flash_attention(q, k, v, block_q=block, block_k=block)
    return torch.nn.functional.scaled_dot_product_attention


def bench_attention(dev: Device, lengths, widths, block: int, max_step_seconds: float, log) -> list[dict]:
    rows = []
    for d_k in widths:
        stopped: dict[str, str] = {}  # impl -> why its longer lengths are skipped
        last: dict[str, float] = {}  # impl -> median step seconds at the previous length
        for length in lengths:
            for impl in IMPLS:
                row = {"impl": impl, "d_k": d_k, "length": length, "estimate_bytes": attention_bytes(impl, length, d_k)}
                rows.append(row)
                label = f"  d_k={d_k} T={length} {impl}"
                if impl in stopped:
                    row["skipped"] = stopped[impl]
                    continue
                if row["estimate_bytes"] > 0.9 * dev.free_bytes():
                    row["skipped"] = (f"estimated {row['estimate_bytes'] / 1e9:.1f} GB > 90% of the"
                                      f" {dev.free_bytes() / 1e9:.1f} GB free")
                elif impl in last and 4 * last[impl] > max_step_seconds:
                    row["skipped"] = f"estimated {4 * last[impl]:.1f} s a step > {max_step_seconds:.0f} s"
                if "skipped" in row:
                    stopped[impl] = f"skipped at T = {length} and longer ({row['skipped']})"
                    log(f"{label}: skipped ({row['skipped']})")
                    continue
                row.update(attention_one(dev, impl, length, d_k, block))
                if "skipped" in row:
                    stopped[impl] = f"skipped at T = {length} and longer ({row['skipped']})"
                    log(f"{label}: skipped ({row['skipped']})")
                    continue
                last[impl] = row["time"]["median"]
                log(f"{label}: {bench.fmt_time(row['time'])} ms, peak {bench.fmt_mb(row['peak_bytes'])}")
    return rows


def attention_one(dev: Device, impl: str, length: int, d_k: int, block: int) -> dict:
    """Time and peak memory of one configuration; {"skipped": why} if it does not run."""
    failure = None
    q = k = v = grad = None
    try:
        gen = torch.Generator(device=dev.device).manual_seed(0)
        q, k, v = (torch.randn(BATCH, HEADS, length, d_k, device=dev.device, generator=gen).requires_grad_()
                   for _ in range(3))
        grad = torch.ones(BATCH, HEADS, length, d_k, device=dev.device)
        fn = attention_fn(impl, block)

        def step():
            fn(q, k, v).backward(grad)
            q.grad = k.grad = v.grad = None

        warm = dev.seconds(step)
        times = dev.times(step, max_seconds=max(2.0, 3 * warm))
        peak = dev.peak_bytes(step)
    except Exception as err:  # noqa: BLE001 - a size that does not fit is listed, never a crash
        failure = "out of memory" if is_out_of_memory(err) else f"{type(err).__name__}: {str(err)[:120]}"
    q = k = v = grad = step = None  # the exception's traceback is gone: the tensors can be freed
    dev.release()
    if failure:
        return {"skipped": failure}
    return {"time": bench.spread(times), "warmup_seconds": warm, "peak_bytes": peak}


# (b) The KV cache ------------------------------------------------------------------------------


def bench_cache(dev: Device, lengths, log) -> dict:
    text = lm.load_corpus()
    vocab = tl.vocab.Vocab.from_texts([text])
    config = lm.CausalLMConfig(vocab_size=len(vocab), d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=512)
    torch.manual_seed(0)
    model = lm.CausalLM(config).to(dev.device)
    prompt = torch.tensor([vocab.encode(text[:PROMPT])], device=dev.device)
    rows = []
    for n in lengths:
        row = {"new_tokens": n}
        for cached in (True, False):
            run = lambda: lm.generate(model, prompt, n, use_cache=cached)  # noqa: E731
            dev.seconds(run)  # warm-up
            times = dev.times(run, max_seconds=1.0)
            row["cached" if cached else "uncached"] = bench.spread(times)
        row["speedup"] = row["uncached"]["median"] / row["cached"]["median"]
        log(f"  {n} tokens: cached {n / row['cached']['median']:,.0f} tokens/s, uncached"
            f" {n / row['uncached']['median']:,.0f} tokens/s, speed-up {row['speedup']:.1f}x")
        rows.append(row)
    return {"model": {"d_model": 64, "n_heads": 4, "d_ff": 256, "n_layers": 2, "max_len": 512,
                      "vocab_size": len(vocab), "parameters": tl.count_parameters(model)},
            "prompt": PROMPT, "batch": 1, "rows": rows}


# (c) One training step of the date model -------------------------------------------------------


def bench_step(dev: Device, reps: int, log) -> dict:
    try:
        import babel  # noqa: F401  (the date data needs it)
    except ImportError:
        return {"skipped": "Babel is not installed here (the date data needs it): carry its wheel"}
    rows = []
    for impl in ("transformer_lib", "nn.Transformer"):
        try:
            step, n_params = bench.date_step(impl, device=str(dev.device))
            counter = iter(range(10**9))
            for _ in range(3):
                dev.seconds(lambda: step(next(counter)))
            times = dev.times(lambda: step(next(counter)), reps=reps, max_reps=reps)
            peak = dev.peak_bytes(lambda: step(next(counter)))
        except Exception as err:  # noqa: BLE001
            rows.append({"impl": impl, "skipped": f"{type(err).__name__}: {str(err)[:160]}"})
            log(f"  {impl}: skipped ({rows[-1]['skipped']})")
            continue
        finally:
            dev.release()
        rows.append({"impl": impl, "parameters": n_params, "time": bench.spread(times), "peak_bytes": peak})
        log(f"  {impl}: {bench.fmt_time(rows[-1]['time'])} ms a step")
    return {"batch": 64, "rows": rows}


# The report ----------------------------------------------------------------------------------


def summary_line(data: dict) -> str:
    """One line for the report's summary."""
    parts = [data["card"]["name"]]
    att = [r for r in data["attention"] if "time" in r]
    if att:
        d_k = max(r["d_k"] for r in att)
        longest = {}
        for r in att:
            if r["d_k"] == d_k:
                longest[r["impl"]] = r
        common = max((L for L in {r["length"] for r in att if r["d_k"] == d_k}
                      if all("time" in r for r in data["attention"]
                             if r["d_k"] == d_k and r["length"] == L and r["impl"] in ("flash", "sdpa"))), default=None)
        if common:
            at = {r["impl"]: r for r in att if r["d_k"] == d_k and r["length"] == common}
            parts.append(f"attention at T = {common}, d_k {d_k}: "
                         + ", ".join(f"{name} {at[name]['time']['median'] * 1000:,.1f} ms"
                                     for name in IMPLS if name in at))
    cache = data.get("cache", {}).get("rows", [])
    if cache:
        parts.append(f"KV cache speed-up at {cache[-1]['new_tokens']} tokens {cache[-1]['speedup']:.1f}x")
    step = {r["impl"]: r for r in data.get("step", {}).get("rows", []) if "time" in r}
    if len(step) == 2:
        parts.append(f"date-model step {step['transformer_lib']['time']['median'] * 1000:.1f} ms"
                     f" (nn.Transformer {step['nn.Transformer']['time']['median'] * 1000:.1f} ms)")
    return "; ".join(parts)


def section(data: dict | None) -> list[str]:
    out = ["## On a GPU", ""]
    if data is None:
        return out + ["**Awaiting a run on a GPU machine** (issue 35). Measure it there with", "",
                      f"    PYTHONPATH=. {COMMAND}", "",
                      "(the docstring of `benchmarks/gpu.py` says how to bring Babel). It writes"
                      " `benchmarks/gpu.json` and this section.", ""]
    meta, c = data["meta"], data["card"]
    where = (f"{c['name']} ({c.get('memory_gb', '?')} GB, {c.get('multiprocessors', '?')} multiprocessors), torch"
             f" {c['torch']}, CUDA {c.get('cuda')}, cuDNN {c.get('cudnn')}" if c.get("cuda")
             else f"{c['name']} (the CPU, {c.get('threads')} threads, torch {c['torch']}): a trial of the script")
    dirty = " plus uncommitted changes" if meta["dirty"] else ""
    out += [f"Measured {meta['date']} at commit `{meta['commit']}`{dirty}"
            f" on {where}; float32; whole run {meta['seconds']:.0f} s. Re-measure: `{meta['command']}`."
            + (" **Quick settings (`--quick`).**" if meta.get("quick") else ""), "",
            "Times are medians of at least 5 runs after a warm-up (lowest-highest), timed with CUDA events on the"
            " GPU; peak memory is `torch.cuda.max_memory_allocated()` of one step after"
            " `torch.cuda.reset_peak_memory_stats()`, less what was allocated before it (on the CPU, the library's"
            " tensor counter).", ""]
    att = data["attention"]
    if att:
        block = meta.get("flash_block")
        out += ["### Attention against length", "",
                f"Forward plus backward on (batch {BATCH}, {HEADS} heads, T, d_k) tensors. The from-scratch"
                f" FlashAttention walks tiles of {block} queries by {block} keys in a Python loop, so on a GPU its time"
                " is mostly the launching of small kernels; its memory is what it shows: linear in T.", ""]
        for d_k in sorted({r["d_k"] for r in att}):
            out += [f"d_k = {d_k}: time in ms, and peak memory", "",
                    "| T | " + " | ".join(IMPLS.values()) + " |", "| ---: |" + " --- |" * len(IMPLS)]
            for length in sorted({r["length"] for r in att if r["d_k"] == d_k}):
                cells = []
                for impl in IMPLS:
                    r = next((r for r in att if (r["impl"], r["d_k"], r["length"]) == (impl, d_k, length)), None)
                    if r is None:
                        cells.append("")
                    elif "skipped" in r:
                        cells.append(f"skipped: {r['skipped']}")
                    else:
                        cells.append(f"{bench.fmt_time(r['time'])}; {bench.fmt_mb(r['peak_bytes'])}")
                out.append(f"| {length} | " + " | ".join(cells) + " |")
            out.append("")
    cache = data.get("cache")
    if cache and cache.get("rows"):
        m = cache["model"]
        out += ["### The KV cache in generation", "",
                f"`lm.generate`, greedy, with and without the cache: an untrained model of chapter 14's size (d_model"
                f" {m['d_model']}, {m['n_heads']} heads, d_ff {m['d_ff']}, {m['n_layers']} layers, {m['parameters']:,}"
                f" parameters), a {cache['prompt']}-token prompt, batch {cache['batch']}; tokens per second from the"
                " median time.", "",
                "| new tokens | with the cache: tokens/s | without: tokens/s | speed-up |",
                "| ---: | ---: | ---: | ---: |"]
        for r in cache["rows"]:
            n = r["new_tokens"]
            out.append(f"| {n} | {n / r['cached']['median']:,.0f} | {n / r['uncached']['median']:,.0f} |"
                       f" {bench.fmt_ratio(r['uncached'], r['cached'])} |")
        out.append("")
    step = data.get("step", {})
    if step:
        out += ["### One training step of the date model", ""]
        if "skipped" in step:
            out += [f"Skipped: {step['skipped']}.", ""]
        else:
            out += [f"Batch {step['batch']} date pairs, forward, label-smoothed loss, backward, clipping, Adam (as in"
                    " the CPU step table); median (lowest-highest) of 30 steps after 3 warm-up steps.", "",
                    "| model | parameters | ms per step | peak memory |", "| --- | ---: | ---: | ---: |"]
            for r in step["rows"]:
                if "skipped" in r:
                    out.append(f"| {r['impl']} | | skipped: {r['skipped']} | |")
                else:
                    out.append(f"| {r['impl']} | {r['parameters']:,} | {bench.fmt_time(r['time'])} |"
                               f" {bench.fmt_mb(r['peak_bytes'])} |")
            out.append("")
    skipped = [r for r in att if "skipped" in r and not r["skipped"].startswith("skipped at")]
    if skipped:
        out += ["Skipped sizes: " + "; ".join(f"{IMPLS[r['impl']]}, d_k {r['d_k']}, T = {r['length']}: {r['skipped']}"
                                             for r in skipped) + " (and the longer lengths of each).", ""]
    return out


def write_report(directory: Path, results: Path) -> None:
    data = bench.load_json(directory, GPU_JSON)
    text = results.read_text() if results.is_file() else "# Performance report\n"
    results.write_text(bench.replace_section(text, SECTION, "\n".join(section(data))).rstrip("\n") + "\n")
    bench.write_sections(directory, results, [])  # the summary quotes the GPU line


# Main ------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="small settings (under 30 s on an H100)")
    parser.add_argument("--report", action="store_true", help="also write the GPU section of RESULTS.md")
    parser.add_argument("--from-json", action="store_true", help="only re-write the GPU section from gpu.json")
    parser.add_argument("--output-dir", type=Path, default=HERE,
                        help="where gpu.json (and with --report, RESULTS.md) go (default: benchmarks/)")
    parser.add_argument("--lengths", type=int, nargs="+", help="attention lengths (default 64 to 8192)")
    parser.add_argument("--flash-block", type=int, default=128, help="tile size of the from-scratch FlashAttention")
    parser.add_argument("--max-step-seconds", type=float, default=3.0,
                        help="skip an attention size whose step is estimated to take longer (default 3)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads (--device cpu)")
    args = parser.parse_args(argv)
    directory = args.output_dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / "RESULTS.md"
    if (args.report or args.from_json) and directory != HERE and not results.exists() and bench.RESULTS.exists():
        results.write_text(bench.RESULTS.read_text())
    if args.from_json:
        write_report(directory, results)
        print(f"rewrote the GPU section of {results}")
        return 0

    dev = Device(args.device)
    torch.set_num_threads(args.threads)
    begun = time.perf_counter()

    def log(text):
        print(f"[{time.perf_counter() - begun:6.1f} s] {text}", flush=True)

    cpu = not dev.cuda
    quick_lengths = (64, 256) if cpu else (64, 512, 2048)
    lengths = args.lengths or (quick_lengths if args.quick else LENGTHS)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), **bench.git_commit(), "command": COMMAND,
            "argv": " ".join(["benchmarks/gpu.py", *argv]), "quick": args.quick, "flash_block": args.flash_block,
            "load_start": [round(x, 2) for x in os.getloadavg()]}
    data = {"meta": meta, "card": card(dev)}
    log(f"device: {data['card']['name']}, torch {torch.__version__}")
    log("(a) attention")
    data["attention"] = bench_attention(dev, lengths, (16,) if args.quick else HEAD_WIDTHS, args.flash_block,
                                        args.max_step_seconds, log)
    log("(b) the KV cache")
    try:
        data["cache"] = bench_cache(dev, (32, 64) if args.quick else GEN_LENGTHS, log)
    except Exception as err:  # noqa: BLE001 - listed, never a crash
        data["cache"] = {"skipped": f"{type(err).__name__}: {str(err)[:160]}"}
        log(f"  skipped ({data['cache']['skipped']})")
    log("(c) one training step of the date model")
    data["step"] = bench_step(dev, MIN_REPS if args.quick else 30, log)
    meta["seconds"] = round(time.perf_counter() - begun, 1)
    meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
    data["summary"] = summary_line(data)
    (directory / GPU_JSON).write_text(json.dumps(data, indent=1) + "\n")
    log(f"wrote {directory / GPU_JSON}: {data['summary']}")
    if args.report:
        write_report(directory, results)
        log(f"wrote the GPU section of {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
