"""Reproducibility: one call that makes a notebook deterministic."""
from __future__ import annotations

import os
import random
from contextlib import contextmanager

import numpy as np
import torch
from pathlib import Path

from ._checks import check_positive_int

#: Where the book's small trained models live: inside the package, so that a notebook finds
#: them wherever transformer_lib is installed (a clone, pip from git on Colab, Binder).
CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


def device_of(model: torch.nn.Module) -> torch.device:
    """The device of `model`'s parameters (the CPU for a model without any), where its inputs
    must go."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@contextmanager
def eval_mode(model: torch.nn.Module):
    """Run the block with `model` in eval mode (no dropout), then give it back in the mode the
    caller had it in, even if the block raises."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def setup(seed: int = 0, threads: int = 1, plots: bool = True) -> None:
    """Seed Python, NumPy and PyTorch, fix PyTorch's thread count and set plotting defaults.

    With the same seed and thread count, training runs are bit-identical on one machine; a
    different thread count changes the order of floating-point sums, so results drift in the
    last digits. Notebooks call this once, in their setup cell.
    """
    check_positive_int("threads", threads)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    if plots:
        from .viz import set_plot_style

        set_plot_style()
