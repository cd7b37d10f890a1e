"""Chapter 17's timings: one training step of the date model on one process and on two.

    .venv/bin/python benchmarks/parallel.py            # print the table
    .venv/bin/python benchmarks/parallel.py --write    # and put it in benchmarks/RESULTS.md

Not a test: wall time on this machine, run it when the machine is quiet (it prints the load
average with the results). What it measures, for the date model of chapter 11 (float32, global
batch 64, the book's training loop `tl.train`, the recipe of `tl.recipes`):

- one process (this one) with 1 and with 2 PyTorch threads, on the whole batch;
- two processes with DistributedDataParallel, 1 thread each, 32 pairs each, launched by
  `transformer_lib.parallel.launch` (gloo over 127.0.0.1); the worker also times rank 0 alone
  on the whole batch and on its shard of 32 in between, as the notebook does (the second is
  the ideal DDP step: free communication, free cores), and one all-reduce of the gradients;
- two processes with FSDP2 (`fully_shard`), 1 thread each.

Each time is the best of `--rounds` runs of `--steps` steps after a warm-up (the least
disturbed by other jobs). OMP_WAIT_POLICY=PASSIVE is set before torch is imported, as in
benchmarks/recipe.py: on a shared 2-core machine OpenMP's busy waiting can make a 2-thread
step many times slower.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import parallel  # noqa: E402
from transformer_lib.data import date_vocabs, make_date_splits  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BEGIN, END = "<!-- parallel: begin -->", "<!-- parallel: end -->"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, the best kept (default 3)")
    parser.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args(argv)

    tl.runtime.setup(seed=0, threads=1)
    src_vocab, tgt_vocab = date_vocabs()
    config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
    state = parallel.build_model(config).state_dict()
    global_batch = 64
    pairs = tl.recipes.evenly_spaced(make_date_splits(seed=0).train, (args.steps + 2) * global_batch)
    random.Random(0).shuffle(pairs)
    cfg = tl.recipes.recipe_config(max_steps=args.steps, target_accuracy=None)
    loader = tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=global_batch, shuffle=False)
    load = [os.getloadavg()[0]]

    rows = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        rows[f"1 process, {threads} thread{'s' if threads > 1 else ''}, batch 64"] = min(
            parallel.seconds_per_step(parallel.build_model(config, state), loader, cfg, args.steps)
            for _ in range(args.rounds))
    torch.set_num_threads(1)
    load.append(os.getloadavg()[0])
    ddp = parallel.launch(parallel.data_parallel_worker, config, state, pairs, (src_vocab, tgt_vocab),
                          dataclasses.replace(cfg, max_steps=2), global_batch, timing_steps=args.steps,
                          timing_rounds=args.rounds, timeout=600)
    rows["rank 0 alone (the other waiting), batch 64"] = ddp[0]["single_seconds_per_step"]
    rows["rank 0 alone (the other waiting), its shard of 32"] = ddp[0]["shard_seconds_per_step"]
    rows["2 processes, DDP, 1 thread each, 32 each"] = ddp[0]["seconds_per_step"]
    load.append(os.getloadavg()[0])
    fsdp = parallel.launch(parallel.sharded_worker, config, state, pairs, (src_vocab, tgt_vocab),
                           dataclasses.replace(cfg, max_steps=2), global_batch, timing_steps=args.steps,
                           timeout=600)
    rows["2 processes, FSDP2, 1 thread each, 32 each"] = max(r["seconds_per_step"] for r in fsdp)
    load.append(os.getloadavg()[0])

    base = rows["1 process, 1 thread, batch 64"]
    lines = ["| setting | ms per step | speed-up over 1 process, 1 thread |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {1000 * s:.1f} | {base / s:.2f}x |" for name, s in rows.items()]
    lines.append(f"| one all-reduce of the {tl.count_parameters(parallel.build_model(config)):,} gradients "
                 f"(float32, 2 processes, median of 20) | {1000 * ddp[0]['all_reduce_seconds']:.2f} | |")
    ideal = ddp[0]["single_seconds_per_step"] / ddp[0]["shard_seconds_per_step"]
    lines.append(f"| ideal DDP speed-up here: batch 64 over batch 32, rank 0 alone | | {ideal:.2f}x |")
    table = "\n".join(lines)
    print(table)
    print(f"load average (1 min) before each part: {', '.join(f'{x:.1f}' for x in load)}")
    if args.write:
        _write(table, load, args)
    return 0


def _write(table: str, load: list[float], args) -> None:
    section = "\n".join([
        BEGIN,
        "## Chapter 17: one training step on one and on two processes",
        "",
        "Written by `benchmarks/parallel.py` (re-run: `.venv/bin/python benchmarks/parallel.py --write`). "
        "The date model (float32, global batch 64, `tl.train` with the recipe of `tl.recipes`); "
        f"each time is the best of {args.rounds} runs of {args.steps} steps after a warm-up. The "
        "processes are launched by `transformer_lib.parallel.launch` (gloo over 127.0.0.1) and share "
        "the machine's 2 cores with whatever else runs on it: load average (1 min) "
        f"{', '.join(f'{x:.1f}' for x in load)} before each part.",
        "",
        table,
        "",
        "Two processes split the forward and backward arithmetic, but each still runs the full Adam "
        "update, the loop's Python and many small operations whose cost does not shrink with the batch, "
        "then the all-reduce: the ideal row (a step on 32 against a step on 64) is what DDP could "
        "reach with free communication and free cores. What is missing from it beyond that is cores "
        "shared with other jobs, and lock-step: every all-reduce waits for the slower process. FSDP "
        "adds an all-gather of every layer's weights in the forward and the backward pass and a "
        "reduce-scatter of its gradients, each a separate message on this machine.",
        END,
    ])
    text = RESULTS.read_text()
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    sys.exit(main())
