"""Chapter 18's check: the prefix-matching (induction) score of a head, from its attention.

`check_induction_score(fn)` runs the reader's `induction_score(weights, period)`, which takes
the attention weights of one layer on sequences that repeat with `period` (shape (B, n_heads,
T, T), T = 2 period, rows the queries) and returns, for each head, the mean attention from each
position i of the repeat (i = period .. 2 period - 1) on position i - period + 1: the token
that followed the earlier copy of token i (Olsson et al. 2022). It returns a one-line verdict
when the answer is right and raises AssertionError saying what is wrong otherwise. Plausible
wrong answers it tells apart: the earlier copy of the current token itself (offset i - period,
a "duplicate-token" score), the previous position (offset i - 1), the whole diagonal at
offset -(period - 1) (one row too many), and one example's score instead of the batch's mean.
"""
from __future__ import annotations

import torch

__all__ = ["check_induction_score"]


def _reference(weights: torch.Tensor, period: int) -> torch.Tensor:
    w = weights.double().mean(0)  # (h, T, T)
    rows = torch.arange(period, 2 * period)
    return w[:, rows, rows - period + 1].mean(-1)


def _at_offset(weights: torch.Tensor, period: int, shift: int) -> torch.Tensor:
    """The mean attention from i (i in the repeat) on i - shift, per head."""
    w = weights.double().mean(0)
    rows = torch.arange(period, 2 * period)
    return w[:, rows, rows - shift].mean(-1)


def _case(generator: torch.Generator, batch: int, heads: int, period: int) -> torch.Tensor:
    """Causal attention weights (batch, heads, 2 period, 2 period) with heads of known kinds:
    head 0 an induction head, head 1 a previous-token head, head 2 a duplicate-token head, the
    rest random; each row a probability distribution over the positions up to its own."""
    T = 2 * period
    scores = torch.randn(batch, heads, T, T, generator=generator, dtype=torch.float64)
    i = torch.arange(T)
    targets = {0: torch.where(i >= period, i - period + 1, i), 1: (i - 1).clamp(min=0),
               2: torch.where(i >= period, i - period, i)}
    for head, j in targets.items():
        if head < heads:
            scores[:, head, i, j] += 6.0
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1)


def check_induction_score(fn) -> str:
    """The reader's `induction_score(weights, period)`: (B, h, 2 period, 2 period) -> (h,)."""
    g = torch.Generator().manual_seed(18)
    for batch, heads, period in ((3, 4, 6), (1, 3, 5), (4, 5, 8)):
        weights = _case(g, batch, heads, period)
        want = _reference(weights, period)  # before the answer runs: it gets a copy to read
        got = fn(weights.clone(), period)
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got)
        assert tuple(got.shape) == (heads,), (
            f"for weights of shape {tuple(weights.shape)} (batch, heads, T, T) the score has one "
            f"number per head, shape ({heads},); got {tuple(got.shape)}")
        got = got.double()
        if torch.allclose(got, want, atol=1e-3):
            continue
        wrong = {
            "the attention on the earlier copy of the current token (i - period): that is the "
            "duplicate-token score; the induction head looks one further, at i - period + 1, the "
            "token that came next": _at_offset(weights, period, period),
            "the attention on the previous position (i - 1): that is the previous-token score":
                _at_offset(weights, period, 1),
        }
        for message, value in wrong.items():
            if torch.allclose(got, value, atol=1e-3):
                raise AssertionError(f"Not yet: your score is {message}")
        whole_diagonal = weights.double().mean(0).diagonal(1 - period, -2, -1).mean(-1)
        assert not torch.allclose(got, whole_diagonal, atol=1e-3), (
            "Not yet: the whole diagonal at offset -(period - 1) also holds row period - 1, in the "
            f"first half, which has no earlier copy; average over the repeat only (rows {period} "
            f"to {2 * period - 1})")
        per_example = [_reference(weights[b:b + 1], period) for b in range(batch)]
        assert not any(torch.allclose(got, p, atol=1e-3) for p in per_example) or batch == 1, (
            "Not yet: that is one example's score; average over the batch as well")
        raise AssertionError(
            f"Not yet: for period {period} the scores should be {want.numpy().round(4).tolist()} "
            f"(head 0 is an induction head), got {got.numpy().round(4).tolist()} (compute in float32 "
            "or float64)")
    return "Correct: each head's attention on the token after the earlier copy, over the repeat"
