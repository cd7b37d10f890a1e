"""The blocks of the Transformer: feed-forward network, encoder and decoder layers and stacks.

Post-norm, as in the paper, is the default: LayerNorm(x + Sublayer(x)) (section 3.1).
`norm_first=True` gives pre-norm, x + Sublayer(LayerNorm(x)), common today (Xiong et al. 2020).
Both live in `residual.AddNorm`, the paper's "Add & Norm" box. Copying PyTorch's modules into
these classes is `transformer_lib.interop.from_torch`.

The encoder layer is also the block of the decoder-only models of chapters 14 and 16, so it
takes today's variants as options: RMSNorm (`norm="rms"`), the gated SwiGLU feed-forward
(`ffn="swiglu"`), grouped-query attention (`n_kv_heads`) and rotary positions (`rotary`); and
its `forward` takes a key/value cache for generation.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (check_bool, check_choice, check_finite, check_last_dim, check_positive_int, check_probability,
                      check_tensor, entry_point)
from .attention import KVCache, MultiHeadAttention, check_mask
from .kv_cache import DecoderCache, check_layer_caches
from .positional import RotaryEmbedding
from .residual import NORMS, AddNorm, make_norm

#: The feed-forward networks `make_ffn` knows; "none" leaves the sub-layer out (an
#: attention-only block, as in the circuits studies of Elhage et al. 2021; chapter 18).
FFNS = ("relu", "swiglu", "none")


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


class SwiGLU(nn.Module):
    """FFN_SwiGLU(x) = (Swish(x W) * (x V)) W_2        (Shazeer 2020, arXiv:2002.05202, eq. 6)

    A gated feed-forward network: one projection, passed through Swish (SiLU, x * sigmoid(x)),
    multiplies another elementwise before the output projection. Three matrices instead of
    two, so a d_ff of 2/3 of the ReLU network's keeps the parameter count (section 2 of the
    paper). (batch, length, d_model) -> (batch, length, d_model) through d_ff.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_probability("dropout", dropout)
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)  # W: through Swish
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)  # V: the linear half
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(F.silu(self.w_gate(x)) * self.w_1(x)))  # (B, T, d_ff) in between


def make_ffn(kind: str, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True) -> nn.Module | None:
    """The position-wise network named `kind`: "relu" (`FeedForward`, the paper's), "swiglu",
    or None for "none" (no feed-forward sub-layer at all)."""
    check_choice("ffn", kind, FFNS)
    if kind == "none":
        return None
    return (FeedForward if kind == "relu" else SwiGLU)(d_model, d_ff, dropout, bias)


class EncoderLayer(nn.Module):
    """Self-attention then the feed-forward network, each in a residual sub-layer (section 3.1).

    x: (batch, S, d_model); mask: boolean, broadcastable to (batch, n_heads, S, S), True = may
    attend (usually `padding_mask(src, pad_id)`, shape (batch, 1, 1, S)).

    With a causal mask it is also the block of a decoder-only model (chapter 14); `cache` (a
    `KVCache`) then lets x be only the new positions of a sequence whose earlier keys and values
    are cached. The options after `bias` are today's variants (chapter 16): `norm` ("layer" or
    "rms"), `ffn` ("relu", "swiglu" or "none": attention only, no second sub-layer; chapter 18),
    `n_kv_heads` (grouped-query attention), `rotary` (a `RotaryEmbedding` applied to queries
    and keys) and `qk_norm` (QK-norm: queries and keys normalised per head by a norm of the
    kind `norm`, before the rotation; Dehghani et al. 2023; see `MultiHeadAttention`).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, eps: float = 1e-5, bias: bool = True, norm: str = "layer",
                 ffn: str = "relu", n_kv_heads: int | None = None, rotary: RotaryEmbedding | None = None,
                 qk_norm: bool = False):
        super().__init__()
        check_bool("qk_norm", qk_norm)
        check_choice("norm", norm, NORMS)
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias=bias, n_kv_heads=n_kv_heads, rotary=rotary,
                                            qk_norm=norm if qk_norm else None)
        self.ff = make_ffn(ffn, d_model, d_ff, dropout, bias)
        self.norm1 = make_norm(norm, d_model, dropout, norm_first, eps, bias)
        self.norm2 = None if self.ff is None else make_norm(norm, d_model, dropout, norm_first, eps, bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        x = self.norm1(x, lambda x: self.self_attn(x, x, x, mask, cache))  # (B, S, d_model)
        return x if self.ff is None else self.norm2(x, self.ff)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder (cross) attention, then the feed-forward network,
    each in a residual sub-layer (section 3.1).

    x: (batch, T, d_model) the target so far; memory: (batch, S, d_model) the encoder output,
    which supplies the keys and values of cross-attention while x supplies the queries.
    tgt_mask: broadcastable to (batch, n_heads, T, T), usually `target_mask(tgt, pad_id)`;
    memory_mask: broadcastable to (batch, n_heads, T, S), usually `padding_mask(src, pad_id)`.

    With `cache` (a `DecoderCache`, for generation), x holds only the new target positions:
    self-attention appends their keys and values to the cache's and attends over every cached
    position (tgt_mask then spans them: (T, cache.length + T)); cross-attention computes the
    memory's keys and values at the first step only and reads them from the cache afterwards.
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

    def forward(self, x, memory, tgt_mask=None, memory_mask=None, cache: DecoderCache | None = None) -> torch.Tensor:
        self_cache, cross_cache = (None, None) if cache is None else (cache.self_attn, cache.cross_attn)
        x = self.norm1(x, lambda x: self.self_attn(x, x, x, tgt_mask, self_cache))  # look at earlier targets
        x = self.norm2(x, lambda x: self.cross_attn(x, memory, memory, memory_mask, cross_cache))  # the source
        return self.norm3(x, self.ff)  # transform each position

    def new_cache(self, batch_size: int, src_len: int, max_len: int) -> DecoderCache:
        """Empty caches for generating up to `max_len` target positions from a memory of
        `src_len` positions, for `batch_size` sequences."""
        return DecoderCache(self.self_attn.new_cache(batch_size, max_len),
                            self.cross_attn.new_cache(batch_size, src_len, fixed=True))


class _Stack(nn.Module):
    """N layers of one kind, optionally followed by a LayerNorm (what Encoder and Decoder share).

    The final norm is needed with pre-norm (otherwise the last residual sum leaves the stack
    un-normalised); `final_norm=None` means "only with pre-norm". PyTorch's `nn.Transformer`
    always adds one."""

    def __init__(self, layer: type, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float,
                 norm_first: bool, final_norm: bool | None, eps: float, bias: bool):
        super().__init__()
        check_positive_int("n_layers", n_layers)
        self.d_model = d_model
        self.layers = nn.ModuleList(layer(d_model, n_heads, d_ff, dropout, norm_first, eps, bias)
                                    for _ in range(n_layers))
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=bias) if final_norm else None


class Encoder(_Stack):
    """A stack of N encoder layers (N = 6 in the paper), optionally followed by a LayerNorm
    (see `final_norm` above). x: (batch, S, d_model) embeddings -> (batch, S, d_model)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, eps: float = 1e-5, bias: bool = True):
        super().__init__(EncoderLayer, d_model, n_heads, d_ff, n_layers, dropout, norm_first, final_norm, eps, bias)

    def _check(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        _check_stream(self, x)
        check_mask(mask, (x.shape[0], self.layers[0].self_attn.n_heads, x.shape[1], x.shape[1]))

    @entry_point(_check)
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)


class Decoder(_Stack):
    """A stack of N decoder layers, each reading the same encoder output `memory`.

    x: (batch, T, d_model) target embeddings, memory: (batch, S, d_model) -> (batch, T, d_model).
    With `cache` (one `DecoderCache` per layer: `new_cache`), x holds the new positions only.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, final_norm: bool | None = None, eps: float = 1e-5, bias: bool = True):
        super().__init__(DecoderLayer, d_model, n_heads, d_ff, n_layers, dropout, norm_first, final_norm, eps, bias)

    def new_cache(self, batch_size: int, src_len: int, max_len: int) -> list[DecoderCache]:
        """One empty `DecoderCache` per layer (see `DecoderLayer.new_cache`)."""
        return [layer.new_cache(batch_size, src_len, max_len) for layer in self.layers]

    def check_context(self, batch: int, length: int, memory, tgt_mask=None, memory_mask=None, cache=None) -> int:
        """Check what the layers read besides a target stream of `batch` rows and `length`
        positions: the memory, both masks and the cache. Returns the position of the stream's
        first row (the cache's length, or 0)."""
        check_tensor("memory", memory, ndim=3, floating=True)
        check_last_dim("memory", memory, self.d_model)
        check_finite("memory", memory)
        if memory.shape[0] != batch:
            raise ValueError(f"memory must have the batch size of x, the target ({batch}), got shape "
                             f"{tuple(memory.shape)}")
        start = 0
        if cache is not None:
            start = check_layer_caches(cache, len(self.layers), DecoderCache, batch, length, "the target")
            if cache[0].cross_attn.length not in (0, memory.shape[1]):
                raise ValueError(f"the cache holds the keys of a memory of {cache[0].cross_attn.length} positions, "
                                 f"but memory has {memory.shape[1]}")
        h = self.layers[0].self_attn.n_heads
        check_mask(tgt_mask, (batch, h, length, start + length), "tgt_mask")
        check_mask(memory_mask, (batch, h, length, memory.shape[1]), "memory_mask")
        return start

    def _check(self, x, memory, tgt_mask=None, memory_mask=None, cache=None) -> None:
        _check_stream(self, x)
        self.check_context(x.shape[0], x.shape[1], memory, tgt_mask, memory_mask, cache)

    @entry_point(_check)
    def forward(self, x, memory, tgt_mask=None, memory_mask=None,
                cache: list[DecoderCache] | None = None) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if cache is None else cache[i])
        return x if self.norm is None else self.norm(x)


def _check_stream(stack: _Stack, x) -> None:
    """Raise unless x is a finite, floating (batch, length, d_model) tensor."""
    check_tensor("x", x, ndim=3, floating=True)
    check_last_dim("x", x, stack.d_model)
    check_finite("x", x)
