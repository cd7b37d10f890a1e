"""Reproducibility: one call that makes a notebook deterministic."""
from __future__ import annotations

import os
import random

import numpy as np
import torch
from pathlib import Path

from ._checks import check_positive_int

#: Where the book's small trained models live: inside the package, so that a notebook finds
#: them wherever transformer_lib is installed (a clone, pip from git on Colab, Binder).
CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


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
