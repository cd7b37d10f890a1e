"""Chapter 14's character language model: the texts it reads, its recipe, and the run the book
ships.

Chapter 14 cuts the book's prose into a training text and three texts it measures, trains a
small `lm.CausalLM` on the training text and follows the three losses as training goes. The
book ships that run, `checkpoints/char_lm.pt`, made with this module by `python
scripts/export_onnx.py --train-lm` (seed 0, one thread), so the chapter can train the first
steps itself, compare them with the run, and read the rest of it from the checkpoint's record:
each measured text's loss every `eval_every` steps (step 0 included, as `curves`) and the
training loss of every step (`loss`). The same weights are the model that the attention
explorer on the website runs in a reader's browser.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import lm
from .._checks import check_positive_int
from ..training import History, TrainConfig, train
from ..vocab import Vocab

__all__ = ["CONFIG", "RECIPE", "BATCH_SIZE", "LENGTH", "split", "every_window", "train_measured"]

#: The model's sizes (`lm.CausalLMConfig`, with the vocabulary's size).
CONFIG = dict(d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=512)
#: The training recipe (`TrainConfig`): equation (3) with warm-up 100 and factor 0.3, no label
#: smoothing, every text measured every 100 steps.
RECIPE = dict(max_steps=1000, warmup=100, factor=0.3, label_smoothing=0.0, eval_every=100)
#: Each batch: 32 random windows of 64 characters of the training text (`lm.random_windows`).
BATCH_SIZE, LENGTH = 32, 64


def split(text: str) -> tuple[str, dict[str, str], str]:
    """Chapter 14's parts of the corpus `text`: (training text, the three measured texts by
    name, a second training sample).

    The first 90% of the characters, cut back to a line break, are numbered by paragraph (line)
    from 0. The training text is all of them but paragraphs 9, 19, 29, ...; the measured texts
    are the *training sample* (paragraphs 4, 14, 24, ..., trained on), the *same chapters*
    (paragraphs 9, 19, 29, ..., held out) and the *later chapters* (the last tenth, held out);
    the second training sample (paragraphs 2, 12, 22, ...) is a yardstick for the gap between
    two samples of one kind."""
    if not isinstance(text, str) or "\n" not in text[: int(0.9 * len(text))]:
        raise ValueError("text must be a string with a line break in its first 90% (paragraphs are lines)")
    cut = text.rindex("\n", 0, int(0.9 * len(text))) + 1  # a paragraph boundary
    paragraphs = text[:cut].splitlines(keepends=True)

    def every_tenth(k: int) -> str:
        return "".join(p for i, p in enumerate(paragraphs) if i % 10 == k)

    train_text = "".join(p for i, p in enumerate(paragraphs) if i % 10 != 9)
    texts = {"training sample": every_tenth(4), "same chapters": every_tenth(9), "later chapters": text[cut:]}
    return train_text, texts, every_tenth(2)


def every_window(vocab: Vocab, part: str, length: int = LENGTH,
                 per_batch: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The windows of `length` characters of `part` that start every `length` characters (at 0,
    length, 2 length, ..., each with one character after it), and their targets shifted by one:
    a list of batches (x, y), each (per_batch, length) (the last may hold fewer)."""
    check_positive_int("length", length)
    check_positive_int("per_batch", per_batch)
    data = torch.tensor(vocab.encode(part))
    starts = range(0, len(data) - length - 1, length)
    if not starts:
        raise ValueError(f"part holds {len(data)} characters: too few for a window of length {length}")
    x = torch.stack([data[s:s + length] for s in starts])          # (windows, length)
    y = torch.stack([data[s + 1:s + length + 1] for s in starts])  # (windows, length)
    return list(zip(x.split(per_batch), y.split(per_batch)))


def train_measured(model: lm.CausalLM, train_ids: torch.Tensor, windows: dict[str, list], seed: int,
                   steps: int | None = None,
                   held_out: str = "later chapters") -> tuple[History, dict[str, list[float]]]:
    """Train `model` by the recipe with `tl.train` and `lm.lm_loss` for `steps` steps (default
    and at most: the recipe's 1,000) on `lm.random_windows` of `train_ids` drawn with `seed`,
    after `torch.manual_seed(seed)`, measuring each text of `windows` (name -> batches) with
    `lm.lm_evaluate` before training and every `eval_every` steps.

    Returns `tl.train`'s History and each text's losses: {name: [at step 0, eval_every, ...]}.
    Chapter 14's training cell calls it: `held_out` (the later chapters) is `tl.train`'s own
    evaluation, the other texts are measured by its `on_eval` hook."""
    cfg = TrainConfig(**RECIPE, progress=False)
    steps = cfg.max_steps if steps is None else steps
    check_positive_int("steps", steps)
    if steps > cfg.max_steps:
        raise ValueError(f"steps must be at most the recipe's {cfg.max_steps}, got {steps}")
    if held_out not in windows:
        raise ValueError(f"held_out must name one of the texts {list(windows)}, got {held_out!r}")
    others = [name for name in windows if name != held_out]
    torch.manual_seed(seed)
    loader = lm.random_windows(train_ids, batch_size=BATCH_SIZE, length=LENGTH, steps=cfg.max_steps, seed=seed)
    curves = {name: [lm.lm_evaluate(model, batches, cfg)[1]] for name, batches in windows.items()}

    def measure(step, accuracy):  # train calls it after each evaluation of the held-out text
        for name in others:
            curves[name].append(lm.lm_evaluate(model, windows[name], cfg)[1])

    history = train(model, loader, windows[held_out], dataclasses.replace(cfg, max_steps=steps),
                    on_eval=measure, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    curves[held_out] += history.eval_loss
    return history, curves
