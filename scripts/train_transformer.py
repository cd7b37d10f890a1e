"""Train the book's date-normalisation Transformer and save it as a small checkpoint.

    python scripts/train_transformer.py                  # writes transformer_lib/checkpoints/transformer_dates.pt
    python scripts/train_transformer.py --max-seconds 60 # a shorter run

Chapter 11 runs a short version of this training live and then loads the checkpoint this
script writes; chapter 12 decodes with it. The run is deterministic for a given seed and
thread count (1 thread). The figures of the run that made the committed checkpoint are
written to transformer_lib/checkpoints/transformer_dates.json beside it.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib.data import collate, date_vocabs, make_date_splits, make_loader
from transformer_lib.decoding import translate
from transformer_lib.metrics import character_error_rate, exact_match
from transformer_lib.training import TrainConfig, train

ROOT = Path(__file__).resolve().parent.parent

#: The model and training settings used by chapters 11 and 12.
MODEL = dict(d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0, max_len=128)
TRAIN = dict(warmup=200, factor=64**0.5 * 200**0.5 * 1e-3,  # peak learning rate 1e-3 at step 200
             label_smoothing=0.1, clip_norm=1.0, batch_size=64)


def build(src_vocab, tgt_vocab) -> tl.Transformer:
    return tl.Transformer(tl.TransformerConfig(len(src_vocab), len(tgt_vocab), **MODEL))


def test_accuracy(model, pairs, src_vocab, tgt_vocab):
    """Greedy exact match and character error rate on `pairs`, and the predictions."""
    preds = translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len=12)
    refs = [t for _, t in pairs]
    return exact_match(preds, refs), character_error_rate(preds, refs), preds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=8000)
    ap.add_argument("--max-seconds", type=float, default=None)
    ap.add_argument("--target", type=float, default=0.999, help="stop at this validation exact match")
    ap.add_argument("--out", default=str(ROOT / "transformer_lib" / "checkpoints" / "transformer_dates.pt"))
    args = ap.parse_args()

    tl.setup(seed=args.seed, threads=1, plots=False)
    src_vocab, tgt_vocab = date_vocabs()
    splits = make_date_splits(seed=0)
    loader = make_loader(splits.train, src_vocab, tgt_vocab, batch_size=TRAIN["batch_size"], seed=args.seed)
    val = [collate(splits.valid[i : i + 500], src_vocab, tgt_vocab) for i in range(0, 1000, 500)]
    model = build(src_vocab, tgt_vocab)
    cfg = TrainConfig(max_steps=args.max_steps, warmup=TRAIN["warmup"], factor=TRAIN["factor"],
                      label_smoothing=TRAIN["label_smoothing"], clip_norm=TRAIN["clip_norm"], eval_every=250,
                      target_accuracy=args.target, max_seconds=args.max_seconds, checkpoint=args.out, progress=True)
    hist = train(model, loader, val, cfg)
    model, meta = tl.training.load_checkpoint(args.out)  # the best model by validation accuracy
    start = time.perf_counter()
    acc, cer, _ = test_accuracy(model, splits.test, src_vocab, tgt_vocab)
    record = {
        "command": "python scripts/train_transformer.py" + (f" --seed {args.seed}" if args.seed else ""),
        "seed": args.seed, "threads": 1, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "model": MODEL, "train": TRAIN, "steps_run": hist.step[-1], "best_step": hist.best_step,
        "train_seconds": round(hist.seconds, 1), "stopped": hist.stopped,
        "validation_exact_match_1000": round(hist.best_accuracy, 4),
        "test_pairs": len(splits.test), "test_exact_match": round(acc, 4), "test_cer": round(cer, 5),
        "test_decode_seconds": round(time.perf_counter() - start, 1),
        "parameters": tl.count_parameters(model),
        "eval_step": hist.eval_step, "eval_accuracy": [round(a, 4) for a in hist.eval_accuracy],
        "loss_every_50": [round(x, 4) for x in hist.loss[::50]],
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if not isinstance(v, list)}, indent=1))


if __name__ == "__main__":
    main()
