"""The residual sub-layer: the "Add & Norm" box of the paper's figure 1 (section 3.1).

Every sub-layer of the encoder and decoder (self-attention, cross-attention, feed-forward) is
wrapped the same way:

    post-norm (the paper):  Norm(x + Dropout(Sublayer(x)))
    pre-norm (norm_first):  x + Dropout(Sublayer(Norm(x)))      (Xiong et al. 2020)

with dropout on the sub-layer's output, before the sum (section 5.4, "Residual Dropout").

The norm is LayerNorm in the paper (`AddNorm`), and RMSNorm in most decoders since
(`AddRMSNorm`; Zhang and Sennrich 2019): RMSNorm(x) = g * x / sqrt(mean(x^2) + eps), LayerNorm
without the mean subtracted and without the bias. Each class *is* its norm (a subclass of
`nn.LayerNorm` or `nn.RMSNorm`, so a layer that names it `norm1` keeps the state_dict keys
`norm1.weight` and, for LayerNorm, `norm1.bias`), with the residual sum around it:

    norm(x)                 the norm alone
    norm(x, sublayer)       the whole residual sub-layer, sublayer: (B, T, d_model) -> (B, T, d_model)

`make_norm(kind, ...)` builds either, by name ("layer" or "rms").
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ._checks import check_bool, check_choice, check_positive_int, check_positive_number, check_probability

__all__ = ["AddNorm", "AddRMSNorm", "NORMS", "make_norm"]

#: The norms `make_norm` knows.
NORMS = ("layer", "rms")


class Residual:
    """The residual sum around a norm (a mixin for a norm module: its own forward is the norm)."""

    def _setup_residual(self, d_model: int, dropout: float, norm_first: bool) -> None:
        self.dropout = nn.Dropout(dropout)  # no parameters: the state_dict holds the norm's only
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        if sublayer is None:
            return super().forward(x)  # the norm alone
        if self.norm_first:
            return x + self.dropout(sublayer(super().forward(x)))
        return super().forward(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, norm_first={self.norm_first}"


class AddNorm(Residual, nn.LayerNorm):
    """LayerNorm(x + Dropout(Sublayer(x))), or x + Dropout(Sublayer(LayerNorm(x))) with `norm_first`.

    Args:
        d_model: width of x, (..., d_model).
        dropout: P_drop on the sub-layer's output (training only).
        norm_first: pre-norm instead of the paper's post-norm.
        eps, bias: as for `nn.LayerNorm`.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False,
                 eps: float = 1e-5, bias: bool = True):
        _check_norm(d_model, dropout, norm_first, eps)
        super().__init__(d_model, eps=eps, bias=bias)
        self._setup_residual(d_model, dropout, norm_first)


class AddRMSNorm(Residual, nn.RMSNorm):
    """RMSNorm(x + Dropout(Sublayer(x))), or x + Dropout(Sublayer(RMSNorm(x))) with `norm_first`.

    RMSNorm (Zhang and Sennrich 2019, arXiv:1910.07467) rescales by the root mean square,
    x / sqrt(mean(x^2) + eps) * g: no mean subtracted, no bias. `bias` is accepted (and must be
    False or True) only so that both norms take the same arguments; RMSNorm has none.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False,
                 eps: float = 1e-5, bias: bool = True):
        _check_norm(d_model, dropout, norm_first, eps)
        check_bool("bias", bias)
        super().__init__(d_model, eps=eps)
        self._setup_residual(d_model, dropout, norm_first)


def make_norm(kind: str, d_model: int, dropout: float = 0.0, norm_first: bool = False,
              eps: float = 1e-5, bias: bool = True) -> AddNorm | AddRMSNorm:
    """The residual norm named `kind`: "layer" (`AddNorm`, the paper's) or "rms" (`AddRMSNorm`)."""
    check_choice("norm", kind, NORMS)
    cls = AddNorm if kind == "layer" else AddRMSNorm
    return cls(d_model, dropout, norm_first, eps, bias)


def _check_norm(d_model, dropout, norm_first, eps) -> None:
    check_positive_int("d_model", d_model)
    check_probability("dropout", dropout)
    check_bool("norm_first", norm_first)
    check_positive_number("eps", eps)
