#!/usr/bin/env python
"""Train the small recurrent checkpoints that chapters 1 and 2 load.

Chapter 1 (the bottleneck) compares a GRU encoder-decoder without attention and one with
additive (Bahdanau) attention on the copy task, inputs of 4 to 32 symbols. Chapter 2 shows the
alignments of attention models trained on the date task (``transformer_lib.data``) with
additive and with dot-product (Luong) scores.

    python scripts/train_rnn_checkpoints.py                 # every checkpoint below, in turn
    python scripts/train_rnn_checkpoints.py --only copy_none copy_additive
    python scripts/train_rnn_checkpoints.py --list

Each run is seeded (``--seed``, default 0) and uses a fixed number of threads (``--threads``,
default 1), so the same command on the same machine and torch version gives the same weights.
Training is the book's one loop, ``transformer_lib.training.train`` with ``recipes.rnn_config()``
(Adam, lr 1e-3 for half the steps then decaying linearly to 0, plain cross-entropy, clipping
at 1.0) on batches from ``vocab.make_loader``. A checkpoint (``transformer_lib.checkpoints``,
read with ``torch.load(..., weights_only=True)``) stores the weights, the config, both
vocabularies and a record: the command, seed, number of steps, wall time, and the evaluation
figures measured during training (exact match by input length for the copy task, per language
for the dates), so that a chapter can plot the learning curve without retraining.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer_lib import checkpoints  # noqa: E402
from transformer_lib import data as D  # noqa: E402
from transformer_lib import vocab as V  # noqa: E402
from transformer_lib import rnn as R  # noqa: E402
from transformer_lib.runtime import resolve_device  # noqa: E402
from transformer_lib.decoding import translate  # noqa: E402
from transformer_lib.metrics import accuracy_by_length  # noqa: E402
from transformer_lib.recipes import rnn_config  # noqa: E402
from transformer_lib.training import train  # noqa: E402

COPY_ALPHABET = "abcdefghijklmnop"
COPY_LENGTHS = tuple(range(4, 33, 4))
COPY_PER_LENGTH = 100

# name -> (task, attention, steps)
RUNS = {
    "copy_none": ("copy", None, 3000),
    "copy_additive": ("copy", "additive", 3000),
    "copy_none_long": ("copy", None, 9000),  # the same model trained three times longer
    "date_additive": ("date", "additive", 2000),
    "date_dot": ("date", "dot", 2000),
}


def copy_eval_pairs(lengths=COPY_LENGTHS, per_length=COPY_PER_LENGTH):
    """The held-out copy examples: ``per_length`` random strings of each length (seed 1000 + length)."""
    return [p for n in lengths for p in D.make_copy_pairs(per_length, n, n, COPY_ALPHABET, seed=1000 + n)]


def copy_data(seed):
    vocab = V.Vocab(COPY_ALPHABET)
    train = D.make_copy_pairs(100_000, 4, 32, COPY_ALPHABET, seed=seed)
    return train, copy_eval_pairs(), vocab, vocab


def date_data(seed):
    splits = D.make_date_splits(seed=seed, return_meta=True)
    src_vocab, tgt_vocab = D.date_vocabs()
    train = [(s, t) for s, t, *_ in splits.train]
    # evaluate during training on the validation split (the chapters report the test split)
    return train, splits.valid, src_vocab, tgt_vocab


def evaluate(task, model, eval_pairs, src_vocab, tgt_vocab):
    sources, refs = [p[0] for p in eval_pairs], [p[1] for p in eval_pairs]
    outs = translate(model, sources, src_vocab, tgt_vocab, max_len=max(len(t) for t in refs) + 1)
    hits = [o == t for o, t in zip(outs, refs)]
    if task == "copy":
        acc = accuracy_by_length(sources, outs, refs)
        return {"by_length": {str(n): round(a, 4) for n, a in acc.items()},
                "overall": round(sum(acc.values()) / len(acc), 4)}
    by_loc: dict[str, list[bool]] = {}
    for hit, (_, _, loc, _fmt) in zip(hits, eval_pairs):
        by_loc.setdefault(loc, []).append(hit)
    return {"by_locale": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_loc.items())},
            "overall": round(sum(hits) / len(hits), 4)}


def train_one(name, args):
    task, attention, default_steps = RUNS[name]
    steps = args.steps or default_steps
    torch.manual_seed(args.seed)
    train_pairs, eval_pairs, src_vocab, tgt_vocab = (copy_data if task == "copy" else date_data)(args.seed)
    model = R.Seq2Seq(R.Seq2SeqConfig(len(src_vocab), len(tgt_vocab), emb_dim=args.emb_dim, hidden_size=args.hidden,
                                      attention=attention, bidirectional=True, attn_size=args.hidden)).to(args.device)
    loader = V.make_loader(train_pairs, src_vocab, tgt_vocab, batch_size=args.batch_size, seed=args.seed)
    val = [V.collate([p[:2] for p in eval_pairs], src_vocab, tgt_vocab)]
    cfg = rnn_config(max_steps=steps, lr=args.lr, eval_every=args.eval_every)
    out = Path(args.out) / f"{name}.pt"
    history, start, own_eval = [], time.perf_counter(), [0.0]  # own_eval: seconds in on_eval
    meta = {
        "name": name, "task": task, "seed": args.seed, "planned_steps": steps, "batch_size": args.batch_size,
        "lr": args.lr, "lr_schedule": "constant for half the planned steps, then linear decay to 0",
        "threads": args.threads, "device": args.device, "torch": str(torch.__version__),
        "python": platform.python_version(),
        "command": f"python scripts/train_rnn_checkpoints.py --only {name} --seed {args.seed} --device {args.device}"
                   + (f" --steps {args.steps}" if args.steps else ""),
        "eval": "copy: 100 random strings of each length 4, 8, ..., 32 (seed 1000 + length)" if task == "copy"
        else "dates: the validation split of make_date_splits(seed)",
    }
    print(f"[{name}] {sum(p.numel() for p in model.parameters()):,} parameters, {steps} steps", flush=True)

    def on_eval(step, _accuracy):
        began = time.perf_counter()
        result = evaluate(task, model, eval_pairs, src_vocab, tgt_vocab)
        own_eval[0] += time.perf_counter() - began
        history.append({"step": step, "seconds": round(time.perf_counter() - start, 1), **result})
        print(f"[{name}] step {step:5d}  {history[-1]['seconds']:7.1f} s  {json.dumps(result)}", flush=True)
        # saved after every evaluation, so that an interrupted run still leaves its last state
        checkpoints.save(out, model, src_vocab, tgt_vocab, {**meta, "steps": step, "history": history})

    hist = train(model, loader, val, cfg, on_eval=on_eval)
    meta.update(steps=hist.step[-1], train_seconds=round(hist.seconds - hist.eval_seconds - own_eval[0], 1),
                history=history)
    checkpoints.save(out, model, src_vocab, tgt_vocab, meta)
    print(f"[{name}] wrote {out} ({out.stat().st_size / 1e6:.2f} MB) in {meta['train_seconds']:.0f} s of training",
          flush=True)
    return meta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=sorted(RUNS), help="train only these checkpoints")
    p.add_argument("--list", action="store_true", help="list the checkpoints and exit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="override the number of training steps")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--emb-dim", type=int, default=64)
    p.add_argument("--device", default=None, help="cpu, cuda or mps (default: $TL_DEVICE, else cpu)")
    p.add_argument("--out", default=str(ROOT / "transformer_lib" / "checkpoints"))
    args = p.parse_args(argv)
    if args.list:
        for name, (task, att, steps) in RUNS.items():
            print(f"{name:15s} task={task:5s} attention={att} steps={steps}")
        return
    torch.set_num_threads(args.threads)
    args.device = str(resolve_device(args.device))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    metas = [train_one(name, args) for name in (args.only or RUNS)]
    for m in metas:
        print(json.dumps({k: m[k] for k in ("name", "steps", "train_seconds")} | {"final": m["history"][-1]}))


if __name__ == "__main__":
    main()
