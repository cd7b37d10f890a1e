"""Learning-rate schedules: the paper's warm-up (equation 3) and the simpler ones the book uses.

`lr_schedule(cfg, model)` turns a `training.TrainConfig` into the function step -> learning
rate that `training.train` follows; `noam_lr` is equation (3) itself.
"""
from __future__ import annotations

from typing import Callable

from torch import nn

from ._checks import check_positive_int

__all__ = ["SCHEDULES", "noam_lr", "factor_for_peak", "model_width", "lr_schedule"]

#: The learning-rate schedules `TrainConfig.schedule` can name.
SCHEDULES = ("warmup", "constant", "linear_warmup", "linear_decay")


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)   (paper, equation 3)

    It rises linearly for `warmup` steps (4000 in the paper), peaks at
    factor / sqrt(d_model * warmup), then decays like 1 / sqrt(step). Steps count from 1:
    step 0 (where step^-0.5 is infinite) or a negative step raises ValueError.
    """
    check_positive_int("step", step)
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """The `factor` that makes equation (3) peak at `peak_lr` (at step `warmup`):
    factor = peak_lr * sqrt(d_model * warmup)."""
    if not (isinstance(peak_lr, (int, float)) and peak_lr > 0):
        raise ValueError(f"peak_lr must be a positive number, got {peak_lr!r}")
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return peak_lr * (d_model * warmup) ** 0.5


def model_width(model: nn.Module) -> int:
    """The `config.d_model` of `model`, or of the model a wrapper holds (`module`, as PyTorch's
    DistributedDataParallel has): the width equation (3) scales the learning rate by."""
    inner = getattr(model, "module", model)
    d_model = getattr(getattr(inner, "config", None), "d_model", None)
    if d_model is None:
        raise ValueError(f"the warm-up schedule needs the model's width, and a {type(inner).__name__} has no "
                         "config.d_model; pick another schedule (TrainConfig.schedule)")
    return d_model


def lr_schedule(cfg, model: nn.Module) -> Callable[[int], float]:
    """The learning rate at step s = 1, 2, ... that `cfg.schedule` names, for a
    `training.TrainConfig` `cfg` (see there)."""
    if cfg.schedule == "warmup":
        d_model = model_width(model)
        factor = cfg.factor if cfg.peak_lr is None else factor_for_peak(cfg.peak_lr, d_model, cfg.warmup)
        return lambda s: noam_lr(s, d_model, cfg.warmup, factor)
    if cfg.schedule == "constant":
        return lambda s: cfg.lr
    if cfg.schedule == "linear_warmup":
        return lambda s: cfg.lr * min(1.0, s / cfg.warmup)
    return lambda s: cfg.lr * min(1.0, 2.0 * (1.0 - (s - 1) / cfg.max_steps))
