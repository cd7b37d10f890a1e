"""Small argument checks shared by the modules, so every error names the argument at fault."""
from __future__ import annotations

import torch


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


def check_last_dim(name: str, x: torch.Tensor, size: int, what: str = "d_model") -> None:
    if x.shape[-1] != size:
        raise ValueError(f"{name} must have last dimension {what}={size}, got shape {tuple(x.shape)}")


def check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_probability(name: str, value) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")


def check_token_ids(name: str, ids, vocab_size: int) -> None:
    """Token ids must be an integer tensor with every id in [0, vocab_size)."""
    check_tensor(name, ids, ndim=2)
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"{name} must hold integer token ids (batch, length), got dtype {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} holds token ids in [{int(ids.min())}, {int(ids.max())}], "
            f"but the vocabulary has ids 0..{vocab_size - 1}"
        )
