"""Sequence parallelism: ring attention, each process holding a block of the sequence and merging
the key/value blocks that travel around the ring with chapter 13's online softmax (Liu et al.
2023, arXiv:2310.01889).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .._checks import check_positive_int, check_tensor


def online_softmax_fold(m: torch.Tensor, ell: torch.Tensor, o: torch.Tensor, scores: torch.Tensor,
                        value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one block of keys into the running softmax (chapter 13, equation 2):

        m' = max(m, max_j s_j)
        l' = l e^(m - m') + sum_j e^(s_j - m')
        o' = o e^(m - m') + sum_j e^(s_j - m') v_j

    m, ell (..., q, 1): the running maximum and sum (l above); o (..., q, d_v): the running
    output; scores (..., q, b), -inf where a key is masked; value (..., b, d_v). Start from
    m = -inf, l = 0, o = 0; the attention output is o / l at the end. Returns (m', l', o'). A
    row that has seen no allowed key yet is shifted by 0 instead of -inf, so it stays at l = 0,
    o = 0 (never NaN).
    """
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    shift = m_new.masked_fill(m_new == -math.inf, 0.0)
    p = torch.exp(scores - shift)  # (..., q, b)
    correction = torch.exp(m - shift)  # rescales what was summed against the old maximum
    return m_new, ell * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ value


def ring_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool = False,
                   block_size: int = 128, group=None) -> torch.Tensor:
    """Exact attention over a sequence cut into P consecutive blocks, one per process (Liu et
    al. 2023): softmax(Q K^T / sqrt(d_k)) V for this process's queries against every key.

    Process r holds block r of the queries, keys and values, (..., T/P, d_k). The key/value
    blocks travel around the ring: at step i process r holds block (r - i) mod P, folds it into
    its running softmax (`online_softmax_fold`, `block_size` keys at a time) while it already
    sends that block on to process r + 1 and receives the next from r - 1. After P steps every
    process has seen every key. With `causal`, key position j may be read by query position i
    only if j <= i (positions counted over the whole sequence): blocks from later processes are
    skipped, the diagonal block is masked. Returns this process's (..., T/P, d_v) output.
    Forward only (the backward pass would send the blocks around again, with their gradients).
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, floating=True)
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2] and query.shape[-2] == key.shape[-2] == value.shape[-2]
            and query.shape[-1] == key.shape[-1]):
        raise ValueError(f"ring_attention is self-attention on one block per process: query, key and value must be "
                         f"(..., T/P, d) with the same leading shape and length, got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    check_positive_int("block_size", block_size)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    t = query.shape[-2]
    q = query / math.sqrt(query.shape[-1])
    m = torch.full((*query.shape[:-1], 1), -math.inf, dtype=query.dtype)
    ell = torch.zeros_like(m)
    o = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
    q_pos = rank * t + torch.arange(t)[:, None]  # (T/P, 1): positions in the whole sequence
    k_blk, v_blk = key.contiguous(), value.contiguous()
    nxt, prv = (_global_rank(group, (rank + shift) % world_size) for shift in (1, -1))  # neighbours on the ring
    for step in range(world_size):
        owner = (rank - step) % world_size  # whose block we hold now
        if step < world_size - 1:  # pass it on while we compute with it
            k_next, v_next = torch.empty_like(k_blk), torch.empty_like(v_blk)
            requests = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k_blk, nxt, group), dist.P2POp(dist.isend, v_blk, nxt, group),
                dist.P2POp(dist.irecv, k_next, prv, group), dist.P2POp(dist.irecv, v_next, prv, group)])
        if not causal or owner <= rank:
            for start in range(0, t, block_size):
                stop = min(start + block_size, t)
                scores = q @ k_blk[..., start:stop, :].transpose(-2, -1)  # (..., T/P, block)
                if causal and owner == rank:
                    k_pos = owner * t + torch.arange(start, stop)
                    scores = scores.masked_fill(k_pos > q_pos, -math.inf)
                m, ell, o = online_softmax_fold(m, ell, o, scores, v_blk[..., start:stop, :])
        if step < world_size - 1:
            for request in requests:
                request.wait()
            k_blk, v_blk = k_next, v_next
    return o / ell.masked_fill(ell == 0, 1.0)


def _global_rank(group, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def ring_attention_worker(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          memory_lengths=(), block_size: int = 128) -> dict:
    """Cut the whole-sequence (..., T, d) query, key and value into one block per process and
    run `ring_attention` on them, with and without the causal mask. Returns this process's
    blocks of both outputs ("output", "causal_output"), and for each T in `memory_lengths` the
    peak bytes of tensors this process creates while it runs causal ring attention on random
    (1, 4, T, 16) float32 inputs ("peak_bytes", counted by `efficient.peak_tensor_memory`)."""
    from ..efficient import peak_tensor_memory

    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = [t.chunk(world_size, dim=-2)[rank].contiguous() for t in (query, key, value)]
    out = {"output": ring_attention(*mine, block_size=block_size),
           "causal_output": ring_attention(*mine, causal=True, block_size=block_size), "peak_bytes": {}}
    for T in memory_lengths:
        gen = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(1, 4, T // world_size, 16, generator=gen) for _ in range(3))
        with peak_tensor_memory() as mem:
            ring_attention(q, k, v, causal=True, block_size=block_size)
        out["peak_bytes"][T] = mem.peak
    return out
