"""The key/value cache of one attention layer (chapters 12 and 14).

When a decoder generates, each new token adds one position; the keys and values of every
earlier position stay the same, so they are kept instead of recomputed. `KVCache` keeps them for
one attention layer and one batch of sequences; `attention.MultiHeadAttention` reads and extends
it when given one (`forward(..., cache=...)`). `lm.CausalLM.new_cache` makes one per layer;
`model.Transformer.new_cache` one `DecoderCache` per decoder layer: a growing cache for the
self-attention and a `fixed` one for the cross-attention, whose keys and values (the encoder's
memory, projected) are computed at the first step and read at every later one. At scale,
reading this cache (and the weights) from memory is what limits the speed of generation, not
arithmetic (Pope et al. 2022, arXiv:2211.05102).
"""
from __future__ import annotations

import torch

from dataclasses import dataclass

from ._checks import check_bool, check_positive_int, check_tensor

__all__ = ["KVCache", "DecoderCache"]


class KVCache:
    """The keys and values one attention layer has computed so far, for a batch of sequences.

    Generation adds one position at a time, and every earlier position's key and value stay
    the same, so they are kept instead of recomputed (chapter 14). The storage is allocated
    once, (batch, n_kv_heads, max_len, d_k) for the keys and the same for the values, and each
    step writes its new positions into it in place: no step copies the cache.

    `append(k, v)` stores the new positions' k and v (batch, n_kv_heads, n, d_k) at
    `length .. length + n - 1` and returns views of every position cached so far,
    (batch, n_kv_heads, length + n, d_k). `nbytes()` is the size of the cached positions
    (`capacity_bytes()` of the whole allocation).

    A `fixed` cache holds keys and values known in advance, the encoder's memory for
    cross-attention: the first `append` writes them all, and then `MultiHeadAttention` reads
    them (`cached()`) instead of computing them again. `reorder(rows)` moves the sequences of
    the batch, as beam search does when it keeps the best continuations.
    """

    def __init__(self, batch_size: int, n_kv_heads: int, max_len: int, d_k: int,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None, fixed: bool = False):
        for name, value in (("batch_size", batch_size), ("n_kv_heads", n_kv_heads), ("max_len", max_len), ("d_k", d_k)):
            check_positive_int(name, value)
        check_bool("fixed", fixed)
        shape = (batch_size, n_kv_heads, max_len, d_k)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0
        self.fixed = fixed

    @property
    def max_len(self) -> int:
        return self.keys.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        expected = (*self.keys.shape[:2], k.shape[2], self.keys.shape[3])
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != expected:
                raise ValueError(f"{name} must have shape (batch, n_kv_heads, n, d_k) = {expected} to fit the cache, "
                                 f"got {tuple(t.shape)}")
        if self.fixed and self.length:
            raise ValueError("this cache is fixed (cross-attention): it was filled once and is only read now")
        start, stop = self.length, self.length + k.shape[2]
        if stop > self.max_len:
            raise ValueError(f"the cache holds max_len={self.max_len} positions; {self.length} are used and "
                             f"{k.shape[2]} more do not fit")
        self.keys[:, :, start:stop] = k  # written in place: (B, h_kv, n, d_k)
        self.values[:, :, start:stop] = v
        self.length = stop
        return self.keys[:, :, :stop], self.values[:, :, :stop]  # views, no copy

    def cached(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of the keys and values cached so far, (batch, n_kv_heads, length, d_k) each."""
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]

    def reorder(self, rows: torch.Tensor) -> None:
        """Make sequence i of the batch what sequence rows[i] was (rows: (batch,) indices, on
        the cache's device), in place: beam search keeps the best continuations of its beams."""
        check_tensor("rows", rows, ndim=1)
        if rows.shape[0] != self.keys.shape[0]:
            raise ValueError(f"rows must give one source row per sequence ({self.keys.shape[0]}), got {rows.shape[0]}")
        n = self.length
        self.keys[:, :, :n] = self.keys[rows, :, :n]  # the right side is a copy, then written back
        self.values[:, :, :n] = self.values[rows, :, :n]

    def nbytes(self) -> int:
        """Bytes of the cached positions: 2 (K and V) x batch x n_kv_heads x length x d_k x itemsize."""
        return 2 * self.keys[:, :, : self.length].numel() * self.keys.element_size()

    def capacity_bytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()

    def __repr__(self) -> str:
        b, h, n, d = self.keys.shape
        kind = ", fixed" if self.fixed else ""
        return f"KVCache(batch {b}, {h} key/value heads, {self.length} of {n} positions, d_k {d}{kind})"


@dataclass
class DecoderCache:
    """The caches of one decoder layer of an encoder-decoder: its self-attention's (the target
    so far, growing by a position per step) and its cross-attention's (`fixed`: the source's
    keys and values, computed at the first step). `model.Transformer.new_cache` makes one per
    layer."""

    self_attn: KVCache
    cross_attn: KVCache

    @property
    def length(self) -> int:
        """Target positions cached so far."""
        return self.self_attn.length

    def reorder(self, rows: torch.Tensor) -> None:
        """`KVCache.reorder` of the self-attention's cache. The cross-attention's is left as it
        is: `rows` must keep every sequence among the rows of its own source (as beam search
        does), whose memory, hence whose cached keys and values, are the same."""
        self.self_attn.reorder(rows)

    def nbytes(self) -> int:
        return self.self_attn.nbytes() + self.cross_attn.nbytes()
