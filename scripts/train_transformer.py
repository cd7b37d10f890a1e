"""Train the book's date-normalisation Transformer with the book's recipe and save a checkpoint.

    python scripts/train_transformer.py                    # into artifacts/transformer_dates/ (scratch)
    python scripts/train_transformer.py --update-shipped   # replaces transformer_lib/checkpoints/transformer_dates.*

The recipe (model size, batch, peak learning rate, warm-up, checkpoint averaging, evaluation and
stopping rule) is `transformer_lib.recipes.DATE_RECIPE`, and the run is chapter 11's live run,
line for line: `tl.train` on `make_loader(..., seed)` from a model built right after
`setup(seed, threads)`, with the hook `training.AverageAndStop` (every 100 steps a snapshot of
the weights; the average of the last 5 judged on 1,000 spread validation dates, confirmed on the
other 2,652). So on the machine that made the checkpoint (same kernels, threads and torch), the
chapter's run and this one take the same steps and stop at the same step. The run stops on a
count, never on wall time. The averaged weights of the stop are saved (`transformer_lib.checkpoints`:
weights, config, both vocabularies), then decoded greedily on all 3,652 test dates; the record
of the run (recipe, seed, threads, kernels, steps, seconds, every evaluation, test accuracy) goes
into the checkpoint and, as a readable copy, beside it as .json. Exits with status 1, and writes
nothing, if the run reached the step cap before the stopping rule.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib.checkpoints import save
from transformer_lib.data import date_vocabs, make_date_splits
from transformer_lib.decoding import translate
from transformer_lib.metrics import character_error_rate, exact_match
from transformer_lib.recipes import DATE_MODEL, DATE_RECIPE, evenly_spaced, recipe_config
from transformer_lib.training import AverageAndStop, train
from transformer_lib.vocab import collate, make_loader

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "transformer_lib" / "checkpoints" / "transformer_dates.pt"
SCRATCH = ROOT / "artifacts" / "transformer_dates" / "transformer_dates.pt"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default=None, help="cpu, cuda or mps (default: $TL_DEVICE, else cpu)")
    ap.add_argument("--max-steps", type=int, default=DATE_RECIPE["max_steps"])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--out", type=Path, default=None, help=f"checkpoint path (default {SCRATCH.relative_to(ROOT)})")
    group.add_argument("--update-shipped", action="store_true",
                       help=f"write {SHIPPED.relative_to(ROOT)} and its record")
    args = ap.parse_args(argv)
    out = SHIPPED if args.update_shipped else (args.out or SCRATCH)

    # chapter 11's live run, in the same order: setup, vocabularies and splits, model, loader
    tl.runtime.setup(seed=args.seed, threads=args.threads, device=args.device)
    src_vocab, tgt_vocab = date_vocabs()
    splits = make_date_splits(seed=0)
    model = tl.Transformer(tl.TransformerConfig(len(src_vocab), len(tgt_vocab), **DATE_MODEL))
    loader = make_loader(splits.train, src_vocab, tgt_vocab, batch_size=DATE_RECIPE["batch_size"], seed=args.seed)
    quick = evenly_spaced(splits.valid, DATE_RECIPE["eval_size"])
    others = [p for p in splits.valid if p not in set(quick)]
    val, confirm = [collate(quick, src_vocab, tgt_vocab)], [collate(others, src_vocab, tgt_vocab)]
    monitor = AverageAndStop(model, val, confirm, DATE_RECIPE["target"], DATE_RECIPE["confirm"],
                             keep=DATE_RECIPE["average"], report=print)
    hist = train(model, loader, val, recipe_config(max_steps=args.max_steps), on_eval=monitor)
    if monitor.stopped_at is None:
        print(f"error: the run reached the cap of {args.max_steps} steps before the stopping rule; {out} is "
              f"left as it was", file=sys.stderr)
        return 1
    monitor.load_average(model).eval()
    start = time.perf_counter()
    preds = translate(model, [s for s, _ in splits.test], src_vocab, tgt_vocab, max_len=12, batch_size=4096)
    refs = [t for _, t in splits.test]
    command = "python scripts/train_transformer.py" + (f" --seed {args.seed}" if args.seed else "") + (
        f" --threads {args.threads}" if args.threads != 2 else "") + (
        " --update-shipped" if args.update_shipped else "")
    record = {
        "command": command, "seed": args.seed, "threads": args.threads, "torch": torch.__version__,
        "kernels": torch.backends.cpu.get_cpu_capability(), "machine": platform.processor() or platform.machine(),
        "device": str(tl.runtime.book_device()), "date": time.strftime("%Y-%m-%d"),
        "model": DATE_MODEL, "recipe": {**DATE_RECIPE, "max_steps": args.max_steps},
        "steps_run": hist.step[-1], "stopped": f"the average of the last {DATE_RECIPE['average']} snapshots reached "
        f"{monitor.log['averaged'][-1]:.4f} on the quick check and {monitor.log['confirmed'][-1]:.4f} on the other "
        f"{len(others):,} validation dates",
        "train_seconds": round(hist.seconds, 1), "eval_seconds": round(hist.eval_seconds, 1),
        "load_average": round(os.getloadavg()[0], 2),
        "test_pairs": len(splits.test), "test_exact_match": round(exact_match(preds, refs), 4),
        "test_cer": round(character_error_rate(preds, refs), 5),
        "test_decode_seconds": round(time.perf_counter() - start, 1), "parameters": tl.count_parameters(model),
        "eval_step": monitor.log["step"], "eval_raw": [round(a, 4) for a in monitor.log["raw"]],
        "eval_averaged": [round(a, 4) for a in monitor.log["averaged"]],
        "eval_confirmed": [None if a is None else round(a, 4) for a in monitor.log["confirmed"]],
        "loss_every_50": [round(x, 4) for x in hist.loss[::50]],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save(out, model, src_vocab, tgt_vocab, record)  # the record travels in the file ...
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")  # ... and beside it, readable
    print(json.dumps({k: v for k, v in record.items() if not isinstance(v, (list, dict))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
