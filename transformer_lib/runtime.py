"""Where tensors live and in which mode a model runs: the small helpers that the training loop,
decoding, generation and the attention maps share.

- `device_of(model)`: the device of a model's parameters, where its inputs must go;
- `eval_mode(model)`: run a block without dropout, then give the model back as it was;
- `book_device()`: the device the book computes on, chosen once by `setup(device=...)` or the
  environment variable `TL_DEVICE` (`cpu`, the default; `cuda`; `mps`); `resolve_device`
  checks a name against what this machine has;
- `setup(seed, threads, device)`: seeds, a fixed thread count and the device, so that a run
  repeats bit for bit on one machine (`transformer_lib.book.setup` adds the book's figure style).
"""
from __future__ import annotations

import os
import random
from contextlib import contextmanager

import numpy as np
import torch

from ._checks import check_positive_int

__all__ = ["DEVICE_VARIABLE", "book_device", "device_of", "eval_mode", "resolve_device", "setup"]

#: The environment variable that chooses the device of every chapter (`TL_DEVICE=cuda`).
DEVICE_VARIABLE = "TL_DEVICE"


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """`device` (or, if None, the environment variable `TL_DEVICE`, or the CPU) as a
    `torch.device`, checked against this machine: asking for `cuda` without a CUDA GPU, or
    `mps` without Apple's Metal backend, is a ValueError that says what is available."""
    if device is None:
        device = os.environ.get(DEVICE_VARIABLE, "").strip() or "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must name a torch device such as 'cpu', 'cuda' or 'mps', got {device!r}") from None
    available = {"cpu": True, "meta": True, "cuda": torch.cuda.is_available(),
                 "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(device.type, False):
        have = ", ".join(name for name, ok in available.items() if ok and name != "meta")
        raise ValueError(f"device {str(device)!r} is not available on this machine (available: {have}); "
                         f"set {DEVICE_VARIABLE} or setup(device=...) to one of them")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device {str(device)!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def book_device() -> torch.device:
    """The device new tensors are made on: the one `setup` chose (PyTorch's default device, or
    that of an enclosing `with torch.device(...)` block). Read from an empty tensor, which
    every torch release since 2.0 answers the same way."""
    return torch.empty(0).device


def device_of(model: torch.nn.Module) -> torch.device:
    """The device of `model`'s parameters (the book's device for a model without any), where
    its inputs must go."""
    param = next(model.parameters(), None)
    return param.device if param is not None else book_device()


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


def setup(seed: int = 0, threads: int = 1, device: str | torch.device | None = None) -> torch.device:
    """Seed Python, NumPy and PyTorch, fix PyTorch's thread count and choose the device; returns
    the device.

    With the same seed and thread count, training runs are bit-identical on one machine; a
    different thread count changes the order of floating-point sums, so results drift in the
    last digits. `device` (default: the environment variable `TL_DEVICE`, else the CPU) becomes
    PyTorch's default device, so every tensor made without naming a device, and every model
    built, lives there (`book_device()` tells which; `resolve_device` says what this machine has).
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
    return chosen
