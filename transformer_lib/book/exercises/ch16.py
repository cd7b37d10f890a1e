"""Chapter 16's checks: grouped-query attention's sharing of key/value heads, and whether an
attention function copies the shared keys and values for every query head of a group.

`check_share_kv(share_kv)` runs the reader's `share_kv(kv, n_heads)`, which takes the keys (or
values) of the h_kv key/value heads, shape (B, h_kv, T, d_k), and returns them for all h query
heads, shape (B, h, T, d_k), query head i reading key/value head i // (h / h_kv) (the grouping
of Ainslie et al. 2023, arXiv:2305.13245, of Llama's `repeat_kv` and of PyTorch's
`scaled_dot_product_attention(..., enable_gqa=True)`). It returns a one-line verdict when the
answer is right, and raises AssertionError saying what is wrong otherwise. Plausible wrong
answers it tells apart: tiling the heads (`repeat`: 0, 1, 0, 1 where the grouping is 0, 0, 1, 1),
query head i reading head i % h_kv, and a group size fixed at 2.

`largest_new_storage(fn, *args)` runs `fn` and returns the size in bytes of the largest tensor
storage any PyTorch operation inside it creates (views create none). `gqa_copy_report(fn)` uses
it to say whether a grouped attention function materialises the keys or values at full head
count: with h = 8 query heads, h_kv = 2 key/value heads, one query and 64 keys (one decoding
step), such a copy is 16 times larger than anything a copy-free version needs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["check_share_kv", "largest_new_storage", "gqa_copy_report", "check_grouped_attention"]

#: (query heads, key/value heads) the share_kv check tries.
_HEADS = ((4, 2), (6, 3), (8, 2), (4, 4), (4, 1))


def _want_index(i: int, h: int, h_kv: int) -> int:
    return i // (h // h_kv)


def check_share_kv(fn) -> str:
    """The reader's `share_kv(kv, n_heads)`: (B, h_kv, T, d_k) -> (B, n_heads, T, d_k), query
    head i reading key/value head i // (n_heads // h_kv); then inside attention, against the
    library's `MultiHeadAttention(n_kv_heads=...)`."""
    from transformer_lib import MultiHeadAttention

    g = torch.Generator().manual_seed(16)
    for h, h_kv in _HEADS:
        kv = torch.randn(2, h_kv, 5, 3, generator=g)
        got = fn(kv, h)
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got)
        assert tuple(got.shape) == (2, h, 5, 3), (
            f"with {h} query heads and {h_kv} key/value heads of shape (2, {h_kv}, 5, 3), "
            f"share_kv should return shape (2, {h}, 5, 3), got {tuple(got.shape)}")
        for i in range(h):
            want = _want_index(i, h, h_kv)
            if torch.equal(got[:, i].to(kv.dtype), kv[:, want]):
                continue
            read = next((j for j in range(h_kv) if torch.equal(got[:, i].to(kv.dtype), kv[:, j])),
                        None)
            what = (f"it reads key/value head {read}" if read is not None
                    else "it is none of the key/value heads")
            hint = (" (the heads are tiled 0, 1, 0, 1; the grouping repeats each head in place, "
                    "0, 0, 1, 1)" if read == i % h_kv else "")
            raise AssertionError(
                f"with {h} query heads and {h_kv} key/value heads (groups of {h // h_kv}), "
                f"query head {i} must read key/value head {want}; {what}{hint}")
    attn = MultiHeadAttention(24, 6, n_kv_heads=2).double()
    x = torch.randn(2, 7, 24, dtype=torch.float64, generator=g)
    with torch.no_grad():
        q = attn.split_heads(attn.w_q(x))
        k, v = (torch.as_tensor(fn(attn.split_heads(w(x), 2), 6)).double()
                for w in (attn.w_k, attn.w_v))
        out = attn.w_o(attn.merge_heads(F.scaled_dot_product_attention(q, k, v)))
        assert torch.allclose(out, attn(x, x, x)), (
            "each head is right on its own, but inside attention the result differs from "
            "MultiHeadAttention(n_kv_heads=2)")
    return "Correct: each key/value head serves the query heads of its group, in order"


class _LargestStorage(TorchDispatchMode):
    """Records the largest storage (bytes) among the outputs of every operation it sees, and
    the total of all the new storages (each counted once)."""

    def __init__(self, known):
        super().__init__()
        self.known = known
        self.largest = 0
        self.total = 0
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.known:
                    self.largest = max(self.largest, t.untyped_storage().nbytes())
                    if ptr not in self.seen:
                        self.seen.add(ptr)
                        self.total += t.untyped_storage().nbytes()
        return out


def largest_new_storage(fn, *args) -> int:
    """Run fn(*args) and return the bytes of the largest storage any operation inside it
    created (a view shares its input's storage and counts for nothing)."""
    known = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    with _LargestStorage(known) as mode:
        fn(*args)
    return mode.largest


def total_new_storage(fn, *args) -> int:
    """Run fn(*args) and return the bytes of all the storages the operations inside it
    created, each counted once: a copy made in pieces counts in full."""
    known = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    with _LargestStorage(known) as mode:
        fn(*args)
    return mode.total


def _decoding_step(dtype=torch.float32):
    g = torch.Generator().manual_seed(16)
    B, h, h_kv, S, d_k = 2, 8, 2, 64, 16
    q = torch.randn(B, h, 1, d_k, generator=g, dtype=dtype)
    k = torch.randn(B, h_kv, S, d_k, generator=g, dtype=dtype)
    v = torch.randn(B, h_kv, S, d_k, generator=g, dtype=dtype)
    return q, k, v


def gqa_copy_report(fn) -> tuple[int, int]:
    """(largest storage fn creates, bytes of the keys copied for every query head) for one
    decoding step: h = 8, h_kv = 2, one query, 64 cached keys of d_k = 16, float32."""
    q, k, v = _decoding_step()
    full = k.element_size() * k.numel() * (q.shape[1] // k.shape[1])
    return largest_new_storage(fn, q, k, v), full


def check_grouped_attention(fn) -> str:
    """The reader's grouped attention `fn(q, k, v, mask=None)`: q (B, h, T, d_k), k and v
    (B, h_kv, S, d_k), mask (T, S) True = may attend. It must equal PyTorch's
    `scaled_dot_product_attention(..., enable_gqa=True)` and copy no key or value per query
    head."""
    g = torch.Generator().manual_seed(61)
    for B, h, h_kv, T, S in ((2, 4, 2, 6, 6), (1, 6, 3, 3, 9), (2, 8, 1, 1, 5), (1, 4, 4, 5, 5)):
        q = torch.randn(B, h, T, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(B, h_kv, S, 8, generator=g, dtype=torch.float64) for _ in range(2))
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)      # causal, queries last
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        got = torch.as_tensor(fn(q, k, v, mask))
        assert tuple(got.shape) == tuple(want.shape), (
            f"with q {tuple(q.shape)} and k, v {tuple(k.shape)}, the output should have shape "
            f"{tuple(want.shape)}, got {tuple(got.shape)}")
        if not torch.allclose(got.double(), want, atol=1e-6):
            unmasked = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            assert not torch.allclose(got.double(), unmasked, atol=1e-6), (
                f"with h={h}, h_kv={h_kv}, T={T}, S={S}: the mask is not applied")
            raise AssertionError(
                f"with h={h}, h_kv={h_kv}, T={T}, S={S}: the output differs from "
                "scaled_dot_product_attention(..., enable_gqa=True): check the grouping (query "
                "head i reads key/value head i // (h / h_kv)) and the 1/sqrt(d_k) scale")
    largest, full = gqa_copy_report(fn)
    assert largest < full, (
        f"the values are right, but the function creates a tensor of {largest:,} bytes, as "
        f"large as the keys copied for every query head ({full:,} bytes): a 5-D broadcast "
        "matmul or repeat_interleave materialises them; fold each group's queries into rows "
        "instead, so that each key/value head meets a plain (g T, d_k) block of queries")
    total = total_new_storage(fn, *_decoding_step())
    assert total < full // 2, (
        f"the values are right, but the function creates {total:,} bytes in all, more than half "
        f"of the keys copied for every query head ({full:,} bytes): it copies the keys in "
        "pieces (a loop of expand(...).contiguous() or repeat_interleave); fold each group's "
        "queries into rows instead, so that each key/value head meets a plain (g T, d_k) block")
    return (f"Correct: equal to PyTorch's grouped attention, and all it creates ({total:,} "
            f"bytes) is far less than one copy of the keys per query head ({full:,} bytes)")
