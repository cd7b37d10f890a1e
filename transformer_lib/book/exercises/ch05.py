"""Chapter 5's exercise checks: splitting d_model into heads and merging them back, and
multi-query attention.

    from transformer_lib.book.exercises import ch05
    print(ch05.check_heads(my_split_heads, my_merge_heads))
    print(ch05.check_multi_query(multi_query_attention))

Each check returns a one-line verdict when the answer is right and raises AssertionError with
a message that says what is wrong otherwise (tests/book/test_exercises_ch05.py).
"""
from __future__ import annotations

import math

import torch

from ...attention import MultiHeadAttention

__all__ = ["check_heads", "check_multi_query"]


def _fail(message: str):
    raise AssertionError("Not yet: " + message)


def _call(fn, what: str, *args):
    """Run the reader's function; an exception becomes a message that names the input."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as err:  # the reader's code failed on the check's input: say on which
        shapes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
        hint = ""
        if "view" in str(err) and "stride" in str(err):
            hint = ("; after a transpose the tensor is no longer contiguous in memory, so merge "
                    "with reshape (or .contiguous().view), not view")
        _fail(f"{what} raised {type(err).__name__} on a tensor of shape {shapes}: {err}{hint}")


def check_heads(split, merge) -> str:
    """Check `split(x, n_heads)`, (B, T, d_model) -> (B, h, T, d_k), and `merge(x)`, back again,
    against the book's layout (head i holds features i d_k .. (i + 1) d_k - 1 of every token),
    on the split of a batch and on head outputs made directly in (B, h, T, d_k), as attention
    makes them."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 12, generator=gen)
    expected = x.view(2, 5, 3, 4).transpose(1, 2)
    s = _call(split, "split(x, 3)", x, 3)
    if not isinstance(s, torch.Tensor) or tuple(s.shape) != (2, 3, 5, 4):
        shape = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
        _fail(f"split of a (2, 5, 12) batch into 3 heads should give (B, h, T, d_k) = (2, 3, 5, 4), "
              f"got {shape}")
    if not torch.equal(s, expected):
        if torch.equal(s, x.view(2, 3, 5, 4)):
            _fail("right shape, wrong numbers: a view straight to (B, h, T, d_k) hands head 0 the "
                  "first tokens' features; split the feature axis into (h, d_k), then swap the "
                  "token and head axes")
        _fail("right shape, wrong numbers: head i must hold features 4i .. 4i+3 of every token")
    heads = torch.randn(2, 3, 5, 4, generator=gen)               # made in (B, h, T, d_k)
    weights = torch.randn(2, 3, 5, 5, generator=gen).softmax(-1)
    for name, t in (("split(x, 3)", s), ("a (2, 3, 5, 4) tensor of head outputs", heads),
                    ("the output weights @ V of attention", weights @ heads)):
        m = _call(merge, f"merge of {name}", t)
        want = t.transpose(1, 2).reshape(2, 5, 12)
        if not isinstance(m, torch.Tensor) or tuple(m.shape) != (2, 5, 12):
            _fail(f"merge of {name} should give (B, T, h d_k) = (2, 5, 12)")
        if not torch.equal(m, want):
            if torch.equal(m, t.reshape(2, 5, 12)):
                _fail("merge must move the head axis back behind the tokens (transpose(1, 2)) "
                      "before it joins the heads: token t gets head 0's d_k numbers, then "
                      "head 1's, ...")
            _fail(f"merge of {name} is not the concatenation of the heads, token by token"
                  + (": merge(split(x)) should give x back" if t is s else ""))
    return "Correct: your split and merge match the library, and merge undoes split."


def _mqa_reference(x, W_Q, W_K, W_V, W_O, n_heads, scale=None, project=True, softmax_dim=-1):
    B, T, d_model = x.shape
    d_k = d_model // n_heads
    Q = (x @ W_Q).view(B, T, n_heads, d_k).transpose(1, 2)
    K, V = (x @ W_K)[:, None], (x @ W_V)[:, None]
    weights = (Q @ K.transpose(-2, -1) / (scale or math.sqrt(d_k))).softmax(softmax_dim)
    heads = (weights @ V).transpose(1, 2).reshape(B, T, d_model)
    return (heads @ W_O if project else heads), weights


def check_multi_query(fn) -> str:
    """Check `fn(x, W_Q, W_K, W_V, W_O, n_heads) -> (output (B, T, d_model), weights (B, h, T, T))`,
    self-attention with h query heads and one shared key and value head, against
    `tl.MultiHeadAttention(d_model, n_heads, n_kv_heads=1, bias=False)` with the same weights."""
    gen = torch.Generator().manual_seed(2)
    for d_model, n_heads in [(16, 4), (24, 3), (12, 1)]:
        d_k = d_model // n_heads
        x = torch.randn(2, 5, d_model, generator=gen)
        W_Q, W_O = (torch.randn(d_model, d_model, generator=gen) for _ in range(2))
        W_K, W_V = (torch.randn(d_model, d_k, generator=gen) for _ in range(2))
        W_Q, W_K, W_V, W_O = (W / d_model**0.5 for W in (W_Q, W_K, W_V, W_O))
        lib = MultiHeadAttention(d_model, n_heads, bias=False, n_kv_heads=1)
        lib.record_weights = True
        with torch.no_grad():
            for layer, W in zip([lib.w_q, lib.w_k, lib.w_v, lib.w_o], [W_Q, W_K, W_V, W_O]):
                layer.weight.copy_(W.T)
            expected = lib(x, x, x)
            got = _call(fn, f"multi_query_attention with {n_heads} heads", x, W_Q, W_K, W_V, W_O,
                        n_heads)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            _fail("return two tensors, (output, weights)")
        out, weights = (torch.as_tensor(t).to(torch.float32) for t in got)
        where = f"with {n_heads} heads of d_k = {d_k}"
        if tuple(weights.shape) == (2, 5, 5) and n_heads > 1:
            _fail(f"{where}: return every head's weights, (B, h, T, T) = (2, {n_heads}, 5, 5), not "
                  "their mean")
        if tuple(weights.shape) != (2, n_heads, 5, 5):
            _fail(f"{where} the weights should have shape (B, h, T, T) = (2, {n_heads}, 5, 5), got "
                  f"{tuple(weights.shape)}")
        if not torch.allclose(weights, lib.last_weights, atol=1e-5):
            mistakes = [
                (dict(scale=math.sqrt(d_model)), f"divide the scores by sqrt(d_k) = sqrt({d_k}), "
                                                 "the width of one head, not by sqrt(d_model)"),
                (dict(scale=1.0), f"divide the scores by sqrt(d_k) = sqrt({d_k}) before the "
                                  "softmax"),
                (dict(softmax_dim=-2), "take the softmax over the keys, the last axis: each "
                                       "query's weights must sum to 1"),
            ]
            for planted, hint in mistakes:
                wrong = _mqa_reference(x, W_Q, W_K, W_V, W_O, n_heads, **planted)[1]
                if torch.allclose(weights, wrong, atol=1e-5):
                    _fail(f"{where}: {hint}")
            _fail(f"{where} the weights differ from the library's: every query head scores "
                  "against the one shared key head")
        if tuple(out.shape) != tuple(x.shape):
            _fail(f"{where} the output should have the shape of x, {tuple(x.shape)}, got "
                  f"{tuple(out.shape)}")
        if not torch.allclose(out, expected, atol=1e-5):
            unprojected = _mqa_reference(x, W_Q, W_K, W_V, W_O, n_heads, project=False)[0]
            if torch.allclose(out, unprojected, atol=1e-5):
                _fail(f"{where}: the weights are right; multiply the concatenated heads by W_O")
            _fail(f"{where}: the weights are right, the output is not Concat(heads) W_O")
    return "Correct: one key head and one value head, shared by every query head."
