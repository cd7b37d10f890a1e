"""Chapter 11's exercise: the label-smoothed loss, written from `log_softmax`.

`check_smoothed_loss(fn)` runs the reader's `fn(logits, target, eps, pad_id)` (logits (N, V),
target (N,) ids) on inputs it makes itself and compares it with the library's
`LabelSmoothingLoss`; it returns a one-line verdict when the answer is right and raises an
AssertionError saying what is wrong otherwise. `smoothed_loss` is the reference solution.
"""
from __future__ import annotations

import math

import torch

from transformer_lib.losses import LabelSmoothingLoss

__all__ = ["check_smoothed_loss", "smoothed_loss"]


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, eps: float = 0.1, pad_id: int = 0) -> torch.Tensor:
    """The reference solution: the cross-entropy against the smoothed target q, which keeps
    1 - eps on the correct token and spreads eps evenly over the V' = V - 1 tokens other than
    <pad> (the correct one included), averaged over the positions whose target is not <pad>."""
    log_p = logits.log_softmax(-1)  # (N, V), finite for finite logits
    n_real = logits.shape[-1] - 1  # V': every token but <pad>
    q = torch.full_like(log_p, eps / n_real)
    q[:, pad_id] = 0.0
    q[torch.arange(len(target)), target] += 1 - eps
    per_position = -(q * log_p).sum(-1)  # (N,)
    return per_position[target != pad_id].mean()


def _inputs():
    """(name, logits, target, eps, pad_id) cases: random logits with two <pad> targets, the
    same with eps = 0.2, the same with another padding id (3, so that an answer that ignores
    `pad_id` is caught), and a confident row whose softmax underflows to exactly 0."""
    g = torch.Generator().manual_seed(11)
    logits = 3 * torch.randn(8, 15, generator=g, dtype=torch.float64)
    target = torch.tensor([4, 7, 0, 14, 5, 0, 9, 4])  # two <pad> targets: they must not count
    confident = torch.full((2, 15), -1000.0, dtype=torch.float64)
    confident[:, 4] = 1000.0
    confident[:, 6] = 0.0
    other_pad = torch.where(target == 0, 3, torch.where(target == 3, 0, target))
    return [("random logits", logits, target, 0.1, 0), ("random logits, eps = 0.2", logits, target, 0.2, 0),
            ("random logits, pad_id = 3", logits, other_pad, 0.1, 3),
            ("confident logits (softmax underflows to 0)", confident, torch.tensor([4, 6]), 0.1, 0)]


def _variants(logits, target, eps, pad_id=0):
    """What the usual slips compute on these inputs, by name."""
    log_p = logits.log_softmax(-1)
    V, real = logits.shape[-1], target != pad_id
    rows = torch.arange(len(target))

    def ce(q, mask=real, mean=True):
        per = -(q * log_p).sum(-1)[mask]
        return per.mean() if mean else per.sum()

    def smoothed_q(share, keep):
        q = torch.full_like(log_p, share)
        q[:, pad_id] = 0.0
        q[rows, target] = keep
        return q

    q = smoothed_q(eps / (V - 1), 1 - eps + eps / (V - 1))
    q_over_v = torch.full_like(log_p, eps / V)
    q_over_v[rows, target] += 1 - eps
    entropy = -(q * torch.where(q > 0, q.log(), torch.zeros_like(q))).sum(-1)[real].mean()
    return {
        "spread over all V": ce(q_over_v),
        "exactly 1 - eps": ce(smoothed_q(eps / (V - 2), 1 - eps)),
        "counts padding": ce(q, mask=torch.ones_like(real)),
        "sum": ce(q, mean=False),
        "KL": ce(q) - entropy,
        "no smoothing": -log_p[rows, target][real].mean(),
    }


_HINTS = {
    "spread over all V": "you spread eps over all V tokens, <pad> included: <pad> is never a target, "
                         "so it gets 0 and eps is spread over the V' = V - 1 others",
    "exactly 1 - eps": "the correct token should keep 1 - eps plus its own share eps / V' (0.9 + 0.1 / 14 = "
                       "0.907 here), not exactly 1 - eps: eps is spread over every token but <pad>, the "
                       "correct one included",
    "counts padding": "positions whose target is <pad> must not count: average over the real positions only",
    "sum": "average the loss over the real positions; you summed it",
    "KL": "that is the KL divergence from q to p, lower than the cross-entropy by the entropy H(q) of the "
          "target (the same gradients, another value): return the cross-entropy -sum_k q_k log p_k",
    "no smoothing": "that is the plain cross-entropy, -log p of the correct token: the target should be the "
                    "smoothed q",
}


def check_smoothed_loss(fn) -> str:
    """Check `fn(logits, target, eps, pad_id)` against `LabelSmoothingLoss(eps, pad_id)`."""
    for name, logits, target, eps, pad_id in _inputs():
        expected = LabelSmoothingLoss(eps, pad_id=pad_id)(logits, target)
        got = fn(logits.clone(), target.clone(), eps, pad_id)
        if isinstance(got, torch.Tensor):
            assert got.numel() == 1, (
                f"Not yet: return one number (the mean over the real positions), not a tensor of shape "
                f"{tuple(got.shape)}")
            got = got.item()
        assert isinstance(got, (int, float)) and not isinstance(got, bool), (
            f"Not yet: return the loss as a number or a one-element tensor, not {type(got).__name__}")
        if not math.isfinite(got):
            raise AssertionError(
                f"Not yet: on {name} your loss is {got}: compute log-probabilities with log_softmax; "
                "softmax(...).log() gives log 0 = -inf where a probability underflows to 0")
        if math.isclose(got, expected.item(), rel_tol=1e-5, abs_tol=1e-7):
            continue
        if pad_id != 0:
            as_if_zero = LabelSmoothingLoss(eps, pad_id=0)(logits, target).item()
            assert not math.isclose(got, as_if_zero, rel_tol=1e-5, abs_tol=1e-7), (
                f"Not yet: on {name}, your loss treats id 0 as padding: use the pad_id argument, "
                "not a fixed 0")
        for slip, value in _variants(logits, target, eps, pad_id).items():
            if math.isclose(got, value.item(), rel_tol=1e-5, abs_tol=1e-7):
                raise AssertionError(f"Not yet: on {name}, {_HINTS[slip]}")
        raise AssertionError(f"Not yet: on {name} your loss is {got:.4f}, LabelSmoothingLoss gives "
                             f"{expected.item():.4f}")
    return "Correct: equal to LabelSmoothingLoss, with padding, eps = 0.2 and confident logits."
