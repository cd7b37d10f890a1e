"""Attention that costs less than T x T: exact blockwise attention, and two approximations.

- `online_softmax_fold`: one step of the online softmax (Milakov and Gimelshein 2018,
  arXiv:1805.02867): a block of keys folded into a running maximum, sum and output. Written
  once, here, and used by blockwise attention, FlashAttention (`flash`) and ring attention
  (`parallel.ring`).
- `blockwise_attention`: exact attention computed over blocks of keys with the online softmax
  (used for memory-efficient attention by Rabe and Staats 2021, arXiv:2112.05682, and
  FlashAttention, Dao et al. 2022, arXiv:2205.14135). It never holds more than
  (q_len, block_size) scores.
  Its backward pass is autograd's, which keeps every block: `flash.flash_attention` is the
  version whose backward pass is linear in memory too.
- `check_online_update`: the check of chapter 13's exercise (one step of the online softmax).
- `sliding_window_mask` and `sliding_window_attention`: each token attends to its neighbours
  within `window` positions on each side, plus a few global tokens that attend and are
  attended everywhere (Longformer, Beltagy et al. 2020, arXiv:2004.05150; BigBird, Zaheer et
  al. 2020, arXiv:2007.14062). Longformer's window size w counts both sides: window = w / 2.
- `linformer_attention`, `random_projection`, `segment_mean_projection`: keys and values
  projected along the length to `rank` rows (Linformer, Wang et al. 2020, arXiv:2006.04768).
- `peak_tensor_memory`: counts the bytes of the tensors PyTorch operations create, to measure
  the peak memory of a computation the same way on every machine. It lives in
  `transformer_lib.memory` (it needs a private PyTorch module) and is imported on first use.

Masks follow the library's convention: boolean, True = may attend, broadcastable to
(batch, n_heads, q_len, k_len). A query row with no allowed key gets a zero output.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import check_positive_int, check_tensor
from .attention import check_qkv

__all__ = [
    "online_softmax_fold", "blockwise_attention", "check_online_update", "sliding_window_mask",
    "sliding_window_attention", "linformer_attention", "random_projection",
    "segment_mean_projection", "peak_tensor_memory",  # noqa: F822 (module __getattr__)
]


def __getattr__(name: str):
    # peak_tensor_memory needs a private PyTorch module: import it only when first used.
    if name == "peak_tensor_memory":
        from .memory import peak_tensor_memory

        globals()[name] = peak_tensor_memory
        return peak_tensor_memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_qkv(query, key, value, mask=None) -> tuple[torch.Size, int, int]:
    """`attention.check_qkv` (shapes, dtypes and the mask); returns the broadcast leading
    shape, q_len and k_len."""
    *lead, q_len, k_len = check_qkv(query, key, value, mask)
    return torch.Size(lead), q_len, k_len


def online_softmax_fold(m: torch.Tensor, ell: torch.Tensor, o: torch.Tensor, scores: torch.Tensor,
                        value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one block of keys into the running softmax (chapter 13, equation 2):

        m' = max(m, max_j s_j)
        l' = l e^(m - m') + sum_j e^(s_j - m')
        o' = o e^(m - m') + sum_j e^(s_j - m') v_j

    m, ell (..., q, 1): the running maximum and sum (l above); o (..., q, d_v): the running
    output, unnormalised; scores (..., q, b), -inf where a key is masked; value (..., b, d_v).
    Start from m = -inf, l = 0, o = 0; the attention output is o / l at the end (0 where l = 0:
    a row with no allowed key). Returns (m', l', o'). A row that has seen no allowed key yet
    has m' = -inf and is shifted by 0 instead (exp(-inf - (-inf)) would be NaN), so it stays
    at l = 0, o = 0.
    """
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    shift = m_new.masked_fill(m_new == -math.inf, 0.0)  # no allowed key yet: shift by 0
    p = torch.exp(scores - shift)  # (..., q, b)
    correction = torch.exp(m - shift)  # rescales what was summed against the old maximum
    return m_new, ell * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ value


def blockwise_attention(query, key, value, mask=None, block_size: int = 128) -> torch.Tensor:
    """Exact softmax(Q K^T / sqrt(d_k)) V (Vaswani et al. 2017, equation 1), one block of
    keys at a time.

    For every query row it keeps a running maximum m, a running sum l = sum_j exp(s_j - m)
    and a running output o = sum_j exp(s_j - m) v_j. A new block with scores s' updates them:

        m' = max(m, max s'),
        l' = l exp(m - m') + sum exp(s' - m'),
        o' = o exp(m - m') + exp(s' - m') V'

    and the answer is o / l (Milakov and Gimelshein 2018, arXiv:1805.02867; Rabe and Staats
    2021, arXiv:2112.05682). Only (..., q_len, block_size) scores exist at any time, so the
    extra memory of the forward pass is linear in the length instead of quadratic. (Under
    autograd every block's exponentials are kept for the backward pass: see `flash`.)

    Args:
        query: (..., q_len, d_k);  key: (..., k_len, d_k);  value: (..., k_len, d_v).
        mask: optional boolean tensor broadcastable to (..., q_len, k_len); True = may attend.
        block_size: number of keys per block.

    Returns:
        (..., q_len, d_v), equal to `transformer_lib.scaled_dot_product_attention(...)[0]` up
        to rounding; a query row with no allowed key gets zeros.

    Masked rows follow the library's rule (`masks.masked_softmax`: blocked keys weigh 0, a row
    with no allowed key gives 0) with arithmetic of its own, because no block sees a whole
    row: a blocked score is -inf, so exp gives it weight 0; `online_softmax_fold` keeps a row
    that has seen no allowed key at l = 0, o = 0, and such a row is divided by 1 at the end,
    giving 0. The tests compare it with `masked_softmax(scores, mask) @ value` on fully masked
    rows.
    """
    lead, q_len, k_len = _check_qkv(query, key, value, mask)
    check_positive_int("block_size", block_size)
    if mask is not None:  # a view: a (..., 1) mask would not slice
        mask = mask.broadcast_to(*mask.shape[:-1], k_len)
    scale = 1.0 / math.sqrt(query.shape[-1])
    kw = dict(dtype=torch.promote_types(query.dtype, value.dtype), device=query.device)
    m = torch.full((*lead, q_len, 1), -math.inf, **kw)  # running maximum
    ell = torch.zeros((*lead, q_len, 1), **kw)  # running sum
    o = torch.zeros((*lead, q_len, value.shape[-1]), **kw)  # running output
    for start in range(0, k_len, block_size):
        stop = min(start + block_size, k_len)
        s = (query @ key[..., start:stop, :].transpose(-2, -1)) * scale  # (..., q_len, b)
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], -math.inf)
        m, ell, o = online_softmax_fold(m, ell, o, s, value[..., start:stop, :])
    return o / ell.masked_fill(ell == 0, 1.0)  # rows with no allowed key: o = 0, output 0


#: The cases `check_online_update` folds: (what they test, dtype, offset, spread). Scores are
#: offset + spread * N(0, 1). exp overflows past 709.8 in float64 and 88.7 in float32, and
#: underflows to 0 below about -745 and -103: only an answer that subtracts the running
#: maximum survives the last three.
ONLINE_CASES = (
    ("scores of order 1 (float64)", torch.float64, 0.0, 1.0),
    ("scores of order 100 with big jumps (float64)", torch.float64, 0.0, 300.0),
    ("scores near +800, where exp(s) overflows float64", torch.float64, 800.0, 5.0),
    ("scores near -800, where exp(s) underflows to 0", torch.float64, -800.0, 5.0),
    ("float32 scores of order 100, where exp(s) overflows float32", torch.float32, 0.0, 100.0),
)


def check_online_update(online_update, cases=ONLINE_CASES) -> str:
    """Chapter 13's exercise: does `online_update(m, l, o, scores, values) -> (m, l, o)`
    implement one step of the online softmax (equation 2 of the chapter)?

    Starting from m = -inf, l = 0, o = 0 ((T_q, 1), (T_q, 1), (T_q, d_v)), it folds in blocks
    of unequal sizes of `scores` (T_q, b) and `values` (b, d_v), and compares o / l with
    softmax(scores) @ values computed in float64, for every case of `cases`. Returns a
    sentence starting "Correct" or "Not yet". Answers that never subtract the running maximum
    fail the overflow and underflow cases; answers that do not rescale the old sums by
    exp(m - m') fail the comparison.
    """
    if not callable(online_update):
        raise TypeError(f"online_update must be a function, got {online_update!r}")
    gen = torch.Generator().manual_seed(3)
    edges = (0, 5, 11, 20, 24)  # blocks of 5, 6, 9 and 4 keys
    for what, dtype, offset, spread in cases:
        scores = offset + spread * torch.randn(5, 24, generator=gen, dtype=torch.float64)
        values = torch.randn(24, 3, generator=gen, dtype=torch.float64)
        expected = scores.softmax(-1) @ values
        scores, values = scores.to(dtype), values.to(dtype)
        m = torch.full((5, 1), -math.inf, dtype=dtype)
        ell, o = torch.zeros(5, 1, dtype=dtype), torch.zeros(5, 3, dtype=dtype)
        for start, stop in zip(edges, edges[1:]):
            m, ell, o = online_update(m, ell, o, scores[:, start:stop], values[start:stop])
        got = (o / ell).double()
        if not torch.isfinite(got).all():
            return (f"Not yet: with {what}, o / l is not finite "
                    "(subtract the running maximum before exp)")
        tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
        if not torch.allclose(got, expected, **tol):
            return (f"Not yet: with {what}, o / l differs from softmax(scores) @ values "
                    "(rescale the old sums by exp(m - m_new))")
    return "Correct: folding in the blocks one by one gives the exact softmax average."


def _check_window(length: int, window: int, n_global: int) -> None:
    check_positive_int("window", window)
    if not isinstance(n_global, int) or isinstance(n_global, bool) or not 0 <= n_global <= length:
        raise ValueError(f"n_global must be an integer in [0, length={length}], got {n_global!r}")


def sliding_window_mask(length: int, window: int, n_global: int = 0, device=None) -> torch.Tensor:
    """Longformer/BigBird-style sparse mask, shape (length, length), True = may attend.

    Position i may attend to j when |i - j| <= window (a band of 2 window + 1 keys), and the
    first `n_global` positions are global: they attend to every position and every position
    attends to them (Beltagy et al. 2020, arXiv:2004.05150, section 3.1; Zaheer et al. 2020,
    arXiv:2007.14062). `window` counts the keys on EACH side; Longformer's window size w
    counts both sides ("w/2 tokens on each side"), so Longformer's w is 2 * window here.
    """
    check_positive_int("length", length)
    _check_window(length, window, n_global)
    pos = torch.arange(length, device=device)
    mask = (pos[:, None] - pos[None, :]).abs() <= window
    mask[:n_global, :] = True
    mask[:, :n_global] = True
    return mask


def sliding_window_attention(query, key, value, window: int, n_global: int = 0) -> torch.Tensor:
    """Attention restricted to `sliding_window_mask(T, window, n_global)`, in O(T window)
    time and memory.

    The queries are cut into blocks of `window` rows; each block scores only the keys of its
    own block and the two neighbouring ones (3 window keys, which cover every |i - j| <=
    window), plus the `n_global` global keys. The global query rows attend to every key. The
    result equals `scaled_dot_product_attention(query, key, value, sliding_window_mask(...))`
    up to rounding, but the largest scores tensor is (..., T, 3 window + n_global) instead of
    (..., T, T).

    Args:
        query, key: (..., T, d_k); value: (..., T, d_v): self-attention, so one length T.
        window: keys on each side that a token may attend to (half Longformer's w).
        n_global: the first n_global positions are global tokens.

    Returns: (..., T, d_v).
    """
    lead, length, k_len = _check_qkv(query, key, value)
    if length != k_len:
        raise ValueError("sliding_window_attention is self-attention: query and key lengths "
                         f"must match, got {length} and {k_len}")
    _check_window(length, window, n_global)
    query, key, value = (t.expand(*lead, *t.shape[-2:]) for t in (query, key, value))
    w, n_blocks = window, -(-length // window)
    pad = n_blocks * w - length
    qb = F.pad(query, (0, 0, 0, pad)).unflatten(-2, (n_blocks, w))  # (..., n_blocks, w, d_k)
    # Keys and values padded by one block on each side; unfold gives each block its 3 w
    # neighbours: (..., n_blocks, 3w, d_k) and (..., n_blocks, 3w, d_v).
    kb = F.pad(key, (0, 0, w, w + pad)).unfold(-2, 3 * w, w).transpose(-2, -1)
    vb = F.pad(value, (0, 0, w, w + pad)).unfold(-2, 3 * w, w).transpose(-2, -1)
    scale = 1.0 / math.sqrt(query.shape[-1])
    local = (qb @ kb.transpose(-2, -1)) * scale  # (..., n_blocks, w, 3w)
    device = query.device
    q_pos = torch.arange(n_blocks * w, device=device).view(n_blocks, w, 1)
    k_pos = (torch.arange(n_blocks, device=device) * w - w).view(n_blocks, 1, 1)
    k_pos = k_pos + torch.arange(3 * w, device=device)
    # Global keys are scored in their own columns below, so the band leaves them out.
    allowed = ((q_pos - k_pos).abs() <= w) & (k_pos >= n_global) & (k_pos < length)
    local = local.masked_fill(~allowed, -math.inf)
    if n_global:
        glob_k = key[..., None, :n_global, :].transpose(-2, -1)
        glob = (qb @ glob_k) * scale  # (..., n_blocks, w, n_global)
        local = torch.cat([glob, local], dim=-1)
        glob_v = value[..., None, :n_global, :].expand(*vb.shape[:-2], n_global, -1)
        vb = torch.cat([glob_v, vb], dim=-2)
    out = (local.softmax(dim=-1) @ vb).flatten(-3, -2)[..., :length, :]  # (..., T, d_v)
    if n_global:  # the global rows see everything
        full = (query[..., :n_global, :] @ key.transpose(-2, -1)) * scale
        out = torch.cat([full.softmax(dim=-1) @ value, out[..., n_global:, :]], dim=-2)
    return out


def random_projection(k_len: int, rank: int, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A (rank, k_len) matrix with independent N(0, 1/rank) entries: the Johnson-Lindenstrauss
    projection of Linformer's analysis (Wang et al. 2020, arXiv:2006.04768, Theorem 1)."""
    check_positive_int("k_len", k_len)
    check_positive_int("rank", rank)
    return torch.randn(rank, k_len, generator=generator, dtype=dtype) / math.sqrt(rank)


def segment_mean_projection(k_len: int, rank: int,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A (rank, k_len) matrix whose row r averages the r-th of `rank` consecutive, near-equal
    segments of the length: a fixed, untrained choice of Linformer's E and F. Rows sum to 1."""
    check_positive_int("k_len", k_len)
    check_positive_int("rank", rank)
    if rank > k_len:
        raise ValueError(f"rank must be at most k_len={k_len}, got {rank}")
    segment = torch.arange(k_len) * rank // k_len  # the segment of each key position
    onehot = (segment[None, :] == torch.arange(rank)[:, None]).to(dtype)
    return onehot / onehot.sum(dim=-1, keepdim=True)


def linformer_attention(query, key, value, proj_k,
                        proj_v=None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q (E K)^T / sqrt(d_k)) (F V)   (Wang et al. 2020, arXiv:2006.04768, eq. 7)

    E = proj_k and F = proj_v (rank, k_len) compress keys and values along the length, so the
    scores are (..., q_len, rank) instead of (..., q_len, k_len): time and memory O(T rank).
    F defaults to E (Linformer's key-value sharing). No mask: padding would have to be removed
    before the projection mixes positions.

    Args:
        query: (..., q_len, d_k); key: (..., k_len, d_k); value: (..., k_len, d_v).
        proj_k, proj_v: (rank, k_len).

    Returns:
        output (..., q_len, d_v) and the weights (..., q_len, rank) over the projected keys.
    """
    _, _, k_len = _check_qkv(query, key, value)
    proj_v = proj_k if proj_v is None else proj_v
    for name, p in (("proj_k", proj_k), ("proj_v", proj_v)):
        check_tensor(name, p, ndim=2, floating=True)
        if p.shape[-1] != k_len:
            raise ValueError(f"{name} must have shape (rank, k_len={k_len}), got {tuple(p.shape)}")
    scores = query @ (proj_k @ key).transpose(-2, -1) / math.sqrt(query.shape[-1])  # (.., rank)
    weights = scores.softmax(dim=-1)
    return weights @ (proj_v @ value), weights
