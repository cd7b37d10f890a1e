"""Chapter 2's exercise check: plain dot-product attention with a padding mask.

`check_dot_attention(fn)` calls the reader's `fn(s, a, mask)` (`s` (B, d), `a` (B, T_x, d),
`mask` (B, T_x), True at real positions) on a batch whose rows have 7, 5 and 1 real positions,
in float32 and in float64, and compares the context (B, d) and the weights (B, T_x) with the
library's `rnn.DotProductAttention(d, d, general=False)`. It returns a one-line verdict when
the answer is right and raises an AssertionError that says what is wrong otherwise (the slips it
names: no mask, a mask applied to the weights after the softmax without renormalising, the
scores scaled by sqrt(d), a softmax over the wrong axis, a context that ignores the weights).
"""
from __future__ import annotations

import math

import torch

from ...rnn import DotProductAttention

__all__ = ["check_dot_attention"]

B, T_X, D = 3, 7, 16
LENGTHS = (7, 5, 1)


def _inputs(dtype):
    gen = torch.Generator().manual_seed(3)
    s = torch.randn(B, D, generator=gen, dtype=torch.float64).to(dtype)
    a = torch.randn(B, T_X, D, generator=gen, dtype=torch.float64).to(dtype)
    mask = torch.arange(T_X) < torch.tensor(LENGTHS)[:, None]
    return s, a, mask


def _answer(fn, s, a, mask):
    result = fn(s.clone(), a.clone(), mask.clone())
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(f"Not yet: your function returned {type(result).__name__}; "
                             "return a pair (context, weights)")
    context, weights = (torch.as_tensor(r) for r in result)
    if context.shape == (B, T_X) and weights.shape == (B, D):
        raise AssertionError("Not yet: you returned (weights, context); return (context, weights)")
    if context.shape != (B, D) or weights.shape != (B, T_X):
        raise AssertionError(f"Not yet: expected the context {(B, D)} and the weights {(B, T_X)}, "
                             f"got {tuple(context.shape)} and {tuple(weights.shape)}")
    return context.to(torch.float64), weights.to(torch.float64)


def check_dot_attention(fn) -> str:
    """Check `fn(s, a, mask) -> (context, weights)` against plain dot-product attention;
    return a verdict or raise AssertionError saying what is wrong."""
    for dtype, atol in ((torch.float64, 1e-9), (torch.float32, 1e-5)):
        s, a, mask = _inputs(dtype)
        context, weights = _answer(fn, s, a, mask)
        s, a = s.to(torch.float64), a.to(torch.float64)
        library = DotProductAttention(D, D, general=False)
        want_context, want_weights = library(s, a, mask)
        scores = (a @ s[:, :, None]).squeeze(-1)  # (B, T_x)
        if not torch.equal(weights[~mask], torch.zeros(int((~mask).sum()), dtype=torch.float64)):
            raise AssertionError("Not yet: padded positions must get weight exactly 0; set their "
                                 "scores to -inf before the softmax")
        if not torch.allclose(weights.sum(-1), torch.ones(B, dtype=torch.float64), atol=atol):
            sums = ", ".join(f"{x:.3f}" for x in weights.sum(-1).tolist())
            raise AssertionError(f"Not yet: each row of weights must sum to 1 over the real "
                                 f"positions, yours sum to {sums} (mask the scores before the "
                                 "softmax, or renormalise, and take the softmax over the "
                                 "positions, the last axis)")
        scaled = scores.masked_fill(~mask, float("-inf")).div(math.sqrt(D)).softmax(-1)
        if torch.allclose(weights, scaled, atol=atol) and not torch.allclose(scaled, want_weights,
                                                                              atol=atol):
            raise AssertionError("Not yet: these weights divide the scores by sqrt(d); Luong's "
                                 "dot score is s . a_t' with no scaling (chapter 4 adds it)")
        if not torch.allclose(weights, want_weights, atol=atol):
            raise AssertionError("Not yet: the weights differ from softmax(s . a_t') over the real "
                                 "positions (score each position with the dot product of s and "
                                 "its feature a_t')")
        if not torch.allclose(context, want_context, atol=atol * 10):
            raise AssertionError("Not yet: the weights are right, but the context is not their "
                                 "weighted sum of the features, sum over t' of alpha_t' a_t'")
    return "Correct: your dot-product attention matches rnn.DotProductAttention(general=False)."
