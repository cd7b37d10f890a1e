"""The residual sub-layer: the "Add & Norm" box of the paper's figure 1 (section 3.1).

Every sub-layer of the encoder and decoder (self-attention, cross-attention, feed-forward) is
wrapped the same way:

    post-norm (the paper):  LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (norm_first):  x + Dropout(Sublayer(LayerNorm(x)))      (Xiong et al. 2020)

with dropout on the sub-layer's output, before the sum (section 5.4, "Residual Dropout").

`AddNorm` *is* the LayerNorm of that box (a subclass of `nn.LayerNorm`, so its parameters are
the gain `weight` and the bias `bias`, and a layer that names it `norm1` keeps the state_dict
keys `norm1.weight`, `norm1.bias`), with the residual sum around it:

    norm(x)                 the LayerNorm alone
    norm(x, sublayer)       the whole residual sub-layer, sublayer: (B, T, d_model) -> (B, T, d_model)
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ._checks import check_positive_int, check_probability

__all__ = ["AddNorm"]


class AddNorm(nn.LayerNorm):
    """LayerNorm(x + Dropout(Sublayer(x))), or x + Dropout(Sublayer(LayerNorm(x))) with `norm_first`.

    Args:
        d_model: width of x, (..., d_model).
        dropout: P_drop on the sub-layer's output (training only).
        norm_first: pre-norm instead of the paper's post-norm.
        eps, bias: as for `nn.LayerNorm`.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False,
                 eps: float = 1e-5, bias: bool = True):
        check_positive_int("d_model", d_model)
        check_probability("dropout", dropout)
        super().__init__(d_model, eps=eps, bias=bias)
        self.dropout = nn.Dropout(dropout)  # no parameters: the state_dict holds weight and bias only
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        if sublayer is None:
            return super().forward(x)  # the LayerNorm alone
        if self.norm_first:
            return x + self.dropout(sublayer(super().forward(x)))
        return super().forward(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, norm_first={self.norm_first}"
