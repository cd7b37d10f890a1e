"""The blocks of the Transformer: feed-forward network, encoder and decoder layers and stacks.

Post-norm, as in the paper, is the default: LayerNorm(x + Sublayer(x)) (section 3.1).
`norm_first=True` gives pre-norm, x + Sublayer(LayerNorm(x)), common today (Xiong et al. 2020).
Both live in `residual.AddNorm`, the paper's "Add & Norm" box. Copying PyTorch's modules into
these classes is `transformer_lib.interop.from_torch`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_last_dim, check_positive_int, check_probability, check_tensor
from .attention import MultiHeadAttention
from .residual import AddNorm


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2        (paper, equation 2)

    Applied to each position separately and identically: (batch, length, d_model) ->
    (batch, length, d_model), through a hidden width d_ff (2048 in the base model).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_probability("dropout", dropout)
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))  # (B, T, d_ff) in between


class EncoderLayer(nn.Module):
    """Self-attention then the feed-forward network, each in a residual sub-layer (section 3.1).

    x: (batch, S, d_model); mask: boolean, broadcastable to (batch, n_heads, S, S), True = may
    attend (usually `padding_mask(src, pad_id)`, shape (batch, 1, 1, S)).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout, bias=bias)
        self.norm1 = AddNorm(d_model, dropout, norm_first, eps, bias)
        self.norm2 = AddNorm(d_model, dropout, norm_first, eps, bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x, lambda x: self.self_attn(x, x, x, mask))  # (B, S, d_model)
        return self.norm2(x, self.ff)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder (cross) attention, then the feed-forward network,
    each in a residual sub-layer (section 3.1).

    x: (batch, T, d_model) the target so far; memory: (batch, S, d_model) the encoder output,
    which supplies the keys and values of cross-attention while x supplies the queries.
    tgt_mask: broadcastable to (batch, n_heads, T, T), usually `target_mask(tgt, pad_id)`;
    memory_mask: broadcastable to (batch, n_heads, T, S), usually `padding_mask(src, pad_id)`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout, bias=bias)
        self.norm1 = AddNorm(d_model, dropout, norm_first, eps, bias)
        self.norm2 = AddNorm(d_model, dropout, norm_first, eps, bias)
        self.norm3 = AddNorm(d_model, dropout, norm_first, eps, bias)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None) -> torch.Tensor:
        x = self.norm1(x, lambda x: self.self_attn(x, x, x, tgt_mask))  # look at earlier targets
        x = self.norm2(x, lambda x: self.cross_attn(x, memory, memory, memory_mask))  # look at the source
        return self.norm3(x, self.ff)  # transform each position


class Encoder(nn.Module):
    """A stack of N encoder layers (N = 6 in the paper), optionally followed by a LayerNorm.

    The final norm is needed with pre-norm (otherwise the last residual sum leaves the stack
    un-normalised); `final_norm=None` means "only with pre-norm". PyTorch's `nn.Transformer`
    always adds one. x: (batch, S, d_model) embeddings -> (batch, S, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_positive_int("n_layers", n_layers)
        self.d_model = d_model
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, eps, bias) for _ in range(n_layers)
        )
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=bias) if final_norm else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        _check_stream(x, self.d_model)
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """A stack of N decoder layers, each reading the same encoder output `memory`.

    x: (batch, T, d_model) target embeddings, memory: (batch, S, d_model) -> (batch, T, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_positive_int("n_layers", n_layers)
        self.d_model = d_model
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, eps, bias) for _ in range(n_layers)
        )
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=bias) if final_norm else None

    def forward(self, x, memory, tgt_mask=None, memory_mask=None) -> torch.Tensor:
        _check_stream(x, self.d_model, memory)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x if self.norm is None else self.norm(x)


def _check_stream(x, d_model: int, memory=None) -> None:
    """Raise unless x (and memory, if given) are floating (batch, length, d_model) tensors with one batch size."""
    check_tensor("x", x, ndim=3, floating=True)
    check_last_dim("x", x, d_model)
    if memory is None:
        return
    check_tensor("memory", memory, ndim=3, floating=True)
    check_last_dim("memory", memory, d_model)
    if memory.shape[0] != x.shape[0]:
        raise ValueError(f"memory must have the batch size of x ({x.shape[0]}), got shape {tuple(memory.shape)}")
