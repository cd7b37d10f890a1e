"""The one call of every chapter's setup cell: `book.setup(seed, threads, device)`.

It makes a notebook deterministic and picks the device (`transformer_lib.runtime.setup`: seeds,
a fixed thread count, the device) and sets the book's plotting defaults (`viz.set_plot_style`).
"""
from __future__ import annotations

import torch

from .. import runtime
from .claims import chosen_seed

__all__ = ["setup"]


def setup(seed: int = 0, threads: int = 1, plots: bool = True, device: str | torch.device | None = None) -> None:
    """Seed Python, NumPy and PyTorch, fix PyTorch's thread count, choose the device
    (`runtime.setup`) and set the book's plotting defaults. Notebooks call this once, in their
    setup cell. Under the claims sweep (`benchmarks/sweep_claims.py`) the environment variable
    `TL_SEED` replaces `seed` (`claims.chosen_seed`)."""
    runtime.setup(seed=chosen_seed(seed), threads=threads, device=device)
    if plots:
        from .viz import set_plot_style

        set_plot_style()
