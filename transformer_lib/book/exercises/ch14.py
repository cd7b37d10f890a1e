"""Chapter 14's exercise: nucleus (top-p) filtering (Holtzman et al. 2020, arXiv:1904.09751).

`check_top_p_filter(top_p_filter)` runs the reader's `top_p_filter(logits, p)` on rows where
the nucleus is known (worked out by hand, and by brute force on random rows) and returns a
one-line verdict when it keeps exactly the nucleus of every row with the kept logits
unchanged; otherwise it raises AssertionError saying what is wrong.

The nucleus of a row is the smallest set of most probable tokens whose probabilities add up
to at least p. Rules that often agree with it on peaked rows, and that the check tells apart:
keeping the tokens whose cumulative sum stays at or below p (one token too few), keeping a
token while the sum before it is at most p (one too many when a prefix sums exactly to p),
keeping a fixed number of tokens (top-k), and keeping every token whose probability is at
least (1 - p) times the largest (a relative threshold, as min-p sampling uses).
"""
from __future__ import annotations

import math

import torch

__all__ = ["HAND_CASES", "nucleus", "check_top_p_filter"]

_ROWS = torch.tensor([[2.0, 1.0, 0.0, -1.0],   # softmax .644 .237 .087 .032
                      [0.0, 0.0, 0.0, 5.0],    # .007 .007 .007 .980
                      [1.0, 3.0, 2.0, 0.0],    # row 0 permuted: .087 .644 .237 .032
                      [math.log(0.3), math.log(0.3), math.log(0.2), math.log(0.2)]])

#: (p, the tokens kept in each row of `_ROWS`, 1 = kept), worked out by hand. The last row
#: is flat: its nucleus for p = 0.5 is 2 tokens, where the relative rule keeps all 4.
HAND_CASES = (
    (0.5, [[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0], [1, 1, 0, 0]]),
    (0.9, [[1, 1, 1, 0], [0, 0, 0, 1], [1, 1, 1, 0], [1, 1, 1, 1]]),
    (0.85, [[1, 1, 0, 0], [0, 0, 0, 1], [0, 1, 1, 0], [1, 1, 1, 1]]),
)


def nucleus(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The nucleus by its definition, row by row: sort the probabilities in decreasing order
    and keep the first k, for the smallest k whose sum reaches p. logits (rows, V) -> a boolean
    (rows, V), True = kept. (A tie at the boundary is broken by the sort's order.)"""
    keep = torch.zeros(logits.shape, dtype=torch.bool)
    for r, row in enumerate(logits.double().softmax(-1)):
        probs, order = row.sort(descending=True)
        k = next((i + 1 for i in range(len(probs)) if probs[: i + 1].sum() >= p), len(probs))
        keep[r, order[:k]] = True
    return keep


def _random_cases():
    """Rows over 20 tokens whose cumulative sums stay at least 1e-3 away from p, so that
    rounding cannot move the boundary: peaked, flat and in-between rows."""
    gen = torch.Generator().manual_seed(14)
    cases = []
    for spread in (0.5, 1.5, 3.0):
        logits = spread * torch.randn(6, 20, generator=gen)
        for p in (0.3, 0.6, 0.9, 0.95):
            sums = logits.double().softmax(-1).sort(descending=True).values.cumsum(-1)
            if (sums - p).abs().min() > 1e-3:
                cases.append((f"random rows of 20 tokens (logit spread {spread}), p={p}",
                              logits, p))
    return cases


def _kept(got, logits, p, what):
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: return the filtered logits as a tensor, got "
                             f"{type(got).__name__}")
    if got.shape != logits.shape:
        raise AssertionError(f"{what}: return logits of the input's shape {tuple(logits.shape)}, "
                             f"got {tuple(got.shape)}")
    if got.dtype == torch.bool:
        raise AssertionError(f"{what}: return the logits with -inf outside the nucleus, not a "
                             "boolean mask")
    if torch.isnan(got).any() or (got == math.inf).any():
        raise AssertionError(f"{what}: the filtered logits hold NaN or +inf; set the tokens "
                             "outside the nucleus to -inf")
    return torch.isfinite(got)


def check_top_p_filter(top_p_filter) -> str:
    """Chapter 14's exercise: does `top_p_filter(logits, p)` (logits (rows, V)) keep exactly
    each row's nucleus, the smallest set of most probable tokens whose probabilities add up to
    at least p, setting the other logits to -inf and leaving the kept ones unchanged?
    Returns "Correct: ..." or raises AssertionError saying what is wrong."""
    if not callable(top_p_filter):
        raise TypeError(f"top_p_filter must be a function, got {top_p_filter!r}")
    for p, keep in HAND_CASES:
        what = f"with p={p}"
        logits = _ROWS.clone()
        got = top_p_filter(logits.clone(), p)
        kept = _kept(got, logits, p, what)
        want = torch.tensor(keep, dtype=torch.bool)
        for r in range(len(keep)):
            if not torch.equal(kept[r], want[r]):
                probs = [round(x, 3) for x in _ROWS[r].softmax(-1).tolist()]
                n_got, n_want = int(kept[r].sum()), int(want[r].sum())
                hint = ("too few: keep the token whose probability carries the sum to p"
                        if n_got < n_want else
                        "too many: stop at the first token that brings the sum to p"
                        if n_got > n_want else
                        "the right number of tokens, but not the most probable ones: put "
                        "the decision back in each token's original place")
                raise AssertionError(
                    f"{what}, on the row with probabilities {probs} the nucleus is "
                    f"{keep[r]} (1 = kept), you kept {kept[r].int().tolist()}: {hint}")
        if not torch.equal(got[kept], logits[kept]):
            raise AssertionError(f"{what}: leave the logits you keep unchanged (the filter "
                                 "comes before the softmax, which renormalises)")
    # A flat row of 4 tokens with p = 0.5: the first two tokens sum to exactly 0.5 (exact in
    # binary), so the nucleus is any 2 of them; a rule that keeps a token while the sum
    # before it is at most p keeps a third.
    what, logits = "with p=0.5 on the flat row [0, 0, 0, 0] (probabilities 0.25 each)", \
        torch.zeros(1, 4)
    got = top_p_filter(logits.clone(), 0.5)
    kept = _kept(got, logits, 0.5, what)
    if int(kept.sum()) != 2:
        raise AssertionError(
            f"{what}: the first two tokens already add up to exactly p, so the nucleus is 2 "
            f"tokens; you kept {int(kept.sum())}: "
            + ("keep a token only while the sum *before* it is below p (not at most p), "
               "and keep exactly 2 here although all four tie"
               if int(kept.sum()) > 2 else "keep the token that brings the sum to p"))
    if not torch.equal(got[kept], logits[kept]):
        raise AssertionError(f"{what}: leave the logits you keep unchanged")
    for what, logits, p in _random_cases():
        got = top_p_filter(logits.clone(), p)
        kept = _kept(got, logits, p, what)
        want = nucleus(logits, p)
        if not torch.equal(kept, want):
            r = int((kept != want).any(-1).nonzero()[0])
            raise AssertionError(
                f"{what}: in row {r} you kept {int(kept[r].sum())} tokens, the nucleus has "
                f"{int(want[r].sum())} (the smallest set of most probable tokens whose "
                f"probabilities add up to at least p)")
        if not torch.equal(got[kept], logits[kept]):
            raise AssertionError(f"{what}: leave the logits you keep unchanged")
    return "Correct: the nucleus grows where the model is unsure and shrinks where it is sure."
