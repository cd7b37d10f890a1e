"""Chapter 13's exercise: one step of the online softmax (equation 2 of the chapter).

`check_online_update(online_update)` folds blocks of scores into a running maximum m, sum l
and output o with the reader's `online_update(m, l, o, scores, values) -> (m, l, o)` and
compares o / l with the exact softmax average. It returns a one-line verdict when the answer
is right and raises AssertionError saying what is wrong otherwise.
"""
from __future__ import annotations

import math

import torch

__all__ = ["ONLINE_CASES", "check_online_update"]

#: The cases the check folds: (what they test, dtype, offsets, spread). The scores of query
#: row r are offsets[r] + spread * N(0, 1). exp overflows past 709.8 in float64 and 88.7 in
#: float32, and underflows to 0 below about -745 and -103, so only an answer that subtracts
#: each row's running maximum survives the last four; the last puts the rows on scales 150
#: apart, so that a maximum taken over the whole block (every row shifted by the largest
#: score of all) sends the lower rows' sums to 0.
ONLINE_CASES = (
    ("scores of order 1 (float64)", torch.float64, (0.0,) * 5, 1.0),
    ("scores of order 300 (float64)", torch.float64, (0.0,) * 5, 300.0),
    ("scores near +800, where exp(s) overflows float64", torch.float64, (800.0,) * 5, 5.0),
    ("scores near -800, where exp(s) underflows to 0", torch.float64, (-800.0,) * 5, 5.0),
    ("float32 scores of order 100, where exp(s) overflows float32", torch.float32,
     (0.0,) * 5, 100.0),
    ("float32 rows on different scales (offsets 0, +150, -150, +300, -300)", torch.float32,
     (0.0, 150.0, -150.0, 300.0, -300.0), 1.0),
)

_T_Q, _D_V = 5, 3
_EDGES = (0, 5, 11, 20, 24)  # blocks of 5, 6, 9 and 4 keys


def _case(dtype, offsets, spread, gen):
    scores = torch.tensor(offsets, dtype=torch.float64)[:, None] + spread * torch.randn(
        _T_Q, _EDGES[-1], generator=gen, dtype=torch.float64)
    values = torch.randn(_EDGES[-1], _D_V, generator=gen, dtype=torch.float64)
    return scores.to(dtype), values.to(dtype), scores.softmax(-1) @ values


def _as_tensor(name: str, x, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise AssertionError(f"with {what}, {name} should be a tensor, got {type(x).__name__}")
    return x


def check_online_update(online_update, cases=ONLINE_CASES) -> str:
    """Does `online_update(m, l, o, scores, values) -> (m, l, o)` implement one step of the
    online softmax, equation (2): m' = max(m, max_j s'_j) for each query row, l' = l e^(m - m')
    + sum_j e^(s'_j - m'), o' = o e^(m - m') + sum_j e^(s'_j - m') v'_j?

    Starting from m = -inf, l = 0, o = 0 ((T_q, 1), (T_q, 1), (T_q, d_v), T_q = 5, d_v = 3)
    it folds in four blocks of 5, 6, 9 and 4 keys (`scores` (T_q, b), `values` (b, d_v)) for
    every case of `cases`. After each block, m must be each row's running maximum; after the
    last, o / l must be finite and equal softmax(scores) @ values (computed in float64).
    Returns "Correct: ..." or raises AssertionError saying what is wrong.
    """
    if not callable(online_update):
        raise TypeError(f"online_update must be a function, got {online_update!r}")
    gen = torch.Generator().manual_seed(3)
    for what, dtype, offsets, spread in cases:
        scores, values, expected = _case(dtype, offsets, spread, gen)
        m = torch.full((_T_Q, 1), -math.inf, dtype=dtype)
        ell, o = torch.zeros(_T_Q, 1, dtype=dtype), torch.zeros(_T_Q, _D_V, dtype=dtype)
        for start, stop in zip(_EDGES, _EDGES[1:]):
            result = online_update(m, ell, o, scores[:, start:stop], values[start:stop])
            if not (isinstance(result, tuple) and len(result) == 3):
                raise AssertionError("online_update should return the tuple (m, ell, o), got "
                                     f"{type(result).__name__}")
            m, ell, o = (_as_tensor(n, x, what) for n, x in zip(("m", "ell", "o"), result))
            for name, x, shape in (("m", m, (_T_Q, 1)), ("ell", ell, (_T_Q, 1)),
                                   ("o", o, (_T_Q, _D_V))):
                if tuple(x.shape) != shape:
                    raise AssertionError(
                        f"with {what}, {name} has shape {tuple(x.shape)}; it should stay "
                        f"{shape} (one {'number' if name != 'o' else 'row'} per query)")
            running = scores[:, :stop].double().amax(-1, keepdim=True)
            if not torch.equal(m.double(), running):
                if (running != running[0]).any() and (m == m[0]).all():
                    raise AssertionError(
                        f"with {what}, m is the same for every query row: each row needs its "
                        "own running maximum, scores.amax(-1, keepdim=True), not one maximum "
                        "over the whole block (scores.max()), or rows on a lower scale than "
                        "the others underflow to l = 0")
                raise AssertionError(
                    f"with {what}, after keys 0-{stop - 1} m should be each row's running "
                    "maximum max(m, max_j s'_j) (equation 2), got "
                    f"{m.flatten().tolist()} instead of {running.flatten().tolist()}")
        got = (o.double() / ell.double())
        if not torch.isfinite(got).all():
            raise AssertionError(
                f"with {what}, o / l is not finite: subtract the running maximum before "
                "exp, e^(s'_j - m'), and rescale the old sums by e^(m - m')")
        tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
        if not torch.allclose(got, expected, **tol):
            raise AssertionError(
                f"with {what}, o / l differs from softmax(scores) @ values by up to "
                f"{(got - expected).abs().max().item():.3g}: rescale the old sums l and o by "
                "e^(m - m') before adding the new block's terms, and return the unnormalised o")
    return "Correct: folding in the blocks one by one gives the exact softmax average."
