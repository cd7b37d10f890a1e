"""The blocks of the Transformer: feed-forward network, encoder and decoder layers and stacks.

Post-norm, as in the paper, is the default: LayerNorm(x + Sublayer(x)) (section 3.1).
`norm_first=True` gives pre-norm, x + Sublayer(LayerNorm(x)), common today (Xiong et al. 2020).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_last_dim, check_positive_int, check_probability, check_tensor
from .attention import MultiHeadAttention


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


def residual(x: torch.Tensor, sublayer, norm: nn.LayerNorm, dropout: nn.Module, norm_first: bool) -> torch.Tensor:
    """One residual sub-layer: LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper's) or
    x + Dropout(Sublayer(LayerNorm(x))) (pre-norm)."""
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


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
        self.norm1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = residual(x, lambda h: self.self_attn(h, h, h, mask), self.norm1, self.dropout, self.norm_first)
        return residual(x, self.ff, self.norm2, self.dropout, self.norm_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "EncoderLayer":
        """A copy of a `torch.nn.TransformerEncoderLayer` (ReLU activation) with its weights."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}")
        _check_relu(layer)
        ours = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                   dropout=layer.dropout.p, norm_first=layer.norm_first, eps=layer.norm1.eps,
                   bias=layer.linear1.bias is not None)
        ours.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        _copy_ff_and_norms(ours, layer, n_norms=2)
        return ours


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
        self.norm1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None) -> torch.Tensor:
        x = residual(x, lambda h: self.self_attn(h, h, h, tgt_mask), self.norm1, self.dropout, self.norm_first)
        x = residual(x, lambda h: self.cross_attn(h, memory, memory, memory_mask), self.norm2, self.dropout, self.norm_first)
        return residual(x, self.ff, self.norm3, self.dropout, self.norm_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """A copy of a `torch.nn.TransformerDecoderLayer` (ReLU activation) with its weights."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(f"layer must be a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}")
        _check_relu(layer)
        ours = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                   dropout=layer.dropout.p, norm_first=layer.norm_first, eps=layer.norm1.eps,
                   bias=layer.linear1.bias is not None)
        ours.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        _copy_ff_and_norms(ours, layer, n_norms=3)
        return ours


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
        check_tensor("x", x, ndim=3, floating=True)
        check_last_dim("x", x, self.d_model)
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)

    @classmethod
    def from_torch(cls, encoder: nn.TransformerEncoder) -> "Encoder":
        """A copy of a `torch.nn.TransformerEncoder` (its layers and its optional final norm)."""
        if not isinstance(encoder, nn.TransformerEncoder):
            raise TypeError(f"encoder must be a torch.nn.TransformerEncoder, got {type(encoder).__name__}")
        layers = [EncoderLayer.from_torch(layer) for layer in encoder.layers]
        return _stack_from(cls.__new__(cls), layers, encoder.norm)


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
        check_tensor("x", x, ndim=3, floating=True)
        check_last_dim("x", x, self.d_model)
        check_tensor("memory", memory, ndim=3, floating=True)
        check_last_dim("memory", memory, self.d_model)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(f"memory must have the batch size of x ({x.shape[0]}), got shape {tuple(memory.shape)}")
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x if self.norm is None else self.norm(x)

    @classmethod
    def from_torch(cls, decoder: nn.TransformerDecoder) -> "Decoder":
        """A copy of a `torch.nn.TransformerDecoder` (its layers and its optional final norm)."""
        if not isinstance(decoder, nn.TransformerDecoder):
            raise TypeError(f"decoder must be a torch.nn.TransformerDecoder, got {type(decoder).__name__}")
        layers = [DecoderLayer.from_torch(layer) for layer in decoder.layers]
        return _stack_from(cls.__new__(cls), layers, decoder.norm)


# --- helpers for from_torch ---------------------------------------------------------------

def _check_relu(layer: nn.Module) -> None:
    act = layer.activation
    if not (act is F.relu or isinstance(act, nn.ReLU)):
        raise ValueError(f"only the paper's ReLU activation is supported, got {act!r}")


def _copy_ff_and_norms(ours: nn.Module, theirs: nn.Module, n_norms: int) -> None:
    """Copy linear1/linear2 into the FFN and norm1..normN, keeping dtype and device."""
    ref = theirs.linear1.weight
    ours.ff.to(device=ref.device, dtype=ref.dtype)
    ours.ff.w_1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.w_2.load_state_dict(theirs.linear2.state_dict())
    for i in range(1, n_norms + 1):
        setattr(ours, f"norm{i}", copy.deepcopy(getattr(theirs, f"norm{i}")))


def _stack_from(ours: nn.Module, layers: list[nn.Module], norm: nn.Module | None) -> nn.Module:
    """Fill an uninitialised Encoder/Decoder with ready-made layers and final norm."""
    nn.Module.__init__(ours)
    ours.d_model = layers[0].d_model
    ours.layers = nn.ModuleList(layers)
    ours.norm = copy.deepcopy(norm)
    return ours
