"""Attention masks. Convention: a boolean mask is True where attention is ALLOWED.

That is the convention of `torch.nn.functional.scaled_dot_product_attention`. Every mask is
broadcastable to the attention scores' shape (batch, n_heads, q_len, k_len).
"""
from __future__ import annotations

import torch

from ._checks import check_positive_int, check_tensor


def causal_mask(length: int, device=None, k_len: int | None = None) -> torch.Tensor:
    """Look-ahead mask, shape (length, length): position i may attend to positions j <= i.

    Used in the decoder's self-attention so that predicting token i never sees tokens after i.
    With `k_len` (>= length) the queries are the last `length` of `k_len` positions, as when
    new tokens attend to a key/value cache: shape (length, k_len), query i sits at position
    k_len - length + i and may attend to every key j <= that position.
    """
    check_positive_int("length", length)
    k_len = length if k_len is None else k_len
    if not isinstance(k_len, int) or isinstance(k_len, bool) or k_len < length:
        raise ValueError(f"k_len must be an integer >= length={length}, got {k_len!r}")
    return torch.ones(length, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - length)


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Key padding mask, shape (batch, 1, 1, length): True for real tokens, False for padding.

    ids: (batch, length) integer token ids; positions equal to `pad_id` may not be attended to.
    """
    check_tensor("ids", ids, ndim=2)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
    return (ids != pad_id)[:, None, None, :]


def target_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Decoder self-attention mask, shape (batch, 1, length, length): padding AND causal."""
    return padding_mask(ids, pad_id) & causal_mask(ids.shape[1], device=ids.device)


def to_torch_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Our mask (True = allowed) -> the mask of PyTorch's modules (True = blocked): `~mask`.

    For `attn_mask` of `nn.MultiheadAttention` and the `nn.Transformer*` modules (chapter 8).
    `torch.nn.functional.scaled_dot_product_attention` uses our convention: pass it `mask` as is.
    """
    if mask is None:
        return None
    _check_bool("mask", mask)
    return ~mask


def has_allowed_key(mask: torch.Tensor) -> torch.Tensor:
    """(..., q_len, k_len) boolean mask -> (..., q_len, 1): True where the query row may attend
    to at least one key. Its complement marks the fully masked rows, to which `masked_softmax`
    gives zero weights; the fused path finds them with this function."""
    return mask.any(dim=-1, keepdim=True)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension of `scores` where `mask` is True (allowed).

    The library's one rule for masked attention weights (chapter 8): blocked positions get
    exactly 0, and a row with no allowed position gets all zeros rather than the NaN that
    softmax over a row of -inf gives. Two steps: blocked scores get the most negative finite
    number of the dtype (a row with allowed keys is unaffected: exp underflows to exactly 0 for
    them; an empty row no longer gives 0/0), then the weights of blocked positions are set to 0
    (an empty row would otherwise be uniform). `scores` (..., k_len); `mask` (boolean) must
    broadcast to `scores`. Used by the RNN attention and by
    `attention.scaled_dot_product_attention`; the fused and blockwise paths apply the same rule
    with their own arithmetic and are tested against this function.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    _check_bool("mask", mask)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return weights.masked_fill(~mask, 0.0)


def _check_bool(name: str, mask) -> None:
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name}: expected a boolean tensor (True = allowed), got {mask.dtype}")
