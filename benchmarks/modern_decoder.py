"""Chapter 16's study, longer: the 2017 block against each of today's parts, one at a time.

    python benchmarks/modern_decoder.py                         # 1,000 steps, seeds 0 1 2
    python benchmarks/modern_decoder.py --steps 200 --seeds 0 1  # the chapter's own runs
    python benchmarks/modern_decoder.py --speed                  # also generation speed, larger model
    python benchmarks/modern_decoder.py --report                 # rewrite the report from saved runs

The protocol is the chapter's, with more steps: chapter 14's character model (d_model 64, 4
heads, 2 layers, d_ff 256, max_len 256) on the book's prose (first 90% for training, last 10%
held out), each variant with the d_ff that `lm.match_d_ff` gives it (the untied output is not
matched, RoPE needs no matching), trained with `tl.train` on batches of 16 random windows of 32
characters, Adam (0.9, 0.98), learning rate rising linearly to 5e-3 over 20 steps then constant,
clipping 1, plain cross-entropy, 1 thread. The seed fixes the initial weights and the windows.
Measured: the held-out loss on every consecutive 32-character held-out window, and the loss at
each position of 256-character held-out windows (past the trained length), also with a
32-position sliding window for the rotary models. `--speed` times `lm.generate` (batch 8,
prompt 16, 256 new tokens, with the cache, median of 5 interleaved runs) for a larger model
(d_model 256, 8 heads, 4 layers) with 8, 2 and 1 key/value heads, the latter two with the d_ff
that matches their layers' parameters to the first's (`speed_models`). Run it with OpenMP's
default wait policy (OMP_WAIT_POLICY unset), as a reader runs the chapter.

Runs are saved in benchmarks/modern_decoder.json as they finish (the script resumes; commit the
file); the report replaces the section between the chapter 16 markers of benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.vocab import Vocab

HERE = Path(__file__).resolve().parent
SAVED = HERE / "modern_decoder.json"  # committed: the data behind the section
RESULTS = HERE / "RESULTS.md"
MARK_BEGIN, MARK_END = "<!-- chapter 16 study: begin -->", "<!-- chapter 16 study: end -->"
BATCH, LENGTH, LONG = 16, 32, 256
BINS = ((0, 32), (32, 64), (64, 128), (128, 256))
MODERN = dict(norm="rms", positions="rope", ffn="swiglu", n_kv_heads=2, bias=False)


def data():
    text = lm.load_corpus()
    vocab = Vocab.from_texts([text])
    ids = torch.tensor(vocab.encode(text))
    split = int(0.9 * len(ids))
    counts = torch.tensor(list(collections.Counter(text).values()), dtype=torch.float64) / len(text)
    return len(vocab), ids[:split], ids[split:], float(-(counts * counts.log()).sum())


def windows(data, length):
    n = (len(data) - 1) // length
    return data[: n * length].view(n, length), data[1: n * length + 1].view(n, length)


def variants(vocab_size):
    """The chapter's variants, each within the 2017 block's parameter budget, plus the two extra
    positional schemes of its extrapolation section."""
    R = dataclasses.replace
    base = lm.CausalLMConfig(vocab_size, d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=LONG)
    with torch.device("meta"):
        budget = lm.layer_parameters(lm.CausalLM(base))
    return {
        "2017 block": base,
        "RMSNorm": lm.match_d_ff(R(base, norm="rms"), budget),
        "RoPE": R(base, positions="rope"),
        "SwiGLU": lm.match_d_ff(R(base, ffn="swiglu"), budget),
        "GQA, 2 k/v heads": lm.match_d_ff(R(base, n_kv_heads=2), budget),
        "no biases": lm.match_d_ff(R(base, bias=False), budget),
        "untied output": R(base, tie_output=False),
        "all together": lm.match_d_ff(R(base, **MODERN), budget),
        "learned positions": R(base, positions="learned"),
        "no positions": R(base, positions="none"),
    }


def windowed_logits(model, x, window):
    i = torch.arange(x.shape[1])
    band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    h = model.embed(x)
    for layer in model.layers:
        h = layer(h, band)
    return model.out(model.norm(h))


def per_position(logits, y):
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)


def run(config, seed, steps, train_ids, heldout_ids) -> dict:
    cfg = tl.TrainConfig(max_steps=steps, eval_every=steps, schedule="linear_warmup", warmup=20, lr=5e-3,
                         label_smoothing=0.0, progress=False)
    torch.manual_seed(seed)
    model = lm.CausalLM(config)
    load, began, cpu = os.getloadavg()[0], time.perf_counter(), time.process_time()
    history = tl.train(model, lm.random_windows(train_ids, BATCH, LENGTH, steps, seed=seed),
                       [windows(heldout_ids, LENGTH)], cfg, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    long_x, long_y = windows(heldout_ids, LONG)
    with torch.no_grad():
        curves = {"causal": per_position(model(long_x), long_y)}
        if config.positions == "rope":
            curves["window"] = per_position(windowed_logits(model, long_x, LENGTH), long_y)
    return dict(loss=history.eval_loss[-1], d_ff=config.d_ff, layer_parameters=lm.layer_parameters(model),
                bins={k: [c[a:b].mean().item() for a, b in BINS] for k, c in curves.items()},
                seconds=time.perf_counter() - began, cpu_seconds=time.process_time() - cpu,
                load=[load, os.getloadavg()[0]])


def speed_models() -> dict:
    """The three models of the speed table: the chapter's 'all together' shape at d_model 256, 8
    query heads, 4 layers, with 8, 2 and 1 key/value heads. Fewer key/value heads shrink the key
    and value projections, so the 2- and 1-head models get the d_ff of `lm.match_d_ff` that
    gives their layers the 8-head model's parameter count: the table then compares the cache,
    not the model size."""
    base = lm.CausalLMConfig(96, d_model=256, n_heads=8, d_ff=683, n_layers=4, max_len=512,
                             **{**MODERN, "n_kv_heads": 8})
    with torch.device("meta"):
        budget = lm.layer_parameters(lm.CausalLM(base))
    models = {}
    for h_kv in (8, 2, 1):
        config = base if h_kv == 8 else lm.match_d_ff(dataclasses.replace(base, n_kv_heads=h_kv), budget)
        torch.manual_seed(0)
        models[h_kv] = lm.CausalLM(config).eval()
    return models


def speed(repeats=5, new=256) -> dict:
    """Tokens per second of `lm.generate` with the cache for 8, 2 and 1 key/value heads, the
    models matched in size (`speed_models`): the median of `repeats` interleaved runs, with the
    lowest and highest."""
    prompts = torch.randint(0, 96, (8, 16), generator=torch.Generator().manual_seed(0))
    models = speed_models()
    seconds = {h_kv: [] for h_kv in models}
    load = os.getloadavg()[0]
    for _ in range(repeats):
        for h_kv, model in models.items():
            began = time.perf_counter()
            lm.generate(model, prompts, new)
            seconds[h_kv].append(time.perf_counter() - began)
    cache = {h_kv: 2 * 4 * h_kv * 32 * 4 for h_kv in models}  # bytes per token: K, V, layers, heads, d_k, float32
    return dict(seconds={str(h): sorted(s) for h, s in seconds.items()}, tokens=8 * new, repeats=repeats,
                d_ff={str(h): m.config.d_ff for h, m in models.items()},
                layer_parameters={str(h): lm.layer_parameters(m) for h, m in models.items()},
                bytes_per_token={str(h): b for h, b in cache.items()}, load=[load, os.getloadavg()[0]],
                threads=torch.get_num_threads(), wait_policy=os.environ.get("OMP_WAIT_POLICY") or "default")


def report(saved: dict, vocab_size: int, H1: float) -> str:
    configs = variants(vocab_size)
    lines = [MARK_BEGIN, "## Chapter 16: the modern decoder, one change at a time, longer", "",
             "Written by `benchmarks/modern_decoder.py` (re-run: `.venv/bin/python benchmarks/modern_decoder.py`; "
             "it resumes from benchmarks/modern_decoder.json; `--report` rewrites this section; `--speed` adds the "
             "speed table). The chapter's "
             "protocol with more steps: chapter 14's character model (d_model 64, 4 heads, 2 layers, d_ff 256) "
             "on the book's prose, each variant with the d_ff of `lm.match_d_ff` (layers within 0.5% of the 2017 "
             "block's parameters; the untied output adds V x d_model in its output layer and is not matched), "
             "batches of 16 random windows of 32 characters, Adam (0.9, 0.98), learning rate rising to 5e-3 over "
             "20 steps then constant, clipping 1, 1 thread; the seed fixes the initial weights and the windows. "
             f"Held-out loss in nats per character over every 32-character window of the held-out tenth "
             f"(unigram entropy H1 = {H1:.2f}). Losses depend in their last digits on the kernel set; "
             "read differences as ranges over seeds.", ""]
    for steps in sorted({int(k.split("/", 1)[0]) for k in saved.get("runs", {})}):
        runs = {name: {int(k.rsplit("/", 1)[1]): v for k, v in saved["runs"].items()
                       if k.startswith(f"{steps}/{name}/")} for name in configs}  # names hold "/"
        seeds = sorted(runs["2017 block"])
        if not seeds:
            continue
        when = {v.get("date", "") for k, v in saved["runs"].items() if k.startswith(f"{steps}/")}
        lines += [f"### {steps} steps, seeds {', '.join(map(str, seeds))} ({', '.join(sorted(when))})", "",
                  "| variant | d_ff | layer parameters | held-out loss per seed | change from the 2017 block "
                  "(per seed; range) | CPU s per run |", "| --- | ---: | ---: | --- | --- | ---: |"]
        for name, config in configs.items():
            got = runs[name]
            if not got:
                continue
            changes = [got[s]["loss"] - runs["2017 block"][s]["loss"] for s in seeds if s in got]
            span = "" if name == "2017 block" else f"{min(changes):+.3f} to {max(changes):+.3f}"
            label = {"untied output": "untied output (+ V x d_model)",
                     "learned positions": f"learned positions (+ {LONG} x 64 table)"}.get(name, name)
            lines.append(f"| {label} | {config.d_ff} | {next(iter(got.values()))['layer_parameters']:,} | "
                         + ", ".join(f"{got[s]['loss']:.3f}" for s in seeds if s in got) + f" | {span} | "
                         + f"{sum(v['cpu_seconds'] for v in got.values()) / len(got):.0f} |")
        lines += ["", "Past the trained length: mean loss (over seeds and 256-character held-out windows) at "
                      "positions 0-31 (trained), 32-63, 64-127 and 128-255.", "",
                  "| positions | 0-31 | 32-63 | 64-127 | 128-255 |", "| --- | ---: | ---: | ---: | ---: |"]
        for label, name, key in (("sinusoidal (2017 block)", "2017 block", "causal"),
                                 ("learned (rows past 31 untrained)", "learned positions", "causal"),
                                 ("RoPE", "RoPE", "causal"), ("none", "no positions", "causal"),
                                 ("RoPE, 32-position window", "RoPE", "window")):
            got = [v["bins"][key] for v in runs[name].values() if key in v["bins"]]
            if got:
                means = [sum(b[i] for b in got) / len(got) for i in range(len(BINS))]
                lines.append(f"| {label} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
        lines.append("")
    sp = saved.get("speed")
    if sp and "seconds" in sp:  # measured with the models matched in size (older entries were not)
        med = {h: statistics.median(v) for h, v in sp["seconds"].items()}
        lines += ["### Generation speed and cache size at a larger size", "",
                  f"`lm.generate` with the cache, batch 8, prompt 16, 256 new tokens; the median of {sp['repeats']}"
                  f" interleaved runs (lowest-highest), {sp['threads']} thread(s), wait policy {sp['wait_policy']},"
                  f" load average {sp['load'][0]:.1f} at the start and {sp['load'][1]:.1f} at the end"
                  f" ({sp.get('date', '')}; re-measure: `.venv/bin/python benchmarks/modern_decoder.py --speed`)."
                  " Untrained models of the chapter's 'all together' shape at d_model 256, 8 query heads, 4 layers;"
                  " with fewer key/value heads the key and value projections shrink, so those models get the d_ff"
                  " of `lm.match_d_ff` that brings their layers to the 8-head model's parameter count.", "",
                  "| key/value heads | d_ff | layer parameters | cache bytes per token (float32) |"
                  " tokens per second: median (lowest-highest) | rate / rate with 8 |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for h in ("8", "2", "1"):
            s_ = sp["seconds"][h]
            lines.append(f"| {h} | {sp['d_ff'][h]} | {sp['layer_parameters'][h]:,} | {sp['bytes_per_token'][h]:,} |"
                         f" {sp['tokens'] / med[h]:.0f} ({sp['tokens'] / s_[-1]:.0f}-{sp['tokens'] / s_[0]:.0f}) |"
                         f" {med['8'] / med[h]:.2f} |")
        lines += ["", "The cache shrinks exactly with the key/value heads. Note that the library's "
                      "`MultiHeadAttention.share_kv` repeats each shared key/value head for its group before the "
                      "attention product, so attention reads full-size keys and values whatever the number of "
                      "key/value heads; a grouped kernel (`scaled_dot_product_attention(..., enable_gqa=True)` "
                      "on the fused path, or chapter 16's `grouped_attention`, which stacks each group's queries as "
                      "rows; a 5-D broadcast matmul copies too) would avoid that copy.", ""]
    else:
        lines += ["### Generation speed and cache size at a larger size", "",
                  "**Awaiting the final run on a quiet machine**, with the three models matched in size: "
                  "`.venv/bin/python benchmarks/modern_decoder.py --speed`.", ""]
    lines.append(MARK_END)
    return "\n".join(lines)


def write_report(section: str) -> None:
    text = RESULTS.read_text()
    if MARK_BEGIN in text:
        before, rest = text.split(MARK_BEGIN, 1)
        text = before + section + rest.split(MARK_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", help="variant names (default: all)")
    parser.add_argument("--speed", action="store_true", help="also time generation with 8, 2, 1 key/value heads")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the saved runs")
    args = parser.parse_args()
    tl.runtime.setup(seed=0, threads=1)
    vocab_size, train_ids, heldout_ids, H1 = data()
    saved = json.loads(SAVED.read_text()) if SAVED.exists() else {"runs": {}}
    today = dt.date.today().isoformat()
    if not args.report:
        for name, config in variants(vocab_size).items():
            if args.only and name not in args.only:
                continue
            for seed in args.seeds:
                key = f"{args.steps}/{name}/{seed}"
                if key in saved["runs"]:
                    continue
                saved["runs"][key] = {**run(config, seed, args.steps, train_ids, heldout_ids), "date": today}
                r = saved["runs"][key]
                print(f"{key}: held-out {r['loss']:.3f}, {r['cpu_seconds']:.0f} s CPU, {r['seconds']:.0f} s", flush=True)
                SAVED.parent.mkdir(exist_ok=True)
                SAVED.write_text(json.dumps(saved, indent=1))
        if args.speed:
            saved["speed"] = {**speed(), "date": today}
            SAVED.write_text(json.dumps(saved, indent=1))
    section = report(saved, vocab_size, H1)
    write_report(section)
    print(section)


if __name__ == "__main__":
    main()
