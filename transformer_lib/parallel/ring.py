"""Sequence parallelism: ring attention, each process holding a block of the sequence and merging
the key/value blocks that travel around the ring with chapter 13's online softmax
(`efficient.online_softmax_fold`; Liu et al. 2023, arXiv:2310.01889). Forward only.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .._checks import check_positive_int, check_tensor
from ..efficient import online_softmax_fold
from .launch import worker_device


def ring_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool = False,
                   block_size: int = 128, group=None) -> torch.Tensor:
    """Exact attention over a sequence cut into P consecutive blocks of one length, one block per
    process (Liu et al. 2023): softmax(Q K^T / sqrt(d_k)) V for this process's queries against
    every key.

    Process r holds block r of the queries, keys and values, (..., T/P, d_k): every process's
    block must have the same length (cut a sequence whose length P divides). The key/value
    blocks travel around the ring: at step i process r holds block (r - i) mod P, folds it into
    its running softmax (`online_softmax_fold`, `block_size` keys at a time) while it already
    sends that block on to process r + 1 and receives the next from r - 1. After P steps every
    process has seen every key. With `causal`, key position j may be read by query position i
    only if j <= i (positions counted over the whole sequence): blocks from later processes are
    skipped, the diagonal block is masked. Returns this process's (..., T/P, d_v) output, on
    the device of `query`.

    Forward only: the received blocks carry no gradient back to the process that sent them, so
    inputs that require gradients (training) are refused. The backward pass would send the
    blocks around the ring again, with their gradients.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, floating=True)
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2] and query.shape[-2] == key.shape[-2] == value.shape[-2]
            and query.shape[-1] == key.shape[-1]):
        raise ValueError(f"ring_attention is self-attention on one block per process: query, key and value must be "
                         f"(..., T/P, d) with the same leading shape and length, got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        raise RuntimeError("ring_attention has no backward pass (the key/value blocks received from the other "
                           "processes carry no gradient back): call it under torch.no_grad(), or on inputs that "
                           "do not require gradients")
    check_positive_int("block_size", block_size)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    t, kw = query.shape[-2], dict(dtype=query.dtype, device=query.device)
    q = query / math.sqrt(query.shape[-1])
    m = torch.full((*query.shape[:-1], 1), -math.inf, **kw)  # running maximum
    ell = torch.zeros_like(m)  # running sum
    o = torch.zeros(*query.shape[:-1], value.shape[-1], **kw)  # running output
    q_pos = rank * t + torch.arange(t, device=query.device)[:, None]  # (T/P, 1): positions in the whole sequence
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
                    k_pos = owner * t + torch.arange(start, stop, device=query.device)
                    scores = scores.masked_fill(k_pos > q_pos, -math.inf)
                m, ell, o = online_softmax_fold(m, ell, o, scores, v_blk[..., start:stop, :])
        if step < world_size - 1:
            for request in requests:
                request.wait()
            k_blk, v_blk = k_next, v_next
    return o / ell.masked_fill(ell == 0, 1.0)


def _global_rank(group, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def sequence_block(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Block `rank` of `world_size` equal blocks of x (..., T, d) along its length, (..., T/P, d):
    what process `rank` holds of a whole sequence. T must be divisible by P (ring attention counts
    positions as rank * T/P + i, so every block must have the same length)."""
    check_tensor("x", x)
    if x.dim() < 2 or x.shape[-2] % world_size:
        raise ValueError(f"the sequence's length T={x.shape[-2] if x.dim() >= 2 else None} must be divisible by "
                         f"the number of processes {world_size}: ring attention gives every process a block of "
                         "the same length")
    return x.unflatten(-2, (world_size, -1)).select(-3, rank)


def ring_attention_worker(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          memory_lengths=(), block_size: int = 128, device: str | torch.device | None = None) -> dict:
    """Cut the whole-sequence (..., T, d) query, key and value into one block per process (T must
    be divisible by the number of processes P), move them to `device` (default the CPU; "cuda":
    GPU `LOCAL_RANK`) and run `ring_attention` on them, with and without the causal mask.
    Returns this process's blocks of both outputs ("output", "causal_output", on the CPU), and
    for each T in `memory_lengths` (each divisible by P) the peak bytes of tensors this process
    creates while it runs causal ring attention on random (1, 4, T, 16) float32 inputs
    ("peak_bytes", counted by `memory.peak_tensor_memory`)."""
    from ..memory import peak_tensor_memory

    rank, world_size = dist.get_rank(), dist.get_world_size()
    for T in memory_lengths:
        if T % world_size:
            raise ValueError(f"memory length {T} must be divisible by the number of processes {world_size}")
    device = worker_device(device)
    mine = [sequence_block(t, rank, world_size).contiguous().to(device) for t in (query, key, value)]
    out = {"output": ring_attention(*mine, block_size=block_size).cpu(),
           "causal_output": ring_attention(*mine, causal=True, block_size=block_size).cpu(), "peak_bytes": {}}
    for T in memory_lengths:
        gen = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(1, 4, T // world_size, 16, generator=gen).to(device) for _ in range(3))
        with peak_tensor_memory() as mem:
            ring_attention(q, k, v, causal=True, block_size=block_size)
        out["peak_bytes"][T] = mem.peak
    return out
