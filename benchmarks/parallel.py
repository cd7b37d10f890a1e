"""Chapter 17's timings: one training step of the date model on one process and on two.

    .venv/bin/python benchmarks/parallel.py            # measure: writes benchmarks/parallel.json, prints the table
    .venv/bin/python benchmarks/parallel.py --write    # and replace its section of benchmarks/RESULTS.md
    .venv/bin/python benchmarks/parallel.py --report   # only re-write the section from parallel.json

Not a test: wall time on this machine, run it when the machine is quiet (the JSON keeps the
load average before each part). What it measures, for the date model of chapter 11 (float32,
global batch 64, the book's training loop `tl.train`, the recipe of `tl.recipes`):

- one process (this one) with 1 and with 2 PyTorch threads, on the whole batch;
- two processes with DistributedDataParallel, 1 thread each, 32 pairs each, launched by
  `transformer_lib.parallel.launch` (gloo over 127.0.0.1); the worker also times rank 0 alone
  on the whole batch and on its shard of 32 first, as the notebook does (the other process
  waits; the shard's step is the ideal DDP step, with free communication and free cores), and
  one all-reduce of the gradients;
- two processes with FSDP2 (`fully_shard`), 1 thread each;
- mixed precision (`--steps-precision`, default 400): the date model trained from one start on
  the same batches of 32, in float32 and under bfloat16 autocast (`parallel.Autocast`), 1
  thread: the loss over the run and the time per step of each;
- two kinds at once: one launch of `parallel.mesh_step_worker` on a (2, 2) mesh of 4 processes
  (one float64 step of an encoder layer), checked against one process, and its wall time.

`--only precision` measures the last two alone and keeps the rest of `parallel.json`.

Every setting is timed the same way: `--rounds` rounds (default 5), each a fresh model run for
`--steps` steps (default 20) after a 2-step warm-up (`parallel.seconds_per_step`), per step; the
table gives the median round and the lowest and highest. For two processes each round is a
fresh launch of both workers, and a round's time is the slower rank's (a step ends when both
have ended it); DDP and FSDP2 launches alternate, so that other work on the machine falls on both
alike. Run it with OpenMP's default wait policy (OMP_WAIT_POLICY unset), as a reader runs chapter
17 (the JSON records the policy; benchmarks/RESULTS.md's step table shows what PASSIVE changes).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib import parallel
from transformer_lib.data import date_vocabs, make_date_splits

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
SAVED = HERE / "parallel.json"
SECTION = "parallel"
COMMAND = ".venv/bin/python benchmarks/parallel.py --write"
_spec = importlib.util.spec_from_file_location("bench_run", HERE / "run.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # the report's shared statistics and section markers

ROWS = {  # key: label
    "1p1t": "1 process, 1 thread, batch 64",
    "1p2t": "1 process, 2 threads, batch 64",
    "rank0": "rank 0 alone (the other waiting), batch 64",
    "rank0 shard": "rank 0 alone (the other waiting), its shard of 32",
    "ddp": "2 processes, DDP, 1 thread each, 32 each",
    "fsdp": "2 processes, FSDP2, 1 thread each, 32 each",
}


def measure(steps: int, rounds: int) -> dict:
    tl.runtime.setup(seed=0, threads=1)
    src_vocab, tgt_vocab = date_vocabs()
    config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
    state = parallel.build_model(config).state_dict()
    global_batch = 64
    pairs = tl.recipes.evenly_spaced(make_date_splits(seed=0).train, (steps + 2) * global_batch)
    random.Random(0).shuffle(pairs)
    cfg = tl.recipes.recipe_config(max_steps=steps, target_accuracy=None)
    loader = tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=global_batch, shuffle=False)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), **bench.git_commit(), "command": COMMAND,
            "steps": steps, "rounds": rounds, "wait_policy": bench.wait_policy(), "machine": bench.machine(),
            "parameters": tl.count_parameters(parallel.build_model(config)), "load": {}}
    times: dict[str, list[float]] = {key: [] for key in ROWS}
    all_reduce: list[float] = []

    for threads in (1, 2):
        meta["load"][f"1p{threads}t"] = round(os.getloadavg()[0], 2)
        torch.set_num_threads(threads)
        for _ in range(rounds):
            times[f"1p{threads}t"].append(
                parallel.seconds_per_step(parallel.build_model(config, state), loader, cfg, steps))
    torch.set_num_threads(1)
    meta["load"]["two processes"] = round(os.getloadavg()[0], 2)
    short = dataclasses.replace(cfg, max_steps=2)
    for i in range(rounds):
        ddp = parallel.launch(parallel.data_parallel_worker, config, state, pairs, (src_vocab, tgt_vocab), short,
                              global_batch, timing_steps=steps, timing_rounds=1, timeout=600)
        times["rank0"].append(ddp[0]["single_seconds_per_step"])
        times["rank0 shard"].append(ddp[0]["shard_seconds_per_step"])
        times["ddp"].append(max(r["seconds_per_step"] for r in ddp))
        all_reduce.append(ddp[0]["all_reduce_seconds"])
        fsdp = parallel.launch(parallel.sharded_worker, config, state, pairs, (src_vocab, tgt_vocab), short,
                               global_batch, timing_steps=steps, timeout=600)
        times["fsdp"].append(max(r["seconds_per_step"] for r in fsdp))
        print(f"  round {i + 1} of {rounds}: " + ", ".join(f"{k} {1000 * v[-1]:.1f} ms" for k, v in times.items()),
              flush=True)
    meta["load"]["end"] = round(os.getloadavg()[0], 2)
    return {"meta": meta, "rows": {key: bench.spread(v) for key, v in times.items()},
            "all_reduce": bench.spread(all_reduce)}


def measure_precision(steps: int) -> dict:
    """float32 against bfloat16 autocast, `steps` steps of 32 dates from one start; and the
    (dp, tp) mesh step against one process."""
    tl.runtime.setup(seed=0, threads=1)
    src_vocab, tgt_vocab = date_vocabs()
    config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
    state = parallel.build_model(config).state_dict()
    pairs = tl.recipes.evenly_spaced(make_date_splits(seed=0).train, steps * 32)
    random.Random(0).shuffle(pairs)
    loader = tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=32, shuffle=False)
    cfg = tl.recipes.recipe_config(max_steps=steps, warmup=steps // 4, target_accuracy=None)
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), **bench.git_commit(), "steps": steps,
           "load": round(os.getloadavg()[0], 2), "runs": {}}
    for name in ("float32", "bfloat16 autocast"):
        model = parallel.build_model(config, state)
        if name != "float32":
            model = parallel.Autocast(model)
        start = time.perf_counter()
        losses = tl.train(model, loader, None, cfg).loss
        seconds = (time.perf_counter() - start) / steps
        windows = {k: sum(losses[k - 20:k]) / 20 for k in sorted({steps // 4, steps // 2, steps}) if k >= 20}
        out["runs"][name] = {"seconds_per_step": seconds, "mean_loss_of_20_steps_ending_at": windows}
        print(f"  {name}: {1000 * seconds:.1f} ms a step, losses {windows}", flush=True)
    torch.manual_seed(0)
    layer = tl.EncoderLayer(32, 4, 64, 0.0).double()
    x = torch.randn(4, 6, 32, dtype=torch.float64)
    reference, loss = parallel.one_process_step(layer, x, 0.1)
    full = dict(reference.named_parameters())
    start = time.perf_counter()
    results = parallel.launch(parallel.mesh_step_worker, layer, x, 0.1, world_size=4, timeout=300)
    seconds = time.perf_counter() - start
    worst = max((r["state"][n] - v).abs().max().item() for r in results
                for n, v in parallel.shard_like(parallel.tensor_parallel(layer, r["tp_rank"], 2), full).items())
    out["mesh"] = {"seconds": seconds, "worst_weight_difference": worst,
                   "worst_loss_difference": max(abs((r["loss"] - loss).item()) for r in results)}
    print(f"  mesh (2, 2): {seconds:.1f} s for one launch, worst difference {worst:.1e}", flush=True)
    return out


def precision_section(data: dict) -> list[str]:
    p = data.get("precision")
    if not p:
        return []
    runs = p["runs"]
    ends = [int(k) for k in next(iter(runs.values()))["mean_loss_of_20_steps_ending_at"]]
    out = ["### Mixed precision and a (2, 2) mesh", "",
           f"Measured {p['date']} at commit `{p['commit']}`, load average (1 min) {p['load']}. The date model trained"
           f" {p['steps']} steps of 32 dates (1 thread, `tl.train`, warm-up over a quarter of the run) from one"
           " start on the same batches, in float32 and under bfloat16 autocast (`parallel.Autocast`).", "",
           "| run | ms per step | " + " | ".join(f"mean loss, steps {k - 19}-{k}" for k in ends) + " |",
           "| --- | ---: | " + " | ".join("---:" for _ in ends) + " |"]
    for name, r in runs.items():
        out.append(f"| {name} | {1000 * r['seconds_per_step']:.1f} | "
                   + " | ".join(f"{v:.3f}" for v in r["mean_loss_of_20_steps_ending_at"].values()) + " |")
    ratio = runs["bfloat16 autocast"]["seconds_per_step"] / runs["float32"]["seconds_per_step"]
    m = p["mesh"]
    out += ["", f"bfloat16 autocast took {ratio:.2f} times as long per step as float32: the date model's"
            " 64-wide matrices are too small for the CPU's bfloat16 units (AMX here) to make up for the casts;"
            " chapter 17 times one product at three sizes. One step of a float64 encoder layer on a (dp, tp) = (2, 2)"
            " `DeviceMesh` of 4 processes"
            f" (`parallel.mesh_step_worker`): one launch took {m['seconds']:.1f} s; the worst difference from one"
            f" process was {m['worst_weight_difference']:.1e} in a weight and {m['worst_loss_difference']:.1e} in"
            " the loss.", ""]
    return out


def section(data: dict | None) -> list[str]:
    out = ["## Chapter 17: one training step on one and on two processes", ""]
    if data is not None and "rows" not in data:
        return out + ["**Awaiting the final run on a quiet machine** (load average below 1.5). Measure it with", "",
                      f"    {COMMAND}", ""] + precision_section(data)
    if data is None:
        return out + ["**Awaiting the final run on a quiet machine** (load average below 1.5). Measure it with", "",
                      f"    {COMMAND}", ""]
    meta, rows = data["meta"], data["rows"]
    loads = list(meta["load"].values())
    dirty = " plus uncommitted changes" if meta["dirty"] else ""
    out += [f"Written by `benchmarks/parallel.py` from `benchmarks/parallel.json`: measured {meta['date']} at commit"
            f" `{meta['commit']}`{dirty}; wait policy {meta['wait_policy']}; load average (1 min) before each part"
            f" {', '.join(str(x) for x in loads)}. Re-measure: `{meta['command']}`.", "",
            "The date model (float32, global batch 64, `tl.train` with the recipe of `tl.recipes`). Every row is"
            f" timed the same way: {meta['rounds']} rounds, each a fresh model run for {meta['steps']} steps after a"
            " 2-step warm-up; the median round per step and the lowest and highest. Two processes: each round a"
            " fresh launch by `transformer_lib.parallel.launch` (gloo over 127.0.0.1), its time the slower rank's;"
            " DDP and FSDP2 launches alternate. Speed-ups are ratios of medians, \"≈1\" where the interquartile"
            " ranges overlap.", ""]
    if max(loads) > bench.MAX_LOAD:
        out += [f"The load average exceeded {bench.MAX_LOAD}: other processes shared the 2 cores, and two processes"
                " that run in lockstep wait for whichever of them is descheduled, so these times are inflated.", ""]
    base = rows["1p1t"]
    out += ["| setting | ms per step: median (lowest-highest) | speed-up over 1 process, 1 thread |",
            "| --- | ---: | ---: |"]
    for key, label in ROWS.items():
        speedup = "1" if key == "1p1t" else bench.fmt_ratio(base, rows[key])
        out.append(f"| {label} | {bench.fmt_time(rows[key])} | {speedup} |")
    ar = data["all_reduce"]
    share = ar["median"] / rows["ddp"]["median"]
    out += [f"| one all-reduce of the {meta['parameters']:,} gradients (float32, 2 processes; median of 20 per"
            f" launch) | {bench.fmt_time(ar, digits=2)} | |", "",
            f"The all-reduce is {share:.1%} of a DDP step here. Two processes split the forward and backward"
            " arithmetic, but each still runs the full Adam update, the loop's Python and many small operations"
            " whose cost does not shrink with the batch: rank 0's step on its shard of 32 against its step on"
            f" 64 ({bench.fmt_ratio(rows['rank0'], rows['rank0 shard'])}) is the most DDP could gain here;"
            " beyond that it loses to cores shared with other jobs and to lock-step. FSDP2 adds an all-gather"
            " of every layer's weights in the"
            " forward and the backward pass and a reduce-scatter of its gradients, each a separate message. Which"
            " of these decides the times above is not profiled here. Chapter 17 times one process against DDP"
            " in its own cell, once, as the chapter runs.", ""]
    return out + precision_section(data)


def write_report(data: dict | None) -> None:
    text = RESULTS.read_text()
    RESULTS.write_text(bench.replace_section(text, SECTION, "\n".join(section(data))).rstrip("\n") + "\n")
    print(f"wrote the parallel section of {RESULTS}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each setting (default 5)")
    parser.add_argument("--write", action="store_true", help="also write the section into benchmarks/RESULTS.md")
    parser.add_argument("--report", action="store_true", help="only re-write the section from parallel.json")
    parser.add_argument("--steps-precision", type=int, default=400,
                        help="training steps of the float32 / bfloat16 runs (default 400)")
    parser.add_argument("--only", choices=("precision",), help="measure only the mixed-precision and mesh part, "
                        "keeping the rest of parallel.json")
    args = parser.parse_args(argv)
    if args.report:
        write_report(json.loads(SAVED.read_text()) if SAVED.is_file() else None)
        return 0
    if os.environ.get("OMP_WAIT_POLICY"):
        print(f"note: OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} is set (and recorded); a reader's chapter 17"
              " runs without it", flush=True)
    if args.only == "precision":
        data = json.loads(SAVED.read_text()) if SAVED.is_file() else {}
    else:
        data = measure(args.steps, args.rounds)
    data["precision"] = measure_precision(args.steps_precision)
    SAVED.write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(section(data)))
    if args.write:
        write_report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
