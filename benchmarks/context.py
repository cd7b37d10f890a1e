"""Chapter 16's context-extension study: a rotary model trained on 32-token windows, read at 2, 4
and 8 times that length with plain RoPE, position interpolation, NTK-aware scaling and YaRN,
without and with a short fine-tune at the longer length.

    python benchmarks/context.py run --seeds 0-4 --kernels default avx2 [--jobs 2]
    python benchmarks/context.py report          # the table, from context.json, into RESULTS.md

`run` trains chapter 16's "RoPE" variant (d_model 64, 4 heads of d_k 16, 2 layers, d_ff 256,
tied output) from each seed exactly as the chapter does (`tl.train`, 200 steps of 16 random
32-character windows of the book's prose, Adam (0.9, 0.98), learning rate rising to 5e-3 over
20 steps then constant), one process per (seed, kernel set), one thread, `ATEN_CPU_CAPABILITY`
set. Then, for each method (`book.context.METHODS`) and each length L = 64, 128, 256
(factor s = L / 32): the held-out loss over every L-token window of the held-out tenth
(`book.context.window_loss`), as trained and after `--tune-steps` steps at length L
(`book.context.fine_tune`: 16 windows a step, Adam at a constant 1e-3, the windows' seed the
run's). Writes benchmarks/context.json (one entry per run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seeds import parse_seeds

HERE = Path(__file__).resolve().parent
STORE = HERE / "context.json"
SECTION = "context study"  # its markers in RESULTS.md: <!-- context study: begin --> ... end -->
TRAINED, LENGTHS = 32, (64, 128, 256)


def one_run(seed: int, steps: int = 200, tune_steps: int = 25, lengths=LENGTHS) -> dict:
    import torch

    import transformer_lib as tl
    from transformer_lib import lm
    from transformer_lib.book import context as ctx
    from transformer_lib.vocab import Vocab

    torch.set_num_threads(1)
    began = time.perf_counter()
    text = lm.load_corpus()
    vocab = Vocab.from_texts([text])
    ids = torch.tensor(vocab.encode(text))
    cut = int(0.9 * len(ids))
    train_ids, held_ids = ids[:cut], ids[cut:]
    config = lm.CausalLMConfig(len(vocab), d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=max(lengths),
                               positions="rope")
    cfg = tl.TrainConfig(max_steps=steps, eval_every=steps, schedule="linear_warmup", warmup=20, lr=5e-3,
                         label_smoothing=0.0, progress=False)
    torch.manual_seed(seed)
    model = lm.CausalLM(config)
    tl.train(model, lm.random_windows(train_ids, 16, TRAINED, steps, seed=seed), [ctx.windows(held_ids, TRAINED)],
             cfg, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    record = {"seed": seed, "steps": steps, "tune_steps": tune_steps,
              "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"), "torch": torch.__version__,
              "trained": ctx.window_loss(model, held_ids, TRAINED), "loss": {}, "tuned": {}}
    for label, scaling in ctx.METHODS.items():
        record["loss"][label], record["tuned"][label] = {}, {}
        for length in lengths:
            stretched = ctx.stretched(model, scaling, length / TRAINED, TRAINED)
            record["loss"][label][str(length)] = ctx.window_loss(stretched, held_ids, length)
            if tune_steps:
                tuned = ctx.fine_tune(stretched, train_ids, length, tune_steps, seed=seed)
                record["tuned"][label][str(length)] = ctx.window_loss(tuned, held_ids, length)
    record["seconds"] = time.perf_counter() - began
    return record


def run(seeds, kernels, steps, tune_steps, jobs):
    store = json.loads(STORE.read_text()) if STORE.exists() else []
    done = {(r["seed"], r["kernels"], r["steps"], r["tune_steps"]) for r in store}
    todo = [(s, k) for s in seeds for k in kernels if (s, k, steps, tune_steps) not in done]

    def launch(job):
        seed, kernel = job
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if kernel != "native":
            env["ATEN_CPU_CAPABILITY"] = kernel
        argv = [sys.executable, __file__, "one", "--seed", str(seed), "--steps", str(steps),
                "--tune-steps", str(tune_steps)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            raise SystemExit(f"run {job} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(jobs) as pool:
        for record in pool.map(launch, todo):
            store.append(record)
            STORE.write_text(json.dumps(store, indent=1) + "\n")
            print(f"seed {record['seed']} {record['kernels']}: {record['seconds']:.0f} s", flush=True)


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"


def table(store: list[dict]) -> str:
    store = sorted(store, key=lambda r: (r["steps"], r["tune_steps"], r["seed"], r["kernels"]))
    out = []
    for steps, tune in sorted({(r["steps"], r["tune_steps"]) for r in store}):
        runs = [r for r in store if r["steps"] == steps and r["tune_steps"] == tune]
        seeds = sorted({r["seed"] for r in runs})
        kernels = sorted({r["kernels"] for r in runs})
        lengths = list(runs[0]["loss"]["plain RoPE"])
        out += [f"### Trained {steps} steps on {TRAINED}-token windows; seeds {', '.join(map(str, seeds))}; "
                f"kernel sets {', '.join(kernels)}; {len(runs)} runs", "",
                f"Held-out loss (nats per character) over every window of L tokens, lowest-highest over the runs; "
                f"at the trained length ({TRAINED}) every method is plain RoPE: {_span([r['trained'] for r in runs])}. "
                f"'tuned': after {tune} steps at length L. Change: the method's loss minus plain RoPE's in the "
                "same run, lowest-highest.", "",
                "| method | " + " | ".join(f"L = {n} ({int(n) // TRAINED}x)" for n in lengths) + " | "
                + " | ".join(f"tuned, L = {n}" for n in lengths) + " |",
                "| --- |" + " ---: |" * (2 * len(lengths))]
        for label in runs[0]["loss"]:
            cells = []
            for key in ("loss", "tuned"):
                for n in lengths:
                    values = [r[key][label][n] for r in runs]
                    cell = _span(values)
                    if label != "plain RoPE":
                        change = [r[key][label][n] - r[key]["plain RoPE"][n] for r in runs]
                        cell += f" ({min(change):+.2f} to {max(change):+.2f})"
                    cells.append(cell)
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def write_report() -> None:
    import run as bench  # benchmarks/run.py: the report's one way of replacing a section

    store = json.loads(STORE.read_text())
    head = ("## Chapter 16: context extension past the trained length\n\n"
            "Written by `benchmarks/context.py` (re-run: `.venv/bin/python benchmarks/context.py run --seeds 0-4 "
            "--kernels default avx2`, then `report`), from `benchmarks/context.json`. Chapter 16's \"RoPE\" model, "
            "trained as in the chapter, read at 2, 4 and 8 times its trained length with each method of "
            "`book.context.METHODS` (YaRN with Peng et al.'s ramp, alpha 1 and beta 32 turns, and its temperature), "
            "as trained and after a short fine-tune at the longer length.\n\n")
    results = HERE / "RESULTS.md"
    results.write_text(bench.replace_section(results.read_text(), SECTION, head + table(store)).rstrip("\n") + "\n")
    print(table(store))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="0-4")
    r.add_argument("--kernels", nargs="+", default=["default", "avx2"])
    r.add_argument("--steps", type=int, default=200)
    r.add_argument("--tune-steps", type=int, default=25)
    r.add_argument("--jobs", type=int, default=2)
    o = sub.add_parser("one")
    o.add_argument("--seed", type=int, required=True)
    o.add_argument("--steps", type=int, default=200)
    o.add_argument("--tune-steps", type=int, default=25)
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "one":
        print(json.dumps(one_run(args.seed, args.steps, args.tune_steps)))
    elif args.command == "run":
        run(parse_seeds(args.seeds), args.kernels, args.steps, args.tune_steps, args.jobs)
    else:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
