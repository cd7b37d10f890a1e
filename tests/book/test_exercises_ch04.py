"""Chapter 4's exercise checks: the reference answers pass, other right answers pass, and the
plausible wrong answers (those the reviews name among them) fail with a message that says
what is wrong."""
from __future__ import annotations

import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.book.exercises import ch04


# --- exercise 1: one attention head ----------------------------------------------------------

class Head(nn.Module):
    """The reference solution; `scale`, `mask_mode`, `softmax_dim` and `tie` plant mistakes."""
    scale = "d_k"
    mask_mode = "right"
    softmax_dim = -1
    tie = "none"

    def __init__(self, d_model, d_k, d_v, tied=False):
        super().__init__()
        self.d_model = d_model
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = None if tied else nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_v, bias=False)
        if tied and self.tie == "copy":
            self.W_K = copy.deepcopy(self.W_Q)
        elif tied and self.tie == "shared parameter":
            self.W_K = nn.Linear(d_model, d_k, bias=False)
            self.W_K.weight = self.W_Q.weight
        elif tied and self.tie == "alias":
            self.W_K = self.W_Q

    def forward(self, x, mask=None):
        q, v = self.W_Q(x), self.W_V(x)
        k = q if self.W_K is None else self.W_K(x)
        divide = {"d_k": math.sqrt(q.shape[-1]), "none": 1.0, "d_model": math.sqrt(self.d_model),
                  "d_k itself": q.shape[-1]}[self.scale]
        scores = q @ k.transpose(-2, -1) / divide
        if mask is not None and self.mask_mode == "right":
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask is not None and self.mask_mode == "inverted":
            scores = scores.masked_fill(mask, float("-inf"))
        weights = scores.softmax(dim=self.softmax_dim)
        return weights @ v, weights


def variant(**planted):
    return type("Variant", (Head,), planted)


def test_the_reference_head_passes():
    assert ch04.check_attention_head(Head).startswith("Correct")


@pytest.mark.parametrize("tie", ["alias", "shared parameter"])
def test_other_ways_to_tie_pass(tie):
    assert ch04.check_attention_head(variant(tie=tie)).startswith("Correct")


class FusedHead(Head):
    """Another right answer: PyTorch's fused attention, returning the weights as a list."""

    def forward(self, x, mask=None):
        q, v = self.W_Q(x), self.W_V(x)
        k = q if self.W_K is None else self.W_K(x)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return [out, scores.softmax(-1)]


def test_a_fused_head_returning_a_list_passes():
    assert ch04.check_attention_head(FusedHead).startswith("Correct")


@pytest.mark.parametrize("planted, message", [
    (dict(scale="none"), "divide the scores by sqrt(d_k)"),
    (dict(scale="d_model"), "not sqrt(d_model)"),
    (dict(scale="d_k itself"), "not by d_k itself"),
    (dict(mask_mode="inverted"), "wrong way round"),
    (dict(mask_mode="ignored"), "the mask is ignored"),
    (dict(softmax_dim=-2), "over the keys, the last axis"),
    (dict(tie="copy"), "a W_K of its own would drift from W_Q"),
])
def test_wrong_heads_fail_and_say_why(planted, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch04.check_attention_head(variant(**planted))


class BiasedHead(Head):
    def __init__(self, d_model, d_k, d_v, tied=False):
        super().__init__(d_model, d_k, d_v, tied)
        self.W_V = nn.Linear(d_model, d_v)  # a bias the exercise does not ask for


class ValuesAreKeys(Head):
    def forward(self, x, mask=None):
        _, weights = super().forward(x, mask)
        return weights @ self.W_Q(x)[..., :1].expand(*x.shape[:2], self.W_V.out_features), weights


def test_a_biased_projection_and_a_wrong_output_fail():
    with pytest.raises(AssertionError, match="nn.Linear.*bias=False"):
        ch04.check_attention_head(BiasedHead)
    with pytest.raises(AssertionError, match="output is not weights @ V"):
        ch04.check_attention_head(ValuesAreKeys)


# --- exercise 2: the backward pass -----------------------------------------------------------

def backward(q, K, V, dz, mistake=None):
    scale = math.sqrt(q.shape[-1])
    w = (K @ q / scale).softmax(dim=-1)
    dV = w[:, None] * dz[None, :]
    dw = V @ dz
    ds = w * (dw - (w * dw).sum())
    if mistake == "no w . dw term":
        ds = w * dw
    elif mistake == "diagonal Jacobian":
        ds = w * (1 - w) * dw
    if mistake == "no 1/sqrt(d_k)":
        scale = 1.0
    dq, dK = K.T @ ds / scale, ds[:, None] * q[None, :] / scale
    if mistake == "dV transposed":
        dV = dV.T
    return dq, dK, dV


def test_the_reference_backward_passes():
    assert ch04.check_attention_backward(backward).startswith("Correct")


def jacobian_backward(q, K, V, dz):
    """Another right answer: the full Jacobian diag(w) - w w^T, returned as a list."""
    scale = math.sqrt(q.shape[-1])
    w = (K @ q / scale).softmax(dim=-1)
    jacobian = torch.diag(w) - torch.outer(w, w)
    ds = jacobian @ (V @ dz)
    return [K.T @ ds / scale, torch.outer(ds, q) / scale, torch.outer(w, dz)]


def test_the_full_jacobian_returned_as_a_list_passes():
    assert ch04.check_attention_backward(jacobian_backward).startswith("Correct")


@pytest.mark.parametrize("mistake, message", [
    ("no 1/sqrt(d_k)", "factor 1 / sqrt"),
    ("no w . dw term", "the term w . dw is missing"),
    ("diagonal Jacobian", "off-diagonal terms"),
    ("dV transposed", "dV should have the shape"),
])
def test_wrong_backward_passes_fail_and_say_why(mistake, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch04.check_attention_backward(lambda q, K, V, dz: backward(q, K, V, dz, mistake))


def test_a_single_tensor_is_not_three_gradients():
    with pytest.raises(AssertionError, match=r"return the three gradients"):
        ch04.check_attention_backward(lambda q, K, V, dz: backward(q, K, V, dz)[0])
