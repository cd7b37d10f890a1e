"""The one call of every chapter's setup cell: `setup(seed, threads, device)`.

It makes a notebook deterministic (seeds and a fixed thread count), picks the device the book
computes on, and sets the plotting defaults. It stands above the rest of the package (it sets
`viz`'s style), so nothing in the package imports it.
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._checks import check_positive_int
from .runtime import book_device, resolve_device

__all__ = ["setup"]


def setup(seed: int = 0, threads: int = 1, plots: bool = True, device: str | torch.device | None = None) -> None:
    """Seed Python, NumPy and PyTorch, fix PyTorch's thread count, choose the device and set
    plotting defaults.

    With the same seed and thread count, training runs are bit-identical on one machine; a
    different thread count changes the order of floating-point sums, so results drift in the
    last digits. `device` (default: the environment variable `TL_DEVICE`, else the CPU) becomes
    PyTorch's default device, so every tensor a chapter makes without naming a device, and every
    model it builds, lives there (`runtime.book_device()` tells which; `runtime.resolve_device`
    says what this machine has).
    Notebooks call this once, in their setup cell.
    """
    check_positive_int("threads", threads)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    chosen = resolve_device(device)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    # Change PyTorch's default device only when it changes: on the CPU, its own default, this
    # leaves no device context behind (a context costs a little on every torch call).
    if chosen != book_device():
        torch.set_default_device(chosen)
    if plots:
        from .viz import set_plot_style

        set_plot_style()
