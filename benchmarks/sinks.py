"""Attention sinks in chapter 16's models, and a streaming window that keeps the first tokens.

    python benchmarks/sinks.py run --seeds 0-4 --steps 200 1000 --kernels native [--jobs 2]
    python benchmarks/sinks.py report          # the tables, from sinks.json, into RESULTS.md

`run` trains chapter 16's 2017 block, its RoPE variant and "all together" (RMSNorm, RoPE,
SwiGLU, 2 key/value heads, no biases, d_ff matched) with the chapter's recipe (16 random
32-character windows a step, Adam, warm-up to 5e-3 over 20 steps, then constant), one process
per (seed, variant, steps, kernel set) on one thread. After training it records, on every
held-out 32-character window (`book.sinks`):
- per layer and head, the mean attention weight that queries at positions >= 8 put on position
  0 and on positions 0-3 (`sink_scores`), and uniform attention's share (`uniform_share`);
- per layer and head, the weight on spaces relative to uniform attention (`relative_weight`);
and on the held-out windows of 256 characters, the mean loss at positions 0-31 and 128-255 of
the full context, of the chapter's banded 32-position window (`banded_loss`), and of streaming
caches of 32 tokens renumbered from 0 (`streaming_loss`): the last 32, and the first 4 plus the
last 28 (StreamingLLM's set-up, Xiao et al. 2023, arXiv:2309.17453). Writes
benchmarks/sinks.json (one entry per run; a rerun skips what is there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seeds import parse_seeds

HERE = Path(__file__).resolve().parent
STORE = HERE / "sinks.json"
SECTION = "sinks study"  # its markers in RESULTS.md: <!-- sinks study: begin --> ... end -->
VARIANTS = ("2017 block", "RoPE", "all together")
WINDOW, N_SINK, START, LENGTH, LONG = 32, 4, 8, 32, 256
FAR = (128, 256)  # the positions the streaming losses are averaged over


def one_run(seed: int, variant: str, steps: int, max_windows: int | None = None) -> dict:
    import dataclasses

    import torch

    import transformer_lib as tl
    from transformer_lib import lm
    from transformer_lib.book import sinks
    from transformer_lib.vocab import Vocab

    torch.set_num_threads(1)
    text = lm.load_corpus()
    vocab = Vocab.from_texts([text])
    ids = torch.tensor(vocab.encode(text))
    split = int(0.9 * len(ids))
    train_ids, held_ids = ids[:split], ids[split:]

    def windows(data, length):
        n = (len(data) - 1) // length
        n = n if max_windows is None else min(n, max_windows)
        return data[: n * length].view(n, length), data[1: n * length + 1].view(n, length)

    base = lm.CausalLMConfig(len(vocab), d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=LONG)
    budget = lm.layer_parameters(lm.CausalLM(base))
    R = dataclasses.replace
    configs = {"2017 block": base, "RoPE": R(base, positions="rope"),
               "all together": lm.match_d_ff(R(base, norm="rms", positions="rope", ffn="swiglu",
                                                n_kv_heads=2, bias=False), budget)}
    cfg = tl.TrainConfig(max_steps=steps, eval_every=steps, schedule="linear_warmup", warmup=min(20, steps),
                         lr=5e-3, label_smoothing=0.0, progress=False)
    short_x, short_y = windows(held_ids, LENGTH)
    long_x, long_y = windows(held_ids, LONG)
    torch.manual_seed(seed)
    model = lm.CausalLM(configs[variant])
    batches = lm.random_windows(train_ids, 16, LENGTH, steps, seed=seed)
    history = tl.train(model, batches, [(short_x, short_y)], cfg, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)

    model.eval()
    with torch.no_grad(), tl.record_attention(model) as weights:
        model(short_x)
    space = vocab.encode(" ")
    space = space[0] if isinstance(space, list) else int(space)
    layer_weights = [weights[f"layers.{i}.self_attn"] for i in range(len(model.layers))]
    with torch.no_grad():
        full = lm_per_position(model, long_x, long_y)
    far = slice(*FAR)
    losses = {"full_in_range": full[:LENGTH].mean().item(), "full": full[far].mean().item(),
              "banded": sinks.banded_loss(model, long_x, long_y, WINDOW)[far].mean().item()}
    for name, n_sink in (("recent", 0), ("sinks", N_SINK)):
        curve = sinks.streaming_loss(model, long_x, long_y, WINDOW, n_sink, start=FAR[0])
        losses[name] = curve.mean().item()
    return {"seed": seed, "variant": variant, "steps": steps, "heldout_loss": history.eval_loss[-1],
            "sink_first": sinks.sink_scores(weights, 1, START).tolist(),
            "sink_first4": sinks.sink_scores(weights, N_SINK, START).tolist(),
            "uniform_first": sinks.uniform_share(LENGTH, 1, START),
            "uniform_first4": sinks.uniform_share(LENGTH, N_SINK, START),
            "space": [sinks.relative_weight(w, short_x == space, START).tolist() for w in layer_weights],
            "losses": losses, "windows": [len(short_x), len(long_x)], "seconds": history.seconds,
            "torch": torch.__version__, "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native")}


def lm_per_position(model, x, y):
    import torch.nn.functional as F

    return F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").mean(0)


def run(seeds, kernels, steps_list, variants, jobs, max_windows=None):
    store = json.loads(STORE.read_text()) if STORE.exists() else []
    done = {(r["seed"], r["variant"], r["steps"], r["kernels"]) for r in store}
    todo = [(s, v, n, k) for n in steps_list for s in seeds for v in variants for k in kernels
            if (s, v, n, k) not in done]

    def launch(job):
        seed, variant, steps, kernel = job
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if kernel != "native":
            env["ATEN_CPU_CAPABILITY"] = kernel
        argv = [sys.executable, __file__, "one", "--seed", str(seed), "--variant", variant, "--steps", str(steps)]
        if max_windows is not None:
            argv += ["--max-windows", str(max_windows)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            raise SystemExit(f"run {job} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(jobs) as pool:
        for record in pool.map(launch, todo):
            store.append(record)
            STORE.write_text(json.dumps(store, indent=1) + "\n")  # resumable: every finished run is kept
            loss = record["losses"]
            print(f"{record['variant']} seed {record['seed']} {record['steps']} steps {record['kernels']}: "
                  f"max sink {max(max(h) for h in record['sink_first']):.3f} "
                  f"(uniform {record['uniform_first']:.3f}); 128-255: recent {loss['recent']:.3f}, "
                  f"sinks {loss['sinks']:.3f}, banded {loss['banded']:.3f}, full {loss['full']:.3f}", flush=True)


def _range(values, fmt=".3f") -> str:
    return f"{min(values):{fmt}} to {max(values):{fmt}}"


def table(store: list[dict]) -> str:
    """The study's two tables (sink scores; streaming losses), one row per variant and steps,
    each cell the range over the runs (seeds and kernel sets)."""
    groups: dict[tuple, list[dict]] = {}
    for r in store:
        groups.setdefault((r["steps"], VARIANTS.index(r["variant"]) if r["variant"] in VARIANTS else 99,
                           r["variant"]), []).append(r)
    first = store[0]
    sink_rows = ["| variant | steps | runs (seeds; kernels) | held-out loss | largest weight on position 0, "
                 "any head (uniform: {:.3f}) | mean over heads | largest weight on positions 0-3 (uniform: {:.3f}) "
                 "| weight on spaces / uniform: any head | keenest head of a run |".format(first["uniform_first"],
                                                                                         first["uniform_first4"]),
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    loss_rows = ["| variant | steps | positions 0-31, full context | 128-255: full context | banded window "
                 "(absolute positions) | last 32, renumbered | first 4 + last 28, renumbered | sinks minus last 32, "
                 "per run |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (steps, _, variant), runs in sorted(groups.items()):
        seeds = sorted({r["seed"] for r in runs})
        kernels = sorted({r["kernels"] for r in runs})
        who = f"{len(runs)} ({','.join(map(str, seeds))}; {', '.join(kernels)})"
        top = [max(max(h) for h in r["sink_first"]) for r in runs]
        mean = [sum(sum(h) for h in r["sink_first"]) / sum(len(h) for h in r["sink_first"]) for r in runs]
        top4 = [max(max(h) for h in r["sink_first4"]) for r in runs]
        space = [x for r in runs for layer in r["space"] for x in layer]
        keenest = [max(max(layer) for layer in r["space"]) for r in runs]
        of_uniform = _range([t / r["uniform_first"] for t, r in zip(top, runs)], ".2f")
        sink_rows.append(f"| {variant} | {steps:,} | {who} | {_range([r['heldout_loss'] for r in runs])} | "
                         f"{_range(top)} ({of_uniform} of uniform) | {_range(mean)} | {_range(top4)} | "
                         f"{_range(space, '.2f')} | {_range(keenest, '.2f')} |")
        L = [r["losses"] for r in runs]
        loss_rows.append(f"| {variant} | {steps:,} | {_range([x['full_in_range'] for x in L])} | "
                         f"{_range([x['full'] for x in L])} | {_range([x['banded'] for x in L])} | "
                         f"{_range([x['recent'] for x in L])} | {_range([x['sinks'] for x in L])} | "
                         f"{_range([x['sinks'] - x['recent'] for x in L], '+.3f')} |")
    return ("Chapter 16's models (2 layers of 4 heads, d_model 64) trained with the chapter's recipe on random "
            "32-character windows; every cell is the range over the runs (seeds and kernel sets). Sink scores "
            f"(`book.sinks.sink_scores`): the mean attention weight that queries at positions {START}-31 of every "
            "held-out 32-character window put on the first position(s), against uniform attention over the keys "
            "each query sees. Streaming losses (`book.sinks.streaming_loss`, nats per character): held-out windows "
            f"of {LONG} characters, mean over positions {FAR[0]}-{FAR[1] - 1}; each prediction reads a cache of "
            f"{WINDOW} tokens renumbered 0-{WINDOW - 1}, the model run afresh on it (Xiao et al. 2023's "
            f"sliding window with recomputation; with {N_SINK} sink tokens kept, or not: both give every window a "
            "fresh first token, so they can differ little for any model, sinks or not), or the whole window with a "
            "banded mask (`book.sinks.banded_loss`, chapter 16's window), or "
            "everything. `python benchmarks/sinks.py run --seeds 0-4 --steps 200 1000 --kernels native` (200 "
            "steps also with `--kernels default avx2`); `python benchmarks/sinks.py report` writes this section."
            "\n\n" + "\n".join(sink_rows) + "\n\n" + "\n".join(loss_rows))


def write_report() -> None:
    import run as bench  # benchmarks/run.py: the report's one way of replacing a section

    store = json.loads(STORE.read_text())
    results = HERE / "RESULTS.md"
    results.write_text(bench.replace_section(results.read_text(), SECTION, table(store)).rstrip("\n") + "\n")
    print(table(store))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="0-4")
    r.add_argument("--kernels", nargs="+", default=["native"])
    r.add_argument("--steps", nargs="+", type=int, default=[200, 1000])
    r.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    r.add_argument("--jobs", type=int, default=2)
    o = sub.add_parser("one")
    o.add_argument("--seed", type=int, required=True)
    o.add_argument("--variant", default="RoPE", choices=VARIANTS)
    o.add_argument("--steps", type=int, default=200)
    o.add_argument("--max-windows", type=int, default=None, help="fewer held-out windows (a quick test)")
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "one":
        print(json.dumps(one_run(args.seed, args.variant, args.steps, args.max_windows)))
    elif args.command == "run":
        run(parse_seeds(args.seeds), args.kernels, args.steps, args.variants, args.jobs)
    else:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
