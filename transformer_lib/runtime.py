"""Where tensors live and in which mode a model runs: the small helpers that the training loop,
decoding, generation and the attention maps share.

- `device_of(model)`: the device of a model's parameters, where its inputs must go;
- `eval_mode(model)`: run a block without dropout, then give the model back as it was;
- `book_device()`: the device the book computes on, chosen once by `setup(device=...)` or the
  environment variable `TL_DEVICE` (`cpu`, the default; `cuda`; `mps`); `resolve_device`
  checks a name against what this machine has;
- `setup(seed, threads, device)`: seeds, a fixed thread count and the device, so that a run
  repeats bit for bit on one machine (`transformer_lib.book.setup` adds the book's figure style);
- `torch_version()` and `require_torch(minimum, what)`: the one test of the installed PyTorch
  against what a part of the package needs (`TorchTooOld` otherwise). The library needs what
  chapters 1-16 use; `transformer_lib.parallel` (chapter 17) alone needs a newer release.
"""
from __future__ import annotations

import os
import random
import re
from contextlib import contextmanager

import numpy as np
import torch

from ._checks import check_positive_int

__all__ = ["DEVICE_VARIABLE", "TorchTooOld", "book_device", "device_of", "eval_mode", "require_torch", "resolve_device",
           "setup", "torch_version"]

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
    # The CPU is PyTorch's own default: reach it by removing any default device set before
    # (None), not by setting the CPU, which would leave a device context behind that costs a
    # little on every torch call.
    if chosen != book_device():
        torch.set_default_device(None if chosen.type == "cpu" else chosen)
    return chosen


class TorchTooOld(ImportError):
    """The installed PyTorch is older than a part of the package needs (`require_torch`)."""


def torch_version() -> tuple[int, int]:
    """The installed PyTorch's (major, minor) release, read from `torch.__version__`."""
    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    if found is None:  # pragma: no cover - every release is numbered so
        raise ValueError(f"cannot read a release number from torch.__version__={torch.__version__!r}")
    return int(found[1]), int(found[2])


def require_torch(minimum: tuple[int, int], what: str, why: str = "") -> None:
    """Raise `TorchTooOld` (an ImportError) naming `what`, the release it needs and the one
    installed, unless PyTorch is at least `minimum` = (major, minor)."""
    if torch_version() < tuple(minimum):
        need = ".".join(map(str, minimum))
        raise TorchTooOld(f"{what} needs torch >= {need}{f' ({why})' if why else ''}; this is torch "
                          f"{torch.__version__}. Everything else in transformer_lib works with it.")
