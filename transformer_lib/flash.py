"""FlashAttention for training: exact attention whose forward AND backward passes hold no
T_q x T_k matrix (chapter 13).

`flash_attention(query, key, value, mask)` equals `scaled_dot_product_attention(...)[0]`, and
so do its gradients, but it is a `torch.autograd.Function` with a backward pass of its own.
The queries are cut into blocks of `block_q` rows and the keys into blocks of `block_k`; only
one (block_q, block_k) tile of scores exists at a time.

Forward (Dao 2023, arXiv:2307.08691, FlashAttention-2, Algorithm 1), for each block Q_i of
queries, folding in the key blocks K_j, V_j one at a time (the online softmax):

    S_ij = Q_i K_j^T / sqrt(d_k)                              (B_q, B_k), a tile of scores
    m_i' = max(m_i, rowmax(S_ij))                              (B_q, 1), running maximum
    P_ij = exp(S_ij - m_i')                                    (B_q, B_k)
    l_i' = exp(m_i - m_i') l_i + rowsum(P_ij)                  (B_q, 1), running sum
    O_i' = exp(m_i - m_i') O_i + P_ij V_j                      (B_q, d_v), unnormalised
    then O_i = O_i / l_i  and  L_i = m_i + log(l_i)            the output and the log-sum-exp

Saved for the backward pass: Q, K, V (the inputs, which exist anyway), O and L, one number
per query row. FlashAttention-1 (Dao et al. 2022, arXiv:2205.14135, Algorithm 1, which loops
over key blocks outside and query blocks inside) saves the two statistics m and l instead;
FlashAttention-2 keeps their combination L, which is all the backward pass needs.

Backward (FlashAttention-2, Algorithm 2), for each block K_j, V_j of keys and, inside, each
block Q_i of queries, with dO the gradient of the output:

    D_i  = rowsum(dO_i * O_i)                                  (B_q, 1), once, before the loop
    P_ij = exp(S_ij - L_i)                                     the weights, recomputed
    dV_j += P_ij^T dO_i                                        (B_k, d_v)
    dP_ij = dO_i V_j^T                                         (B_q, B_k)
    dS_ij = P_ij * (dP_ij - D_i)                               the softmax's gradient
    dQ_i += dS_ij K_j / sqrt(d_k),    dK_j += dS_ij^T Q_i / sqrt(d_k)

D_i equals rowsum(P_i * dP_i) over the whole row (because O_i = P_i V), which is what the
softmax's gradient needs; computing it from O and dO avoids a second pass over the keys.

Masks follow the library's convention (boolean, True = may attend, broadcastable to
(..., T_q, T_k)); a blocked score is -inf inside a tile. A query row with no allowed key gets
a zero output and zero gradients, as `masks.masked_softmax` gives: its l stays 0, its output
is set to 0 and its L to 0, so its recomputed weights exp(-inf - 0) are 0 too. `causal=True`
builds the causal mask tile by tile instead of taking a (T_q, T_k) tensor, aligned to the
last key: query i sees keys j <= i + T_k - T_q, as new tokens attending to a cache do
(chapter 14). Tiles above that diagonal are skipped in both passes.

This is the algorithm, in PyTorch operations on the CPU; the speed of FlashAttention comes
from running it as one fused GPU kernel whose tiles stay in on-chip memory. Here each tile is
a small tensor, so the memory is linear in T, and the time is that of a Python loop.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ._checks import check_positive_int
from .attention import check_qkv
from .efficient import online_softmax_fold

__all__ = ["FlashAttention", "flash_attention"]


def _tile_mask(mask, causal: bool, offset: int, rows: slice, cols: slice, device):
    """Allowed entries of the tile of query rows `rows` and key columns `cols`
    (..., B_q, B_k), or None when every entry is allowed."""
    allowed = None if mask is None else mask[..., rows, cols]
    if causal:  # query i sits at position offset + i and sees keys j <= offset + i
        i = torch.arange(rows.start, rows.stop, device=device)[:, None] + offset
        j = torch.arange(cols.start, cols.stop, device=device)
        allowed = (j <= i) if allowed is None else allowed & (j <= i)
    return allowed


def _blocks(length: int, size: int):
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


class FlashAttention(torch.autograd.Function):
    """softmax(Q K^T / sqrt(d_k)) V with a tiled forward pass and a recomputing backward
    pass (see the module docstring). Call it through `flash_attention`, which checks the
    arguments and broadcasts the leading dimensions.

    forward(query (..., T_q, d_k), key (..., T_k, d_k), value (..., T_k, d_v), mask
    (..., T_q, T_k) boolean or None, causal, block_q, block_k) -> (..., T_q, d_v); query,
    key, value and mask share their leading shape (...).
    """

    @staticmethod
    def forward(ctx, query, key, value, mask, causal, block_q, block_k):
        t_q, t_k = query.shape[-2], key.shape[-2]
        scale, offset = 1.0 / math.sqrt(query.shape[-1]), t_k - t_q
        kw = dict(dtype=query.dtype, device=query.device)
        out = torch.empty(*query.shape[:-1], value.shape[-1], **kw)  # (..., T_q, d_v)
        lse = torch.empty(*query.shape[:-1], 1, **kw)  # (..., T_q, 1): L = m + log l
        for rows in _blocks(t_q, block_q):
            q_i = query[..., rows, :]  # (..., B_q, d_k)
            m = torch.full((*q_i.shape[:-1], 1), -math.inf, **kw)  # (..., B_q, 1)
            ell = torch.zeros_like(m)  # (..., B_q, 1)
            o = torch.zeros(*q_i.shape[:-1], value.shape[-1], **kw)  # (..., B_q, d_v)
            for cols in _blocks(t_k, block_k):
                if causal and cols.start > rows.stop - 1 + offset:
                    break  # this tile and every later one lie above the diagonal
                s = q_i @ key[..., cols, :].transpose(-2, -1) * scale  # (..., B_q, B_k)
                allowed = _tile_mask(mask, causal, offset, rows, cols, query.device)
                if allowed is not None:
                    s = s.masked_fill(~allowed, -math.inf)
                m, ell, o = online_softmax_fold(m, ell, o, s, value[..., cols, :])  # the update above
            empty = ell == 0  # rows with no allowed key: output 0, L 0 (weights stay 0)
            out[..., rows, :] = o / ell.masked_fill(empty, 1.0)
            lse[..., rows, :] = (m + torch.log(ell)).masked_fill(empty, 0.0)
        ctx.save_for_backward(query, key, value, out, lse, mask)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        query, key, value, out, lse, mask = ctx.saved_tensors
        t_q, t_k = query.shape[-2], key.shape[-2]
        scale, offset = 1.0 / math.sqrt(query.shape[-1]), t_k - t_q
        d = (grad_out * out).sum(-1, keepdim=True)  # (..., T_q, 1): D = rowsum(dO * O)
        grad_q = torch.zeros(query.shape, dtype=query.dtype, device=query.device)
        grad_k = torch.zeros(key.shape, dtype=key.dtype, device=key.device)
        grad_v = torch.zeros(value.shape, dtype=value.dtype, device=value.device)
        for cols in _blocks(t_k, ctx.block_k):
            k_j, v_j = key[..., cols, :], value[..., cols, :]  # (..., B_k, d_k), (.., d_v)
            for rows in _blocks(t_q, ctx.block_q):
                if ctx.causal and cols.start > rows.stop - 1 + offset:
                    continue  # the tile lies above the diagonal: all its weights are 0
                q_i, do_i = query[..., rows, :], grad_out[..., rows, :]
                s = q_i @ k_j.transpose(-2, -1) * scale  # (..., B_q, B_k)
                allowed = _tile_mask(mask, ctx.causal, offset, rows, cols, query.device)
                if allowed is not None:
                    s = s.masked_fill(~allowed, -math.inf)
                p = torch.exp(s - lse[..., rows, :])  # the weights P_ij, recomputed
                grad_v[..., cols, :] += p.transpose(-2, -1) @ do_i  # dV_j += P^T dO_i
                dp = do_i @ v_j.transpose(-2, -1)  # (..., B_q, B_k): dP = dO_i V_j^T
                ds = p * (dp - d[..., rows, :])  # dS = P * (dP - D_i)
                grad_q[..., rows, :] += ds @ k_j * scale  # dQ_i += dS K_j / sqrt(d_k)
                grad_k[..., cols, :] += ds.transpose(-2, -1) @ q_i * scale  # dK_j
        return grad_q, grad_k, grad_v, None, None, None, None


def flash_attention(query, key, value, mask=None, *, causal: bool = False,
                    block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (Vaswani et al. 2017, equation 1)
    computed as FlashAttention does: tiles of queries and keys, and a backward pass that
    recomputes each tile from the output and the per-row log-sum-exp.

    Args:
        query: (..., T_q, d_k);  key: (..., T_k, d_k);  value: (..., T_k, d_v); one dtype.
        mask: optional boolean tensor broadcastable to (..., T_q, T_k); True = may attend.
        causal: also apply the causal mask aligned to the last key (query i sees keys
            j <= i + T_k - T_q), built tile by tile, so no (T_q, T_k) mask is stored.
        block_q, block_k: rows and columns of one tile of scores.

    Returns:
        (..., T_q, d_v), equal up to rounding to `scaled_dot_product_attention(...)[0]` with
        the same mask (and with `causal`, that mask AND the causal one); the gradients with
        respect to query, key and value are equal too. A row with no allowed key gives 0.
    """
    scores_shape = check_qkv(query, key, value, mask)
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError("query, key and value must have one dtype, got "
                        f"{query.dtype}, {key.dtype} and {value.dtype}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    lead = scores_shape[:-2]
    query, key, value = (t.expand(*lead, *t.shape[-2:]) for t in (query, key, value))
    if mask is not None:
        mask = mask.broadcast_to(scores_shape)  # a view: no (T_q, T_k) copy is made
    return FlashAttention.apply(query, key, value, mask, causal, block_q, block_k)
