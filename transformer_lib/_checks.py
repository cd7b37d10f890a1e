"""Small argument checks shared by the modules, so every error names the argument at fault,
and `entry_point`, which runs a public function's checks once per call, at the boundary.

Settings are checked when an object is made (a config's `__post_init__`, a module's
`__init__`). Inputs are checked where a reader's call enters the library: a model's forward,
decoding, generation, the attention functions and modules a reader calls alone. A check that
reads values (NaN, token ids out of range) waits for the device (a host sync), so it must not
run once per layer: a layer called from inside a checked call skips its own check.
"""
from __future__ import annotations

import functools
import threading

import numpy as np
import torch

#: Whether this thread is inside a checked call (`entry_point`).
_inside = threading.local()


def entry_point(check):
    """Decorate a public function, or a module's `forward`, so that `check(*args, **kwargs)`
    (called with the same arguments, `self` included) validates its inputs first, unless the
    call comes from inside another entry point, whose own check covered what it hands on.

    So `Transformer.forward` checks its token ids and masks once, and the attention modules of
    its layers, entry points themselves when a reader calls one alone, do not check again (and
    do not wait for the device) at every layer.
    """
    def decorate(fn):
        @functools.wraps(fn)
        def checked(*args, **kwargs):
            if getattr(_inside, "depth", 0):
                return fn(*args, **kwargs)
            check(*args, **kwargs)
            _inside.depth = 1
            try:
                return fn(*args, **kwargs)
            finally:
                _inside.depth = 0

        return checked

    return decorate


def check_tensor(name: str, x, ndim: int | tuple[int, ...] | None = None, floating: bool = False) -> None:
    """Raise TypeError/ValueError unless `x` is a tensor of the expected rank and kind."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if x.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise ValueError if `x` holds a NaN or an infinity (shape-only tensors on the `meta`
    device cannot be checked and pass)."""
    if x.is_floating_point() and not x.is_meta and x.numel() and not torch.isfinite(x.detach()).all().item():
        bad = (~torch.isfinite(x.detach())).nonzero()[0].tolist()
        raise ValueError(f"{name} must be finite, but it holds {x[tuple(bad)].item()} at index {tuple(bad)} "
                         f"(shape {tuple(x.shape)})")


def check_non_negative_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def check_positive_number(name: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive (finite) number, got {value!r}")


def check_choice(name: str, value, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_config(config, cls: type) -> None:
    """Raise TypeError unless `config` is a `cls` (a model's config dataclass)."""
    if not isinstance(config, cls):
        raise TypeError(f"config must be a {cls.__name__}, got {type(config).__name__} (build the model as "
                        f"Model({cls.__name__}(...)): every model of the book takes its config)")


def check_last_dim(name: str, x: torch.Tensor, size: int, what: str = "d_model") -> None:
    if x.shape[-1] != size:
        raise ValueError(f"{name} must have last dimension {what}={size}, got shape {tuple(x.shape)}")


def check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_probability(name: str, value) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")


def check_token_ids(name: str, ids, vocab_size: int) -> None:
    """Token ids must be an integer tensor with every id in [0, vocab_size). On the `meta`
    device (shapes without values) only the shape and dtype can be checked."""
    check_tensor(name, ids, ndim=2)
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"{name} must hold integer token ids (batch, length), got dtype {ids.dtype}")
    if not ids.numel() or ids.is_meta:
        return
    low, high = torch.stack(torch.aminmax(ids.detach())).tolist()  # one wait for the device
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} holds token ids in [{low}, {high}], but the vocabulary has ids 0..{vocab_size - 1}")


def check_tokens(name: str, tokens) -> list[str] | None:
    """None, or a list of strings (one per position): a copy of `tokens` as a list."""
    if tokens is None:
        return None
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, one per position, got {type(tokens).__name__}")
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(t).__name__} (use [str(t) for t in ...])")
    return list(tokens)


def as_numpy(name: str, x, what: str = "a tensor or array", lists: bool = False) -> np.ndarray:
    """`x` (a tensor, on any device, with or without gradients, or a NumPy array of numbers; with
    `lists`, also a nested list of numbers) as a float64 NumPy array: the one tensor-to-NumPy
    conversion of the package. `what` completes the TypeError for anything else ("{name} must
    be {what}")."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    if lists and isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer) or x.dtype == bool):
            raise TypeError(f"{name} must hold numbers, got an array of dtype {x.dtype}")
        return x.astype(np.float64)
    raise TypeError(f"{name} must be {what}, got {type(x).__name__}")
