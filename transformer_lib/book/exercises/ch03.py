"""Chapter 3's exercise checks: parameter-free self-attention over a padded batch, and a
two-word input whose first word does not attend most to itself.

`check_padded_self_attention(fn)` calls the reader's `fn(X, lengths)` on a batch of three
sentences of 5, 3 and 1 words padded to 5 (`X` (3, 5, 4) with junk at the padded positions,
`lengths` (3,)) and compares the outputs (3, 5, 4) with softmax(X X^T) X taken within each
sentence over its real words, padded rows zero, computed by the library. `check_not_self_first`
runs the reader's two word vectors through softmax(X X^T). Each returns a one-line verdict when
the answer is right and raises an AssertionError that says what is wrong otherwise.
"""
from __future__ import annotations

import math

import torch

from ...attention import scaled_dot_product_attention

__all__ = ["check_padded_self_attention", "check_not_self_first", "padded_self_attention"]

LENGTHS = (5, 3, 1)
SHAPE = (3, 5, 4)


def padded_self_attention(X: torch.Tensor, lengths) -> torch.Tensor:
    """The reference: softmax(X X^T) X within each sentence of X (B, T, d), over its first
    `lengths[b]` words; the rows of padded positions are zero. Computed with the library's
    scaled attention, its queries and keys multiplied by d^(1/4) so that the division by
    sqrt(d) cancels, and a (B, T, T) mask that allows only real query-key pairs."""
    d, T = X.shape[-1], X.shape[-2]
    real = torch.arange(T) < torch.as_tensor(lengths)[:, None]  # (B, T)
    mask = real[:, :, None] & real[:, None, :]  # (B, T, T): both words real
    out, _ = scaled_dot_product_attention(X * d**0.25, X * d**0.25, X, mask)
    return out


def _batch():
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(*SHAPE, generator=gen, dtype=torch.float64)
    real = torch.arange(SHAPE[1]) < torch.tensor(LENGTHS)[:, None]
    # junk at the padded positions: large, so that any weight given to it shows
    X = torch.where(real[:, :, None], X, torch.full_like(X, 3.0))
    return X, torch.tensor(LENGTHS)


def _masked(X, lengths, scale=1.0, softmax_dim=-1):
    """softmax over real keys of X X^T / scale, padded rows zero (the slips' references)."""
    T = X.shape[-2]
    real = torch.arange(T) < lengths[:, None]
    scores = (X @ X.transpose(-2, -1) / scale).masked_fill(~real[:, None, :], float("-inf"))
    weights = scores.softmax(dim=softmax_dim).nan_to_num(0.0)
    weights = weights.masked_fill(~real[:, :, None], 0.0)
    return weights @ X


def check_padded_self_attention(fn) -> str:
    """Check `fn(X, lengths) -> Y` (B, T, d): unscaled self-attention within each sentence over
    its real words, padded rows zero. Return a verdict or raise AssertionError."""
    X, lengths = _batch()
    try:
        Y = fn(X.clone(), lengths.clone())
    except NotImplementedError:
        raise
    except Exception as error:  # the reader's own code failed: say so, keep the traceback
        raise AssertionError(f"Not yet: your function raised {type(error).__name__}: {error}") from error
    if not isinstance(Y, torch.Tensor):
        raise AssertionError(f"Not yet: return a tensor of shape {SHAPE}, got {type(Y).__name__}")
    if Y.shape != X.shape:
        raise AssertionError(f"Not yet: expected shape {SHAPE}, got {tuple(Y.shape)}")
    Y = Y.to(torch.float64)
    want = padded_self_attention(X, lengths)
    if torch.allclose(Y, want, atol=1e-5):
        return "Correct: each sentence attends only to its own real words; padded rows are zero."
    real = torch.arange(SHAPE[1]) < lengths[:, None]
    d = X.shape[-1]
    if torch.allclose(Y[real], want[real], atol=1e-5):
        raise AssertionError("Not yet: the real words are right, but the rows of the padded "
                             "positions must be zero (set them to 0 after the weighted sum)")
    slips = [
        (math.sqrt(d), -1, "you divided the scores by sqrt(d); this chapter's operation has no "
                           "scaling (the library's has, chapter 4)"),
        (d, -1, "you divided the scores by d; this chapter's operation has no scaling"),
        (1.0, -2, "the softmax ran down the columns (axis -2); each row, one word's weights "
                  "over the words it attends to, must sum to 1: take it over the last axis"),
    ]
    for scale, dim, hint in slips:
        if torch.allclose(Y[real], _masked(X, lengths, scale, dim)[real], atol=1e-5):
            raise AssertionError(f"Not yet: {hint}")
    unmasked = (X @ X.transpose(-2, -1)).softmax(-1) @ X
    if torch.allclose(Y[real], unmasked[real], atol=1e-5):
        raise AssertionError("Not yet: the real words also attend to the padding; give every "
                             "score with a padded word -inf before the softmax")
    raise AssertionError("Not yet: the outputs of the real words differ from softmax(X X^T) X "
                         "over each sentence's real words (give the scores with padded words "
                         "-inf before the softmax, and take it over the last axis)")


def check_not_self_first(fn) -> str:
    """Check that `fn()` returns a finite input X (2, d) whose word 0 gives more weight to word
    1 than to itself in softmax(X X^T). Return a verdict or raise AssertionError."""
    answer = fn()  # a stub's NotImplementedError reaches the notebook as it is
    try:
        X = torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as error:
        raise AssertionError(f"Not yet: return a tensor (or nested list) of shape (2, d): {error}") from error
    if X.dim() != 2 or X.shape[0] != 2 or X.shape[1] < 1:
        raise AssertionError(f"Not yet: expected shape (2, d), two words of d >= 1 features, got "
                             f"{tuple(X.shape)}")
    if not torch.isfinite(X).all():
        raise AssertionError("Not yet: use finite numbers; an infinite or NaN feature makes the "
                             "scores infinite or NaN, and no softmax is defined")
    W = (X @ X.T).softmax(dim=-1)
    if not torch.isfinite(W).all():
        raise AssertionError("Not yet: the scores overflow; use smaller numbers")
    if not W[0, 1] > W[0, 0]:
        how = "as much" if torch.isclose(W[0, 1], W[0, 0]) else "less"
        raise AssertionError(f"Not yet: word 0 gives {W[0, 0]:.3f} to itself and {W[0, 1]:.3f} "
                             f"to word 1, {how}; word 1 must win (x0 . x1 > x0 . x0)")
    return (f"Correct: word 0 gives {W[0, 1]:.3f} to word 1 and only {W[0, 0]:.3f} to itself.")
