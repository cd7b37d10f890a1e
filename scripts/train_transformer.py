"""Train the book's date-normalisation Transformer with the book's recipe and save a checkpoint.

    python scripts/train_transformer.py                    # into artifacts/transformer_dates/ (scratch)
    python scripts/train_transformer.py --update-shipped   # replaces transformer_lib/checkpoints/transformer_dates.*

The recipe (model size, batch, peak learning rate, warm-up, evaluation and stopping rule) is
`transformer_lib.recipes.DATE_RECIPE`, the one chapter 11 trains with live, and the loop is
`tl.train`. The run is deterministic for a given seed, thread count and kernel set; it stops
on reaching the validation target or at the step cap, never on wall time. The best model by
validation accuracy is saved (`transformer_lib.checkpoints`: weights, config, both vocabularies),
then decoded on all 3,652 test dates; the record of the run (recipe, seed, threads, steps,
seconds, test accuracy) goes into the checkpoint and, as a readable copy, beside it as .json.
Exits with status 1, and writes no record, if no checkpoint was saved.
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
from transformer_lib.checkpoints import load, save
from transformer_lib.data import date_vocabs, make_date_splits
from transformer_lib.vocab import collate, make_loader
from transformer_lib.decoding import translate
from transformer_lib.metrics import character_error_rate, exact_match
from transformer_lib.recipes import DATE_MODEL, DATE_RECIPE, evenly_spaced, recipe_config
from transformer_lib.training import train

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "transformer_lib" / "checkpoints" / "transformer_dates.pt"
SCRATCH = ROOT / "artifacts" / "transformer_dates" / "transformer_dates.pt"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default=None, help="cpu, cuda or mps (default: $TL_DEVICE, else cpu)")
    ap.add_argument("--max-steps", type=int, default=DATE_RECIPE["max_steps"])
    ap.add_argument("--target", type=float, default=DATE_RECIPE["target"], help="stop at this validation exact match")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--out", type=Path, default=None, help=f"checkpoint path (default {SCRATCH.relative_to(ROOT)})")
    group.add_argument("--update-shipped", action="store_true",
                       help=f"write {SHIPPED.relative_to(ROOT)} and its record")
    args = ap.parse_args(argv)
    out = SHIPPED if args.update_shipped else (args.out or SCRATCH)
    partial = out.with_name(out.stem + ".partial.pt")  # the best model so far; `out` is written only if there is one
    if partial.exists():
        partial.unlink()  # so that a run that saves nothing cannot pass off an older file as its own

    tl.runtime.setup(seed=args.seed, threads=args.threads, device=args.device)
    src_vocab, tgt_vocab = date_vocabs()
    splits = make_date_splits(seed=0)
    loader = make_loader(splits.train, src_vocab, tgt_vocab, batch_size=DATE_RECIPE["batch_size"], seed=args.seed)
    val = [collate(evenly_spaced(splits.valid, DATE_RECIPE["eval_size"]), src_vocab, tgt_vocab)]
    model = tl.Transformer(tl.TransformerConfig(len(src_vocab), len(tgt_vocab), **DATE_MODEL))
    cfg = recipe_config(max_steps=args.max_steps, target_accuracy=args.target, checkpoint=str(partial), progress=True)
    hist = train(model, loader, val, cfg, vocabs=(src_vocab, tgt_vocab))
    if not partial.exists():
        print(f"error: no checkpoint was saved, {out} is left as it was (no evaluation ran, or none beat 0% "
              f"exact match); stopped: {hist.stopped or 'no steps'}", file=sys.stderr)
        return 1
    model, _, _, best = load(partial, src_vocab, tgt_vocab)  # the best model by validation accuracy
    partial.unlink()
    start = time.perf_counter()
    preds = translate(model, [s for s, _ in splits.test], src_vocab, tgt_vocab, max_len=12, batch_size=4096)
    refs = [t for _, t in splits.test]
    command = "python scripts/train_transformer.py" + (f" --seed {args.seed}" if args.seed else "") + (
        f" --threads {args.threads}" if args.threads != 2 else "") + (
        " --update-shipped" if args.update_shipped else "")
    record = {
        "command": command, "seed": args.seed, "threads": args.threads, "torch": torch.__version__,
        "kernels": torch.backends.cpu.get_cpu_capability(), "machine": platform.processor() or platform.machine(),
        "device": str(tl.runtime.book_device()),
        "model": DATE_MODEL, "recipe": {**DATE_RECIPE, "max_steps": args.max_steps, "target": args.target},
        "steps_run": hist.step[-1], "best_step": best["step"], "train_seconds": round(hist.seconds, 1),
        "eval_seconds": round(hist.eval_seconds, 1), "load_average": round(os.getloadavg()[0], 2),
        "stopped": hist.stopped, f"validation_exact_match_{DATE_RECIPE['eval_size']}": round(best["accuracy"], 4),
        "test_pairs": len(splits.test), "test_exact_match": round(exact_match(preds, refs), 4),
        "test_cer": round(character_error_rate(preds, refs), 5),
        "test_decode_seconds": round(time.perf_counter() - start, 1), "parameters": tl.count_parameters(model),
        "eval_step": hist.eval_step, "eval_accuracy": [round(a, 4) for a in hist.eval_accuracy],
        "loss_every_50": [round(x, 4) for x in hist.loss[::50]],
    }
    save(out, model, src_vocab, tgt_vocab, record)  # the record travels in the file ...
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")  # ... and beside it, readable
    print(json.dumps({k: v for k, v in record.items() if not isinstance(v, list)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
