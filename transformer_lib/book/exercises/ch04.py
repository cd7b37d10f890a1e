"""Chapter 4's exercise checks: one attention head as a module, and its backward pass by hand.

    from transformer_lib.book.exercises import ch04
    print(ch04.check_attention_head(SelfAttentionHead))
    print(ch04.check_attention_backward(attention_backward))

Each check returns a one-line verdict when the answer is right and raises AssertionError with
a message that says what is wrong otherwise (tests/book/test_exercises_ch04.py).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ...attention import MultiHeadAttention, scaled_dot_product_attention

__all__ = ["check_attention_head", "check_attention_backward"]


def _fail(message: str):
    raise AssertionError("Not yet: " + message)


def _as_pair(result, what: str):
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        _fail(f"{what} should return two tensors, (output, weights); got {type(result).__name__}")
    out, weights = (torch.as_tensor(t, dtype=torch.float64) for t in result)
    return out, weights


def _weights_hint(weights, q, k, mask, d_model):
    """Name the common mistake that gives `weights` instead of equation (1)'s, or None."""
    d_k = q.shape[-1]
    raw = q @ k.transpose(-2, -1)

    def soft(scores, m=mask, dim=-1):
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        return scores.softmax(dim)

    candidates = [
        (soft(raw), "divide the scores by sqrt(d_k) before the softmax"),
        (soft(raw / math.sqrt(d_model)), f"the scale is sqrt(d_k) = sqrt({d_k}), the width of a "
                                         f"query, not sqrt(d_model) = sqrt({d_model})"),
        (soft(raw / d_k), f"divide by the square root of d_k (sqrt({d_k})), not by d_k itself"),
        (soft(raw / math.sqrt(d_k), dim=-2), "take the softmax over the keys, the last axis: each "
                                             "query's weights must sum to 1"),
    ]
    if mask is not None:
        candidates += [
            (soft(raw / math.sqrt(d_k), m=None), "the mask is ignored: blocked keys (mask False) "
                                                 "must get the score -inf before the softmax"),
            (soft(raw / math.sqrt(d_k), m=~mask), "the mask is the wrong way round: True means the "
                                                  "query MAY look at the key; fill the scores "
                                                  "where the mask is False"),
            (soft(raw / math.sqrt(d_k), m=None) * mask, "the weights were multiplied by the mask "
                                                        "after the softmax, so a row no longer "
                                                        "sums to 1: give blocked keys the score "
                                                        "-inf before the softmax"),
        ]
    for expected, hint in candidates:
        if expected.shape == weights.shape and torch.allclose(weights, expected, equal_nan=True):
            return hint
    return None


def check_attention_head(cls) -> str:
    """Check `cls(d_model, d_k, d_v, tied=False)`, an nn.Module with W_Q, W_K, W_V (bias-free
    nn.Linear layers) whose forward(x, mask=None) returns (output (B, T, d_v), weights (B, T, T))
    of equation (1); with tied=True its keys are made with W_Q (checked by behaviour: after a
    change to W_Q, and to W_K if the head keeps one of its own, the tied scores are still
    Q Q^T / sqrt(d_k), with and without a mask)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 24, dtype=torch.float64, generator=gen)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[1, :, 3:] = False  # the second sentence has 3 real tokens
    torch.manual_seed(4)
    head = cls(24, 6, 7).double()  # sqrt(d_k), d_k and sqrt(d_model) all differ
    for name, shape in (("W_Q", (6, 24)), ("W_K", (6, 24)), ("W_V", (7, 24))):
        layer = getattr(head, name, None)
        if (not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != shape
                or layer.bias is not None):
            _fail(f"{name} should be an nn.Linear(24, {shape[0]}, bias=False), whose weight has "
                  f"shape {shape}")
    with torch.no_grad():
        q, k, v = head.W_Q(x), head.W_K(x), head.W_V(x)
        for m in (None, mask):
            what = "with the mask" if m is not None else "without a mask"
            out, weights = _as_pair(head(x, m), "forward(x, mask)")
            if tuple(out.shape) != (2, 5, 7) or tuple(weights.shape) != (2, 5, 5):
                _fail(f"for x of shape (2, 5, 24), d_k = 6 and d_v = 7 expected an output (2, 5, 7) "
                      f"and weights (2, 5, 5), got {tuple(out.shape)} and {tuple(weights.shape)}")
            expected, expected_w = scaled_dot_product_attention(q, k, v, m)
            if not torch.allclose(weights, expected_w):
                hint = _weights_hint(weights, q, k, m, 24)
                _fail(hint or f"the weights differ from softmax(Q K^T / sqrt(d_k)) {what}")
            if not torch.allclose(out, expected):
                _fail(f"the weights are right {what}, but the output is not weights @ V")
        square = cls(24, 24, 24).double()  # one head of the library, output projection = I
        mha = MultiHeadAttention(24, 1, bias=False).double()
        for ours, theirs in (("W_Q", mha.w_q), ("W_K", mha.w_k), ("W_V", mha.w_v)):
            theirs.weight.copy_(getattr(square, ours).weight)
        mha.w_o.weight.copy_(torch.eye(24, dtype=torch.float64))
        if not torch.allclose(_as_pair(square(x, mask), "forward(x, mask)")[0],
                              mha(x, x, x, mask[:, None])):
            _fail("with d_model = d_k = d_v = 24 your head differs from tl.MultiHeadAttention(24, 1)")
        tied = cls(24, 6, 7, tied=True).double()
        W_K = getattr(tied, "W_K", None)  # unused, absent, W_Q itself, or sharing its weight
        own_W_K = (isinstance(W_K, nn.Linear) and W_K is not tied.W_Q
                   and W_K.weight is not tied.W_Q.weight)
        for attempt in range(2):
            q = tied.W_Q(x)
            for m in (None, mask):
                what = "with the mask" if m is not None else "without a mask"
                out, weights = _as_pair(tied(x, m), "forward(x, mask) with tied=True")
                expected, expected_w = scaled_dot_product_attention(q, q, tied.W_V(x), m)
                if tuple(weights.shape) == tuple(expected_w.shape) and torch.allclose(
                        weights, expected_w) and torch.allclose(out, expected):
                    continue
                if attempt:
                    _fail("with tied=True the keys must be made with W_Q itself: after a change "
                          "to W_Q" + (" and to W_K" if own_W_K else "") + " your tied head no "
                          "longer scores Q Q^T / sqrt(d_k) (a copy of W_Q made once is not tied: "
                          "training would move the two apart)")
                hint = _weights_hint(weights, q, q, m, 24)
                _fail(f"with tied=True {what}: " + (hint or "the scores should be "
                                                    "Q Q^T / sqrt(d_k), keys made with W_Q"))
            # Keys must follow W_Q, and a W_K of its own, if the head keeps one, must play no part.
            tied.W_Q.weight.add_(torch.randn(tied.W_Q.weight.shape, dtype=torch.float64,
                                             generator=gen))
            if own_W_K:
                W_K.weight.add_(torch.randn(W_K.weight.shape, dtype=torch.float64, generator=gen))
    return "Correct: your head matches the library, with and without a mask, and when tied."


def _backward_variants(q, K, V, dz):
    """The right gradients and the common wrong ones, {name: (dq, dK, dV)}."""
    scale = math.sqrt(q.shape[-1])
    w = (K @ q / scale).softmax(dim=-1)
    dV = w[:, None] * dz[None, :]
    dw = V @ dz
    ds = {"right": w * (dw - (w * dw).sum()), "no_mean": w * dw, "diagonal": w * (1 - w) * dw,
          "plain_mean": w * (dw - dw.mean()), "sign": w * ((w * dw).sum() - dw)}
    out = {name: (K.T @ s / scale, s[:, None] * q[None, :] / scale, dV) for name, s in ds.items()}
    s = ds["right"]
    out["no_scale"] = (K.T @ s, s[:, None] * q[None, :], dV)
    return out


_BACKWARD_HINTS = {
    "no_mean": "through the softmax the gradient is w * (dw - w . dw): the term w . dw is missing",
    "diagonal": "the softmax's Jacobian is diag(w) - w w^T: every weight depends on every score, "
                "so keep the off-diagonal terms (ds = w * (dw - w . dw))",
    "plain_mean": "the term subtracted is the weighted mean w . dw = sum_j w_j dw_j, not the "
                  "plain mean of dw",
    "sign": "the sign is flipped: ds = w * (dw - w . dw)",
    "no_scale": "each score is q . k_j / sqrt(d_k): the gradients of q and K carry the factor "
                "1 / sqrt(d_k)",
}


def check_attention_backward(fn) -> str:
    """Check `fn(q, K, V, dz) -> (dq, dK, dV)`, the gradients of L with dL/dz = dz for
    z = softmax(K q / sqrt(d_k)) V, against autograd for three sizes."""
    gen = torch.Generator().manual_seed(5)
    for T, d_k, d_v in ((1, 3, 2), (4, 8, 5), (7, 16, 16)):
        q, K, V, dz = (torch.randn(*shape, generator=gen, dtype=torch.float64)
                       for shape in ((d_k,), (T, d_k), (T, d_v), (d_v,)))
        inputs = [t.clone().requires_grad_() for t in (q, K, V)]
        z = (inputs[1] @ inputs[0] / math.sqrt(d_k)).softmax(-1) @ inputs[2]
        expected = torch.autograd.grad((z * dz).sum(), inputs)
        got = fn(q.clone(), K.clone(), V.clone(), dz.clone())
        if isinstance(got, torch.Tensor) or not isinstance(got, (tuple, list)) or len(got) != 3:
            _fail("return the three gradients (dq, dK, dV)")
        got = [torch.as_tensor(g, dtype=torch.float64) for g in got]
        variants = _backward_variants(q, K, V, dz)
        for index, (name, ours, theirs) in enumerate(zip(("dq", "dK", "dV"), got, expected)):
            if tuple(ours.shape) != tuple(theirs.shape):
                _fail(f"{name} should have the shape of {name[1:]}, {tuple(theirs.shape)}, got "
                      f"{tuple(ours.shape)} (T = {T}, d_k = {d_k}, d_v = {d_v})")
            if not torch.allclose(ours, theirs):
                for variant, hint in _BACKWARD_HINTS.items():
                    if torch.allclose(ours, variants[variant][index]):
                        _fail(f"{name} is off: {hint}")
                if name == "dV":
                    _fail("dV is off: z = sum_j w_j v_j, so dV_j = w_j dz (an outer product)")
                _fail(f"{name} differs from autograd's (T = {T}, d_k = {d_k}, d_v = {d_v})")
    return "Correct: your gradients of q, K and V equal autograd's."
