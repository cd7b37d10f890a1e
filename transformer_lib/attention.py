"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, section 3.2).

Masks are boolean and True where attention is allowed; see `transformer_lib.masks`, whose
`masked_softmax` is the one rule for blocked keys and for rows with no allowed key. Copying
`torch.nn.MultiheadAttention` into `MultiHeadAttention` is `transformer_lib.interop.from_torch`.

Inputs must be finite: a NaN or an infinity in a query, key or value is a ValueError on every
path (the explicit softmax, the fused kernel and the blockwise loop would each turn it into
different rows of NaN or zeros). A row with no allowed key is not an error: it gives zeros.
The inputs are checked where a call enters the library (`_checks.entry_point`): a reader's
call of these functions or of `MultiHeadAttention`, or a model's forward, which checks its own
inputs once; the attention modules inside a model do not check again at every layer.

`MultiHeadAttention` also serves generation: given a `KVCache` it computes the queries, keys and
values of the new positions only, writes the keys and values into the cache in place, and
attends over everything cached so far (chapter 14). With fewer key/value heads than query heads
it is grouped-query attention, and with a `positional.RotaryEmbedding` it rotates queries and
keys by their positions (chapter 16). With `qk_norm` it normalises each head's queries and keys
before rotating them (QK-norm, Dehghani et al. 2023; chapter 16).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_finite, check_positive_int, check_probability, check_tensor, entry_point
from .kv_cache import KVCache
from .masks import has_allowed_key, masked_softmax
from .positional import RotaryEmbedding
from .residual import NORMS, make_norm


def check_mask(mask, scores_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise unless `mask` is a boolean tensor broadcastable to `scores_shape` (…, q_len, k_len)."""
    if mask is None:
        return
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    try:
        ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' "
            f"shape {tuple(scores_shape)} (batch, n_heads, q_len, k_len)"
        )


def check_qkv(query, key, value, mask=None) -> tuple[int, ...]:
    """Raise a clear error unless query (..., q_len, d_k), key (..., k_len, d_k) and
    value (..., k_len, d_v) are floating-point tensors whose shapes fit together, and `mask`
    (if given) is boolean and broadcastable to the scores. Returns the scores' shape
    (..., q_len, k_len), the leading dimensions broadcast."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, floating=True)
        check_finite(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, features), "
                             f"got shape {tuple(t.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key must share their last dimension d_k, "
                         f"got {query.shape[-1]} and {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key and value must have the same length k_len, got {key.shape[-2]} and {value.shape[-2]}")
    try:
        lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dimensions of query {tuple(query.shape)}, key {tuple(key.shape)} and "
            f"value {tuple(value.shape)} do not broadcast"
        ) from None
    scores_shape = (*lead, query.shape[-2], key.shape[-2])
    check_mask(mask, scores_shape)
    return scores_shape


def _check_attention(query, key, value, mask=None, dropout: nn.Module | None = None) -> None:
    check_qkv(query, key, value, mask)


@entry_point(_check_attention)
def scaled_dot_product_attention(query, key, value, mask=None, dropout: nn.Module | None = None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V        (paper, equation 1)

    Args:
        query: (..., q_len, d_k)
        key:   (..., k_len, d_k)
        value: (..., k_len, d_v)
        mask:  optional boolean tensor broadcastable to (..., q_len, k_len); True = may attend.
        dropout: optional module applied to the attention weights (e.g. `nn.Dropout`).

    Returns:
        output  (..., q_len, d_v): each row a weighted average of the value rows;
        weights (..., q_len, k_len): each row sums to 1 over the allowed keys. A row with no
        allowed key gets all-zero weights and a zero output (never NaN).
    """
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., q_len, k_len)
    weights = masked_softmax(scores, mask)  # blocked keys get 0; a row with none allowed, all 0 (chapter 8)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def _check_fused(query, key, value, mask=None, dropout_p: float = 0.0) -> None:
    check_qkv(query, key, value, mask)
    check_probability("dropout_p", dropout_p)


@entry_point(_check_fused)
def fused_attention(query, key, value, mask=None, dropout_p: float = 0.0) -> torch.Tensor:
    """The same as `scaled_dot_product_attention(...)[0]`, through PyTorch's fused kernel.

    `torch.nn.functional.scaled_dot_product_attention` never materialises the weights; it is
    faster and uses memory linear in length. It has no rule for a query row with no allowed key
    (it gives NaN there), so the library's rule (`masks.masked_softmax`: such a row gets zero
    weights, hence a zero output) is applied around the kernel: those rows are opened to every
    key for the call (any finite result will do) and their output is then set to 0. The rows
    are found by `masks.has_allowed_key`, the same test `masked_softmax` uses. Inputs are
    checked as `scaled_dot_product_attention` checks them (finite, shapes that fit).
    """
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p)
    has_key = has_allowed_key(mask)  # (..., q_len, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | ~has_key, dropout_p=dropout_p)
    return out.masked_fill(~has_key, 0.0)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)              (paper, section 3.2.2)

    The h projections W_i^Q (d_model x d_k) are stored side by side in one d_model x (h d_k)
    linear layer (likewise K, V), so all heads run in one batched matrix product.

    Args:
        d_model: width of the model; must be divisible by n_heads. d_k = d_v = d_model / n_heads.
        n_heads: number of heads h.
        dropout: dropout probability on the attention weights (training only).
        bias: whether the four projections have biases (PyTorch's default; the paper is silent).
        attention_fn: the function that maps per-head (query, key, value, mask, dropout) to
            (output, weights), with the signature and shapes of `scaled_dot_product_attention`
            (the default). Pass another to swap the attention rule without touching the
            projections (chapter 15 plants bugs this way); `use_attention` does it for a model.
        n_kv_heads: key/value heads (default n_heads). Fewer is grouped-query attention
            (Ainslie et al. 2023): query heads come in n_kv_heads groups, and the heads of a
            group share one key and one value head; 1 is multi-query attention (Shazeer 2019).
            The cache shrinks by n_heads / n_kv_heads.
        rotary: a `positional.RotaryEmbedding` that rotates each query and key by its position
            (Su et al. 2021), or None. Positions count from 0, or from the cache's length.
        d_k: the width of a head, if not d_model / n_heads; the heads then span h d_k features
            (tensor parallelism keeps some of the heads of a layer: `parallel.ParallelAttention`).
        qk_norm: None, or the norm ("layer" or "rms", as `residual.make_norm`) applied to each
            head's d_k query channels and d_k key channels after their projections, before the
            rotary positions and the scaled dot product: QK-norm (Dehghani et al. 2023,
            "Scaling Vision Transformers to 22 Billion Parameters", arXiv:2302.05442, with
            LayerNorm; Gemma 3 uses RMSNorm per head, as here; OLMo 2 normalises the whole
            query and key projections, across heads). One norm per role, `q_norm`
            and `k_norm`, shared by all heads; its gain (and, for LayerNorm with `bias`, its
            bias) is learned. With RMSNorm and gains g_q, g_k every score is then bounded:
            |q.k| / sqrt(d_k) <= max|g_q| max|g_k| sqrt(d_k), whatever the input. The cache
            stores keys after the norm (and the rotation).

    Set `record_weights = True` to keep the last attention weights, (batch, n_heads, q_len,
    k_len), in `last_weights` (this takes the explicit path). Otherwise the fused kernel is used
    unless `fused=False` or a custom `attention_fn` is set; both paths give the same output.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, fused: bool = True,
                 attention_fn=scaled_dot_product_attention, n_kv_heads: int | None = None,
                 rotary: RotaryEmbedding | None = None, d_k: int | None = None, qk_norm: str | None = None):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        _check_heads(d_model, n_heads, n_kv_heads, dropout, attention_fn, rotary, d_k, qk_norm)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_k = d_model // n_heads if d_k is None else d_k
        self.attention_fn = attention_fn
        self.w_q = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_k, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.rotary = rotary
        self.qk_norm = qk_norm
        # QK-norm: one norm for the queries and one for the keys, over d_k, shared by the heads
        self.q_norm = None if qk_norm is None else make_norm(qk_norm, self.d_k, bias=bias)
        self.k_norm = None if qk_norm is None else make_norm(qk_norm, self.d_k, bias=bias)
        self.fused = fused
        self.record_weights = False
        self.last_weights: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor, n_heads: int | None = None) -> torch.Tensor:
        """(batch, length, n_heads * d_k) -> (batch, n_heads, length, d_k); n_heads defaults to h."""
        batch, length, _ = x.shape
        return x.view(batch, length, n_heads or self.n_heads, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, n_heads, length, d_k) -> (batch, length, n_heads * d_k): the Concat of the paper."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_k)

    def new_cache(self, batch_size: int, max_len: int, fixed: bool = False) -> KVCache:
        """An empty `KVCache` for this layer, in the dtype and on the device of its weights;
        `fixed` for cross-attention (see `KVCache`)."""
        w = self.w_k.weight
        return KVCache(batch_size, self.n_kv_heads, max_len, self.d_k, dtype=w.dtype, device=w.device, fixed=fixed)

    def _check_inputs(self, query, key, value, mask=None, cache: KVCache | None = None) -> None:
        """The checks of `forward`'s inputs, once per call (see `_checks.entry_point`)."""
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (MultiHeadAttention.new_cache(batch_size, max_len)), "
                            f"got {type(cache).__name__}")
        checked = set()
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, t, ndim=3, floating=True)
            if t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have shape (batch, length, d_model={self.d_model}), "
                                 f"got {tuple(t.shape)}")
            if id(t) not in checked:  # self-attention passes one tensor three times: look at it once
                check_finite(name, t)
                checked.add(id(t))
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(f"query, key and value must have the same batch size, got {query.shape[0]}, "
                             f"{key.shape[0]}, {value.shape[0]}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}")
        if self.rotary is not None and query.shape[1] != key.shape[1]:
            raise ValueError("rotary positions need self-attention: query and key of the same length, got "
                             f"{query.shape[1]} and {key.shape[1]}")
        k_len = key.shape[1]
        if cache is not None:
            if cache.keys.shape[0] != query.shape[0]:
                raise ValueError(f"cache holds {cache.keys.shape[0]} sequences but the batch has {query.shape[0]}")
            k_len = cache.length if cache.fixed and cache.length else cache.length + k_len
        check_mask(mask, (query.shape[0], self.n_heads, query.shape[1], k_len))

    @entry_point(_check_inputs)
    def forward(self, query, key, value, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        """query (B, T_q, d_model), key and value (B, T_k, d_model), mask broadcastable to
        (B, n_heads, T_q, T_k_all), True = may attend. Returns (B, T_q, d_model).

        With a `cache` (generation) the key and value rows are the new positions; they are
        appended to the cache, and the queries attend over all T_k_all = cache.length + T_k
        cached positions. A `fixed` cache (cross-attention) is filled from the first key and
        value it gets (the encoder's memory) and read at every later call, which does not
        project key and value again: the memory's keys and values are computed once."""
        start = 0 if cache is None else cache.length
        q = self.split_heads(self.w_q(query))  # (B, h, T_q, d_k)
        if self.q_norm is not None:  # QK-norm: each query vector normalised over its d_k channels
            q = self.q_norm(q)
        if cache is not None and cache.fixed and cache.length:
            k, v = cache.cached()  # cross-attention after its first step: nothing to compute
        else:
            k = self.split_heads(self.w_k(key), self.n_kv_heads)  # (B, h_kv, T_k, d_k)
            v = self.split_heads(self.w_v(value), self.n_kv_heads)  # (B, h_kv, T_k, d_k)
            if self.k_norm is not None:  # QK-norm on the keys, before the rotation and the cache
                k = self.k_norm(k)
            if self.rotary is not None:  # RoPE: turn each query and key by its position
                q, k = self.rotary(q, start), self.rotary(k, start)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, h_kv, start + T_k, d_k): every cached position
        k, v = self.share_kv(k), self.share_kv(v)  # (B, h, T_k_all, d_k)
        if self.attention_fn is not scaled_dot_product_attention:  # a swapped-in rule (chapter 15)
            out, weights = self.attention_fn(q, k, v, mask, self.dropout)
        elif self.record_weights or not self.fused:
            out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        else:
            out, weights = fused_attention(q, k, v, mask, self.dropout.p if self.training else 0.0), None
        self.last_weights = weights.detach() if self.record_weights else None
        return self.w_o(self.merge_heads(out))  # (B, T_q, d_model)

    def share_kv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h_kv, T, d_k) -> (B, h, T, d_k): each key/value head repeated for the h / h_kv
        query heads of its group (query head i reads key/value head i // (h / h_kv))."""
        group = self.n_heads // self.n_kv_heads
        return x if group == 1 else x.repeat_interleave(group, dim=1)


def _check_heads(d_model, n_heads, n_kv_heads, dropout, attention_fn, rotary, d_k, qk_norm=None) -> None:
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    if d_k is None and d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads} (d_k = d_model / n_heads)")
    if d_k is not None:
        check_positive_int("d_k", d_k)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be divisible by n_kv_heads={n_kv_heads} (query heads per group)")
    check_probability("dropout", dropout)
    if not callable(attention_fn):
        raise TypeError(f"attention_fn must be a function like scaled_dot_product_attention, got {attention_fn!r}")
    if rotary is not None:
        if not isinstance(rotary, RotaryEmbedding):
            raise TypeError(f"rotary must be a positional.RotaryEmbedding or None, got {type(rotary).__name__}")
        head = d_model // n_heads if d_k is None else d_k
        if rotary.d_k != head:
            raise ValueError(f"rotary was built for d_k={rotary.d_k}, but the heads have d_k={head}")
    if qk_norm is not None and (not isinstance(qk_norm, str) or qk_norm not in NORMS):
        raise ValueError(f"qk_norm must be None or one of the norms {NORMS}, got {qk_norm!r}")


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    """Every `MultiHeadAttention` inside `model`, by its qualified name (e.g. 'encoder.layers.0.self_attn')."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}


def use_attention(model: nn.Module, attention_fn=scaled_dot_product_attention) -> nn.Module:
    """Make every `MultiHeadAttention` in `model` compute attention with `attention_fn`.

    `attention_fn(query, key, value, mask, dropout) -> (output, weights)` takes the per-head
    tensors (batch, n_heads, length, d_k) of `scaled_dot_product_attention`. Changes `model` in
    place and returns it; use `use_attention(copy.deepcopy(model), fn)` to keep the original.
    The parameters are untouched, so a checkpoint loads the same way whatever the function.
    """
    if not callable(attention_fn):
        raise TypeError(f"attention_fn must be a function like scaled_dot_product_attention, got {attention_fn!r}")
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"model holds no MultiHeadAttention module: {type(model).__name__}")
    for m in modules.values():
        m.attention_fn = attention_fn
    return model


class record_attention:
    """Context manager: collect the attention weights of every attention module in `model`.

    The dict it returns is filled when the block ends, with the weights of the last forward
    pass, (batch, n_heads, q_len, k_len), by module name:

    >>> with record_attention(model) as weights:
    ...     model(src, tgt)
    >>> weights["encoder.layers.0.self_attn"].shape
    """

    def __init__(self, model: nn.Module):
        self.modules = attention_modules(model)
        self.weights: dict[str, torch.Tensor] = {}

    def __enter__(self) -> dict[str, torch.Tensor]:
        for m in self.modules.values():
            m.record_weights, m.last_weights = True, None
        return self.weights

    def __exit__(self, *exc) -> None:
        for name, m in self.modules.items():
            if m.last_weights is not None:
                self.weights[name] = m.last_weights
            m.record_weights, m.last_weights = False, None
