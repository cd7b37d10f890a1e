"""Chapter 6's exercise checks: rotary position embeddings without a d x d matrix, and the
concatenated positional table re-ordered into the paper's interleaved layout.

    from transformer_lib.book.exercises import ch06
    print(ch06.check_rotate(rotate))
    print(ch06.check_to_interleaved(to_interleaved))

Each check returns a one-line verdict when the answer is right and raises AssertionError with
a message that says what is wrong otherwise (tests/book/test_exercises_ch06.py).
"""
from __future__ import annotations

import torch

from ...positional import RotaryEmbedding, sinusoidal_encoding

__all__ = ["concatenated_encoding", "interleaving_permutation", "check_rotate", "check_to_interleaved"]

#: How far a right answer may stray from the float64 reference: angles computed in float32
#: (PyTorch's default dtype, and how many libraries build them) are off by a few 1e-6 at the
#: positions the check uses; a wrong pairing, direction or frequency is off by order 1.
TOLERANCE = 1e-4


def _fail(message: str):
    raise AssertionError("Not yet: " + message)


def concatenated_encoding(n_positions: int, d_model: int) -> torch.Tensor:
    """The sinusoidal table in tensor2tensor's layout, float64: all the sines (pairs 0 .. d/2 - 1),
    then all the cosines, with the paper's frequencies w_i = 10000^(-2i / d_model)."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be a positive even number, got {d_model!r}")
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * omega
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def interleaving_permutation(d_model: int) -> torch.Tensor:
    """perm with interleaved[:, c] = concatenated[:, perm[c]]: channel 2i is sine i, channel
    2i + 1 is cosine i, which sits at d_model/2 + i in the concatenated layout."""
    return torch.arange(d_model).view(2, d_model // 2).T.flatten()


def _run(fn, x, what):
    try:
        got = fn(x.clone())
    except NotImplementedError:
        raise
    except Exception as err:
        hint = ""
        if isinstance(err, IndexError):
            hint = " (a permutation written for one width? build it from the table's own width)"
        _fail(f"for {what} of shape {tuple(x.shape)} your function raised {type(err).__name__}: "
              f"{err}{hint}")
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(x.shape):
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        _fail(f"for {what} of shape {tuple(x.shape)} expected a tensor of the same shape, got {shape}")
    return got.to(torch.float64)


def _close(a, b) -> bool:
    return torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)


def _rotary_variants(x):
    """The right rotation and the common wrong ones, {name: (T, d)} in float64."""
    T, d = x.shape
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    even, odd = x[:, 0::2], x[:, 1::2]

    def turn(a, b, angle, sign=1.0):
        cos, sin = angle.cos(), sign * angle.sin()
        return a * cos - b * sin, a * sin + b * cos

    out = {}
    for name, angle, sign in (("clockwise", pos * omega, -1.0),
                              ("no factor 2", pos * 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d), 1.0)):
        e, o = turn(even, odd, angle, sign)
        out[name] = torch.stack([e, o], dim=-1).flatten(-2)
    first, second = turn(x[:, : d // 2], x[:, d // 2:], pos * omega)
    out["half pairs"] = torch.cat([first, second], dim=-1)
    cos, sin = (pos * omega).cos(), (pos * omega).sin()
    new_even = even * cos - odd * sin
    out["in place"] = torch.stack([new_even, new_even * sin + odd * cos], dim=-1).flatten(-2)
    out["unchanged"] = x.clone()
    return out


_ROTARY_HINTS = {
    "clockwise": "that turns every pair clockwise (T(pos) x); RoPE turns counter-clockwise: "
                 "x'_2i = x_2i cos - x_2i+1 sin",
    "no factor 2": "the angle of pair i is pos * 10000^(-2i/d): the exponent has the factor 2 "
                   "(torch.arange(0, d, 2) / d)",
    "half pairs": "you paired channel i with channel i + d/2; this exercise pairs neighbours, "
                  "(2i, 2i+1), as tl.RotaryEmbedding does",
    "in place": "the odd channels used the already rotated even channels: compute both new "
                "halves from the old values (write into a new tensor)",
    "unchanged": "the rows come back unchanged: turn each pair by the angle pos * omega_i",
}


def check_rotate(fn) -> str:
    """Check `fn(x)`, x (T, d) -> (T, d), channel pair (2i, 2i+1) of row pos turned counter-
    clockwise by pos * 10000^(-2i/d), against `tl.RotaryEmbedding(d)`; then check that rotated
    queries and keys give scores that depend only on the offset."""
    gen = torch.Generator().manual_seed(4)
    for T, d in [(6, 8), (60, 64)]:
        x = torch.randn(T, d, dtype=torch.float64, generator=gen)
        got = _run(fn, x, "a batch of queries")
        if not _close(got, RotaryEmbedding(d)(x)):
            for name, wrong in _rotary_variants(x).items():
                if _close(got, wrong):
                    _fail(f"with d = {d}: {_ROTARY_HINTS[name]}")
            _fail(f"with d = {d} your result differs from tl.RotaryEmbedding({d}): which channels "
                  "form a pair, which way do they turn, by which angle?")
    q, k = torch.randn(2, 1, 64, dtype=torch.float64, generator=gen)
    rq = _run(fn, q.expand(50, 64).contiguous(), "one query at every position")
    rk = _run(fn, k.expand(50, 64).contiguous(), "one key at every position")
    scores = [(rq[m] @ rk[m + 3]).item() for m in (0, 7, 40)]
    if max(scores) - min(scores) > TOLERANCE * max(1.0, max(abs(s) for s in scores)):
        _fail("the scores at offset 3 should not depend on the position")
    return (f"Correct: the scores at offset 3 are equal from any start ({scores[0]:.4f}); "
            "no d x d matrix.")


def check_to_interleaved(fn) -> str:
    """Check `fn(table)`, a (T, d_model) table in the concatenated layout (all sines, then all
    cosines) -> the paper's interleaved layout, on sinusoidal tables of three widths and on
    random tables (whose columns must be moved, not recomputed)."""
    gen = torch.Generator().manual_seed(6)
    for n_positions, d in [(30, 8), (50, 64), (10, 512)]:
        perm = interleaving_permutation(d)
        table = concatenated_encoding(n_positions, d)
        got = _run(fn, table, "a concatenated sinusoidal table")
        if not _close(got, sinusoidal_encoding(n_positions, d, dtype=torch.float64)):
            half = d // 2
            if _close(got, table[:, torch.argsort(perm)]):
                _fail(f"for d_model = {d} you applied the inverse re-ordering (interleaved to "
                      "concatenated); channel 2i takes sine i, channel 2i + 1 cosine i")
            if _close(got, torch.stack([table[:, half:], table[:, :half]], -1).flatten(-2)):
                _fail("each pair is (sine, cosine): the sine goes to the even channel 2i")
            _fail(f"for d_model = {d} the result is not the paper's interleaved layout")
        random = torch.randn(n_positions, d, dtype=torch.float64, generator=gen)
        got = _run(fn, random, "a random table")
        if not _close(got, random[:, perm]):
            _fail(f"on a random ({n_positions}, {d}) table the result is not its columns re-ordered: "
                  "move the input's columns (channel 2i <- column i, 2i + 1 <- column d/2 + i) "
                  "rather than recomputing a table")
    return "Correct: your re-ordering turns the concatenated layout into the paper's."
